//! loom's primitives under the names the store takes from `crate::sync`,
//! with the store's own lock helpers over them.

pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
pub use loom::sync::{Condvar, Mutex, MutexGuard};

pub use poison::{lock, wait, wait_timeout};

#[path = "../../runtime/src/sync/poison.rs"]
mod poison;

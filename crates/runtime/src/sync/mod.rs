//! The locks, condition variables and atomics that the object store
//! synchronizes with, in one place so that the model-checked build of the
//! store (the `store-model` crate) can put loom's in their stead, and
//! lock helpers that survive a poisoned lock: a panic in a loader or a
//! policy must not turn every later request into a second panic.

pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
pub use std::sync::{Condvar, Mutex, MutexGuard};

pub use poison::{lock, wait, wait_timeout};

mod poison;

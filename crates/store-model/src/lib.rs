//! The object store's own source, compiled a second time against loom's
//! locks, condition variables and atomics, so that its tests
//! (`tests/store_model.rs`) explore every interleaving of acquire,
//! release, evict, repin and single flight, where the stress test in the store's own tests samples a few.
//!
//! The store takes its primitives from `crate::sync`, which this crate
//! supplies, and its policies from `residency-policy`, as in the real
//! build; nothing in the store is written twice and nothing in the real
//! build changes.

pub mod sync;

#[path = "../../runtime/src/store/mod.rs"]
pub mod store;

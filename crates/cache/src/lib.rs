//! residency-cache: the cache policies (`policy`: LRU to W-TinyLFU, the
//! cost-aware admission and the plan's pins) and the replay simulator
//! that judges them on traces (`sim`), and the online per-layer budget
//! allocator both of them run (`online`). The object store runs the same
//! policy code, so what the simulator measures is what serves.

pub mod online;
pub mod policy;
pub mod sim;

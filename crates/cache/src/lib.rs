//! residency-cache: the cache policies (`policy`: LRU to W-TinyLFU, the
//! cost-aware admission and the plan's pins) and the replay simulator
//! that judges them on traces (`sim`). The object store runs the same
//! policy code, so what the simulator measures is what serves.

pub mod policy;
pub mod sim;

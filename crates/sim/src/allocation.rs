//! How the simulator splits a byte budget across MoE layers (design §6): one
//! global cache, the same bytes for every layer, or water-filling on the
//! layers' LRU curves, once in hindsight or online while serving. The
//! splits themselves are `residency_policy::budget`'s.

residency_core::named! {
    pub enum Allocation("allocation") {
        /// One cache for all layers.
        Global = "global",
        /// `budget / layers` bytes for every layer.
        Uniform = "uniform",
        /// Water-filling on the layers' LRU curves, weighted by miss cost,
        /// once, on the whole evaluation stream (hindsight).
        Dynamic = "dynamic",
        /// The same water-filling while serving, on curves of a sliding
        /// window of recent requests, moved only when it pays
        /// (`residency_policy::online`).
        Online = "online",
    }
}

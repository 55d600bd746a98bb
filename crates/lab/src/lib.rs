//! residency-lab: the experiment harness, kept apart so that what an
//! engine links (the runtime, the KV store, the C library) carries none of
//! it. It drives those libraries through their public APIs, beside the
//! simulator and the cost model.
//!
//! - `bench`: a plan's tokens served where the plan puts the work, timed
//!   beside `Instance::evaluate` (`residency bench`).

pub mod bench;

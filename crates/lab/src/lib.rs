//! residency-lab: the experiment harness, kept apart so that what an
//! engine links (the runtime, the KV store, the C library) carries none of
//! it. It drives those libraries through their public APIs, beside the
//! simulator and the cost model.
//!
//! - `replay`: a routing trace through the store's real data path, one
//!   arm a policy, beside the simulator's twin (`residency replay`); its
//!   `card_choice` picks the card's rule and `lfru` window on the training tokens.
//! - `bench`: a plan's tokens served where the plan puts the work, timed
//!   beside `Instance::evaluate` (`residency bench`).
//! - `kv`: Mooncake traces through the KV store's prefix index
//!   (`residency kv-replay`) and their reused blocks as the planner's KV
//!   groups (`residency kv-groups`).

pub mod bench;
pub mod kv;
pub mod replay;

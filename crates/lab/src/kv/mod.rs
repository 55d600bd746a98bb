//! KV prefix traces through the block store's own index, for experiments
//! and for the planner's input; the store an engine links is
//! `residency-kv`, which knows nothing of traces.
//!
//! - `trace`: Mooncake FAST'25 traces read and checked.
//! - `replay`: a trace through the prefix index per eviction policy and
//!   capacity (`residency kv-replay`).
//! - `groups`: a trace's reused blocks banded into the planner's KV prefix
//!   groups (`residency kv-groups`, design §4.6).

pub mod groups;
pub mod replay;
pub mod trace;

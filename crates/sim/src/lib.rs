//! residency-sim: the offline replay simulator that judges the cache
//! policies of `residency-policy` on traces (design §6). Traces become
//! request streams (`stream`, `oracle`), streams run through the policies
//! (`replay`, with the parted cold LRU of `lru_parts`), LRU curves come
//! from one stack-distance pass (`stack`), arms pair a policy with a budget
//! split across layers (`arms`, `allocation`), miss costs come from drives
//! and engine logs (`felt`), and the held-out gate compares learning
//! policies with uniform LRU on felt wait (`gate`), which also recommends
//! the share of a budget worth pinning (`pin_share`); `job` is the CLI's
//! `simulate`, `synthetic` the Zipf traces of benchmarks and tests.

pub mod allocation;
pub mod arms;
pub mod felt;
pub mod gate;
pub mod job;
pub mod lru_parts;
pub mod oracle;
pub mod pin_share;
pub mod replay;
pub mod stack;
pub mod stream;
pub mod synthetic;

/// Why a simulation cannot run as asked.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Input(#[from] residency_core::error::PlannerError),
    #[error(transparent)]
    Policy(#[from] residency_policy::PolicyError),
    #[error(transparent)]
    Online(#[from] residency_policy::online::OnlineError),
    #[error("{0}")]
    Invalid(String),
}

//! The replay simulator (design §6): traces become request streams
//! (`stream`, `oracle`), streams run through the policies of
//! `crate::policy` (`replay`), LRU curves come from one stack-distance pass
//! (`stack`), budgets are split across layers (`budget`), and the held-out
//! gate compares learning policies with uniform LRU on felt wait (`gate`),
//! which also recommends the share of a budget worth pinning (`pin_share`).

pub mod arms;
pub mod budget;
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
    Policy(#[from] crate::policy::PolicyError),
    #[error(transparent)]
    Online(#[from] crate::online::OnlineError),
    #[error("{0}")]
    Invalid(String),
}

//! The serving loop: live heat from reported routes (`heat`), the
//! re-planner that repins under hysteresis and budgets (`replan`), and the
//! real data-path replay that measures policies end to end (`replay`).

pub mod heat;
pub mod replan;
pub mod replay;

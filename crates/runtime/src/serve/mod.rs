//! The serving loop: what it computes for an expert (`compute`), live heat
//! from reported routes (`heat`), the re-planner that repins under
//! hysteresis and budgets (`replan`); `vram`, the GPU tier's residency:
//! what to upload, under an allowance a token, and what to free;
//! `gpu_tier`, the card computing what it holds. The replay that measures
//! policies end to end through this loop is `residency-lab`'s.

pub mod compute;
pub mod gpu_tier;
pub mod heat;
pub mod replan;
pub mod vram;

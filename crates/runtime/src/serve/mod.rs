//! The serving loop: what it computes for an expert (`compute`), live heat from reported routes (`heat`), the
//! re-planner that repins under hysteresis and budgets (`replan`), and the
//! real data-path replay that measures policies end to end (`replay`,
//! with `card_window`; the `lab` feature's, beside the simulator);
//! `vram`, the GPU tier's residency: what to upload, under an allowance a
//! token, and what to free; `gpu_tier`, the card computing what it holds.

#[cfg(feature = "lab")]
pub mod card_window;
pub mod compute;
pub mod gpu_tier;
pub mod heat;
pub mod replan;
#[cfg(feature = "lab")]
pub mod replay;
pub mod vram;

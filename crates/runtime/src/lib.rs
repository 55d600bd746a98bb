//! residency-runtime: what an engine runs in its own process to hold a
//! plan's objects: where bytes come from (`storage`: pread, O_DIRECT, mmap,
//! io_uring, drives; `checkpoint`: safetensors checkpoints, family
//! adapters, generation), where they live (`store`: budgets, lifecycle,
//! single flight, leases, telemetry; `gpu`: the CUDA and Vulkan tiers,
//! loaded at run time), putting a plan there (`apply`) and keeping it right
//! while serving (`serve`: live heat, re-planning, repin).
//!
//! - `gemv`: packed expert matrices in the container layout of
//!   `checkpoint::format`, quantised inputs, the CPU kernel and the PTX text
//!   of the GPU kernel.
//! - `identity`: what makes two objects the same.
//! - `sync`: the primitives the store synchronizes with.
//!
//! It uses the planner's plain data (plans, models, the move cost) and the
//! cache policies of `residency-policy`; nothing here solves or simulates:
//! the harness that replays traces through the store beside the simulator
//! is `residency-lab`, which drives the public API of `serve` and `store`.

pub mod apply;
pub mod checkpoint;
pub mod gemv;
pub mod gpu;
pub mod identity;
pub mod serve;
pub mod storage;
pub mod store;
mod sync;

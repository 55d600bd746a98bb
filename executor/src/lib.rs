//! residency-executor: everything that touches bytes, devices and time
//! (DESIGN 7), used by engines in their own process.
//!
//! - `identity`: what makes two objects the same.
//! - `policy`: cache policies, shared by the simulator and the store.
//! - `sim`: the replay simulator (DESIGN 6).
//! - `checkpoint`: safetensors checkpoints, family adapters, generation.
//! - `storage`: reading byte ranges (pread, O_DIRECT, mmap, io_uring, drives).
//! - `store`: budgets, lifecycle, single flight, leases, telemetry.
//! - `gpu`: the GPU tiers (CUDA, Vulkan; loaded at run time) and the loader
//!   that uploads objects to them.
//! - `apply`: a plan onto a checkpoint, through the store.
//! - `ffi`: the C ABI (`include/residency.h`): open, acquire, release,
//!   report routes, telemetry, close; no panic crosses it.
//!
//! It uses the planner (readers, plans); the planner never uses it.

pub mod apply;
pub mod checkpoint;
pub mod ffi;
pub mod gpu;
pub mod identity;
pub mod policy;
pub mod sim;
pub mod storage;
pub mod store;

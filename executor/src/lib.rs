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
//! - `kv`: KV-prefix residency (DESIGN 8): block keys, the block store (RAM
//!   and disk tiers, leases, copy-on-write tails, slot routing), eviction
//!   policies and the Mooncake trace replay.
//! - `profile`: hardware profiles without hand-writing: detection (sysfs,
//!   CUDA, Vulkan), calibration (CPU and GPU GEMV, drives, uploads, sync),
//!   and values from engine logs, each with its origin as a YAML comment.
//! - `ffi`: the C ABI (`include/residency.h`): open, acquire, release,
//!   report routes, telemetry, close; no panic crosses it.
//!
//! It uses the planner (readers, plans); the planner never uses it.

pub mod apply;
pub mod checkpoint;
pub mod ffi;
pub mod gpu;
pub mod identity;
pub mod kv;
pub mod policy;
pub mod profile;
pub mod serve;
pub mod sim;
pub mod storage;
pub mod store;
mod sync;

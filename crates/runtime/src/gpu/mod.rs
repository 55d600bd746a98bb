//! The GPU tiers (design §7): devices that hold objects in their own memory,
//! and the loader that puts objects there.
//!
//! - `cuda`: NVIDIA GPUs through cudarc's driver API (a memory pool, a stream
//!   and two pinned staging buffers per device).
//! - `vulkan`: any Vulkan GPU through ash (DEVICE_LOCAL buffers filled
//!   through a HOST_VISIBLE staging buffer on a transfer queue).
//! - `loader`: [`GpuLoader`], a store loader that uploads what another
//!   loader read and drops the host copy.
//! - `gemv`: computing experts on a CUDA device with the PTX kernels of
//!   `crate::gemv` (loading, matrices and inputs in device memory,
//!   batched launches).
//!
//! This file owns what both backends share: the [`Device`] and
//! [`DeviceBuffer`] traits, errors, the chunking of uploads through two
//! staging buffers, and [`GpuTier`], which finds the devices (CUDA, else
//! Vulkan, else none) and says once why there are none. Both drivers are
//! loaded at run time: a machine without them builds, runs and tests the CPU
//! tiers, and nothing here panics for want of a driver.

pub mod cuda;
pub mod gemv;
pub mod loader;
pub mod vulkan;

#[cfg(test)]
mod tests;

pub use loader::GpuLoader;

use crate::store::ObjectBytes;
use rayon::prelude::*;
use std::fmt;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cuda,
    Vulkan,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cuda => "cuda",
            Backend::Vulkan => "vulkan",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No driver, no loader, or no device: the CPU tiers serve instead.
    #[error("no {backend} device: {reason}")]
    Unavailable { backend: Backend, reason: String },
    #[error("{device}: {action}: {problem}; {fix}")]
    Failed {
        /// `cuda:0`, `vulkan:1`.
        device: String,
        action: String,
        problem: String,
        fix: String,
    },
}

/// How devices are opened.
#[derive(Debug, Clone)]
pub struct GpuOptions {
    /// Size of each of a device's two staging buffers: the unit in which an
    /// upload's host copy overlaps its DMA.
    pub staging_chunk_bytes: usize,
    /// Also open Vulkan devices that are CPU implementations (lavapipe,
    /// SwiftShader): never a GPU tier, but they run the same code on a
    /// machine without a GPU.
    pub vulkan_cpu: bool,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            staging_chunk_bytes: 16 << 20,
            vulkan_cpu: false,
        }
    }
}

/// One GPU: it copies objects into its memory and back.
pub trait Device: Send + Sync {
    fn backend(&self) -> Backend;
    /// The device's number in its backend (CUDA's ordinal, or the Vulkan
    /// GPU's index in the loader's list): `gpu:N` is device N.
    fn ordinal(&self) -> u32;
    /// The driver's name for it (`NVIDIA H200`).
    fn name(&self) -> &str;
    /// Copies `bytes` into new device memory; returns once all of them are
    /// there. Concurrent uploads to one device take turns on its staging
    /// buffers; bytes in memory the device's `pinner` pinned skip them.
    fn upload(&self, bytes: &[u8]) -> Result<Arc<dyn DeviceBuffer>, GpuError>;
    /// What page-locks host memory for this device's DMA engine, where the
    /// backend can (host pools feeding it use it; see `storage::pool`).
    fn pinner(&self) -> Option<Arc<dyn crate::storage::Pinner>> {
        None
    }
}

/// An object in device memory: `host()` is `None`, `device()` is its
/// `(ordinal, address)`. The memory goes back to its device when dropped.
pub trait DeviceBuffer: ObjectBytes {
    /// Copies the bytes back to host memory (synchronous; for verification).
    fn read_back(&self) -> Result<Vec<u8>, GpuError>;
}

/// A backend's handle on one object's device memory; dropping it frees the
/// memory.
trait DeviceMemory: Send + Sync {
    /// Copies the first `len` bytes back to host memory; `ordinal` names
    /// the device in errors.
    fn read_back(&self, ordinal: u32, len: usize) -> Result<Vec<u8>, GpuError>;
}

/// An object in a device's memory, whatever the backend: where it is, and
/// the memory that goes back to the device on drop.
struct DeviceObject<M> {
    ordinal: u32,
    len: usize,
    address: u64,
    memory: M,
}

impl<M: DeviceMemory> ObjectBytes for DeviceObject<M> {
    fn len(&self) -> usize {
        self.len
    }

    fn host(&self) -> Option<&[u8]> {
        None
    }

    fn device(&self) -> Option<(u32, u64)> {
        Some((self.ordinal, self.address))
    }
}

impl<M: DeviceMemory> DeviceBuffer for DeviceObject<M> {
    fn read_back(&self) -> Result<Vec<u8>, GpuError> {
        self.memory.read_back(self.ordinal, self.len)
    }
}

/// Lets the store hold a device buffer that the loader also tracks.
impl ObjectBytes for Arc<dyn DeviceBuffer> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn host(&self) -> Option<&[u8]> {
        (**self).host()
    }

    fn device(&self) -> Option<(u32, u64)> {
        (**self).device()
    }
}

/// What opening a backend gives: each device, or why it would not open;
/// an error when the backend has no device at all (no driver, no loader).
pub type Opened = Result<Vec<Result<Arc<dyn Device>, GpuError>>, GpuError>;

/// `cuda:0`.
pub fn device_label(backend: Backend, ordinal: u32) -> String {
    format!("{backend}:{ordinal}")
}

/// The devices of one machine, by backend and ordinal.
#[derive(Clone)]
pub struct GpuTier {
    devices: Vec<Arc<dyn Device>>,
    /// Why there are no devices, or which ones were passed over.
    reasons: Vec<String>,
}

impl fmt::Debug for GpuTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

impl GpuTier {
    /// CUDA's devices when there are any, else Vulkan's GPUs, else none
    /// (with the reasons of both).
    pub fn detect(options: &GpuOptions) -> GpuTier {
        let cuda = GpuTier::cuda(options);
        if !cuda.devices.is_empty() {
            return cuda;
        }
        let vulkan = GpuTier::vulkan(options);
        if !vulkan.devices.is_empty() {
            return vulkan;
        }
        GpuTier {
            devices: Vec::new(),
            reasons: [cuda.reasons, vulkan.reasons].concat(),
        }
    }

    /// Every CUDA device that opens and passes a round trip.
    pub fn cuda(options: &GpuOptions) -> GpuTier {
        GpuTier::open(Backend::Cuda, || cuda::open_all(options))
    }

    /// Every Vulkan device (GPUs; CPU implementations too with
    /// `options.vulkan_cpu`) that opens and passes a round trip.
    pub fn vulkan(options: &GpuOptions) -> GpuTier {
        GpuTier::open(Backend::Vulkan, || vulkan::open_all(options))
    }

    /// A tier of given devices (an engine's own, or a test's).
    pub fn from_devices(devices: Vec<Arc<dyn Device>>) -> GpuTier {
        GpuTier {
            devices,
            reasons: Vec::new(),
        }
    }

    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The device `gpu:ordinal` runs on.
    pub fn device(&self, ordinal: u32) -> Option<&Arc<dyn Device>> {
        self.devices.iter().find(|d| d.ordinal() == ordinal)
    }

    /// Why there are no devices, or which were passed over.
    pub fn reasons(&self) -> &[String] {
        &self.reasons
    }

    /// One line: the devices, or why there are none.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{} {}", device_label(d.backend(), d.ordinal()), d.name()))
            .collect();
        if parts.is_empty() {
            parts.push("no GPU".into());
        }
        parts.extend(self.reasons.iter().cloned());
        parts.join("; ")
    }

    /// Opens a backend's devices and keeps those that pass a round trip.
    /// cudarc panics where a symbol it binds lazily is missing (a driver
    /// older than its bindings); the probe calls every function an upload
    /// and a read-back use, so such a panic happens here, where it is
    /// caught and becomes a reason, or never.
    fn open(backend: Backend, open_all: impl FnOnce() -> Opened) -> GpuTier {
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let mut tier = GpuTier::from_devices(Vec::new());
            for device in open_all()? {
                match device.and_then(|d| probe(&*d).map(|()| d)) {
                    Ok(d) => tier.devices.push(d),
                    Err(e) => tier.reasons.push(e.to_string()),
                }
            }
            Ok::<_, GpuError>(tier)
        }));
        match opened {
            Ok(Ok(tier)) => tier,
            Ok(Err(e)) => GpuTier {
                devices: Vec::new(),
                reasons: vec![e.to_string()],
            },
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                GpuTier {
                    devices: Vec::new(),
                    reasons: vec![GpuError::Unavailable {
                        backend,
                        reason: format!(
                            "the driver library failed while opening ({what}); update the driver"
                        ),
                    }
                    .to_string()],
                }
            }
        }
    }
}

/// Uploads an odd-sized pattern, reads it back and compares.
fn probe(device: &dyn Device) -> Result<(), GpuError> {
    let pattern: Vec<u8> = (0..(64 << 10) + 3).map(|i: u32| (i % 251) as u8).collect();
    let buffer = device.upload(&pattern)?;
    if buffer.read_back()? == pattern {
        return Ok(());
    }
    Err(GpuError::Failed {
        device: device_label(device.backend(), device.ordinal()),
        action: "probing with a round trip".into(),
        problem: "the bytes read back differ from those uploaded".into(),
        fix: "check the device and driver; the CPU tiers serve meanwhile".into(),
    })
}

/// An upload or read-back of `len` bytes in pieces of at most `chunk_bytes`,
/// each with the staging buffer it goes through (0, 1, 0, ...): the host
/// fills one while the device drains the other.
fn staged_chunks(len: usize, chunk_bytes: usize) -> impl Iterator<Item = (usize, Range<usize>)> {
    let chunk_bytes = chunk_bytes.max(1);
    (0..len.div_ceil(chunk_bytes)).map(move |i| {
        let start = i * chunk_bytes;
        (i % 2, start..(start + chunk_bytes).min(len))
    })
}

/// Copies `src` into a staging buffer on several threads: one core's copy
/// into pinned memory is slower than a PCIe 5 DMA engine drains it.
fn fill_staging(staging: &mut [u8], src: &[u8]) {
    const PIECE_BYTES: usize = 1 << 20;
    staging
        .par_chunks_mut(PIECE_BYTES)
        .zip(src.par_chunks(PIECE_BYTES))
        .for_each(|(to, from)| to.copy_from_slice(from));
}

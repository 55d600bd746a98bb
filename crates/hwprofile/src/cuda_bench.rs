//! The timings `calibrate` takes on a CUDA device, over the runtime's
//! GEMV kernels (`residency_runtime::gpu::gemv`): the resident GEMV (over
//! packed experts already in device memory, timed with events), the pinned
//! host-to-device copy (as `examples/gpu_upload.rs` measures its ceiling),
//! and stages timed as `bench` runs them (`StageGemvs`): what a stage in
//! which the card takes part pays beyond its bytes, and each GEMV in it.

use crate::gemv::{Layout, PackedRows, QuantizedInput};
use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};
use residency_runtime::gpu::gemv::{
    failed, guarded, CudaGemv, DeviceInput, DeviceMatrix, GemvKernels, GemvLaunch,
};
use std::ops::Range;
use std::time::Instant;

/// Loads the GEMV kernels and copies `matrices` (with their inputs) to
/// the device, ready for `ResidentGemv::trial`.
pub fn resident_gemv<'a>(
    device: &'a CudaGemv,
    matrices: &[PackedRows],
    inputs: &[QuantizedInput],
) -> Result<ResidentGemv<'a>, String> {
    guarded(|| {
        let kernels = device.kernels()?;
        let mut resident = Vec::new();
        for (m, x) in matrices.iter().zip(inputs) {
            let matrix = device.matrix(m)?;
            let input = device.input(x)?;
            let y = device.output(m.rows)?;
            let launch = matrix.launch(&input, device.pointer(&y));
            resident.push(DeviceRows {
                _matrix: matrix,
                _input: input,
                y,
                launch,
            });
        }
        Ok(ResidentGemv {
            device,
            bytes: matrices.iter().map(PackedRows::bytes).sum(),
            start: device.event()?,
            end: device.event()?,
            resident,
            kernels,
        })
    })
}

/// `matrices` (with their inputs) in device memory, run as stages of
/// separate GEMVs, one stage after another in turn: `stages[s][j] =
/// (m, rows)` is GEMV `j` of stage `s`, over rows `rows` of matrix `m`.
pub fn stage_gemvs<'a>(
    device: &'a CudaGemv,
    matrices: &[PackedRows],
    inputs: &[QuantizedInput],
    stages: &[Vec<(usize, Range<usize>)>],
) -> Result<StageGemvs<'a>, String> {
    guarded(|| {
        let on_device = matrices
            .iter()
            .map(|m| device.matrix(m))
            .collect::<Result<Vec<_>, _>>()?;
        let inputs = inputs
            .iter()
            .map(|x| device.input(x))
            .collect::<Result<Vec<_>, _>>()?;
        let rows_of = |parts: &Vec<(usize, Range<usize>)>| -> usize {
            parts.iter().map(|(_, r)| r.len()).sum()
        };
        // Every stage writes from the start of `y`: a stage's outputs
        // are not kept past the next.
        let y = device.output(stages.iter().map(rows_of).max().unwrap_or(0))?;
        let mut launches = Vec::with_capacity(stages.len());
        let mut bytes = 0u64;
        for parts in stages {
            let mut at = device.pointer(&y);
            let mut stage = Vec::with_capacity(parts.len());
            for (m, rows) in parts {
                let matrix = &matrices[*m];
                let (weights, scales) = on_device[*m].addresses();
                let row_bytes = matrix.packing.row_bytes(matrix.cols) as u64;
                let scale_bytes = (matrix.groups() * 2) as u64;
                let shape =
                    GemvLaunch::shape(matrix.packing, Layout::RowMajor, rows.len(), matrix.cols);
                stage.push(shape.at(
                    weights + rows.start as u64 * row_bytes,
                    scales + rows.start as u64 * scale_bytes,
                    &inputs[*m],
                    at,
                ));
                at += (rows.len() * size_of::<f32>()) as u64;
                bytes += rows.len() as u64 * (row_bytes + scale_bytes);
            }
            launches.push(stage);
        }
        Ok(StageGemvs {
            device,
            kernels: device.kernels()?,
            bytes: bytes / stages.len().max(1) as u64,
            start: device.event()?,
            end: device.event()?,
            launches,
            _memory: (on_device, inputs, y),
        })
    })
}

/// Pinned host memory and device memory of `bytes` each, for
/// `Upload::trial`.
pub fn upload(device: &CudaGemv, bytes: usize) -> Result<Upload<'_>, String> {
    guarded(|| {
        let allocating = failed(device.ordinal(), "allocating the upload buffers");
        // SAFETY: filled below before any copy reads it. Flags 0: plain
        // page-locked memory, not write-combined.
        let mut pinned = unsafe { device.context().alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(&allocating)?;
        pinned
            .as_mut_slice()
            .map_err(&allocating)?
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i % 251) as u8);
        // SAFETY: only written by the copies timed, never read.
        let target = unsafe { device.stream().alloc::<u8>(bytes) }.map_err(&allocating)?;
        Ok(Upload {
            device,
            pinned,
            target,
        })
    })
}

/// One matrix in device memory, its input and output, and its launch.
struct DeviceRows {
    _matrix: DeviceMatrix,
    _input: DeviceInput,
    y: CudaSlice<f32>,
    launch: GemvLaunch,
}

/// Packed experts resident on the device, and the GEMV over them.
pub struct ResidentGemv<'a> {
    device: &'a CudaGemv,
    resident: Vec<DeviceRows>,
    bytes: u64,
    start: CudaEvent,
    end: CudaEvent,
    kernels: GemvKernels,
}

impl ResidentGemv<'_> {
    /// Bytes one pass reads: every matrix's weights and scales.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Seconds of device time (events) for `passes` GEMVs over every matrix.
    pub fn trial(&self, passes: usize) -> Result<f64, String> {
        let stream = self.device.stream();
        let timing = failed(self.device.ordinal(), "timing the GEMV kernel");
        guarded(|| {
            self.start.record(stream).map_err(&timing)?;
            let launches: Vec<GemvLaunch> = self.resident.iter().map(|m| m.launch).collect();
            for _ in 0..passes {
                // SAFETY: every address of the launches is a slice of
                // `self.resident`, alive while `self` is, and the trial
                // waits on its end event below.
                unsafe { self.kernels.launch(stream, &launches) }?;
            }
            self.end.record(stream).map_err(&timing)?;
            let ms = self.start.elapsed_ms(&self.end).map_err(&timing)?;
            Ok(ms as f64 / 1e3)
        })
    }

    /// `y` of the first `rows` rows of matrix `m` after a trial.
    pub fn y(&self, m: usize, rows: usize) -> Result<Vec<f32>, String> {
        self.device.read(&self.resident[m].y, rows)
    }
}

/// Stages of GEMVs in device memory, timed as `bench` runs a stage.
pub struct StageGemvs<'a> {
    device: &'a CudaGemv,
    kernels: GemvKernels,
    /// Per stage, its GEMVs.
    launches: Vec<Vec<GemvLaunch>>,
    bytes: u64,
    start: CudaEvent,
    end: CudaEvent,
    /// What the launches' addresses point into.
    _memory: (Vec<DeviceMatrix>, Vec<DeviceInput>, CudaSlice<f32>),
}

impl StageGemvs<'_> {
    /// Bytes a stage reads, on average: the GEMVs' weights and scales.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// GEMVs of the first stage.
    pub fn gemvs(&self) -> usize {
        self.launches.first().map_or(0, Vec::len)
    }

    /// Mean wall seconds of `stages` stages, the given ones in turn, each
    /// an event, its GEMVs in one batched launch, an event, and a wait for
    /// it.
    pub fn trial(&self, stages: usize) -> Result<f64, String> {
        let stream = self.device.stream();
        let timing = failed(self.device.ordinal(), "timing a stage");
        guarded(|| {
            let started = Instant::now();
            for launches in self.launches.iter().cycle().take(stages) {
                self.start.record(stream).map_err(&timing)?;
                // SAFETY: the addresses are `_memory`'s, alive while `self`
                // is, and each stage waits for its end event.
                unsafe { self.kernels.launch(stream, launches) }?;
                self.end.record(stream).map_err(&timing)?;
                self.end.synchronize().map_err(&timing)?;
            }
            Ok(started.elapsed().as_secs_f64() / stages.max(1) as f64)
        })
    }
}

/// A pinned host buffer and device memory of the same size.
pub struct Upload<'a> {
    device: &'a CudaGemv,
    pinned: PinnedHostSlice<u8>,
    target: CudaSlice<u8>,
}

impl Upload<'_> {
    pub fn bytes(&self) -> usize {
        self.pinned.len()
    }

    /// Seconds of one copy of the whole buffer to the device.
    pub fn trial(&mut self) -> Result<f64, String> {
        let copying = failed(self.device.ordinal(), "copying to the device");
        guarded(|| {
            let from = self.pinned.as_slice().map_err(&copying)?;
            let started = Instant::now();
            self.device
                .stream()
                .memcpy_htod(from, &mut self.target)
                .map_err(&copying)?;
            self.device.stream().synchronize().map_err(&copying)?;
            Ok(started.elapsed().as_secs_f64())
        })
    }
}

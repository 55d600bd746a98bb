//! Timings on one CUDA device, for `calibrate`: the resident GEMV (the PTX
//! kernels of `gemv` over packed experts already in device memory, timed
//! with events), the pinned host-to-device copy (as
//! `examples/gpu_upload.rs` measures its ceiling), and the round trip of a
//! tiny operation (a 4-byte memset, then a stream synchronize): what a
//! stage in which the card takes part pays beyond its work.
//!
//! libcuda is loaded at run time; `CudaBench::open` checks for it before any
//! other cudarc call (which would panic without it), and turns a driver
//! that panics in cudarc into an error.

use super::gemv::{ptx, PackedRows, QuantizedInput, CHUNK_BYTES, GPU_BLOCK_THREADS};
use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError,
    PinnedHostSlice,
};
use residency_runtime::gpu::cuda::describe;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

/// One CUDA device, with a stream of its own.
pub struct CudaBench {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// `cuda:0: <action>: <driver error>`.
fn failed(ordinal: usize, action: &'static str) -> impl Fn(DriverError) -> String {
    move |e| format!("cuda:{ordinal}: {action}: {}", describe(e))
}

/// Runs `f`, turning a panic inside cudarc (a symbol the driver lacks)
/// into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err("the CUDA driver library failed (a symbol is missing); update the NVIDIA driver".into())
    })
}

impl CudaBench {
    /// Device `ordinal`, or why it cannot be timed.
    pub fn open(ordinal: usize) -> Result<CudaBench, String> {
        // SAFETY: only tries to dlopen libcuda; see the module doc.
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver (libcuda.so) was not found".into());
        }
        guarded(|| {
            let ctx = CudaContext::new(ordinal).map_err(failed(ordinal, "opening"))?;
            let stream = ctx
                .new_stream()
                .map_err(failed(ordinal, "creating a stream"))?;
            Ok(CudaBench {
                ordinal,
                ctx,
                stream,
            })
        })
    }

    pub fn name(&self) -> Result<String, String> {
        guarded(|| {
            self.ctx
                .name()
                .map_err(failed(self.ordinal, "reading the name"))
        })
    }

    /// Device memory free now.
    pub fn free_bytes(&self) -> Result<u64, String> {
        guarded(|| {
            let (free, _) = self
                .ctx
                .mem_get_info()
                .map_err(failed(self.ordinal, "reading free memory"))?;
            Ok(free as u64)
        })
    }

    /// Loads the GEMV kernels and copies `matrices` (with their inputs) to
    /// the device, ready for `ResidentGemv::trial`.
    pub fn resident_gemv(
        &self,
        matrices: &[PackedRows],
        inputs: &[QuantizedInput],
    ) -> Result<ResidentGemv<'_>, String> {
        guarded(|| {
            let module = Module::load(self)?;
            let copying = failed(self.ordinal, "copying the experts to the device");
            let mut resident = Vec::new();
            for (m, x) in matrices.iter().zip(inputs) {
                let terms: Vec<f32> = x.chunk_terms().into_iter().flatten().collect();
                let entry = if m.packing.bits == 8 {
                    "gemv_int8"
                } else {
                    "gemv_int4"
                };
                resident.push(DeviceRows {
                    function: module.function(entry)?,
                    weights: self.stream.clone_htod(m.weights()).map_err(&copying)?,
                    scales: self.stream.clone_htod(m.scales()).map_err(&copying)?,
                    values: self.stream.clone_htod(&x.values).map_err(&copying)?,
                    terms: self.stream.clone_htod(&terms).map_err(&copying)?,
                    y: self.stream.alloc_zeros::<f32>(m.rows).map_err(&copying)?,
                    rows: m.rows as u32,
                    chunks: (m.packing.row_bytes(m.cols) / CHUNK_BYTES) as u32,
                    groups: m.groups() as u32,
                    shift: (m.packing.group / m.packing.chunk_features()).trailing_zeros(),
                    odd: if m.packing.bits == 8 {
                        0
                    } else {
                        (m.cols / 2) as u32
                    },
                });
            }
            let event = || {
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(failed(self.ordinal, "creating an event"))
            };
            Ok(ResidentGemv {
                bench: self,
                bytes: matrices.iter().map(PackedRows::bytes).sum(),
                start: event()?,
                end: event()?,
                resident,
                _module: module,
            })
        })
    }

    /// Pinned host memory and device memory of `bytes` each, for
    /// `Upload::trial`.
    pub fn upload(&self, bytes: usize) -> Result<Upload<'_>, String> {
        guarded(|| {
            let allocating = failed(self.ordinal, "allocating the upload buffers");
            // SAFETY: filled below before any copy reads it. Flags 0: plain
            // page-locked memory, not write-combined.
            let mut pinned =
                unsafe { self.ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(&allocating)?;
            pinned
                .as_mut_slice()
                .map_err(&allocating)?
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i % 251) as u8);
            // SAFETY: only written by the copies timed, never read.
            let target = unsafe { self.stream.alloc::<u8>(bytes) }.map_err(&allocating)?;
            Ok(Upload {
                bench: self,
                pinned,
                target,
            })
        })
    }

    /// Mean seconds of `count` round trips of a 4-byte memset and a stream
    /// synchronize.
    pub fn sync_round_trips(&self, count: usize) -> Result<f64, String> {
        guarded(|| {
            let syncing = failed(self.ordinal, "timing a memset and synchronize");
            let mut word = self.stream.alloc_zeros::<u32>(1).map_err(&syncing)?;
            self.stream.synchronize().map_err(&syncing)?;
            let started = Instant::now();
            for _ in 0..count {
                self.stream.memset_zeros(&mut word).map_err(&syncing)?;
                self.stream.synchronize().map_err(&syncing)?;
            }
            Ok(started.elapsed().as_secs_f64() / count.max(1) as f64)
        })
    }
}

/// The PTX module, unloaded on drop.
struct Module<'a> {
    bench: &'a CudaBench,
    module: sys::CUmodule,
}

impl<'a> Module<'a> {
    fn load(bench: &'a CudaBench) -> Result<Module<'a>, String> {
        let loading = failed(bench.ordinal, "loading the GEMV kernels (PTX)");
        bench.ctx.bind_to_thread().map_err(&loading)?;
        let text = CString::new(ptx()).expect("PTX text has no NUL");
        // SAFETY: `text` is a NUL-terminated PTX image that outlives the
        // call; the driver compiles it for this device.
        let module =
            unsafe { result::module::load_data(text.as_ptr().cast()) }.map_err(&loading)?;
        Ok(Module { bench, module })
    }

    fn function(&self, name: &str) -> Result<sys::CUfunction, String> {
        let name = CString::new(name).expect("kernel names have no NUL");
        // SAFETY: the module is loaded and stays so while `self` lives,
        // which outlives every launch of its functions (`ResidentGemv`).
        unsafe { result::module::get_function(self.module, name) }
            .map_err(failed(self.bench.ordinal, "finding a GEMV kernel"))
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        if self.bench.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded by `load`, unloaded once, after the last launch
            // (the stream is synchronised by every trial).
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// One matrix in device memory, with its kernel and launch parameters.
struct DeviceRows {
    function: sys::CUfunction,
    weights: CudaSlice<u8>,
    scales: CudaSlice<u8>,
    values: CudaSlice<u8>,
    terms: CudaSlice<f32>,
    y: CudaSlice<f32>,
    rows: u32,
    chunks: u32,
    groups: u32,
    shift: u32,
    odd: u32,
}

/// Packed experts resident on the device, and the GEMV over them.
pub struct ResidentGemv<'a> {
    bench: &'a CudaBench,
    resident: Vec<DeviceRows>,
    bytes: u64,
    start: CudaEvent,
    end: CudaEvent,
    /// Dropped last: the functions above belong to it.
    _module: Module<'a>,
}

impl ResidentGemv<'_> {
    /// Bytes one pass reads: every matrix's weights and scales.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Seconds of device time (events) for `passes` GEMVs over every matrix.
    pub fn trial(&self, passes: usize) -> Result<f64, String> {
        let stream = &self.bench.stream;
        let launching = failed(self.bench.ordinal, "running the GEMV kernel");
        guarded(|| {
            self.start.record(stream).map_err(&launching)?;
            for _ in 0..passes {
                for m in &self.resident {
                    self.launch(m).map_err(&launching)?;
                }
            }
            self.end.record(stream).map_err(&launching)?;
            let ms = self.start.elapsed_ms(&self.end).map_err(&launching)?;
            Ok(ms as f64 / 1e3)
        })
    }

    fn launch(&self, m: &DeviceRows) -> Result<(), DriverError> {
        let stream = &self.bench.stream;
        let pointer = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
        let (mut w, mut s, mut x) = (pointer(&m.weights), pointer(&m.scales), pointer(&m.values));
        let (mut t, mut y) = (m.terms.device_ptr(stream).0, m.y.device_ptr(stream).0);
        let (mut rows, mut chunks, mut groups, mut shift, mut odd) =
            (m.rows, m.chunks, m.groups, m.shift, m.odd);
        let mut params: [*mut c_void; 10] = [
            (&mut w as *mut u64).cast(),
            (&mut s as *mut u64).cast(),
            (&mut x as *mut u64).cast(),
            (&mut t as *mut u64).cast(),
            (&mut y as *mut u64).cast(),
            (&mut rows as *mut u32).cast(),
            (&mut chunks as *mut u32).cast(),
            (&mut groups as *mut u32).cast(),
            (&mut shift as *mut u32).cast(),
            (&mut odd as *mut u32).cast(),
        ];
        let warps_per_block = GPU_BLOCK_THREADS / 32;
        let blocks = m.rows.div_ceil(warps_per_block);
        // SAFETY: the function comes from the loaded module; its ten
        // parameters are the pointers and numbers above, in the kernel's
        // order and types (`gemv::ptx`); every pointer is device memory of
        // this context sized for `rows` rows, alive until the trial has
        // synchronised on its end event.
        unsafe {
            result::launch_kernel(
                m.function,
                (blocks, 1, 1),
                (GPU_BLOCK_THREADS, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
    }

    /// `y` of the first `rows` rows of matrix `m` after a trial.
    pub fn y(&self, m: usize, rows: usize) -> Result<Vec<f32>, String> {
        let reading = failed(self.bench.ordinal, "reading the GEMV result back");
        guarded(|| {
            let y = &self.resident[m].y;
            let mut out = vec![0f32; rows.min(y.len())];
            self.bench
                .stream
                .memcpy_dtoh(&y.slice(..out.len()), &mut out)
                .map_err(&reading)?;
            self.bench.stream.synchronize().map_err(&reading)?;
            Ok(out)
        })
    }
}

/// A pinned host buffer and device memory of the same size.
pub struct Upload<'a> {
    bench: &'a CudaBench,
    pinned: PinnedHostSlice<u8>,
    target: CudaSlice<u8>,
}

impl Upload<'_> {
    pub fn bytes(&self) -> usize {
        self.pinned.len()
    }

    /// Seconds of one copy of the whole buffer to the device.
    pub fn trial(&mut self) -> Result<f64, String> {
        let copying = failed(self.bench.ordinal, "copying to the device");
        guarded(|| {
            let from = self.pinned.as_slice().map_err(&copying)?;
            let started = Instant::now();
            self.bench
                .stream
                .memcpy_htod(from, &mut self.target)
                .map_err(&copying)?;
            self.bench.stream.synchronize().map_err(&copying)?;
            Ok(started.elapsed().as_secs_f64())
        })
    }
}

//! Computing experts on a CUDA device: the PTX GEMV kernels of
//! `crate::gemv` loaded into a device's context ([`GemvKernels`], a batch
//! of matrices a launch), matrices, inputs and outputs in device memory,
//! and the launches' parameters. `calibrate` and `bench` time these; a
//! serving GPU tier computes with them.
//!
//! libcuda is loaded at run time; [`CudaGemv::open`] checks for it before
//! any other cudarc call (which would panic without it), and turns a
//! driver that panics in cudarc into an error.

use super::cuda::describe;
use crate::gemv::{
    kernel_name, outputs_per_block, ptx, Layout, PackedRows, Packing, QuantizedInput, CHUNK_BYTES,
    GPU_BATCH, GPU_BLOCK_THREADS, GPU_DESCRIPTOR_BYTES,
};
use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError,
};
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// One CUDA device, with a stream of its own.
pub struct CudaGemv {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// `cuda:0: <action>: <driver error>`.
pub fn failed(ordinal: usize, action: &'static str) -> impl Fn(DriverError) -> String {
    move |e| format!("cuda:{ordinal}: {action}: {}", describe(e))
}

/// Runs `f`, turning a panic inside cudarc (a symbol the driver lacks)
/// into an error.
pub fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err("the CUDA driver library failed (a symbol is missing); update the NVIDIA driver".into())
    })
}

impl CudaGemv {
    /// Device `ordinal`, or why it cannot be timed.
    pub fn open(ordinal: usize) -> Result<CudaGemv, String> {
        // SAFETY: only tries to dlopen libcuda; see the module doc.
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver (libcuda.so) was not found".into());
        }
        guarded(|| {
            let ctx = CudaContext::new(ordinal).map_err(failed(ordinal, "opening"))?;
            let stream = ctx
                .new_stream()
                .map_err(failed(ordinal, "creating a stream"))?;
            Ok(CudaGemv {
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

    /// The GEMV kernels, loaded into this device's context.
    pub fn kernels(&self) -> Result<GemvKernels, String> {
        guarded(|| GemvKernels::load(self))
    }

    /// `rows` (weights and scales) copied to device memory.
    pub fn matrix(&self, rows: &PackedRows) -> Result<DeviceMatrix, String> {
        let copying = failed(self.ordinal, "copying a matrix to the device");
        guarded(|| {
            let weights = self.stream.clone_htod(rows.weights()).map_err(&copying)?;
            let scales = self.stream.clone_htod(rows.scales()).map_err(&copying)?;
            Ok(DeviceMatrix {
                shape: GemvLaunch::shape(rows.packing, Layout::RowMajor, rows.rows, rows.cols),
                cols: rows.cols,
                weights_address: self.pointer(&weights),
                scales_address: self.pointer(&scales),
                _weights: weights,
                _scales: scales,
            })
        })
    }

    /// An input vector and its chunk terms in device memory.
    pub fn input(&self, x: &QuantizedInput) -> Result<DeviceInput, String> {
        let copying = failed(self.ordinal, "copying an input to the device");
        guarded(|| {
            let terms: Vec<f32> = x.chunk_terms().into_iter().flatten().collect();
            let values = self.stream.clone_htod(&x.values).map_err(&copying)?;
            let terms = self.stream.clone_htod(&terms).map_err(&copying)?;
            Ok(DeviceInput {
                values_address: self.pointer(&values),
                terms_address: self.pointer(&terms),
                _values: values,
                _terms: terms,
            })
        })
    }

    /// Zeroed device memory for `rows` outputs.
    pub fn output(&self, rows: usize) -> Result<CudaSlice<f32>, String> {
        guarded(|| {
            self.stream
                .alloc_zeros::<f32>(rows.max(1))
                .map_err(failed(self.ordinal, "allocating GEMV outputs"))
        })
    }

    /// The device address of `slice`, for kernel parameters.
    pub fn pointer<T>(&self, slice: &CudaSlice<T>) -> u64 {
        slice.device_ptr(&self.stream).0
    }

    /// An event that records timing, on this device.
    pub fn event(&self) -> Result<CudaEvent, String> {
        guarded(|| {
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(failed(self.ordinal, "creating an event"))
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// `rows` outputs from the start of `y`, copied back (synchronous).
    pub fn read(&self, y: &CudaSlice<f32>, rows: usize) -> Result<Vec<f32>, String> {
        let reading = failed(self.ordinal, "reading GEMV results back");
        guarded(|| {
            let mut out = vec![0f32; rows.min(y.len())];
            if !out.is_empty() {
                self.stream
                    .memcpy_dtoh(&y.slice(..out.len()), &mut out)
                    .map_err(&reading)?;
            }
            self.stream.synchronize().map_err(&reading)?;
            Ok(out)
        })
    }
}

/// The GEMV kernels of `gemv::ptx` in one device's context; the module is
/// unloaded on drop.
pub struct GemvKernels {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    module: sys::CUmodule,
    /// By `KINDS`.
    functions: [sys::CUfunction; 4],
}

/// The kernels' kinds: weight bits and layout.
const KINDS: [(u32, Layout); 4] = [
    (8, Layout::RowMajor),
    (4, Layout::RowMajor),
    (8, Layout::InputMajor),
    (4, Layout::InputMajor),
];

impl GemvKernels {
    fn load(device: &CudaGemv) -> Result<GemvKernels, String> {
        let loading = failed(device.ordinal, "loading the GEMV kernels (PTX)");
        device.ctx.bind_to_thread().map_err(&loading)?;
        let text = CString::new(ptx()).expect("PTX text has no NUL");
        // SAFETY: `text` is a NUL-terminated PTX image that outlives the
        // call; the driver compiles it for this device.
        let module =
            unsafe { result::module::load_data(text.as_ptr().cast()) }.map_err(&loading)?;
        let function = |(bits, layout): (u32, Layout)| {
            let name = CString::new(kernel_name(bits, layout)).expect("kernel names have no NUL");
            // SAFETY: the module is loaded and stays so while `self` lives,
            // which outlives every launch of its functions.
            unsafe { result::module::get_function(module, name) }
                .map_err(failed(device.ordinal, "finding a GEMV kernel"))
        };
        let found: Result<Vec<sys::CUfunction>, String> = KINDS.into_iter().map(function).collect();
        let functions = match found {
            Ok(f) => f.try_into().expect("one function a kind"),
            Err(e) => {
                // SAFETY: loaded above, no function of it launched.
                let _ = unsafe { result::module::unload(module) };
                return Err(e);
            }
        };
        Ok(GemvKernels {
            ctx: device.ctx.clone(),
            ordinal: device.ordinal,
            module,
            functions,
        })
    }

    /// Queues the GEMVs of `launches` on `stream`: those of one kernel
    /// (bits and layout) together, up to `GPU_BATCH` a launch.
    ///
    /// # Safety
    /// `stream` belongs to this context, and every address of `launches`
    /// is device memory of it sized for its launch's shape (`GemvLaunch`),
    /// alive until the stream has run the kernels.
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        launches: &[GemvLaunch],
    ) -> Result<(), String> {
        for (kind, &(bits, layout)) in KINDS.iter().enumerate() {
            let mine: Vec<&GemvLaunch> = launches
                .iter()
                .filter(|l| l.int8 == (bits == 8) && l.layout == layout)
                .collect();
            for batch in mine.chunks(GPU_BATCH) {
                let mut descriptors = [0u8; GPU_BATCH * GPU_DESCRIPTOR_BYTES];
                let per_block = outputs_per_block(layout);
                let mut blocks = 0u32;
                for (l, d) in batch
                    .iter()
                    .zip(descriptors.chunks_exact_mut(GPU_DESCRIPTOR_BYTES))
                {
                    l.write_descriptor(blocks, d);
                    blocks += l.rows.div_ceil(per_block);
                }
                let mut count = batch.len() as u32;
                let mut params: [*mut c_void; 2] = [
                    descriptors.as_mut_ptr().cast(),
                    (&mut count as *mut u32).cast(),
                ];
                // SAFETY: the function comes from the loaded module; its two
                // parameters are the descriptor array (the kernel's size) and
                // their count, as `gemv::ptx` declares them; the caller
                // vouches for the memory the descriptors name.
                unsafe {
                    result::launch_kernel(
                        self.functions[kind],
                        (blocks, 1, 1),
                        (GPU_BLOCK_THREADS, 1, 1),
                        0,
                        stream.cu_stream(),
                        &mut params,
                    )
                }
                .map_err(failed(self.ordinal, "running the GEMV kernel"))?;
            }
        }
        Ok(())
    }
}

impl Drop for GemvKernels {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded by `load`, unloaded once; whoever launched its
            // kernels synchronised their stream before dropping it.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// One GEMV's kernel parameters: device addresses and the shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemvLaunch {
    pub weights: u64,
    pub scales: u64,
    pub values: u64,
    pub terms: u64,
    pub y: u64,
    pub rows: u32,
    /// 16-byte chunks a row.
    pub chunks: u32,
    /// Scale groups a row.
    pub groups: u32,
    /// log2(chunks a group).
    pub shift: u32,
    /// Byte offset of the odd inputs (int4; 0 for int8).
    pub odd: u32,
    pub int8: bool,
    /// Which kernel reads the weights; the descriptor is the same.
    pub layout: Layout,
}

impl GemvLaunch {
    /// The shape of `rows` outputs of `cols` features in `packing` and
    /// `layout`, with no addresses yet. The fields mean the same in both
    /// layouts: `chunks` 16-byte chunks of one output's packed inputs,
    /// which input-major lie at stride `rows` instead of one after another.
    pub fn shape(packing: Packing, layout: Layout, rows: usize, cols: usize) -> GemvLaunch {
        let int8 = packing.bits == 8;
        GemvLaunch {
            weights: 0,
            scales: 0,
            values: 0,
            terms: 0,
            y: 0,
            rows: rows as u32,
            chunks: (packing.row_bytes(cols) / CHUNK_BYTES) as u32,
            groups: (cols / packing.group) as u32,
            shift: (packing.group / packing.chunk_features()).trailing_zeros(),
            odd: if int8 { 0 } else { (cols / 2) as u32 },
            int8,
            layout,
        }
    }

    /// Its descriptor in a launch's parameters (`gemv::ptx`), starting at
    /// block `first_block` of the launch.
    fn write_descriptor(&self, first_block: u32, out: &mut [u8]) {
        let words = [self.weights, self.scales, self.values, self.terms, self.y];
        let numbers = [
            self.rows,
            self.chunks,
            self.groups,
            self.shift,
            self.odd,
            first_block,
        ];
        let bytes = words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .chain(numbers.iter().flat_map(|n| n.to_le_bytes()));
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = b;
        }
    }

    /// This shape over weights and scales at the given device addresses,
    /// `x`'s input, writing `y`.
    pub fn at(&self, weights: u64, scales: u64, x: &DeviceInput, y: u64) -> GemvLaunch {
        GemvLaunch {
            weights,
            scales,
            values: x.values_address,
            terms: x.terms_address,
            y,
            ..*self
        }
    }
}

/// Packed rows in device memory.
pub struct DeviceMatrix {
    pub shape: GemvLaunch,
    /// Input features a row.
    pub cols: usize,
    weights_address: u64,
    scales_address: u64,
    _weights: CudaSlice<u8>,
    _scales: CudaSlice<u8>,
}

impl DeviceMatrix {
    /// Bytes a GEMV over it reads: weights and scales.
    pub fn bytes(&self) -> u64 {
        (self._weights.len() + self._scales.len()) as u64
    }

    /// Device addresses of its weights and scales.
    pub fn addresses(&self) -> (u64, u64) {
        (self.weights_address, self.scales_address)
    }

    /// Its GEMV with input `x`, writing `y`.
    pub fn launch(&self, x: &DeviceInput, y: u64) -> GemvLaunch {
        self.shape
            .at(self.weights_address, self.scales_address, x, y)
    }
}

/// An input vector and its chunk terms in device memory.
pub struct DeviceInput {
    values_address: u64,
    terms_address: u64,
    _values: CudaSlice<u8>,
    _terms: CudaSlice<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_lies_where_the_kernel_reads_it() {
        // 768 rows of 2048 int4 features in groups of 64: 1024 bytes a row
        // = 64 chunks of 16; 32 groups; 64 / 32 = 2 chunks a group (shift
        // 1); the odd inputs start at byte 1024.
        let shape = GemvLaunch::shape(Packing { bits: 4, group: 64 }, Layout::RowMajor, 768, 2048);
        assert_eq!(
            (
                shape.rows,
                shape.chunks,
                shape.groups,
                shape.shift,
                shape.odd
            ),
            (768, 64, 32, 1, 1024)
        );
        let launch = GemvLaunch {
            weights: 1,
            scales: 2,
            values: 3,
            terms: 4,
            y: 5,
            ..shape
        };
        let mut d = [0u8; GPU_DESCRIPTOR_BYTES];
        launch.write_descriptor(7, &mut d);
        let word = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
        let number = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
        assert_eq!([0, 8, 16, 24, 32].map(word), [1, 2, 3, 4, 5]);
        assert_eq!(
            [40, 44, 48, 52, 56, 60].map(number),
            [768, 64, 32, 1, 1024, 7]
        );
        // The kernel loads the pointers and numbers at those offsets of
        // the descriptor it found, and scans first blocks 64 bytes apart.
        let text = ptx();
        assert!(text.contains("ld.param.u64 %rd1, [%rd22];"));
        for at in [8, 16, 24, 32, 40, 44, 48, 52, 56, 60] {
            assert!(text.contains(&format!("[%rd22+{at}]")), "{at}");
        }
        assert!(text.contains(&format!(
            "mul.wide.u32 %rd21, %r34, {GPU_DESCRIPTOR_BYTES};"
        )));
        assert!(text.contains(&format!(
            ".param .align 8 .b8 p_desc[{}]",
            GPU_BATCH * GPU_DESCRIPTOR_BYTES
        )));
    }

    /// Where a CUDA device exists: one matrix (Maverick's int4 gate_up of
    /// one expert, 16,384 outputs of 5,120 features; and int8) in both
    /// layouts on the card, in one batched launch, gives the CPU kernel's
    /// outputs to rounding (the card sums in another order); each layout's
    /// kernel is timed alone. Without a device it checks nothing.
    #[test]
    fn the_card_computes_both_layouts_as_the_cpu_kernel_does() {
        let Ok(device) = CudaGemv::open(0) else {
            eprintln!("no CUDA device: nothing to check");
            return;
        };
        let kernels = device.kernels().unwrap();
        let stream = device.stream();
        for packing in [
            Packing { bits: 4, group: 64 },
            Packing {
                bits: 8,
                group: 128,
            },
        ] {
            let (cols, rows) = (5120, 16384);
            let mut m = PackedRows::zeroed(packing, cols, rows, None);
            m.fill_generated(3);
            let (weights, scales) = crate::gemv::tests::input_major(&m);
            let x = QuantizedInput::seeded(cols, packing, 5);
            let im = crate::gemv::PackedView {
                layout: Layout::InputMajor,
                weights: &weights,
                scales: &scales,
                ..m.view()
            };
            let mut want = vec![0f32; rows];
            im.rows_into(&x, 0, &mut want);

            let row_major = device.matrix(&m).unwrap();
            let on_card = (
                stream.clone_htod(&weights).unwrap(),
                stream.clone_htod(&scales).unwrap(),
            );
            let input = device.input(&x).unwrap();
            let y = device.output(2 * rows).unwrap();
            let at = device.pointer(&y);
            let launches = [
                row_major.launch(&input, at),
                GemvLaunch::shape(packing, Layout::InputMajor, rows, cols).at(
                    device.pointer(&on_card.0),
                    device.pointer(&on_card.1),
                    &input,
                    at + (rows * 4) as u64,
                ),
            ];
            // SAFETY: every address is a slice above, alive until `read`
            // has synchronised the stream.
            unsafe { kernels.launch(stream, &launches) }.unwrap();
            let got = device.read(&y, 2 * rows).unwrap();
            for (layout, got) in [("row-major", &got[..rows]), ("input-major", &got[rows..])] {
                for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-3 * w.abs().max(1.0),
                        "{} {layout} output {o}: {g} on the card, {w} on the CPU",
                        packing.name()
                    );
                }
            }
            let (start, end) = (device.event().unwrap(), device.event().unwrap());
            for (layout, launch) in [("row-major", launches[0]), ("input-major", launches[1])] {
                let passes = 50;
                start.record(stream).unwrap();
                for _ in 0..passes {
                    // SAFETY: as above; `elapsed_ms` waits for `end`.
                    unsafe { kernels.launch(stream, &[launch]) }.unwrap();
                }
                end.record(stream).unwrap();
                let ms = start.elapsed_ms(&end).unwrap() as f64 / passes as f64;
                eprintln!(
                    "{} {rows} x {cols} {layout}: {:.1} us a GEMV, {:.0} GB/s",
                    packing.name(),
                    ms * 1e3,
                    m.bytes() as f64 / ms / 1e6
                );
            }
        }
    }
}

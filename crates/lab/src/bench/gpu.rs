//! The GPU side of `bench`: per card, the GEMV kernels (`gemv::ptx`), the
//! run's input vectors and one token's outputs in device memory.
//!
//! A token's launches are made before its clock starts (`queue`: device
//! addresses and output places), as an engine that routes on the device
//! builds nothing per stage. A stage's GEMVs on a card go out in one launch
//! (`GPU_BATCH` matrices a launch, as a fused engine runs a layer's experts
//! at once) on the card's stream before the CPU starts its share, so both
//! run at once as an engine overlaps them; the stage then waits once for
//! the card (one synchronisation per stage, which the cost model charges
//! as `sync_overhead`). Device time is timed with events around the
//! launch. Outputs stay on the card until the token is over: reading them
//! back is the checksum's, not the token's.

use super::BenchError;
use cudarc::driver::{CudaEvent, CudaSlice};
use residency_runtime::gemv::{PackedRows, QuantizedInput};
use residency_runtime::gpu::gemv::{CudaGemv, DeviceInput, DeviceMatrix, GemvKernels, GemvLaunch};
use std::collections::BTreeMap;

/// One CUDA device as the bench uses it.
pub(super) struct Card {
    bench: CudaGemv,
    kernels: GemvKernels,
    /// The run's input vector of each width, on this card.
    inputs: BTreeMap<usize, DeviceInput>,
    /// One token's outputs, stage after stage.
    y: CudaSlice<f32>,
    y_address: u64,
    /// Where each output of this token lies in `y`.
    written: Vec<Written>,
    written_rows: usize,
    start: CudaEvent,
    end: CudaEvent,
    /// Whether the stage in progress launched anything.
    busy: bool,
}

/// A GEMV's outputs: `rows` rows from `first` of `y`, the checksum slot
/// `slot` of stage `stage`.
struct Written {
    stage: usize,
    slot: usize,
    first: usize,
    rows: usize,
}

fn gpu_error(e: String) -> BenchError {
    BenchError::Gpu(e)
}

impl Card {
    /// CUDA device `ordinal`, holding `inputs` and room for `token_rows`
    /// outputs a token.
    pub(super) fn open(
        ordinal: usize,
        inputs: &BTreeMap<usize, QuantizedInput>,
        token_rows: usize,
    ) -> Result<Card, BenchError> {
        let bench = CudaGemv::open(ordinal).map_err(gpu_error)?;
        let kernels = bench.kernels().map_err(gpu_error)?;
        let mut on_card = BTreeMap::new();
        for (&cols, x) in inputs {
            on_card.insert(cols, bench.input(x).map_err(gpu_error)?);
        }
        let y = bench.output(token_rows).map_err(gpu_error)?;
        Ok(Card {
            y_address: bench.pointer(&y),
            start: bench.event().map_err(gpu_error)?,
            end: bench.event().map_err(gpu_error)?,
            kernels,
            inputs: on_card,
            y,
            written: Vec::new(),
            written_rows: 0,
            busy: false,
            bench,
        })
    }

    /// Generated rows copied to this card.
    pub(super) fn matrix(&self, rows: &PackedRows) -> Result<DeviceMatrix, BenchError> {
        self.bench.matrix(rows).map_err(gpu_error)
    }

    /// Adds to `launches` (a stage's, for `launch_stage`) the GEMV of
    /// `shape` over weights and scales at device addresses `weights`,
    /// `scales` with the run's input of `cols` features; its outputs are
    /// checksum slot `slot` of stage `stage` of the token.
    ///
    /// # Safety
    /// `weights` and `scales` are device memory of this card holding the
    /// whole matrix of `shape`, alive until `finish_stage` returns.
    pub(super) unsafe fn queue(
        &mut self,
        shape: &GemvLaunch,
        (weights, scales): (u64, u64),
        cols: usize,
        (stage, slot): (usize, usize),
        launches: &mut Vec<GemvLaunch>,
    ) -> Result<(), BenchError> {
        let rows = shape.rows as usize;
        if self.written_rows + rows > self.y.len() {
            return Err(gpu_error(format!(
                "cuda:{}: a token wrote more GEMV outputs than the {} planned for; a bench bug, please report it",
                self.ordinal(),
                self.y.len()
            )));
        }
        let y = self.y_address + (self.written_rows * size_of::<f32>()) as u64;
        launches.push(shape.at(weights, scales, &self.inputs[&cols], y));
        self.written.push(Written {
            stage,
            slot,
            first: self.written_rows,
            rows,
        });
        self.written_rows += rows;
        Ok(())
    }

    /// Launches a stage's GEMVs (made by `queue`) between two timing
    /// events.
    pub(super) fn launch_stage(&mut self, launches: &[GemvLaunch]) -> Result<(), BenchError> {
        if launches.is_empty() {
            return Ok(());
        }
        let stream = self.bench.stream();
        let timing = |e| {
            gpu_error(format!(
                "cuda:{}: recording an event: {e:?}",
                self.ordinal()
            ))
        };
        self.start.record(stream).map_err(timing)?;
        // SAFETY: the inputs and `y` are this card's, alive while it is;
        // `queue`'s callers vouch for the weights and scales until
        // `finish_stage`, which waits for the kernels.
        unsafe { self.kernels.launch(stream, launches) }.map_err(gpu_error)?;
        self.end.record(stream).map_err(timing)?;
        self.busy = true;
        Ok(())
    }

    /// Waits for the stage's GEMVs: their device seconds, or `None` when
    /// the stage queued none here.
    pub(super) fn finish_stage(&mut self) -> Result<Option<f64>, BenchError> {
        if !std::mem::take(&mut self.busy) {
            return Ok(None);
        }
        let timing = |e| gpu_error(format!("cuda:{}: timing a stage: {e:?}", self.ordinal()));
        self.end.synchronize().map_err(timing)?;
        let ms = self.start.elapsed_ms(&self.end).map_err(timing)?;
        Ok(Some(ms as f64 / 1e3))
    }

    /// Reads this token's outputs back: each GEMV's output sum goes to its
    /// stage's slot of `sums`.
    pub(super) fn drain_token(&mut self, sums: &mut [Vec<f64>]) -> Result<(), BenchError> {
        let y = self
            .bench
            .read(&self.y, self.written_rows)
            .map_err(gpu_error)?;
        for w in self.written.drain(..) {
            sums[w.stage][w.slot] = y[w.first..w.first + w.rows].iter().map(|&v| v as f64).sum();
        }
        self.written_rows = 0;
        Ok(())
    }

    pub(super) fn ordinal(&self) -> usize {
        self.bench.ordinal()
    }
}

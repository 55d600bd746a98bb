//! `residency profile calibrate`: times what detection can only assume, and
//! writes each result into the profile with its spread.
//!
//! - CPU GEMV bandwidth per NUMA node: the kernel of `gemv` on one thread
//!   per physical core of the node, each pinned to its CPU, over packed
//!   experts (a checkpoint's, else generated in the model's RAM-tier
//!   format) in memory bound to the node, several times the last-level
//!   cache so that they stream from RAM.
//! - Drive read latency and bandwidth: 4 KiB random reads at queue depth
//!   1, and O_DIRECT reads of one expert's bytes at random places, one at
//!   a time (as a streamed expert is read), on the checkpoint's shards,
//!   else on a temporary file written under the model directory (removed
//!   afterwards), for the profile's drive that holds that directory.
//! - Per CUDA GPU: resident GEMV bandwidth (the PTX kernel over packed
//!   experts in device memory, checked against the CPU kernel first),
//!   pinned upload bandwidth, and a stage's sync and per-GEMV overheads,
//!   timed as `bench` runs a stage (`gpu`).
//! - Per NUMA node, after its GEMV rate: its stage overhead (`cpu`).
//!
//! Each measurement runs one untimed warm-up, then trials until its share
//! of `--seconds` is spent (at least `MIN_TRIALS`, at most `MAX_TRIALS`);
//! the profile gets the median, its comment the median and range. What
//! cannot be measured here (no such node, no CUDA, a drive not in the
//! profile, O_DIRECT refused) keeps its value and comment, and a note says
//! why.
//!
//! This module owns the run: the budget, its trials and the record of each
//! value; `cpu`, `drive` and `gpu` time their parts, `experts` makes the
//! expert bytes the GEMV kernels stream.

mod cpu;
mod drive;
pub(crate) mod experts;
mod gpu;
#[cfg(test)]
mod tests;

use super::doc::Quantity;
use super::gemv::{PackedRows, QuantizedInput};
use super::spread::Spread;
use super::system;
use super::{Measurement, ProfileDoc, ProfileError};
use experts::ExpertSource;
use residency_core::model::Model;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Trials of one measurement after its warm-up: at least, at most, and
/// the number its trials are sized for.
pub const MIN_TRIALS: usize = 3;
pub const MAX_TRIALS: usize = 25;
const TARGET_TRIALS: usize = 10;
/// Most repetitions in one trial (of a sync round trip, the quickest).
const MAX_REPS: usize = 100_000;
/// Size of each write of the temporary file a drive is timed on.
pub const WRITE_PIECE_BYTES: usize = 8 << 20;
/// Size of each random read timed for latency.
pub const LATENCY_READ_BYTES: usize = 4096;
/// Host-to-device copy timed for upload bandwidth.
pub const UPLOAD_BYTES: usize = 256 << 20;
/// Most expert bytes a GEMV measurement streams through (CPU per node, and
/// GPU): enough to leave every cache behind.
pub const MAX_GEMV_BYTES: u64 = 1 << 30;
/// Experts a card's stage trial cycles through: several times the largest
/// GPU L2 (50 MB on an H100 or H200, 126 MB on a B200), so that no stage
/// finds the last one's bytes in it.
pub const GPU_STAGE_SPAN_BYTES: u64 = 512 << 20;
/// Group size of the int4 experts generated when the model's format is
/// neither int4 nor int8 (as `gen-checkpoint` packs int4).
const FALLBACK_INT4_GROUP: usize = 64;

#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// Seconds the measurements may take together (setup comes on top:
    /// generating experts, writing the temporary file).
    pub seconds: f64,
    /// Time this checkpoint's experts and read its shards.
    pub checkpoint: Option<PathBuf>,
    /// The model whose geometry and tier formats generated experts take
    /// when there is no checkpoint (default: the planner's default model).
    pub model: Option<Model>,
    /// The directory whose drive is timed (default: the checkpoint's, else
    /// the working directory).
    pub model_dir: Option<PathBuf>,
    /// Expert bytes each GEMV measurement cycles through, CPU and GPU
    /// alike (default: 4x the node's last-level cache up to
    /// `MAX_GEMV_BYTES` on a CPU, `MAX_GEMV_BYTES` and
    /// `GPU_STAGE_SPAN_BYTES` on a card): as many as a plan keeps resident
    /// times rates over memory as spread out as the residents are.
    pub span_bytes: Option<u64>,
}

/// The calibrated profile, the values measured, and why others were not.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub doc: ProfileDoc,
    pub measured: Vec<Measurement>,
    pub notes: Vec<String>,
}

/// Calibrates `doc`'s profile on this machine. `progress` is told the step
/// running and the share of the time budget spent.
pub fn calibrate(
    doc: ProfileDoc,
    options: &CalibrateOptions,
    progress: &dyn Fn(&str, f64),
) -> Result<Calibration, ProfileError> {
    if !(options.seconds.is_finite() && options.seconds > 0.0) {
        return Err(ProfileError::input(
            Path::new("--seconds"),
            format!("is {}", options.seconds),
            "give a positive number of seconds, e.g. --seconds 20",
        ));
    }
    let source = ExpertSource::new(options)?;
    let model_dir = options
        .model_dir
        .clone()
        .or_else(|| options.checkpoint.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    if !model_dir.is_dir() {
        return Err(ProfileError::input(
            &model_dir,
            "is not a directory",
            "give --model-dir the directory the checkpoint is (or will be) in",
        ));
    }
    let mut run = Run {
        doc,
        measured: Vec::new(),
        notes: Vec::new(),
        source,
        progress,
        started: Instant::now(),
        seconds: options.seconds,
        share: Duration::ZERO,
        span_bytes: options.span_bytes,
        gpu_experts: None,
    };
    let nodes = system::numa_nodes(&mut Vec::new());
    let drive = run.drive_to_time(&model_dir);
    let gpus = run.doc.profile.gpus.len();
    let units = run.doc.profile.numa.len().min(nodes.len()) + usize::from(drive.is_some()) + gpus;
    run.share = Duration::from_secs_f64(options.seconds / units.max(1) as f64);
    for i in 0..run.doc.profile.numa.len() {
        match nodes.get(i) {
            Some(node) => run.cpu_node(i, node),
            None => run.notes.push(format!(
                "numa[{i}]: this machine has {} NUMA node(s) with CPUs; gemv_bandwidth not measured",
                nodes.len()
            )),
        }
    }
    if let Some((d, files)) = drive {
        run.drive(d, &files, &model_dir)?;
    }
    for g in 0..gpus {
        run.gpu(g);
    }
    progress("done", 1.0);
    let count = run.measured.len();
    let line = format!(
        "Calibrated by `residency profile calibrate` (residency {}, {} s): {count} values measured here.",
        env!("CARGO_PKG_VERSION"),
        options.seconds
    );
    run.doc
        .header
        .retain(|l| !l.starts_with("Calibrated by `residency profile calibrate`"));
    run.doc.header.push(line);
    Ok(Calibration {
        doc: run.doc,
        measured: run.measured,
        notes: run.notes,
    })
}

/// The state of one calibration: the profile so far and the time budget.
struct Run<'a> {
    doc: ProfileDoc,
    measured: Vec<Measurement>,
    notes: Vec<String>,
    source: ExpertSource,
    progress: &'a dyn Fn(&str, f64),
    started: Instant,
    /// The whole budget, and each measurement's share of it (a NUMA node,
    /// a drive, a GPU).
    seconds: f64,
    share: Duration,
    /// `CalibrateOptions::span_bytes`.
    span_bytes: Option<u64>,
    /// The experts the GPUs run, made once for all of them.
    gpu_experts: Option<(Vec<PackedRows>, Vec<QuantizedInput>)>,
}

impl Run<'_> {
    /// Records a measured value (already set in the profile) and its
    /// comment: the spread of its trials, and `what` was timed.
    fn record(
        &mut self,
        path: &str,
        value: String,
        spread: &Spread,
        quantity: Quantity,
        what: String,
    ) {
        let m = Measurement {
            path: path.to_string(),
            value,
            comment: format!("{} ({what})", spread.describe(quantity, "trials")),
            spread: Some(*spread),
        };
        self.doc.measured(&m);
        self.measured.push(m);
    }

    /// Runs `trial(reps)` (a value from `reps` repetitions of the thing
    /// timed) until `budget` is spent, within the trial bounds: first one
    /// repetition untimed, as warm-up and to size the trials to about a
    /// tenth of the budget each. Returns the spread and the repetitions a
    /// trial.
    fn repeat(
        &self,
        step: &str,
        budget: Duration,
        mut trial: impl FnMut(usize) -> Result<f64, String>,
    ) -> Result<(Spread, usize), String> {
        self.tell(step);
        let warm_up = Instant::now();
        trial(1)?;
        let one = warm_up.elapsed().as_secs_f64().max(1e-9);
        let reps =
            ((budget.as_secs_f64() / TARGET_TRIALS as f64 / one) as usize).clamp(1, MAX_REPS);
        let started = Instant::now();
        let mut values = Vec::new();
        while values.len() < MIN_TRIALS || (values.len() < MAX_TRIALS && started.elapsed() < budget)
        {
            values.push(trial(reps)?);
            self.tell(step);
        }
        Ok((Spread::of(&values).expect("at least one trial"), reps))
    }

    /// Tells `progress` the step and the share of the budget spent so far.
    fn tell(&self, step: &str) {
        let spent = self.started.elapsed().as_secs_f64() / self.seconds;
        (self.progress)(step, spent.min(0.99));
    }
}

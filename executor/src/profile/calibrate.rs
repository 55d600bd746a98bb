//! `residency profile calibrate`: times what detection can only assume, and
//! writes each result into the profile with its spread.
//!
//! - CPU GEMV bandwidth per NUMA node: the kernel of `gemv` on one thread
//!   per physical core of the node, each pinned to its CPU, over packed
//!   experts (a checkpoint's, else generated in the model's RAM-tier
//!   format) in memory bound to the node, several times the last-level
//!   cache so that they stream from RAM.
//! - Drive read bandwidth and latency: O_DIRECT sequential reads of
//!   `SEQUENTIAL_READ_BYTES`, and 4 KiB random reads at queue depth 1, on
//!   the checkpoint's shards, else on a temporary file written under the
//!   model directory (removed afterwards), for the profile's drive that
//!   holds that directory.
//! - Per CUDA GPU: resident GEMV bandwidth (the PTX kernel over packed
//!   experts in device memory, checked against the CPU kernel first),
//!   pinned upload bandwidth, and the round trip of a memset and a stream
//!   synchronize as the per-stage sync overhead.
//!
//! Each measurement runs one untimed warm-up, then trials until its share
//! of `--seconds` is spent (at least `MIN_TRIALS`, at most `MAX_TRIALS`);
//! the profile gets the median, its comment the median and range. What
//! cannot be measured here (no such node, no CUDA, a drive not in the
//! profile, O_DIRECT refused) keeps its value and comment, and a note says
//! why.

use super::cuda_bench::CudaBench;
use super::doc::{field, rate_text, round_rate, round_time, time_text, ProfileDoc};
use super::gemv::{fill_random, PackedRows, Packing, QuantizedInput};
use super::spread::Spread;
use super::system::{self, NodeFacts};
use super::{Measurement, ProfileError};
use crate::checkpoint::{family, Checkpoint, Extent};
use crate::storage::posix::Direct;
use crate::storage::{AlignedSlab, DataFile, HostPool, ReadBackend};
use residency_planner::inputs::defaults;
use residency_planner::model::{FormatSize, Model};
use residency_planner::units::Bytes;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Trials of one measurement after its warm-up: at least, at most, and
/// the number its trials are sized for.
pub const MIN_TRIALS: usize = 3;
pub const MAX_TRIALS: usize = 25;
const TARGET_TRIALS: usize = 10;
/// Most repetitions in one trial (of a sync round trip, the quickest).
const MAX_REPS: usize = 100_000;
/// Size of each sequential O_DIRECT read (large enough that the drive, not
/// the syscall, sets the pace).
pub const SEQUENTIAL_READ_BYTES: usize = 8 << 20;
/// Size of each random read timed for latency.
pub const LATENCY_READ_BYTES: usize = 4096;
/// Host-to-device copy timed for upload bandwidth.
pub const UPLOAD_BYTES: usize = 256 << 20;
/// Most expert bytes a GEMV measurement streams through (CPU per node, and
/// GPU): enough to leave every cache behind.
pub const MAX_GEMV_BYTES: u64 = 1 << 30;
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
    /// The experts the GPUs run, made once for all of them.
    gpu_experts: Option<(Vec<PackedRows>, Vec<QuantizedInput>)>,
}

impl Run<'_> {
    /// Records a measured value (already set in the profile) and its
    /// comment: the spread of its trials, and `what` was timed.
    fn record(&mut self, path: &str, value: String, spread: &Spread, rate: bool, what: String) {
        let m = Measurement {
            path: path.to_string(),
            value,
            comment: format!("{} ({what})", spread.describe(rate, "trials")),
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

    /// CPU GEMV bandwidth of profile node `i`, on `node`'s cores.
    fn cpu_node(&mut self, i: usize, node: &NodeFacts) {
        let step = format!("numa[{i}]: CPU GEMV");
        self.tell(&step);
        let pool = HostPool::new(Some(node.sysfs_id), 0);
        let cache = node
            .core_cpus
            .first()
            .and_then(|&c| system::largest_cache_bytes(c))
            .unwrap_or(32 << 20);
        let target = (4 * cache)
            .clamp(64 << 20, MAX_GEMV_BYTES)
            .min(system::available_bytes().unwrap_or(u64::MAX) / 4);
        let packing = self.source.cpu;
        let result = self
            .source
            .expert_rows(packing, target, Some(&pool))
            .map_err(|e| e.to_string())
            .and_then(|rows| {
                let inputs = inputs_for(&rows);
                let bytes: u64 = rows.iter().map(PackedRows::bytes).sum();
                let cpus = &node.core_cpus;
                let (spread, _) = self.repeat(&step, self.share, |passes| {
                    let started = Instant::now();
                    for _ in 0..passes {
                        std::hint::black_box(parallel_gemv(&rows, &inputs, cpus));
                    }
                    Ok((bytes * passes as u64) as f64 / started.elapsed().as_secs_f64())
                })?;
                Ok((spread, bytes))
            });
        match result {
            Ok((spread, bytes)) => {
                let rate = round_rate(spread.median);
                self.doc.profile.numa[i].gemv_bandwidth = rate;
                let threads = node.core_cpus.len();
                let what = format!(
                    "{} {}, {}, {threads} thread{} pinned to node {}",
                    packing.name(),
                    self.source.label,
                    Bytes(bytes),
                    if threads == 1 { "" } else { "s" },
                    node.sysfs_id
                );
                let shown = rate_text(rate);
                self.record(
                    &field("numa", i, "gemv_bandwidth"),
                    shown,
                    &spread,
                    true,
                    what,
                );
            }
            Err(e) => self
                .notes
                .push(format!("numa[{i}]: CPU GEMV not measured: {e}")),
        }
    }

    /// The profile's drive that holds `dir`, and the files to time on it
    /// (the checkpoint's shards when they are there); `None` with a note
    /// when the profile lists no such drive.
    fn drive_to_time(&mut self, dir: &Path) -> Option<(usize, Vec<PathBuf>)> {
        let disk = match system::block_device_of(dir) {
            Ok(disk) => disk,
            Err(why) => {
                if !self.doc.profile.drives.is_empty() {
                    self.notes.push(format!("drives: not measured: {why}"));
                }
                return None;
            }
        };
        let Some(d) = self
            .doc
            .profile
            .drives
            .iter()
            .position(|d| d.name == disk.name)
        else {
            if !self.doc.profile.drives.is_empty() {
                self.notes.push(format!(
                    "drives: {} holds {}, but the profile names no drive `{}`; not measured (give --model-dir a directory on a listed drive)",
                    disk.name,
                    dir.display(),
                    disk.name
                ));
            }
            return None;
        };
        Some((d, self.source.shards().to_vec()))
    }

    /// Read bandwidth and latency of drive `d`, on `shards` or a temporary
    /// file under `dir`.
    fn drive(&mut self, d: usize, shards: &[PathBuf], dir: &Path) -> Result<(), ProfileError> {
        let name = self.doc.profile.drives[d].name.clone();
        self.tell(&format!("drives[{d}]: writing a file to read"));
        let temporary = if shards.is_empty() {
            // 32 MiB per second of the budget, within 64 MiB..1 GiB.
            let bytes = ((self.seconds * 32.0) as u64).clamp(64, 1024) << 20;
            match TemporaryFile::write(dir, bytes) {
                Ok(file) => Some(file),
                Err(why) => {
                    self.notes
                        .push(format!("drives[{d}] ({name}): not measured: {why}"));
                    return Ok(());
                }
            }
        } else {
            None
        };
        let paths: Vec<PathBuf> = match &temporary {
            Some(t) => vec![t.path.clone()],
            None => shards.to_vec(),
        };
        let files = paths
            .iter()
            .map(|p| DataFile::open(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ProfileError::input(dir, e.to_string(), "check the files' permissions"))?;
        if let Some(f) = files.iter().find(|f| !f.has_direct()) {
            self.notes.push(format!(
                "drives[{d}] ({name}): not measured: the file system of {} refuses O_DIRECT, and buffered reads would time the page cache",
                f.path().display()
            ));
            return Ok(());
        }
        let on = match &temporary {
            Some(t) => format!("a {} temporary file", Bytes(t.bytes)),
            None => format!("{} shard(s) of the checkpoint", files.len()),
        };
        let result = self.time_drive(d, &files);
        match result {
            Ok((bandwidth, latency)) => {
                let rate = round_rate(bandwidth.median);
                let time = round_time(latency.median);
                self.doc.profile.drives[d].read_bandwidth = rate;
                self.doc.profile.drives[d].read_latency = time;
                let shown_rate = rate_text(rate);
                let shown_time = time_text(time);
                self.record(
                    &field("drives", d, "read_bandwidth"),
                    shown_rate,
                    &bandwidth,
                    true,
                    format!(
                        "O_DIRECT sequential {} MiB reads of {on}",
                        SEQUENTIAL_READ_BYTES >> 20
                    ),
                );
                self.record(
                    &field("drives", d, "read_latency"),
                    shown_time,
                    &latency,
                    false,
                    format!(
                        "O_DIRECT random 4 KiB reads at queue depth 1 of {on}; each trial's median"
                    ),
                );
            }
            Err(e) => self
                .notes
                .push(format!("drives[{d}] ({name}): not measured: {e}")),
        }
        Ok(())
    }

    /// (bandwidth, latency) spreads of drive `d` over `files`.
    fn time_drive(&self, d: usize, files: &[DataFile]) -> Result<(Spread, Spread), String> {
        let total: u64 = files.iter().map(DataFile::len_bytes).sum();
        if total < LATENCY_READ_BYTES as u64 {
            return Err("the files to read are empty".into());
        }
        // Byte `at` of the files laid end to end: (file, offset).
        let locate = |at: u64| -> (&DataFile, u64) {
            let mut at = at % total;
            for f in files {
                if at < f.len_bytes() {
                    return (f, at);
                }
                at -= f.len_bytes();
            }
            unreachable!("`at` is below the total length")
        };
        let mut slab = AlignedSlab::new(SEQUENTIAL_READ_BYTES);
        let read = |slab: &mut AlignedSlab, at: u64, len: usize| -> Result<usize, String> {
            let (file, offset) = locate(at);
            let len = len.min((file.len_bytes() - offset) as usize);
            Direct
                .read_into(file, offset, len, slab)
                .map(|r| r.len())
                .map_err(|e| e.to_string())
        };
        let step = format!("drives[{d}]: read bandwidth");
        let mut position = 0u64;
        let (bandwidth, _) = self.repeat(&step, self.share / 2, |reads| {
            let started = Instant::now();
            let mut got = 0u64;
            for _ in 0..reads {
                // A read stops at the end of its file, so the next starts
                // at the next file's first byte, or the first file's; each
                // trial reads on where the last stopped, so that none finds
                // the drive's cache warm from the one before.
                let n = read(&mut slab, position, SEQUENTIAL_READ_BYTES)? as u64;
                got += n;
                position = (position + n) % total;
            }
            Ok(got as f64 / started.elapsed().as_secs_f64())
        })?;
        let step = format!("drives[{d}]: read latency");
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let blocks = total / LATENCY_READ_BYTES as u64;
        let (latency, _) = self.repeat(&step, self.share / 2, |reads| {
            let mut seconds = Vec::with_capacity(reads);
            for _ in 0..reads {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % blocks) * LATENCY_READ_BYTES as u64;
                let started = Instant::now();
                read(&mut slab, at, LATENCY_READ_BYTES)?;
                seconds.push(started.elapsed().as_secs_f64());
            }
            Ok(Spread::of(&seconds).expect("one read at least").median)
        })?;
        Ok((bandwidth, latency))
    }

    /// GEMV, upload and sync of profile GPU `g`, on CUDA device `g`.
    fn gpu(&mut self, g: usize) {
        let profile_name = self.doc.profile.gpus[g].name.clone();
        let bench = CudaBench::open(g).and_then(|b| {
            let name = b.name()?;
            let (a, b_) = (name.to_lowercase(), profile_name.to_lowercase());
            if a.contains(&b_) || b_.contains(&a) {
                Ok(b)
            } else {
                Err(format!("CUDA device {g} is `{name}`, not `{profile_name}`"))
            }
        });
        let bench = match bench {
            Ok(b) => b,
            Err(e) => {
                self.notes
                    .push(format!("gpus[{g}] ({profile_name}): not measured: {e}"));
                return;
            }
        };
        let quarter = self.share / 4;
        if let Err(e) = self.gpu_gemv(g, &bench, self.share / 2) {
            self.notes
                .push(format!("gpus[{g}]: gemv_bandwidth not measured: {e}"));
        }
        let upload = bench.upload(UPLOAD_BYTES).and_then(|mut u| {
            let bytes = u.bytes() as f64;
            let step = format!("gpus[{g}]: upload");
            self.repeat(&step, quarter, |copies| {
                let seconds: f64 = (0..copies)
                    .map(|_| u.trial())
                    .sum::<Result<f64, String>>()?;
                Ok(bytes * copies as f64 / seconds)
            })
        });
        match upload {
            Ok((spread, _)) => {
                let rate = round_rate(spread.median);
                self.doc.profile.gpus[g].upload_bandwidth = rate;
                let what = format!(
                    "cuMemcpyHtoD of {} from page-locked memory",
                    Bytes(UPLOAD_BYTES as u64)
                );
                self.record(
                    &field("gpus", g, "upload_bandwidth"),
                    rate_text(rate),
                    &spread,
                    true,
                    what,
                );
            }
            Err(e) => self
                .notes
                .push(format!("gpus[{g}]: upload_bandwidth not measured: {e}")),
        }
        let step = format!("gpus[{g}]: sync overhead");
        let sync = self.repeat(&step, quarter, |trips| bench.sync_round_trips(trips));
        match sync {
            Ok((spread, trips)) => {
                let time = round_time(spread.median);
                self.doc.profile.gpus[g].sync_overhead = time;
                let what = format!(
                    "mean of {trips} round trips a trial of a 4-byte memset and a stream synchronize"
                );
                self.record(
                    &field("gpus", g, "sync_overhead"),
                    time_text(time),
                    &spread,
                    false,
                    what,
                );
            }
            Err(e) => self
                .notes
                .push(format!("gpus[{g}]: sync_overhead not measured: {e}")),
        }
    }

    /// Resident GEMV bandwidth of GPU `g`, after checking the kernel's
    /// result against the CPU's on the same bytes.
    fn gpu_gemv(&mut self, g: usize, bench: &CudaBench, budget: Duration) -> Result<(), String> {
        let packing = self.source.gpu;
        if self.gpu_experts.is_none() {
            let target = MAX_GEMV_BYTES.min(bench.free_bytes()? / 4);
            let rows = self
                .source
                .expert_rows(packing, target, None)
                .map_err(|e| e.to_string())?;
            if let Some(why) = rows.iter().find_map(|m| packing.unfit_for(m.cols)) {
                return Err(format!(
                    "the GPU kernel cannot run {}: {why}",
                    packing.name()
                ));
            }
            let inputs = inputs_for(&rows);
            self.gpu_experts = Some((rows, inputs));
        }
        let (rows, inputs) = self.gpu_experts.as_ref().expect("made above");
        let resident = bench.resident_gemv(rows, inputs)?;
        resident.trial(1)?;
        for (m, (matrix, x)) in rows.iter().zip(inputs).enumerate() {
            let sample = matrix.rows.min(256);
            let gpu = resident.y(m, sample)?;
            let cpu: Vec<f32> = (0..sample).map(|r| matrix.row_dot(x, r)).collect();
            let scale = cpu
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()))
                .max(f32::MIN_POSITIVE);
            if let Some(r) = (0..sample).find(|&r| (gpu[r] - cpu[r]).abs() > 1e-3 * scale) {
                return Err(format!(
                    "the PTX kernel's row {r} is {} where the CPU kernel's is {}; a kernel bug, please report it",
                    gpu[r], cpu[r]
                ));
            }
        }
        let bytes = resident.bytes() as f64;
        let step = format!("gpus[{g}]: resident GEMV");
        let (spread, passes) = self.repeat(&step, budget, |passes| {
            Ok(bytes * passes as f64 / resident.trial(passes)?)
        })?;
        let rate = round_rate(spread.median);
        self.doc.profile.gpus[g].gemv_bandwidth = rate;
        let what = format!(
            "PTX {} GEMV over {} of {} in device memory, {passes} passes a trial, timed with events",
            packing.name(),
            Bytes(resident.bytes()),
            self.source.label
        );
        self.record(
            &field("gpus", g, "gemv_bandwidth"),
            rate_text(rate),
            &spread,
            true,
            what,
        );
        Ok(())
    }
}

/// A seeded input vector for each matrix.
fn inputs_for(rows: &[PackedRows]) -> Vec<QuantizedInput> {
    rows.iter()
        .enumerate()
        .map(|(i, m)| QuantizedInput::seeded(m.cols, m.packing, 11 + i as u64))
        .collect()
}

/// `y = W x` for every matrix, the rows of each split evenly over one
/// thread per CPU of `cpus`, each pinned to its CPU; the sum of `y`.
fn parallel_gemv(rows: &[PackedRows], inputs: &[QuantizedInput], cpus: &[u32]) -> f64 {
    let threads = cpus.len().max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let cpu = cpus.get(t).copied();
                scope.spawn(move || {
                    if let Some(cpu) = cpu {
                        // Unpinned where refused: still a thread of the run.
                        system::pin_to_cpu(cpu);
                    }
                    rows.iter()
                        .zip(inputs)
                        .map(|(m, x)| {
                            let share = m.rows * t / threads..m.rows * (t + 1) / threads;
                            m.sum_rows(x, share)
                        })
                        .sum::<f64>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a GEMV thread"))
            .sum()
    })
}

/// One projection of an expert in a checkpoint: its weights and scales.
struct Projection {
    weights: Extent,
    scales: Extent,
    rows: usize,
    cols: usize,
}

/// Where the expert bytes timed come from: a checkpoint's experts, or
/// generated ones of a model's geometry.
struct ExpertSource {
    /// For comments: `generated experts of DeepSeek-V2-Lite`.
    label: String,
    /// (rows, cols) of each projection of one expert.
    shapes: Vec<(usize, usize)>,
    cpu: Packing,
    gpu: Packing,
    /// The checkpoint's experts, each a list of projections, and its shards.
    checkpoint: Option<(Vec<Vec<Projection>>, Vec<PathBuf>)>,
}

impl ExpertSource {
    fn new(options: &CalibrateOptions) -> Result<ExpertSource, ProfileError> {
        if let Some(dir) = &options.checkpoint {
            let checkpoint = Checkpoint::open(dir)?;
            if let Some(packing) = Packing::of(checkpoint.config.format) {
                return ExpertSource::of_checkpoint(&checkpoint, packing);
            }
            // BF16 experts: the kernels run packed formats, so generate
            // int4 experts of the checkpoint's geometry.
            let int4 = Packing {
                bits: 4,
                group: FALLBACK_INT4_GROUP,
            };
            let c = &checkpoint.config;
            return Ok(ExpertSource {
                label: format!(
                    "generated experts of {}'s geometry (its experts are BF16)",
                    dir.display()
                ),
                shapes: expert_shapes(c.hidden, c.expert_intermediate),
                cpu: int4,
                gpu: int4,
                checkpoint: None,
            });
        }
        let default_model;
        let model = match &options.model {
            Some(m) => m,
            None => {
                default_model =
                    Model::from_yaml_str(defaults::MODEL, Path::new(defaults::MODEL_NAME))?;
                &default_model
            }
        };
        let d = &model.description;
        let tier = |name: &str| match d.formats.get(name) {
            Some(&FormatSize::Packed { bits, group }) if bits == 4 || bits == 8 => Packing {
                bits,
                group: group as usize,
            },
            _ => Packing {
                bits: 4,
                group: FALLBACK_INT4_GROUP,
            },
        };
        Ok(ExpertSource {
            label: format!("generated experts of {}", model.name()),
            shapes: expert_shapes(d.hidden as usize, d.expert_intermediate as usize),
            cpu: tier(&d.tiers.ram),
            gpu: tier(&d.tiers.gpu),
            checkpoint: None,
        })
    }

    fn of_checkpoint(
        checkpoint: &Checkpoint,
        packing: Packing,
    ) -> Result<ExpertSource, ProfileError> {
        let specs: BTreeMap<String, family::TensorSpec> = family::tensors(&checkpoint.config)
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        let experts: Vec<Vec<Projection>> = checkpoint
            .objects
            .iter()
            .filter(|(key, _)| matches!(key, crate::identity::ObjectKey::Expert { .. }))
            .map(|(_, extents)| {
                extents
                    .iter()
                    .filter_map(|w| {
                        let module = w.tensor.strip_suffix(".weight")?;
                        let scales = extents
                            .iter()
                            .find(|s| s.tensor == format!("{module}.scales"))?;
                        let shape = &specs.get(&w.tensor)?.shape;
                        Some(Projection {
                            weights: w.clone(),
                            scales: scales.clone(),
                            rows: shape[0],
                            cols: shape[1] * 8 / packing.bits as usize,
                        })
                    })
                    .collect()
            })
            .collect();
        let shapes: Vec<(usize, usize)> = experts
            .first()
            .map(|e| e.iter().map(|p| (p.rows, p.cols)).collect())
            .unwrap_or_default();
        if shapes.is_empty() {
            return Err(ProfileError::input(
                &checkpoint.dir,
                "has no packed expert weights with their scales",
                "give a checkpoint with int8 or int4 experts (gen-checkpoint --dtype int4)",
            ));
        }
        Ok(ExpertSource {
            label: format!("experts of {}", checkpoint.dir.display()),
            shapes,
            cpu: packing,
            gpu: packing,
            checkpoint: Some((experts, checkpoint.shards.clone())),
        })
    }

    fn shards(&self) -> &[PathBuf] {
        self.checkpoint.as_ref().map_or(&[], |(_, s)| s.as_slice())
    }

    /// Whole experts in `packing`, about `target_bytes` of them, as one
    /// matrix per input width: the checkpoint's experts (repeated when it
    /// has fewer), else generated bytes. In `pool`'s memory where given.
    fn expert_rows(
        &self,
        packing: Packing,
        target_bytes: u64,
        pool: Option<&Arc<HostPool>>,
    ) -> Result<Vec<PackedRows>, ProfileError> {
        let mut rows_per_expert: BTreeMap<usize, usize> = BTreeMap::new();
        for &(rows, cols) in &self.shapes {
            *rows_per_expert.entry(cols).or_default() += rows;
        }
        let expert_bytes: u64 = rows_per_expert
            .iter()
            .map(|(&cols, &rows)| {
                (rows * (packing.row_bytes(cols) + cols / packing.group * 2)) as u64
            })
            .sum();
        let experts = (target_bytes / expert_bytes).max(1) as usize;
        let mut matrices: Vec<PackedRows> = rows_per_expert
            .iter()
            .map(|(&cols, &rows)| PackedRows::zeroed(packing, cols, rows * experts, pool))
            .collect();
        match &self.checkpoint {
            Some((all, _)) => {
                let mut at = vec![0usize; matrices.len()];
                for projection in all.iter().cycle().take(experts).flatten() {
                    let m = rows_per_expert
                        .keys()
                        .position(|&c| c == projection.cols)
                        .expect("shapes of every expert");
                    let weights = read_extent(&projection.weights)?;
                    let scales = read_extent(&projection.scales)?;
                    at[m] += matrices[m].copy_rows(at[m], &weights, &scales);
                }
            }
            None => {
                for (i, m) in matrices.iter_mut().enumerate() {
                    m.fill_generated(0x9e37 + i as u64);
                }
            }
        }
        Ok(matrices)
    }
}

/// One expert's projections: gate and up (`intermediate` rows of `hidden`
/// features each), down (`hidden` rows of `intermediate` features).
fn expert_shapes(hidden: usize, intermediate: usize) -> Vec<(usize, usize)> {
    vec![
        (intermediate, hidden),
        (intermediate, hidden),
        (hidden, intermediate),
    ]
}

fn read_extent(e: &Extent) -> Result<Vec<u8>, ProfileError> {
    let mut bytes = vec![0u8; e.len as usize];
    std::fs::File::open(&e.shard)
        .and_then(|f| f.read_exact_at(&mut bytes, e.offset))
        .map_err(|err| {
            ProfileError::input(
                &e.shard,
                format!("reading tensor {} ({err})", e.tensor),
                "check the checkpoint's shards",
            )
        })?;
    Ok(bytes)
}

/// A file of seeded bytes written to time a drive, removed on drop.
struct TemporaryFile {
    path: PathBuf,
    bytes: u64,
}

impl TemporaryFile {
    /// Writes `bytes` of incompressible data under `dir` and syncs them to
    /// the drive; `Err` says why not (no room, not writable).
    fn write(dir: &Path, bytes: u64) -> Result<TemporaryFile, String> {
        let free = free_bytes(dir)
            .ok_or_else(|| format!("cannot tell the free space of {}", dir.display()))?;
        if free < 2 * bytes {
            return Err(format!(
                "{} has {} free; timing needs a {} temporary file and as much to spare",
                dir.display(),
                Bytes(free),
                Bytes(bytes)
            ));
        }
        let path = dir.join(format!(".residency-calibrate-{}.tmp", std::process::id()));
        let file = TemporaryFile { path, bytes };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file.path)
            .map_err(|e| {
                format!(
                    "cannot write {} ({e}); give --model-dir a writable directory on the drive",
                    file.path.display()
                )
            })?;
        let mut piece = vec![0u8; SEQUENTIAL_READ_BYTES];
        let mut written = 0u64;
        while written < bytes {
            fill_random(&mut piece, written);
            std::io::Write::write_all(&mut out, &piece)
                .map_err(|e| format!("writing {} ({e})", file.path.display()))?;
            written += piece.len() as u64;
        }
        out.sync_all()
            .map_err(|e| format!("syncing {} ({e})", file.path.display()))?;
        Ok(file)
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bytes free to this user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is valid plain data for the kernel to
    // fill; `path` is NUL-terminated and outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(path.as_ptr(), &mut stat) } == 0)
        .then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{generate, GenDtype, GenOptions};
    use crate::profile::detect::{detect, DetectOptions};

    fn options(dir: &Path, seconds: f64) -> CalibrateOptions {
        CalibrateOptions {
            seconds,
            checkpoint: None,
            model: None,
            model_dir: Some(dir.to_path_buf()),
        }
    }

    #[test]
    fn this_machine_calibrates_in_the_time_given() {
        let dir = tempfile::tempdir().unwrap();
        let doc = detect(&DetectOptions {
            model_dir: dir.path().to_path_buf(),
        })
        .unwrap();
        let started = Instant::now();
        let c = calibrate(doc, &options(dir.path(), 1.5), &|_, _| {}).unwrap();
        // Setup (1 GiB at most of generated experts, the temporary file)
        // comes on top of the budget.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        let p = &c.doc.profile;
        assert!(p.numa.iter().all(|n| n.gemv_bandwidth.0 > 0.0));
        let gemv = c.doc.origin("numa[0].gemv_bandwidth").unwrap();
        assert!(
            gemv.starts_with("measured: median") && gemv.contains("trials ["),
            "{gemv}"
        );
        if p.drives.is_empty() {
            assert!(c.measured.len() == p.numa.len(), "{:?}", c.measured);
        } else {
            // Measured, or a note says why not (a file system without O_DIRECT).
            let timed = c.doc.origin("drives[0].read_latency").unwrap_or("");
            assert!(
                timed.starts_with("measured:") || !c.notes.is_empty(),
                "{:?}",
                c.notes
            );
        }
        for m in &c.measured {
            let s = m.spread.unwrap();
            assert!(
                s.min > 0.0 && s.min <= s.median && s.median <= s.max && s.count >= MIN_TRIALS,
                "{m}"
            );
        }
        // The temporary file is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // It reads back.
        ProfileDoc::parse(&c.doc.to_yaml(), Path::new("box.yaml")).unwrap();
    }

    #[test]
    fn a_checkpoint_s_experts_and_shards_are_what_is_timed() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("mixtral-tiny.yaml");
        // Groups of 64 int4 values: 32 bytes, the AVX2 kernel's vector.
        std::fs::write(
            &yaml,
            "name: Mixtral-tiny\nlayers: 2\nmoe_layers: \"0..=1\"\nexperts: 4\ntop_k: 2\nhidden: 128\n\
             expert_intermediate: 64\nformats:\n  int4: { bits: 4, group: 64 }\n\
             tiers: { gpu: int4, ram: int4, disk: int4 }\n\
             trunk:\n  - { name: attn, layers: \"0..=1\", bytes: 163840, stage: dense }\n",
        )
        .unwrap();
        let model = Model::from_yaml_file(&yaml).unwrap();
        let ckpt = dir.path().join("ckpt");
        let gen = GenOptions {
            dtype: GenDtype::Int4,
            ..GenOptions::default()
        };
        generate(&model, &yaml, &ckpt, &gen).unwrap();
        let doc = detect(&DetectOptions {
            model_dir: ckpt.clone(),
        })
        .unwrap();
        let mut opts = options(&ckpt, 1.0);
        opts.checkpoint = Some(ckpt.clone());
        opts.model_dir = None;
        let c = calibrate(doc, &opts, &|_, _| {}).unwrap();
        let gemv = c.doc.origin("numa[0].gemv_bandwidth").unwrap();
        assert!(
            gemv.contains(&format!("int4 experts of {}", ckpt.display())),
            "{gemv}"
        );
        if let Some(read) = c
            .doc
            .origin("drives[0].read_bandwidth")
            .filter(|o| o.starts_with("measured"))
        {
            assert!(read.contains("1 shard(s) of the checkpoint"), "{read}");
        }
        // The checkpoint's experts, repeated: 4 x 2 experts of 3 projections.
        let source = ExpertSource::new(&opts).unwrap();
        let rows = source.expert_rows(source.cpu, 1 << 20, None).unwrap();
        assert_eq!(rows.iter().map(|m| m.cols).collect::<Vec<_>>(), [64, 128]);
        let first = &source.checkpoint.as_ref().unwrap().0[0];
        let weights = read_extent(&first[0].weights).unwrap();
        let matrix = rows.iter().find(|m| m.cols == first[0].cols).unwrap();
        assert_eq!(&matrix.weights()[..weights.len()], &weights[..]);
    }

    #[test]
    fn bad_budgets_and_directories_are_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let doc = detect(&DetectOptions {
            model_dir: dir.path().to_path_buf(),
        })
        .unwrap();
        let e = calibrate(doc.clone(), &options(dir.path(), 0.0), &|_, _| {})
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--seconds: is 0; give a positive number of seconds, e.g. --seconds 20"
        );
        let absent = dir.path().join("absent");
        let e = calibrate(doc, &options(&absent, 1.0), &|_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{}: is not a directory", absent.display())),
            "{e}"
        );
    }
}

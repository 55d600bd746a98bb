//! `residency bench` on the CPU (issue 16, first slice): decode tokens at
//! batch 1 doing the work the cost model prices (design §4), each piece
//! where the plan put it, timed beside `Instance::evaluate` of the plan.
//!
//! Per stage of the instance, in order: the stage's trunk components in
//! RAM, then (experts stages) the token's routed experts, `top_k` distinct
//! ones drawn by use rate with a fixed seed. RAM residents are computed on
//! the bytes the executor's store holds (the plan applied by
//! `runtime::apply`); a disk-placed expert is read afresh from the
//! checkpoint by the store's own reader (O_DIRECT unless another backend
//! is chosen) on a reader thread while the stage's residents compute, and
//! computed once read. The GEMVs of a stage on one node run as one
//! fork-join on that node's pinned threads (`gemv::NodeThreads`); the
//! residents' first, then the streamed experts'.
//!
//! Trunk components are BF16 in a checkpoint (only routed experts are
//! packed) and the CPU kernel runs packed rows only: each RAM-placed
//! component's GEMV runs over generated rows in the experts' packing, as
//! many whole rows of `hidden` features as fit in its bytes, in its node's
//! memory. That is real bytes streamed by the real kernel, the work the
//! cost model prices for it, but not the checkpoint's values; the report
//! says so.
//!
//! Not yet: GPUs (a plan that puts anything on a GPU is refused), several
//! nodes at once, several reads in flight, routing traces.

use crate::calibrate::experts::{projections, tensor_specs};
use crate::gemv::{NodeThreads, PackedRows, PackedView, Packing, QuantizedInput};
use crate::system;
use residency_cache::policy::ObjectIndex;
use residency_cache::sim::synthetic::Rng;
use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::error::PlannerError;
use residency_core::model::StageKind;
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::apply::Applied;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::identity::ObjectKey;
use residency_runtime::storage::HostPool;
use residency_runtime::store::{Loader, ObjectBytes, StoreError};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    pub tokens: usize,
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A plan or checkpoint bench cannot run, in the planner's one line.
    #[error(transparent)]
    Input(#[from] PlannerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("reading a disk-placed expert: {0}")]
    Read(String),
    #[error("starting a NUMA node's GEMV threads: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
}

fn input(file: &Path, place: &str, problem: String, fix: &str) -> BenchError {
    PlannerError::input(file, place, problem, fix).into()
}

/// Measured beside predicted, per token, for a stage kind or a resource.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Measured {
    /// `dense`, `experts`, `head`; or `cpu:N`, `drive:N`.
    pub name: String,
    pub measured_seconds: f64,
    /// The cost model's: stage seconds summed over the stages of the kind;
    /// for a resource its own work (`C` without felt I/O, `D`).
    pub predicted_seconds: f64,
    /// Bytes the kernel streamed (stages, CPU) or the drive read.
    pub bytes_per_token: f64,
    /// The same, use rate times bytes, as the cost model counts it.
    pub predicted_bytes_per_token: f64,
}

/// What `residency bench --json` writes (`schemas/bench-output.schema.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    pub tokens: usize,
    pub seed: u64,
    pub tok_per_s: f64,
    pub predicted_tok_per_s: f64,
    pub p50_token_seconds: f64,
    pub p99_token_seconds: f64,
    pub predicted_token_seconds: f64,
    /// Per stage kind, summed over layers.
    pub stages: Vec<Measured>,
    /// Per CPU node and drive.
    pub resources: Vec<Measured>,
    /// Sum of every GEMV output, in a fixed order: equal across placements
    /// of the same checkpoint, heat and seed.
    pub checksum: f64,
    pub notes: Vec<String>,
}

/// The packing of the checkpoint's experts, unless the plan or the
/// checkpoint asks for work this slice cannot run: anything on a GPU, or
/// BF16 experts.
pub fn check_runnable(
    inst: &Instance,
    placement: &[usize],
    plan_path: &Path,
    checkpoint: &Checkpoint,
) -> Result<Packing, BenchError> {
    let on_gpu = placement
        .iter()
        .filter(|&&q| matches!(inst.places[q], Place::Gpu(_)))
        .count();
    if on_gpu > 0 {
        return Err(input(
            plan_path,
            "places",
            format!("{on_gpu} objects are on a GPU, and bench runs CPU work only (no GPU path yet)"),
            "plan with a CPU-only profile, e.g. one with `gpus: []` (`residency profile detect` on this machine)",
        ));
    }
    let packing = Packing::of(checkpoint.config.format).ok_or_else(|| {
        input(
            &checkpoint.dir,
            "config.json",
            "its experts are BF16, which the CPU kernel does not run".into(),
            "generate the checkpoint with `gen-checkpoint --dtype int4` (or int8)",
        )
    })?;
    if let Some(why) = packing.unfit_for(checkpoint.config.hidden) {
        return Err(input(
            &checkpoint.dir,
            "config.json",
            format!("the CPU kernel cannot run its rows: {why}"),
            "generate the checkpoint with a group the kernel runs (a power-of-two multiple of 32 features for int4)",
        ));
    }
    Ok(packing)
}

/// Where one projection lies in an object's bytes (its extents one after
/// another, as the store's loader reads them).
struct ProjectionAt {
    weights: Range<usize>,
    scales: Range<usize>,
    rows: usize,
    cols: usize,
}

impl ProjectionAt {
    fn view<'a>(&self, packing: Packing, bytes: &'a [u8]) -> PackedView<'a> {
        PackedView {
            packing,
            cols: self.cols,
            rows: self.rows,
            weights: &bytes[self.weights.clone()],
            scales: &bytes[self.scales.clone()],
        }
    }
}

/// Per instance object: what the bench computes for it.
enum Work {
    /// Not computed: on a disk (read when drawn), or a KV group.
    None,
    /// An expert: its projections, and its store index.
    Expert {
        object: ObjectIndex,
        at: Vec<ProjectionAt>,
    },
    /// A trunk component in RAM: generated rows of its bytes.
    Generated(PackedRows),
}

/// Seconds and bytes of one token, or of all of them.
#[derive(Default, Clone)]
struct Tally {
    stage_seconds: [f64; 3],
    stage_bytes: [f64; 3],
    cpu_seconds: Vec<f64>,
    cpu_bytes: Vec<f64>,
    drive_seconds: Vec<f64>,
    drive_bytes: Vec<f64>,
}

const KINDS: [(StageKind, &str); 3] = [
    (StageKind::Dense, "dense"),
    (StageKind::Experts, "experts"),
    (StageKind::Head, "head"),
];

fn kind_index(kind: StageKind) -> usize {
    KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(2)
}

/// Serves `options.tokens` tokens of `placement` (`plan_path`'s, checked
/// by `check_runnable`) from `applied` (the plan applied to `checkpoint`).
pub fn bench(
    inst: &Instance,
    placement: &[usize],
    plan_path: &Path,
    checkpoint: &Checkpoint,
    applied: &Applied,
    options: &BenchOptions,
) -> Result<BenchReport, BenchError> {
    let packing = check_runnable(inst, placement, plan_path, checkpoint)?;
    let r = &inst.resources;
    let mut notes = Vec::new();
    let machine = system::numa_nodes(&mut notes);
    let mut threads = Vec::new();
    for n in 0..r.numa_nodes() {
        let Some(node) = machine.get(n) else {
            return Err(input(
                plan_path,
                &format!("ram:{n}"),
                format!("this machine has {} NUMA node(s)", machine.len()),
                "bench on the machine the profile describes",
            ));
        };
        threads.push((NodeThreads::new(&node.core_cpus)?, node.sysfs_id));
    }
    let work = prepare(
        inst,
        placement,
        checkpoint,
        applied,
        packing,
        &threads,
        options.seed,
    )?;
    // Held for the run: the plan pins residents, and an engine maps its
    // weights once at load.
    let mut leases = BTreeMap::new();
    for (o, w) in work.iter().enumerate() {
        if let (Work::Expert { object, .. }, Place::Ram(_)) = (w, inst.places[placement[o]]) {
            leases.insert(o, applied.store.acquire(*object)?);
        }
    }
    let hidden = checkpoint.config.hidden;
    let mut inputs: BTreeMap<usize, QuantizedInput> = BTreeMap::new();
    for w in &work {
        let cols: Vec<usize> = match w {
            Work::Expert { at, .. } => at.iter().map(|p| p.cols).collect(),
            Work::Generated(m) => vec![m.cols],
            Work::None => vec![],
        };
        for c in cols.into_iter().chain([hidden]) {
            inputs
                .entry(c)
                .or_insert_with(|| QuantizedInput::seeded(c, packing, options.seed ^ c as u64));
        }
    }
    let kernel = Kernel {
        threads: &threads,
        packing,
        inputs: &inputs,
    };
    let mut rng = Rng(options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut total = Tally::new(inst);
    let mut token_seconds = Vec::with_capacity(options.tokens);
    let mut checksum = 0f64;
    let mut y = Vec::new();
    for _ in 0..options.tokens {
        let started = Instant::now();
        for stage in &inst.stages {
            let stage_started = Instant::now();
            let kind = kind_index(stage.kind);
            let drawn = match stage.objects.first().map(|&o| &inst.objects[o].kind) {
                Some(ObjectKind::Expert { moe, .. }) => {
                    let rates: Vec<f64> = inst.expert_ids[*moe]
                        .iter()
                        .map(|&o| inst.objects[o].use_rate)
                        .collect();
                    draw(&mut rng, &rates, checkpoint.config.top_k)
                        .into_iter()
                        .map(|e| inst.expert_ids[*moe][e])
                        .collect()
                }
                _ => Vec::new(),
            };
            // The stage's outputs in a fixed order (trunk, then the experts
            // as drawn), whatever tier each comes from.
            let trunk = stage
                .objects
                .iter()
                .filter(|&&o| inst.objects[o].is_trunk());
            let mut first_slot = BTreeMap::new();
            let mut slots = 0;
            for &o in trunk.chain(&drawn) {
                first_slot.insert(o, slots);
                slots += work[o].outputs();
            }
            let mut sums = vec![0f64; slots];
            let streamed: Vec<(usize, usize, ObjectIndex)> = drawn
                .iter()
                .filter_map(|&o| match (inst.places[placement[o]], &work[o]) {
                    (Place::Disk(d), Work::Expert { object, .. }) => Some((o, d, *object)),
                    _ => None,
                })
                .collect();
            std::thread::scope(|scope| -> Result<(), BenchError> {
                // The drive reads the stage's streamed experts while the
                // CPU computes its residents, as a pipelined engine
                // overlaps them (`io_overlaps_compute`).
                let reader = (!streamed.is_empty())
                    .then(|| scope.spawn(|| read_all(&applied.loader, &streamed)));
                let mut resident = Vec::new();
                for &o in first_slot.keys() {
                    if let Place::Ram(n) = inst.places[placement[o]] {
                        resident.push(Gemv {
                            slot: first_slot[&o],
                            node: n,
                            work: &work[o],
                            bytes: leases.get(&o).and_then(|l| l.host()),
                        });
                    }
                }
                kernel.run(&resident, &mut sums, &mut total, kind, &mut y);
                let Some(reader) = reader else {
                    return Ok(());
                };
                let read = reader.join().expect("the reader thread")?;
                let mut fresh = Vec::new();
                for ((o, d, _), (seconds, bytes)) in streamed.iter().zip(&read) {
                    total.drive_seconds[*d] += seconds;
                    total.drive_bytes[*d] += bytes.len() as f64;
                    fresh.push(Gemv {
                        slot: first_slot[o],
                        node: r.drive_numa[*d],
                        work: &work[*o],
                        bytes: bytes.host(),
                    });
                }
                kernel.run(&fresh, &mut sums, &mut total, kind, &mut y);
                Ok(())
            })?;
            checksum += sums.iter().sum::<f64>();
            total.stage_seconds[kind] += stage_started.elapsed().as_secs_f64();
        }
        token_seconds.push(started.elapsed().as_secs_f64());
    }
    if inst
        .trunk_ids
        .iter()
        .any(|&o| matches!(work[o], Work::Generated(_)))
    {
        notes.push(format!(
            "trunk components are BF16 in the checkpoint, which the CPU kernel does not run: their GEMVs stream generated {} rows of their bytes (whole rows of {hidden} features)",
            packing.name()
        ));
    }
    for (n, (t, node)) in threads.iter().enumerate() {
        notes.push(format!(
            "ram:{n}: {} GEMV thread(s) pinned to node {node}",
            t.threads()
        ));
    }
    Ok(report(
        inst,
        placement,
        options,
        &total,
        token_seconds,
        checksum,
        notes,
    ))
}

impl Tally {
    fn new(inst: &Instance) -> Tally {
        let r = &inst.resources;
        Tally {
            cpu_seconds: vec![0.0; r.numa_nodes()],
            cpu_bytes: vec![0.0; r.numa_nodes()],
            drive_seconds: vec![0.0; r.drives()],
            drive_bytes: vec![0.0; r.drives()],
            ..Tally::default()
        }
    }
}

impl Work {
    /// GEMV outputs it adds to the checksum: one per matrix.
    fn outputs(&self) -> usize {
        match self {
            Work::None => 0,
            Work::Expert { at, .. } => at.len(),
            Work::Generated(_) => 1,
        }
    }
}

/// An object's GEMVs on `node`: its matrices' outputs go to checksum
/// slots from `slot` on; `bytes` are an expert's, in host memory.
struct Gemv<'a> {
    slot: usize,
    node: usize,
    work: &'a Work,
    bytes: Option<&'a [u8]>,
}

/// The CPU kernel of the run: each node's threads, the experts' packing,
/// an input vector per input width.
struct Kernel<'a> {
    threads: &'a [(NodeThreads, u32)],
    packing: Packing,
    inputs: &'a BTreeMap<usize, QuantizedInput>,
}

impl Kernel<'_> {
    /// Runs `list` node by node, each node's share as one
    /// `NodeThreads::gemv`, timing it; each matrix's output sum goes to its
    /// slot of `sums`.
    fn run(
        &self,
        list: &[Gemv],
        sums: &mut [f64],
        total: &mut Tally,
        kind: usize,
        y: &mut Vec<f32>,
    ) {
        let (packing, inputs) = (self.packing, self.inputs);
        for (n, (node_threads, _)) in self.threads.iter().enumerate() {
            let mut slots = Vec::new();
            let mut matrices: Vec<(PackedView, &QuantizedInput)> = Vec::new();
            for g in list.iter().filter(|g| g.node == n) {
                match (g.work, g.bytes) {
                    (Work::Generated(m), _) => matrices.push((m.view(), &inputs[&m.cols])),
                    (Work::Expert { at, .. }, Some(bytes)) => matrices.extend(
                        at.iter()
                            .map(|p| (p.view(packing, bytes), &inputs[&p.cols])),
                    ),
                    _ => continue,
                }
                slots.extend(g.slot..g.slot + g.work.outputs());
            }
            if matrices.is_empty() {
                continue;
            }
            y.resize(matrices.iter().map(|(m, _)| m.rows).sum(), 0f32);
            let t = Instant::now();
            node_threads.gemv(&matrices, y);
            total.cpu_seconds[n] += t.elapsed().as_secs_f64();
            let mut at = 0;
            for (slot, (m, _)) in slots.into_iter().zip(&matrices) {
                sums[slot] = y[at..at + m.rows].iter().map(|&v| v as f64).sum();
                at += m.rows;
                total.cpu_bytes[n] += m.bytes() as f64;
                total.stage_bytes[kind] += m.bytes() as f64;
            }
        }
    }
}

/// A streamed expert read: the seconds it took, and its bytes.
type FreshRead = (f64, Box<dyn ObjectBytes>);

/// Reads each streamed expert afresh with the store's reader, one after
/// another: the seconds each read took, and its bytes.
fn read_all(
    loader: &CheckpointLoader,
    streamed: &[(usize, usize, ObjectIndex)],
) -> Result<Vec<FreshRead>, BenchError> {
    streamed
        .iter()
        .map(|&(_, _, object)| {
            let t = Instant::now();
            let bytes = loader.load(object).map_err(BenchError::Read)?;
            Ok((t.elapsed().as_secs_f64(), bytes))
        })
        .collect()
}

/// Per instance object, its work: expert layouts (checked against the
/// store), generated rows for RAM-placed trunk components.
fn prepare(
    inst: &Instance,
    placement: &[usize],
    checkpoint: &Checkpoint,
    applied: &Applied,
    packing: Packing,
    threads: &[(NodeThreads, u32)],
    seed: u64,
) -> Result<Vec<Work>, BenchError> {
    let specs = tensor_specs(checkpoint);
    let moe_layers = checkpoint.config.moe_layers();
    let hidden = checkpoint.config.hidden;
    let row_bytes = packing.row_bytes(hidden) + hidden / packing.group * 2;
    let pools: Vec<_> = threads
        .iter()
        .map(|(_, node)| HostPool::new(Some(*node), 0))
        .collect();
    let mut work = Vec::with_capacity(inst.objects.len());
    for (o, object) in inst.objects.iter().enumerate() {
        let key = match &object.kind {
            ObjectKind::Expert { moe, expert } => ObjectKey::Expert {
                layer: moe_layers[*moe] as u32,
                expert: *expert as u32,
            },
            ObjectKind::Trunk { .. } => {
                let Place::Ram(n) = inst.places[placement[o]] else {
                    work.push(Work::None);
                    continue;
                };
                let rows = object.ram_bytes as usize / row_bytes;
                let mut m = PackedRows::zeroed(packing, hidden, rows, Some(&pools[n]));
                // Seeded by object, not by place: the same rows wherever
                // the plan puts the component.
                m.fill_generated(seed ^ (o as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
                work.push(Work::Generated(m));
                continue;
            }
            ObjectKind::KvGroup { .. } => {
                work.push(Work::None);
                continue;
            }
        };
        let object = applied.index[&key];
        let extents = applied.loader.extents(object);
        let offset = |tensor: &str| {
            let i = extents.iter().position(|e| e.tensor == tensor).unwrap_or(0);
            extents[..i].iter().map(|e| e.len as usize).sum::<usize>()
        };
        let at = projections(extents, &specs, packing)
            .into_iter()
            .map(|p| {
                let (w, s) = (offset(&p.weights.tensor), offset(&p.scales.tensor));
                ProjectionAt {
                    weights: w..w + p.weights.len as usize,
                    scales: s..s + p.scales.len as usize,
                    rows: p.rows,
                    cols: p.cols,
                }
            })
            .collect();
        work.push(Work::Expert { object, at });
    }
    Ok(work)
}

/// `k` distinct indices drawn one after another, each with probability
/// proportional to its weight among those not yet drawn (uniformly among
/// them once the weights left are all zero). For uniform heat every expert
/// is in the draw with probability `k / n`, its use rate; for skewed heat
/// the hottest are in it a little less often than their rates say.
fn draw(rng: &mut Rng, weights: &[f64], k: usize) -> Vec<usize> {
    let mut left: Vec<f64> = weights.iter().map(|w| w.max(0.0)).collect();
    let mut taken = vec![false; left.len()];
    let mut out = Vec::with_capacity(k);
    for _ in 0..k.min(left.len()) {
        let sum: f64 = left.iter().sum();
        let pick = if sum > 0.0 {
            let mut target = rng.unit() * sum;
            let mut pick = None;
            for (i, &w) in left.iter().enumerate() {
                if w > 0.0 {
                    pick = Some(i);
                    if target < w {
                        break;
                    }
                    target -= w;
                }
            }
            pick.expect("a positive weight")
        } else {
            let free: Vec<usize> = (0..left.len()).filter(|&i| !taken[i]).collect();
            free[(rng.unit() * free.len() as f64) as usize % free.len()]
        };
        taken[pick] = true;
        left[pick] = 0.0;
        out.push(pick);
    }
    out
}

/// The report: measured per token beside `evaluate` of the placement.
fn report(
    inst: &Instance,
    placement: &[usize],
    options: &BenchOptions,
    total: &Tally,
    mut token_seconds: Vec<f64>,
    checksum: f64,
    notes: Vec<String>,
) -> BenchReport {
    let r = &inst.resources;
    let eval = inst.evaluate(placement);
    let tokens = options.tokens.max(1) as f64;
    let per_token = |v: f64| v / tokens;
    // Bytes the cost model streams per token: use rate x bytes of every
    // object in RAM or on a disk, by stage kind, CPU node and drive.
    let mut stage_bytes = [0f64; 3];
    let mut cpu_bytes = vec![0f64; r.numa_nodes()];
    let mut drive_bytes = vec![0f64; r.drives()];
    for (o, object) in inst.objects.iter().enumerate() {
        let kind = kind_index(inst.stages[object.stage].kind);
        match inst.places[placement[o]] {
            Place::Ram(n) if !object.is_kv() => {
                let b = object.use_rate * object.ram_bytes as f64;
                stage_bytes[kind] += b;
                cpu_bytes[n] += b;
            }
            Place::Disk(d) => {
                let b = object.use_rate * object.disk_bytes as f64;
                stage_bytes[kind] += b;
                cpu_bytes[r.drive_numa[d]] += b;
                drive_bytes[d] += b;
            }
            _ => {}
        }
    }
    let stages = KINDS
        .iter()
        .enumerate()
        .map(|(k, (kind, name))| Measured {
            name: name.to_string(),
            measured_seconds: per_token(total.stage_seconds[k]),
            predicted_seconds: inst
                .stages
                .iter()
                .zip(&eval.stage_seconds)
                .filter(|(s, _)| s.kind == *kind)
                .map(|(_, t)| t)
                .sum(),
            bytes_per_token: per_token(total.stage_bytes[k]),
            predicted_bytes_per_token: stage_bytes[k],
        })
        .collect();
    let cpus = (0..r.numa_nodes()).map(|n| Measured {
        name: format!("cpu:{n}"),
        measured_seconds: per_token(total.cpu_seconds[n]),
        predicted_seconds: eval.loads.iter().map(|l| l.cpu[n]).sum(),
        bytes_per_token: per_token(total.cpu_bytes[n]),
        predicted_bytes_per_token: cpu_bytes[n],
    });
    let drives = (0..r.drives()).map(|d| Measured {
        name: format!("drive:{d}"),
        measured_seconds: per_token(total.drive_seconds[d]),
        predicted_seconds: eval.loads.iter().map(|l| l.drive[d]).sum(),
        bytes_per_token: per_token(total.drive_bytes[d]),
        predicted_bytes_per_token: drive_bytes[d],
    });
    let all: f64 = token_seconds.iter().sum();
    token_seconds.sort_by(f64::total_cmp);
    // Nearest rank.
    let quantile = |q: f64| {
        let rank = ((q * token_seconds.len() as f64).ceil() as usize).max(1);
        token_seconds.get(rank - 1).copied().unwrap_or(0.0)
    };
    BenchReport {
        tokens: options.tokens,
        seed: options.seed,
        tok_per_s: if all > 0.0 { tokens / all } else { 0.0 },
        predicted_tok_per_s: 1.0 / eval.token_seconds,
        p50_token_seconds: quantile(0.5),
        p99_token_seconds: quantile(0.99),
        predicted_token_seconds: eval.token_seconds,
        stages,
        resources: cpus.chain(drives).collect(),
        checksum,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_distinct_experts_at_their_rates() {
        // Uniform weights: each of 4 experts in a top-2 draw half the time
        // (2 / 4), by symmetry.
        let mut rng = Rng(7);
        let mut seen = [0usize; 4];
        for _ in 0..20_000 {
            let d = draw(&mut rng, &[0.5; 4], 2);
            assert_eq!(d.len(), 2);
            assert_ne!(d[0], d[1]);
            d.iter().for_each(|&e| seen[e] += 1);
        }
        for s in seen {
            assert!((s as f64 / 20_000.0 - 0.5).abs() < 0.02, "{seen:?}");
        }
        // Weight only on expert 3: drawn first always; the second uniformly
        // among the rest.
        let d = draw(&mut rng, &[0.0, 0.0, 0.0, 1.0], 2);
        assert_eq!(d[0], 3);
        assert!(d[1] < 3);
    }
}

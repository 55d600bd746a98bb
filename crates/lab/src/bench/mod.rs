//! `residency bench`: decode tokens at batch 1 doing the work
//! the cost model prices (design §4), each piece where the plan put it,
//! timed beside `Instance::evaluate` of the plan.
//!
//! Per stage of the instance, in order: the stage's trunk components, then
//! (experts stages) the token's routed experts: a routing trace's, or
//! `top_k` distinct ones drawn by use rate with a fixed seed. Residents are computed on the bytes the
//! executor's store holds (the plan applied by `runtime::apply`): on a GPU
//! by the PTX kernel over the card's copy (`gpu`), in RAM by the CPU kernel
//! on the node's pinned threads (`cpu`). A disk-placed expert is read
//! afresh from the checkpoint by the store's own reader (O_DIRECT unless
//! another backend is chosen) on a reader thread while the stage's
//! residents compute, and computed on the CPU as it lands. A stage's GPU work
//! is queued first and runs while the CPU works; the stage waits for each
//! card once.
//!
//! Trunk components are BF16 in a checkpoint (only routed experts are
//! packed) and the kernels run packed rows only: each component's GEMV
//! runs over generated rows in the experts' packing, as many whole rows of
//! `hidden` features as fit in its bytes, in its node's memory or on its
//! card. That is real bytes streamed by the real kernel, the work the
//! cost model prices for it, but not the checkpoint's values; the report
//! says so.
//!
//! Not yet: several reads in flight.

mod cpu;
mod gpu;
mod report;
mod setup;
mod stage;

use cpu::Kernel;
use report::report;
use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::error::PlannerError;
use residency_core::rng::Rng;
use residency_runtime::apply::Applied;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gemv::{Packing, GPU_BATCH};
use residency_runtime::gpu::gemv::CudaGemv;
use residency_runtime::store::StoreError;
use setup::{hold_residents, node_threads, open_cards, prepare, seeded_inputs};
use stage::{serve_tokens, Serving, Tally, Work};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub tokens: usize,
    pub seed: u64,
    /// Each token's routed experts, per MoE layer (expert indices of the
    /// layer), from a routing trace: `tokens` of them. `None`: drawn from
    /// the instance's use rates with `seed`.
    pub routes: Option<Vec<Vec<Vec<u32>>>>,
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
    /// A CUDA call that failed, in the device's words.
    #[error("{0}")]
    Gpu(String),
    #[error("starting a NUMA node's GEMV threads: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
}

fn input(file: &Path, place: &str, problem: String, fix: &str) -> BenchError {
    PlannerError::input(file, place, problem, fix).into()
}

/// Measured beside predicted, per token, for a stage kind or a resource.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Measured {
    /// `dense`, `experts`, `head`; or `gpu:N`, `cpu:N`, `drive:N`.
    pub name: String,
    pub measured_seconds: f64,
    /// The cost model's: stage seconds summed over the stages of the kind;
    /// for a resource its own time (`G` with its sync, `C` with its stage
    /// overhead and without felt I/O, `D`). A GPU's measured seconds are
    /// device time between the stage's events, without the wait.
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
    /// The cost model on the tokens bench ran: the mean over them of
    /// `Instance::routed_token_seconds`, each stage's max over resources
    /// of that token's own loads, as a run pays it. `predicted_tok_per_s`
    /// is the max of the expected loads, which undercounts where a stage's
    /// resources balance and routing moves work between them.
    pub predicted_on_routes_tok_per_s: f64,
    /// Per token, bench's own work on the critical path: each stage's time
    /// outside the calls and waits of its kernels (the launches, the CPU
    /// GEMVs, the waits for the cards and for the drives' reads), which the
    /// bare kernels do not pay.
    pub bench_overhead_seconds: f64,
    /// Per stage kind, summed over layers.
    pub stages: Vec<Measured>,
    /// Per GPU, CPU node and drive.
    pub resources: Vec<Measured>,
    /// Sum of every GEMV output, in a fixed order: equal across placements
    /// of the same checkpoint, heat and seed.
    pub checksum: f64,
    pub notes: Vec<String>,
}

/// The packing of the checkpoint's experts, unless the plan or the
/// checkpoint asks for work bench cannot run: BF16 experts, or objects on
/// a GPU that is not a CUDA device here.
pub fn check_runnable(
    inst: &Instance,
    placement: &[usize],
    plan_path: &Path,
    checkpoint: &Checkpoint,
) -> Result<Packing, BenchError> {
    let mut on_gpu = BTreeMap::<usize, usize>::new();
    for &q in placement {
        if let Place::Gpu(g) = inst.places[q] {
            *on_gpu.entry(g).or_default() += 1;
        }
    }
    for (g, count) in on_gpu {
        if let Err(why) = CudaGemv::open(g) {
            return Err(input(
                plan_path,
                &format!("gpu:{g}"),
                format!("{count} objects are on gpu:{g}, and CUDA device {g} cannot run them: {why}"),
                "bench on the machine the profile describes (the GPU kernels are CUDA's), or plan with a CPU-only profile (`gpus: []`)",
            ));
        }
    }
    let packing = Packing::of(checkpoint.config.format).ok_or_else(|| {
        input(
            &checkpoint.dir,
            "config.json",
            "its experts are BF16, which the GEMV kernels do not run".into(),
            "generate the checkpoint with `gen-checkpoint --dtype int4` (or int8)",
        )
    })?;
    if let Some(why) = packing.unfit_for(checkpoint.config.hidden) {
        return Err(input(
            &checkpoint.dir,
            "config.json",
            format!("the GEMV kernels cannot run its rows: {why}"),
            "generate the checkpoint with a group the kernel runs (a power-of-two multiple of 32 features for int4)",
        ));
    }
    Ok(packing)
}

/// Serves `options.tokens` tokens (the traced ones, when given) of
/// `placement` (`plan_path`'s, checked by `check_runnable`) from `applied`
/// (the plan applied to `checkpoint`).
pub fn bench(
    inst: &Instance,
    placement: &[usize],
    plan_path: &Path,
    checkpoint: &Checkpoint,
    applied: &Applied,
    options: &BenchOptions,
) -> Result<BenchReport, BenchError> {
    let packing = check_runnable(inst, placement, plan_path, checkpoint)?;
    let mut notes = Vec::new();
    let threads = node_threads(inst, plan_path, &mut notes)?;
    let mut work = prepare(
        inst,
        placement,
        checkpoint,
        applied,
        packing,
        &threads,
        options.seed,
    )?;
    let hidden = checkpoint.config.hidden;
    let inputs = seeded_inputs(&work, hidden, packing, options.seed);
    let mut cards = open_cards(inst, placement, &work, checkpoint.config.top_k, &inputs)?;
    let leases = hold_residents(inst, placement, applied, &mut work, &mut cards)?;
    let kernel = Kernel {
        threads: &threads,
        packing,
        inputs: &inputs,
    };
    let mut rng = Rng::seeded(options.seed);
    // The routing of every token, traced or drawn before the clock starts:
    // it is the run's input, not work a decoder does.
    let routes: Vec<Vec<Vec<usize>>> = match &options.routes {
        Some(traced) => traced
            .iter()
            .map(|token| route(inst, |moe| token[moe].iter().map(|&e| e as usize).collect()))
            .collect(),
        None => (0..options.tokens)
            .map(|_| {
                route(inst, |moe| {
                    let ids = &inst.expert_ids[moe];
                    let rates: Vec<f64> = ids.iter().map(|&o| inst.objects[o].use_rate).collect();
                    draw(&mut rng, &rates, checkpoint.config.top_k)
                })
            })
            .collect(),
    };
    let serving = Serving {
        inst,
        placement,
        work: &work,
        leases: &leases,
        packing,
        kernel: &kernel,
        applied,
    };
    let (total, token_seconds, checksum) = serve_tokens(&serving, &routes, &mut cards)?;
    if inst
        .trunk_ids
        .iter()
        .any(|&o| matches!(work[o], Work::Generated(_) | Work::OnCard(_)))
    {
        notes.push(format!(
            "trunk components are BF16 in the checkpoint, which the GEMV kernels do not run: their GEMVs stream generated {} rows of their bytes (whole rows of {hidden} features)",
            packing.name()
        ));
    }
    for (n, (t, node)) in threads.iter().enumerate() {
        notes.push(format!(
            "ram:{n}: {} GEMV thread(s) pinned to node {node}",
            t.threads()
        ));
    }
    for card in cards.iter().flatten() {
        notes.push(format!(
            "gpu:{}: PTX {} GEMVs on CUDA device {}, one launch a stage (up to {GPU_BATCH} matrices a launch), one synchronisation a stage",
            card.ordinal(),
            packing.name(),
            card.ordinal()
        ));
    }
    Ok(report(
        inst,
        placement,
        options,
        (&routes, &total),
        token_seconds,
        checksum,
        notes,
    ))
}

/// One token's routed experts, per stage: of each experts stage's MoE
/// layer, the experts `pick(moe)` names (indices among the layer's
/// experts), none elsewhere.
fn route(inst: &Instance, mut pick: impl FnMut(usize) -> Vec<usize>) -> Vec<Vec<usize>> {
    inst.stages
        .iter()
        .map(
            |stage| match stage.objects.first().map(|&o| &inst.objects[o].kind) {
                Some(ObjectKind::Expert { moe, .. }) => pick(*moe)
                    .into_iter()
                    .map(|e| inst.expert_ids[*moe][e])
                    .collect(),
                _ => Vec::new(),
            },
        )
        .collect()
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

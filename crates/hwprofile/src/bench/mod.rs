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

use crate::gemv::{
    projections_at, tensor_specs, NodeThreads, PackedRows, Packing, ProjectionAt, QuantizedInput,
    GPU_BATCH,
};
use crate::system;
use cpu::{Buffers, Gemv, Kernel, NodeShare, Outputs};
use gpu::Card;
use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::error::PlannerError;
use residency_core::model::StageKind;
use residency_core::rng::Rng;
use residency_policy::ObjectIndex;
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::apply::Applied;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gpu::gemv::{CudaGemv, DeviceMatrix, GemvLaunch};
use residency_runtime::identity::ObjectKey;
use residency_runtime::storage::HostPool;
use residency_runtime::store::{Lease, Loader, ObjectBytes, StoreError};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

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

/// Per instance object: what the bench computes for it.
enum Work {
    /// Not computed: a KV group.
    None,
    /// An expert, wherever it is: its projections, and its store index.
    Expert {
        object: ObjectIndex,
        at: Vec<ProjectionAt>,
    },
    /// A trunk component in RAM: generated rows of its bytes.
    Generated(PackedRows),
    /// A trunk component on a GPU: the same generated rows, on its card.
    OnCard(DeviceMatrix),
}

impl Work {
    /// GEMV outputs it adds to the checksum: one per matrix.
    fn outputs(&self) -> usize {
        match self {
            Work::None => 0,
            Work::Expert { at, .. } => at.len(),
            Work::Generated(_) | Work::OnCard(_) => 1,
        }
    }

    /// Output rows of all its GEMVs.
    fn rows(&self) -> usize {
        match self {
            Work::None => 0,
            Work::Expert { at, .. } => at.iter().map(|p| p.rows).sum(),
            Work::Generated(m) => m.rows,
            Work::OnCard(m) => m.shape.rows as usize,
        }
    }
}

/// Seconds and bytes of one token, or of all of them.
#[derive(Default, Clone)]
struct Tally {
    stage_seconds: [f64; 3],
    stage_bytes: [f64; 3],
    gpu_seconds: Vec<f64>,
    gpu_bytes: Vec<f64>,
    cpu_seconds: Vec<f64>,
    cpu_bytes: Vec<f64>,
    drive_seconds: Vec<f64>,
    drive_bytes: Vec<f64>,
    /// The stages' time outside their kernels' calls and waits.
    bench_seconds: f64,
}

const KINDS: [(StageKind, &str); 3] = [
    (StageKind::Dense, "dense"),
    (StageKind::Experts, "experts"),
    (StageKind::Head, "head"),
];

fn kind_index(kind: StageKind) -> usize {
    KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(2)
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
    let mut inputs: BTreeMap<usize, QuantizedInput> = BTreeMap::new();
    for w in &work {
        let cols: Vec<usize> = match w {
            Work::Expert { at, .. } => at.iter().map(|p| p.cols).collect(),
            _ => vec![],
        };
        for c in cols.into_iter().chain([hidden]) {
            inputs
                .entry(c)
                .or_insert_with(|| QuantizedInput::seeded(c, packing, options.seed ^ c as u64));
        }
    }
    let mut cards = open_cards(inst, placement, &work, checkpoint.config.top_k, &inputs)?;
    // Held for the run: the plan pins residents, and an engine maps its
    // weights once at load.
    let mut leases: Vec<Option<Lease>> = (0..work.len()).map(|_| None).collect();
    for (o, w) in work.iter_mut().enumerate() {
        match (inst.places[placement[o]], &*w) {
            (Place::Ram(_), Work::Expert { object, .. }) => {
                leases[o] = Some(applied.store.acquire(*object)?);
            }
            (Place::Gpu(g), Work::Expert { object, at }) => {
                let lease = applied.store.acquire(*object)?;
                on_card(&lease, g, at, *object)?;
                leases[o] = Some(lease);
            }
            (Place::Gpu(g), Work::Generated(m)) => {
                *w = Work::OnCard(card_mut(&mut cards, g)?.matrix(m)?);
            }
            _ => {}
        }
    }
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
    let trunk_of: Vec<Vec<usize>> = inst
        .stages
        .iter()
        .map(|stage| {
            let trunk = stage.objects.iter().copied();
            trunk.filter(|&o| inst.objects[o].is_trunk()).collect()
        })
        .collect();
    let mut total = Tally::new(inst);
    let mut token_seconds = Vec::with_capacity(options.tokens);
    let mut checksum = 0f64;
    let mut buffers = Buffers::default();
    for drawn_in in &routes {
        // The token's lists, before its clock starts (see `StageRun`).
        let mut runs = Vec::with_capacity(inst.stages.len());
        for (s, stage) in inst.stages.iter().enumerate() {
            runs.push(StageRun::new(
                s,
                kind_index(stage.kind),
                trunk_of[s].iter().chain(&drawn_in[s]).copied(),
                (inst, placement, &work, &leases, packing),
                (&kernel, &mut buffers),
                &mut cards,
                &mut total,
            )?);
        }
        let started = Instant::now();
        for run in &mut runs {
            let stage_started = Instant::now();
            // Seconds inside the kernels' calls and waits (launches, CPU
            // GEMVs, waits for the cards and the drives): the rest of the
            // stage is bench's own.
            let mut inside = 0.0;
            // The cards' share first: launched, it runs while the CPU works.
            for (g, launches) in run.launches.iter().enumerate() {
                if !launches.is_empty() {
                    let t = Instant::now();
                    card_mut(&mut cards, g)?.launch_stage(launches)?;
                    inside += t.elapsed().as_secs_f64();
                }
            }
            let kind = run.kind;
            std::thread::scope(|scope| -> Result<(), BenchError> {
                // The drive reads the stage's streamed experts while the
                // CPU computes its residents, as a pipelined engine
                // overlaps them (`io_overlaps_compute`); each read is
                // handed over as it lands.
                let (landed, arrivals) = std::sync::mpsc::channel();
                let (loader, objects) = (&applied.loader, &run.objects);
                let reader = (!objects.is_empty())
                    .then(|| scope.spawn(move || read_each(loader, objects, landed)));
                inside += kernel.run(&mut run.resident, &mut total, kind);
                let Some(reader) = reader else {
                    return Ok(());
                };
                // The streamed experts computed as they land: wait for the
                // next read, then run it with every other one landed by
                // then, in one fork-join.
                let mut computed = 0;
                while computed < run.streamed.len() {
                    let t = Instant::now();
                    let next = arrivals
                        .recv()
                        .map_err(|_| BenchError::Read("the reader thread stopped".into()))?;
                    inside += t.elapsed().as_secs_f64();
                    let batch: Vec<(usize, FreshRead)> = std::iter::once(next)
                        .chain(arrivals.try_iter())
                        .collect::<Result<_, _>>()?;
                    let mut fresh = Vec::with_capacity(batch.len());
                    for (i, (seconds, bytes)) in &batch {
                        let (o, slot, d) = run.streamed[*i];
                        total.drive_seconds[d] += seconds;
                        total.drive_bytes[d] += bytes.len() as f64;
                        fresh.push(Gemv {
                            slot,
                            node: r.drive_numa[d],
                            work: &work[o],
                            bytes: bytes.host(),
                        });
                    }
                    let mut shares = kernel.shares(&fresh, &mut buffers);
                    inside += kernel.run(&mut shares, &mut total, kind);
                    run.landed.extend(shares.into_iter().map(|s| s.out));
                    computed += batch.len();
                }
                reader.join().expect("the reader thread");
                Ok(())
            })?;
            for (g, card) in cards.iter_mut().enumerate() {
                let t = Instant::now();
                if let Some(seconds) = card.as_mut().map(Card::finish_stage).transpose()?.flatten()
                {
                    inside += t.elapsed().as_secs_f64();
                    total.gpu_seconds[g] += seconds;
                }
            }
            let stage_seconds = stage_started.elapsed().as_secs_f64();
            total.stage_seconds[kind] += stage_seconds;
            total.bench_seconds += stage_seconds - inside;
        }
        token_seconds.push(started.elapsed().as_secs_f64());
        // The checksum, off the clock: each stage's outputs in its slots.
        let mut sums: Vec<Vec<f64>> = runs.iter().map(|run| vec![0f64; run.slots]).collect();
        for (run, stage_sums) in runs.iter().zip(&mut sums) {
            let outputs = run.resident.iter().map(|s| &s.out).chain(&run.landed);
            outputs.for_each(|out| out.add_to(stage_sums));
        }
        for card in cards.iter_mut().flatten() {
            card.drain_token(&mut sums)?;
        }
        checksum += sums.iter().flatten().sum::<f64>();
        for run in runs {
            let outputs = run.resident.into_iter().map(|s| s.out).chain(run.landed);
            outputs.for_each(|out| buffers.give(out));
        }
    }
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

/// One stage of one token as bench runs it, made before the token's clock
/// starts from the token's routing: an engine that routes on the device
/// builds nothing per stage, so the clock holds only the kernels' calls
/// and what bench cannot do ahead (the reads, and the lists of what they
/// return).
struct StageRun<'a> {
    kind: usize,
    /// Checksum slots: the stage's outputs in a fixed order (trunk, then
    /// the experts as drawn), whatever tier each comes from.
    slots: usize,
    /// Per card, the stage's launches (none where it has no work there).
    launches: Vec<Vec<GemvLaunch>>,
    /// What each node computes on the residents in RAM.
    resident: Vec<NodeShare<'a>>,
    /// The outputs of the streamed experts, as they were computed.
    landed: Vec<Outputs>,
    /// (object, first slot, drive) of the drawn experts on a drive, and
    /// their store indices.
    streamed: Vec<(usize, usize, usize)>,
    objects: Vec<ObjectIndex>,
}

/// What a stage's lists are made of: the instance, the placement, each
/// object's work and lease, the experts' packing.
type Layout<'a> = (
    &'a Instance,
    &'a [usize],
    &'a [Work],
    &'a [Option<Lease>],
    Packing,
);

impl<'a> StageRun<'a> {
    /// Stage `stage` (of stage kind `kind`) computing `objects`: the GPU
    /// ones queued on their cards (their bytes tallied, as they are per
    /// token whatever the clock), the RAM ones gathered by node, the disk
    /// ones listed for the reader.
    fn new(
        stage: usize,
        kind: usize,
        objects: impl Iterator<Item = usize>,
        (inst, placement, work, leases, packing): Layout<'a>,
        (kernel, buffers): (&Kernel<'a>, &mut Buffers),
        cards: &mut [Option<Card>],
        total: &mut Tally,
    ) -> Result<StageRun<'a>, BenchError> {
        let mut run = StageRun {
            kind,
            slots: 0,
            launches: vec![Vec::new(); cards.len()],
            resident: Vec::new(),
            landed: Vec::new(),
            streamed: Vec::new(),
            objects: Vec::new(),
        };
        let mut resident = Vec::new();
        for o in objects {
            let slot = run.slots;
            run.slots += work[o].outputs();
            match (inst.places[placement[o]], &work[o]) {
                (Place::Gpu(g), w) => {
                    let card = card_mut(cards, g)?;
                    let bytes = queue(
                        card,
                        w,
                        leases[o].as_ref(),
                        packing,
                        (stage, slot),
                        &mut run.launches[g],
                    )?;
                    total.gpu_bytes[g] += bytes;
                    total.stage_bytes[kind] += bytes;
                }
                (Place::Ram(n), w) => resident.push(Gemv {
                    slot,
                    node: n,
                    work: w,
                    bytes: leases[o].as_ref().and_then(|l| l.host()),
                }),
                (Place::Disk(d), Work::Expert { object, .. }) => {
                    run.streamed.push((o, slot, d));
                    run.objects.push(*object);
                }
                _ => {}
            }
        }
        run.resident = kernel.shares(&resident, buffers);
        Ok(run)
    }
}

/// A CUDA device for every profile GPU the placement uses (`None` for the
/// others), each with room for the most outputs a token can give it:
/// per stage its trunk components' rows and `top_k` times its largest
/// expert's.
fn open_cards(
    inst: &Instance,
    placement: &[usize],
    work: &[Work],
    top_k: usize,
    inputs: &BTreeMap<usize, QuantizedInput>,
) -> Result<Vec<Option<Card>>, BenchError> {
    let mut token_rows = vec![None::<usize>; inst.resources.gpus()];
    for stage in &inst.stages {
        let mut trunk = vec![0; token_rows.len()];
        let mut expert = vec![0; token_rows.len()];
        for &o in &stage.objects {
            if let Place::Gpu(g) = inst.places[placement[o]] {
                let rows = work[o].rows();
                if inst.objects[o].is_expert() {
                    expert[g] = expert[g].max(rows);
                } else {
                    trunk[g] += rows;
                }
                token_rows[g].get_or_insert(0);
            }
        }
        for (g, rows) in token_rows.iter_mut().enumerate() {
            if let Some(rows) = rows {
                *rows += trunk[g] + top_k * expert[g];
            }
        }
    }
    token_rows
        .into_iter()
        .enumerate()
        .map(|(g, rows)| rows.map(|rows| Card::open(g, inputs, rows)).transpose())
        .collect()
}

fn card_mut(cards: &mut [Option<Card>], g: usize) -> Result<&mut Card, BenchError> {
    cards.get_mut(g).and_then(Option::as_mut).ok_or_else(|| {
        BenchError::Gpu(format!(
            "gpu:{g} was not opened; a bench bug, please report it"
        ))
    })
}

/// Checks that a GPU-placed expert's lease is in CUDA device `g`'s memory
/// where the kernel can read each projection: weights at 16-byte
/// boundaries (it loads 16 bytes at once), scales at 2.
fn on_card(
    lease: &Lease,
    g: usize,
    at: &[ProjectionAt],
    object: ObjectIndex,
) -> Result<(), BenchError> {
    match lease.device() {
        Some((ordinal, address)) if ordinal as usize == g => {
            let misaligned = at.iter().find(|p| {
                !(address + p.weights.start as u64).is_multiple_of(16)
                    || !(address + p.scales.start as u64).is_multiple_of(2)
            });
            match misaligned {
                None => Ok(()),
                Some(p) => Err(BenchError::Gpu(format!(
                    "object {object} on gpu:{g}: a projection's weights start at byte {} of its bytes, which the GPU kernel cannot read 16 bytes at a time; generate the checkpoint with `residency gen-checkpoint`",
                    p.weights.start
                ))),
            }
        }
        _ => Err(BenchError::Gpu(format!(
            "object {object} is planned on gpu:{g} but the store holds it elsewhere (no CUDA device {g} when the plan was applied)"
        ))),
    }
}

/// Adds the GEMVs of `work` (a GPU-placed object's) on `card` to a stage's
/// `launches`: the bytes they read.
fn queue(
    card: &mut Card,
    work: &Work,
    lease: Option<&Lease>,
    packing: Packing,
    (stage, slot): (usize, usize),
    launches: &mut Vec<GemvLaunch>,
) -> Result<f64, BenchError> {
    match (work, lease.and_then(Lease::device)) {
        (Work::OnCard(m), _) => {
            // SAFETY: `m` is this card's memory, alive for the run.
            unsafe { card.queue(&m.shape, m.addresses(), m.cols, (stage, slot), launches) }?;
            Ok(m.bytes() as f64)
        }
        (Work::Expert { at, .. }, Some((_, address))) => {
            let mut bytes = 0;
            for (i, p) in at.iter().enumerate() {
                let shape = GemvLaunch::shape(packing, p.rows, p.cols);
                let addresses = (
                    address + p.weights.start as u64,
                    address + p.scales.start as u64,
                );
                // SAFETY: the lease keeps the expert on this card (checked
                // by `on_card`) for the run; its projection lies inside it.
                unsafe { card.queue(&shape, addresses, p.cols, (stage, slot + i), launches) }?;
                bytes += p.weights.len() + p.scales.len();
            }
            Ok(bytes as f64)
        }
        _ => Ok(0.0),
    }
}

impl Tally {
    fn new(inst: &Instance) -> Tally {
        let r = &inst.resources;
        Tally {
            gpu_seconds: vec![0.0; r.gpus()],
            gpu_bytes: vec![0.0; r.gpus()],
            cpu_seconds: vec![0.0; r.numa_nodes()],
            cpu_bytes: vec![0.0; r.numa_nodes()],
            drive_seconds: vec![0.0; r.drives()],
            drive_bytes: vec![0.0; r.drives()],
            ..Tally::default()
        }
    }
}

/// A streamed expert read: the seconds it took, and its bytes.
type FreshRead = (f64, Box<dyn ObjectBytes>);

/// Reads each of `objects` afresh with the store's reader, one after
/// another, sending each (its index, the seconds the read took, its bytes)
/// as it lands; stops at the first error, which it sends.
fn read_each(
    loader: &CheckpointLoader,
    objects: &[ObjectIndex],
    landed: std::sync::mpsc::Sender<Result<(usize, FreshRead), BenchError>>,
) {
    for (i, &object) in objects.iter().enumerate() {
        let t = Instant::now();
        let read = loader
            .load(object)
            .map(|bytes| (i, (t.elapsed().as_secs_f64(), bytes)))
            .map_err(BenchError::Read);
        let failed = read.is_err();
        if landed.send(read).is_err() || failed {
            return;
        }
    }
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
                // In its node's memory in RAM; on a GPU, in host memory
                // until `bench` copies it to the card.
                let (pool, bytes) = match inst.places[placement[o]] {
                    Place::Ram(n) => (Some(&pools[n]), object.ram_bytes),
                    _ => (None, object.gpu_bytes),
                };
                let rows = bytes as usize / row_bytes;
                let mut m = PackedRows::zeroed(packing, hidden, rows, pool);
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
        let at = projections_at(applied.loader.extents(object), &specs, packing);
        work.push(Work::Expert { object, at });
    }
    Ok(work)
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

/// The report: measured per token beside `evaluate` of the placement.
fn report(
    inst: &Instance,
    placement: &[usize],
    options: &BenchOptions,
    (routes, total): (&[Vec<Vec<usize>>], &Tally),
    mut token_seconds: Vec<f64>,
    checksum: f64,
    notes: Vec<String>,
) -> BenchReport {
    let r = &inst.resources;
    let eval = inst.evaluate(placement);
    let served = token_seconds.len();
    let tokens = served.max(1) as f64;
    let per_token = |v: f64| v / tokens;
    // Bytes the cost model streams per token: use rate x bytes of every
    // object in RAM or on a disk, by stage kind, CPU node and drive.
    let mut stage_bytes = [0f64; 3];
    let mut gpu_bytes = vec![0f64; r.gpus()];
    let mut cpu_bytes = vec![0f64; r.numa_nodes()];
    let mut drive_bytes = vec![0f64; r.drives()];
    for (o, object) in inst.objects.iter().enumerate() {
        let kind = kind_index(inst.stages[object.stage].kind);
        match inst.places[placement[o]] {
            Place::Gpu(g) if !object.is_kv() => {
                let b = object.use_rate * object.gpu_bytes as f64;
                stage_bytes[kind] += b;
                gpu_bytes[g] += b;
            }
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
    // A resource's row: its measured and predicted seconds and bytes.
    let resource =
        |name: String, seconds: f64, predicted: f64, bytes: f64, predicted_bytes| Measured {
            name,
            measured_seconds: per_token(seconds),
            predicted_seconds: predicted,
            bytes_per_token: per_token(bytes),
            predicted_bytes_per_token: predicted_bytes,
        };
    let gpus = (0..r.gpus()).map(|g| {
        let predicted = eval.loads.iter().map(|l| l.gpu_seconds(r, g)).sum();
        resource(
            format!("gpu:{g}"),
            total.gpu_seconds[g],
            predicted,
            total.gpu_bytes[g],
            gpu_bytes[g],
        )
    });
    let cpus = (0..r.numa_nodes()).map(|n| {
        let predicted = eval.loads.iter().map(|l| l.cpu_seconds(r, n)).sum();
        resource(
            format!("cpu:{n}"),
            total.cpu_seconds[n],
            predicted,
            total.cpu_bytes[n],
            cpu_bytes[n],
        )
    });
    let drives = (0..r.drives()).map(|d| {
        let predicted = eval.loads.iter().map(|l| l.drive[d]).sum();
        resource(
            format!("drive:{d}"),
            total.drive_seconds[d],
            predicted,
            total.drive_bytes[d],
            drive_bytes[d],
        )
    });
    let on_routes: f64 = routes[..served]
        .iter()
        .map(|token| inst.routed_token_seconds(placement, token))
        .sum::<f64>()
        / tokens;
    let all: f64 = token_seconds.iter().sum();
    token_seconds.sort_by(f64::total_cmp);
    // Nearest rank.
    let quantile = |q: f64| {
        let rank = ((q * token_seconds.len() as f64).ceil() as usize).max(1);
        token_seconds.get(rank - 1).copied().unwrap_or(0.0)
    };
    BenchReport {
        tokens: served,
        seed: options.seed,
        tok_per_s: if all > 0.0 { tokens / all } else { 0.0 },
        predicted_tok_per_s: 1.0 / eval.token_seconds,
        p50_token_seconds: quantile(0.5),
        p99_token_seconds: quantile(0.99),
        predicted_token_seconds: eval.token_seconds,
        predicted_on_routes_tok_per_s: 1.0 / on_routes,
        bench_overhead_seconds: per_token(total.bench_seconds),
        stages,
        resources: gpus.chain(cpus).chain(drives).collect(),
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

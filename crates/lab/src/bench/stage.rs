//! Tokens served, stage after stage: each stage's lists made before the
//! token's clock, then the cards launched, the residents computed while
//! the drive reads the streamed experts, the time tallied.

use super::cpu::{Buffers, Gemv, Kernel, NodeShare, Outputs};
use super::gpu::Card;
use super::setup::card_mut;
use super::BenchError;
use residency_core::cost::{Instance, Place};
use residency_core::model::StageKind;
use residency_policy::ObjectIndex;
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::apply::Applied;
use residency_runtime::gemv::{PackedRows, Packing, ProjectionAt};
use residency_runtime::gpu::gemv::{DeviceMatrix, GemvLaunch};
use residency_runtime::store::{Lease, Loader, ObjectBytes};
use std::time::Instant;

/// Per instance object: what the bench computes for it.
pub(super) enum Work {
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
    pub(super) fn outputs(&self) -> usize {
        match self {
            Work::None => 0,
            Work::Expert { at, .. } => at.len(),
            Work::Generated(_) | Work::OnCard(_) => 1,
        }
    }

    /// Output rows of all its GEMVs.
    pub(super) fn rows(&self) -> usize {
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
pub(super) struct Tally {
    pub(super) stage_seconds: [f64; 3],
    pub(super) stage_bytes: [f64; 3],
    pub(super) gpu_seconds: Vec<f64>,
    pub(super) gpu_bytes: Vec<f64>,
    pub(super) cpu_seconds: Vec<f64>,
    pub(super) cpu_bytes: Vec<f64>,
    pub(super) drive_seconds: Vec<f64>,
    pub(super) drive_bytes: Vec<f64>,
    /// The stages' time outside their kernels' calls and waits.
    pub(super) bench_seconds: f64,
}

pub(super) const KINDS: [(StageKind, &str); 3] = [
    (StageKind::Dense, "dense"),
    (StageKind::Experts, "experts"),
    (StageKind::Head, "head"),
];

pub(super) fn kind_index(kind: StageKind) -> usize {
    KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(2)
}

/// What every token is served with: the instance and placement, each
/// object's work and lease, the packing, the CPU kernel and the applied
/// plan's store and loader.
pub(super) struct Serving<'a> {
    pub(super) inst: &'a Instance,
    pub(super) placement: &'a [usize],
    pub(super) work: &'a [Work],
    pub(super) leases: &'a [Option<Lease>],
    pub(super) packing: Packing,
    pub(super) kernel: &'a Kernel<'a>,
    pub(super) applied: &'a Applied,
}

/// Every token of `routes` served, stage after stage: the tally, each
/// token's seconds and the outputs' checksum.
pub(super) fn serve_tokens(
    s: &Serving,
    routes: &[Vec<Vec<usize>>],
    cards: &mut [Option<Card>],
) -> Result<(Tally, Vec<f64>, f64), BenchError> {
    let inst = s.inst;
    let trunk_of: Vec<Vec<usize>> = inst
        .stages
        .iter()
        .map(|stage| {
            let trunk = stage.objects.iter().copied();
            trunk.filter(|&o| inst.objects[o].is_trunk()).collect()
        })
        .collect();
    let mut total = Tally::new(inst);
    let mut token_seconds = Vec::with_capacity(routes.len());
    let mut checksum = 0f64;
    let mut buffers = Buffers::default();
    for drawn_in in routes {
        // The token's lists, before its clock starts (see `StageRun`).
        let mut runs = Vec::with_capacity(inst.stages.len());
        for (stage_index, stage) in inst.stages.iter().enumerate() {
            runs.push(StageRun::new(
                stage_index,
                kind_index(stage.kind),
                trunk_of[stage_index]
                    .iter()
                    .chain(&drawn_in[stage_index])
                    .copied(),
                (inst, s.placement, s.work, s.leases, s.packing),
                (s.kernel, &mut buffers),
                cards,
                &mut total,
            )?);
        }
        let started = Instant::now();
        for run in &mut runs {
            serve_stage(s, run, cards, &mut total, &mut buffers)?;
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
    Ok((total, token_seconds, checksum))
}

/// One stage of a token on the clock: the cards' launches, the residents
/// computed on the CPU while the drive reads the streamed experts, each
/// computed as it lands, then the cards waited for.
fn serve_stage<'a>(
    s: &Serving<'a>,
    run: &mut StageRun<'a>,
    cards: &mut [Option<Card>],
    total: &mut Tally,
    buffers: &mut Buffers,
) -> Result<(), BenchError> {
    let (kernel, r) = (s.kernel, &s.inst.resources);
    let stage_started = Instant::now();
    // Seconds inside the kernels' calls and waits (launches, CPU
    // GEMVs, waits for the cards and the drives): the rest of the
    // stage is bench's own.
    let mut inside = 0.0;
    // The cards' share first: launched, it runs while the CPU works.
    for (g, launches) in run.launches.iter().enumerate() {
        if !launches.is_empty() {
            let t = Instant::now();
            card_mut(cards, g)?.launch_stage(launches)?;
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
        let (loader, objects) = (&s.applied.loader, &run.objects);
        let reader =
            (!objects.is_empty()).then(|| scope.spawn(move || read_each(loader, objects, landed)));
        inside += kernel.run(&mut run.resident, total, kind);
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
                    work: &s.work[o],
                    bytes: bytes.host(),
                });
            }
            let mut shares = kernel.shares(&fresh, buffers);
            inside += kernel.run(&mut shares, total, kind);
            run.landed.extend(shares.into_iter().map(|s| s.out));
            computed += batch.len();
        }
        reader.join().expect("the reader thread");
        Ok(())
    })?;
    for (g, card) in cards.iter_mut().enumerate() {
        let t = Instant::now();
        if let Some(seconds) = card.as_mut().map(Card::finish_stage).transpose()?.flatten() {
            inside += t.elapsed().as_secs_f64();
            total.gpu_seconds[g] += seconds;
        }
    }
    let stage_seconds = stage_started.elapsed().as_secs_f64();
    total.stage_seconds[kind] += stage_seconds;
    total.bench_seconds += stage_seconds - inside;
    Ok(())
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
                let shape = GemvLaunch::shape(packing, p.layout, p.rows, p.cols);
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

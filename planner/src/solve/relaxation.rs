//! The lower bound: a relaxation that respects which cards take part in a
//! stage and that trunk components are whole (DESIGN 4, Bounds), solved with
//! HiGHS.
//!
//! Each stage picks a convex combination of *patterns*: which GPU groups take
//! part (and pay their sync overhead) and where its largest trunk components
//! sit, whole. Within a pattern the stage's experts (all of one size) enter
//! only through how many go to each slot (`c`, which is what capacities see)
//! and how much use rate they carry there (`m`, which is what work sees). The
//! pairs `(c, m)` that whole or split experts can reach are the base polytope
//! `m(Q) <= S(c(Q))` over slot sets `Q`, `S(t)` the sum of the `t` hottest
//! rates. Its facets are imposed on each stage's experts summed over its
//! patterns (each pattern's point is weighted, the weights sum to 1, so the
//! sum lies in the same polytope): a few seeded, the rest added as cuts
//! while violated. Capacities couple the stages. With patterns weighted 0/1
//! and counts whole this is a small MIP whose proven dual bound tightens the
//! LP's.
//!
//! Why it is a valid bound: any placement picks one pattern per stage and
//! whole objects, which satisfies every row; identical GPUs are merged into a
//! group whose busiest card works at least the group's average; each cut
//! round relaxes the full polytope, so its optimum is a bound too.

use crate::cost::{Instance, Place};
use highs::{Col, HighsModelStatus, Model, RowProblem, Sense};
use std::time::Instant;

/// Time unit of the LP (microseconds) and byte unit (MiB): keeps HiGHS's
/// absolute tolerances far below the quantities that matter.
const TIME_SCALE: f64 = 1e6;
const BYTE_SCALE: f64 = 1.0 / 1048576.0;
/// Relative margin taken off a solver objective for its tolerances.
const TOLERANCE_MARGIN: f64 = 1e-7;
/// More GPU groups than this: sync overheads are dropped from the
/// relaxation instead of enumerating 2^groups sets (still valid, weaker).
const MAX_PATTERN_GROUPS: usize = 6;
/// Most patterns per stage: trunk components beyond this budget stay fractional.
const MAX_PATTERNS: usize = 64;
/// Neighbouring facets added on either side of a violated one.
const LADDER: u32 = 12;
/// Cut rounds stop after this many rounds in a row that raise the bound by
/// less than `STALL_IMPROVEMENT` (relative): degenerate LPs can go on
/// finding violated facets that no longer move the optimum.
const STALL_ROUNDS: usize = 4;
const STALL_IMPROVEMENT: f64 = 1e-7;
/// Most rounds of cut separation.
const MAX_CUT_ROUNDS: usize = 200;

/// Identical GPUs (same GEMV rate and sync overhead) form a group.
#[derive(Debug, Clone)]
pub struct GpuGroup {
    pub gpus: Vec<usize>,
}

/// Where a share goes in the relaxation: a GPU group, a RAM node or a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Group(usize),
    Place(Place),
}

/// One pattern of a stage in a relaxed solution.
#[derive(Debug, Clone)]
pub struct PatternShare {
    pub weight: f64,
    /// Per expert slot: (slot, count, use-rate mass), both scaled by `weight`.
    pub experts: Vec<(Slot, f64, f64)>,
    /// Per trunk component of the stage: (object, share per slot).
    pub trunk: Vec<(usize, Vec<(Slot, f64)>)>,
}

#[derive(Debug, Clone)]
pub struct StageRelaxation {
    /// The stage's time in the relaxed solution (seconds).
    pub seconds: f64,
    /// The stage's experts, hottest first.
    pub experts: Vec<usize>,
    pub patterns: Vec<PatternShare>,
}

#[derive(Debug, Clone)]
pub struct Relaxation {
    pub lower_bound_seconds: f64,
    pub method: &'static str,
    pub groups: Vec<GpuGroup>,
    pub stages: Vec<StageRelaxation>,
    /// Per KV group: (object, share kept per slot); the rest is recomputed.
    pub kv: Vec<(usize, Vec<(Slot, f64)>)>,
    /// The facets found, so the integer refinement starts from them.
    cuts: Vec<Cut>,
}

pub fn gpu_groups(inst: &Instance) -> Vec<GpuGroup> {
    let r = &inst.resources;
    let mut groups: Vec<GpuGroup> = Vec::new();
    for g in 0..r.gpus() {
        let same = |h: usize| {
            r.gpu_gemv_bytes_per_s[h] == r.gpu_gemv_bytes_per_s[g]
                && r.gpu_sync_seconds[h] == r.gpu_sync_seconds[g]
        };
        match groups.iter_mut().find(|grp| same(grp.gpus[0])) {
            Some(grp) => grp.gpus.push(g),
            None => groups.push(GpuGroup { gpus: vec![g] }),
        }
    }
    groups
}

/// A participation pattern: the GPU groups taking part, and the slot of
/// each of the stage's first `fixed.len()` trunk components.
#[derive(Debug, Clone)]
struct Pattern {
    groups: Vec<bool>,
    fixed: Vec<Slot>,
}

/// Patterns of a stage with `trunk` components (largest first): every
/// participation set (or one, without sync, when `enumerate` is off), times
/// every whole slot of as many components as the budget allows; a set must
/// contain the groups its fixed components use.
fn patterns(groups: usize, numa_nodes: usize, trunk: usize, enumerate: bool) -> Vec<Pattern> {
    let masks: Vec<Vec<bool>> = if enumerate {
        (0..1usize << groups)
            .map(|mask| (0..groups).map(|j| mask >> j & 1 == 1).collect())
            .collect()
    } else {
        vec![vec![true; groups]]
    };
    let slots: Vec<Slot> = (0..groups)
        .map(Slot::Group)
        .chain((0..numa_nodes).map(|n| Slot::Place(Place::Ram(n))))
        .collect();
    let mut fixed_count = 0;
    while fixed_count < trunk
        && masks.len() * slots.len().pow(fixed_count as u32 + 1) <= MAX_PATTERNS
    {
        fixed_count += 1;
    }
    let mut assignments: Vec<Vec<Slot>> = vec![Vec::new()];
    for _ in 0..fixed_count {
        assignments = assignments
            .into_iter()
            .flat_map(|a| slots.iter().map(move |&s| [a.clone(), vec![s]].concat()))
            .collect();
    }
    let mut out = Vec::new();
    for fixed in assignments {
        for mask in &masks {
            if fixed
                .iter()
                .all(|slot| !matches!(slot, Slot::Group(j) if !mask[*j]))
            {
                out.push(Pattern {
                    groups: mask.clone(),
                    fixed: fixed.clone(),
                });
            }
        }
    }
    out
}

/// Per stage: experts hottest first with prefix sums of their rates, trunk
/// components largest first.
struct StageData {
    experts: Vec<usize>,
    prefix: Vec<f64>,
    trunk: Vec<usize>,
    patterns: Vec<Pattern>,
}

impl StageData {
    /// The facet of `m(Q) <= S(c(Q))` on the piece between `piece` and `piece + 1` experts.
    fn facet(&self, stage: usize, slots: Vec<Slot>, piece: usize) -> Cut {
        let slope = self.prefix[piece + 1] - self.prefix[piece];
        Cut {
            stage,
            slots,
            slope,
            intercept: self.prefix[piece] - piece as f64 * slope,
        }
    }

    /// Facets violated by a stage's (counts, masses) per slot, each with a
    /// ladder of neighbours on either side (1, 2, 4, ... pieces away) so the
    /// next solution cannot merely slide along `S`. Slot sets are all subsets
    /// when few, else the prefixes in order of mass density.
    fn separate(
        &self,
        stage: usize,
        slots: &[Slot],
        counts: &[f64],
        masses: &[f64],
        cuts: &mut Vec<Cut>,
    ) {
        let k = slots.len();
        let n = self.experts.len();
        let sets: Vec<Vec<usize>> = if k <= 6 {
            (1..(1usize << k) - 1)
                .map(|mask| (0..k).filter(|i| mask >> i & 1 == 1).collect())
                .collect()
        } else {
            let mut order: Vec<usize> = (0..k).collect();
            let density = |i: usize| masses[i] / counts[i].max(1e-12);
            order.sort_by(|&a, &b| density(b).total_cmp(&density(a)));
            (1..k).map(|len| order[..len].to_vec()).collect()
        };
        // Above HiGHS's feasibility tolerance (1e-7 per row), or the same
        // cut would be found again.
        let tolerance = 1e-6 * self.prefix.last().unwrap().max(1.0);
        for set in sets {
            let c: f64 = set.iter().map(|&i| counts[i]).sum();
            let m: f64 = set.iter().map(|&i| masses[i]).sum();
            if m - self.top_mass(c) <= tolerance {
                continue;
            }
            let j = (c.floor() as usize).min(n - 1);
            let mut pieces: Vec<usize> = std::iter::once(j)
                .chain(
                    (0..LADDER).flat_map(|i| [j.saturating_sub(1 << i), (j + (1 << i)).min(n - 1)]),
                )
                .collect();
            pieces.sort_unstable();
            pieces.dedup();
            let chosen: Vec<Slot> = set.iter().map(|&i| slots[i]).collect();
            for piece in pieces {
                cuts.push(self.facet(stage, chosen.clone(), piece));
            }
        }
    }

    /// `S(t)`: the use rate of the `t` hottest experts, `t` fractional.
    fn top_mass(&self, t: f64) -> f64 {
        let n = self.experts.len();
        let t = t.clamp(0.0, n as f64);
        let j = (t.floor() as usize).min(n.saturating_sub(1));
        self.prefix[j] + (self.prefix[j + 1] - self.prefix[j]) * (t - j as f64)
    }
}

/// A column and its index in the solution vector (columns are numbered in
/// creation order; the highs crate keeps `Col`'s index private).
#[derive(Debug, Clone, Copy)]
struct Var {
    col: Col,
    index: usize,
}

/// The problem under construction, numbering its columns.
struct Columns {
    pb: RowProblem,
    count: usize,
}

impl Columns {
    fn add(&mut self, cost: f64, upper: f64, integer: bool) -> Var {
        let col = self
            .pb
            .add_column_with_integrality(cost, 0.0..=upper, integer);
        self.count += 1;
        Var {
            col,
            index: self.count - 1,
        }
    }
    /// Adds a row, merging repeated columns (HiGHS refuses duplicates: a
    /// streamed expert's mass is both drive and CPU work in a felt row).
    fn row(&mut self, lower: f64, upper: f64, terms: impl IntoIterator<Item = (Var, f64)>) {
        let mut merged: Vec<(Var, f64)> = Vec::new();
        for (v, a) in terms {
            match merged.iter_mut().find(|(w, _)| w.index == v.index) {
                Some((_, b)) => *b += a,
                None => merged.push((v, a)),
            }
        }
        self.pb
            .add_row(lower..=upper, merged.into_iter().map(|(v, a)| (v.col, a)));
    }
}

/// A facet `m(Q) - slope * c(Q) <= intercept` of a stage's experts summed
/// over its patterns.
#[derive(Debug, Clone)]
struct Cut {
    stage: usize,
    slots: Vec<Slot>,
    slope: f64,
    intercept: f64,
}

/// Columns of one stage pattern.
struct PatternCols {
    y: Var,
    t: Var,
    /// (slot, count column, mass column) per expert slot.
    experts: Vec<(Slot, Var, Var)>,
    trunk: Vec<Vec<(Slot, Var)>>,
}

struct Built {
    model: Model,
    cols: Vec<Vec<PatternCols>>,
    /// Per KV group: (object, its kept share per slot).
    kv: Vec<(usize, Vec<(Slot, Var)>)>,
}

fn stage_data(inst: &Instance, groups: usize, enumerate: bool) -> Vec<StageData> {
    (0..inst.stages.len())
        .map(|s| {
            let objects = &inst.stages[s].objects;
            let mut experts: Vec<usize> = objects
                .iter()
                .copied()
                .filter(|&o| inst.objects[o].is_expert())
                .collect();
            experts.sort_by(|&a, &b| {
                inst.objects[b]
                    .use_rate
                    .total_cmp(&inst.objects[a].use_rate)
            });
            let mut prefix = vec![0.0];
            for &o in &experts {
                prefix.push(prefix.last().unwrap() + inst.objects[o].use_rate);
            }
            let mut trunk: Vec<usize> = objects
                .iter()
                .copied()
                .filter(|&o| inst.objects[o].is_trunk())
                .collect();
            trunk.sort_by(|&a, &b| inst.objects[b].gpu_bytes.cmp(&inst.objects[a].gpu_bytes));
            let patterns = patterns(groups, inst.resources.numa_nodes(), trunk.len(), enumerate);
            StageData {
                experts,
                prefix,
                trunk,
                patterns,
            }
        })
        .collect()
}

/// Builds the relaxation with the given cuts; `integer` makes pattern weights
/// binary and expert counts whole.
fn build(
    inst: &Instance,
    groups: &[GpuGroup],
    data: &[StageData],
    cuts: &[Cut],
    enumerate: bool,
    integer: bool,
) -> Option<Built> {
    let r = &inst.resources;
    let f = r.felt_fraction;
    let sync = |j: usize| {
        if enumerate {
            r.gpu_sync_seconds[groups[j].gpus[0]]
        } else {
            0.0
        }
    };
    let mut pb = Columns {
        pb: RowProblem::default(),
        count: 0,
    };
    let inf = f64::INFINITY;
    let mut gpu_bytes: Vec<Vec<(Var, f64)>> = vec![Vec::new(); groups.len()];
    let mut ram_bytes: Vec<Vec<(Var, f64)>> = vec![Vec::new(); r.numa_nodes()];
    let mut cols = Vec::with_capacity(data.len());
    for stage in data {
        let mut stage_cols = Vec::new();
        if stage.experts.is_empty() && stage.trunk.is_empty() {
            cols.push(stage_cols);
            continue;
        }
        let mut weights = Vec::new();
        for pattern in &stage.patterns {
            let y = pb.add(0.0, 1.0, integer);
            let t = pb.add(1.0, inf, false);
            weights.push((y, 1.0));
            let mut gpu_work: Vec<Vec<(Var, f64)>> = vec![Vec::new(); groups.len()];
            let mut cpu_work: Vec<Vec<(Var, f64)>> = vec![Vec::new(); r.numa_nodes()];
            let mut drive_work: Vec<Vec<(Var, f64)>> = vec![Vec::new(); r.drives()];
            let mut whole_on_card = vec![0.0f64; groups.len()];
            // Trunk: whole in its fixed slot, else split over the open slots.
            let mut trunk_cols = Vec::new();
            for (k, &o) in stage.trunk.iter().enumerate() {
                let object = &inst.objects[o];
                let fixed = pattern.fixed.get(k).copied();
                let mut slots = Vec::new();
                let mut share = vec![(y, -1.0)];
                let open_groups = (0..groups.len())
                    .filter(|&j| pattern.groups[j])
                    .map(Slot::Group);
                let rams = (0..r.numa_nodes()).map(|n| Slot::Place(Place::Ram(n)));
                for slot in open_groups
                    .chain(rams)
                    .filter(|&s| fixed.is_none_or(|f| f == s))
                {
                    let x = pb.add(0.0, inf, false);
                    match slot {
                        Slot::Group(j) => {
                            let card_work =
                                object.gpu_bytes as f64 / r.gpu_gemv_bytes_per_s[groups[j].gpus[0]];
                            if fixed.is_some() {
                                whole_on_card[j] = whole_on_card[j].max(card_work);
                            }
                            gpu_work[j]
                                .push((x, TIME_SCALE * card_work / groups[j].gpus.len() as f64));
                            gpu_bytes[j].push((x, BYTE_SCALE * object.gpu_bytes as f64));
                        }
                        Slot::Place(Place::Ram(n)) => {
                            cpu_work[n].push((
                                x,
                                TIME_SCALE * object.ram_bytes as f64 / r.cpu_gemv_bytes_per_s[n],
                            ));
                            ram_bytes[n].push((x, BYTE_SCALE * object.ram_bytes as f64));
                        }
                        Slot::Place(_) => unreachable!("trunk is never streamed or recomputed"),
                    }
                    share.push((x, 1.0));
                    slots.push((slot, x));
                }
                pb.row(0.0, 0.0, share);
                trunk_cols.push(slots);
            }
            // Experts: a count and a mass per slot.
            let mut expert_cols = Vec::new();
            if let Some(&first) = stage.experts.first() {
                let object = &inst.objects[first];
                let n = stage.experts.len() as f64;
                let mass = *stage.prefix.last().unwrap();
                let (mut count_row, mut mass_row) = (vec![(y, -n)], vec![(y, -mass)]);
                let open_groups = (0..groups.len())
                    .filter(|&j| pattern.groups[j])
                    .map(Slot::Group);
                let rams = (0..r.numa_nodes()).map(|n| Slot::Place(Place::Ram(n)));
                let disks = (0..r.drives()).map(|d| Slot::Place(Place::Disk(d)));
                for slot in open_groups.chain(rams).chain(disks) {
                    let c = pb.add(0.0, inf, integer);
                    let m = pb.add(0.0, inf, false);
                    match slot {
                        Slot::Group(j) => {
                            let g = groups[j].gpus[0];
                            gpu_work[j].push((
                                m,
                                TIME_SCALE * object.gpu_bytes as f64
                                    / r.gpu_gemv_bytes_per_s[g]
                                    / groups[j].gpus.len() as f64,
                            ));
                            gpu_bytes[j].push((c, BYTE_SCALE * object.gpu_bytes as f64));
                        }
                        Slot::Place(Place::Ram(node)) => {
                            cpu_work[node].push((
                                m,
                                TIME_SCALE * object.ram_bytes as f64 / r.cpu_gemv_bytes_per_s[node],
                            ));
                            ram_bytes[node].push((c, BYTE_SCALE * object.ram_bytes as f64));
                        }
                        Slot::Place(Place::Disk(d)) => {
                            let b = object.disk_bytes as f64;
                            let node = r.drive_numa[d];
                            drive_work[d].push((
                                m,
                                TIME_SCALE
                                    * (r.drive_latency_seconds[d]
                                        + b / r.drive_read_bytes_per_s[d]),
                            ));
                            cpu_work[node].push((m, TIME_SCALE * b / r.cpu_gemv_bytes_per_s[node]));
                        }
                        Slot::Place(Place::Gpu(_) | Place::Recompute) => {
                            unreachable!("GPUs enter as groups; experts are not recomputed")
                        }
                    }
                    count_row.push((c, 1.0));
                    mass_row.push((m, 1.0));
                    // The hottest experts bound any slot's mass: m <= p_max * c.
                    pb.row(-inf, 0.0, [(m, 1.0), (c, -inst.objects[first].use_rate)]);
                    expert_cols.push((slot, c, m));
                }
                pb.row(0.0, 0.0, count_row);
                pb.row(0.0, 0.0, mass_row);
            }
            for (j, mut work) in gpu_work.into_iter().enumerate() {
                if pattern.groups[j] {
                    work.push((y, TIME_SCALE * sync(j)));
                    work.push((t, -1.0));
                    pb.row(-inf, 0.0, work);
                    if groups[j].gpus.len() > 1 && whole_on_card[j] > 0.0 {
                        pb.row(
                            -inf,
                            0.0,
                            [(y, TIME_SCALE * (sync(j) + whole_on_card[j])), (t, -1.0)],
                        );
                    }
                }
            }
            for cpu in cpu_work {
                let felt: Vec<Vec<(Var, f64)>> = if f > 0.0 && r.drives() > 0 {
                    drive_work
                        .iter()
                        .map(|d| d.iter().map(|&(c, a)| (c, f * a)).collect())
                        .collect()
                } else {
                    vec![Vec::new()]
                };
                for extra in felt {
                    let mut row = cpu.clone();
                    row.extend(extra);
                    row.push((t, -1.0));
                    pb.row(-inf, 0.0, row);
                }
            }
            for mut drive in drive_work {
                drive.push((t, -1.0));
                pb.row(-inf, 0.0, drive);
            }
            stage_cols.push(PatternCols {
                y,
                t,
                experts: expert_cols,
                trunk: trunk_cols,
            });
        }
        pb.row(1.0, 1.0, weights);
        cols.push(stage_cols);
    }
    // KV groups: a kept share per slot earns the prefill seconds it saves
    // against recomputing (the constant `kv_recompute_seconds` is added
    // back to the bound); slots where keeping saves nothing are left out,
    // since a placement there maps to recomputing at no more cost.
    let mut kv = Vec::with_capacity(inst.kv_ids.len());
    for &o in &inst.kv_ids {
        let object = &inst.objects[o];
        let cost = |place: Place| r.kv_seconds(object, place);
        let gpu_slots = (0..groups.len()).map(|j| (Slot::Group(j), Place::Gpu(groups[j].gpus[0])));
        let rams = (0..r.numa_nodes()).map(|n| (Slot::Place(Place::Ram(n)), Place::Ram(n)));
        let mut slots = Vec::new();
        for (slot, place) in gpu_slots.chain(rams) {
            let saved = cost(Place::Recompute) - cost(place);
            if saved <= 0.0 {
                continue;
            }
            let z = pb.add(-TIME_SCALE * saved, 1.0, integer);
            let bytes = BYTE_SCALE * object.gpu_bytes as f64;
            match slot {
                Slot::Group(j) => gpu_bytes[j].push((z, bytes)),
                Slot::Place(Place::Ram(n)) => ram_bytes[n].push((z, bytes)),
                Slot::Place(_) => unreachable!("KV slots are GPU groups and RAM nodes"),
            }
            slots.push((slot, z));
        }
        if !slots.is_empty() {
            pb.row(-inf, 1.0, slots.iter().map(|&(_, z)| (z, 1.0)));
        }
        kv.push((o, slots));
    }
    for (j, row) in gpu_bytes.into_iter().enumerate() {
        let capacity: u64 = groups[j]
            .gpus
            .iter()
            .map(|&g| r.gpu_capacity_bytes[g])
            .sum();
        pb.row(-inf, BYTE_SCALE * capacity as f64, row);
    }
    for (n, row) in ram_bytes.into_iter().enumerate() {
        pb.row(-inf, BYTE_SCALE * r.ram_capacity_bytes[n] as f64, row);
    }
    let mut model = pb.pb.try_optimise(Sense::Minimise).ok()?;
    model.make_quiet();
    model.set_option("threads", 1);
    for cut in cuts {
        add_cut(&mut model, &cols, cut);
    }
    Some(Built { model, cols, kv })
}

/// A cut on the stage's experts summed over its patterns: the patterns'
/// weights sum to 1, so the sum lies in the same polytope as each pattern's.
fn add_cut(model: &mut Model, cols: &[Vec<PatternCols>], cut: &Cut) {
    let mut row = Vec::new();
    for pc in &cols[cut.stage] {
        for &(_, c, m) in pc.experts.iter().filter(|e| cut.slots.contains(&e.0)) {
            row.push((m.col, 1.0));
            row.push((c.col, -cut.slope));
        }
    }
    model.add_row(..=cut.intercept, row);
}

/// The expert slots of a stage over all its patterns, in the natural order:
/// GPU groups, RAM nodes, drives.
fn stage_slots(cols: &[PatternCols]) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::new();
    for pc in cols {
        for &(slot, _, _) in &pc.experts {
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
    }
    let rank = |s: &Slot| match s {
        Slot::Group(j) => (0, *j),
        Slot::Place(Place::Ram(n)) => (1, *n),
        Slot::Place(Place::Disk(d)) => (2, *d),
        Slot::Place(Place::Gpu(g)) => (0, *g),
        Slot::Place(Place::Recompute) => (3, 0),
    };
    slots.sort_by_key(rank);
    slots
}

/// Facets to start from, so the first LP is already close: for each single
/// slot, tangents of `S` on a geometric grid (wider seeds made the first
/// solve several times slower for no better bound; separation adds the rest).
fn seed_cuts(data: &[StageData], cols: &[Vec<PatternCols>]) -> Vec<Cut> {
    let mut cuts = Vec::new();
    for (s, stage) in data.iter().enumerate() {
        let n = stage.experts.len();
        let slots = stage_slots(&cols[s]);
        if n < 2 || slots.len() < 2 {
            continue;
        }
        let mut pieces: Vec<usize> = (0..usize::BITS)
            .map(|i| 1usize << i)
            .take_while(|&j| j < n)
            .flat_map(|j| [j - 1, n - j])
            .collect();
        pieces.sort_unstable();
        pieces.dedup();
        for &slot in &slots {
            for &piece in &pieces {
                cuts.push(stage.facet(s, vec![slot], piece));
            }
        }
    }
    cuts
}

/// Violated facets at a solution, on each stage's experts summed over its
/// patterns.
fn separate(data: &[StageData], cols: &[Vec<PatternCols>], x: &[f64]) -> Vec<Cut> {
    let mut cuts = Vec::new();
    for (s, stage) in data.iter().enumerate() {
        let slots = stage_slots(&cols[s]);
        if slots.len() < 2 || stage.experts.len() < 2 {
            continue;
        }
        let mut counts = vec![0.0; slots.len()];
        let mut masses = vec![0.0; slots.len()];
        for pc in &cols[s] {
            for &(slot, c, m) in &pc.experts {
                let i = slots
                    .iter()
                    .position(|&t| t == slot)
                    .expect("a slot of the stage");
                counts[i] += x[c.index];
                masses[i] += x[m.index];
            }
        }
        stage.separate(s, &slots, &counts, &masses, &mut cuts);
    }
    cuts
}

fn extract(data: &[StageData], cols: &[Vec<PatternCols>], x: &[f64]) -> Vec<StageRelaxation> {
    let value = |v: Var| x[v.index];
    data.iter()
        .zip(cols)
        .map(|(stage, pcs)| StageRelaxation {
            seconds: pcs.iter().map(|pc| value(pc.t)).sum::<f64>() / TIME_SCALE,
            experts: stage.experts.clone(),
            patterns: pcs
                .iter()
                .map(|pc| PatternShare {
                    weight: value(pc.y),
                    experts: pc
                        .experts
                        .iter()
                        .map(|&(slot, c, m)| (slot, value(c), value(m)))
                        .collect(),
                    trunk: stage
                        .trunk
                        .iter()
                        .zip(&pc.trunk)
                        .map(|(&o, slots)| {
                            (o, slots.iter().map(|&(slot, c)| (slot, value(c))).collect())
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

fn extract_kv(kv: &[(usize, Vec<(Slot, Var)>)], x: &[f64]) -> Vec<(usize, Vec<(Slot, f64)>)> {
    kv.iter()
        .map(|(o, slots)| (*o, slots.iter().map(|&(s, z)| (s, x[z.index])).collect()))
        .collect()
}

/// Token seconds bounded by a solver objective (in `TIME_SCALE` units): the
/// KV groups' recompute seconds, which the objective counts only as savings
/// against, are added back; the tolerance margin is taken off the magnitude
/// of every term, since savings can cancel most of the stage times.
fn bound_seconds(inst: &Instance, objective: f64) -> f64 {
    let r = &inst.resources;
    let kv_recompute_seconds: f64 = inst
        .kv_ids
        .iter()
        .map(|&o| r.kv_seconds(&inst.objects[o], Place::Recompute))
        .sum();
    let lp = objective / TIME_SCALE;
    lp + kv_recompute_seconds - (lp.abs() + kv_recompute_seconds) * TOLERANCE_MARGIN
        + r.fixed_token_seconds
}

/// Solves the LP relaxation with cut rounds until none is violated or the
/// deadline; `None` when HiGHS does not reach optimality in time.
pub fn solve(inst: &Instance, deadline: Instant) -> Option<Relaxation> {
    let groups = gpu_groups(inst);
    let enumerate = groups.len() <= MAX_PATTERN_GROUPS;
    let data = stage_data(inst, groups.len(), enumerate);
    let Built {
        mut model,
        cols,
        kv,
    } = build(inst, &groups, &data, &[], enumerate, false)?;
    let mut cuts = seed_cuts(&data, &cols);
    for cut in &cuts {
        add_cut(&mut model, &cols, cut);
    }
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut stalled = 0;
    for _ in 0..=MAX_CUT_ROUNDS {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        if remaining <= 0.0 {
            break;
        }
        model.set_option("time_limit", remaining);
        let Ok(solved) = model.try_solve() else { break };
        if solved.status() != HighsModelStatus::Optimal {
            break;
        }
        // Every round's optimum is a valid bound: it relaxes the full polytope.
        let x = solved.get_solution().columns().to_vec();
        let new_cuts = separate(&data, &cols, &x);
        let objective = solved.objective_value();
        let improved = best
            .as_ref()
            .is_none_or(|(b, _)| objective > b * (1.0 + STALL_IMPROVEMENT));
        stalled = if improved { 0 } else { stalled + 1 };
        best = Some((objective, x));
        if new_cuts.is_empty() || stalled >= STALL_ROUNDS {
            break;
        }
        model = Model::from(solved);
        for cut in &new_cuts {
            add_cut(&mut model, &cols, cut);
        }
        cuts.extend(new_cuts);
    }
    let (objective, x) = best?;
    Some(Relaxation {
        lower_bound_seconds: bound_seconds(inst, objective),
        kv: extract_kv(&kv, &x),
        method: if enumerate {
            "participation-lp"
        } else {
            "lp-without-sync"
        },
        stages: extract(&data, &cols, &x),
        groups,
        cuts,
    })
}

/// A bound that needs no solver: in each stage the total work, each object
/// at its cheapest place, is shared at best by all resources at once; KV
/// groups' prefill seconds add up rather than share.
pub fn trivial_bound(inst: &Instance) -> f64 {
    let r = &inst.resources;
    let resources = (r.gpus() + r.numa_nodes() + r.drives()).max(1) as f64;
    let cheapest = |o: usize| {
        inst.places
            .iter()
            .filter(|&&q| inst.allowed(o, q))
            .map(|&q| r.work(&inst.objects[o], q).iter().map(|w| w.1).sum::<f64>())
            .fold(f64::INFINITY, f64::min)
    };
    let (kv, weights): (Vec<usize>, Vec<usize>) =
        (0..inst.objects.len()).partition(|&o| inst.objects[o].is_kv());
    weights.into_iter().map(cheapest).sum::<f64>() / resources
        + kv.into_iter().map(cheapest).sum::<f64>()
        + r.fixed_token_seconds
}

/// The relaxation with pattern weights binary and expert counts whole, from
/// the facets the LP found: a small MIP. Its proven dual bound is valid at any
/// stop; its solution has one pattern per stage. `None` when HiGHS finds no
/// feasible solution in time.
pub fn refine_integer(inst: &Instance, lp: &Relaxation, deadline: Instant) -> Vec<Relaxation> {
    let enumerate = lp.method == "participation-lp";
    let data = stage_data(inst, lp.groups.len(), enumerate);
    let mut cuts = lp.cuts.clone();
    let mut rounds: Vec<Relaxation> = Vec::new();
    // Whole counts land where the LP needed no facet: separate the integer
    // solution too and solve again while time remains. Every round's dual
    // bound is valid (each round carries the best so far), and every round's
    // solution is worth rounding.
    loop {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        if remaining <= 0.0 {
            break;
        }
        let Some(Built {
            mut model,
            cols,
            kv,
        }) = build(inst, &lp.groups, &data, &cuts, enumerate, true)
        else {
            break;
        };
        model.set_option("time_limit", remaining);
        model.set_option("mip_rel_gap", 1e-4);
        let Ok(solved) = model.try_solve() else { break };
        let finished = matches!(
            solved.status(),
            HighsModelStatus::Optimal | HighsModelStatus::ReachedTimeLimit
        );
        if !finished || solved.primal_solution_status() != highs::HighsSolutionStatus::Feasible {
            break;
        }
        let Ok(dual_bound) = solved.double_info_value(c"mip_dual_bound") else {
            break;
        };
        let x = solved.get_solution().columns().to_vec();
        let bound = bound_seconds(inst, dual_bound);
        rounds.push(Relaxation {
            lower_bound_seconds: rounds
                .last()
                .map_or(bound, |r| r.lower_bound_seconds.max(bound)),
            method: if enumerate {
                "participation-mip"
            } else {
                "mip-without-sync"
            },
            stages: extract(&data, &cols, &x),
            kv: extract_kv(&kv, &x),
            groups: lp.groups.clone(),
            cuts: Vec::new(),
        });
        let new_cuts = separate(&data, &cols, &x);
        if new_cuts.is_empty() || solved.status() != HighsModelStatus::Optimal {
            break;
        }
        cuts.extend(new_cuts);
    }
    rounds
}

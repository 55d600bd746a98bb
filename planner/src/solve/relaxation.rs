//! The lower bound: a linear relaxation that respects which cards take part
//! in a stage (DESIGN 4, Bounds). Each stage chooses a convex combination of
//! participation patterns (which GPU groups pay their sync overhead); within
//! a pattern objects split fractionally; capacities couple the stages. Its
//! optimum is the Lagrangian dual of the capacities with every stage's
//! participation solved exactly, and far above the plain LP, whose fractional
//! `used[g,s]` pays only part of an overhead.
//!
//! Why it is valid: any placement picks one pattern per stage (weight 1) and
//! whole objects; identical GPUs are merged into a group whose busiest card
//! works at least the group's average; experts are bucketed by use rate with
//! each bucket's *smallest* rate, and every work term grows with the rate.

use crate::cost::{Instance, Place};
use good_lp::solvers::highs::highs;
use good_lp::{variable, Expression, ProblemVariables, Solution, SolverModel, Variable};

/// Time unit of the LP (microseconds) and byte unit (MiB): keeps HiGHS's
/// absolute tolerances far below the quantities that matter.
const TIME_SCALE: f64 = 1e6;
const BYTE_SCALE: f64 = 1.0 / 1048576.0;
/// Relative margin taken off the LP optimum for solver tolerances.
const TOLERANCE_MARGIN: f64 = 1e-7;
/// More GPU groups than this: the relaxation drops sync overheads instead of
/// enumerating 2^groups patterns (still valid, weaker).
const MAX_PATTERN_GROUPS: usize = 6;
/// Most buckets per stage; below it every expert is its own bucket.
const MAX_BUCKETS: usize = 256;

/// Identical GPUs (same GEMV rate and sync overhead) form a group.
#[derive(Debug, Clone)]
pub struct GpuGroup {
    pub gpus: Vec<usize>,
}

/// Objects of one stage with the same sizes and nearly the same use rate.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Object ids, hottest first.
    pub members: Vec<usize>,
    /// The smallest use rate of the members (rounding down keeps the bound valid).
    pub use_rate: f64,
    pub expert: bool,
}

/// Where a bucket's share goes in the relaxation: a GPU group, a RAM node or a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Group(usize),
    Place(Place),
}

/// One pattern of a stage in the relaxed solution: its weight and, per
/// bucket, the number of objects each slot takes (summing to `members * weight`).
#[derive(Debug, Clone)]
pub struct PatternShare {
    pub groups: Vec<bool>,
    pub weight: f64,
    pub shares: Vec<Vec<(Slot, f64)>>,
}

#[derive(Debug, Clone)]
pub struct StageRelaxation {
    /// The stage's time in the relaxed solution (seconds).
    pub seconds: f64,
    pub buckets: Vec<Bucket>,
    pub patterns: Vec<PatternShare>,
}

#[derive(Debug, Clone)]
pub struct Relaxation {
    pub lower_bound_seconds: f64,
    pub method: &'static str,
    pub groups: Vec<GpuGroup>,
    pub stages: Vec<StageRelaxation>,
}

pub fn gpu_groups(inst: &Instance) -> Vec<GpuGroup> {
    let r = &inst.resources;
    let mut groups: Vec<GpuGroup> = Vec::new();
    for g in 0..r.gpus() {
        let same = |h: usize| {
            r.gpu_gemv_bytes_per_s[h] == r.gpu_gemv_bytes_per_s[g] && r.gpu_sync_seconds[h] == r.gpu_sync_seconds[g]
        };
        match groups.iter_mut().find(|grp| same(grp.gpus[0])) {
            Some(grp) => grp.gpus.push(g),
            None => groups.push(GpuGroup { gpus: vec![g] }),
        }
    }
    groups
}

/// Buckets of a stage: trunk objects alone; experts alone when few, else
/// grouped by use rate within a relative width that keeps at most
/// `MAX_BUCKETS` buckets.
pub fn buckets(inst: &Instance, stage: usize) -> Vec<Bucket> {
    let objects = &inst.stages[stage].objects;
    let mut out: Vec<Bucket> = objects
        .iter()
        .filter(|&&o| !inst.objects[o].is_expert())
        .map(|&o| Bucket { members: vec![o], use_rate: inst.objects[o].use_rate, expert: false })
        .collect();
    let mut experts: Vec<usize> = objects.iter().copied().filter(|&o| inst.objects[o].is_expert()).collect();
    experts.sort_by(|&a, &b| inst.objects[b].use_rate.total_cmp(&inst.objects[a].use_rate));
    let rate = |o: usize| inst.objects[o].use_rate;
    let mut width = 0.0;
    loop {
        let mut grouped: Vec<Bucket> = Vec::new();
        for &o in &experts {
            match grouped.last_mut() {
                Some(b) if rate(b.members[0]) <= rate(o) * (1.0 + width) => {
                    b.members.push(o);
                    b.use_rate = rate(o);
                }
                _ => grouped.push(Bucket { members: vec![o], use_rate: rate(o), expert: true }),
            }
        }
        if grouped.len() <= MAX_BUCKETS {
            out.extend(grouped);
            return out;
        }
        width = if width == 0.0 { 1e-3 } else { width * 2.0 };
    }
}

/// A participation pattern of one stage: which GPU groups take part, and
/// where each of the stage's first `fixed.len()` (trunk) buckets sits whole.
#[derive(Debug, Clone)]
struct Pattern {
    groups: Vec<bool>,
    fixed: Vec<Slot>,
}

/// Most patterns per stage: trunk buckets beyond this budget stay fractional.
const MAX_PATTERNS: usize = 64;

/// Patterns of a stage with `trunk` trunk buckets (they come first in
/// `buckets`): every participation set when `enumerate`, times every whole
/// place of as many trunk buckets as the budget allows, keeping only the
/// sets that contain the groups the fixed trunk uses.
fn patterns(groups: usize, numa_nodes: usize, trunk: usize, enumerate: bool) -> Vec<Pattern> {
    let masks: Vec<Vec<bool>> = if enumerate {
        (0..1usize << groups).map(|mask| (0..groups).map(|j| mask >> j & 1 == 1).collect()).collect()
    } else {
        vec![vec![true; groups]]
    };
    let slots: Vec<Slot> = (0..groups).map(Slot::Group).chain((0..numa_nodes).map(|n| Slot::Place(Place::Ram(n)))).collect();
    let mut fixed_count = 0;
    while fixed_count < trunk && masks.len() * slots.len().pow(fixed_count as u32 + 1) <= MAX_PATTERNS {
        fixed_count += 1;
    }
    let mut assignments: Vec<Vec<Slot>> = vec![Vec::new()];
    for _ in 0..fixed_count {
        assignments = assignments
            .into_iter()
            .flat_map(|a| slots.iter().map(move |&slot| [a.clone(), vec![slot]].concat()))
            .collect();
    }
    let mut out = Vec::new();
    for fixed in assignments {
        for mask in &masks {
            let covers = fixed.iter().all(|slot| match slot {
                Slot::Group(j) => mask[*j],
                Slot::Place(_) => true,
            });
            if covers {
                out.push(Pattern { groups: mask.clone(), fixed: fixed.clone() });
            }
        }
    }
    out
}

/// Solves the relaxation; `None` when HiGHS does not reach optimality in time.
pub fn solve(inst: &Instance, time_limit_seconds: f64) -> Option<Relaxation> {
    let r = &inst.resources;
    let groups = gpu_groups(inst);
    let enumerate = groups.len() <= MAX_PATTERN_GROUPS;
    let sync = |j: usize| if enumerate { r.gpu_sync_seconds[groups[j].gpus[0]] } else { 0.0 };
    let f = r.felt_fraction;

    let mut vars = ProblemVariables::new();
    let mut constraints = Vec::new();
    let mut objective = Expression::with_capacity(inst.stages.len() * 4);
    let mut gpu_bytes: Vec<Expression> = groups.iter().map(|_| Expression::with_capacity(1024)).collect();
    let mut ram_bytes: Vec<Expression> = (0..r.numa_nodes()).map(|_| Expression::with_capacity(1024)).collect();
    // Per stage: its buckets, and per pattern (groups, weight var, per bucket the (slot, var) list).
    type PatternVars = (Vec<bool>, Variable, Variable, Vec<Vec<(Slot, Variable)>>);
    let mut stage_vars: Vec<(Vec<Bucket>, Vec<PatternVars>)> = Vec::with_capacity(inst.stages.len());

    for s in 0..inst.stages.len() {
        let stage_buckets = buckets(inst, s);
        if stage_buckets.is_empty() {
            stage_vars.push((stage_buckets, Vec::new()));
            continue;
        }
        let trunk = stage_buckets.iter().take_while(|b| !b.expert).count();
        let mut weights = Expression::with_capacity(8);
        let mut per_pattern = Vec::new();
        for pattern in patterns(groups.len(), r.numa_nodes(), trunk, enumerate) {
            let y = vars.add(variable().min(0.0).max(1.0));
            let t = vars.add(variable().min(0.0));
            weights.add_mul(1.0, y);
            objective.add_mul(1.0, t);
            let mut gpu_work: Vec<Expression> = groups.iter().map(|_| Expression::with_capacity(64)).collect();
            let mut cpu_work: Vec<Expression> = (0..r.numa_nodes()).map(|_| Expression::with_capacity(64)).collect();
            let mut drive_work: Vec<Expression> = (0..r.drives()).map(|_| Expression::with_capacity(64)).collect();
            // The largest whole trunk work on one card of each group.
            let mut whole_on_card = vec![0.0f64; groups.len()];
            let mut bucket_vars = Vec::with_capacity(stage_buckets.len());
            for (k, bucket) in stage_buckets.iter().enumerate() {
                let o = &inst.objects[bucket.members[0]];
                let p = bucket.use_rate;
                let fixed = pattern.fixed.get(k);
                let open = |slot: Slot| fixed.is_none_or(|&f| f == slot);
                let mut slots = Vec::new();
                let mut count = Expression::with_capacity(8);
                for (j, grp) in groups.iter().enumerate() {
                    if !pattern.groups[j] || !open(Slot::Group(j)) {
                        continue;
                    }
                    let x = vars.add(variable().min(0.0));
                    let card_work = p * o.gpu_bytes as f64 / r.gpu_gemv_bytes_per_s[grp.gpus[0]];
                    if fixed.is_some() {
                        whole_on_card[j] = whole_on_card[j].max(card_work);
                    }
                    gpu_work[j].add_mul(TIME_SCALE * card_work / grp.gpus.len() as f64, x);
                    gpu_bytes[j].add_mul(BYTE_SCALE * o.gpu_bytes as f64, x);
                    count.add_mul(1.0, x);
                    slots.push((Slot::Group(j), x));
                }
                for n in (0..r.numa_nodes()).filter(|&n| open(Slot::Place(Place::Ram(n)))) {
                    let x = vars.add(variable().min(0.0));
                    cpu_work[n].add_mul(TIME_SCALE * p * o.ram_bytes as f64 / r.cpu_gemv_bytes_per_s[n], x);
                    ram_bytes[n].add_mul(BYTE_SCALE * o.ram_bytes as f64, x);
                    count.add_mul(1.0, x);
                    slots.push((Slot::Place(Place::Ram(n)), x));
                }
                if bucket.expert {
                    for d in 0..r.drives() {
                        let x = vars.add(variable().min(0.0));
                        let b = o.disk_bytes as f64;
                        let n = r.drive_numa[d];
                        drive_work[d].add_mul(TIME_SCALE * p * (r.drive_latency_seconds[d] + b / r.drive_read_bytes_per_s[d]), x);
                        cpu_work[n].add_mul(TIME_SCALE * p * b / r.cpu_gemv_bytes_per_s[n], x);
                        count.add_mul(1.0, x);
                        slots.push((Slot::Place(Place::Disk(d)), x));
                    }
                }
                count.add_mul(-(bucket.members.len() as f64), y);
                constraints.push(count.eq(0.0));
                bucket_vars.push(slots);
            }
            for (j, mut work) in gpu_work.into_iter().enumerate() {
                if pattern.groups[j] {
                    work.add_mul(TIME_SCALE * sync(j), y);
                    constraints.push(work.leq(t));
                    if groups[j].gpus.len() > 1 && whole_on_card[j] > 0.0 {
                        // A whole trunk object sits on one card of the group.
                        let mut card = Expression::with_capacity(2);
                        card.add_mul(TIME_SCALE * (sync(j) + whole_on_card[j]), y);
                        constraints.push(card.leq(t));
                    }
                }
            }
            for cpu in cpu_work {
                if f > 0.0 && r.drives() > 0 {
                    for drive in &drive_work {
                        let mut felt = cpu.clone();
                        felt.add_mul(f, drive.clone());
                        constraints.push(felt.leq(t));
                    }
                } else {
                    constraints.push(cpu.leq(t));
                }
            }
            for drive in drive_work {
                constraints.push(drive.leq(t));
            }
            per_pattern.push((pattern.groups, y, t, bucket_vars));
        }
        constraints.push(weights.eq(1.0));
        stage_vars.push((stage_buckets, per_pattern));
    }
    for (j, bytes) in gpu_bytes.into_iter().enumerate() {
        let capacity: u64 = groups[j].gpus.iter().map(|&g| r.gpu_capacity_bytes[g]).sum();
        constraints.push(bytes.leq(BYTE_SCALE * capacity as f64));
    }
    for (n, bytes) in ram_bytes.into_iter().enumerate() {
        constraints.push(bytes.leq(BYTE_SCALE * r.ram_capacity_bytes[n] as f64));
    }

    let mut problem = vars
        .minimise(objective.clone())
        .using(highs)
        .set_time_limit(time_limit_seconds.max(0.01))
        .set_threads(1);
    if let Ok(v) = std::env::var("RESIDENCY_LP_SOLVER") { problem = problem.set_option("solver", v.as_str()); }
    if let Ok(v) = std::env::var("RESIDENCY_LP_PRESOLVE") { problem = problem.set_option("presolve", v.as_str()); }
    for c in constraints {
        problem.add_constraint(c);
    }
    let solution = problem.solve().ok()?;
    if !matches!(solution.status(), good_lp::solvers::SolutionStatus::Optimal) {
        return None;
    }
    let lp_seconds = objective.eval_with(&solution) / TIME_SCALE;
    let stages = stage_vars
        .into_iter()
        .map(|(buckets, per_pattern)| StageRelaxation {
            seconds: per_pattern.iter().map(|(_, _, t, _)| solution.value(*t)).sum::<f64>() / TIME_SCALE,
            buckets,
            patterns: per_pattern
                .into_iter()
                .map(|(groups, y, _, bucket_vars)| PatternShare {
                    groups,
                    weight: solution.value(y),
                    shares: bucket_vars
                        .into_iter()
                        .map(|slots| slots.into_iter().map(|(slot, x)| (slot, solution.value(x))).collect())
                        .collect(),
                })
                .collect(),
        })
        .collect();
    Some(Relaxation {
        lower_bound_seconds: lp_seconds * (1.0 - TOLERANCE_MARGIN) + r.fixed_token_seconds,
        method: if enumerate { "participation-lp" } else { "lp-without-sync" },
        groups,
        stages,
    })
}

/// A bound that needs no solver: in each stage the total work, each object
/// at its cheapest place, is shared by at most all resources at once.
pub fn trivial_bound(inst: &Instance) -> f64 {
    let r = &inst.resources;
    let resources = (r.gpus() + r.numa_nodes() + r.drives()).max(1) as f64;
    let stage_sum: f64 = inst
        .stages
        .iter()
        .map(|stage| {
            let work: f64 = stage
                .objects
                .iter()
                .map(|&o| {
                    let mut loads = crate::cost::StageLoads::new(r);
                    inst.places
                        .iter()
                        .filter(|&&q| inst.allowed(o, q))
                        .map(|&q| {
                            loads.apply(r, &inst.objects[o], q, 1.0);
                            let w = loads.gpu.iter().chain(&loads.cpu).chain(&loads.drive).sum::<f64>();
                            loads.apply(r, &inst.objects[o], q, -1.0);
                            w
                        })
                        .fold(f64::INFINITY, f64::min)
                })
                .sum();
            work / resources
        })
        .sum();
    stage_sum + r.fixed_token_seconds
}

//! The lower bound, without a general solver: Lagrangian relaxation of the
//! capacity rows. With a price per byte on every GPU and RAM node, the
//! stages decouple; each stage's priced problem is bounded (exactly, for
//! split experts and whole trunk components), and the prices, a handful of
//! numbers, are raised by a cutting-plane method on their dual function.
//! Every priced evaluation is a valid bound; the best one is reported.
//!
//! Why each stage's bound holds:
//! - Participation: a placement whose stage takes `T` leaves every GPU with
//!   a sync overhead of at most `T` free to take part at no cost, so only
//!   the nested sets {g : sync_g <= v} need trying, not every subset.
//! - The experts of a stage share one size, so loads depend on the use-rate
//!   mass per place and the byte price on the count. Exchanging equal
//!   masses between two places, colder experts to the cheaper one, keeps
//!   every load and never raises the price: the cheapest places hold the
//!   coldest experts, contiguously.
//! - For a given stage time `T` each place absorbs the mass its resource's
//!   time left allows; filling the cheapest places first is optimal. A
//!   drive shares its node's cores with that node's RAM and is filled
//!   first; its CPU cost per mass is taken as at most the RAM's.
//! - `T + price(T)` is convex for a fixed participation set and `price` is
//!   non-increasing, so between any two evaluated times `t_i < t_j` the
//!   stage costs at least `t_i + price(t_j)`, and the secants of the
//!   evaluated points bound it outside their intervals: a search that
//!   evaluates where that bound is least (`stage::minimize`; the function
//!   is piecewise linear, so a few points on each side of the minimum
//!   close the gap) gives a lower bound that converges to the minimum; so
//!   does the same search over the drive seconds, on brackets.
//! - Alike stages (the same expert sizes and trunk, rates equal to their
//!   last bits, as layers of one heat profile are) are solved once per
//!   evaluation: a placement of one at time `T` places the other, experts
//!   matched by rank, within `(1 + d) T` at the same price where its rates
//!   are at most `1 + d` times as large, so the bound taken over is scaled
//!   by `1 / (1 + d)`.
//!
//! Relaxed, so valid and possibly weaker: experts split between places, the
//! felt share of reads (`felt_fraction`) left out of the CPU rows, and
//! trunk components beyond a stage's combination budget only priced.

mod priced;
mod stage;

use microlp::{ComparisonOp, OptimizationDirection, Problem};
use priced::Priced;
use residency_core::cost::{Instance, Place, Resources};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Units of the price master problem: microseconds and GiB keep its
/// coefficients near 1.
const TIME_UNIT: f64 = 1e-6;
const BYTE_UNIT: f64 = (1u64 << 30) as f64;
/// Scales of one price at a time around the best prices, for solutions to mix.
const NEARBY_PRICES: [f64; 2] = [0.99, 1.01];
/// Relative margin taken off every bound for floating-point error.
const TOLERANCE_MARGIN: f64 = 1e-9;

/// A relaxed placement: one solution per stage.
#[derive(Debug, Clone, Default)]
pub struct Fractional {
    pub stages: Vec<StageShares>,
}

/// One stage of a relaxed placement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageShares {
    /// Expert counts per place, hottest block first (the stage's experts in
    /// `Bound::expert_order`); they sum to the number of experts.
    pub blocks: Vec<(Place, f64)>,
    /// Objects placed whole (trunk components, KV groups) and their places.
    pub whole: Vec<(usize, Place)>,
    /// The stage's seconds in this solution, without prices.
    pub seconds: f64,
    /// Bytes it puts on each GPU, then each RAM node.
    pub bytes: Vec<f64>,
}

/// The bound and the relaxed placements met on the way.
#[derive(Debug, Clone)]
pub struct Bound {
    pub lower_bound_seconds: f64,
    /// Per stage, its experts hottest first.
    pub expert_order: Vec<Vec<usize>>,
    /// The relaxed placement at every prices tried, the best bound first,
    /// then the latest first: starts for rounding (empty when not asked for).
    pub starts: Vec<Fractional>,
    /// The prices of the best bound, seconds per byte of each GPU then each
    /// RAM node: where a later search on similar inputs starts.
    pub prices_seconds_per_byte: Vec<f64>,
    /// At those prices, each stage's priced bound (seconds plus byte
    /// prices): what the bound with move costs (`moves`) caps each stage at.
    pub stage_bounds_seconds: Vec<f64>,
    /// The bytes each GPU, then each RAM node, can hold that the prices
    /// are charged on (`usable_bytes`): the bound is `fixed_token_seconds`
    /// plus the stage bounds less these times the prices.
    pub capacities_bytes: Vec<f64>,
}

/// How `bound_from` searches the prices.
#[derive(Debug, Clone, Copy)]
pub struct PriceSearch<'a> {
    /// Stop at this instant (one evaluation is always made).
    pub deadline: Instant,
    /// Stop when the cutting-plane model promises less than this share more.
    pub tolerance: f64,
    /// Stop once the bound reaches this many seconds.
    pub good_enough: f64,
    /// Start here (seconds per byte, as `Bound::prices_seconds_per_byte`)
    /// instead of at zero prices.
    pub warm_prices: Option<&'a [f64]>,
    /// Whether to collect relaxed placements for rounding (the solutions
    /// near the best prices and their Dantzig-Wolfe mix cost evaluations).
    pub starts: bool,
}

/// A bound that needs no prices: in each stage the total work, each object
/// at its cheapest place, is shared at best by all resources at once; KV
/// groups' prefill seconds add up rather than share.
pub fn work_sum_bound(inst: &Instance) -> f64 {
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

/// Most combinations of the other objects' sizes `usable_bytes` tries.
const USABLE_COMBINATIONS: u64 = 100_000;

/// The most bytes whole objects can fill of `capacity` at `place`: when
/// experts of one size fill it, what is left below one expert stays
/// empty in any placement, and prices on the full capacity would sell
/// that room. Found by trying every count of each other object size (trunk
/// components, KV groups) with as many experts as then fit; `capacity`
/// itself when the experts differ in size or the combinations are too many.
fn usable_bytes(inst: &Instance, place: Place, capacity: u64) -> u64 {
    let mut expert_size = None;
    let mut others: Vec<(u64, u64)> = Vec::new();
    let mut experts = 0u64;
    for (o, object) in inst.objects.iter().enumerate() {
        let bytes = object.bytes_at(place);
        if bytes == 0 || !inst.allowed(o, place) {
            continue;
        }
        if object.is_expert() {
            if expert_size.is_some_and(|size| size != bytes) {
                return capacity;
            }
            expert_size = Some(bytes);
            experts += 1;
        } else {
            match others.iter_mut().find(|(size, _)| *size == bytes) {
                Some((_, count)) => *count += 1,
                None => others.push((bytes, 1)),
            }
        }
    }
    let Some(size) = expert_size else {
        return capacity;
    };
    let combinations = others
        .iter()
        .try_fold(1u64, |acc, &(_, count)| acc.checked_mul(count + 1));
    if combinations.is_none_or(|c| c > USABLE_COMBINATIONS) {
        return capacity;
    }
    let mut best = 0u64;
    let mut counts = vec![0u64; others.len()];
    loop {
        let fixed: u64 = counts.iter().zip(&others).map(|(c, (s, _))| c * s).sum();
        if fixed <= capacity {
            let filled = fixed + ((capacity - fixed) / size).min(experts) * size;
            best = best.max(filled);
            if best == capacity {
                return capacity;
            }
        }
        let mut i = 0;
        loop {
            if i == others.len() {
                return best;
            }
            counts[i] += 1;
            if counts[i] <= others[i].1 {
                break;
            }
            counts[i] = 0;
            i += 1;
        }
    }
}

/// The capacitated place of price index `i` (the inverse of `price_index`).
fn capacity_place(r: &Resources, i: usize) -> Place {
    if i < r.gpus() {
        Place::Gpu(i)
    } else {
        Place::Ram(i - r.gpus())
    }
}

/// Index of a capacitated place among the prices: GPUs, then RAM nodes.
fn price_index(r: &Resources, place: Place) -> Option<usize> {
    match place {
        Place::Gpu(g) => Some(g),
        Place::Ram(n) => Some(r.gpus() + n),
        Place::Disk(_) | Place::Recompute => None,
    }
}

/// Maximises the dual function over the prices until `deadline`, or until
/// the cutting-plane model promises less than `tolerance` (relative) more,
/// or until the bound reaches `good_enough` seconds.
pub fn bound(inst: &Instance, deadline: Instant, tolerance: f64, good_enough: f64) -> Bound {
    bound_from(
        inst,
        PriceSearch {
            deadline,
            tolerance,
            good_enough,
            warm_prices: None,
            starts: true,
        },
    )
}

/// `bound`, searched as `search` says: from warm prices, and without the
/// relaxed placements when only the bound and the prices are wanted.
pub fn bound_from(inst: &Instance, search: PriceSearch) -> Bound {
    let PriceSearch {
        deadline,
        tolerance,
        good_enough,
        ..
    } = search;
    let priced = Priced::new(inst);
    let dims = priced.capacities.len();
    let most_saved = price_box(inst, dims);
    // Each evaluation of the whole function sets the time another must
    // find left: its own, less half the bound's time (the search after it
    // absorbs that much; a step past the deadline that cheap is what the
    // climb on DeepSeek-V3 on two cards lives on, and at 10 s on Kimi
    // streaming ~20 %, whose bound stayed at 17.7 ms with a quarter).
    let grace = deadline.saturating_duration_since(Instant::now()) / 2;
    let reserve = Cell::new(Duration::ZERO);
    let evaluate = |p: &[f64]| {
        let started = Instant::now();
        let (value, g, fractional, stage_bounds) = priced.evaluate(&scaled(p));
        reserve.set(started.elapsed().saturating_sub(grace));
        (
            value / TIME_UNIT,
            g.iter().map(|x| x / BYTE_UNIT).collect::<Vec<f64>>(),
            fractional,
            stage_bounds,
        )
    };
    let mut ascent = Ascent {
        deadline,
        tolerance,
        good_enough: good_enough / TIME_UNIT,
        most: &most_saved,
        reserve: Some(&reserve),
    };
    // Warm prices are kept inside the box; the first step around them is
    // small, as the best prices move little when the inputs do. A cold
    // search first climbs the estimate from a sample of the stages (of
    // their classes of alike stages, `Priced::expert_classes`) for at
    // most half the time and starts at its best prices, with a radius of a
    // 32nd of them; with too few stages to sample, from zero prices with
    // the radius of the Polyak step (`Ascent::climb`).
    let expert_stages = priced.stages.iter().filter(|d| d.experts.is_some()).count();
    let classes = priced.expert_classes();
    let (center, radius): (Vec<f64>, Vec<f64>) = match search.warm_prices {
        Some(warm) if warm.len() == dims => (0..dims)
            .map(|i| {
                let p = (warm[i] * BYTE_UNIT / TIME_UNIT).clamp(0.0, most_saved[i]);
                (p, (p / 8.0).max(most_saved[i] / 1024.0))
            })
            .unzip(),
        _ if expert_stages > SAMPLED_STAGES && dims > 0 => {
            match sampled_start(&priced, &ascent, classes.div_ceil(SAMPLED_STAGES)) {
                Some(start) => start,
                // No time for whole evaluations at climbed prices: the one
                // always made, at zero prices, is the bound (a second, a blind step
                // from zero, cost a 2-s limit a third of its time at Kimi
                // scale with felt reads, and bound less).
                None => {
                    ascent.deadline = Instant::now();
                    (vec![0.0; dims], Vec::new())
                }
            }
        }
        _ => (vec![0.0; dims], Vec::new()),
    };
    let mut starts = Vec::new();
    // Each evaluation's stage bounds, in the climb's order: the best's are
    // kept with the bound.
    let mut stage_bounds = Vec::new();
    let climbed = ascent.climb(
        center,
        (!radius.is_empty()).then_some(radius),
        |p: &[f64]| {
            let (value, g, fractional, stages) = evaluate(p);
            if search.starts || starts.is_empty() {
                starts.push(fractional);
            }
            stage_bounds.push(stages);
            (value, g)
        },
    );
    let (center, center_value) = (climbed.center, climbed.value);
    let best_start = if search.starts { climbed.best } else { 0 };
    // Stages switch between solutions at prices near the best: those
    // solutions are what the master below mixes.
    let nearby = if search.starts { 0..dims } else { 0..0 };
    'nearby: for i in nearby {
        for scale in NEARBY_PRICES {
            if Instant::now() >= deadline {
                break 'nearby;
            }
            let mut near = center.clone();
            near[i] = if near[i] > 0.0 {
                near[i] * scale
            } else {
                most_saved[i] * (scale - 1.0).abs() * 1e-3
            };
            starts.push(evaluate(&near).2);
        }
    }
    if search.starts {
        let best = starts.remove(best_start);
        starts.reverse();
        starts.insert(0, best);
        // The mix is the best start where it is found (Kimi streaming
        // ~20 %: 36.73 ms at 2 s, 37.83 without it), and its master took
        // 0.16-0.2 s there: given half the bound's time when less is left.
        if let Some(mixed) = combine(&priced.capacities, &starts, deadline, grace) {
            starts.insert(0, mixed);
        }
    } else {
        starts.clear();
    }
    let seconds = center_value * TIME_UNIT;
    Bound {
        lower_bound_seconds: seconds - seconds.abs() * TOLERANCE_MARGIN,
        expert_order: priced
            .stages
            .iter()
            .map(|data| data.experts.as_ref().map_or(Vec::new(), |e| e.ids.clone()))
            .collect(),
        starts,
        prices_seconds_per_byte: scaled(&center),
        stage_bounds_seconds: stage_bounds.swap_remove(climbed.best),
        capacities_bytes: priced.capacities.clone(),
    }
}

/// Prices in seconds per byte from the search's units.
fn scaled(p: &[f64]) -> Vec<f64> {
    p.iter().map(|x| x * TIME_UNIT / BYTE_UNIT).collect()
}

/// The box of the price search, in `TIME_UNIT` per `BYTE_UNIT`: a price
/// above what any object could save per byte at a place buys nothing. Each
/// object's worst seconds are found once, not once per price: at Kimi
/// scale that scan dominated a re-plan.
fn price_box(inst: &Instance, dims: usize) -> Vec<f64> {
    let r = &inst.resources;
    let sync = r.gpu_sync_seconds.iter().copied().fold(0.0, f64::max);
    let mut most_saved = vec![0.0f64; dims];
    for (o, object) in inst.objects.iter().enumerate() {
        let worst = inst
            .places
            .iter()
            .filter(|&&q| inst.allowed(o, q))
            .map(|&q| r.work(object, q).iter().map(|w| w.1).sum::<f64>())
            .fold(0.0, f64::max);
        for (i, most) in most_saved.iter_mut().enumerate() {
            let place = capacity_place(r, i);
            let bytes = object.bytes_at(place);
            if bytes > 0 && inst.allowed(o, place) {
                *most = most.max((worst + sync) / bytes as f64);
            }
        }
    }
    most_saved
        .iter_mut()
        .for_each(|p| *p *= 2.0 * BYTE_UNIT / TIME_UNIT);
    most_saved
}

/// A cold search's start: the estimate from every `stride`-th class of
/// expert stages climbed for at most half the time, and a radius of a
/// 32nd of its best prices; `None` when not even its first step had the time that two
/// whole evaluations need, or when one at the climbed prices no longer
/// fits.
fn sampled_start(
    priced: &Priced,
    ascent: &Ascent<'_>,
    stride: usize,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let (deadline, tolerance) = (ascent.deadline, ascent.tolerance);
    let dims = priced.capacities.len();
    // One evaluation of the whole function costs about `stride` times
    // `WHOLE_PER_ESTIMATE` estimates (the estimate's searches are coarse,
    // and cost more as the prices rise); two of them are left to the
    // bound's own search, so that its first one, always made, keeps the
    // deadline; and the estimate's climb stops at half the time.
    let now = Instant::now();
    let half = deadline.saturating_duration_since(now) / 2;
    let reserve = Cell::new(half);
    let counted = Cell::new(false);
    let latest = Cell::new(Duration::ZERO);
    let estimate = |p: &[f64]| {
        let started = Instant::now();
        let (value, g) = priced.estimate(&scaled(p), stride);
        // Counted from the first estimate, at zero prices: counted from
        // each latest (dearer as the prices rise), the climb stopped
        // earlier and the bound at 10 s on Kimi streaming ~20 % fell
        // from 35-36.7 ms to 17.7.
        let whole = started
            .elapsed()
            .mul_f64(WHOLE_PER_ESTIMATE * stride as f64);
        latest.set(whole);
        if !counted.replace(true) {
            reserve.set((whole * 2).max(half));
        }
        (value / TIME_UNIT, g.iter().map(|x| x / BYTE_UNIT).collect())
    };
    let sampled = Ascent {
        tolerance: tolerance.max(SAMPLED_TOLERANCE),
        reserve: Some(&reserve),
        ..*ascent
    };
    let climbed = sampled.climb(vec![0.0; dims], None, estimate);
    // Where two whole evaluations as the latest estimate counts them (about
    // one: the estimate's searches are coarse) no longer fit, the climbed
    // prices are given up for zero prices, whose one evaluation is
    // cheaper: at 2 s a climb begun on a cheap first estimate left a
    // whole evaluation of 1.6 s at its prices, and the plan at greedy.
    if (climbed.evaluations == 1 && Instant::now() + reserve.get() >= deadline)
        || Instant::now() + latest.get() * 2 >= deadline
    {
        return None;
    }
    // The estimate's best prices are near the whole function's: a
    // step of an eighth of them cost five evaluations to shrink.
    let largest = climbed.center.iter().copied().fold(0.0, f64::max);
    let radius = if largest > 0.0 {
        climbed
            .center
            .iter()
            .map(|p| (p / 32.0).max(largest / 256.0))
            .collect()
    } else {
        Vec::new()
    };
    Some((climbed.center, radius))
}

/// Each stage's solutions at the prices tried are columns of a
/// Dantzig-Wolfe master: convex weights per stage, least total seconds,
/// capacities kept. A single prices' solutions can pile every stage onto
/// one of two like places; the master mixes them. Returns per stage the
/// solution it weights most; `None` when no mix fits or the LP fails, or
/// has not solved by `deadline` or within `least` (at least 50 ms),
/// whichever is later.
fn combine(
    capacities: &[f64],
    starts: &[Fractional],
    deadline: Instant,
    least: Duration,
) -> Option<Fractional> {
    let stages = starts.first()?.stages.len();
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    problem.set_time_limit(
        deadline
            .saturating_duration_since(Instant::now())
            .max(least.max(Duration::from_millis(50))),
    );
    let mut room: Vec<f64> = capacities.iter().map(|c| c / BYTE_UNIT).collect();
    let mut usage: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); capacities.len()];
    let mut columns: Vec<Vec<(usize, microlp::Variable)>> = Vec::with_capacity(stages);
    for s in 0..stages {
        let mut distinct: Vec<usize> = Vec::new();
        for (k, start) in starts.iter().enumerate() {
            if !distinct
                .iter()
                .any(|&j| starts[j].stages[s] == start.stages[s])
            {
                distinct.push(k);
            }
        }
        if let [only] = distinct[..] {
            // One solution: its bytes are taken off the room.
            for (left, b) in room.iter_mut().zip(&starts[only].stages[s].bytes) {
                *left -= b / BYTE_UNIT;
            }
            columns.push(Vec::new());
            continue;
        }
        let mut weights = Vec::new();
        let mut stage_columns = Vec::new();
        for k in distinct {
            let shares = &starts[k].stages[s];
            let w = problem.add_var(shares.seconds / TIME_UNIT, (0.0, 1.0));
            for (q, b) in shares.bytes.iter().enumerate() {
                if *b > 0.0 {
                    usage[q].push((w, b / BYTE_UNIT));
                }
            }
            weights.push((w, 1.0));
            stage_columns.push((k, w));
        }
        problem.add_constraint(weights, ComparisonOp::Eq, 1.0);
        columns.push(stage_columns);
    }
    if columns.iter().all(Vec::is_empty) {
        return None;
    }
    for (row, left) in usage.into_iter().zip(room) {
        if !row.is_empty() {
            problem.add_constraint(row, ComparisonOp::Le, left);
        }
    }
    let microlp::SolveOutcome::Solution(solution) = problem.solve().ok()? else {
        return None;
    };
    // Per stage the column the master weights most.
    let stages = (0..stages)
        .map(|s| {
            let k = columns[s]
                .iter()
                .max_by(|x, y| solution.var_value(x.1).total_cmp(&solution.var_value(y.1)))
                .map_or(0, |&(k, _)| k);
            starts[k].stages[s].clone()
        })
        .collect();
    Some(Fractional { stages })
}

/// How many coarse estimates of a stage one whole evaluation of it costs,
/// as the estimate's climb counts it (Kimi streaming ~5 %: 2.7 at the
/// prices of a 2-s climb; taken as 1, as before the estimate was coarse:
/// at 1.5 or 3 the climb on DeepSeek-V3 on two cards stopped earlier and
/// its 2-s gap rose from 0.07 % to 0.21 % and 13 %).
const WHOLE_PER_ESTIMATE: f64 = 1.0;
/// Classes of alike stages with experts whose estimate a cold price search
/// climbs first (`Priced::estimate`): enough for their mean to be near the
/// whole's.
const SAMPLED_STAGES: usize = 4;
/// The estimate's climb stops when its model promises less than this
/// share more: it only chooses where the bound's own search starts.
const SAMPLED_TOLERANCE: f64 = 1e-4;

/// A proximal cutting-plane ascent on a concave function of the prices
/// (in `TIME_UNIT` per `BYTE_UNIT`) within the box `[0, most]`.
#[derive(Clone, Copy)]
struct Ascent<'a> {
    deadline: Instant,
    /// Stop when the model promises less than this share more.
    tolerance: f64,
    /// Stop once the value reaches this; a plan's seconds, so also where
    /// the first step aims.
    good_enough: f64,
    most: &'a [f64],
    /// Time that must be left before the deadline for another step, as
    /// the function being climbed last set it (its own cost, or what
    /// must follow it): a step at Kimi scale with felt reads costs more
    /// than a short limit's whole bound time, and was taken past it.
    reserve: Option<&'a Cell<Duration>>,
}

/// Where an ascent ended: the best prices, their value, and the index of
/// their evaluation (0 is `center`'s).
struct Climbed {
    center: Vec<f64>,
    value: f64,
    best: usize,
    /// Evaluations made, the first included.
    evaluations: usize,
}

impl Ascent<'_> {
    /// Climbs `f` (value and a supergradient) from `center` within
    /// `radius` of it, or, without one, with the radius of the Polyak step
    /// from `center` towards `good_enough`: from zero prices a fixed share
    /// of the box was far too wide where reads are felt (the bound fell to
    /// minus seconds for several steps, each a whole evaluation). One
    /// evaluation is always made.
    fn climb(
        &self,
        mut center: Vec<f64>,
        radius: Option<Vec<f64>>,
        mut f: impl FnMut(&[f64]) -> (f64, Vec<f64>),
    ) -> Climbed {
        let (dims, most) = (center.len(), self.most);
        let (mut center_value, g) = f(&center);
        let mut radius = radius.unwrap_or_else(|| {
            let norm: f64 = g.iter().map(|x| x * x).sum();
            let step = if self.good_enough.is_finite() && norm > 0.0 {
                (self.good_enough - center_value).max(0.0) / norm
            } else {
                0.0
            };
            let widest = (0..dims)
                .map(|i| ((center[i] + step * g[i]).clamp(0.0, most[i]) - center[i]).abs())
                .fold(0.0, f64::max);
            if widest > 0.0 {
                vec![widest; dims]
            } else {
                most.iter().map(|m| m / 16.0).collect()
            }
        });
        let mut best = 0;
        let mut evaluations = 1;
        let mut cuts: Vec<(f64, Vec<f64>, Vec<f64>)> = vec![(center_value, g, center.clone())];
        while Instant::now() + self.reserve.map_or(Duration::ZERO, Cell::get) < self.deadline
            && center_value < self.good_enough
            && dims > 0
        {
            let Some((next, predicted)) = master(&cuts, &center, &radius, most) else {
                break;
            };
            let active = (0..dims).any(|i| {
                let hi = (center[i] + radius[i]).min(most[i]);
                let lo = (center[i] - radius[i]).max(0.0);
                let close = 1e-9 * most[i].max(1e-12);
                (next[i] >= hi - close && hi < most[i]) || (next[i] <= lo + close && lo > 0.0)
            });
            let promised = predicted - center_value;
            if promised <= self.tolerance * center_value.abs().max(1e-12) {
                if active {
                    radius.iter_mut().for_each(|x| *x *= 2.0);
                    continue;
                }
                break;
            }
            let (value, g) = f(&next);
            evaluations += 1;
            cuts.push((value, g, next.clone()));
            if value >= center_value + 0.1 * promised {
                center = next;
                center_value = value;
                best = evaluations - 1;
                if active {
                    radius.iter_mut().for_each(|x| *x *= 2.0);
                }
            } else {
                radius.iter_mut().for_each(|x| *x *= 0.5);
            }
        }
        Climbed {
            center,
            value: center_value,
            best,
            evaluations,
        }
    }
}

/// The cutting-plane master: the prices in the box around `center` that
/// maximise the least of the cuts, and that maximum.
fn master(
    cuts: &[(f64, Vec<f64>, Vec<f64>)],
    center: &[f64],
    radius: &[f64],
    most: &[f64],
) -> Option<(Vec<f64>, f64)> {
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let prices: Vec<_> = (0..center.len())
        .map(|i| {
            let lo = (center[i] - radius[i]).max(0.0);
            let hi = (center[i] + radius[i]).min(most[i]).max(lo);
            problem.add_var(0.0, (lo, hi))
        })
        .collect();
    let theta = problem.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
    for (value, g, at) in cuts {
        // theta <= value + g . (p - at)
        let mut row: Vec<(microlp::Variable, f64)> = vec![(theta, 1.0)];
        row.extend(prices.iter().zip(g).map(|(&p, &gi)| (p, -gi)));
        let rhs = value - g.iter().zip(at).map(|(gi, a)| gi * a).sum::<f64>();
        problem.add_constraint(row, ComparisonOp::Le, rhs);
    }
    let microlp::SolveOutcome::Solution(solution) = problem.solve().ok()? else {
        return None;
    };
    // The solver's tolerances can leave a price a hair below zero.
    Some((
        prices
            .iter()
            .map(|&p| solution.var_value(p).max(0.0))
            .collect(),
        solution.objective(),
    ))
}

//! A lower bound on the incremental re-plan's objective that counts what
//! the priced relaxation leaves out: move seconds and the move budget. The
//! relaxation bounds the token seconds of any placement, so where the heat
//! moved more than the budget lets a placement follow, its gap is mostly
//! the bound's; this one starts from the placement in use and bounds what
//! the moves the budget allows can save.
//!
//! Why it holds, for capacity prices `theta * lambda` (any non-negative
//! prices give a Lagrangian bound) and any placement `x'` within the
//! capacities and the budget:
//! - The token seconds are at least the fixed seconds plus, per stage, its
//!   priced value (stage seconds plus byte prices), less the prices of the
//!   capacities; the move seconds add up object by object.
//! - A stage's seconds are the largest of its resources' rows (each GPU
//!   with its sync, each node's cores with their overhead and the felt
//!   reads, each drive) plus its prefill, so at least any convex
//!   combination `alpha` of the rows. Each row of `x'` is at least its row
//!   of the placement in use, less the work of what left it, plus the work
//!   of what came (the felt reads taken from the drive busiest now, a
//!   sync or an overhead counted as shares of the objects that pay it: it
//!   is saved only when all of them leave). So the stage's priced value
//!   plus its move seconds is at least its value now less a gain per moved
//!   object, the most that object can save at any of its allowed places.
//! - Moves that carry no bytes (a weight dropped to a drive, a KV group
//!   dropped or taken up) are free under the budget: their gains are taken
//!   whole. The others cost at least the object's fewest bytes at a place
//!   it may take; with a price `mu` per budget byte, what the budget lets
//!   them save is at most `mu * budget` plus each one's gain beyond `mu`
//!   times its bytes (weak duality of the knapsack).
//! - A stage's priced value is also at least its priced bound (`theta` =
//!   1, the prices the relaxation found), moves or not.
//!
//! Every combination, `theta` and `mu` so gives a valid bound; a few of
//! each are tried and the best kept: one scan of each stage's objects and
//! their places, each combination's moves summed into bins of the `mu`
//! tried rather than sorted. With a budget of zero (`mu` unbounded), no
//! prices and `alpha` on the busiest row, the bound is the objective of
//! staying less what free moves could save.

use residency_core::cost::{Instance, Object, Place, Resource, StageLoads};
use residency_core::diff::{carried_bytes, carry_seconds};
use std::time::Instant;

/// What the bound starts from: the placement in use and, from the priced
/// relaxation of the new heat, its prices, stage bounds and capacities
/// (`lagrange::Bound`).
#[derive(Debug, Clone, Copy)]
pub struct MoveBoundInputs<'a> {
    pub current: &'a [usize],
    pub prices_seconds_per_byte: &'a [f64],
    pub stage_bounds_seconds: &'a [f64],
    pub capacities_bytes: &'a [f64],
    pub move_budget_bytes: u64,
    /// What a second of moving costs in the objective: hysteresis over the
    /// horizon in tokens.
    pub move_weight: f64,
    /// Give up (no bound) past this instant, checked stage by stage.
    pub deadline: Option<Instant>,
}

/// Shares of the relaxation's prices tried: the prices themselves (where
/// the stage bounds cap each stage) and none (where a budget too small to
/// make room leaves the placement's unused room unsold: with no free move
/// that helps, the bound at a budget of zero is then the objective of
/// staying).
const PRICE_SCALES: [f64; 2] = [1.0, 0.0];

/// The busiest rows a combination spreads over, evenly. At Kimi scale
/// (12 rows, most near the busiest) the busiest alone bounded nothing
/// above the stage bounds and two or three did; more rows, or weights
/// growing as a power of each row's seconds, bounded no more there or at
/// DeepSeek-V3 scale, where the busiest alone did best.
const BUSIEST: [usize; 3] = [1, 2, 3];

/// Share of a combination put on the drives' rows, so that dropping a
/// weight to a drive (free under the budget) pays its reads there.
const DRIVE_SHARE: f64 = 1.0 / 128.0;

/// The prices per budget byte tried besides zero are the numbers whose
/// mantissa keeps only its top `BUDGET_PRICE_BITS` bits (four a
/// doubling: eight bounded no better at DeepSeek-V3 and Kimi scale and
/// took a third longer), from `2^LEAST_BUDGET_PRICE_LOG2` seconds per byte for
/// `BUDGET_PRICE_OCTAVES` doublings: what a byte moved can save on any
/// machine the planner meets, from a microsecond per 5 PB to 60 us a
/// byte. A gain per byte then finds its place among them from its bits.
const BUDGET_PRICE_BITS: u32 = 2;
const LEAST_BUDGET_PRICE_LOG2: i32 = -72;
const BUDGET_PRICE_OCTAVES: usize = 58;

/// Relative margin taken off for floating-point error.
const MARGIN: f64 = 1e-9;

/// The bound on `token_seconds + move_weight * move_seconds` over the
/// placements within the capacities and the move budget; `None` where its
/// inputs do not fit `inst` (another number of stages or prices) or the
/// placement in use breaks a constraint (the re-plan then moves what
/// breaks it whatever the budget), or when the deadline passes.
pub fn bound_with_moves(inst: &Instance, inputs: MoveBoundInputs) -> Option<f64> {
    let r = &inst.resources;
    let current = inputs.current;
    let prices = inputs.prices_seconds_per_byte;
    if inputs.stage_bounds_seconds.len() != inst.stages.len()
        || prices.len() != r.gpus() + r.numa_nodes()
        || inputs.capacities_bytes.len() != prices.len()
        || current.len() != inst.objects.len()
        || !(inputs.move_weight >= 0.0 && inputs.move_weight.is_finite())
        || (0..current.len()).any(|o| !inst.allowed(o, inst.places[current[o]]))
        || inst.constraints.broken_group(current).is_some()
    {
        return None;
    }
    let rows = Rows {
        inst,
        prices,
        move_weight: inputs.move_weight,
    };
    let budget = inputs.move_budget_bytes as f64;
    let grid = BudgetPrices::new(inputs.move_budget_bytes == 0);
    // Per share of the prices and price per budget byte, the bound so far.
    let mut totals: Vec<Vec<f64>> = (PRICE_SCALES.iter())
        .map(|&theta| {
            let capacities: f64 = (prices.iter().zip(inputs.capacities_bytes))
                .map(|(p, c)| theta * p * c)
                .sum();
            (grid.prices.iter())
                .map(|&mu| {
                    let budget_price = if budget > 0.0 { mu * budget } else { 0.0 };
                    r.fixed_token_seconds - capacities - budget_price
                })
                .collect()
        })
        .collect();
    let evaluation = inst.evaluate(current);
    let mut moves = StageMoves::default();
    let mut best = vec![vec![0.0; grid.prices.len()]; PRICE_SCALES.len()];
    let mut curves: Vec<Curve> = PRICE_SCALES
        .iter()
        .map(|_| Curve::new(grid.prices.len()))
        .collect();
    for (s, stage) in inst.stages.iter().enumerate() {
        if inputs.deadline.is_some_and(|d| Instant::now() > d) {
            return None;
        }
        let mut now = rows.now(&evaluation.loads[s]);
        rows.stage_moves(&mut moves, &stage.objects, current, &mut now);
        for (t, b) in best.iter_mut().enumerate() {
            // Only at the full prices is the stage's priced bound known.
            b.fill(if t == 0 {
                inputs.stage_bounds_seconds[s]
            } else {
                f64::NEG_INFINITY
            });
        }
        for alpha in rows.combinations(&now.values) {
            fill(&mut curves, &rows, &alpha, &now, &moves, &grid);
            for (b, curve) in best.iter_mut().zip(&curves) {
                for (j, b) in b.iter_mut().enumerate() {
                    *b = b.max(curve.value(j, grid.prices[j]));
                }
            }
        }
        for (total, b) in totals.iter_mut().zip(&best) {
            total.iter_mut().zip(b).for_each(|(t, b)| *t += b);
        }
    }
    let bound = totals
        .iter()
        .flatten()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    Some(bound - bound.abs() * MARGIN)
}

/// The prices per budget byte tried: zero, the grid, and with no budget
/// an unbounded one (no paid move at all).
struct BudgetPrices {
    prices: Vec<f64>,
    /// The grid's first price's bits, shifted to keep the top mantissa bits.
    least_key: u64,
}

impl BudgetPrices {
    const SHIFT: u32 = 52 - BUDGET_PRICE_BITS;

    fn new(no_budget: bool) -> BudgetPrices {
        let least_key = 2f64.powi(LEAST_BUDGET_PRICE_LOG2).to_bits() >> Self::SHIFT;
        let points = BUDGET_PRICE_OCTAVES << BUDGET_PRICE_BITS;
        let mut prices = vec![0.0];
        prices.extend((0..points as u64).map(|k| f64::from_bits((least_key + k) << Self::SHIFT)));
        if no_budget {
            prices.push(f64::INFINITY);
        }
        BudgetPrices { prices, least_key }
    }

    /// Index of the largest finite price at most `ratio` (positive): the
    /// bits of a positive number order as it does.
    fn bin(&self, ratio: f64) -> usize {
        let key = ratio.to_bits() >> Self::SHIFT;
        let last = BUDGET_PRICE_OCTAVES << BUDGET_PRICE_BITS;
        match key.checked_sub(self.least_key) {
            None => 0,
            Some(k) => 1 + (k as usize).min(last - 1),
        }
    }
}

/// A stage's bound under one combination of rows at each price per budget
/// byte: the stage's priced value now (rows combined) less what free moves
/// can save (`base`), less what the paid moves whose gain per byte passes
/// the price save beyond it.
struct Curve {
    base: f64,
    /// Gains and bytes of the paid moves binned by the largest price at
    /// most their gain per byte, then summed from the top down.
    gains: Vec<f64>,
    bytes: Vec<f64>,
}

impl Curve {
    fn new(points: usize) -> Curve {
        Curve {
            base: 0.0,
            gains: vec![0.0; points],
            bytes: vec![0.0; points],
        }
    }

    /// One object's moves: what it saves at best by a free move and by a
    /// paid one, with the fewest bytes a paid one carries.
    fn add(&mut self, grid: &BudgetPrices, free: f64, paid: f64, bytes: u64) {
        self.base -= free;
        if paid > free {
            let gain = paid - free;
            let j = grid.bin(gain / bytes as f64);
            self.gains[j] += gain;
            self.bytes[j] += bytes as f64;
        }
    }

    /// The bound at the `j`th price per budget byte, `mu`.
    fn value(&self, j: usize, mu: f64) -> f64 {
        if mu.is_infinite() {
            return self.base;
        }
        self.base - (self.gains[j] - mu * self.bytes[j]).max(0.0)
    }
}

/// Each share of the prices' curve (`PRICE_SCALES`) for one combination
/// of rows `alpha`, in one pass over the stage's moves.
fn fill(
    curves: &mut [Curve],
    rows: &Rows,
    alpha: &[f64],
    now: &RowsNow,
    moves: &StageMoves,
    grid: &BudgetPrices,
) {
    let felt_alpha: f64 = alpha[rows.gpus()..rows.gpus() + rows.nodes()].iter().sum();
    let on = |work: &[(usize, f64)], felt: f64| {
        work.iter().map(|&(row, w)| alpha[row] * w).sum::<f64>() + felt_alpha * felt
    };
    let rows_now = alpha
        .iter()
        .zip(&now.values)
        .map(|(a, v)| a * v)
        .sum::<f64>();
    for (curve, theta) in curves.iter_mut().zip(PRICE_SCALES) {
        curve.base = now.prefill + rows_now + theta * now.price;
        curve.gains.fill(0.0);
        curve.bytes.fill(0.0);
    }
    // Per share of the prices, an object's best free and paid gains.
    let mut free = [0.0f64; PRICE_SCALES.len()];
    let mut paid = [f64::NEG_INFINITY; PRICE_SCALES.len()];
    let add = |curves: &mut [Curve], free: &[f64], paid: &[f64], bytes: u64| {
        for ((curve, &free), &paid) in curves.iter_mut().zip(free).zip(paid) {
            curve.add(grid, free, paid, bytes);
        }
    };
    for object in &moves.objects {
        let leaves = on(&object.removed, object.felt) + on(&[object.share], 0.0) + object.fixed;
        free.fill(0.0);
        paid.fill(f64::NEG_INFINITY);
        let mut fewest = u64::MAX;
        for to in &moves.destinations[object.destinations.clone()] {
            let work = leaves - on(&to.added, to.felt) - to.fixed;
            let price = object.price - to.price;
            let best = if to.carried == 0 {
                &mut free
            } else {
                fewest = fewest.min(to.carried);
                &mut paid
            };
            for (b, theta) in best.iter_mut().zip(PRICE_SCALES) {
                *b = b.max(work + theta * price);
            }
        }
        add(curves, &free, &paid, fewest);
    }
    // Experts of one place and size: each destination's gain is a line
    // in the use rate.
    let mut lines: Vec<(f64, f64, f64, u64)> = Vec::new();
    for class in &moves.classes {
        let leaves = on(&class.removed, class.felt);
        let share = on(&[class.share], 0.0) + class.fixed;
        lines.clear();
        lines.extend(
            moves.destinations[class.destinations.clone()]
                .iter()
                .map(|to| {
                    let per_rate = leaves - on(&to.added, to.felt);
                    (
                        per_rate,
                        share - to.fixed,
                        class.price - to.price,
                        to.carried,
                    )
                }),
        );
        // The fewest bytes of any paid move, before lines are dropped.
        let fewest = (lines.iter().filter(|l| l.3 > 0).map(|l| l.3))
            .min()
            .unwrap_or(u64::MAX);
        // Places whose rows `alpha` leaves out add nothing: of those alike
        // in the rest, one that every share of the prices finds no worse
        // stands for the others (a card's worth of lines at Kimi scale).
        let mut kept = 0;
        for i in 0..lines.len() {
            let line = lines[i];
            let dominated = lines[..kept].iter().any(|k| {
                k.0 == line.0 && (k.3 == 0) == (line.3 == 0) && k.1 >= line.1 && k.2 >= line.2
            });
            if !dominated {
                lines[kept] = line;
                kept += 1;
            }
        }
        lines.truncate(kept);
        // Per line its slope and, per share of the prices, its constant;
        // free and paid apart, so the loop over the experts only adds and
        // compares.
        let split = |paid: bool| -> Vec<(f64, [f64; PRICE_SCALES.len()])> {
            (lines.iter())
                .filter(|l| (l.3 > 0) == paid)
                .map(|&(per_rate, fixed, price, _)| {
                    (per_rate, PRICE_SCALES.map(|t| fixed + t * price))
                })
                .collect()
        };
        let (free_lines, paid_lines) = (split(false), split(true));
        for &rate in &moves.rates[class.rates.clone()] {
            free.fill(0.0);
            paid.fill(f64::NEG_INFINITY);
            for (per_rate, constants) in &free_lines {
                let work = rate * per_rate;
                for (b, c) in free.iter_mut().zip(constants) {
                    *b = b.max(work + c);
                }
            }
            for (per_rate, constants) in &paid_lines {
                let work = rate * per_rate;
                for (b, c) in paid.iter_mut().zip(constants) {
                    *b = b.max(work + c);
                }
            }
            add(curves, &free, &paid, fewest);
        }
    }
    for curve in curves {
        for j in (0..curve.gains.len().saturating_sub(1)).rev() {
            curve.gains[j] += curve.gains[j + 1];
            curve.bytes[j] += curve.bytes[j + 1];
        }
    }
}

/// A stage's objects with their moves, kept from stage to stage: objects
/// one by one, and unpinned experts by their place (one size a stage, so
/// their work is their use rate times a unit's, and every other cost of a
/// move the same).
#[derive(Default)]
struct StageMoves {
    objects: Vec<ObjectMoves>,
    classes: Vec<ObjectMoves>,
    /// Use rates of each class's experts.
    rates: Vec<f64>,
    destinations: Vec<Destination>,
    /// Buffers of the pass that sorts a stage's objects: the use rates of
    /// the class experts by place, the other objects.
    by_place: Vec<Vec<f64>>,
    others: Vec<usize>,
}

/// One object, or a class of experts per unit of use rate: what leaving
/// its place saves on each row and its felt reads there, its share of a
/// sync or an overhead, its prefill and byte price there, and
/// its other allowed places in `StageMoves::destinations`.
struct ObjectMoves {
    removed: [(usize, f64); 2],
    felt: f64,
    share: (usize, f64),
    /// Prefill there.
    fixed: f64,
    /// Byte price there, at the full prices.
    price: f64,
    destinations: std::ops::Range<usize>,
    rates: std::ops::Range<usize>,
}

struct Destination {
    /// What coming there adds to each row, and its felt reads.
    added: [(usize, f64); 2],
    felt: f64,
    /// Prefill there plus the weighted move seconds.
    fixed: f64,
    /// Byte price there, at the full prices.
    price: f64,
    /// Bytes carried; none: free under the budget.
    carried: u64,
}

/// The rows of a stage: each GPU's (with its sync), each node's cores'
/// (with the overhead and the felt reads), each drive's, in that order.
struct Rows<'a> {
    inst: &'a Instance,
    prices: &'a [f64],
    move_weight: f64,
}

/// A stage's rows in the placement in use, the drive whose reads the
/// cores feel (the busiest), its prefill and its byte prices.
struct RowsNow {
    values: Vec<f64>,
    busiest_drive: Option<usize>,
    prefill: f64,
    price: f64,
}

/// An object's work at a place: on the rows, its felt reads (on every
/// node's row: it reads from the busiest drive), its prefill, and the row
/// whose sync or overhead it takes part in, with its bytes there.
struct Work {
    rows: [(usize, f64); 2],
    felt: f64,
    prefill: f64,
    pays: Option<(usize, f64)>,
}

impl Rows<'_> {
    fn gpus(&self) -> usize {
        self.inst.resources.gpus()
    }

    fn nodes(&self) -> usize {
        self.inst.resources.numa_nodes()
    }

    fn drives(&self) -> usize {
        self.inst.resources.drives()
    }

    fn now(&self, loads: &StageLoads) -> RowsNow {
        let r = &self.inst.resources;
        let busiest_drive =
            (0..self.drives()).max_by(|&a, &b| loads.drive[a].total_cmp(&loads.drive[b]));
        let felt = busiest_drive.map_or(0.0, |d| r.felt_fraction * loads.drive[d]);
        let values = (0..self.gpus())
            .map(|g| loads.gpu_seconds(r, g))
            .chain((0..self.nodes()).map(|n| loads.cpu_seconds(r, n) + felt))
            .chain(loads.drive.iter().copied())
            .collect();
        RowsNow {
            values,
            busiest_drive,
            prefill: loads.prefill,
            price: 0.0,
        }
    }

    fn work(&self, object: &Object, place: Place, busiest_drive: Option<usize>) -> Work {
        let r = &self.inst.resources;
        let mut work = Work {
            rows: [(0, 0.0); 2],
            felt: 0.0,
            prefill: 0.0,
            pays: None,
        };
        if object.is_kv() {
            work.prefill = r.kv_seconds(object, place);
            return work;
        }
        let (gpus, nodes) = (self.gpus(), self.nodes());
        for (i, (resource, w)) in r.work(object, place).into_iter().enumerate() {
            work.rows[i] = match resource {
                Resource::Gpu(g) => (g, w),
                Resource::Cpu(n) => (gpus + n, w),
                Resource::Drive(d) => {
                    if busiest_drive == Some(d) {
                        work.felt = r.felt_fraction * w;
                    }
                    (gpus + nodes + d, w)
                }
                Resource::Prefill => (0, 0.0),
            };
        }
        work.pays = self.pays(object, place);
        work
    }

    /// The row whose sync or overhead `object` takes part in at `place`,
    /// with its bytes there; none for a KV group.
    fn pays(&self, object: &Object, place: Place) -> Option<(usize, f64)> {
        let gpus = self.gpus();
        match place {
            _ if object.is_kv() => None,
            Place::Gpu(g) => Some((g, object.gpu_bytes as f64)),
            Place::Ram(n) => Some((gpus + n, object.ram_bytes as f64)),
            Place::Disk(d) => Some((
                gpus + self.inst.resources.drive_numa[d],
                object.disk_bytes as f64,
            )),
            Place::Recompute => None,
        }
    }

    /// Byte price of `object` at place index `q`.
    fn byte_price(&self, object: &Object, q: usize) -> f64 {
        let bytes = object.bytes_at(self.inst.places[q]) as f64;
        match self.inst.places[q] {
            Place::Gpu(g) => self.prices[g] * bytes,
            Place::Ram(n) => self.prices[self.gpus() + n] * bytes,
            Place::Disk(_) | Place::Recompute => 0.0,
        }
    }

    /// The moves of `o` (or of its class per unit of use rate, `object`
    /// being a unit) from place index `from`, with `share` its part of a
    /// sync or an overhead there.
    fn object_moves(
        &self,
        moves: &mut StageMoves,
        o: usize,
        object: &Object,
        from: usize,
        busiest_drive: Option<usize>,
        share: (usize, f64),
    ) -> ObjectMoves {
        let inst = self.inst;
        let here = self.work(object, inst.places[from], busiest_drive);
        let first = moves.destinations.len();
        for q in 0..inst.places.len() {
            if q == from || !inst.allowed(o, inst.places[q]) {
                continue;
            }
            let there = self.work(object, inst.places[q], busiest_drive);
            let seconds = carry_seconds(
                &inst.resources,
                object.bytes_at(inst.places[q]),
                inst.places[from],
                inst.places[q],
            );
            moves.destinations.push(Destination {
                added: there.rows,
                felt: there.felt,
                fixed: there.prefill + self.move_weight * seconds,
                price: self.byte_price(object, q),
                carried: carried_bytes(inst, o, from, q),
            });
        }
        ObjectMoves {
            removed: here.rows,
            felt: here.felt,
            share,
            fixed: here.prefill,
            price: self.byte_price(object, from),
            destinations: first..moves.destinations.len(),
            rates: 0..0,
        }
    }

    /// Each object of a stage with its moves, into `moves`; the stage's
    /// byte prices now into `now`.
    fn stage_moves(
        &self,
        moves: &mut StageMoves,
        objects: &[usize],
        current: &[usize],
        now: &mut RowsNow,
    ) {
        let (inst, r) = (self.inst, &self.inst.resources);
        let rows = self.gpus() + self.nodes() + self.drives();
        let (mut paying_bytes, mut paying_objects) = (vec![0.0; rows], vec![0.0; rows]);
        moves.objects.clear();
        moves.classes.clear();
        moves.rates.clear();
        moves.destinations.clear();
        moves.others.clear();
        moves.by_place.resize(inst.places.len(), Vec::new());
        moves.by_place.iter_mut().for_each(Vec::clear);
        now.price = 0.0;
        // One pass: the bytes taking part in each sync or overhead, the
        // byte prices, and the unpinned experts of one size by place (a
        // unit expert's moves stand for theirs); the other objects after.
        let mut unit: Option<(usize, Object)> = None;
        for &o in objects {
            let (object, from) = (&inst.objects[o], current[o]);
            if let Some((row, bytes)) = self.pays(object, inst.places[from]) {
                paying_bytes[row] += bytes;
                paying_objects[row] += 1.0;
            }
            now.price += self.byte_price(object, from);
            let pinned = inst.constraints.pins.get(o).is_some_and(Option::is_some);
            let same_size = unit.as_ref().is_none_or(|(_, u)| {
                (u.gpu_bytes, u.ram_bytes, u.disk_bytes)
                    == (object.gpu_bytes, object.ram_bytes, object.disk_bytes)
            });
            if object.is_expert() && !pinned && same_size {
                if unit.is_none() {
                    let one = Object {
                        use_rate: 1.0,
                        ..object.clone()
                    };
                    unit = Some((o, one));
                }
                moves.by_place[from].push(object.use_rate);
            } else {
                moves.others.push(o);
            }
        }
        // A sync or an overhead is saved only when every object taking
        // part leaves: shared by bytes (by count where they have none),
        // the shares of the objects that leave are at least what it saves.
        let share = |pays: Option<(usize, f64)>| {
            pays.map_or((0, 0.0), |(row, bytes)| {
                let overhead = match row.checked_sub(self.gpus()) {
                    None => r.gpu_sync_seconds[row],
                    Some(n) => r.cpu_stage_seconds[n],
                };
                let share = if paying_bytes[row] > 0.0 {
                    bytes / paying_bytes[row]
                } else {
                    1.0 / paying_objects[row]
                };
                (row, overhead * share)
            })
        };
        let others = std::mem::take(&mut moves.others);
        for &o in &others {
            let (object, from) = (&inst.objects[o], current[o]);
            let pays = share(self.pays(object, inst.places[from]));
            let m = self.object_moves(moves, o, object, from, now.busiest_drive, pays);
            moves.objects.push(m);
        }
        moves.others = others;
        if let Some((o, one)) = unit {
            for from in 0..inst.places.len() {
                if moves.by_place[from].is_empty() {
                    continue;
                }
                let pays = share(self.pays(&one, inst.places[from]));
                let mut class = self.object_moves(moves, o, &one, from, now.busiest_drive, pays);
                let first = moves.rates.len();
                let rates = std::mem::take(&mut moves.by_place[from]);
                moves.rates.extend_from_slice(&rates);
                moves.by_place[from] = rates;
                class.rates = first..moves.rates.len();
                moves.classes.push(class);
            }
        }
    }

    /// The combinations of rows tried: evenly over the busiest one, two
    /// and three rows, the busiest alone also with a share on the drives.
    fn combinations(&self, values: &[f64]) -> Vec<Vec<f64>> {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
        let mut out: Vec<Vec<f64>> = Vec::new();
        let mut tried = Vec::new();
        for &k in &BUSIEST {
            let k = k.min(order.len());
            if k == 0 || tried.contains(&k) {
                continue;
            }
            tried.push(k);
            let mut alpha = vec![0.0; values.len()];
            order[..k].iter().for_each(|&i| alpha[i] = 1.0 / k as f64);
            if self.drives() > 0 && k == 1 {
                let first = self.gpus() + self.nodes();
                let mut mixed: Vec<f64> = alpha.iter().map(|a| a * (1.0 - DRIVE_SHARE)).collect();
                let each = DRIVE_SHARE / self.drives() as f64;
                mixed[first..].iter_mut().for_each(|m| *m += each);
                out.push(mixed);
            }
            out.push(alpha);
        }
        // Where the busiest row is the only drive's, the share on the
        // drives changes nothing: each combination is scanned once.
        let mut unique: Vec<Vec<f64>> = Vec::with_capacity(out.len());
        for alpha in out {
            let alike = |a: &Vec<f64>| a.iter().zip(&alpha).all(|(x, y)| (x - y).abs() <= 1e-12);
            if !unique.iter().any(alike) {
                unique.push(alpha);
            }
        }
        unique
    }
}

#[cfg(test)]
mod tests;

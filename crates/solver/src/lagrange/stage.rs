//! One stage's priced problem for a participation set and a trunk
//! combination: the fill of the cheapest places at a stage time, the
//! searches over the stage time (and the drive seconds when reads are felt)
//! with their convex lower bounds, and the whole-count bound for stages
//! with few experts.

use super::priced::{Experts, TrunkLoads};
use residency_core::cost::{Place, Resources};

/// Most points a one-dimensional search (`minimize`) evaluates.
const SEARCH_STEPS: usize = 48;
/// The stage-time search stops once its bound is within this share of the
/// least value it saw.
const TIME_GAP: f64 = 1e-9;
/// The drive seconds' search, around every stage-time search, stops at a
/// wider gap: each step costs a whole stage-time search.
const DRIVE_GAP: f64 = 1e-7;
/// The least feasible stage time is bracketed this finely (relative).
const LEAST_TIME_WIDTH: f64 = 1e-9;
/// The gaps and width of a coarse search (`StageProblem::coarse`): the
/// estimate only steers where the bound's own search starts.
const COARSE_TIME_GAP: f64 = 1e-6;
const COARSE_DRIVE_GAP: f64 = 1e-4;
const COARSE_LEAST_TIME_WIDTH: f64 = 1e-5;
/// Most whole-count vectors a stage's bound tries.
const WHOLE_COUNT_VECTORS: f64 = 2000.0;

/// One priced stage problem: a stage's experts, the places they may take
/// (cheapest first, with the price per expert), a participation set and
/// the loads of a trunk combination.
pub(super) struct StageProblem<'a> {
    pub(super) resources: &'a Resources,
    pub(super) experts: &'a Experts,
    pub(super) slots: &'a [(Place, f64)],
    pub(super) participation: &'a [bool],
    pub(super) trunk: &'a TrunkLoads,
    /// Searches to wider gaps (`COARSE_TIME_GAP`): still a valid bound, a
    /// looser one, for the estimate that is no bound anyway.
    pub(super) coarse: bool,
}

/// The result of one stage search: a valid bound on `T + price(T)` (trunk
/// price excluded), the least value seen, and where.
#[derive(Clone)]
pub(super) struct Searched {
    pub(super) bound: f64,
    pub(super) value: f64,
    pub(super) time: f64,
    /// The most drive seconds allowed there (infinite when reads are not felt).
    pub(super) drive: f64,
    /// Expert counts per place, hottest first, when whole counts gave the
    /// bound (else `fill` at `time` gives them).
    pub(super) counts: Option<Vec<(Place, f64)>>,
}

impl StageProblem<'_> {
    /// The least stage time the rows allow: every GPU taking part pays its
    /// sync overhead, and the trunk's loads are there whatever the experts do.
    pub(super) fn least_rows(&self) -> f64 {
        let r = self.resources;
        (0..r.gpus())
            .filter(|&g| self.participation[g])
            .map(|g| r.gpu_sync_seconds[g] + self.trunk.gpu[g])
            .chain(self.trunk.cpu.iter().copied())
            .fold(0.0, f64::max)
    }

    /// The experts' price at stage time `time` with at most `drive` seconds
    /// on any drive, whose `felt_fraction` every node's cores wait for
    /// (`Err`: infeasible, with the use-rate mass no place had time for,
    /// infinite where a row alone is over the time): the cheapest places
    /// filled first, each with the mass its resource's time left absorbs,
    /// the coldest experts first. With `blocks`, records the expert count
    /// per place, hottest first.
    pub(super) fn fill(
        &self,
        time: f64,
        drive: f64,
        blocks: Option<&mut Vec<(Place, f64)>>,
    ) -> Result<f64, f64> {
        let r = self.resources;
        let (experts, trunk) = (self.experts, self.trunk);
        let felt = if drive.is_finite() {
            r.felt_fraction * drive
        } else {
            0.0
        };
        let mut cpu_left: Vec<f64> = trunk.cpu.iter().map(|c| time - c - felt).collect();
        if cpu_left.iter().any(|&left| left < 0.0) || (drive.is_finite() && drive > time) {
            return Err(f64::INFINITY);
        }
        for g in 0..r.gpus() {
            if self.participation[g] && time < r.gpu_sync_seconds[g] + trunk.gpu[g] {
                return Err(f64::INFINITY);
            }
        }
        let total = *experts.prefix.last().unwrap();
        let tolerance = 1e-12 * total;
        let mut placed = 0.0;
        let mut boundary = experts.ids.len() as f64;
        let mut price = 0.0;
        let mut blocks = blocks;
        for &(place, slot_price) in self.slots {
            // The mass the place absorbs, and the node whose cores it uses
            // with their seconds per unit of mass.
            let (cap, cores) = match place {
                Place::Gpu(g) if !self.participation[g] => continue,
                Place::Gpu(g) => {
                    let per_mass = experts.gpu_bytes / r.gpu_gemv_bytes_per_s[g];
                    (
                        (time - r.gpu_sync_seconds[g] - trunk.gpu[g]) / per_mass,
                        None,
                    )
                }
                Place::Ram(n) => {
                    let per_mass = experts.ram_bytes / r.cpu_gemv_bytes_per_s[n];
                    (cpu_left[n] / per_mass, Some((n, per_mass)))
                }
                Place::Disk(d) => {
                    let n = r.drive_numa[d];
                    let per_mass =
                        experts.disk_bytes.min(experts.ram_bytes) / r.cpu_gemv_bytes_per_s[n];
                    let drive_per_mass = r.drive_latency_seconds[d]
                        + experts.disk_bytes / r.drive_read_bytes_per_s[d];
                    (
                        (time.min(drive) / drive_per_mass).min(cpu_left[n] / per_mass),
                        Some((n, per_mass)),
                    )
                }
                Place::Recompute => continue,
            };
            let take = cap.min(total - placed).max(0.0);
            if let Some((n, per_mass)) = cores {
                cpu_left[n] -= take * per_mass;
            }
            placed += take;
            let next = if placed >= total - tolerance {
                0.0
            } else {
                experts.count_for_mass(total - placed)
            };
            let count = boundary - next;
            price += slot_price * count;
            if let Some(blocks) = blocks.as_deref_mut() {
                if count > 0.0 {
                    blocks.push((place, count));
                }
            }
            boundary = next;
            if boundary <= 0.0 {
                break;
            }
        }
        if let Some(blocks) = blocks {
            blocks.reverse();
        }
        if boundary <= 0.0 {
            Ok(price)
        } else {
            Err(total - placed)
        }
    }

    /// The least `T + price(T)`, bounded: over the drive seconds too when
    /// reads are felt (the bound over both is convex in each).
    pub(super) fn search(&self) -> Option<Searched> {
        let split = self.search_split()?;
        match self.whole_counts(&split) {
            Some(whole) if whole.bound > split.bound => Some(whole),
            _ => Some(split),
        }
    }

    /// `search` with experts split between places.
    pub(super) fn search_split(&self) -> Option<Searched> {
        let r = self.resources;
        if r.felt_fraction == 0.0 || r.drives() == 0 {
            return self.search_time(f64::INFINITY);
        }
        // No drive seconds at all is feasible (RAM takes every expert given
        // time), and beyond its value no drive time can pay.
        let first = self.search_time(0.0)?;
        let mut points = vec![(0.0, first.bound, first.value)];
        let high = first.value;
        let mut best = first;
        let gap = if self.coarse {
            COARSE_DRIVE_GAP
        } else {
            DRIVE_GAP
        };
        minimize(&mut points, high, gap, false, |d| {
            let searched = self.search_time(d)?;
            let bracket = (searched.bound, searched.value);
            if searched.value < best.value {
                best = searched;
            }
            Some(bracket)
        });
        Some(Searched {
            bound: convex_lower_bound(&mut points, false).0,
            ..best
        })
    }

    /// The least `T + price(T)` over the feasible times, at most `drive`
    /// seconds on any drive, bounded; `None` when no time is feasible.
    pub(super) fn search_time(&self, drive: f64) -> Option<Searched> {
        let value = |t: f64| self.fill(t, drive, None).map(|price| t + price);
        // The least time every row allows (the drive's, and the cores'
        // with the felt share of its reads, too), then the least at which
        // the mass fits.
        let rows = if drive.is_finite() {
            let felt = self.resources.felt_fraction * drive;
            let cores = self.trunk.cpu.iter().map(|c| c + felt).fold(0.0, f64::max);
            self.least_rows().max(drive).max(cores)
        } else {
            self.least_rows()
        };
        // Below `floor` no time is feasible; `low` is the first that is.
        let (gap, bisected) = if self.coarse {
            (COARSE_TIME_GAP, COARSE_LEAST_TIME_WIDTH)
        } else {
            (TIME_GAP, LEAST_TIME_WIDTH)
        };
        let (floor, low) = least_time_within(rows, bisected, |t| match value(t) {
            Ok(_) => 0.0,
            Err(left) => left,
        })?;
        let first = value(low).ok()?;
        let mut points = vec![(low, first, first)];
        // Every time above `first` costs more than `first` itself.
        minimize(&mut points, first, gap, true, |t| {
            let f = value(t).ok()?;
            Some((f, f))
        });
        let (time, _, least) = points
            .iter()
            .copied()
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .expect("one point");
        // Between `floor` and the first feasible time seen, `price` is at
        // least its value there.
        let bound = convex_lower_bound(&mut points, true)
            .0
            .min(floor + (first - low));
        Some(Searched {
            bound,
            value: least,
            time,
            drive,
            counts: None,
        })
    }

    /// The bound with whole expert counts per place (their use-rate masses
    /// still free within what whole experts can carry), where a stage has
    /// so few experts that every count vector can be tried: splitting few
    /// large experts is what weakens the split bound there. Relaxed, so
    /// valid: the felt share of reads and the cores a drive shares with its
    /// node's RAM are left out. `None` when there are too many count vectors.
    pub(super) fn whole_counts(&self, split: &Searched) -> Option<Searched> {
        let n = self.experts.ids.len();
        let slots = self.whole_slots();
        let k = slots.len();
        // C(n + k - 1, k - 1) count vectors, each checked on 2^k place sets.
        let mut vectors = 1.0f64;
        for i in 1..k {
            vectors *= (n + i) as f64 / i as f64;
        }
        if k == 0 || k > 6 || vectors > WHOLE_COUNT_VECTORS {
            return None;
        }
        let rows = self.least_rows();
        let fits = |c: &[usize], time: f64| self.whole_fits(&slots, c, time);
        // The best is first set by the split solution's counts, rounded: the
        // whole counts near it are the good ones, and a good best drops
        // most vectors below with one check. Any vector would be valid.
        let mut best: Option<(f64, f64, Vec<usize>)> = None;
        let mut split_blocks = Vec::new();
        let seed = split
            .counts
            .clone()
            .or_else(|| {
                self.fill(split.time, split.drive, Some(&mut split_blocks))
                    .ok()?;
                Some(split_blocks)
            })
            .map(|blocks| {
                let mut seed = vec![0usize; k];
                for (place, count) in blocks {
                    if let Some(i) = slots.iter().position(|&(q, _)| q == place) {
                        seed[i] += count.round() as usize;
                    }
                }
                seed
            });
        if let Some(mut seed) = seed {
            let others: usize = seed[..k - 1].iter().sum();
            if others <= n {
                seed[k - 1] = n - others;
                let price: f64 = (0..k).map(|i| slots[i].1 * seed[i] as f64).sum();
                if let Some((low, _)) = least_time(rows, |t| fits(&seed, t)) {
                    best = Some((low + price, low, seed));
                }
            }
        }
        let mut counts = vec![0usize; k];
        loop {
            // The next count vector summing to n (odometer on the first k - 1).
            let assigned: usize = counts[..k - 1].iter().sum();
            if assigned <= n {
                counts[k - 1] = n - assigned;
                let price: f64 = (0..k).map(|i| slots[i].1 * counts[i] as f64).sum();
                // `fits` is monotone in the time: a vector that does not fit
                // by the time the best leaves it cannot beat the best, and
                // is dropped with one check instead of a bisection.
                let may_beat = best
                    .as_ref()
                    .is_none_or(|b| rows + price < b.0 && fits(&counts, b.0 - price));
                if may_beat {
                    if let Some((low, _)) = least_time(rows, |t| fits(&counts, t)) {
                        if best.as_ref().is_none_or(|b| low + price < b.0) {
                            best = Some((low + price, low, counts.clone()));
                        }
                    }
                }
            }
            let mut i = 0;
            loop {
                if i + 1 >= k {
                    let (bound, time, counts) = best?;
                    // Hottest first: the dearest place's block first.
                    let blocks = (0..k)
                        .rev()
                        .filter(|&i| counts[i] > 0)
                        .map(|i| (slots[i].0, counts[i] as f64))
                        .collect();
                    return Some(Searched {
                        bound,
                        value: bound,
                        time,
                        drive: f64::INFINITY,
                        counts: Some(blocks),
                    });
                }
                counts[i] += 1;
                if counts[..k - 1].iter().sum::<usize>() <= n {
                    break;
                }
                counts[i] = 0;
                i += 1;
            }
        }
    }

    /// The places whole counts may use: the slots but GPUs not taking part.
    pub(super) fn whole_slots(&self) -> Vec<(Place, f64)> {
        self.slots
            .iter()
            .copied()
            .filter(|&(q, _)| !matches!(q, Place::Gpu(g) if !self.participation[g]))
            .collect()
    }

    /// Whether whole counts `counts` on `slots` (at most 6) can carry all
    /// the mass within `time`: every set of places either holds the hottest
    /// experts it counts or leaves the rest to the others' caps (a
    /// polymatroid and a box), each cap the mass its resource alone takes.
    pub(super) fn whole_fits(&self, slots: &[(Place, f64)], counts: &[usize], time: f64) -> bool {
        let (r, e, k) = (self.resources, self.experts, slots.len());
        let cap = |i: usize| {
            match slots[i].0 {
                Place::Gpu(g) => {
                    (time - r.gpu_sync_seconds[g] - self.trunk.gpu[g])
                        / (e.gpu_bytes / r.gpu_gemv_bytes_per_s[g])
                }
                Place::Ram(m) => {
                    (time - self.trunk.cpu[m]) / (e.ram_bytes / r.cpu_gemv_bytes_per_s[m])
                }
                Place::Disk(d) => {
                    let m = r.drive_numa[d];
                    let cpu = (time - self.trunk.cpu[m])
                        / (e.disk_bytes.min(e.ram_bytes) / r.cpu_gemv_bytes_per_s[m]);
                    let drive = time
                        / (r.drive_latency_seconds[d] + e.disk_bytes / r.drive_read_bytes_per_s[d]);
                    cpu.min(drive)
                }
                Place::Recompute => 0.0,
            }
            .max(0.0)
        };
        // At most 6 places: the caps fit on the stack.
        let mut caps = [0.0f64; 6];
        for i in (0..k).filter(|&i| counts[i] > 0) {
            caps[i] = cap(i);
        }
        let total = *e.prefix.last().unwrap();
        let n = e.ids.len();
        (0..1usize << k).all(|set| {
            let (mut count, mut others) = (0, 0.0);
            for i in 0..k {
                if set >> i & 1 == 1 {
                    count += counts[i];
                } else {
                    others += caps[i];
                }
            }
            e.prefix[count.min(n)] + others >= total * (1.0 - 1e-12)
        })
    }
}

/// The least time at or above `low` where `feasible` holds, bracketed:
/// the largest time found infeasible (a valid lower value; `low` itself
/// when it is feasible) and the least found feasible; `None` when doubling
/// finds no feasible time.
pub(super) fn least_time(low: f64, feasible: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    least_time_within(low, LEAST_TIME_WIDTH, |t| {
        if feasible(t) {
            0.0
        } else {
            f64::INFINITY
        }
    })
}

/// `least_time` of where `short`, what is missing at a time (positive:
/// infeasible; infinite where unknown how much), is at most zero,
/// bracketed until the bracket is `width` of its end wide. Where `short`
/// is convex (the mass the places absorb is concave in the time), the
/// secant of the two latest infeasible times meets zero at most at the
/// least feasible time: half the width before and past it close the
/// bracket in a few steps; else, and after a secant step that leaves more
/// than half the bracket, the bracket is halved.
pub(super) fn least_time_within(
    low: f64,
    width: f64,
    short: impl Fn(f64) -> f64,
) -> Option<(f64, f64)> {
    let first = short(low);
    if first <= 0.0 {
        return Some((low, low));
    }
    // Infeasible times with what is missing there, the latest last.
    let mut below = vec![(low, first)];
    let mut high = low.max(1e-9) * 2.0;
    let mut doublings = 0;
    loop {
        let missing = short(high);
        if missing <= 0.0 {
            break;
        }
        below.push((high, missing));
        high *= 2.0;
        doublings += 1;
        if doublings > 200 {
            return None;
        }
    }
    let mut latest = below.last().expect("one infeasible time").0;
    let mut secant_next = true;
    while high - latest > width * high {
        let before = high - latest;
        let steps = match below[..] {
            [.., (t0, m0), (t1, m1)] if secant_next && m0.is_finite() && m1 < m0 => {
                let secant = t1 + m1 * (t1 - t0) / (m0 - m1);
                let step = 0.5 * width * high;
                [secant - step, secant + step]
            }
            _ => [0.5 * (latest + high), f64::NAN],
        };
        let secant = !steps[1].is_nan();
        for t in steps {
            // Skips the NaN too.
            if !(t > latest && t < high) {
                continue;
            }
            let missing = short(t);
            if missing <= 0.0 {
                high = t;
            } else {
                below.push((t, missing));
                latest = t;
            }
        }
        // A secant step that leaves more than half the bracket is followed
        // by a halving.
        secant_next = !secant || high - latest <= 0.5 * before;
    }
    Some((latest, high))
}

/// Searches for the least of a convex function on `[points[0].0, high]`,
/// given by brackets `(lower, upper)` of its value (`f`; `None` where it
/// is undefined, which ends the search), adding every point evaluated to
/// `points` as `(t, lower, upper)`: each next point where the lower bound
/// of the points (`convex_lower_bound`) is least, or, where that is a
/// point already seen or the last step did not halve the gap, the middle
/// of the wider side around the least upper value; until the bound is
/// within `gap` of the least upper value, or `SEARCH_STEPS` points.
pub(super) fn minimize(
    points: &mut Vec<(f64, f64, f64)>,
    high: f64,
    gap: f64,
    monotone: bool,
    mut f: impl FnMut(f64) -> Option<(f64, f64)>,
) {
    let low = points[0].0;
    if high <= low {
        return;
    }
    for t in [high, 0.5 * (low + high)] {
        let Some((lower, upper)) = f(t) else { return };
        points.push((t, lower, upper));
    }
    let mut previous = f64::INFINITY;
    for _ in points.len()..SEARCH_STEPS {
        let (bound, at) = convex_lower_bound(points, monotone);
        let (best, least) = points
            .iter()
            .enumerate()
            .min_by(|a, b| a.1 .2.total_cmp(&b.1 .2))
            .map(|(i, p)| (i, p.2))
            .expect("points");
        let open = least - bound;
        if open <= gap * least.abs() {
            return;
        }
        let seen = points
            .iter()
            .any(|p| (p.0 - at).abs() <= 1e-12 * high.abs().max(1e-300));
        let t = if seen || !at.is_finite() || open > 0.5 * previous {
            // The wider side around the least upper value (points are
            // sorted by `convex_lower_bound`).
            let (t, left, right) = (
                points[best].0,
                points[best.saturating_sub(1)].0,
                points[(best + 1).min(points.len() - 1)].0,
            );
            if t - left > right - t {
                0.5 * (left + t)
            } else {
                0.5 * (t + right)
            }
        } else {
            at
        };
        previous = open;
        let Some((lower, upper)) = f(t) else { return };
        points.push((t, lower, upper));
    }
}

/// A lower bound on a convex function over `[t_0, t_k]` from points
/// `(t, lower, upper)` that bracket its value at each `t`, and where it is
/// least. On each interval it is the largest of the secants of the
/// neighbouring intervals extended over it (a convex function lies above a
/// secant outside the secant's interval; with brackets, the secant's slope
/// is taken at its least), and, with `monotone` (`f(t) = t + c(t)`, `c`
/// non-increasing), `t_i + c(t_{i+1})`.
pub(super) fn convex_lower_bound(points: &mut [(f64, f64, f64)], monotone: bool) -> (f64, f64) {
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let points = &*points;
    let k = points.len();
    let mut least = points
        .iter()
        .map(|p| (p.1, p.0))
        .fold(
            (f64::INFINITY, f64::NAN),
            |a, b| if b.0 < a.0 { b } else { a },
        );
    // The secant of interval i extended past its right end, then past its
    // left end, as (slope, value at 0).
    let rightwards = |i: usize| {
        let ((a, _, upper_a), (b, lower_b, _)) = (points[i], points[i + 1]);
        (b > a).then(|| {
            let slope = (lower_b - upper_a) / (b - a);
            (slope, lower_b - slope * b)
        })
    };
    let leftwards = |i: usize| {
        let ((a, lower_a, _), (b, _, upper_b)) = (points[i], points[i + 1]);
        (b > a).then(|| {
            let slope = (upper_b - lower_a) / (b - a);
            (slope, lower_a - slope * a)
        })
    };
    for i in 0..k.saturating_sub(1) {
        let ((a, _, _), (b, _, upper_b)) = (points[i], points[i + 1]);
        if b <= a {
            continue;
        }
        let floor = if monotone {
            a + (upper_b - b)
        } else {
            f64::NEG_INFINITY
        };
        let lines: Vec<(f64, f64)> = [
            if i > 0 { rightwards(i - 1) } else { None },
            if i + 2 < k { leftwards(i + 1) } else { None },
        ]
        .into_iter()
        .flatten()
        .collect();
        if lines.is_empty() && !monotone {
            return (f64::NEG_INFINITY, 0.5 * (a + b));
        }
        let envelope = |t: f64| lines.iter().map(|(s, c)| s * t + c).fold(floor, f64::max);
        // The envelope is convex and piecewise linear: least at an end or
        // where two of its pieces cross.
        let mut candidates = vec![a, b];
        let pieces: Vec<(f64, f64)> = lines
            .iter()
            .copied()
            .chain(monotone.then_some((0.0, floor)))
            .collect();
        for (x, &(s1, c1)) in pieces.iter().enumerate() {
            for &(s2, c2) in &pieces[x + 1..] {
                if s1 != s2 {
                    candidates.push(((c2 - c1) / (s1 - s2)).clamp(a, b));
                }
            }
        }
        for t in candidates {
            let value = envelope(t);
            if value < least.0 {
                least = (value, t);
            }
        }
    }
    least
}

#[cfg(test)]
mod tests;

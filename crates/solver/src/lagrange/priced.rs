//! The priced problem of a whole instance: per stage, its experts (hottest
//! first), its trunk components (whole combinations, best first) and KV
//! groups; evaluated at given byte prices, stage by stage, into a bound,
//! a subgradient and a relaxed placement.

use super::stage::{Searched, StageProblem};
use super::{capacity_place, price_index, usable_bytes, Fractional, StageShares};
use residency_core::cost::{Instance, Place, Resource, Resources};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Most whole-trunk combinations enumerated per stage; smaller components
/// beyond it are only priced.
const MAX_TRUNK_COMBINATIONS: usize = 256;

/// The experts of one stage, hottest first, and what a unit of their use
/// rate costs each resource.
pub(super) struct Experts {
    pub(super) ids: Vec<usize>,
    pub(super) rates: Vec<f64>,
    /// `prefix[k]`: the use rate of the `k` hottest.
    pub(super) prefix: Vec<f64>,
    /// Experts with a positive rate.
    pub(super) positive: usize,
    /// Bytes of one expert at each place kind.
    pub(super) gpu_bytes: f64,
    pub(super) ram_bytes: f64,
    pub(super) disk_bytes: f64,
}

impl Experts {
    /// The fewest (fractional) hottest experts that carry use rate `mass`.
    pub(super) fn count_for_mass(&self, mass: f64) -> f64 {
        if mass <= 0.0 {
            return 0.0;
        }
        if mass >= *self.prefix.last().unwrap() {
            return self.positive as f64;
        }
        let j = self.prefix.partition_point(|&s| s < mass) - 1;
        j as f64 + (mass - self.prefix[j]) / self.rates[j]
    }
}

/// One stage's data for the priced problem.
pub(super) struct StageData {
    pub(super) experts: Option<Experts>,
    /// Trunk components placed whole, largest first.
    pub(super) whole: Vec<usize>,
    /// Trunk components only priced (beyond the combination budget).
    pub(super) priced: Vec<usize>,
    /// KV groups (the `kv` stage), each priced on its own.
    pub(super) kv: Vec<usize>,
    /// The first stage whose priced problem is this one's (`alike`): at
    /// any prices, where their slots come in the same order, its solution
    /// is this one's, trunk objects renamed. Itself when none is earlier.
    pub(super) like: usize,
}

impl StageData {
    /// Trunk objects as combinations list them: priced ones, then whole.
    fn trunk(&self) -> impl Iterator<Item = usize> + '_ {
        self.priced.iter().chain(&self.whole).copied()
    }
}

/// Fixed loads and byte prices of a trunk combination.
#[derive(Clone)]
pub(super) struct TrunkLoads {
    pub(super) gpu: Vec<f64>,
    pub(super) cpu: Vec<f64>,
    /// GPUs the combination uses: they must take part.
    pub(super) gpus_used: Vec<bool>,
    pub(super) price: f64,
    pub(super) places: Vec<(usize, Place)>,
}

impl TrunkLoads {
    pub(super) fn empty(r: &Resources) -> TrunkLoads {
        TrunkLoads {
            gpu: vec![0.0; r.gpus()],
            cpu: vec![0.0; r.numa_nodes()],
            gpus_used: vec![false; r.gpus()],
            price: 0.0,
            places: Vec::new(),
        }
    }
}

/// A stage's priced solution: its bound, and the relaxed placement near
/// the minimum.
#[derive(Clone)]
pub(super) struct StageSolution {
    pub(super) bound: f64,
    pub(super) shares: StageShares,
}

/// Stage solutions found in one evaluation, by the first of the stages
/// alike (`StageData::like`), each with the slots it was found at and the
/// stage it was found for.
pub(super) type Solved = Vec<Vec<(Vec<(Place, f64)>, usize, StageSolution)>>;

/// The priced problem of the whole instance.
pub(super) struct Priced<'a> {
    pub(super) inst: &'a Instance,
    pub(super) stages: Vec<StageData>,
    /// Nested participation sets, smallest first (the first is empty).
    pub(super) participation: Vec<Vec<bool>>,
    pub(super) capacities: Vec<f64>,
}

impl<'a> Priced<'a> {
    pub(super) fn new(inst: &'a Instance) -> Priced<'a> {
        let r = &inst.resources;
        let mut stages: Vec<StageData> = inst
            .stages
            .iter()
            .map(|stage| {
                let mut ids: Vec<usize> = stage
                    .objects
                    .iter()
                    .copied()
                    .filter(|&o| inst.objects[o].is_expert())
                    .collect();
                ids.sort_by(|&a, &b| {
                    inst.objects[b]
                        .use_rate
                        .total_cmp(&inst.objects[a].use_rate)
                });
                let experts = ids.first().map(|&first| {
                    let o = &inst.objects[first];
                    let rates: Vec<f64> = ids
                        .iter()
                        .map(|&e| inst.objects[e].use_rate.max(0.0))
                        .collect();
                    let mut prefix = vec![0.0];
                    for &p in &rates {
                        prefix.push(prefix.last().unwrap() + p);
                    }
                    Experts {
                        positive: rates.iter().filter(|&&p| p > 0.0).count(),
                        ids: ids.clone(),
                        rates,
                        prefix,
                        gpu_bytes: o.gpu_bytes as f64,
                        ram_bytes: o.ram_bytes as f64,
                        disk_bytes: o.disk_bytes as f64,
                    }
                });
                let mut trunk: Vec<usize> = stage
                    .objects
                    .iter()
                    .copied()
                    .filter(|&o| inst.objects[o].is_trunk())
                    .collect();
                trunk.sort_by(|&a, &b| inst.objects[b].gpu_bytes.cmp(&inst.objects[a].gpu_bytes));
                let slots = r.gpus() + r.numa_nodes();
                let mut whole = 0;
                while whole < trunk.len()
                    && slots.checked_pow(whole as u32 + 1).unwrap_or(usize::MAX)
                        <= MAX_TRUNK_COMBINATIONS
                {
                    whole += 1;
                }
                let priced = trunk.split_off(whole);
                StageData {
                    experts,
                    whole: trunk,
                    priced,
                    kv: stage
                        .objects
                        .iter()
                        .copied()
                        .filter(|&o| inst.objects[o].is_kv())
                        .collect(),
                    like: 0,
                }
            })
            .collect();
        for s in 0..stages.len() {
            stages[s].like = (0..s)
                .find(|&t| stages[t].like == t && alike(inst, &stages[t], &stages[s]))
                .unwrap_or(s);
        }
        let mut syncs: Vec<f64> = r.gpu_sync_seconds.clone();
        syncs.sort_by(f64::total_cmp);
        syncs.dedup();
        let participation = std::iter::once(vec![false; r.gpus()])
            .chain(
                syncs
                    .iter()
                    .map(|&v| r.gpu_sync_seconds.iter().map(|&s| s <= v).collect()),
            )
            .collect();
        let capacities = r
            .gpu_capacity_bytes
            .iter()
            .chain(&r.ram_capacity_bytes)
            .enumerate()
            .map(|(i, &c)| usable_bytes(inst, capacity_place(r, i), c) as f64)
            .collect();
        Priced {
            inst,
            stages,
            participation,
            capacities,
        }
    }

    /// No stage solved yet.
    fn solved(&self) -> Solved {
        self.stages.iter().map(|_| Vec::new()).collect()
    }

    pub(super) fn resources(&self) -> &Resources {
        &self.inst.resources
    }

    /// Byte price of object `o` at `place`.
    pub(super) fn byte_price(&self, prices: &[f64], o: usize, place: Place) -> f64 {
        price_index(self.resources(), place).map_or(0.0, |i| {
            prices[i] * self.inst.objects[o].bytes_at(place) as f64
        })
    }

    /// Places a trunk component may take whole: GPUs, then RAM nodes.
    pub(super) fn trunk_places(&self) -> Vec<Place> {
        let r = self.resources();
        (0..r.gpus())
            .map(Place::Gpu)
            .chain((0..r.numa_nodes()).map(Place::Ram))
            .collect()
    }

    /// Every whole-trunk combination of a stage with its loads and price.
    pub(super) fn trunk_combinations(&self, data: &StageData, prices: &[f64]) -> Vec<TrunkLoads> {
        let r = self.resources();
        let places = self.trunk_places();
        // Priced-only components cost at least their cheapest byte price,
        // and sit there in the relaxed placement.
        let mut base = TrunkLoads::empty(r);
        for &o in &data.priced {
            let (price, place) = places
                .iter()
                .map(|&q| (self.byte_price(prices, o, q), q))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("a node to hold trunk");
            base.price += price;
            base.places.push((o, place));
        }
        let mut combinations = vec![base];
        for &o in &data.whole {
            let object = &self.inst.objects[o];
            combinations = combinations
                .into_iter()
                .flat_map(|base| {
                    places.iter().map(move |&q| {
                        let mut next = base.clone();
                        for (resource, work) in r.work(object, q) {
                            match resource {
                                Resource::Gpu(g) => {
                                    next.gpu[g] += work;
                                    next.gpus_used[g] = true;
                                }
                                Resource::Cpu(n) => next.cpu[n] += work,
                                Resource::Drive(_) | Resource::Prefill => {}
                            }
                        }
                        next.price += self.byte_price(prices, o, q);
                        next.places.push((o, q));
                        next
                    })
                })
                .collect();
        }
        combinations
    }

    /// Stages with experts whose priced problems differ (`StageData::like`).
    pub(super) fn expert_classes(&self) -> usize {
        self.expert_stages()
            .filter(|&s| self.stages[s].like == s)
            .count()
    }

    /// Stages with experts.
    fn expert_stages(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.stages.len()).filter(|&s| self.stages[s].experts.is_some())
    }

    /// An estimate of the dual function and its subgradient at `prices`
    /// from the stages of every `stride`-th class of alike stages with
    /// experts (`expert_classes`; each weighted by the stages it stands
    /// for) and every stage without: where the stages' heat is alike, its
    /// best prices are near the whole function's, at a `stride`-th of the
    /// cost. Not a bound.
    pub(super) fn estimate(&self, prices: &[f64], stride: usize) -> (f64, Vec<f64>) {
        let firsts: Vec<usize> = self
            .expert_stages()
            .filter(|&s| self.stages[s].like == s)
            .step_by(stride.max(1))
            .collect();
        let sampled = |data: &StageData| firsts.contains(&data.like);
        let with_experts = self.expert_stages().count();
        let in_sampled = self
            .expert_stages()
            .filter(|&s| sampled(&self.stages[s]))
            .count();
        let weight = with_experts as f64 / in_sampled.max(1) as f64;
        let mut value = self.resources().fixed_token_seconds
            - prices
                .iter()
                .zip(&self.capacities)
                .map(|(p, c)| p * c)
                .sum::<f64>();
        let mut subgradient: Vec<f64> = self.capacities.iter().map(|c| -c).collect();
        let mut solved = self.solved();
        for (stage, data) in self.stages.iter().enumerate() {
            let weight = match data.experts {
                Some(_) if !sampled(data) => continue,
                Some(_) => weight,
                None => 1.0,
            };
            let solution = self.stage(stage, data, prices, true, &mut solved);
            value += weight * solution.bound;
            for (g, b) in subgradient.iter_mut().zip(&solution.shares.bytes) {
                *g += weight * b;
            }
        }
        (value, subgradient)
    }

    /// The dual function at `prices` (seconds per byte): the bound, its
    /// subgradient, per stage the relaxed placement with its bytes per
    /// capacitated place, and each stage's priced bound (the bound is their
    /// sum, plus the fixed seconds, less the prices of the capacities).
    pub(super) fn evaluate(&self, prices: &[f64]) -> (f64, Vec<f64>, Fractional, Vec<f64>) {
        let r = self.resources();
        let mut bound = r.fixed_token_seconds
            - prices
                .iter()
                .zip(&self.capacities)
                .map(|(p, c)| p * c)
                .sum::<f64>();
        let mut used = vec![0.0; self.capacities.len()];
        let mut fractional = Fractional::default();
        let mut stage_bounds = Vec::with_capacity(self.stages.len());
        let mut solved = self.solved();
        for (stage, data) in self.stages.iter().enumerate() {
            let solution = self.stage(stage, data, prices, false, &mut solved);
            bound += solution.bound;
            stage_bounds.push(solution.bound);
            for (u, b) in used.iter_mut().zip(&solution.shares.bytes) {
                *u += b;
            }
            fractional.stages.push(solution.shares);
        }
        let subgradient = used
            .iter()
            .zip(&self.capacities)
            .map(|(u, c)| u - c)
            .collect();
        (bound, subgradient, fractional, stage_bounds)
    }

    /// A stage of KV groups: each where its priced cost is least; the stage
    /// time is the sum of their prefill seconds.
    pub(super) fn kv_stage(&self, kv: &[usize], prices: &[f64]) -> StageSolution {
        let r = self.resources();
        let mut solution = StageSolution {
            bound: 0.0,
            shares: StageShares {
                bytes: vec![0.0; self.capacities.len()],
                ..StageShares::default()
            },
        };
        for &o in kv {
            let (cost, place) = self
                .inst
                .places
                .iter()
                .filter(|&&q| self.inst.allowed(o, q))
                .map(|&q| {
                    let cost =
                        r.kv_seconds(&self.inst.objects[o], q) + self.byte_price(prices, o, q);
                    (cost, q)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("a KV group can always be recomputed");
            solution.bound += cost;
            solution.shares.seconds += r.kv_seconds(&self.inst.objects[o], place);
            if let Some(i) = price_index(r, place) {
                solution.shares.bytes[i] += self.inst.objects[o].bytes_at(place) as f64;
            }
            solution.shares.whole.push((o, place));
        }
        solution
    }

    /// One stage's priced problem; `coarse`: its searches to wider
    /// brackets (`StageProblem::coarse`). A stage alike one already in
    /// `solved` at the same slots takes its solution.
    pub(super) fn stage(
        &self,
        stage: usize,
        data: &StageData,
        prices: &[f64],
        coarse: bool,
        solved: &mut Solved,
    ) -> StageSolution {
        if !data.kv.is_empty() {
            return self.kv_stage(&data.kv, prices);
        }
        if data.experts.is_none() && data.whole.is_empty() && data.priced.is_empty() {
            return StageSolution {
                bound: 0.0,
                shares: StageShares {
                    bytes: vec![0.0; self.capacities.len()],
                    ..StageShares::default()
                },
            };
        }
        let combinations = self.trunk_combinations(data, prices);
        let Some(experts) = &data.experts else {
            return self.trunk_only(stage, &combinations);
        };
        let slots = self.slots(stage, experts, prices);
        if let Some((_, solver, solution)) = solved[data.like].iter().find(|(s, ..)| *s == slots) {
            // Its bound scaled to this stage's rates, its trunk objects
            // renamed to this stage's, by position.
            let first = &self.stages[*solver];
            let mut solution = solution.clone();
            let solver_experts = first.experts.as_ref().expect("alike stages have experts");
            solution.bound *= rate_scale(solver_experts, experts);
            for (o, _) in &mut solution.shares.whole {
                let i = first.trunk().position(|t| t == *o);
                *o = i
                    .and_then(|i| data.trunk().nth(i))
                    .expect("alike stages list as many trunk objects");
            }
            return solution;
        }
        let solution = self.with_experts(experts, &slots, &combinations, coarse);
        solved[data.like].push((slots, stage, solution.clone()));
        solution
    }

    /// A stage without experts: each combination's time is known exactly.
    pub(super) fn trunk_only(&self, stage: usize, combinations: &[TrunkLoads]) -> StageSolution {
        let r = self.resources();
        // Rotated by the stage, as `slots` is, so that ties fall on like
        // places in turn.
        let rotated = combinations[stage % combinations.len()..]
            .iter()
            .chain(&combinations[..stage % combinations.len()]);
        let best = rotated
            .map(|c| {
                let gpu = (0..r.gpus())
                    .filter(|&g| c.gpus_used[g])
                    .map(|g| c.gpu[g] + r.gpu_sync_seconds[g]);
                let time = gpu.chain(c.cpu.iter().copied()).fold(0.0, f64::max);
                (time + c.price, time, c)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("at least one combination");
        let (value, seconds, best) = best;
        StageSolution {
            bound: value,
            shares: StageShares {
                whole: best.places.clone(),
                seconds,
                bytes: self.trunk_bytes(best),
                ..StageShares::default()
            },
        }
    }

    pub(super) fn trunk_bytes(&self, combination: &TrunkLoads) -> Vec<f64> {
        let mut bytes = vec![0.0; self.capacities.len()];
        for &(o, q) in &combination.places {
            if let Some(i) = price_index(self.resources(), q) {
                bytes[i] += self.inst.objects[o].bytes_at(q) as f64;
            }
        }
        bytes
    }

    /// A stage with experts: the least bound over participation sets and
    /// trunk combinations, best first. A combination's bound is at least
    /// the experts' bound for its participation set without trunk plus the
    /// trunk's price, so only the most promising are searched in full. That
    /// first estimate takes the split bound alone: it is below the full one,
    /// so the order stays valid, and the whole-count enumeration (most of an
    /// evaluation's time where few places take the experts) runs only for
    /// the candidates popped.
    pub(super) fn with_experts(
        &self,
        experts: &Experts,
        slots: &[(Place, f64)],
        combinations: &[TrunkLoads],
        coarse: bool,
    ) -> StageSolution {
        let r = self.resources();
        let empty = TrunkLoads::empty(r);
        let problem = |participation: usize, trunk| StageProblem {
            resources: r,
            experts,
            slots,
            participation: &self.participation[participation],
            trunk,
            coarse,
        };
        let mut heap = BinaryHeap::new();
        for (p, set) in self.participation.iter().enumerate() {
            let Some(base) = problem(p, &empty).search_split() else {
                continue;
            };
            for (c, combination) in combinations.iter().enumerate() {
                let allowed = (0..r.gpus()).all(|g| !combination.gpus_used[g] || set[g]);
                if allowed {
                    heap.push(Candidate {
                        bound: base.bound + combination.price,
                        participation: p,
                        combination: c,
                        searched: None,
                    });
                }
            }
        }
        while let Some(candidate) = heap.pop() {
            let combination = &combinations[candidate.combination];
            if let Some(searched) = candidate.searched {
                let mut bytes = self.trunk_bytes(combination);
                let blocks = searched.counts.clone().unwrap_or_else(|| {
                    let mut blocks = Vec::new();
                    // The blocks are what is wanted: the price is known.
                    let _ = problem(candidate.participation, combination).fill(
                        searched.time,
                        searched.drive,
                        Some(&mut blocks),
                    );
                    blocks
                });
                for &(q, count) in &blocks {
                    if let Some(i) = price_index(r, q) {
                        bytes[i] += count * bytes_at(experts, q);
                    }
                }
                return StageSolution {
                    bound: candidate.bound,
                    shares: StageShares {
                        blocks,
                        whole: combination.places.clone(),
                        seconds: searched.time,
                        bytes,
                    },
                };
            }
            if let Some(searched) = problem(candidate.participation, combination).search() {
                heap.push(Candidate {
                    bound: searched.bound + combination.price,
                    searched: Some(searched),
                    ..candidate
                });
            }
        }
        // No feasible time at all (no place can take the experts): the stage
        // costs at least nothing, and its experts wait in RAM for repair.
        StageSolution {
            bound: 0.0,
            shares: StageShares {
                blocks: vec![(Place::Ram(0), experts.ids.len() as f64)],
                whole: combinations[0].places.clone(),
                seconds: 0.0,
                bytes: vec![0.0; self.capacities.len()],
            },
        }
    }

    /// The places experts may take, cheapest first (drives first on ties:
    /// they absorb at least as much mass per CPU second as RAM), with each
    /// one's price per expert.
    pub(super) fn slots(
        &self,
        stage: usize,
        experts: &Experts,
        prices: &[f64],
    ) -> Vec<(Place, f64)> {
        let r = self.resources();
        let mut slots: Vec<(Place, f64)> = (0..r.drives())
            .map(|d| (Place::Disk(d), 0.0))
            .chain((0..r.numa_nodes()).map(|n| {
                let price = prices[price_index(r, Place::Ram(n)).unwrap()] * experts.ram_bytes;
                (Place::Ram(n), price)
            }))
            .chain((0..r.gpus()).map(|g| (Place::Gpu(g), prices[g] * experts.gpu_bytes)))
            .collect();
        slots.sort_by(|a, b| a.1.total_cmp(&b.1));
        // Equal prices leave the order free, and with it which of two like
        // places a stage fills first; rotating it from stage to stage keeps
        // the relaxed placement from piling every stage onto one of them.
        let rotation = |place: Place| match place {
            Place::Disk(d) => (0, (d + stage) % r.drives()),
            Place::Ram(n) => (1, (n + stage) % r.numa_nodes()),
            Place::Gpu(g) => (2, (g + stage) % r.gpus()),
            Place::Recompute => (3, 0),
        };
        let mut start = 0;
        while start < slots.len() {
            let tied = slots[start].1 * (1.0 + 1e-9) + f64::MIN_POSITIVE;
            // At least one: a run always holds its first slot.
            let end = start + slots[start..].partition_point(|s| s.1 <= tied).max(1);
            slots[start..end].sort_by_key(|s| rotation(s.0));
            start = end;
        }
        slots
    }
}

/// Relative difference two stages' rates may have and still be `alike`:
/// heat drawn from one profile and normalised in another order differs in
/// the last bits.
const ALIKE_RATES: f64 = 1e-9;

/// Whether two stages' priced problems are the same at any prices, up to
/// `ALIKE_RATES` in their rates (`rate_scale`): both with experts of the
/// same sizes, no KV groups, and trunk objects alike one by one as
/// combinations list them (the same rate and sizes, so the same work and
/// bytes at every place).
fn alike(inst: &Instance, a: &StageData, b: &StageData) -> bool {
    let (Some(x), Some(y)) = (&a.experts, &b.experts) else {
        return false;
    };
    let same_object = |o: usize, p: usize| {
        let (o, p) = (&inst.objects[o], &inst.objects[p]);
        o.is_trunk() == p.is_trunk()
            && o.use_rate == p.use_rate
            && (o.gpu_bytes, o.ram_bytes, o.disk_bytes) == (p.gpu_bytes, p.ram_bytes, p.disk_bytes)
    };
    a.kv.is_empty()
        && b.kv.is_empty()
        && x.rates.len() == y.rates.len()
        && rate_scale(x, y) >= 1.0 / (1.0 + ALIKE_RATES)
        && rate_scale(y, x) >= 1.0 / (1.0 + ALIKE_RATES)
        && (x.gpu_bytes, x.ram_bytes, x.disk_bytes) == (y.gpu_bytes, y.ram_bytes, y.disk_bytes)
        && (a.whole.len(), a.priced.len()) == (b.whole.len(), b.priced.len())
        && a.trunk().zip(b.trunk()).all(|(o, p)| same_object(o, p))
}

/// The share of stage `x`'s value that bounds stage `y`'s, where both list
/// as many experts: `1 / (1 + d)` with `x`'s rates at most `1 + d` times
/// `y`'s, rank by rank (0 where `x` has a rate and `y` none). Any placement
/// of `y` (experts matched by rank) at stage time `T` places `x` within
/// `(1 + d) T`, as every row is a non-negative constant plus rates times
/// work, at the same price; prices are non-negative, so `x`'s value is at
/// most `1 + d` times `y`'s.
fn rate_scale(x: &Experts, y: &Experts) -> f64 {
    x.rates
        .iter()
        .zip(&y.rates)
        .map(|(&p, &q)| if p <= q { 1.0 } else { q / p })
        .fold(1.0, f64::min)
}

/// Bytes of one expert at `place`.
pub(super) fn bytes_at(experts: &Experts, place: Place) -> f64 {
    match place {
        Place::Gpu(_) => experts.gpu_bytes,
        Place::Ram(_) => experts.ram_bytes,
        Place::Disk(_) | Place::Recompute => experts.disk_bytes,
    }
}

/// A stage candidate in the best-first search: its bound so far.
pub(super) struct Candidate {
    pub(super) bound: f64,
    pub(super) participation: usize,
    pub(super) combination: usize,
    pub(super) searched: Option<Searched>,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Reversed: the max-heap pops the least bound first; searched ones
    /// first on ties.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .bound
            .total_cmp(&self.bound)
            .then(self.searched.is_some().cmp(&other.searched.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::Priced;
    use residency_core::cost::Instance;
    use residency_core::model::Model;
    use std::path::Path;

    /// Four MoE layers of 12 experts with a shared expert each on a card, a
    /// node and a drive with felt reads: three layers' heat is one Zipf
    /// profile shuffled (normalised in the shuffled order, so equal to the
    /// last bits), the fourth's is flatter. The three are one class and the
    /// fourth its own; each stage's solution through the evaluation's reuse
    /// must bound as its own search does (to the rates' last bits, never
    /// above it) and name its own trunk objects.
    #[test]
    fn alike_stages_take_one_solution() {
        let model = Model::from_yaml_str(
            "name: tiny\nlayers: 4\nmoe_layers: \"0..=3\"\nexperts: 12\ntop_k: 2\nhidden: 64\n\
             expert_intermediate: 64\nformats: { q: 100 MB }\n\
             tiers: { gpu: q, ram: q, disk: q }\ntrunk:\n  \
             - { name: attn, layers: \"0..=3\", bytes: 150 MB, stage: dense }\n  \
             - { name: shared, layers: \"0..=3\", bytes: 60 MB, stage: experts }\n",
            Path::new("tiny.yaml"),
        )
        .unwrap();
        let profile =
            crate::test_box::one_card_box(("4 GiB", "3 GiB"), ("2 GiB", "1600 MiB"), Some(0.3));
        let shuffled = |order: &[usize], power: f64| {
            let weights: Vec<f64> = order
                .iter()
                .map(|&i| 1.0 / (i as f64).powf(power))
                .collect();
            let sum: f64 = weights.iter().sum();
            weights.iter().map(|w| 2.0 * w / sum).collect::<Vec<f64>>()
        };
        let forward: Vec<usize> = (1..=12).collect();
        let backward: Vec<usize> = (1..=12).rev().collect();
        let mixed = [7, 2, 11, 1, 9, 4, 12, 3, 6, 10, 5, 8];
        let rates = vec![
            shuffled(&forward, 1.0),
            shuffled(&backward, 1.0),
            shuffled(&mixed, 1.0),
            shuffled(&forward, 0.5),
        ];
        let inst = Instance::new(&profile, &model, &rates);
        let priced = Priced::new(&inst);
        assert_eq!(priced.expert_classes(), 2);
        let mut compared = 0;
        // Zero prices (ties, the slots rotate from stage to stage) and
        // dearer GPU and RAM bytes (one order).
        for prices in [[0.0, 0.0], [2e-13, 1e-14], [1e-12, 1e-13]] {
            let mut solved = priced.solved();
            for (stage, data) in priced.stages.iter().enumerate() {
                let Some(experts) = &data.experts else {
                    continue;
                };
                let reused = priced.stage(stage, data, &prices, false, &mut solved);
                let own = priced.stage(stage, data, &prices, false, &mut priced.solved());
                assert!(
                    reused.bound <= own.bound && reused.bound >= own.bound * (1.0 - 1e-12),
                    "stage {stage} at {prices:?}: {} against its own {}",
                    reused.bound,
                    own.bound
                );
                assert_eq!(reused.shares, own.shares, "stage {stage} at {prices:?}");
                assert!(reused
                    .shares
                    .whole
                    .iter()
                    .all(|&(o, _)| inst.objects[o].stage == stage));
                assert_eq!(experts.ids.len(), 12);
                compared += 1;
            }
        }
        assert_eq!(compared, 12);
    }
}

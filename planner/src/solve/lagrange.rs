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
//!   evaluated points bound it outside their intervals: a golden-section
//!   search gives a lower bound that converges to the minimum.
//!
//! Relaxed, so valid and possibly weaker: experts split between places, the
//! felt share of reads (`felt_fraction`) left out of the CPU rows, and
//! trunk components beyond a stage's combination budget only priced.

use crate::cost::{Instance, Place, Resource, Resources};
use microlp::{ComparisonOp, OptimizationDirection, Problem};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Most whole-trunk combinations enumerated per stage; smaller components
/// beyond it are only priced.
const MAX_TRUNK_COMBINATIONS: usize = 256;
/// Golden-section steps per stage problem: the bracket shrinks to 0.618^n,
/// or until it is `GOLDEN_WIDTH` of its end wide.
const GOLDEN_STEPS: usize = 48;
const GOLDEN_WIDTH: f64 = 1e-7;
/// Units of the price master problem: microseconds and GiB keep its
/// coefficients near 1.
const TIME_UNIT: f64 = 1e-6;
const BYTE_UNIT: f64 = (1u64 << 30) as f64;
/// Scales of one price at a time around the best prices, for solutions to mix.
const NEARBY_PRICES: [f64; 6] = [0.999, 1.001, 0.99, 1.01, 0.95, 1.05];
/// Most whole-count vectors a stage's bound tries.
const WHOLE_COUNT_VECTORS: f64 = 2000.0;
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
    /// then the latest first: starts for rounding.
    pub starts: Vec<Fractional>,
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

/// Index of a capacitated place among the prices: GPUs, then RAM nodes.
fn price_index(r: &Resources, place: Place) -> Option<usize> {
    match place {
        Place::Gpu(g) => Some(g),
        Place::Ram(n) => Some(r.gpus() + n),
        Place::Disk(_) | Place::Recompute => None,
    }
}

/// The experts of one stage, hottest first, and what a unit of their use
/// rate costs each resource.
struct Experts {
    ids: Vec<usize>,
    rates: Vec<f64>,
    /// `prefix[k]`: the use rate of the `k` hottest.
    prefix: Vec<f64>,
    /// Experts with a positive rate.
    positive: usize,
    /// Bytes of one expert at each place kind.
    gpu_bytes: f64,
    ram_bytes: f64,
    disk_bytes: f64,
}

impl Experts {
    /// The fewest (fractional) hottest experts that carry use rate `mass`.
    fn count_for_mass(&self, mass: f64) -> f64 {
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
struct StageData {
    experts: Option<Experts>,
    /// Trunk components placed whole, largest first.
    whole: Vec<usize>,
    /// Trunk components only priced (beyond the combination budget).
    priced: Vec<usize>,
    /// KV groups (the `kv` stage), each priced on its own.
    kv: Vec<usize>,
}

/// Fixed loads and byte prices of a trunk combination.
#[derive(Clone)]
struct TrunkLoads {
    gpu: Vec<f64>,
    cpu: Vec<f64>,
    /// GPUs the combination uses: they must take part.
    gpus_used: Vec<bool>,
    price: f64,
    places: Vec<(usize, Place)>,
}

impl TrunkLoads {
    fn empty(r: &Resources) -> TrunkLoads {
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
struct StageSolution {
    bound: f64,
    shares: StageShares,
}

/// The priced problem of the whole instance.
struct Priced<'a> {
    inst: &'a Instance,
    stages: Vec<StageData>,
    /// Nested participation sets, smallest first (the first is empty).
    participation: Vec<Vec<bool>>,
    capacities: Vec<f64>,
}

impl<'a> Priced<'a> {
    fn new(inst: &'a Instance) -> Priced<'a> {
        let r = &inst.resources;
        let stages = inst
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
                }
            })
            .collect();
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
            .map(|(i, &c)| {
                let place = if i < r.gpus() {
                    Place::Gpu(i)
                } else {
                    Place::Ram(i - r.gpus())
                };
                usable_bytes(inst, place, c) as f64
            })
            .collect();
        Priced {
            inst,
            stages,
            participation,
            capacities,
        }
    }

    fn resources(&self) -> &Resources {
        &self.inst.resources
    }

    /// Byte price of object `o` at `place`.
    fn byte_price(&self, prices: &[f64], o: usize, place: Place) -> f64 {
        price_index(self.resources(), place).map_or(0.0, |i| {
            prices[i] * self.inst.objects[o].bytes_at(place) as f64
        })
    }

    /// Places a trunk component may take whole: GPUs, then RAM nodes.
    fn trunk_places(&self) -> Vec<Place> {
        let r = self.resources();
        (0..r.gpus())
            .map(Place::Gpu)
            .chain((0..r.numa_nodes()).map(Place::Ram))
            .collect()
    }

    /// Every whole-trunk combination of a stage with its loads and price.
    fn trunk_combinations(&self, data: &StageData, prices: &[f64]) -> Vec<TrunkLoads> {
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

    /// The dual function at `prices` (seconds per byte): the bound, and per
    /// stage the relaxed placement with its bytes per capacitated place.
    fn evaluate(&self, prices: &[f64]) -> (f64, Vec<f64>, Fractional) {
        let r = self.resources();
        let mut bound = r.fixed_token_seconds
            - prices
                .iter()
                .zip(&self.capacities)
                .map(|(p, c)| p * c)
                .sum::<f64>();
        let mut used = vec![0.0; self.capacities.len()];
        let mut fractional = Fractional::default();
        for (stage, data) in self.stages.iter().enumerate() {
            let solution = self.stage(stage, data, prices);
            bound += solution.bound;
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
        (bound, subgradient, fractional)
    }

    /// A stage of KV groups: each where its priced cost is least; the stage
    /// time is the sum of their prefill seconds.
    fn kv_stage(&self, kv: &[usize], prices: &[f64]) -> StageSolution {
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

    /// One stage's priced problem.
    fn stage(&self, stage: usize, data: &StageData, prices: &[f64]) -> StageSolution {
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
        match &data.experts {
            None => self.trunk_only(stage, &combinations),
            Some(experts) => self.with_experts(stage, experts, &combinations, prices),
        }
    }

    /// A stage without experts: each combination's time is known exactly.
    fn trunk_only(&self, stage: usize, combinations: &[TrunkLoads]) -> StageSolution {
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

    fn trunk_bytes(&self, combination: &TrunkLoads) -> Vec<f64> {
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
    /// trunk's price, so only the most promising are searched in full.
    fn with_experts(
        &self,
        stage: usize,
        experts: &Experts,
        combinations: &[TrunkLoads],
        prices: &[f64],
    ) -> StageSolution {
        let r = self.resources();
        let empty = TrunkLoads::empty(r);
        let slots = self.slots(stage, experts, prices);
        let mut heap = BinaryHeap::new();
        for (p, set) in self.participation.iter().enumerate() {
            let problem = StageProblem {
                resources: r,
                experts,
                slots: &slots,
                participation: set,
                trunk: &empty,
            };
            let Some(base) = problem.search() else {
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
                    let problem = StageProblem {
                        resources: r,
                        experts,
                        slots: &slots,
                        participation: &self.participation[candidate.participation],
                        trunk: combination,
                    };
                    let mut blocks = Vec::new();
                    problem.fill(searched.time, searched.drive, Some(&mut blocks));
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
            let problem = StageProblem {
                resources: r,
                experts,
                slots: &slots,
                participation: &self.participation[candidate.participation],
                trunk: combination,
            };
            if let Some(searched) = problem.search() {
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
    fn slots(&self, stage: usize, experts: &Experts, prices: &[f64]) -> Vec<(Place, f64)> {
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
            let end = start + slots[start..].partition_point(|s| s.1 <= tied);
            slots[start..end].sort_by_key(|s| rotation(s.0));
            start = end;
        }
        slots
    }
}

/// Bytes of one expert at `place`.
fn bytes_at(experts: &Experts, place: Place) -> f64 {
    match place {
        Place::Gpu(_) => experts.gpu_bytes,
        Place::Ram(_) => experts.ram_bytes,
        Place::Disk(_) | Place::Recompute => experts.disk_bytes,
    }
}

/// One priced stage problem: a stage's experts, the places they may take
/// (cheapest first, with the price per expert), a participation set and
/// the loads of a trunk combination.
struct StageProblem<'a> {
    resources: &'a Resources,
    experts: &'a Experts,
    slots: &'a [(Place, f64)],
    participation: &'a [bool],
    trunk: &'a TrunkLoads,
}

/// The result of one stage search: a valid bound on `T + price(T)` (trunk
/// price excluded), the least value seen, and where.
#[derive(Clone)]
struct Searched {
    bound: f64,
    value: f64,
    time: f64,
    /// The most drive seconds allowed there (infinite when reads are not felt).
    drive: f64,
    /// Expert counts per place, hottest first, when whole counts gave the
    /// bound (else `fill` at `time` gives them).
    counts: Option<Vec<(Place, f64)>>,
}

impl StageProblem<'_> {
    /// The experts' price at stage time `time` with at most `drive` seconds
    /// on any drive, whose `felt_fraction` every node's cores wait for
    /// (`None`: infeasible): the cheapest places filled first, each with the
    /// mass its resource's time left absorbs, the coldest experts first.
    /// With `blocks`, records the expert count per place, hottest first.
    fn fill(&self, time: f64, drive: f64, blocks: Option<&mut Vec<(Place, f64)>>) -> Option<f64> {
        let r = self.resources;
        let (experts, trunk) = (self.experts, self.trunk);
        let felt = if drive.is_finite() {
            r.felt_fraction * drive
        } else {
            0.0
        };
        let mut cpu_left: Vec<f64> = trunk.cpu.iter().map(|c| time - c - felt).collect();
        if cpu_left.iter().any(|&left| left < 0.0) || (drive.is_finite() && drive > time) {
            return None;
        }
        for g in 0..r.gpus() {
            if self.participation[g] && time < r.gpu_sync_seconds[g] + trunk.gpu[g] {
                return None;
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
        (boundary <= 0.0).then_some(price)
    }

    /// The least `T + price(T)`, bounded: over the drive seconds too when
    /// reads are felt (the bound over both is convex in each).
    fn search(&self) -> Option<Searched> {
        let split = self.search_split()?;
        match self.whole_counts() {
            Some(whole) if whole.bound > split.bound => Some(whole),
            _ => Some(split),
        }
    }

    /// `search` with experts split between places.
    fn search_split(&self) -> Option<Searched> {
        let r = self.resources;
        if r.felt_fraction == 0.0 || r.drives() == 0 {
            return self.search_time(f64::INFINITY);
        }
        // No drive seconds at all is feasible (RAM takes every expert given
        // time), and beyond its value no drive time can pay.
        let first = self.search_time(0.0)?;
        let mut points = vec![(0.0, first.bound, first.value)];
        let mut best = first;
        golden(0.0, points[0].2, |d| {
            let searched = self.search_time(d)?;
            points.push((d, searched.bound, searched.value));
            let value = searched.value;
            if value < best.value {
                best = searched;
            }
            Some(value)
        });
        Some(Searched {
            bound: convex_lower_bound(&mut points, false),
            ..best
        })
    }

    /// Golden-section search of `T + price(T)` over the feasible times, at
    /// most `drive` seconds on any drive; `None` when no time is feasible.
    fn search_time(&self, drive: f64) -> Option<Searched> {
        let value = |t: f64| self.fill(t, drive, None).map(|price| t + price);
        let r = self.resources;
        // The least time every row allows, then the least at which the mass fits.
        let rows = (0..r.gpus())
            .filter(|&g| self.participation[g])
            .map(|g| r.gpu_sync_seconds[g] + self.trunk.gpu[g])
            .chain(self.trunk.cpu.iter().copied())
            .chain(drive.is_finite().then_some(drive))
            .fold(0.0, f64::max);
        let mut low = rows;
        // Below `floor` no time is feasible.
        let mut floor = rows;
        if value(low).is_none() {
            let mut high = low.max(1e-9) * 2.0;
            let mut doublings = 0;
            while value(high).is_none() {
                high *= 2.0;
                doublings += 1;
                if doublings > 200 {
                    return None;
                }
            }
            while high - low > 1e-9 * high {
                let mid = 0.5 * (low + high);
                if value(mid).is_some() {
                    high = mid;
                } else {
                    low = mid;
                }
            }
            floor = low;
            low = high;
        }
        let first = value(low)?;
        let mut points = vec![(low, first, first)];
        // Every time above `first` costs more than `first` itself.
        golden(low, first, |t| {
            let f = value(t)?;
            points.push((t, f, f));
            Some(f)
        });
        let (time, _, least) = points
            .iter()
            .copied()
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .expect("one point");
        // Between `floor` and the first feasible time seen, `price` is at
        // least its value there.
        let bound = convex_lower_bound(&mut points, true).min(floor + (first - low));
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
    fn whole_counts(&self) -> Option<Searched> {
        let r = self.resources;
        let n = self.experts.ids.len();
        let slots: Vec<(Place, f64)> = self
            .slots
            .iter()
            .copied()
            .filter(|&(q, _)| !matches!(q, Place::Gpu(g) if !self.participation[g]))
            .collect();
        let k = slots.len();
        // C(n + k - 1, k - 1) count vectors, each checked on 2^k place sets.
        let mut vectors = 1.0f64;
        for i in 1..k {
            vectors *= (n + i) as f64 / i as f64;
        }
        if k == 0 || k > 6 || vectors > WHOLE_COUNT_VECTORS {
            return None;
        }
        let rows = (0..r.gpus())
            .filter(|&g| self.participation[g])
            .map(|g| r.gpu_sync_seconds[g] + self.trunk.gpu[g])
            .chain(self.trunk.cpu.iter().copied())
            .fold(0.0, f64::max);
        let total = *self.experts.prefix.last().unwrap();
        let top = |count: usize| self.experts.prefix[count.min(n)];
        // The mass place i can take in `time`, its resource alone.
        let cap = |i: usize, time: f64| {
            let e = self.experts;
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
        // Whole counts `c` can carry all the mass within `time` when every
        // set of places either holds the hottest experts it counts or
        // leaves the rest to the others' caps (a polymatroid and a box).
        let fits = |c: &[usize], time: f64| {
            let caps: Vec<f64> = (0..k)
                .map(|i| if c[i] > 0 { cap(i, time) } else { 0.0 })
                .collect();
            (0..1usize << k).all(|set| {
                let (mut count, mut others) = (0, 0.0);
                for i in 0..k {
                    if set >> i & 1 == 1 {
                        count += c[i];
                    } else {
                        others += caps[i];
                    }
                }
                top(count) + others >= total * (1.0 - 1e-12)
            })
        };
        let mut best: Option<(f64, f64, Vec<usize>)> = None;
        let mut counts = vec![0usize; k];
        loop {
            // The next count vector summing to n (odometer on the first k - 1).
            let assigned: usize = counts[..k - 1].iter().sum();
            if assigned <= n {
                counts[k - 1] = n - assigned;
                let price: f64 = (0..k).map(|i| slots[i].1 * counts[i] as f64).sum();
                if best.as_ref().is_none_or(|b| rows + price < b.0) {
                    if let Some(low) = least_time(rows, |t| fits(&counts, t)) {
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
}

/// The least time at or above `low` where `feasible` holds, from below:
/// the largest time found infeasible (so a valid lower value), or `low`
/// itself; `None` when doubling finds no feasible time.
fn least_time(low: f64, feasible: impl Fn(f64) -> bool) -> Option<f64> {
    if feasible(low) {
        return Some(low);
    }
    let mut high = low.max(1e-9) * 2.0;
    let mut below = low;
    let mut doublings = 0;
    while !feasible(high) {
        below = high;
        high *= 2.0;
        doublings += 1;
        if doublings > 200 {
            return None;
        }
    }
    while high - below > 1e-9 * high {
        let mid = 0.5 * (below + high);
        if feasible(mid) {
            high = mid;
        } else {
            below = mid;
        }
    }
    Some(below)
}

/// Golden-section search for the least `f` on `[low, high]`, `GOLDEN_STEPS`
/// steps; stops where `f` is undefined.
fn golden(low: f64, high: f64, mut f: impl FnMut(f64) -> Option<f64>) {
    if high <= low {
        return;
    }
    let ratio = 0.5 * (5f64.sqrt() - 1.0);
    let (mut a, mut b) = (low, high);
    let mut x1 = b - ratio * (b - a);
    let mut x2 = a + ratio * (b - a);
    let (Some(mut f1), Some(mut f2), Some(_)) = (f(x1), f(x2), f(high)) else {
        return;
    };
    for _ in 0..GOLDEN_STEPS {
        if b - a <= GOLDEN_WIDTH * b.abs() {
            return;
        }
        if f1 <= f2 {
            b = x2;
            x2 = x1;
            f2 = f1;
            x1 = b - ratio * (b - a);
            let Some(v) = f(x1) else { return };
            f1 = v;
        } else {
            a = x1;
            x1 = x2;
            f1 = f2;
            x2 = a + ratio * (b - a);
            let Some(v) = f(x2) else { return };
            f2 = v;
        }
    }
}

/// A lower bound on a convex function over `[t_0, t_k]` from points
/// `(t, lower, upper)` that bracket its value at each `t`. On each interval
/// it is the largest of the secants of the neighbouring intervals extended
/// over it (a convex function lies above a secant outside the secant's
/// interval; with brackets, the secant's slope is taken at its least), and,
/// with `monotone` (`f(t) = t + c(t)`, `c` non-increasing), `t_i + c(t_{i+1})`.
fn convex_lower_bound(points: &mut [(f64, f64, f64)], monotone: bool) -> f64 {
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let points = &*points;
    let k = points.len();
    let mut bound = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
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
            return f64::NEG_INFINITY;
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
        let least = candidates
            .into_iter()
            .map(envelope)
            .fold(f64::INFINITY, f64::min);
        bound = bound.min(least);
    }
    bound
}

/// A stage candidate in the best-first search: its bound so far.
struct Candidate {
    bound: f64,
    participation: usize,
    combination: usize,
    searched: Option<Searched>,
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

/// Maximises the dual function over the prices until `deadline`, or until
/// the cutting-plane model promises less than `tolerance` (relative) more,
/// or until the bound reaches `good_enough` seconds.
pub fn bound(inst: &Instance, deadline: Instant, tolerance: f64, good_enough: f64) -> Bound {
    let priced = Priced::new(inst);
    let dims = priced.capacities.len();
    let r = &inst.resources;
    // A price above what any object could save per byte at a place buys
    // nothing: the box of the search.
    let most_saved = (0..dims)
        .map(|i| {
            let place = if i < r.gpus() {
                Place::Gpu(i)
            } else {
                Place::Ram(i - r.gpus())
            };
            inst.objects
                .iter()
                .enumerate()
                .filter(|&(o, object)| inst.allowed(o, place) && object.bytes_at(place) > 0)
                .map(|(o, object)| {
                    let worst = inst
                        .places
                        .iter()
                        .filter(|&&q| inst.allowed(o, q))
                        .map(|&q| r.work(object, q).iter().map(|w| w.1).sum::<f64>())
                        .fold(0.0, f64::max);
                    let sync = r.gpu_sync_seconds.iter().copied().fold(0.0, f64::max);
                    (worst + sync) / object.bytes_at(place) as f64
                })
                .fold(0.0, f64::max)
                * 2.0
        })
        .map(|p| p * BYTE_UNIT / TIME_UNIT)
        .collect::<Vec<f64>>();
    let scaled = |p: &[f64]| -> Vec<f64> { p.iter().map(|x| x * TIME_UNIT / BYTE_UNIT).collect() };
    let evaluate = |p: &[f64]| {
        let (value, g, fractional) = priced.evaluate(&scaled(p));
        (
            value / TIME_UNIT,
            g.iter().map(|x| x / BYTE_UNIT).collect::<Vec<f64>>(),
            fractional,
        )
    };
    let mut center = vec![0.0; dims];
    let (mut center_value, g, first) = evaluate(&center);
    let mut starts = vec![first];
    let mut best_start = 0;
    let mut cuts: Vec<(f64, Vec<f64>, Vec<f64>)> = vec![(center_value, g, center.clone())];
    let mut radius: Vec<f64> = most_saved.iter().map(|m| m / 16.0).collect();
    while Instant::now() < deadline && center_value * TIME_UNIT < good_enough && dims > 0 {
        let Some((next, predicted)) = master(&cuts, &center, &radius, &most_saved) else {
            break;
        };
        let active = (0..dims).any(|i| {
            let hi = (center[i] + radius[i]).min(most_saved[i]);
            let lo = (center[i] - radius[i]).max(0.0);
            let close = 1e-9 * most_saved[i].max(1e-12);
            (next[i] >= hi - close && hi < most_saved[i]) || (next[i] <= lo + close && lo > 0.0)
        });
        let promised = predicted - center_value;
        if promised <= tolerance * center_value.abs().max(1e-12) {
            if active {
                radius.iter_mut().for_each(|x| *x *= 2.0);
                continue;
            }
            break;
        }
        let (value, g, fractional) = evaluate(&next);
        cuts.push((value, g, next.clone()));
        starts.push(fractional);
        if value >= center_value + 0.1 * promised {
            center = next;
            center_value = value;
            best_start = starts.len() - 1;
            if active {
                radius.iter_mut().for_each(|x| *x *= 2.0);
            }
        } else {
            radius.iter_mut().for_each(|x| *x *= 0.5);
        }
    }
    // Stages switch between solutions at prices near the best: those
    // solutions are what the master below mixes.
    'nearby: for i in 0..dims {
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
    let best = starts.remove(best_start);
    starts.reverse();
    starts.insert(0, best);
    if let Some(mixed) = combine(&priced.capacities, &starts, deadline) {
        starts.insert(0, mixed);
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
    }
}

/// Each stage's solutions at the prices tried are columns of a
/// Dantzig-Wolfe master: convex weights per stage, least total seconds,
/// capacities kept. A single prices' solutions can pile every stage onto
/// one of two like places; the master mixes them. Returns per stage the
/// solution it weights most; `None` when no mix fits or the LP fails.
fn combine(capacities: &[f64], starts: &[Fractional], deadline: Instant) -> Option<Fractional> {
    let stages = starts.first()?.stages.len();
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    problem.set_time_limit(
        deadline
            .saturating_duration_since(Instant::now())
            .max(std::time::Duration::from_millis(50)),
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
    Some((
        prices.iter().map(|&p| solution.var_value(p)).collect(),
        solution.objective(),
    ))
}

#[cfg(test)]
mod tests {
    use super::convex_lower_bound;

    #[test]
    fn convex_lower_bound_is_below_the_minimum_and_close() {
        // f(t) = t + 1/t on [0.5, 2]: minimum 2 at t = 1 (by hand).
        let f = |t: f64| t + 1.0 / t;
        let mut points: Vec<(f64, f64, f64)> = [0.5, 0.8, 0.95, 1.02, 1.3, 2.0]
            .iter()
            .map(|&t| (t, f(t), f(t)))
            .collect();
        let bound = convex_lower_bound(&mut points, false);
        assert!(bound <= 2.0, "{bound}");
        // The points around the minimum are 0.07 apart: the bound is within
        // a few hundredths of it.
        assert!(bound >= 1.95, "{bound}");
    }
}

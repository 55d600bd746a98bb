//! Arms on one evaluation stream: a policy, an allocation and a byte budget,
//! run with what was learned on training data (request counts per object).
//! Every arm of a [`Simulator`] starts from the same state (paired arms):
//! cold, or seeded with the same residents.
//!
//! Per-layer caches are independent, so a per-layer replay is remembered by
//! (policy, layer, capacity) and reused by every arm and every miss-cost
//! scaling that gives that layer the same capacity; this is what makes the
//! gate's 2 x layers sensitivity reruns cheap. Felt wait is always counted
//! with the base miss costs and scaled per layer afterwards. The dynamic
//! allocation water-fills on each policy's own curves: LRU's from one
//! stack-distance pass, the others' from a replay at every capacity.

use super::allocation::Allocation;
use super::replay::{replay_kind, replay_online, FeltCosts, ReplayStats};
use super::stack::lru_misses_per_slot;
use super::stream::Stream;
use super::SimError;
use rayon::prelude::*;
use residency_policy::budget::{floor_slots, uniform_slots, water_fill_above, LayerCurve};
use residency_policy::online::{LayerShape, OnlineAllocator, OnlineParams};
use residency_policy::{
    build, knapsack, Knowledge, ObjectIndex, PolicyKind, PolicyParams, PolicySetup,
};
use std::collections::HashMap;
use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arm {
    pub policy: PolicyKind,
    pub allocation: Allocation,
    pub budget_bytes: u64,
}

/// The common start of paired arms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Cold,
    /// Every arm starts with the residents of the training knapsack.
    Seeded,
}

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub params: PolicyParams,
    pub start: Start,
    /// Share of a cache that `pinned-lru` pins (the hottest by training).
    pub pin_fraction: f64,
    /// Residents of `plan` taken from a plan file (global allocation only);
    /// `None`: the training knapsack.
    pub plan_residents: Option<Vec<ObjectIndex>>,
    /// The `online` allocation's allocator.
    pub online: OnlineParams,
    /// Seconds to compute a hit of each object, which hide as much of its
    /// group's reads (`replay::FeltCosts`); empty: every miss felt in full.
    pub hit_compute_seconds: Vec<f64>,
    /// Reads the drive serves at once (`replay::FeltCosts`).
    pub reads_at_once: u32,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            params: PolicyParams::default(),
            start: Start::Cold,
            pin_fraction: 0.5,
            plan_residents: None,
            online: OnlineParams::default(),
            hit_compute_seconds: Vec::new(),
            reads_at_once: 1,
        }
    }
}

/// One arm's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub arm: Arm,
    pub stats: ReplayStats,
    /// Bytes of each layer's cache (empty for a global cache).
    pub capacities_bytes: Vec<u64>,
    /// Felt wait under the miss-cost scaling the arm ran with.
    pub felt_wait_seconds: f64,
    /// Tokens of the evaluation stream (for per-token churn).
    pub tokens: u64,
}

pub struct Simulator {
    eval: Stream,
    train_counts: Vec<u64>,
    miss_seconds: Vec<f64>,
    options: SimOptions,
    /// Each layer's requests as a stream of its own, when there are several
    /// layers; empty for one, which `eval` serves (see `layer_streams`).
    layer_streams: Vec<Stream>,
    /// Misses per slot count per layer, by policy (see `curves`).
    curves: HashMap<PolicyKind, Vec<Vec<u64>>>,
    memo: HashMap<MemoKey, ReplayStats>,
    /// Online runs by (policy, budget, miss-cost scaling): their layers
    /// depend on each other, so they are remembered whole.
    online_memo: HashMap<(PolicyKind, u64, u64), (ReplayStats, Vec<u64>)>,
}

const GLOBAL: usize = usize::MAX;

/// (policy, layer or GLOBAL, capacity, miss-cost scaling when it matters).
type MemoKey = (PolicyKind, usize, u64, u64);

impl Simulator {
    /// `train_counts[o]`: requests for `o` in the training data (the
    /// evaluation stream's own counts for an in-sample run);
    /// `miss_seconds[o]`: felt seconds of one miss of `o`.
    pub fn new(
        eval: Stream,
        train_counts: Vec<u64>,
        miss_seconds: Vec<f64>,
        options: SimOptions,
    ) -> Simulator {
        debug_assert_eq!(train_counts.len(), eval.objects());
        debug_assert_eq!(miss_seconds.len(), eval.objects());
        debug_assert!([0, eval.objects()].contains(&options.hit_compute_seconds.len()));
        Simulator {
            train_counts,
            miss_seconds,
            options,
            layer_streams: if eval.layers() > 1 {
                eval.split_layers()
            } else {
                Vec::new()
            },
            curves: HashMap::new(),
            memo: HashMap::new(),
            online_memo: HashMap::new(),
            eval,
        }
    }

    pub fn stream(&self) -> &Stream {
        &self.eval
    }

    /// The per-layer streams; a one-layer stream (every generic trace) is
    /// its own only layer rather than a copy of all its requests.
    fn layer_streams(&self) -> &[Stream] {
        if self.layer_streams.is_empty() {
            std::slice::from_ref(&self.eval)
        } else {
            &self.layer_streams
        }
    }

    /// Runs one arm with layer `l`'s miss cost scaled by `scale[l]`.
    pub fn run(&mut self, arm: Arm, scale: &[f64]) -> Result<Run, SimError> {
        let layers = self.eval.layers();
        if arm.allocation != Allocation::Global
            && self.options.plan_residents.is_some()
            && arm.policy == PolicyKind::Plan
        {
            return Err(SimError::Invalid(
                "a plan file fixes its own residents per layer; simulate it with --allocation global".into(),
            ));
        }
        let (stats, capacities_bytes) = match arm.allocation {
            Allocation::Global => {
                let all = 0..self.eval.objects();
                (
                    self.replay_part(arm.policy, GLOBAL, all, arm.budget_bytes, scale)?,
                    Vec::new(),
                )
            }
            Allocation::Online => self.run_online(arm, scale)?,
            Allocation::Uniform | Allocation::Dynamic => {
                let capacities =
                    self.layer_capacities(arm.policy, arm.allocation, arm.budget_bytes, scale)?;
                let mut total = ReplayStats::default();
                for (l, &c) in capacities.iter().enumerate() {
                    let part =
                        self.replay_part(arm.policy, l, self.eval.layer_objects(l), c, scale)?;
                    total.add(&part);
                }
                total.misses_by_layer.resize(layers, 0);
                total.felt_wait_seconds_by_layer.resize(layers, 0.0);
                (total, capacities)
            }
        };
        Ok(Run {
            arm,
            felt_wait_seconds: stats.felt_wait_scaled(scale),
            stats,
            capacities_bytes,
            tokens: self.eval.tokens,
        })
    }

    /// One cache per layer whose budgets the online allocator moves while
    /// the stream is replayed (`crate::online`); the capacities at the end.
    fn run_online(&mut self, arm: Arm, scale: &[f64]) -> Result<(ReplayStats, Vec<u64>), SimError> {
        let key = (arm.policy, arm.budget_bytes, scale_key(scale));
        if let Some(done) = self.online_memo.get(&key) {
            return Ok(done.clone());
        }
        if !arm.policy.resizes() {
            return Err(SimError::Invalid(format!(
                "policy `{}` cannot change its capacity while serving; the online allocation runs {} inside each layer",
                arm.policy,
                PolicyKind::resizing_names()
            )));
        }
        let layers = self.eval.layers();
        let leased = self.eval.leased_at_once();
        let shapes: Vec<LayerShape> = (0..layers)
            .map(|l| LayerShape {
                slot_bytes: self.slot_bytes(l),
                experts: self.eval.layer_objects(l).len(),
                miss_seconds: self.miss_seconds[self.eval.layer_objects(l).start] * scale[l],
                leased_at_once: leased[l],
            })
            .collect();
        let mut allocator =
            OnlineAllocator::new(self.options.online.clone(), shapes, arm.budget_bytes)?;
        let capacities = allocator.capacities_bytes();
        let mut policies = Vec::with_capacity(layers);
        let mut seeds = Vec::with_capacity(layers);
        for (l, &capacity_bytes) in capacities.iter().enumerate() {
            let range = self.eval.layer_objects(l);
            let setup = PolicySetup {
                capacity_bytes,
                objects: range.len(),
                knowledge: Knowledge::default(),
                params: self.options.params.clone(),
            };
            policies.push(build(arm.policy, &setup)?);
            seeds.push(match self.options.start {
                Start::Cold => Vec::new(),
                Start::Seeded => self.by_value(range, capacity_bytes, scale),
            });
        }
        let run = replay_online(
            &mut policies,
            &self.eval,
            &seeds,
            FeltCosts {
                miss_seconds: &self.miss_seconds,
                hit_compute_seconds: &self.options.hit_compute_seconds,
                reads_at_once: self.options.reads_at_once,
            },
            &mut allocator,
            &mut |_| {},
        );
        let done = (run.stats, run.capacities_bytes);
        self.online_memo.insert(key, done.clone());
        Ok(done)
    }

    /// Bytes per layer: `budget / layers` in whole slots, or water-filled
    /// on `policy`'s own curves with the scaled miss costs.
    pub fn layer_capacities(
        &mut self,
        policy: PolicyKind,
        allocation: Allocation,
        budget_bytes: u64,
        scale: &[f64],
    ) -> Result<Vec<u64>, SimError> {
        let layers = self.eval.layers();
        let slot_bytes: Vec<u64> = (0..layers).map(|l| self.slot_bytes(l)).collect();
        if allocation == Allocation::Uniform {
            return Ok(uniform_slots(&slot_bytes, budget_bytes)
                .into_iter()
                .zip(slot_bytes)
                .map(|(k, b)| k as u64 * b)
                .collect());
        }
        let curves: Vec<LayerCurve> = self
            .curves(policy)?
            .into_iter()
            .enumerate()
            .map(|(l, misses)| LayerCurve {
                slot_bytes: self.slot_bytes(l),
                misses,
                miss_seconds: self.miss_seconds[self.eval.layer_objects(l).start] * scale[l],
            })
            .collect();
        let floors = floor_slots(&self.eval.leased_at_once(), &slot_bytes, budget_bytes);
        Ok(water_fill_above(&curves, &floors, budget_bytes)
            .into_iter()
            .zip(&curves)
            .map(|(k, c)| k as u64 * c.slot_bytes)
            .collect())
    }

    /// Replays the objects `range` (one layer, or all for `GLOBAL`) with a
    /// cache of `capacity_bytes`; results are remembered.
    fn replay_part(
        &mut self,
        policy: PolicyKind,
        layer: usize,
        range: Range<usize>,
        capacity_bytes: u64,
        scale: &[f64],
    ) -> Result<ReplayStats, SimError> {
        let key = self.memo_key(policy, layer, capacity_bytes, scale);
        if let Some(stats) = self.memo.get(&key) {
            return Ok(stats.clone());
        }
        let stats = self.compute_part(policy, layer, range, capacity_bytes, scale)?;
        self.memo.insert(key, stats.clone());
        Ok(stats)
    }

    /// Replays of one policy only depend on the miss costs when it weighs
    /// them against each other: in a global cache, or with a move cost or
    /// hysteresis. Inside one layer every object has the same miss cost, so
    /// scaling it changes no comparison of `cost` or `plan` there.
    fn memo_key(
        &self,
        policy: PolicyKind,
        layer: usize,
        capacity_bytes: u64,
        scale: &[f64],
    ) -> MemoKey {
        let params = &self.options.params;
        let absolute = params.hysteresis != 0.0 || params.move_seconds_per_byte != 0.0;
        let scale_key = match (policy.uses_miss_costs(), layer) {
            (false, _) => 0,
            (true, GLOBAL) => scale_key(scale),
            (true, l) if absolute => scale[l].to_bits(),
            (true, _) => 0,
        };
        (policy, layer, capacity_bytes, scale_key)
    }

    /// One replay, not remembered (see `replay_part`).
    fn compute_part(
        &self,
        policy: PolicyKind,
        layer: usize,
        range: Range<usize>,
        capacity_bytes: u64,
        scale: &[f64],
    ) -> Result<ReplayStats, SimError> {
        let costs = FeltCosts {
            miss_seconds: &self.miss_seconds[range.clone()],
            // Empty (nothing hides a read) stays empty.
            hit_compute_seconds: self
                .options
                .hit_compute_seconds
                .get(range.clone())
                .unwrap_or(&[]),
            reads_at_once: self.options.reads_at_once,
        };
        let (prior_rate, scaled) = self.priors(range.clone(), scale);
        let sizes = &self.eval.sizes_bytes[range.clone()];
        let by_value = |budget: u64| knapsack(sizes, &prior_rate, &scaled, budget);
        let pinned = match policy {
            PolicyKind::Plan => match &self.options.plan_residents {
                Some(residents) => {
                    let bytes: u64 = residents
                        .iter()
                        .map(|&o| self.eval.sizes_bytes[o as usize])
                        .sum();
                    if bytes > capacity_bytes {
                        return Err(SimError::Invalid(format!(
                            "the plan keeps {bytes} bytes of experts in memory, more than the budget of {capacity_bytes} bytes; simulate it with a budget of at least {bytes} bytes"
                        )));
                    }
                    residents.clone()
                }
                None => by_value(capacity_bytes),
            },
            PolicyKind::PinnedLru => {
                by_value((capacity_bytes as f64 * self.options.pin_fraction) as u64)
            }
            _ => Vec::new(),
        };
        let seeds = match self.options.start {
            Start::Cold => Vec::new(),
            Start::Seeded => by_value(capacity_bytes),
        };
        let setup = PolicySetup {
            capacity_bytes,
            objects: range.len(),
            knowledge: Knowledge {
                hit_seconds: vec![0.0; range.len()],
                miss_seconds: scaled,
                prior_rate,
                pinned,
                sizes_bytes: sizes.to_vec(),
            },
            params: self.options.params.clone(),
        };
        let stats = if layer == GLOBAL {
            replay_kind(policy, &setup, &self.eval, &seeds, costs)?
        } else {
            let stream = &self.layer_streams()[layer];
            let mut stats = replay_kind(policy, &setup, stream, &seeds, costs)?;
            // The layer stream is layer 0 of its own; put it at `layer`.
            let (misses, felt) = (
                stats.misses_by_layer[0],
                stats.felt_wait_seconds_by_layer[0],
            );
            stats.misses_by_layer = vec![0; layer + 1];
            stats.felt_wait_seconds_by_layer = vec![0.0; layer + 1];
            stats.misses_by_layer[layer] = misses;
            stats.felt_wait_seconds_by_layer[layer] = felt;
            stats
        };
        Ok(stats)
    }

    /// The training rates of the objects `range` (as shares of their
    /// requests) and their scaled miss costs: what the learning policies
    /// and the seeds are built from.
    fn priors(&self, range: Range<usize>, scale: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let counts = &self.train_counts[range.clone()];
        let total: u64 = counts.iter().sum();
        let prior_rate = counts
            .iter()
            .map(|&c| {
                if total == 0 {
                    0.0
                } else {
                    c as f64 / total as f64
                }
            })
            .collect();
        let scaled = range
            .map(|o| self.miss_seconds[o] * scale[self.eval.layer_of[o] as usize])
            .collect();
        (prior_rate, scaled)
    }

    /// The training knapsack of `capacity_bytes` over the objects `range`
    /// (local indices): the seeds of a seeded start.
    fn by_value(
        &self,
        range: Range<usize>,
        capacity_bytes: u64,
        scale: &[f64],
    ) -> Vec<ObjectIndex> {
        let (prior_rate, scaled) = self.priors(range.clone(), scale);
        knapsack(
            &self.eval.sizes_bytes[range],
            &prior_rate,
            &scaled,
            capacity_bytes,
        )
    }

    /// Misses of `policy` at every whole number of slots in every layer:
    /// one stack-distance pass for LRU, replays (in parallel, and
    /// remembered for the arms that use them) for the others.
    fn curves(&mut self, policy: PolicyKind) -> Result<Vec<Vec<u64>>, SimError> {
        if let Some(c) = self.curves.get(&policy) {
            return Ok(c.clone());
        }
        let curves: Vec<Vec<u64>> = if policy == PolicyKind::Lru {
            self.layer_streams()
                .iter()
                .map(lru_misses_per_slot)
                .collect()
        } else {
            let ones = vec![1.0; self.eval.layers()];
            let points: Vec<(usize, u64)> = (0..self.eval.layers())
                .flat_map(|l| {
                    let slot = self.slot_bytes(l);
                    (0..=self.eval.layer_objects(l).len() as u64).map(move |k| (l, k * slot))
                })
                .collect();
            let stats: Vec<ReplayStats> = points
                .par_iter()
                .map(|&(l, c)| self.compute_part(policy, l, self.eval.layer_objects(l), c, &ones))
                .collect::<Result<_, _>>()?;
            let mut curves: Vec<Vec<u64>> = vec![Vec::new(); self.eval.layers()];
            for (&(l, c), stats) in points.iter().zip(stats) {
                curves[l].push(stats.misses);
                let key = self.memo_key(policy, l, c, &ones);
                self.memo.insert(key, stats);
            }
            curves
        };
        self.curves.insert(policy, curves.clone());
        Ok(curves)
    }

    /// Bytes of one expert of layer `l` (a cache slot).
    fn slot_bytes(&self, l: usize) -> u64 {
        self.eval
            .sizes_bytes
            .get(self.eval.layer_objects(l).start)
            .copied()
            .unwrap_or(1)
    }
}

/// A hash of a miss-cost scaling, for the memo keys.
fn scale_key(scale: &[f64]) -> u64 {
    scale
        .iter()
        .fold(0u64, |h, s| h.rotate_left(7) ^ s.to_bits())
}

#[cfg(test)]
mod tests;

//! `residency replay`: a real data path. Every token of a
//! routing trace asks, layer by layer, for its routed experts through the
//! store (misses read from the checkpoint with O_DIRECT, so the page cache
//! hides nothing), and a CPU matrix-vector product over each expert's bytes
//! puts compute on the critical path. Within a layer the misses load in
//! parallel while the experts already there are computed, as an engine
//! overlaps them; the compute thread's waits are the felt wait.
//!
//! Policies are arms run one after another on fresh stores, interleaved
//! over rounds (A B B A), each cold except for its planned pins, which are
//! loaded before the clock starts and reported as start-up (with `warm`,
//! everything the budget holds is). `replan` re-plans between tokens and
//! applies its moves on a background thread. The per-layer arms
//! (`uniform`, `dynamic-offline`, `dynamic`) give each MoE layer a place of
//! its own in one RAM tier of the budget; `dynamic` moves their capacities
//! between tokens with the simulator's online allocator. The outputs'
//! checksum depends only on the expert bytes and the routes, so it must be
//! identical for every placement policy.

use super::compute::{start_activation, ExpertKernel, LayerInput};
use super::gpu_tier::{GpuTier, Landed, Uploader, VramConfig};
use super::heat::{LiveHeat, DEFAULT_HALVE_EVERY_TOKENS};
use super::replan::{MoveLink, Moves, ReplanParams, Replanner};
use super::vram::{CardKnowledge, VramPolicy, VramResidency, CARD_HEAT_HALVE_EVERY_TOKENS};
use crate::apply::loader::{CheckpointLoader, RETAINED_BYTES};
use crate::checkpoint::Checkpoint;
use crate::gpu::DeviceBuffer;
use crate::identity::ObjectKey;
use crate::storage::{numa_nodes, open_backend, BackendKind, HostPool, StorageError};
use crate::store::{
    Homes, Lease, Loader, ObjectBytes, PlaceConfig, Store, StoreConfig, StoreError,
};
use residency_core::stats::upper_median;
use residency_formats::heat::TokenRoutes;
use residency_policy::budget::uniform_slots;
use residency_policy::knapsack;
use residency_policy::online::{LayerShape, OnlineAllocator, OnlineError, OnlineParams};
use residency_policy::{Knowledge, ObjectIndex, PolicyKind, PolicyParams};
use residency_sim::allocation::Allocation;
use residency_sim::arms::{Arm, SimOptions, Simulator};
use residency_sim::pin_share::PinShareRecommendation;
use residency_sim::stream::Stream;
use residency_sim::SimError;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

residency_core::named! {
    /// The policies `replay` runs, the simulator's own code.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ServePolicy("policy") {
        Lru = "lru",
        Lfru = "lfru",
        /// Frequency admission with the training heat as prior.
        Frequency = "frequency",
        /// Cost-aware admission with the training heat as prior.
        Cost = "cost",
        /// The training knapsack pinned, every other expert from a transient slot.
        Plan = "plan",
        /// Pins from the training knapsack in a share of the budget, re-planned
        /// from live heat while serving; LRU in the rest.
        Replan = "replan",
        /// No store: every expert read into memory before the clock starts and
        /// multiplied from there. The baseline of the executor's overhead when
        /// everything is resident.
        Resident = "resident",
        /// One cache per MoE layer, `budget / layers` bytes each, under the
        /// layer policy (`--layer-policy`, LRU by default).
        Uniform = "uniform",
        /// Per-layer caches water-filled once on the replayed tokens' own
        /// curves before serving (the simulator's offline `dynamic`: in
        /// hindsight, an oracle).
        DynamicOffline = "dynamic-offline",
        /// Per-layer caches whose budgets the online allocator moves while
        /// serving (`residency_policy::online`), from a uniform start.
        Dynamic = "dynamic",
    }
}

impl ServePolicy {
    /// The store's policy for the cached part of the budget (`resident`
    /// has no store); per-layer arms use `layer_policy`.
    fn cache_policy(self, layer_policy: PolicyKind) -> PolicyKind {
        match self {
            ServePolicy::Lru | ServePolicy::Replan | ServePolicy::Resident => PolicyKind::Lru,
            ServePolicy::Lfru => PolicyKind::Lfru,
            ServePolicy::Frequency => PolicyKind::Frequency,
            ServePolicy::Cost => PolicyKind::Cost,
            ServePolicy::Plan => PolicyKind::Plan,
            ServePolicy::Uniform | ServePolicy::DynamicOffline | ServePolicy::Dynamic => {
                layer_policy
            }
        }
    }

    /// Whether the arm has one cache per MoE layer rather than one for all.
    fn per_layer(self) -> bool {
        matches!(
            self,
            ServePolicy::Uniform | ServePolicy::DynamicOffline | ServePolicy::Dynamic
        )
    }
}

#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub policies: Vec<ServePolicy>,
    pub ram_budget_bytes: u64,
    /// `replan`: share of the budget for pins.
    pub pin_share: f64,
    pub replan: ReplanParams,
    /// Rounds of all arms, alternating their order (A B, B A, ...).
    pub rounds: usize,
    /// Felt seconds of one miss (the profile's drive), for the value of a
    /// pin and the cost policy.
    pub miss_seconds: f64,
    /// The compute thread's rate over an expert's bytes
    /// ([`ExpertKernel::bytes_per_s`]): the simulator's hits hide reads at it.
    pub hit_compute_bytes_per_s: f64,
    /// Reads the drive serves at once (the profile's `read_concurrency`).
    pub reads_at_once: u32,
    /// The link a re-planner's promotion comes over (what a move costs).
    pub move_link: MoveLink,
    pub backend: BackendKind,
    /// Load every expert the budget holds before the clock starts (in
    /// index order), so a full budget measures serving with nothing to read.
    pub warm: bool,
    /// Tokens served before the clock starts, through the store and live
    /// heat (not `resident`): the history the measured tokens follow.
    pub seed: Vec<TokenRoutes>,
    /// The policy inside each layer of the per-layer arms.
    pub layer_policy: PolicyKind,
    /// `dynamic`'s allocator.
    pub online: OnlineParams,
    /// A VRAM tier in front of every store arm: experts with a copy on
    /// the card are computed there.
    pub vram: Option<VramConfig>,
}

impl ReplayConfig {
    /// The simulator's rates as the profile has them: a miss's read, and
    /// the compute that hides reads.
    fn rates(&self) -> (f64, f64) {
        (self.miss_seconds, self.hit_compute_bytes_per_s)
    }
}

/// What `residency replay --json` writes
/// (`schemas/replay-output.schema.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ReplayReport {
    /// How `replan`'s pinned share was chosen; absent when no arm is
    /// `replan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_share: Option<PinShareChoice>,
    /// How the card's `lfru` window was chosen (`--vram-halve-every
    /// auto`); absent when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_window: Option<super::card_window::CardWindowChoice>,
    pub runs: Vec<ReplayRun>,
}

/// The share of the budget `replan` pins, and where it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PinShareChoice {
    /// Of the RAM budget, 0 to 1.
    pub share: f64,
    pub chosen_by: PinShareSource,
    /// `auto`: the training categories, each held out in turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out_categories: Vec<String>,
    /// Whether the replay's arms are seeded (`--seed-tokens`); `auto` then
    /// simulates its arms seeded too, from the training knapsack
    /// (`simulate --seeded`), else cold.
    pub seeded: bool,
    /// `auto`: the simulator's held-out felt wait of `pinned-lru` at every
    /// share tried, at this budget (global allocation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<PinShareRecommendation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PinShareSource {
    /// Given as a number (`--pin-share 0.5`).
    Flag,
    /// Recommended by held-out replays of the training categories
    /// (`sim::pin_share`, as `simulate --gate` recommends it).
    Auto,
}

/// One arm's run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ReplayRun {
    pub policy: String,
    /// The category replayed, when runs are per category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    pub round: usize,
    pub tokens: u64,
    pub seconds: f64,
    pub tok_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Seconds the compute thread waited for experts.
    pub felt_wait_seconds: f64,
    /// Over every layer of a token that missed, the seconds from starting
    /// its loads to the last one landing: its reads as the drive served
    /// them, together.
    pub miss_reads_seconds: f64,
    /// The compute thread's products over the run: bytes a second, as
    /// they ran beside the loads (0 where nothing was timed).
    pub compute_bytes_per_s: f64,
    pub read_service_seconds: f64,
    /// Bytes read while serving (start-up excluded).
    pub bytes_read: u64,
    pub startup_bytes: u64,
    pub startup_seconds: f64,
    pub hits: u64,
    pub misses: u64,
    /// Misses the policy declined (served from a transient slot).
    pub rejections: u64,
    /// Misses admitted but served from a transient slot because their
    /// place was full of leased objects (store telemetry `bypasses`).
    pub bypasses: u64,
    pub evictions: u64,
    pub migration_bytes: u64,
    /// Experts computed on the card (the VRAM tier; 0 without one).
    pub gpu_experts: u64,
    /// Sum of the magnitudes of every layer's activation: equal to
    /// rounding where the card computed some experts, whose sums run in
    /// another order than the CPU's.
    pub output_sum: f64,
    pub output_checksum: String,
    /// The simulator's misses and felt wait for this arm on the same
    /// tokens and budget (`predicted`), where it has the arm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated: Option<Simulated>,
}

/// What `residency simulate`'s code predicts for an arm: the same tokens
/// through the same policy, allocation and budget, each miss priced at
/// the replay's miss cost (`ReplayConfig::miss_seconds`), less in each
/// layer of a token what its hits' compute hides
/// (`ReplayConfig::hit_compute_bytes_per_s`), as `layer` overlaps them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Simulated {
    pub misses: u64,
    pub felt_wait_seconds: f64,
    /// The same with each miss read in the seconds the run's reads took a
    /// miss (the median over rounds of `miss_reads_seconds / misses`): the
    /// model without the profile's drive rate.
    pub felt_wait_seconds_at_run_reads: f64,
    /// The same with the hits computed at the run's own rate too (the
    /// median over rounds of `compute_bytes_per_s`): the model without
    /// either of the profile's rates.
    pub felt_wait_seconds_at_run_rates: f64,
    /// Experts the simulated VRAM tier computed (0 without one).
    pub gpu_experts: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the trace routes {trace} MoE layers of {trace_experts} experts; the checkpoint has {checkpoint} of {checkpoint_experts}; cut the trace with --layers or generate the checkpoint with that model and --layers")]
    Geometry {
        trace: usize,
        trace_experts: usize,
        checkpoint: usize,
        checkpoint_experts: usize,
    },
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Online(#[from] OnlineError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("--layer-policy {0}: per-layer budgets that move need {resizing} inside each layer", resizing = PolicyKind::resizing_names())]
    LayerPolicy(PolicyKind),
    #[error("the VRAM tier: {0}")]
    Gpu(String),
}

/// The objects a replay serves: every routed expert, numbered
/// `l * experts + e` for MoE ordinal `l`.
fn expert_keys(checkpoint: &Checkpoint) -> Vec<ObjectKey> {
    let experts = checkpoint.config.experts as u32;
    checkpoint
        .config
        .moe_layers()
        .into_iter()
        .flat_map(|layer| {
            (0..experts).map(move |expert| ObjectKey::Expert {
                layer: layer as u32,
                expert,
            })
        })
        .collect()
}

/// Each served object's bytes, in [`expert_keys`] order.
pub(super) fn expert_sizes(checkpoint: &Checkpoint) -> Vec<u64> {
    expert_keys(checkpoint)
        .iter()
        .map(|k| checkpoint.object_bytes(k))
        .collect()
}

/// How the replay multiplies `checkpoint`'s experts (its store's objects,
/// [`expert_keys`] order).
pub fn expert_kernel(checkpoint: &Checkpoint) -> ExpertKernel {
    ExpertKernel::of(checkpoint, &expert_keys(checkpoint))
}

/// That `tokens` route every MoE layer of the checkpoint, and only experts
/// it has: what serving them, or counting them per `(layer, expert)`, needs.
pub fn check_geometry<'a>(
    checkpoint: &Checkpoint,
    tokens: impl Iterator<Item = &'a TokenRoutes> + Clone,
) -> Result<(), ReplayError> {
    let layers = checkpoint.config.moe_layers().len();
    let experts = checkpoint.config.experts;
    let trace_layers = tokens.clone().next().map_or(0, |t| t.routes.len());
    let widest = tokens
        .clone()
        .flat_map(|t| t.routes.iter().flatten())
        .max()
        .map_or(0, |&e| e as usize + 1);
    let ragged = tokens.clone().any(|t| t.routes.len() != trace_layers);
    if trace_layers != layers || ragged || widest > experts {
        return Err(ReplayError::Geometry {
            trace: trace_layers,
            trace_experts: widest,
            checkpoint: layers,
            checkpoint_experts: experts,
        });
    }
    Ok(())
}

/// The simulator's view of a replay: the tokens as they reach the RAM
/// tier (with a VRAM tier: less the experts the simulated card computes),
/// and each arm's predicted misses and felt wait where it has the arm.
struct Predicted<'t> {
    seed: Cow<'t, [TokenRoutes]>,
    tokens: Cow<'t, [TokenRoutes]>,
    /// Experts of the tokens the simulated card computed.
    on_card: u64,
    sizes: Vec<u64>,
    experts: usize,
    /// Per arm of `config.policies`: its allocation, misses and felt wait.
    arms: Vec<Option<(Allocation, (u64, f64))>>,
}

impl<'t> Predicted<'t> {
    /// Checks the replay's geometry and flags, then simulates every arm
    /// that has a prediction on `tokens` after `config.seed`.
    fn of(
        checkpoint: &Checkpoint,
        tokens: &'t [TokenRoutes],
        train_counts: &[u64],
        config: &'t ReplayConfig,
    ) -> Result<Predicted<'t>, ReplayError> {
        check_geometry(checkpoint, tokens.iter().chain(&config.seed))?;
        let moving = config.policies.contains(&ServePolicy::Dynamic);
        if moving && !config.layer_policy.resizes() {
            return Err(ReplayError::LayerPolicy(config.layer_policy));
        }
        config.online.check()?;
        let sizes = expert_sizes(checkpoint);
        let experts = checkpoint.config.experts;
        // With a VRAM tier the simulator sees what reaches the RAM tier:
        // the tokens (and the seed) less the experts the card computes.
        let simulated = config
            .policies
            .iter()
            .any(|&p| simulated_allocation(config, p).is_some());
        let (seed, sim_tokens, on_card) = match &config.vram {
            Some(vram) if simulated => {
                let layers = layer_shapes(config, &sizes, experts, tokens);
                let served = (&config.seed[..], tokens);
                let knowledge = card_knowledge(config, vram, &sizes, train_counts, served, experts);
                let card = simulated_card(vram, &sizes, layers, &knowledge, served, experts)?;
                (Cow::Owned(card.seed), Cow::Owned(card.tokens), card.on_card)
            }
            _ => (Cow::Borrowed(&config.seed[..]), Cow::Borrowed(tokens), 0),
        };
        let mut predicted = Predicted {
            seed,
            tokens: sim_tokens,
            on_card,
            sizes,
            experts,
            arms: Vec::with_capacity(config.policies.len()),
        };
        // One simulator for every arm (its per-layer curves are shared),
        // made only when an arm has a prediction.
        let mut sim = None;
        for &policy in &config.policies {
            let arm = match simulated_allocation(config, policy) {
                None => None,
                Some(allocation) => {
                    let sim = sim.get_or_insert_with(|| {
                        predicted.simulator(config, config.rates(), train_counts)
                    });
                    Some((allocation, sim.arm(config, policy, allocation)?))
                }
            };
            predicted.arms.push(arm);
        }
        Ok(predicted)
    }

    /// The simulator of the RAM tier's tokens at `rates`.
    fn simulator(
        &self,
        config: &ReplayConfig,
        rates: (f64, f64),
        train_counts: &[u64],
    ) -> RunSimulator {
        let tokens = (&self.seed[..], &self.tokens[..]);
        RunSimulator::new(
            config,
            rates,
            &self.sizes,
            tokens,
            train_counts,
            self.experts,
        )
    }
}

/// What the simulator predicts for every arm of `config` on `tokens`,
/// serving nothing: `replay --predict-only`. Arms it does not have
/// (`replan`'s RAM tier, `resident`, warm runs) are left out.
pub fn predict(
    checkpoint: &Checkpoint,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<(ServePolicy, Simulated)>, ReplayError> {
    let predicted = Predicted::of(checkpoint, tokens, train_counts, config)?;
    Ok(config
        .policies
        .iter()
        .zip(&predicted.arms)
        .filter_map(|(&policy, arm)| {
            let (_, (misses, felt_wait_seconds)) = (*arm)?;
            Some((
                policy,
                Simulated {
                    misses,
                    felt_wait_seconds,
                    felt_wait_seconds_at_run_reads: felt_wait_seconds,
                    felt_wait_seconds_at_run_rates: felt_wait_seconds,
                    gpu_experts: predicted.on_card,
                },
            ))
        })
        .collect())
}

/// Replays `tokens` through every arm of `config`. `train_counts[o]`:
/// requests for expert `o` in the training data (the evaluated tokens
/// themselves for an in-sample run).
pub fn replay(
    checkpoint: &Checkpoint,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<ReplayRun>, ReplayError> {
    let predicted = Predicted::of(checkpoint, tokens, train_counts, config)?;
    // One layout of the experts' projections for every arm and round.
    let kernel = expert_kernel(checkpoint);
    let mut runs = Vec::new();
    let mut arm_of_run = Vec::new();
    for round in 0..config.rounds.max(1) {
        let mut order: Vec<usize> = (0..config.policies.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let policy = config.policies[i];
            runs.push(run_arm(
                checkpoint,
                &kernel,
                tokens,
                train_counts,
                config,
                policy,
                round,
            )?);
            arm_of_run.push(i);
        }
    }
    for (i, &policy) in config.policies.iter().enumerate() {
        let Some((allocation, (misses, felt_wait_seconds))) = predicted.arms[i] else {
            continue;
        };
        let of_arm = || runs.iter().zip(&arm_of_run).filter(|(_, &a)| a == i);
        let per_miss: Vec<f64> = of_arm()
            .filter(|(r, _)| r.misses > 0)
            .map(|(r, _)| r.miss_reads_seconds / r.misses as f64)
            .collect();
        let compute_rate: Vec<f64> = of_arm()
            .filter(|(r, _)| r.compute_bytes_per_s > 0.0)
            .map(|(r, _)| r.compute_bytes_per_s)
            .collect();
        let at_run = |read_seconds: f64, compute_bytes_per_s: f64| {
            predicted
                .simulator(config, (read_seconds, compute_bytes_per_s), train_counts)
                .arm(config, policy, allocation)
                .map(|(_, felt)| felt)
        };
        let (at_run_reads, at_run_rates) = match upper_median(&per_miss) {
            Some(read_seconds) => (
                at_run(read_seconds, config.hit_compute_bytes_per_s)?,
                match upper_median(&compute_rate) {
                    Some(rate) => at_run(read_seconds, rate)?,
                    None => felt_wait_seconds,
                },
            ),
            None => (felt_wait_seconds, felt_wait_seconds),
        };
        let simulated = Simulated {
            misses,
            felt_wait_seconds,
            felt_wait_seconds_at_run_reads: at_run_reads,
            felt_wait_seconds_at_run_rates: at_run_rates,
            gpu_experts: predicted.on_card,
        };
        for (run, _) in runs.iter_mut().zip(&arm_of_run).filter(|(_, &a)| a == i) {
            run.simulated = Some(simulated.clone());
        }
    }
    Ok(runs)
}

/// The simulator's allocation for `policy`'s arm, where it has the arm:
/// `lru`, `lfru`, `frequency`, `cost` and `plan` as one global cache, the
/// per-layer arms as their allocation (`uniform`, offline `dynamic`,
/// `online`) under the layer policy. None for `replan`, which re-plans
/// from live heat while serving (the simulator's pins are static), for
/// `resident` (no store), for `warm` runs (every expert loaded first),
/// and for offline `dynamic` after seed tokens (the run water-fills on
/// the replayed tokens alone, the simulator would on the seed too). A
/// seeded arm is simulated after its seed tokens ([`RunSimulator`]); with
/// a VRAM tier, on what reaches the RAM tier ([`simulated_card`]).
fn simulated_allocation(config: &ReplayConfig, policy: ServePolicy) -> Option<Allocation> {
    let seeded = !config.seed.is_empty();
    match policy {
        ServePolicy::Replan | ServePolicy::Resident => None,
        _ if config.warm => None,
        ServePolicy::DynamicOffline if seeded => None,
        ServePolicy::Uniform => Some(Allocation::Uniform),
        ServePolicy::DynamicOffline => Some(Allocation::Dynamic),
        ServePolicy::Dynamic => Some(Allocation::Online),
        _ => Some(Allocation::Global),
    }
}

/// The simulator's misses and felt wait for `policy`'s arm under
/// `allocation`, on `sim`'s tokens at the replay's budget.
fn simulate_arm(
    sim: &mut Simulator,
    config: &ReplayConfig,
    policy: ServePolicy,
    allocation: Allocation,
) -> Result<(u64, f64), ReplayError> {
    let layers = sim.stream().layers();
    let run = sim.run(
        Arm {
            policy: policy.cache_policy(config.layer_policy),
            allocation,
            budget_bytes: config.ram_budget_bytes,
        },
        &vec![1.0; layers],
    )?;
    Ok((run.stats.misses, run.felt_wait_seconds))
}

/// The simulator of a run's tokens started as the run starts: cold, or
/// after its seed tokens. A seeded arm's misses and felt wait are those of
/// the seed and the tokens less those of the seed alone: a policy's state
/// after the seed is the same in both replays, and both sums add up token
/// by token.
struct RunSimulator {
    seed_and_tokens: Simulator,
    seed: Option<Simulator>,
}

impl RunSimulator {
    fn new(
        config: &ReplayConfig,
        rates: (f64, f64),
        sizes: &[u64],
        (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
        train_counts: &[u64],
        experts: usize,
    ) -> RunSimulator {
        let counts = Some(train_counts);
        let sim = |tokens| simulator(config, rates, sizes, tokens, counts, experts);
        RunSimulator {
            seed_and_tokens: sim(seed.iter().chain(tokens)),
            seed: (!seed.is_empty()).then(|| sim(seed.iter().chain(&[]))),
        }
    }

    /// `policy`'s misses and felt wait on the tokens, under `allocation`.
    fn arm(
        &mut self,
        config: &ReplayConfig,
        policy: ServePolicy,
        allocation: Allocation,
    ) -> Result<(u64, f64), ReplayError> {
        let (misses, felt) = simulate_arm(&mut self.seed_and_tokens, config, policy, allocation)?;
        let Some(seed) = self.seed.as_mut() else {
            return Ok((misses, felt));
        };
        let (seed_misses, seed_felt) = simulate_arm(seed, config, policy, allocation)?;
        Ok((misses - seed_misses, felt - seed_felt))
    }
}

/// A simulator of `tokens` over the checkpoint's experts (`sizes`, every
/// layer's `experts` in turn), each miss read in `miss_seconds`, each hit
/// computed at `compute_bytes_per_s`, `online` as the replay's;
/// `train_counts` is its learning policies' prior, `None` the tokens' own
/// counts (in hindsight).
fn simulator<'t>(
    config: &ReplayConfig,
    (miss_seconds, compute_bytes_per_s): (f64, f64),
    sizes: &[u64],
    tokens: impl IntoIterator<Item = &'t TokenRoutes>,
    train_counts: Option<&[u64]>,
    experts: usize,
) -> Simulator {
    let layers = sizes.len() / experts;
    let slot_bytes: Vec<u64> = (0..layers).map(|l| sizes[l * experts]).collect();
    let stream = Stream::from_tokens(tokens, &vec![experts; layers], &slot_bytes);
    let options = SimOptions {
        online: config.online.clone(),
        hit_compute_seconds: sizes
            .iter()
            .map(|&b| b as f64 / compute_bytes_per_s)
            .collect(),
        reads_at_once: config.reads_at_once,
        ..SimOptions::default()
    };
    let counts = train_counts.map_or_else(|| stream.counts(), <[u64]>::to_vec);
    Simulator::new(stream, counts, vec![miss_seconds; sizes.len()], options)
}

fn run_arm(
    checkpoint: &Checkpoint,
    kernel: &ExpertKernel,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
    policy: ServePolicy,
    round: usize,
) -> Result<ReplayRun, ReplayError> {
    let keys = expert_keys(checkpoint);
    let n = keys.len();
    let experts = checkpoint.config.experts;
    let hidden = checkpoint.config.hidden;
    let pool = HostPool::new(numa_nodes().first().copied(), RETAINED_BYTES);
    let loader = Arc::new(
        CheckpointLoader::new(checkpoint, keys.clone(), open_backend(config.backend), &[])?
            .with_pools(vec![pool], vec![0; n]),
    );
    let sizes: Vec<u64> = keys.iter().map(|k| checkpoint.object_bytes(k)).collect();
    if policy == ServePolicy::Resident {
        let started = Instant::now();
        let (served, startup_seconds) =
            serve_resident(&loader, kernel, n, tokens, (experts, hidden), started)?;
        return Ok(ReplayRun {
            hits: tokens
                .iter()
                .flat_map(|t| &t.routes)
                .map(|r| r.len() as u64)
                .sum(),
            startup_bytes: sizes.iter().sum(),
            startup_seconds,
            ..served.run(policy, round)
        });
    }
    let arm = ArmStore::new(
        loader.clone(),
        &sizes,
        train_counts,
        config,
        policy,
        tokens,
        experts,
    )?;
    let mut heat = LiveHeat::new(
        &vec![experts; checkpoint.config.moe_layers().len()],
        DEFAULT_HALVE_EVERY_TOKENS,
    );
    let mut reallocator = (policy == ServePolicy::Dynamic)
        .then(|| Reallocator::new(config, &sizes, experts, tokens))
        .transpose()?;
    // The card launches only the served tokens' routes (seeding computes
    // nothing), so its output buffer holds their widest.
    let widest_route = tokens
        .iter()
        .flat_map(|t| &t.routes)
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    let mut tier = match &config.vram {
        Some(vram) => {
            let layers = layer_shapes(config, &sizes, experts, tokens);
            let served = (&config.seed[..], tokens);
            let knowledge = card_knowledge(config, vram, &sizes, train_counts, served, experts);
            let card = GpuTier::open(
                vram,
                kernel,
                sizes.clone(),
                layers,
                &knowledge,
                widest_route,
            );
            Some(card.map_err(ReplayError::Gpu)?)
        }
        None => None,
    };
    let started = Instant::now();
    let movers = (reallocator.as_mut(), tier.as_mut());
    arm.warm_and_seed(config, &loader, &mut heat, experts, movers)?;
    let startup_seconds = started.elapsed().as_secs_f64();
    let store = &arm.store;
    let startup = store.telemetry();
    let replanner = (policy == ServePolicy::Replan).then(|| {
        Replanner::new(
            config.replan.clone(),
            arm.share_bytes,
            sizes.clone(),
            arm.miss_seconds.clone(),
            config.move_link.clone(),
            &arm.pins,
        )
    });
    let movers = Movers {
        replanner,
        reallocator,
        tier,
    };
    let served = serve_replanning(store, kernel, tokens, (experts, hidden), &mut heat, movers)?;
    let end = store.telemetry();
    let hits =
        |t: &crate::store::telemetry::Telemetry| t.tier_hits.iter().map(|h| h.1).sum::<u64>();
    Ok(ReplayRun {
        read_service_seconds: end.read_service_seconds - startup.read_service_seconds,
        bytes_read: end.physical_bytes - startup.physical_bytes,
        startup_bytes: startup.physical_bytes,
        startup_seconds,
        hits: hits(&end) - hits(&startup),
        misses: end.physical_misses - startup.physical_misses,
        rejections: end.rejections - startup.rejections,
        bypasses: end.bypasses - startup.bypasses,
        evictions: end.evictions - startup.evictions,
        migration_bytes: end.migration_bytes,
        ..served.run(policy, round)
    })
}

/// The `resident` arm: every expert read into memory first, then served
/// with no store at all; also the startup seconds since `started`.
fn serve_resident(
    loader: &CheckpointLoader,
    kernel: &ExpertKernel,
    objects: usize,
    tokens: &[TokenRoutes],
    (experts, hidden): (usize, usize),
    started: Instant,
) -> Result<(Served, f64), ReplayError> {
    let bytes: Vec<Box<dyn ObjectBytes>> = (0..objects as ObjectIndex)
        .map(|o| {
            loader
                .load(o)
                .map_err(|reason| StoreError::Load { object: o, reason })
        })
        .collect::<Result<_, _>>()?;
    let startup_seconds = started.elapsed().as_secs_f64();
    let served = serve(
        tokens,
        experts,
        hidden,
        |objects, x| {
            let input = kernel.input(x);
            let outputs = objects
                .iter()
                .map(|&o| {
                    let host = bytes[o as usize].host().expect("read into memory");
                    kernel.compute(o as usize, host, &input)
                })
                .collect();
            Ok((outputs, LayerWaits::default()))
        },
        |_, _| Ok(()),
    )?;
    Ok((served, startup_seconds))
}

/// A store arm's store, with the pins its policy starts from.
struct ArmStore {
    store: Store,
    pins: Vec<ObjectIndex>,
    /// The budget's share the pins may take.
    share_bytes: u64,
    miss_seconds: Vec<f64>,
}

impl ArmStore {
    /// The store of the budget: one RAM place, its pins the training
    /// knapsack of the pinned share (`plan`: all of it; `replan`:
    /// --pin-share of it; others: none); or for the per-layer arms one
    /// place per MoE layer in a RAM tier of the budget, sized uniformly,
    /// water-filled on `tokens` (`dynamic-offline`) or as the online
    /// allocator starts (`dynamic`: uniformly).
    fn new(
        loader: Arc<CheckpointLoader>,
        sizes: &[u64],
        train_counts: &[u64],
        config: &ReplayConfig,
        policy: ServePolicy,
        tokens: &[TokenRoutes],
        experts: usize,
    ) -> Result<ArmStore, ReplayError> {
        let n = sizes.len();
        let total: u64 = train_counts.iter().sum::<u64>().max(1);
        let prior_rate: Vec<f64> = train_counts
            .iter()
            .map(|&c| c as f64 / total as f64)
            .collect();
        let miss_seconds = vec![config.miss_seconds; n];
        let budget = config.ram_budget_bytes;
        let share_bytes = match policy {
            ServePolicy::Plan => budget,
            ServePolicy::Replan => (budget as f64 * config.pin_share) as u64,
            _ => 0,
        };
        let pins: Vec<ObjectIndex> = if share_bytes > 0 {
            knapsack(sizes, &prior_rate, &miss_seconds, share_bytes)
        } else {
            Vec::new()
        };
        let mut pinned = vec![false; n];
        for &o in &pins {
            pinned[o as usize] = true;
        }
        let cache_policy = policy.cache_policy(config.layer_policy);
        let (places, place_of): (Vec<PlaceConfig>, Vec<usize>) = if policy.per_layer() {
            let capacities = layer_capacities(config, policy, sizes, tokens, experts)?;
            let places = capacities
                .iter()
                .enumerate()
                .map(|(l, &capacity_bytes)| PlaceConfig {
                    name: format!("ram:0/layer{l}"),
                    capacity_bytes,
                    tier: "ram".into(),
                    policy: cache_policy,
                    pin_share_bytes: Some(0),
                })
                .collect();
            (places, (0..n).map(|o| o / experts).collect())
        } else {
            let place = PlaceConfig {
                name: "ram:0".into(),
                capacity_bytes: budget,
                tier: "ram".into(),
                policy: cache_policy,
                pin_share_bytes: Some(share_bytes),
            };
            (vec![place], vec![0; n])
        };
        let store_config = StoreConfig {
            places,
            tier_capacity_bytes: vec![("ram".into(), budget)],
            staging_bytes: budget.max(sizes.iter().copied().max().unwrap_or(0) * 64),
            wait: Duration::from_secs(60),
            params: PolicyParams::default(),
            knowledge: Knowledge {
                miss_seconds: miss_seconds.clone(),
                hit_seconds: vec![0.0; n],
                prior_rate: prior_rate.clone(),
                ..Knowledge::default()
            },
        };
        let store = Store::new(
            loader,
            Homes {
                place: place_of,
                pinned,
            },
            &store_config,
        )?;
        Ok(ArmStore {
            store,
            pins,
            share_bytes,
            miss_seconds,
        })
    }

    /// Loads the pins (and with --warm every expert) and the card's
    /// start-up copies (read by `loader`, past the RAM tier), then serves
    /// the seed tokens untimed.
    fn warm_and_seed(
        &self,
        config: &ReplayConfig,
        loader: &CheckpointLoader,
        heat: &mut LiveHeat,
        experts: usize,
        (mut reallocator, mut card): (Option<&mut Reallocator>, Option<&mut GpuTier>),
    ) -> Result<(), ReplayError> {
        let store = &self.store;
        store.load_all(&self.pins, 8, &|_| {})?;
        if config.warm {
            let all: Vec<ObjectIndex> = (0..store.objects() as ObjectIndex).collect();
            store.load_all(&all, 8, &|_| {})?;
        }
        // Seeding serves the tokens that came before, untimed, so every arm
        // starts in the state its own policy would have reached (the paired
        // arms of design §6, seeded rather than cold). The card is seeded
        // as it serves: the RAM tier sees each token less the experts with
        // copies, and a token's uploads land before the next token is
        // served (as `simulated_card` has them); the last token's land
        // before the clock starts.
        let startup = card
            .as_deref_mut()
            .map(GpuTier::startup)
            .unwrap_or_default();
        let uploader = match &card {
            Some(_) if !config.seed.is_empty() || !startup.is_empty() => {
                Some(Uploader::open().map_err(ReplayError::Gpu)?)
            }
            _ => None,
        };
        if let (Some(card), Some(uploader)) = (card.as_deref_mut(), &uploader) {
            // A plan applied at load: its copies read from the checkpoint,
            // not through the RAM tier, whose state stays the arm's own.
            let landed = startup
                .into_iter()
                .map(|o| {
                    let bytes = loader
                        .load(o)
                        .map_err(|reason| StoreError::Load { object: o, reason })?;
                    let host = bytes.host().expect("replay keeps experts in host memory");
                    Ok((o, Some(uploader.upload(host).map_err(ReplayError::Gpu)?)))
                })
                .collect::<Result<Vec<Landed>, ReplayError>>()?;
            card.land(landed);
        }
        let mut uploads = Vec::new();
        for token in &config.seed {
            let ram_share = ram_share(token, experts, card.as_deref());
            for (l, route) in ram_share.routes.iter().enumerate() {
                heat.report_route(l, route)
                    .expect("routes were checked against the checkpoint");
                for &e in route {
                    drop(store.acquire(object_of(l, e, experts))?);
                }
            }
            if let Some(r) = reallocator.as_deref_mut() {
                r.after_token(store, &ram_share)?;
            }
            if let (Some(card), Some(uploader)) = (card.as_deref_mut(), &uploader) {
                let landed = copies_from_ram(store, uploader, uploads.drain(..))?;
                uploads = card.after_token(&routed_objects(token, experts), landed);
            }
        }
        if let (Some(card), Some(uploader)) = (card, &uploader) {
            card.land(copies_from_ram(store, uploader, uploads)?);
        }
        Ok(())
    }
}

/// Bytes of each layer's cache for a per-layer arm: `budget / layers`
/// (`uniform`; `dynamic`, where the online allocator starts), or the
/// simulator's offline water-filling on `tokens`' own curves
/// (`dynamic-offline`), the same code as `simulate --allocation dynamic`.
fn layer_capacities(
    config: &ReplayConfig,
    policy: ServePolicy,
    sizes: &[u64],
    tokens: &[TokenRoutes],
    experts: usize,
) -> Result<Vec<u64>, ReplayError> {
    let layers = sizes.len() / experts;
    let slot_bytes: Vec<u64> = (0..layers).map(|l| sizes[l * experts]).collect();
    if policy != ServePolicy::DynamicOffline {
        return Ok(uniform_slots(&slot_bytes, config.ram_budget_bytes)
            .into_iter()
            .zip(&slot_bytes)
            .map(|(k, &b)| k as u64 * b)
            .collect());
    }
    let mut sim = simulator(config, config.rates(), sizes, tokens, None, experts);
    sim.layer_capacities(
        config.layer_policy,
        Allocation::Dynamic,
        config.ram_budget_bytes,
        &vec![1.0; layers],
    )
    .map_err(ReplayError::from)
}

/// Each MoE layer as the online allocator sees it: `tokens`' widest route
/// in it (seed tokens included) is what it leases at once.
pub(super) fn layer_shapes(
    config: &ReplayConfig,
    sizes: &[u64],
    experts: usize,
    tokens: &[TokenRoutes],
) -> Vec<LayerShape> {
    (0..sizes.len() / experts)
        .map(|l| LayerShape {
            slot_bytes: sizes[l * experts],
            experts,
            miss_seconds: config.miss_seconds,
            leased_at_once: tokens
                .iter()
                .chain(&config.seed)
                .map(|t| t.routes[l].len())
                .max()
                .unwrap_or(0),
        })
        .collect()
}

/// `dynamic`'s online allocator and the tokens it has seen (the seed
/// tokens, then the served ones): after each token it records the routes
/// and, when a pass moves budgets, the store's places follow.
struct Reallocator {
    allocator: OnlineAllocator,
    tokens: u64,
}

impl Reallocator {
    /// `tokens`: the tokens to serve, whose widest route in each layer
    /// (seed tokens included) is what that layer leases at once.
    fn new(
        config: &ReplayConfig,
        sizes: &[u64],
        experts: usize,
        tokens: &[TokenRoutes],
    ) -> Result<Self, ReplayError> {
        Ok(Reallocator {
            allocator: OnlineAllocator::new(
                config.online.clone(),
                layer_shapes(config, sizes, experts, tokens),
                config.ram_budget_bytes,
            )?,
            tokens: 0,
        })
    }

    /// Between tokens, so that no lease is held and a shrink evicts at once.
    fn after_token(&mut self, store: &Store, token: &TokenRoutes) -> Result<(), StoreError> {
        for (l, route) in token.routes.iter().enumerate() {
            for &e in route {
                self.allocator.record(l, e);
            }
        }
        self.tokens += 1;
        if self.allocator.due(self.tokens) && self.allocator.pass(self.tokens).moved {
            store.set_capacities(&self.allocator.capacities_bytes())?;
        }
        Ok(())
    }
}

/// What moves while serving: `replan`'s pins, `dynamic`'s budgets, and
/// the VRAM tier's copies.
struct Movers<'k> {
    replanner: Option<Replanner>,
    reallocator: Option<Reallocator>,
    tier: Option<GpuTier<'k>>,
}

/// Serves the tokens from the store, reporting routes to `heat`, sending
/// the re-planner's moves to a repinning thread, moving the per-layer
/// budgets of `dynamic` between tokens, and with a VRAM tier computing the
/// experts it holds on the card while the CPU computes the rest, its
/// uploads on a thread of their own.
fn serve_replanning(
    store: &Store,
    kernel: &ExpertKernel,
    tokens: &[TokenRoutes],
    (experts, hidden): (usize, usize),
    heat: &mut LiveHeat,
    movers: Movers,
) -> Result<Served, ReplayError> {
    let Movers {
        mut replanner,
        mut reallocator,
        tier,
    } = movers;
    let with_tier = tier.is_some();
    let tier = RefCell::new(tier);
    // Repins run on a thread of their own, as an engine would run them: a
    // promotion's read overlaps serving instead of stalling a token.
    let (moves_sender, moves) = std::sync::mpsc::channel::<Moves>();
    let (upload_sender, uploads) = std::sync::mpsc::channel::<ObjectIndex>();
    let (landed_sender, landed) = std::sync::mpsc::channel();
    let serving = Instant::now();
    std::thread::scope(|scope| {
        let repinner = scope.spawn(|| {
            for m in moves {
                store.repin(&m.promote, &m.demote)?;
            }
            Ok::<_, StoreError>(())
        });
        // The card's copies come from the RAM tier's bytes, never from the
        // drive: an expert that left RAM is skipped (its read would
        // compete with the tokens' misses, and its lease would count as a
        // request of the RAM tier).
        let uploader = with_tier.then(|| {
            scope.spawn(move || {
                let card = Uploader::open().map_err(ReplayError::Gpu)?;
                for o in uploads {
                    let copy = copy_from_ram(store, &card, o)?;
                    if landed_sender.send((o, copy)).is_err() {
                        break;
                    }
                }
                Ok::<_, ReplayError>(())
            })
        });
        let served = serve(
            tokens,
            experts,
            hidden,
            |objects, x| {
                let input = kernel.input(x);
                let mut tier = tier.borrow_mut();
                let Some(card) = tier.as_mut() else {
                    return Ok(layer(store, kernel, objects, &input)?);
                };
                // The card's share goes out first, so both run at once.
                let launched = card.launch(objects, &input).map_err(ReplayError::Gpu)?;
                let on_cpu: Vec<usize> = (0..objects.len())
                    .filter(|&i| !card.holds(objects[i]))
                    .collect();
                let cpu_objects: Vec<ObjectIndex> = on_cpu.iter().map(|&i| objects[i]).collect();
                let (cpu_outputs, waits) = layer(store, kernel, &cpu_objects, &input)?;
                let mut outputs = vec![Vec::new(); objects.len()];
                for (&i, y) in on_cpu.iter().zip(cpu_outputs) {
                    outputs[i] = y;
                }
                card.finish(launched, &mut outputs)
                    .map_err(ReplayError::Gpu)?;
                Ok((outputs, waits))
            },
            |served_tokens, token| {
                // What reached the RAM tier: the token less the experts the
                // card computed (its copies change only below).
                let ram_share = ram_share(token, experts, tier.borrow().as_ref());
                for (l, route) in ram_share.routes.iter().enumerate() {
                    heat.report_route(l, route)
                        .expect("routes were checked against the checkpoint");
                }
                let seconds = serving.elapsed().as_secs_f64();
                if let Some(r) = replanner.as_mut().filter(|r| r.due(served_tokens, seconds)) {
                    let rates = heat.rates();
                    // A send fails only when the repinner stopped on an
                    // error, which its join reports.
                    let _ = moves_sender.send(r.pass(served_tokens, seconds, &rates));
                }
                if let Some(r) = reallocator.as_mut() {
                    r.after_token(store, &ram_share)?;
                }
                if let Some(card) = tier.borrow_mut().as_mut() {
                    let routed = routed_objects(token, experts);
                    for o in card.after_token(&routed, landed.try_iter()) {
                        // As the repinner's: a failed send is the
                        // uploader's error, which its join reports.
                        let _ = upload_sender.send(o);
                    }
                }
                Ok(())
            },
        );
        drop(moves_sender);
        drop(upload_sender);
        let repinned = repinner.join().expect("the repinner does not panic");
        let uploaded = uploader.map(|u| u.join().expect("the uploader does not panic"));
        let served = served?;
        repinned?;
        uploaded.transpose()?;
        let gpu_experts = tier.borrow().as_ref().map_or(0, |card| card.computed);
        Ok(Served {
            gpu_experts,
            ..served
        })
    })
}

/// The store's object of expert `e` of MoE layer `l`, in a checkpoint of
/// `experts` a layer.
fn object_of(l: usize, e: u32, experts: usize) -> ObjectIndex {
    (l * experts + e as usize) as ObjectIndex
}

/// Every expert `token` routes, as objects (layer by layer).
fn routed_objects(token: &TokenRoutes, experts: usize) -> Vec<ObjectIndex> {
    token
        .routes
        .iter()
        .enumerate()
        .flat_map(|(l, route)| route.iter().map(move |&e| object_of(l, e, experts)))
        .collect()
}

/// What the RAM tier serves of `token`: all of it, or with a card, the
/// token less the experts the card holds now.
fn ram_share<'t>(
    token: &'t TokenRoutes,
    experts: usize,
    card: Option<&GpuTier>,
) -> Cow<'t, TokenRoutes> {
    match card {
        Some(card) => Cow::Owned(cpu_share(token, experts, |o| card.holds(o))),
        None => Cow::Borrowed(token),
    }
}

/// `o`'s copy on the card, from its bytes in the RAM tier; `None` where it
/// has left RAM (the copy is skipped, not read from the drive).
fn copy_from_ram(
    store: &Store,
    card: &Uploader,
    o: ObjectIndex,
) -> Result<Option<Arc<dyn DeviceBuffer>>, ReplayError> {
    match store.lease_for_copy(o)? {
        Some(lease) => {
            let bytes = lease.host().expect("replay keeps experts in host memory");
            Ok(Some(card.upload(bytes).map_err(ReplayError::Gpu)?))
        }
        None => Ok(None),
    }
}

/// Each of `objects` copied to the card now, as [`copy_from_ram`].
fn copies_from_ram(
    store: &Store,
    card: &Uploader,
    objects: impl IntoIterator<Item = ObjectIndex>,
) -> Result<Vec<Landed>, ReplayError> {
    objects
        .into_iter()
        .map(|o| Ok((o, copy_from_ram(store, card, o)?)))
        .collect()
}

/// `token` less the experts that `on_card` says the card computes: what
/// the RAM tier serves of it.
fn cpu_share(
    token: &TokenRoutes,
    experts: usize,
    on_card: impl Fn(ObjectIndex) -> bool,
) -> TokenRoutes {
    let routes = token
        .routes
        .iter()
        .enumerate()
        .map(|(l, route)| {
            route
                .iter()
                .copied()
                .filter(|&e| !on_card(object_of(l, e, experts)))
                .collect()
        })
        .collect();
    TokenRoutes {
        routes,
        ..token.clone()
    }
}

/// What the card's policies know on a replay of `seed` then `tokens`:
/// the training counts, the CPU seconds a copy saves (an expert's bytes
/// at the compute thread's rate), the upload link, `replan`'s card
/// passes and heat window and,
/// for `belady` alone, every expert routed in order.
pub(super) fn card_knowledge(
    config: &ReplayConfig,
    vram: &VramConfig,
    sizes: &[u64],
    train_counts: &[u64],
    (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
    experts: usize,
) -> CardKnowledge {
    let future = if vram.policy == VramPolicy::Belady {
        seed.iter()
            .chain(tokens)
            .flat_map(|t| routed_objects(t, experts))
            .collect()
    } else {
        Vec::new()
    };
    CardKnowledge {
        train_counts: train_counts.to_vec(),
        cpu_seconds: sizes
            .iter()
            .map(|&b| b as f64 / config.hit_compute_bytes_per_s)
            .collect(),
        link: vram.link.clone(),
        future,
        replan: ReplanParams::card(),
        heat_halve_every_tokens: CARD_HEAT_HALVE_EVERY_TOKENS,
    }
}

/// What reaches the RAM tier of a run under a VRAM tier, as the serving
/// loop's tier decides it: each token less the experts on the card.
pub(super) struct CardShares {
    seed: Vec<TokenRoutes>,
    tokens: Vec<TokenRoutes>,
    /// Experts of the tokens (not the seed) the card computes.
    pub(super) on_card: u64,
}

/// What reaches the RAM tier of `seed` and then `tokens` under `vram`'s
/// tier, as the serving loop's tier decides it, with every copy landing
/// while the token after its upload is served (and the seed's last
/// copies before the tokens, as seeding has them): an upload takes tens
/// of microseconds of a token's milliseconds, and a later one leaves its
/// expert on the CPU for a token more than this says. The run also skips
/// the upload of an expert that has left RAM; the card here decides
/// apart from the RAM tier and does not see those.
pub(super) fn simulated_card(
    vram: &VramConfig,
    sizes: &[u64],
    layers: Vec<LayerShape>,
    knowledge: &CardKnowledge,
    (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
    experts: usize,
) -> Result<CardShares, ReplayError> {
    let mut residency = vram
        .residency(sizes.to_vec(), layers, knowledge)
        .map_err(ReplayError::Gpu)?;
    for o in residency.startup() {
        residency.landed(o);
    }
    let mut in_flight = Vec::new();
    let serve = |residency: &mut VramResidency, token, in_flight: &mut Vec<ObjectIndex>| {
        let share = cpu_share(token, experts, |o| residency.on_device(o));
        for o in in_flight.drain(..) {
            // An expert evicted in flight is freed on landing; either way
            // the residency keeps the account.
            residency.landed(o);
        }
        *in_flight = residency
            .after_token(&routed_objects(token, experts))
            .uploads;
        share
    };
    let seed = seed
        .iter()
        .map(|t| serve(&mut residency, t, &mut in_flight))
        .collect();
    for o in in_flight.drain(..) {
        residency.landed(o);
    }
    let count = |t: &TokenRoutes| t.routes.iter().map(Vec::len).sum::<usize>() as u64;
    let mut on_card = 0;
    let tokens = tokens
        .iter()
        .map(|token| {
            let share = serve(&mut residency, token, &mut in_flight);
            on_card += count(token) - count(&share);
            share
        })
        .collect();
    Ok(CardShares {
        seed,
        tokens,
        on_card,
    })
}

/// What serving the tokens measured: time, per-token latencies, the
/// compute thread's waits and the outputs' checksum.
struct Served {
    tokens: u64,
    seconds: f64,
    latencies_seconds: Vec<f64>,
    waits: LayerWaits,
    checksum: String,
    output_sum: f64,
    gpu_experts: u64,
}

/// What serving layers waited: the compute thread for misses (`felt`),
/// and the misses' reads, from starting a layer's loads to the last
/// landing (`reads`).
#[derive(Debug, Clone, Copy, Default)]
struct LayerWaits {
    felt: Duration,
    reads: Duration,
    /// The compute thread's products, and their bytes.
    compute: Duration,
    computed_bytes: u64,
}

impl std::ops::AddAssign for LayerWaits {
    fn add_assign(&mut self, other: LayerWaits) {
        self.felt += other.felt;
        self.reads += other.reads;
        self.compute += other.compute;
        self.computed_bytes += other.computed_bytes;
    }
}

impl Served {
    /// The run, with the store's counters left at zero.
    fn run(self, policy: ServePolicy, round: usize) -> ReplayRun {
        let mut latencies = self.latencies_seconds;
        latencies.sort_by(f64::total_cmp);
        let percentile = |q: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
                * 1e3
        };
        ReplayRun {
            policy: policy.name().into(),
            category: None,
            round,
            tokens: self.tokens,
            seconds: self.seconds,
            tok_per_s: self.tokens as f64 / self.seconds.max(1e-9),
            p50_ms: percentile(0.5),
            p99_ms: percentile(0.99),
            felt_wait_seconds: self.waits.felt.as_secs_f64(),
            miss_reads_seconds: self.waits.reads.as_secs_f64(),
            compute_bytes_per_s: self.waits.computed_bytes as f64
                / self.waits.compute.as_secs_f64().max(1e-9),
            read_service_seconds: 0.0,
            bytes_read: 0,
            startup_bytes: 0,
            startup_seconds: 0.0,
            hits: 0,
            misses: 0,
            rejections: 0,
            bypasses: 0,
            evictions: 0,
            migration_bytes: 0,
            gpu_experts: self.gpu_experts,
            output_sum: self.output_sum,
            output_checksum: self.checksum,
            simulated: None,
        }
    }
}

/// Serves every token, layer by layer, through `serve_layer` (outputs in
/// route order and what it waited); `after_token(tokens served, token)`
/// runs between tokens (heat, re-planning).
fn serve(
    tokens: &[TokenRoutes],
    experts: usize,
    hidden: usize,
    mut serve_layer: impl FnMut(
        &[ObjectIndex],
        &[f32],
    ) -> Result<(Vec<Vec<f32>>, LayerWaits), ReplayError>,
    mut after_token: impl FnMut(u64, &TokenRoutes) -> Result<(), ReplayError>,
) -> Result<Served, ReplayError> {
    let mut x = start_activation(hidden);
    let mut checksum = Sha256::new();
    let mut output_sum = 0f64;
    let mut latencies_seconds = Vec::with_capacity(tokens.len());
    let mut waits = LayerWaits::default();
    let serving = Instant::now();
    for (t, token) in tokens.iter().enumerate() {
        let token_started = Instant::now();
        for (l, route) in token.routes.iter().enumerate() {
            let objects: Vec<ObjectIndex> =
                route.iter().map(|&e| object_of(l, e, experts)).collect();
            let (outputs, waited) = serve_layer(&objects, &x)?;
            waits += waited;
            x = combine(&x, &outputs);
            for v in &x {
                checksum.update(v.to_le_bytes());
                output_sum += f64::from(v.abs());
            }
        }
        latencies_seconds.push(token_started.elapsed().as_secs_f64());
        after_token(t as u64 + 1, token)?;
    }
    Ok(Served {
        tokens: tokens.len() as u64,
        seconds: serving.elapsed().as_secs_f64(),
        latencies_seconds,
        waits,
        checksum: format!("{:x}", checksum.finalize()),
        output_sum,
        gpu_experts: 0,
    })
}

/// Serves one layer of one token. The experts resident now are leased
/// without waiting (`try_acquire`); every other one is acquired on a
/// thread of its own, so misses load in parallel while the computing thread
/// multiplies the hits, then each miss as it arrives. The computing thread
/// never waits while it holds a lease and never acquires what may need a
/// load: if it did, it could wait for bytes that a finished load's lease
/// holds while that load waits in the queue for it, and both would wait for
/// the budget timeout. Outputs come back in route order, so the result is
/// the same whatever the timing. Returns them, the time the computing
/// thread waited, and the time from starting the loads to the last landing.
fn layer(
    store: &Store,
    kernel: &ExpertKernel,
    objects: &[ObjectIndex],
    input: &LayerInput,
) -> Result<(Vec<Vec<f32>>, LayerWaits), StoreError> {
    let mut outputs: Vec<Vec<f32>> = vec![Vec::new(); objects.len()];
    let mut waits = LayerWaits::default();
    let hits: Vec<Option<Lease>> = objects
        .iter()
        .map(|&o| store.try_acquire(o))
        .collect::<Result<_, _>>()?;
    std::thread::scope(|scope| {
        let (sender, arrivals) = std::sync::mpsc::channel();
        let loads_started = Instant::now();
        for (i, &o) in objects.iter().enumerate() {
            if hits[i].is_none() {
                let sender = sender.clone();
                scope.spawn(move || {
                    let lease = store.acquire(o);
                    sender.send((i, lease, loads_started.elapsed()))
                });
            }
        }
        drop(sender);
        let compute = |i: usize, lease: &Lease, waits: &mut LayerWaits| {
            let bytes = lease.host().expect("replay keeps experts in host memory");
            let started = Instant::now();
            let y = kernel.compute(objects[i] as usize, bytes, input);
            waits.compute += started.elapsed();
            waits.computed_bytes += bytes.len() as u64;
            y
        };
        for (i, lease) in hits.into_iter().enumerate() {
            if let Some(lease) = lease {
                outputs[i] = compute(i, &lease, &mut waits);
            }
        }
        loop {
            let started = Instant::now();
            let Ok((i, lease, landed)) = arrivals.recv() else {
                break;
            };
            waits.felt += started.elapsed();
            waits.reads = waits.reads.max(landed);
            outputs[i] = compute(i, &lease?, &mut waits);
        }
        Ok::<_, StoreError>(())
    })?;
    Ok((outputs, waits))
}

/// The next activation: `x` plus the experts' outputs folded onto its
/// width, scaled back to at most 1 in magnitude (keeps values finite).
fn combine(x: &[f32], outputs: &[Vec<f32>]) -> Vec<f32> {
    let mut next = x.to_vec();
    for y in outputs {
        for (i, v) in y.iter().enumerate() {
            next[i % x.len()] += v * 1e-3;
        }
    }
    let peak = next.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    next.iter_mut().for_each(|v| *v /= peak);
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_folds_and_bounds() {
        // x = [0.5, 0.5]; outputs [1000, 0, 2000] fold to [3000, 0] * 1e-3
        // = [3, 0]; next = [3.5, 0.5], scaled by 3.5: [1, 1/7].
        let next = combine(&[0.5, 0.5], &[vec![1000.0, 0.0, 2000.0]]);
        assert!((next[0] - 1.0).abs() < 1e-6 && (next[1] - 0.5 / 3.5).abs() < 1e-6);
    }

    #[test]
    fn the_simulated_card_computes_what_has_landed_and_the_ram_tier_the_rest() {
        // One layer of 4 experts of 10 bytes, a card of 20 bytes under
        // LRU, the allowance never binding. By hand, copies landing a
        // token after they are sent:
        // t0 {0,1}: card empty, both to the CPU; 0 and 1 go up.
        // t1 {0,2}: 0 and 1 land only now: both to the CPU; 2 evicts 1
        //           (0 is more recent) and goes up.
        // t2 {0,1}: 0 on the card, 1 to the CPU; 2 lands; 1 evicts 2.
        // t3 {0,1}: 0 on the card, 1 still in flight: to the CPU.
        let vram = VramConfig {
            budget_bytes: 20,
            policy: VramPolicy::Lru,
            allowance_bytes_per_token: 1 << 20,
            halve_every_ticks: 1 << 20,
            dynamic: None,
            link: super::super::vram::tests::upload_link(1e9),
        };
        let knowledge = super::super::vram::tests::knowing(&[0; 4], 1.0);
        let token = |route: Vec<u32>| TokenRoutes {
            seq: "s".into(),
            pos: 0,
            category: None,
            routes: vec![route],
        };
        let tokens = [
            token(vec![0, 1]),
            token(vec![0, 2]),
            token(vec![0, 1]),
            token(vec![0, 1]),
        ];
        let shares = |seed: &[TokenRoutes], tokens: &[TokenRoutes]| {
            let card =
                simulated_card(&vram, &[10; 4], Vec::new(), &knowledge, (seed, tokens), 4).unwrap();
            let routes = |ts: &[TokenRoutes]| -> Vec<Vec<u32>> {
                ts.iter().map(|t| t.routes[0].clone()).collect()
            };
            (routes(&card.seed), routes(&card.tokens), card.on_card)
        };
        assert_eq!(
            shares(&[], &tokens),
            (vec![], vec![vec![0, 1], vec![0, 2], vec![1], vec![1]], 2)
        );
        // Seeded with t0 and t1: the seed's shares are the same, but its
        // last copies (2) land before t2, so by hand: t2 {0,1}: 0 on the
        // card, 1 to the CPU, 1 evicts 2 (0 was touched after 2);
        // t3 {0,1}: 1 still in flight. Only the tokens' experts count.
        assert_eq!(
            shares(&tokens[..2], &tokens[2..]),
            (vec![vec![0, 1], vec![0, 2]], vec![vec![1], vec![1]], 2)
        );
        // Seeded with t0 alone and t0 replayed: 0 and 1 landed before the
        // tokens, so both are on the card at once (cold, neither was).
        assert_eq!(
            shares(&tokens[..1], &tokens[..1]),
            (vec![vec![0, 1]], vec![vec![]], 2)
        );
    }
}

//! What `replay` is asked and what it reports: the policies, the
//! configuration, every run's counters and the simulator's twin of it, and
//! the errors.

use super::bound::MissBound;
use residency_formats::heat::TokenRoutes;
use residency_policy::online::{OnlineError, OnlineParams};
use residency_policy::PolicyKind;
use residency_runtime::serve::gpu_tier::VramConfig;
use residency_runtime::serve::replan::{MoveLink, ReplanParams};
use residency_runtime::storage::{BackendKind, StorageError};
use residency_runtime::store::StoreError;
use residency_sim::pin_share::PinShareRecommendation;
use residency_sim::SimError;

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
    pub(super) fn cache_policy(self, layer_policy: PolicyKind) -> PolicyKind {
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
    pub(super) fn per_layer(self) -> bool {
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
    /// The compute threads' rate over an expert's bytes
    /// ([`ExpertKernel::bytes_per_s`]): the simulator's hits hide reads at it.
    pub hit_compute_bytes_per_s: f64,
    /// The CPUs the experts are multiplied on, a thread pinned to each
    /// (one or none: the serving thread alone).
    pub compute_cpus: Vec<u32>,
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
    pub(super) fn rates(&self) -> (f64, f64) {
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
    /// How the card's rule or `lfru`'s window was chosen (`--vram-policy
    /// auto`, `--vram-halve-every auto`); absent when both were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_choice: Option<super::card_choice::CardChoice>,
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
    /// The compute threads' products over the run: bytes a second, as
    /// they ran beside the loads (0 where nothing was timed).
    pub compute_bytes_per_s: f64,
    /// The layers' reads by how many misses a layer read together: what
    /// the drive does with a burst of that many, as the run issued them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_bursts: Vec<ReadBurst>,
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
    /// The drive's reads no arm goes under on the same tokens and budgets
    /// (`bound`: both tiers as one memory, Belady's MIN from the best start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_bound: Option<MissBound>,
}

/// Layers of a run that read `misses` experts together (the largest size
/// counted apart also holds the larger ones), and their reads' seconds in
/// all, from starting the loads to the last landing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ReadBurst {
    pub misses: u32,
    pub layers: u64,
    pub seconds: f64,
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
    #[error("the compute threads: {0}")]
    Threads(String),
}

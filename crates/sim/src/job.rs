//! `residency simulate` as a library call: read a trace (libCacheSim
//! `oracleGeneral` or any per-token MoE format the planner reads), cut it to
//! the size asked (design §6 common options), price misses, and run every
//! policy at every budget, or the held-out gate. The CLI only parses
//! arguments and prints what this returns.

use super::allocation::Allocation;
use super::arms::{Arm, Run, SimOptions, Simulator};
use super::felt::{fastest_drive, read_seconds};
use super::gate::{gate, held_out_splits, GateConfig, GateReport};
use super::gate::{CategoryGain, Verdict};
use super::oracle::read_oracle_general;
use super::pin_share::{recommend_pin_shares, PinShareRecommendation};
use super::stream::Stream;
use super::SimError;
use residency_core::cost::Place;
use residency_core::error::PlannerError;
use residency_core::model::Model;
use residency_core::plan::Plan;
use residency_core::profile::HardwareProfile;
use residency_formats::heat::{read_trace, HeatContext, HeatFormat, Trace};
use residency_policy::{ObjectIndex, PolicyKind};
use schemars::JsonSchema;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The trace formats `simulate` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// libCacheSim `oracleGeneral` (24-byte records).
    OracleGeneral,
    /// A per-token MoE routing trace (jsonl, esft, llama4-json, ...).
    Moe(HeatFormat),
}

impl TraceFormat {
    pub fn from_name(name: &str) -> Option<TraceFormat> {
        match name {
            "oracle-general" => Some(TraceFormat::OracleGeneral),
            other => HeatFormat::from_name(other).map(TraceFormat::Moe),
        }
    }

    /// `oracleGeneral` files are recognised by name (libCacheSim's naming:
    /// `*.oracleGeneral*`); anything else is left to the planner's detection.
    fn detect(path: &Path) -> Option<TraceFormat> {
        let name = path.file_name()?.to_string_lossy();
        name.contains("oracleGeneral")
            .then_some(TraceFormat::OracleGeneral)
    }
}

/// A cache budget: bytes, or a share of all objects' bytes (the working
/// set of the model's experts, or of a generic trace).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Bytes(u64),
    Share(f64),
}

impl Budget {
    /// `128MiB`, `2 GB`, `4096` or `25%`.
    pub fn parse(text: &str) -> Result<Budget, String> {
        match text.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(Budget::Share(v / 100.0)),
                _ => Err(format!("`{text}`: give a positive percentage, e.g. `25%`")),
            },
            None => residency_core::units::parse_size(text).map(|b| Budget::Bytes(b.get())),
        }
    }

    /// The budget in bytes, a share taken of `all_bytes`.
    pub fn bytes(self, all_bytes: u64) -> u64 {
        match self {
            Budget::Bytes(b) => b,
            Budget::Share(s) => (all_bytes as f64 * s) as u64,
        }
    }
}

/// design §6 common options: keep the first `tokens` tokens of each
/// category, the first `layers` MoE layers, the listed categories.
#[derive(Debug, Clone, Default)]
pub struct Cut {
    pub tokens: Option<usize>,
    pub layers: Option<usize>,
    pub categories: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct SimulateJob {
    pub trace: PathBuf,
    pub format: Option<TraceFormat>,
    /// Sizes MoE experts (its RAM-tier format); required for MoE traces.
    pub model: Option<Model>,
    /// Prices uncalibrated misses (fastest drive); the embedded default when `None`.
    pub profile: HardwareProfile,
    /// Calibrated seconds per physical miss for every layer (overrides the
    /// profile); see `felt::miss_seconds_from_prof_log`.
    pub miss_seconds: Option<f64>,
    /// Hits hide reads: each object's hit compute is its bytes at the
    /// profile's CPU rate (`SimOptions::hit_compute_seconds`).
    pub hits_hide_reads: bool,
    pub policies: Vec<PolicyKind>,
    pub budgets: Vec<Budget>,
    pub allocations: Vec<Allocation>,
    pub cut: Cut,
    pub options: SimOptions,
    /// A plan file whose in-memory experts are the residents of `plan`.
    pub plan: Option<PathBuf>,
    /// Run the held-out gate instead of in-sample arms.
    pub gate: bool,
    pub sensitivity: bool,
}

pub struct SimulateOutput {
    pub runs: Vec<(Option<String>, Run)>,
    pub gate: Option<GateReport>,
    /// With the gate and `pinned-lru`: the share of each global or uniform
    /// budget worth pinning, by held-out replays.
    pub pin_shares: Vec<PinShareRecommendation>,
    /// Requests, tokens and objects of the stream (all categories).
    pub requests: u64,
    pub tokens: u64,
    pub objects: usize,
    /// Things to tell the user once (what was cut, in-sample learning).
    pub notes: Vec<String>,
}

pub fn simulate(job: &SimulateJob) -> Result<SimulateOutput, SimError> {
    let format = job.format.or_else(|| TraceFormat::detect(&job.trace));
    let mut notes = Vec::new();
    if format == Some(TraceFormat::OracleGeneral) {
        if job.gate {
            return Err(SimError::Invalid(format!(
                "{}: an oracleGeneral trace has no categories to hold out; run the gate on a MoE trace",
                job.trace.display()
            )));
        }
        let stream = read_oracle_general(&job.trace)?;
        let miss_seconds = miss_costs(job, &stream.sizes_bytes);
        let counts = stream.counts();
        let options = job_options(job, &stream.sizes_bytes);
        return run_arms(job, options, stream, counts, miss_seconds, None, notes);
    }
    let model = job.model.as_ref().ok_or_else(|| {
        SimError::Invalid(format!(
            "{}: a MoE trace needs --model to size its experts (e.g. --model profiles/models/deepseek-v2-lite.yaml)",
            job.trace.display()
        ))
    })?;
    let ctx = HeatContext::for_model(model);
    let moe_format = match format {
        Some(TraceFormat::Moe(f)) => Some(f),
        _ => None,
    };
    let mut trace = read_trace(&job.trace, moe_format, &ctx, &mut notes)?;
    cut_trace(&mut trace, &job.cut, &mut notes);
    let expert_bytes: Vec<u64> = model
        .moe
        .iter()
        .take(trace.layers())
        .map(|l| l.ram_bytes)
        .collect();
    let sizes_bytes: Vec<u64> = trace
        .experts
        .iter()
        .zip(&expert_bytes)
        .flat_map(|(&n, &b)| std::iter::repeat_n(b, n))
        .collect();
    let miss_seconds = miss_costs(job, &sizes_bytes);
    let options = job_options(job, &sizes_bytes);
    if job.gate {
        let splits = held_out_splits(&trace, &expert_bytes);
        let candidates = job
            .allocations
            .iter()
            .flat_map(|&a| job.policies.iter().map(move |&p| (p, a)))
            .filter(|&c| c != super::gate::BASELINE)
            .collect();
        let all_bytes = splits
            .first()
            .map_or(0, |s| s.eval.sizes_bytes.iter().sum());
        let config = GateConfig {
            budgets_bytes: job.budgets.iter().map(|b| b.bytes(all_bytes)).collect(),
            candidates,
            sensitivity: job.sensitivity,
            options: options.clone(),
        };
        let (requests, tokens) = splits.iter().fold((0, 0), |(r, t), s| {
            (r + s.eval.requests.len() as u64, t + s.eval.tokens)
        });
        let objects = miss_seconds.len();
        let pin_shares = if job.policies.contains(&PolicyKind::PinnedLru) {
            let static_allocations: Vec<Allocation> = job
                .allocations
                .iter()
                .copied()
                .filter(|a| matches!(a, Allocation::Global | Allocation::Uniform))
                .collect();
            recommend_pin_shares(
                &splits,
                &miss_seconds,
                &config.budgets_bytes,
                &static_allocations,
                &options,
            )?
        } else {
            Vec::new()
        };
        let report = gate(splits, &miss_seconds, &config)?;
        return Ok(SimulateOutput {
            runs: report
                .runs
                .iter()
                .map(|(c, r)| (Some(c.clone()), r.clone()))
                .collect(),
            gate: Some(report),
            pin_shares,
            requests,
            tokens,
            objects,
            notes,
        });
    }
    let stream = Stream::from_tokens(&trace.tokens, &trace.experts, &expert_bytes);
    if job.policies.iter().any(|p| p.learns()) {
        notes.push(
            "frequency, cost, plan and pinned-lru learned on the evaluated trace itself (in-sample); --gate holds categories out"
                .into(),
        );
    }
    let counts = stream.counts();
    let plan_residents = match &job.plan {
        Some(path) => Some(plan_residents(path, &stream)?),
        None => None,
    };
    run_arms(
        job,
        options,
        stream,
        counts,
        miss_seconds,
        plan_residents,
        notes,
    )
}

/// Felt seconds of a miss of each object: the job's calibrated cost, else
/// a read of its bytes from the profile's fastest drive.
fn miss_costs(job: &SimulateJob, sizes_bytes: &[u64]) -> Vec<f64> {
    sizes_bytes
        .iter()
        .map(|&b| {
            job.miss_seconds
                .or_else(|| read_seconds(&job.profile, b))
                .unwrap_or(0.0)
        })
        .collect()
}

/// The job's simulator options, with each object's hit compute
/// (`sizes_bytes[o]` at the profile's first node's CPU rate) and the
/// fastest drive's reads at once where the job has hits hide reads.
fn job_options(job: &SimulateJob, sizes_bytes: &[u64]) -> SimOptions {
    let cpu_bytes_per_s = job.profile.numa.first().map(|n| n.gemv_bandwidth.0);
    let hit_compute_seconds = match cpu_bytes_per_s {
        Some(rate) if job.hits_hide_reads && rate > 0.0 => {
            sizes_bytes.iter().map(|&b| b as f64 / rate).collect()
        }
        _ => Vec::new(),
    };
    SimOptions {
        hit_compute_seconds,
        reads_at_once: fastest_drive(&job.profile).map_or(1, |d| d.read_concurrency),
        ..job.options.clone()
    }
}

fn run_arms(
    job: &SimulateJob,
    options: SimOptions,
    stream: Stream,
    train_counts: Vec<u64>,
    miss_seconds: Vec<f64>,
    plan_residents: Option<Vec<ObjectIndex>>,
    notes: Vec<String>,
) -> Result<SimulateOutput, SimError> {
    let (requests, tokens, objects) = (
        stream.requests.len() as u64,
        stream.tokens,
        stream.objects(),
    );
    let layers = stream.layers();
    let options = SimOptions {
        plan_residents,
        ..options
    };
    let mut sim = Simulator::new(stream, train_counts, miss_seconds, options);
    let all_bytes: u64 = sim.stream().sizes_bytes.iter().sum();
    let mut runs = Vec::new();
    for budget_bytes in job.budgets.iter().map(|b| b.bytes(all_bytes)) {
        for &allocation in &job.allocations {
            for &policy in &job.policies {
                let arm = Arm {
                    policy,
                    allocation,
                    budget_bytes,
                };
                runs.push((None, sim.run(arm, &vec![1.0; layers])?));
            }
        }
    }
    Ok(SimulateOutput {
        runs,
        gate: None,
        pin_shares: Vec::new(),
        requests,
        tokens,
        objects,
        notes,
    })
}

/// Applies the common options, saying what was cut.
pub fn cut_trace(trace: &mut Trace, cut: &Cut, notes: &mut Vec<String>) {
    if let Some(keep) = &cut.categories {
        let before = trace.tokens.len();
        trace
            .tokens
            .retain(|t| t.category.as_ref().is_some_and(|c| keep.contains(c)));
        notes.push(format!(
            "--categories kept {} of {before} tokens ({})",
            trace.tokens.len(),
            keep.join(",")
        ));
    }
    if let Some(n) = cut.tokens {
        let before = trace.tokens.len();
        let mut seen: std::collections::HashMap<Option<String>, usize> = Default::default();
        trace.tokens.retain(|t| {
            let k = seen.entry(t.category.clone()).or_default();
            *k += 1;
            *k <= n
        });
        notes.push(format!(
            "--tokens {n} kept {} of {before} tokens (the first {n} of each category)",
            trace.tokens.len()
        ));
    }
    if let Some(n) = cut.layers.filter(|&n| n < trace.layers()) {
        notes.push(format!(
            "--layers {n} kept {n} of {} MoE layers",
            trace.layers()
        ));
        trace.experts.truncate(n);
        for t in &mut trace.tokens {
            t.routes.truncate(n);
        }
    }
}

/// Experts a plan keeps in memory (on a GPU or in RAM, not on a disk).
fn plan_residents(path: &Path, stream: &Stream) -> Result<Vec<ObjectIndex>, SimError> {
    let plan = Plan::read(path)?;
    if plan.experts.len() < stream.layers() {
        return Err(PlannerError::input(
            path,
            "experts",
            format!(
                "the plan places {} MoE layers, the trace has {}",
                plan.experts.len(),
                stream.layers()
            ),
            "simulate with the model the plan was made for",
        )
        .into());
    }
    let mut residents = Vec::new();
    for l in 0..stream.layers() {
        let range = stream.layer_objects(l);
        if plan.experts[l].len() != range.len() {
            return Err(PlannerError::input(
                path,
                format!("experts[{l}]"),
                format!(
                    "{} experts, the trace's layer has {}",
                    plan.experts[l].len(),
                    range.len()
                ),
                "simulate with the model the plan was made for",
            )
            .into());
        }
        for (e, &place) in plan.experts[l].iter().enumerate() {
            let in_memory = plan
                .places
                .get(place)
                .and_then(|p| p.parse::<Place>().ok())
                .is_some_and(|p| !matches!(p, Place::Disk(_)));
            if in_memory {
                residents.push((range.start + e) as ObjectIndex);
            }
        }
    }
    Ok(residents)
}

impl SimulateOutput {
    /// The `--json` document (design §6, `schemas/simulate-output.schema.json`):
    /// the runs, plus the gate's results when it ran. Counts are exact
    /// integers; bytes are bytes.
    pub fn report(&self) -> SimulateReport {
        SimulateReport {
            runs: self
                .runs
                .iter()
                .map(|(category, run)| RunRecord::new(category.clone(), run))
                .collect(),
            gate: self
                .gate
                .as_ref()
                .map(|report| report.results.iter().map(GateRecord::new).collect()),
            pin_shares: self.pin_shares.clone(),
        }
    }
}

/// What `residency simulate --json` writes.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SimulateReport {
    pub runs: Vec<RunRecord>,
    /// Present when `--gate` ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<Vec<GateRecord>>,
    /// With `--gate` and `pinned-lru`: per global or uniform budget, the
    /// held-out felt wait at each pinned share and the share recommended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pin_shares: Vec<PinShareRecommendation>,
}

/// One policy, allocation and budget over the trace (or one category of it).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RunRecord {
    pub policy: String,
    pub allocation: String,
    /// Bytes of the cache budget.
    pub budget: u64,
    pub requests: u64,
    pub misses: u64,
    pub miss_bytes: u64,
    pub tokens: u64,
    pub felt_wait_seconds: f64,
    pub hits_seeded: u64,
    pub hits_admitted: u64,
    pub seeded_bytes: u64,
    pub admissions: u64,
    pub admitted_bytes: u64,
    pub bypasses: u64,
    pub evictions: u64,
    pub evictions_per_token: f64,
    pub admitted_bytes_per_token: f64,
    pub misses_by_layer: Vec<u64>,
    /// The category replayed, when the trace was cut by category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Bytes per layer, when the allocation is not global.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacities_bytes: Vec<u64>,
}

impl RunRecord {
    fn new(category: Option<String>, run: &Run) -> RunRecord {
        let s = &run.stats;
        let per_token = |n: u64| n as f64 / run.tokens.max(1) as f64;
        RunRecord {
            policy: run.arm.policy.name().into(),
            allocation: run.arm.allocation.name().into(),
            budget: run.arm.budget_bytes,
            requests: s.requests,
            misses: s.misses,
            miss_bytes: s.miss_bytes,
            tokens: run.tokens,
            felt_wait_seconds: run.felt_wait_seconds,
            hits_seeded: s.hits_seeded,
            hits_admitted: s.hits_admitted,
            seeded_bytes: s.seeded_bytes,
            admissions: s.admissions,
            admitted_bytes: s.admitted_bytes,
            bypasses: s.bypasses,
            evictions: s.evictions,
            evictions_per_token: per_token(s.evictions),
            admitted_bytes_per_token: per_token(s.admitted_bytes),
            misses_by_layer: s.misses_by_layer.clone(),
            category,
            capacities_bytes: run.capacities_bytes.clone(),
        }
    }
}

/// The gate's verdict on one candidate against uniform LRU.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GateRecord {
    pub policy: String,
    pub allocation: String,
    /// Bytes of the cache budget.
    pub budget: u64,
    pub verdict: Verdict,
    pub passed: bool,
    pub categories: Vec<CategoryGain>,
    /// Reruns with miss costs scaled per layer, when they ran.
    pub sensitivity: Option<SensitivityRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SensitivityRecord {
    pub reruns: usize,
    pub failed: usize,
    /// The rerun with the worst verdict.
    pub worst: Option<WorstRerun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorstRerun {
    pub layer: usize,
    pub scale: f64,
    pub verdict: Verdict,
}

impl GateRecord {
    fn new(r: &super::gate::GateResult) -> GateRecord {
        GateRecord {
            policy: r.policy.name().into(),
            allocation: r.allocation.name().into(),
            budget: r.budget_bytes,
            verdict: r.verdict,
            passed: r.passed(),
            categories: r.categories.clone(),
            sensitivity: r.sensitivity.as_ref().map(|s| SensitivityRecord {
                reruns: s.reruns,
                failed: s.failed,
                worst: s.worst.map(|(layer, scale, verdict)| WorstRerun {
                    layer,
                    scale,
                    verdict,
                }),
            }),
        }
    }
}

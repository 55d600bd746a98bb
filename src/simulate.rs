//! `residency simulate`: arguments, the result table and the `--json` and
//! `--plot` files. The simulation itself is `residency_sim::job`.

use crate::flags::{more_help, named, ModelArg, OnlineArgs, ProfileArg, MISS_PRICE};
use crate::plot::{self, Line};
use anyhow::{bail, Result};
use residency_core::units::{parse_time, Bytes};
use residency_policy::PolicyKind;
use residency_policy::PolicyParams;
use residency_sim::allocation::Allocation;
use residency_sim::arms::{SimOptions, Start};
use residency_sim::felt::miss_seconds_from_prof_log;
use residency_sim::job::{simulate, Budget, Cut, SimulateJob, SimulateOutput, TraceFormat};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(mut_arg("model", more_help("it sizes the experts of a MoE trace")))]
#[command(mut_arg("profile", more_help(MISS_PRICE)))]
pub struct SimulateArgs {
    /// Trace: libCacheSim oracleGeneral, or any per-token MoE trace the
    /// planner reads (file or data-set directory).
    #[arg(long)]
    trace: PathBuf,
    /// oracle-general, or a MoE format (jsonl, esft, llama4-json,
    /// mixtral-jsonl, coli-route); default: detected.
    #[arg(long, value_parser = parse_trace_format)]
    trace_format: Option<TraceFormat>,
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    profile: ProfileArg,
    /// Calibrated felt wait per physical miss, e.g. `4.67ms` (all layers).
    #[arg(long, value_parser = parse_seconds, conflicts_with = "miss_cost_log")]
    miss_cost: Option<f64>,
    /// Calibrate the miss cost from a Colibri log's `[PROF] expert I/O:`
    /// lines: felt wait / physical misses.
    #[arg(long)]
    miss_cost_log: Option<PathBuf>,
    /// Count a token's wait in a layer as a store that reads its misses
    /// while it computes waits: the reads land in waves of the drive's
    /// `read_concurrency`, and the compute before each wave (the hits',
    /// then the landed misses', at the profile's CPU rate) hides its reads;
    /// without it every miss is felt in full. Not with --miss-cost-log: an
    /// engine's felt wait already has the overlap in it.
    #[arg(long, conflicts_with = "miss_cost_log")]
    hits_hide_reads: bool,
    /// Policies, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = named::<PolicyKind>(), default_value = "lru")]
    policy: Vec<PolicyKind>,
    /// Cache budgets, comma-separated: sizes (`128MiB`, `2GB`, bytes) or
    /// shares of all experts' bytes (`25%`).
    #[arg(long, value_delimiter = ',', value_parser = Budget::parse, required = true)]
    budget: Vec<Budget>,
    /// How a budget is split across MoE layers: global, uniform, dynamic
    /// (water-filled once on the whole trace), online (re-allocated while
    /// replaying; lru, fifo, sieve, s3fifo, lfu or lfru inside each layer);
    /// comma-separated for several.
    #[arg(long, value_delimiter = ',', value_parser = named::<Allocation>(), default_value = "global")]
    allocation: Vec<Allocation>,
    #[command(flatten)]
    online: OnlineArgs,
    /// Start every arm with the same residents (the training knapsack)
    /// instead of cold.
    #[arg(long)]
    seeded: bool,
    /// A plan file: the residents of `plan` are its in-memory experts.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Run the held-out gate: each category evaluated with learning
    /// policies trained on the others, against uniform LRU.
    #[arg(long)]
    gate: bool,
    /// With --gate, skip the 2 x layers miss-cost sensitivity reruns.
    #[arg(long)]
    no_sensitivity: bool,
    /// Share of the cache `pinned-lru` pins.
    #[arg(long, default_value_t = 0.5)]
    pin_fraction: f64,
    /// Decayed counters are halved every this many requests.
    #[arg(long, default_value_t = PolicyParams::default().halve_every_ticks)]
    halve_every: u64,
    /// Keep the first N tokens of each category.
    #[arg(long)]
    tokens: Option<usize>,
    /// Keep the first N MoE layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Keep these categories (comma-separated).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw miss-ratio curves (and dynamic per-layer capacities), .svg or .png.
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn parse_trace_format(name: &str) -> Result<TraceFormat, String> {
    TraceFormat::from_name(name).ok_or_else(|| {
        format!("unknown trace format `{name}`; oracle-general, jsonl, esft, llama4-json, mixtral-jsonl or coli-route")
    })
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    let s = parse_time(text)?.0;
    if s.is_finite() && s >= 0.0 {
        Ok(s)
    } else {
        Err(format!("`{text}`: give a non-negative time, e.g. `4.67ms`"))
    }
}

pub fn run(args: SimulateArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.pin_fraction) {
        bail!(
            "--pin-fraction {}: give a share between 0 and 1",
            args.pin_fraction
        );
    }
    if args.halve_every == 0 {
        bail!("--halve-every 0: give a positive number of requests");
    }
    if let Some(file) = &args.plot {
        plot::PlotFormat::from_path(file)?;
    }
    let profile = args.profile.load_or_default()?;
    let job = SimulateJob {
        trace: args.trace.clone(),
        format: args.trace_format,
        model: args.model.load()?,
        profile,
        miss_seconds: match &args.miss_cost_log {
            Some(log) => Some(miss_seconds_from_prof_log(log)?),
            None => args.miss_cost,
        },
        hits_hide_reads: args.hits_hide_reads,
        policies: args.policy.clone(),
        budgets: args.budget.clone(),
        allocations: args.allocation.clone(),
        cut: Cut {
            tokens: args.tokens,
            layers: args.layers,
            categories: args.categories.clone(),
        },
        options: SimOptions {
            params: PolicyParams {
                halve_every_ticks: args.halve_every,
                ..PolicyParams::default()
            },
            start: if args.seeded {
                Start::Seeded
            } else {
                Start::Cold
            },
            pin_fraction: args.pin_fraction,
            plan_residents: None,
            online: args.online.params()?,
            hit_compute_seconds: Vec::new(),
            reads_at_once: 1,
        },
        plan: args.plan.clone(),
        gate: args.gate,
        sensitivity: !args.no_sensitivity,
    };
    let output = simulate(&job)?;
    crate::term::notes(&output.notes);
    print_table(&args.trace, &output);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&output.report())?;
        residency_core::error::write_atomic(path, text.as_bytes())?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        draw(path, &args.trace, &output)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn print_table(trace: &Path, out: &SimulateOutput) {
    println!(
        "simulate: {} ({} requests, {} tokens, {} objects)",
        trace.display(),
        out.requests,
        out.tokens,
        out.objects
    );
    println!(
        "  {:<12} {:<10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>12} {:>10}",
        "policy",
        "allocation",
        "budget",
        "category",
        "misses",
        "miss %",
        "byte %",
        "felt wait s",
        "evict/tok"
    );
    for (category, run) in &out.runs {
        let s = &run.stats;
        println!(
            "  {:<12} {:<10} {:>10} {:>10} {:>12} {:>8.2}% {:>8.2}% {:>12.3} {:>10.2}",
            run.arm.policy.name(),
            run.arm.allocation.name(),
            Bytes(run.arm.budget_bytes).to_string(),
            category.as_deref().unwrap_or("-"),
            s.misses,
            100.0 * s.misses as f64 / s.requests.max(1) as f64,
            100.0 * s.miss_bytes as f64 / s.requested_bytes.max(1) as f64,
            run.felt_wait_seconds,
            s.evictions as f64 / run.tokens.max(1) as f64,
        );
    }
    if let Some(report) = &out.gate {
        println!(
            "held-out gate against uniform LRU (pass: mean gain >= 10 %, no category below -3 %):"
        );
        for r in &report.results {
            let sens = match &r.sensitivity {
                Some(s) => format!(
                    ", sensitivity {}/{} reruns pass",
                    s.reruns - s.failed,
                    s.reruns
                ),
                None => String::new(),
            };
            println!(
                "  {:<12} {:<8} {:>10}  mean gain {:>+7.2}%  worst category {:>+7.2}%  {}{}",
                r.policy.name(),
                r.allocation.name(),
                Bytes(r.budget_bytes).to_string(),
                100.0 * r.verdict.mean_gain,
                100.0 * r.verdict.worst_gain,
                if r.passed() { "PASS" } else { "fail" },
                sens
            );
        }
    }
    if !out.pin_shares.is_empty() {
        println!("pinned share of the budget (pinned-lru, pins learned on the other categories), held-out felt wait s:");
        for r in &out.pin_shares {
            let shares: Vec<String> = r
                .shares
                .iter()
                .map(|s| format!("{:.0}%: {:.3}", 100.0 * s.share, s.felt_wait_seconds))
                .collect();
            println!(
                "  {:<8} {:>10}  {}  -> pin {:.0}%",
                r.allocation,
                Bytes(r.budget).to_string(),
                shares.join("  "),
                100.0 * r.recommended_share
            );
        }
    }
}

/// Miss ratio per (policy, allocation) and budget, summed over categories;
/// per-layer capacities of the first dynamic run of each budget.
fn draw(path: &Path, trace: &Path, out: &SimulateOutput) -> Result<()> {
    let mut totals: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    let mut capacities: BTreeMap<u64, Line> = BTreeMap::new();
    for (_, run) in &out.runs {
        let label = format!("{} ({})", run.arm.policy.name(), run.arm.allocation.name());
        let t = totals.entry((label, run.arm.budget_bytes)).or_default();
        t.0 += run.stats.misses;
        t.1 += run.stats.requests;
        if run.arm.allocation == Allocation::Dynamic {
            capacities
                .entry(run.arm.budget_bytes)
                .or_insert_with(|| Line {
                    label: format!("{:.2} GiB", gib(run.arm.budget_bytes)),
                    points: run
                        .capacities_bytes
                        .iter()
                        .enumerate()
                        .map(|(l, &b)| (l as f64, b as f64 / (1u64 << 20) as f64))
                        .collect(),
                });
        }
    }
    let mut miss_ratio: Vec<Line> = Vec::new();
    for ((label, budget), (misses, requests)) in totals {
        let point = (gib(budget), misses as f64 / requests.max(1) as f64);
        match miss_ratio.iter_mut().find(|l| l.label == label) {
            Some(line) => line.points.push(point),
            None => miss_ratio.push(Line {
                label,
                points: vec![point],
            }),
        }
    }
    plot::simulation_plot(
        path,
        &format!("simulate: {}", trace.display()),
        miss_ratio,
        capacities.into_values().collect(),
    )
}

//! `residency replay`: a routing trace through the executor's real data
//! path against a checkpoint, per policy; arguments, the
//! table and `--json`. The work is `residency_runtime::serve::replay`.

use crate::checkpoint_cmd::model_from_path;
use crate::flags::{more_help, named, BackendArg, ModelArg, OnlineArgs, ProfileArg, MISS_PRICE};
use anyhow::{bail, Result};
use residency_cache::policy::PolicyKind;
use residency_cache::sim::felt::read_seconds;
use residency_cache::sim::job::{cut_trace, Budget, Cut};
use residency_core::cost::{Place, Resources};
use residency_core::profile::HardwareProfile;
use residency_core::units::Bytes;
use residency_formats::heat::{read_trace, HeatContext, HeatFormat, TokenRoutes};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::replan::{MoveLink, ReplanParams};
use residency_runtime::serve::replay::{
    replay, ReplayConfig, ReplayReport, ReplayRun, ServePolicy,
};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(mut_arg(
    "model",
    more_help("the model the trace was recorded on; default: the checkpoint's own description")
))]
#[command(mut_arg("profile", more_help(MISS_PRICE)))]
pub struct ReplayArgs {
    /// Checkpoint directory (e.g. from `residency gen-checkpoint`).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Per-token routing trace (file or data-set directory).
    #[arg(long)]
    trace: PathBuf,
    #[arg(long, value_parser = named::<HeatFormat>())]
    trace_format: Option<HeatFormat>,
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    profile: ProfileArg,
    /// Policies, comma-separated: lru, lfru, frequency, cost, plan, replan;
    /// per-layer caches: uniform (`budget / layers` each), dynamic-offline
    /// (water-filled once on the replayed tokens, in hindsight), dynamic
    /// (re-allocated while serving, `--online-*`); and `resident` (no
    /// store, every expert read into memory first: the baseline of the
    /// executor's overhead, with `--ram-budget 100% --warm`).
    #[arg(long, value_delimiter = ',', value_parser = named::<ServePolicy>(), default_value = "lru,cost,replan")]
    policy: Vec<ServePolicy>,
    /// RAM for experts: a size (`2GiB`) or a share of all experts (`25%`).
    #[arg(long, value_parser = Budget::parse, default_value = "25%")]
    ram_budget: Budget,
    /// Learn (frequency, cost, plan, replan) on these categories and replay
    /// the others; default: learn on the replayed tokens (in-sample).
    #[arg(long, value_delimiter = ',')]
    train_categories: Option<Vec<String>>,
    /// Replay each category on its own (cold stores each time) and report
    /// it apart, for the "no category worse" check.
    #[arg(long)]
    per_category: bool,
    /// Rounds of all arms, alternating their order (A B, B A, ...).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// `replan`: share of the budget for pins.
    #[arg(long, default_value_t = 0.5)]
    pin_share: f64,
    /// `replan`: tokens between passes.
    #[arg(long, default_value_t = ReplanParams::default().every_tokens)]
    replan_every: u64,
    /// `replan`: also pass after this many seconds, when sooner.
    #[arg(long)]
    replan_every_seconds: Option<f64>,
    /// The policy inside each layer of uniform, dynamic-offline and
    /// dynamic (dynamic: lru, fifo, sieve or s3fifo).
    #[arg(long, value_parser = named::<PolicyKind>(), default_value = "lru")]
    layer_policy: PolicyKind,
    #[command(flatten)]
    online: OnlineArgs,
    /// Keep the first N tokens of each category.
    #[arg(long)]
    tokens: Option<usize>,
    /// Keep these categories (comma-separated).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    /// Load every expert the budget holds before the clock starts.
    #[arg(long)]
    warm: bool,
    /// Serve the last N tokens of each training category first, untimed,
    /// so every arm starts from its own policy's state rather than cold
    /// (needs --train-categories).
    #[arg(long, default_value_t = 0)]
    seed_tokens: usize,
    #[command(flatten)]
    backend: BackendArg,
    /// Write `{"runs":[...]}` here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The last `--seed-tokens` tokens of each training category, in trace order.
fn seed_tokens(tokens: &[TokenRoutes], args: &ReplayArgs) -> Result<Vec<TokenRoutes>> {
    if args.seed_tokens == 0 {
        return Ok(Vec::new());
    }
    let Some(train) = &args.train_categories else {
        bail!(
            "--seed-tokens {}: seeding serves training tokens; give --train-categories too",
            args.seed_tokens
        );
    };
    let mut seed = Vec::new();
    for category in train {
        let of: Vec<&TokenRoutes> = tokens
            .iter()
            .filter(|t| t.category.as_ref() == Some(category))
            .collect();
        seed.extend(
            of[of.len().saturating_sub(args.seed_tokens)..]
                .iter()
                .map(|&t| t.clone()),
        );
    }
    Ok(seed)
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    check_flags(args)?;
    let checkpoint = Checkpoint::open(&args.checkpoint)?;
    let model = match args.model.load()? {
        Some(model) => model,
        None => model_from_path(&args.checkpoint)?,
    };
    let profile = args.profile.load_or_default()?;
    let mut notes = Vec::new();
    let mut trace = read_trace(
        &args.trace,
        args.trace_format,
        &HeatContext::for_model(&model),
        &mut notes,
    )?;
    let cut = Cut {
        tokens: args.tokens,
        layers: Some(checkpoint.config.moe_layers().len()),
        categories: args.categories.clone(),
    };
    cut_trace(&mut trace, &cut, &mut notes);
    let (eval, train_counts) = split_held_out(&trace.tokens, &checkpoint, args, &mut notes)?;
    let seed = seed_tokens(&trace.tokens, args)?;
    let expert_bytes = checkpoint.object_bytes(&residency_runtime::identity::ObjectKey::Expert {
        layer: checkpoint.config.moe_layers()[0] as u32,
        expert: 0,
    });
    let all_bytes = expert_bytes * train_counts.len() as u64;
    let config = ReplayConfig {
        policies: args.policy.clone(),
        ram_budget_bytes: args.ram_budget.bytes(all_bytes),
        pin_share: args.pin_share,
        replan: ReplanParams {
            every_tokens: args.replan_every.max(1),
            every_seconds: args.replan_every_seconds,
            ..ReplanParams::default()
        },
        rounds: args.rounds,
        miss_seconds: read_seconds(&profile, expert_bytes).unwrap_or(1e-3),
        move_link: drive_to_ram(&profile),
        backend: args.backend.backend,
        warm: args.warm,
        seed,
        layer_policy: args.layer_policy,
        online: args.online.params()?,
    };
    for note in &notes {
        eprintln!("note: {note}");
    }
    let runs = if args.per_category {
        replay_per_category(&checkpoint, &eval, &train_counts, &config)?
    } else {
        replay(&checkpoint, &eval, &train_counts, &config)?
    };
    println!(
        "replay: {} tokens of {} on {} ({} of RAM for experts)",
        eval.len(),
        args.trace.display(),
        args.checkpoint.display(),
        Bytes(config.ram_budget_bytes)
    );
    print_runs(&runs);
    // Runs of the same tokens must compute the same outputs.
    let differs = runs.iter().any(|a| {
        runs.iter()
            .any(|b| a.category == b.category && a.output_checksum != b.output_checksum)
    });
    if differs {
        bail!("the output checksums differ between policies, which only place bytes: a bug; please report it with this command");
    }
    println!(
        "output checksum {} (equal for every policy{})",
        runs[0].output_checksum,
        if args.per_category {
            ", per category"
        } else {
            ""
        }
    );
    if let Some(path) = &args.json {
        let doc = ReplayReport { runs };
        residency_core::error::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The flags clap cannot check alone.
fn check_flags(args: &ReplayArgs) -> Result<()> {
    if let Some(seconds) = args
        .replan_every_seconds
        .filter(|s| !(s.is_finite() && *s > 0.0))
    {
        bail!("--replan-every-seconds {seconds}: give a positive number of seconds");
    }
    if !(0.0..=1.0).contains(&args.pin_share) {
        bail!(
            "--pin-share {}: give a share between 0 and 1",
            args.pin_share
        );
    }
    Ok(())
}

/// The tokens to replay (those outside --train-categories, else all) and
/// the routing counts of the training tokens, per `(MoE layer, expert)`.
fn split_held_out(
    tokens: &[TokenRoutes],
    checkpoint: &Checkpoint,
    args: &ReplayArgs,
    notes: &mut Vec<String>,
) -> Result<(Vec<TokenRoutes>, Vec<u64>)> {
    let in_training = |c: &Option<String>| match &args.train_categories {
        Some(train) => c.as_ref().is_some_and(|c| train.contains(c)),
        None => true,
    };
    let eval: Vec<_> = match &args.train_categories {
        Some(_) => tokens
            .iter()
            .filter(|t| !in_training(&t.category))
            .cloned()
            .collect(),
        None => {
            notes.push("learning policies learned on the replayed tokens (in-sample); --train-categories holds some out".into());
            tokens.to_vec()
        }
    };
    if eval.is_empty() {
        bail!(
            "{}: no token left to replay (check --categories and --train-categories against the trace's categories)",
            args.trace.display()
        );
    }
    let experts = checkpoint.config.experts;
    let mut train_counts = vec![0u64; experts * checkpoint.config.moe_layers().len()];
    for t in tokens.iter().filter(|t| in_training(&t.category)) {
        for (l, route) in t.routes.iter().enumerate() {
            for &e in route {
                train_counts[l * experts + e as usize] += 1;
            }
        }
    }
    Ok((eval, train_counts))
}

/// How the re-planner prices a move: from the profile's fastest drive into
/// RAM node 0.
fn drive_to_ram(profile: &HardwareProfile) -> MoveLink {
    let mut resources = Resources::from_profile(profile);
    if resources.drive_read_bytes_per_s.iter().all(|&r| r <= 0.0) {
        // The profile describes no drive the checkpoint is read from: moves
        // are priced at 1 GB/s (as a miss falls back to 1 ms).
        resources.drive_numa = vec![0];
        resources.drive_read_bytes_per_s = vec![1e9];
        resources.drive_latency_seconds = vec![0.0];
    }
    let fastest = (0..resources.drives())
        .max_by(|&a, &b| {
            let rate = &resources.drive_read_bytes_per_s;
            rate[a].total_cmp(&rate[b])
        })
        .expect("one drive at least");
    MoveLink {
        resources,
        from: Place::Disk(fastest),
        to: Place::Ram(0),
    }
}

/// One replay of each category's tokens, its runs labelled with it.
fn replay_per_category(
    checkpoint: &Checkpoint,
    eval: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<ReplayRun>> {
    let mut categories: Vec<Option<String>> = eval.iter().map(|t| t.category.clone()).collect();
    categories.sort();
    categories.dedup();
    let mut runs = Vec::new();
    for category in categories {
        let tokens: Vec<_> = eval
            .iter()
            .filter(|t| t.category == category)
            .cloned()
            .collect();
        for mut run in replay(checkpoint, &tokens, train_counts, config)? {
            run.category = category.clone();
            runs.push(run);
        }
    }
    Ok(runs)
}

fn print_runs(runs: &[ReplayRun]) {
    println!(
        "  {:<10} {:>12} {:>5} {:>8} {:>8} {:>8} {:>10} {:>11} {:>8} {:>8} {:>8} {:>10}",
        "policy",
        "category",
        "round",
        "tok/s",
        "p50 ms",
        "p99 ms",
        "felt s",
        "read",
        "misses",
        "bypassed",
        "evicted",
        "moved"
    );
    for r in runs {
        println!(
            "  {:<10} {:>12} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>10.3} {:>11} {:>8} {:>8} {:>8} {:>10}",
            r.policy,
            r.category.as_deref().unwrap_or("all"),
            r.round,
            r.tok_per_s,
            r.p50_ms,
            r.p99_ms,
            r.felt_wait_seconds,
            Bytes(r.bytes_read).to_string(),
            r.misses,
            r.rejections + r.bypasses,
            r.evictions,
            Bytes(r.migration_bytes).to_string()
        );
    }
}

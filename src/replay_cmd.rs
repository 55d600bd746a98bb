//! `residency replay`: a routing trace through the executor's real data
//! path against a checkpoint, per policy; arguments, the
//! table and `--json`. The work is `residency_runtime::serve::replay`.

use crate::checkpoint_cmd::model_from_path;
use crate::flags::{more_help, named, BackendArg, ModelArg, OnlineArgs, ProfileArg, MISS_PRICE};
use anyhow::{bail, Context, Result};
use residency_core::cost::{Place, Resources};
use residency_core::profile::HardwareProfile;
use residency_core::units::{parse_size, Bytes, BytesPerSecond};
use residency_formats::heat::{read_trace, HeatContext, HeatFormat, TokenRoutes, Trace};
use residency_hwprofile::Spread;
use residency_policy::{PolicyKind, PolicyParams};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::card_window::{choose_card_window, CardWindowChoice};
use residency_runtime::serve::gpu_tier::{VramAllocation, VramConfig};
use residency_runtime::serve::replan::{MoveLink, ReplanParams};
use residency_runtime::serve::replay::{
    check_geometry, expert_kernel, predict, replay, PinShareChoice, PinShareSource, ReplayConfig,
    ReplayReport, ReplayRun, ServePolicy,
};
use residency_runtime::serve::vram::VramPolicy;
use residency_sim::allocation::Allocation;
use residency_sim::arms::{SimOptions, Start};
use residency_sim::felt::{fastest_drive, read_seconds};
use residency_sim::job::{cut_trace, Budget, Cut};
use residency_sim::pin_share::recommend_held_out_pin_share;
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
    /// `replan`: share of the budget for pins, 0 to 1, or `auto`: the
    /// share `simulate --gate` recommends for the training categories, each
    /// held out in turn, at this budget (with fewer than two: none).
    #[arg(long, value_parser = PinShareArg::parse, default_value = "auto")]
    pin_share: PinShareArg,
    /// `replan`: tokens between passes.
    #[arg(long, default_value_t = ReplanParams::default().every_tokens)]
    replan_every: u64,
    /// `replan`: also pass after this many seconds, when sooner.
    #[arg(long)]
    replan_every_seconds: Option<f64>,
    /// The policy inside each layer of uniform, dynamic-offline and
    /// dynamic (dynamic: lru, fifo, sieve, s3fifo, lfu or lfru).
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
    /// VRAM for a tier of experts on CUDA device 0 in front of every store
    /// arm, computed there: a size (`8GiB`) or a share of all experts
    /// (`10%`); none by default. Needs a packed checkpoint
    /// (`gen-checkpoint --dtype int4`); where no CUDA device can run it,
    /// the tier is off and said so.
    #[arg(long, value_parser = Budget::parse)]
    vram_budget: Option<Budget>,
    /// What decides the card's residents: `lfru` (Colibri's rule, a
    /// candidate over the coldest by a quarter plus 4), another cache
    /// policy, `cost` (the CPU seconds a copy saves against its upload),
    /// `plan` (the training knapsack, kept), `replan` (the training
    /// knapsack, re-planned from live heat every 4 tokens, moving what
    /// pays for its upload), or `belady`, offline (it sees the future; not
    /// a bound where uploads are rationed).
    #[arg(long, value_parser = named::<VramPolicy>(), default_value = "lfru")]
    vram_policy: VramPolicy,
    /// Bytes uploaded to the card a token, on average.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    vram_allowance: Bytes,
    /// The card's `lfru`: heat halved every this many requests, or `auto`:
    /// the window that computes the most experts on the card when the
    /// simulator replays the training categories, each held out in turn
    /// after a seed of the others.
    #[arg(long, value_parser = HalveEveryArg::parse, default_value_t = HalveEveryArg::Requests(PolicyParams::default().halve_every_ticks))]
    vram_halve_every: HalveEveryArg,
    /// The card's budget: `global` (one cache for all experts) or
    /// `dynamic` (one a layer, moved between layers by the online
    /// allocator of `--online-*`; needs a `--vram-policy` that resizes,
    /// e.g. lfru).
    #[arg(long, value_parser = named::<VramAllocation>(), default_value = "global")]
    vram_allocation: VramAllocation,
    /// Print what the simulator predicts for every arm it has (misses,
    /// felt wait, experts on the card) and serve nothing: no reads, no
    /// card needed. With --vram-budget the card is simulated whether or
    /// not one is here.
    #[arg(long)]
    predict_only: bool,
    #[command(flatten)]
    backend: BackendArg,
    /// Write `{"runs":[...]}` here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--pin-share`: a share of the budget, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PinShareArg {
    Auto,
    Share(f64),
}

impl PinShareArg {
    fn parse(text: &str) -> Result<PinShareArg, String> {
        let text = text.trim();
        if text == "auto" {
            return Ok(PinShareArg::Auto);
        }
        match text.parse::<f64>() {
            Ok(share) if (0.0..=1.0).contains(&share) => Ok(PinShareArg::Share(share)),
            _ => Err(format!(
                "`{text}`: give a share of the budget between 0 and 1 (e.g. `0.5`) or `auto`"
            )),
        }
    }
}

/// `--vram-halve-every`: requests, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum HalveEveryArg {
    Auto,
    Requests(u64),
}

impl HalveEveryArg {
    fn parse(text: &str) -> Result<HalveEveryArg, String> {
        let text = text.trim();
        if text == "auto" {
            return Ok(HalveEveryArg::Auto);
        }
        match text.parse::<u64>() {
            Ok(requests) if requests > 0 => Ok(HalveEveryArg::Requests(requests)),
            _ => Err(format!(
                "`{text}`: give a positive number of requests (e.g. `5000`) or `auto`"
            )),
        }
    }
}

impl std::fmt::Display for HalveEveryArg {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            HalveEveryArg::Auto => write!(f, "auto"),
            HalveEveryArg::Requests(requests) => write!(f, "{requests}"),
        }
    }
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
    let (eval, train) = split_held_out(&trace.tokens, args, &mut notes)?;
    // Training tokens are counted per (layer, expert) and simulated, so
    // they are checked too, not only the ones served.
    check_geometry(&checkpoint, trace.tokens.iter())
        .with_context(|| args.trace.display().to_string())?;
    let train_counts = count_routes(&train, &checkpoint);
    let seed = seed_tokens(&trace.tokens, args)?;
    let expert_bytes: Vec<u64> = checkpoint
        .config
        .moe_layers()
        .into_iter()
        .map(|layer| {
            checkpoint.object_bytes(&residency_runtime::identity::ObjectKey::Expert {
                layer: layer as u32,
                expert: 0,
            })
        })
        .collect();
    let experts = checkpoint.config.experts as u64;
    let all_bytes: u64 = expert_bytes.iter().map(|&b| b * experts).sum();
    let ram_budget_bytes = args.ram_budget.bytes(all_bytes);
    let miss_seconds = read_seconds(&profile, expert_bytes[0]).unwrap_or(1e-3);
    let pin_share = if args.policy.contains(&ServePolicy::Replan) {
        Some(choose_pin_share(
            args,
            &train,
            &checkpoint,
            &expert_bytes,
            ram_budget_bytes,
            miss_seconds,
        )?)
    } else {
        None
    };
    let kernel = expert_kernel(&checkpoint);
    notes.push(kernel.describe());
    let online = args.online.params()?;
    let dynamic_vram = args.vram_allocation == VramAllocation::Dynamic;
    if dynamic_vram && !args.vram_policy.resizes() {
        bail!(
            "--vram-policy {}: --vram-allocation dynamic moves per-layer budgets, which needs {} inside each layer; give --vram-policy lfru",
            args.vram_policy,
            PolicyKind::resizing_names()
        );
    }
    let card = args.vram_budget.as_ref().map(|budget| VramConfig {
        budget_bytes: budget.bytes(all_bytes),
        policy: args.vram_policy,
        allowance_bytes_per_token: args.vram_allowance.0,
        halve_every_ticks: match args.vram_halve_every {
            HalveEveryArg::Requests(requests) => requests,
            // Tried beside the windows `auto` chooses from.
            HalveEveryArg::Auto => PolicyParams::default().halve_every_ticks,
        },
        dynamic: dynamic_vram.then(|| online.clone()),
        link: ram_to_card(&profile),
    });
    let vram = match card {
        None => None,
        Some(card) if args.predict_only => Some(card),
        Some(card) => match residency_runtime::serve::gpu_tier::available(&kernel) {
            Ok(()) => Some(card),
            Err(why) => {
                notes.push(format!(
                    "--vram-budget: the VRAM tier is off, every expert takes the CPU path: {why}"
                ));
                None
            }
        },
    };
    let mut config = ReplayConfig {
        policies: args.policy.clone(),
        ram_budget_bytes,
        // Only `replan` pins a share.
        pin_share: pin_share.as_ref().map_or(0.0, |c| c.share),
        replan: ReplanParams {
            every_tokens: args.replan_every.max(1),
            every_seconds: args.replan_every_seconds,
            ..ReplanParams::default()
        },
        rounds: args.rounds,
        miss_seconds,
        hit_compute_bytes_per_s: kernel.bytes_per_s(expert_bytes[0], checkpoint.config.hidden),
        reads_at_once: fastest_drive(&profile).map_or(1, |d| d.read_concurrency),
        move_link: drive_to_ram(&profile),
        backend: args.backend.backend,
        warm: args.warm,
        seed,
        layer_policy: args.layer_policy,
        online,
        vram,
    };
    let card_window = match (args.vram_halve_every, &config.vram) {
        (HalveEveryArg::Auto, Some(vram)) => Some(choose_card_window(
            &checkpoint,
            &train,
            &train_counts,
            &config,
            vram,
            args.seed_tokens,
        )?),
        _ => None,
    };
    if let (Some(choice), Some(vram)) = (&card_window, config.vram.as_mut()) {
        vram.halve_every_ticks = choice.halve_every_ticks;
    }
    crate::notes(&notes);
    if let Some(vram) = &config.vram {
        println!(
            "card: {} of VRAM under {}",
            Bytes(vram.budget_bytes),
            vram.policy.label()
        );
    }
    if let Some(choice) = &card_window {
        print_card_window(choice);
    }
    if args.predict_only {
        return print_predictions(
            &checkpoint,
            &eval,
            &train_counts,
            &config,
            args.per_category,
        );
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
    if let Some(choice) = &pin_share {
        print_pin_share(choice);
    }
    print_runs(&runs);
    print_simulated(&runs, &config);
    // Runs of the same tokens must compute the same outputs: bit for bit
    // on the CPU, to rounding where the card computed some experts. Each
    // layer's output is the next one's input, quantised again, so a
    // rounding difference can flip a quantised value and grows along the
    // tokens: on the H200, 192 tokens of 4 layers summed to within
    // 1.2e-4..2.2e-4 of the CPU-only run (docs/serving.md).
    let on_card = runs.iter().any(|r| r.gpu_experts > 0);
    let differs = runs.iter().any(|a| {
        runs.iter().any(|b| {
            a.category == b.category
                && if on_card {
                    (a.output_sum - b.output_sum).abs() > 1e-3 * a.output_sum.abs().max(1.0)
                } else {
                    a.output_checksum != b.output_checksum
                }
        })
    });
    if differs {
        bail!("the outputs differ between policies, which only place bytes: a bug; please report it with this command");
    }
    let per_category = if args.per_category {
        ", per category"
    } else {
        ""
    };
    if on_card {
        println!(
            "output sum {:.6e} (equal to rounding for every policy{per_category}: the card computed some experts)",
            runs[0].output_sum
        );
    } else {
        println!(
            "output checksum {} (equal for every policy{per_category})",
            runs[0].output_checksum
        );
    }
    if let Some(path) = &args.json {
        let doc = ReplayReport {
            pin_share,
            card_window,
            runs,
        };
        residency_core::error::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The card's `lfru` window `auto` chose, and what each window computed.
fn print_card_window(choice: &CardWindowChoice) {
    let judged_on = if choice.held_out.is_empty() {
        "on the training tokens, in-sample (name two or more --train-categories to hold each out)"
            .to_string()
    } else {
        format!("on {} held out in turn", choice.held_out.join(", "))
    };
    println!(
        "card: lfru halves its heat every {} requests (--vram-halve-every auto, simulated {judged_on}; experts on the card per window: {})",
        choice.halve_every_ticks,
        choice
            .judged
            .iter()
            .map(|t| format!("{} {}", t.halve_every_ticks, t.experts_on_card))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The flags clap cannot check alone.
fn check_flags(args: &ReplayArgs) -> Result<()> {
    if args.vram_halve_every == HalveEveryArg::Auto {
        if args.vram_budget.is_none() {
            bail!("--vram-halve-every auto tunes the card's lfru; give --vram-budget too");
        }
        if args.vram_policy != VramPolicy::Lfru {
            bail!(
                "--vram-halve-every auto tunes lfru's heat window; --vram-policy {} has none: give --vram-policy lfru",
                args.vram_policy
            );
        }
    }
    if let Some(seconds) = args
        .replan_every_seconds
        .filter(|s| !(s.is_finite() && *s > 0.0))
    {
        bail!("--replan-every-seconds {seconds}: give a positive number of seconds");
    }
    Ok(())
}

/// The tokens to replay (those outside --train-categories, else all) and
/// those learned on (those of --train-categories, else all).
fn split_held_out(
    tokens: &[TokenRoutes],
    args: &ReplayArgs,
    notes: &mut Vec<String>,
) -> Result<(Vec<TokenRoutes>, Vec<TokenRoutes>)> {
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
    let train = tokens
        .iter()
        .filter(|t| in_training(&t.category))
        .cloned()
        .collect();
    Ok((eval, train))
}

/// Requests per `(MoE layer, expert)`, numbered `l * experts + e`, of
/// tokens whose geometry was checked against the checkpoint.
fn count_routes(tokens: &[TokenRoutes], checkpoint: &Checkpoint) -> Vec<u64> {
    let experts = checkpoint.config.experts;
    let mut counts = vec![0u64; experts * checkpoint.config.moe_layers().len()];
    for t in tokens {
        for (l, route) in t.routes.iter().enumerate() {
            for &e in route {
                counts[l * experts + e as usize] += 1;
            }
        }
    }
    counts
}

/// `replan`'s share of the budget: the one given, or with `auto` the one
/// `simulate --gate` recommends (`sim::pin_share`, the same code) for the
/// training tokens alone, each of their categories held out in turn, at
/// the replay's budget in one global cache, as `replan` has. The replayed
/// categories are never simulated: the choice must be as held out as the
/// pins. Seeded replays are simulated seeded (`simulate --seeded`): cold,
/// pins are a free warm start that LRU lacks, which short runs reward
/// whether or not the pins are worth their bytes.
fn choose_pin_share(
    args: &ReplayArgs,
    train: &[TokenRoutes],
    checkpoint: &Checkpoint,
    expert_bytes: &[u64],
    budget_bytes: u64,
    miss_seconds: f64,
) -> Result<PinShareChoice> {
    let seeded = args.seed_tokens > 0;
    if let PinShareArg::Share(share) = args.pin_share {
        return Ok(PinShareChoice {
            share,
            chosen_by: PinShareSource::Flag,
            held_out_categories: Vec::new(),
            seeded,
            recommendation: None,
        });
    }
    let layers = expert_bytes.len();
    let trace = Trace {
        model: None,
        format: HeatFormat::Jsonl,
        experts: vec![checkpoint.config.experts; layers],
        tokens: train.to_vec(),
    };
    let categories: Vec<String> = trace.categories().into_iter().map(String::from).collect();
    if categories.len() < 2 {
        // Nothing to hold out, so no share can be shown to pay: the rule's
        // tie (every share unjudged) goes to the smallest, no pins, and the
        // run goes on as LRU would rather than stopping a default.
        return Ok(PinShareChoice {
            share: 0.0,
            chosen_by: PinShareSource::Auto,
            held_out_categories: categories,
            seeded,
            recommendation: None,
        });
    }
    let objects = checkpoint.config.experts * layers;
    let options = SimOptions {
        start: if seeded { Start::Seeded } else { Start::Cold },
        ..SimOptions::default()
    };
    let recommendation = recommend_held_out_pin_share(
        &trace,
        expert_bytes,
        &vec![miss_seconds; objects],
        budget_bytes,
        Allocation::Global,
        &options,
    )?;
    Ok(PinShareChoice {
        share: recommendation.recommended_share,
        chosen_by: PinShareSource::Auto,
        held_out_categories: categories,
        seeded,
        recommendation: Some(recommendation),
    })
}

/// Which share `replan` pins, and why.
fn print_pin_share(choice: &PinShareChoice) {
    let Some(r) = &choice.recommendation else {
        let why = match choice.chosen_by {
            PinShareSource::Flag => format!("--pin-share {}", choice.share),
            PinShareSource::Auto => format!(
                "--pin-share auto: pins are judged on a training category held out from the others, and the training tokens have {} ({}); name two or more with --train-categories, or give a share, e.g. --pin-share 0.5",
                choice.held_out_categories.len(),
                if choice.held_out_categories.is_empty() {
                    "none".into()
                } else {
                    choice.held_out_categories.join(", ")
                }
            ),
        };
        println!(
            "replan pins {:.0}% of the budget ({why})",
            100.0 * choice.share
        );
        return;
    };
    let felt: Vec<String> = r
        .shares
        .iter()
        .map(|s| format!("{:.0}%: {:.3}", 100.0 * s.share, s.felt_wait_seconds))
        .collect();
    let why = if choice.share == 0.0 {
        "no pinned share waits less than LRU alone (recency wins)"
    } else {
        "the least held-out felt wait"
    };
    println!(
        "replan pins {:.0}% of the budget (--pin-share auto: {why}; pinned-lru simulated {} on {}, each held out in turn, felt wait s {})",
        100.0 * choice.share,
        if choice.seeded { "seeded" } else { "cold" },
        choice.held_out_categories.join(", "),
        felt.join("  ")
    );
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

/// The link the card's copies take: RAM to the profile's first GPU, at
/// its upload rate; free where the profile has no GPU (RAM to RAM).
fn ram_to_card(profile: &HardwareProfile) -> MoveLink {
    MoveLink {
        resources: Resources::from_profile(profile),
        from: Place::Ram(0),
        to: if profile.gpus.is_empty() {
            Place::Ram(0)
        } else {
            Place::Gpu(0)
        },
    }
}

/// `eval` split by category, in name order.
fn by_category(eval: &[TokenRoutes]) -> Vec<(Option<String>, Vec<TokenRoutes>)> {
    let mut categories: Vec<Option<String>> = eval.iter().map(|t| t.category.clone()).collect();
    categories.sort();
    categories.dedup();
    categories
        .into_iter()
        .map(|category| {
            let tokens = eval
                .iter()
                .filter(|t| t.category == category)
                .cloned()
                .collect();
            (category, tokens)
        })
        .collect()
}

/// `--predict-only`: the simulator's misses, felt wait and experts on
/// the card for every arm it has, all tokens at once or per category.
fn print_predictions(
    checkpoint: &Checkpoint,
    eval: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
    per_category: bool,
) -> Result<()> {
    let parts = if per_category {
        by_category(eval)
    } else {
        vec![(None, eval.to_vec())]
    };
    println!(
        "predicted, serving nothing: {} tokens, {} of RAM for experts (a miss reads for {:.3} ms, hits computed at {})",
        eval.len(),
        Bytes(config.ram_budget_bytes),
        config.miss_seconds * 1e3,
        BytesPerSecond(config.hit_compute_bytes_per_s)
    );
    println!(
        "  {:<16} {:>12} {:>10} {:>10} {:>8}",
        "policy", "category", "misses", "felt s", "on card"
    );
    for (category, tokens) in parts {
        for (policy, p) in predict(checkpoint, &tokens, train_counts, config)? {
            println!(
                "  {:<16} {:>12} {:>10} {:>10.3} {:>8}",
                policy.name(),
                category.as_deref().unwrap_or("all"),
                p.misses,
                p.felt_wait_seconds,
                p.gpu_experts
            );
        }
    }
    Ok(())
}

/// One replay of each category's tokens, its runs labelled with it.
fn replay_per_category(
    checkpoint: &Checkpoint,
    eval: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<ReplayRun>> {
    let mut runs = Vec::new();
    for (category, tokens) in by_category(eval) {
        for mut run in replay(checkpoint, &tokens, train_counts, config)? {
            run.category = category.clone();
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Per arm (and category), the simulator's prediction beside the median
/// of the measured rounds, and their ratios.
fn print_simulated(runs: &[ReplayRun], config: &ReplayConfig) {
    let mut arms: Vec<(&str, Option<&str>)> = Vec::new();
    for r in runs.iter().filter(|r| r.simulated.is_some()) {
        let arm = (r.policy.as_str(), r.category.as_deref());
        if !arms.contains(&arm) {
            arms.push(arm);
        }
    }
    if arms.is_empty() {
        return;
    }
    // The card's columns only where the simulator had a VRAM tier.
    let on_card = runs
        .iter()
        .filter_map(|r| r.simulated.as_ref())
        .any(|s| s.gpu_experts > 0);
    let card = |text: String| if on_card { text } else { String::new() };
    println!(
        "the simulator on the same tokens and budget (a miss reads for {:.3} ms, {} at once, less in each layer of a token what the compute before it hides, at {}), against the median of the rounds:",
        config.miss_seconds * 1e3,
        config.reads_at_once,
        BytesPerSecond(config.hit_compute_bytes_per_s)
    );
    println!(
        "  (at the run's reads: each miss read in the time the run's reads took one; and its rates: the hits computed at the run's own rate too)"
    );
    if on_card {
        println!(
            "  (with the VRAM tier: on what reaches the RAM tier, the card deciding as the run's does, each copy landing while the next token is served)"
        );
    }
    println!(
        "  {:<16} {:>12} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>12} {:>12}{}",
        "policy",
        "category",
        "sim misses",
        "misses",
        "ratio",
        "sim felt s",
        "felt s",
        "ratio",
        "run reads",
        "run rates",
        card(format!(" {:>11} {:>8}", "sim on card", "on card"))
    );
    for (policy, category) in arms {
        let of_arm: Vec<&ReplayRun> = runs
            .iter()
            .filter(|r| r.policy == policy && r.category.as_deref() == category)
            .collect();
        let simulated = of_arm[0].simulated.as_ref().expect("filtered above");
        let median = |values: Vec<f64>| Spread::of(&values).map_or(0.0, |s| s.median);
        let misses = median(of_arm.iter().map(|r| r.misses as f64).collect());
        let felt = median(of_arm.iter().map(|r| r.felt_wait_seconds).collect());
        let gpu_experts = median(of_arm.iter().map(|r| r.gpu_experts as f64).collect());
        let ratio = |simulated: f64| simulated / felt.max(1e-9);
        println!(
            "  {:<16} {:>12} {:>10} {:>10} {:>7.3} {:>10.3} {:>10.3} {:>7.3} {:>12.3} {:>12.3}{}",
            policy,
            category.unwrap_or("all"),
            simulated.misses,
            misses,
            simulated.misses as f64 / misses.max(1.0),
            simulated.felt_wait_seconds,
            felt,
            ratio(simulated.felt_wait_seconds),
            ratio(simulated.felt_wait_seconds_at_run_reads),
            ratio(simulated.felt_wait_seconds_at_run_rates),
            card(format!(" {:>11} {:>8}", simulated.gpu_experts, gpu_experts))
        );
    }
}

fn print_runs(runs: &[ReplayRun]) {
    // The card's column only where a VRAM tier computed something.
    let on_card = runs.iter().any(|r| r.gpu_experts > 0);
    let card = |text: String| if on_card { text } else { String::new() };
    println!(
        "  {:<10} {:>12} {:>5} {:>8} {:>8} {:>8} {:>10} {:>11} {:>8} {:>8} {:>8} {:>10}{}",
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
        "moved",
        card(format!(" {:>8}", "on card"))
    );
    for r in runs {
        println!(
            "  {:<10} {:>12} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>10.3} {:>11} {:>8} {:>8} {:>8} {:>10}{}",
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
            Bytes(r.migration_bytes).to_string(),
            card(format!(" {:>8}", r.gpu_experts))
        );
    }
}

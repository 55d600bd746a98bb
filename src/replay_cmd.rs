//! `residency replay`: a routing trace through the executor's real data
//! path against a checkpoint, per policy; arguments, the run's steps and
//! `--json`. The work is `residency_lab::replay`; the tokens
//! and prices it is given are in `setup`, its tables in `table`.

mod setup;
mod table;

use crate::flags::{more_help, named, BackendArg, ModelArg, OnlineArgs, ProfileArg, MISS_PRICE};
use crate::inputs::model_from_path;
use anyhow::{bail, Context, Result};
use residency_core::model::Model;
use residency_core::names::Named;
use residency_core::profile::HardwareProfile;
use residency_core::units::{parse_size, Bytes};
use residency_formats::heat::{read_heat, read_trace, HeatContext, HeatFormat, TokenRoutes};
use residency_lab::replay::card_choice::choose_card;
use residency_lab::replay::{
    check_geometry, expert_kernel, replay, PinShareChoice, ReplayConfig, ReplayReport, ReplayRun,
    ServePolicy,
};
use residency_policy::online::OnlineParams;
use residency_policy::{PolicyKind, PolicyParams};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::compute::ExpertKernel;
use residency_runtime::serve::gpu_tier::{VramAllocation, VramConfig};
use residency_runtime::serve::replan::ReplanParams;
use residency_runtime::serve::vram::VramPolicy;
use residency_sim::felt::{fastest_drive, read_seconds};
use residency_sim::job::{cut_trace, Budget, Cut};
use setup::{choose_pin_share, drive_to_ram, ram_to_card, replay_per_category, split_held_out};
use std::path::{Path, PathBuf};

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
    /// Learn from this heat instead of training tokens: any format `heat`
    /// reads (an importance matrix, SGLang's recorder, ...), counts per MoE
    /// layer and expert rounded to whole requests.
    #[arg(long)]
    heat: Option<PathBuf>,
    /// The heat's format, when detection is not wanted.
    #[arg(long, value_parser = named::<HeatFormat>(), requires = "heat")]
    heat_format: Option<HeatFormat>,
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
    /// pays for its upload), `belady`, offline (it sees the future; not
    /// a bound where uploads are rationed), or `auto`: the rule an engine
    /// can run whose tokens the simulator finds quickest on the training
    /// categories, each held out in turn.
    #[arg(long, value_parser = VramPolicyArg::parse, default_value = "lfru")]
    vram_policy: VramPolicyArg,
    /// Bytes uploaded to the card a token, on average.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    vram_allowance: Bytes,
    /// The card's `lfru`: heat halved every this many requests, or `auto`:
    /// the window whose tokens take the least time (the CPU's share of the
    /// experts plus the RAM tier's felt wait) when the simulator replays
    /// the training categories, each held out in turn after a seed of the
    /// others.
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
    /// Threads that multiply the experts on the CPU, each pinned to a core
    /// of the first NUMA node, as `bench` runs a CPU stage (default: every
    /// core of it); 1: the serving thread alone.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    compute_threads: Option<u32>,
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

/// `--vram-policy`: a rule, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum VramPolicyArg {
    Auto,
    Rule(VramPolicy),
}

impl VramPolicyArg {
    fn parse(text: &str) -> Result<VramPolicyArg, String> {
        match text.trim() {
            "auto" => Ok(VramPolicyArg::Auto),
            text => VramPolicy::parse(text)
                .map(VramPolicyArg::Rule)
                .map_err(|e| format!("{e}, or `auto`")),
        }
    }

    /// The rules `auto` chooses from: every one an engine can run (not
    /// the offline `belady`), those that resize alone where the card's
    /// budget moves between layers; else the rule given.
    fn candidates(self, per_layer: bool) -> Vec<VramPolicy> {
        match self {
            VramPolicyArg::Rule(rule) => vec![rule],
            VramPolicyArg::Auto => VramPolicy::ALL
                .iter()
                .copied()
                .filter(|p| !p.is_offline() && (!per_layer || p.resizes()))
                .collect(),
        }
    }

    /// The rule the card starts from: the one given, or `lfru` until
    /// `auto` has chosen.
    fn rule(self) -> VramPolicy {
        match self {
            VramPolicyArg::Rule(rule) => rule,
            VramPolicyArg::Auto => VramPolicy::Lfru,
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
    let tokens = load_tokens(args, &checkpoint, &model, &mut notes)?;
    let (mut config, pin_share) = configure(args, &checkpoint, &profile, &tokens, &mut notes)?;
    let tune_window = args.vram_halve_every == HalveEveryArg::Auto;
    let card_choice = match (&config.vram, args.vram_policy) {
        (Some(vram), policy) if tune_window || policy == VramPolicyArg::Auto => {
            let rules = policy.candidates(vram.dynamic.is_some());
            let (chosen, choice) = choose_card(
                &checkpoint,
                &tokens.train,
                args.heat.is_some().then_some(&tokens.train_counts[..]),
                &config,
                (vram, &rules, tune_window),
                args.seed_tokens,
            )?;
            config.vram = Some(chosen);
            Some(choice)
        }
        _ => None,
    };
    crate::term::notes(&notes);
    if let Some(vram) = &config.vram {
        println!(
            "card: {} of VRAM under {}",
            Bytes(vram.budget_bytes),
            vram.policy.label()
        );
    }
    if let Some(choice) = &card_choice {
        table::print_card_choice(choice);
    }
    let Tokens {
        eval, train_counts, ..
    } = &tokens;
    if args.predict_only {
        return table::print_predictions(
            &checkpoint,
            eval,
            train_counts,
            &config,
            args.per_category,
        );
    }
    let runs = if args.per_category {
        replay_per_category(&checkpoint, eval, train_counts, &config)?
    } else {
        replay(&checkpoint, eval, train_counts, &config)?
    };
    println!(
        "replay: {} tokens of {} on {} ({} of RAM for experts)",
        eval.len(),
        args.trace.display(),
        args.checkpoint.display(),
        Bytes(config.ram_budget_bytes)
    );
    if let Some(choice) = &pin_share {
        table::print_pin_share(choice);
    }
    table::print_runs(&runs);
    table::print_simulated(&runs, &config);
    table::print_bound(&runs, &config);
    check_outputs(&runs, args.per_category)?;
    if let Some(path) = &args.json {
        let doc = ReplayReport {
            pin_share,
            card_choice,
            runs,
        };
        residency_core::error::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The trace's tokens as the replay uses them.
struct Tokens {
    /// The tokens served.
    eval: Vec<TokenRoutes>,
    /// The tokens learned on.
    train: Vec<TokenRoutes>,
    /// Requests per `(MoE layer, expert)` of `train`.
    train_counts: Vec<u64>,
    /// The tokens served before the measured ones (`--seed-tokens`).
    seed: Vec<TokenRoutes>,
}

/// The trace, cut to the checkpoint's MoE layers and the flags' tokens and
/// categories, split into served and training tokens, its geometry
/// checked against the checkpoint.
fn load_tokens(
    args: &ReplayArgs,
    checkpoint: &Checkpoint,
    model: &Model,
    notes: &mut Vec<String>,
) -> Result<Tokens> {
    let mut trace = read_trace(
        &args.trace,
        args.trace_format,
        &HeatContext::for_model(model),
        notes,
    )?;
    let cut = Cut {
        tokens: args.tokens,
        layers: Some(checkpoint.config.moe_layers().len()),
        categories: args.categories.clone(),
    };
    cut_trace(&mut trace, &cut, notes);
    let (eval, train) = split_held_out(&trace.tokens, args, notes)?;
    // Training tokens are counted per (layer, expert) and simulated, so
    // they are checked too, not only the ones served.
    check_geometry(checkpoint, trace.tokens.iter())
        .with_context(|| args.trace.display().to_string())?;
    let train_counts = match &args.heat {
        Some(file) => heat_counts(file, args.heat_format, model, checkpoint, notes)?,
        None => residency_lab::replay::count_routes(&train, checkpoint),
    };
    let seed = seed_tokens(&trace.tokens, args)?;
    Ok(Tokens {
        eval,
        train,
        train_counts,
        seed,
    })
}

/// `--heat`'s counts per (MoE layer, expert) of the checkpoint, rounded to
/// whole requests: its first MoE layers, as the trace is cut to them.
fn heat_counts(
    file: &Path,
    format: Option<HeatFormat>,
    model: &Model,
    checkpoint: &Checkpoint,
    notes: &mut Vec<String>,
) -> Result<Vec<u64>> {
    let heat = read_heat(file, format, &HeatContext::for_model(model), notes)?;
    let (layers, experts) = (
        checkpoint.config.moe_layers().len(),
        checkpoint.config.experts,
    );
    let rows = &heat.total.counts;
    if rows.len() < layers || rows.iter().any(|row| row.len() != experts) {
        bail!(
            "{}: heat of {} MoE layers of {} experts, the checkpoint has {layers} of {experts}; give heat of the model the checkpoint was made for",
            file.display(),
            rows.len(),
            rows.first().map_or(0, Vec::len)
        );
    }
    let counts: Vec<u64> = rows[..layers]
        .iter()
        .flatten()
        .map(|&c| c.round() as u64)
        .collect();
    if counts.iter().all(|&c| c == 0) {
        bail!(
            "{}: every count rounds to zero; give counts of requests, not rates",
            file.display()
        );
    }
    Ok(counts)
}

/// The replay's configuration from the flags, the checkpoint and the
/// profile: budgets, `replan`'s pin share, the miss and hit prices, the
/// card's tier; and the pin share's choice, to print and report.
fn configure(
    args: &ReplayArgs,
    checkpoint: &Checkpoint,
    profile: &HardwareProfile,
    tokens: &Tokens,
    notes: &mut Vec<String>,
) -> Result<(ReplayConfig, Option<PinShareChoice>)> {
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
    let miss_seconds = read_seconds(profile, expert_bytes[0]).unwrap_or(1e-3);
    let pin_share = if args.policy.contains(&ServePolicy::Replan) {
        Some(choose_pin_share(
            args,
            &tokens.train,
            checkpoint,
            &expert_bytes,
            ram_budget_bytes,
            miss_seconds,
        )?)
    } else {
        None
    };
    let compute_cpus = compute_cpus(args.compute_threads, notes);
    let kernel = expert_kernel(checkpoint, &compute_cpus)?;
    notes.push(kernel.describe());
    let online = args.online.params()?;
    let vram = vram_config(args, all_bytes, &online, profile, &kernel, notes)?;
    let config = ReplayConfig {
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
        compute_cpus,
        reads_at_once: fastest_drive(profile).map_or(1, |d| d.read_concurrency),
        move_link: drive_to_ram(profile),
        backend: args.backend.backend,
        warm: args.warm,
        seed: tokens.seed.clone(),
        layer_policy: args.layer_policy,
        online,
        vram,
    };
    Ok((config, pin_share))
}

/// The CPUs of `--compute-threads`: a thread on each core of the first
/// NUMA node (one CPU of each core) by default; more threads than cores
/// share them in turn.
fn compute_cpus(threads: Option<u32>, notes: &mut Vec<String>) -> Vec<u32> {
    let mut cores = residency_hwprofile::system::numa_nodes(notes)
        .into_iter()
        .next()
        .map_or_else(Vec::new, |node| node.core_cpus);
    if cores.is_empty() {
        cores.push(0);
    }
    let wanted = threads.map_or(cores.len(), |t| t as usize);
    if wanted > cores.len() {
        notes.push(format!(
            "--compute-threads {wanted}: the first NUMA node has {} core(s), so threads share them",
            cores.len()
        ));
    }
    cores.into_iter().cycle().take(wanted).collect()
}

/// The card's tier with `--vram-budget` (of `all_bytes`, the experts'
/// bytes), off with a note where the kernel cannot run on a card.
fn vram_config(
    args: &ReplayArgs,
    all_bytes: u64,
    online: &OnlineParams,
    profile: &HardwareProfile,
    kernel: &ExpertKernel,
    notes: &mut Vec<String>,
) -> Result<Option<VramConfig>> {
    let dynamic_vram = args.vram_allocation == VramAllocation::Dynamic;
    if dynamic_vram && !args.vram_policy.rule().resizes() {
        bail!(
            "--vram-policy {}: --vram-allocation dynamic moves per-layer budgets, which needs {} inside each layer; give --vram-policy lfru",
            args.vram_policy.rule(),
            PolicyKind::resizing_names()
        );
    }
    let card = args.vram_budget.as_ref().map(|budget| VramConfig {
        budget_bytes: budget.bytes(all_bytes),
        policy: args.vram_policy.rule(),
        allowance_bytes_per_token: args.vram_allowance.0,
        halve_every_ticks: match args.vram_halve_every {
            HalveEveryArg::Requests(requests) => requests,
            // Tried beside the windows `auto` chooses from.
            HalveEveryArg::Auto => PolicyParams::default().halve_every_ticks,
        },
        dynamic: dynamic_vram.then(|| online.clone()),
        link: ram_to_card(profile),
    });
    Ok(match card {
        None => None,
        Some(card) if args.predict_only => Some(card),
        Some(card) => match residency_runtime::serve::gpu_tier::available(kernel) {
            Ok(()) => Some(card),
            Err(why) => {
                notes.push(format!(
                    "--vram-budget: the VRAM tier is off, every expert takes the CPU path: {why}"
                ));
                None
            }
        },
    })
}

/// Runs of the same tokens must compute the same outputs: bit for bit on
/// the CPU, to rounding where the card computed some experts. Each
/// layer's output is the next one's input, quantised again, so a rounding
/// difference can flip a quantised value and grows along the tokens: on
/// the H200, 192 tokens of 4 layers summed to within 1.2e-4..2.2e-4 of the
/// CPU-only run (docs/serving.md). Prints the output's sum or checksum.
fn check_outputs(runs: &[ReplayRun], per_category: bool) -> Result<()> {
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
    let per_category = if per_category { ", per category" } else { "" };
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
    Ok(())
}

/// The flags clap cannot check alone.
fn check_flags(args: &ReplayArgs) -> Result<()> {
    if args.vram_halve_every == HalveEveryArg::Auto {
        if args.vram_budget.is_none() {
            bail!("--vram-halve-every auto tunes the card's lfru; give --vram-budget too");
        }
        match args.vram_policy {
            VramPolicyArg::Rule(rule) if rule != VramPolicy::Lfru => bail!(
                "--vram-halve-every auto tunes lfru's heat window; --vram-policy {rule} has none: give --vram-policy lfru or auto"
            ),
            _ => {}
        }
    }
    if args.vram_policy == VramPolicyArg::Auto && args.vram_budget.is_none() {
        bail!("--vram-policy auto chooses the card's rule; give --vram-budget too");
    }
    if let Some(seconds) = args
        .replan_every_seconds
        .filter(|s| !(s.is_finite() && *s > 0.0))
    {
        bail!("--replan-every-seconds {seconds}: give a positive number of seconds");
    }
    Ok(())
}

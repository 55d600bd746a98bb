//! `residency bench --sweep`: the strategies a user
//! compares the planner with, each a placement of the same instance, at
//! several VRAM budgets, applied and benched in interleaved rounds; one
//! table of predicted beside measured tok/s, and the fastest per budget.
//!
//! A budget is set through the profile's GPU reserve: every card gets
//! `reserved = vram - budget`, so that each offers `budget` bytes to
//! weights. The strategies at a budget are priced on that one instance:
//! - `plan`: the planner's solve with `residency plan`'s defaults;
//! - `greedy`: design §4's baseline (`residency_solver::greedy`), which is
//!   also Colibri's automatic trunk placement;
//! - `n-cpu-moe`, `exps-cpu`, `fit`: what a llama.cpp user would type
//!   (`export::baselines`);
//! - `cpu`: the greedy baseline of the profile without its cards, so
//!   everything is in RAM, and on the drives where RAM lacks room.
//!
//! Rounds are interleaved (each round runs every configuration once, in
//! order) so that a machine's drift spreads over all of them, and each
//! configuration's store is dropped before the next is applied.

use super::{apply_and_bench, apply_options, write_json, write_report, BenchArgs};
use crate::flags::named;
use anyhow::{bail, Context, Result};
use residency_core::cost::{Instance, Place};
use residency_core::names::Named;
use residency_core::plan::{Plan, PlanInputs};
use residency_core::profile::HardwareProfile;
use residency_core::solution::Solution;
use residency_core::units::{parse_size, Bytes};
use residency_formats::export::baselines::{llama_cpp_strategies, LlamaCppStrategy};
use residency_formats::inputs::{defaults, Inputs};
use residency_lab::bench::{check_runnable, BenchOptions, BenchReport};
use residency_runtime::apply::ApplyOptions;
use residency_runtime::checkpoint::Checkpoint;
use residency_solver::greedy::greedy;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The VRAM budgets when `--budgets` is not given.
const DEFAULT_BUDGETS_GIB: [u64; 4] = [4, 8, 16, 32];

/// `--sweep`'s own flags; each conflicts with `--plan` (the one other
/// mode), since clap counts a `--sweep` left out as present (false) for
/// `requires`.
#[derive(clap::Args)]
pub struct SweepArgs {
    /// VRAM budgets, a comma list (default: 4GiB,8GiB,16GiB,32GiB). At
    /// each, every card's reserve is set to `vram - budget`, so each card
    /// offers the budget to weights; a budget above a card's VRAM is
    /// refused. A profile without cards runs the strategies once.
    #[arg(long, value_delimiter = ',', value_parser = parse_budget, conflicts_with = "plan")]
    pub budgets: Option<Vec<Bytes>>,
    /// Strategies, a comma list (default: all): plan (the planner's solve,
    /// with `residency plan`'s defaults), greedy (design §4's baseline:
    /// Colibri's automatic trunk placement), n-cpu-moe, exps-cpu, fit
    /// (llama.cpp's `--n-cpu-moe N`, `-ot exps=CPU` and a `--fit`-like
    /// greedy), cpu (everything in RAM, then on the drives).
    #[arg(long, value_delimiter = ',', value_parser = named::<SweepStrategy>(), conflicts_with = "plan")]
    pub strategies: Option<Vec<SweepStrategy>>,
    /// Rounds: each runs every (budget, strategy) once, in turn, so that
    /// the machine's drift spreads over all of them; the table gives the
    /// median and range.
    #[arg(long, default_value_t = 5, conflicts_with = "plan")]
    pub rounds: usize,
    /// Keep each (budget, strategy)'s plan file in this directory (created
    /// if absent), to replay a row with `bench --plan`; default: a
    /// temporary directory, removed at the end.
    #[arg(long, conflicts_with = "plan")]
    pub plans_dir: Option<PathBuf>,
}

/// A VRAM budget: a size above zero (a card with no room for weights is
/// the `cpu` strategy).
fn parse_budget(text: &str) -> std::result::Result<Bytes, String> {
    match parse_size(text)? {
        Bytes(0) => Err(format!(
            "`{text}` leaves no VRAM for weights: give a size above 0, e.g. 4GiB (the `cpu` strategy runs without cards)"
        )),
        bytes => Ok(bytes),
    }
}

/// One of the strategies a sweep compares; llama.cpp's are named as
/// `export::baselines` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepStrategy {
    Plan,
    Greedy,
    LlamaCpp(LlamaCppStrategy),
    Cpu,
}

impl SweepStrategy {
    pub const ALL: [SweepStrategy; 6] = [
        SweepStrategy::Plan,
        SweepStrategy::Greedy,
        SweepStrategy::LlamaCpp(LlamaCppStrategy::NCpuMoe),
        SweepStrategy::LlamaCpp(LlamaCppStrategy::ExpsCpu),
        SweepStrategy::LlamaCpp(LlamaCppStrategy::Fit),
        SweepStrategy::Cpu,
    ];
}

impl Named for SweepStrategy {
    const WHAT: &'static str = "strategy";

    fn all() -> &'static [Self] {
        &Self::ALL
    }

    fn name(self) -> &'static str {
        match self {
            SweepStrategy::Plan => "plan",
            SweepStrategy::Greedy => "greedy",
            SweepStrategy::LlamaCpp(s) => s.name(),
            SweepStrategy::Cpu => "cpu",
        }
    }
}

/// What `residency bench --sweep --json` writes
/// (`schemas/bench-sweep-output.schema.json`).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SweepReport {
    pub checkpoint: String,
    pub profile: String,
    /// Decode tokens of each run, at batch 1.
    pub tokens: usize,
    pub seed: u64,
    pub rounds: usize,
    pub budgets: Vec<BudgetSummary>,
    /// One per (budget, strategy), budgets in the order given, strategies
    /// in the order given within each.
    pub rows: Vec<SweepRow>,
}

/// A budget, how it was set, and what was measured fastest at it.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct BudgetSummary {
    /// Bytes each card offers to weights; null: the profile has no card.
    pub budget_bytes: Option<u64>,
    /// Per card, the reserve that sets it: `vram - budget`.
    pub gpu_reserved_bytes: Vec<u64>,
    /// The strategy of the highest median measured tok/s.
    pub fastest: Option<String>,
    pub fastest_tok_per_s: Option<f64>,
    /// `100 x (plan / n-cpu-moe - 1)` of the median measured tok/s, where
    /// both ran.
    pub plan_lead_over_n_cpu_moe_percent: Option<f64>,
    /// The same against greedy.
    pub plan_lead_over_greedy_percent: Option<f64>,
}

/// One strategy at one budget.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SweepRow {
    pub budget_bytes: Option<u64>,
    pub strategy: String,
    /// What made the placement: the solver's method, llama.cpp's flags, ...
    pub description: String,
    /// Why the strategy has no placement at this budget; null when it ran.
    pub does_not_fit: Option<String>,
    /// `1 / evaluate(placement).token_seconds`.
    pub predicted_tok_per_s: Option<f64>,
    /// Median and range of the runs' measured tok/s.
    pub measured_tok_per_s: Option<Spread>,
    /// Median measured over predicted.
    pub ratio: Option<f64>,
    /// Median of the runs' measured over `predicted_on_routes_tok_per_s`
    /// (the cost model on each run's own tokens).
    pub ratio_on_routes: Option<f64>,
    /// Every run's report, in round order.
    pub runs: Vec<SweepRun>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SweepRun {
    /// From 0, in the order the rounds ran.
    pub round: usize,
    pub report: BenchReport,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no values; the median of an even count is the mean of
    /// the middle two (`residency_hwprofile::Spread`, as calibration
    /// reports its trials).
    pub fn of(values: &[f64]) -> Option<Spread> {
        residency_hwprofile::Spread::of(values).map(|s| Spread {
            median: s.median,
            min: s.min,
            max: s.max,
        })
    }
}

/// A budget as it is set on the profile.
struct Budget {
    bytes: Option<Bytes>,
    reserved: Vec<Bytes>,
}

impl Budget {
    fn label(&self) -> String {
        match self.bytes {
            Some(b) => b.to_string(),
            None => "no GPU".into(),
        }
    }
}

/// The budgets to run: each card's reserve per budget given (default
/// `DEFAULT_BUDGETS_GIB`), refused above a card's VRAM; without cards one
/// budget, `None`, since a budget would change nothing.
fn budgets(
    profile: &HardwareProfile,
    profile_file: &Path,
    given: Option<&[Bytes]>,
    notes: &mut Vec<String>,
) -> Result<Vec<Budget>> {
    if profile.gpus.is_empty() {
        if given.is_some() {
            notes.push(format!(
                "{} has no GPU: --budgets change nothing, so each strategy runs at one budget, `no GPU`",
                profile_file.display()
            ));
        }
        return Ok(vec![Budget {
            bytes: None,
            reserved: Vec::new(),
        }]);
    }
    let default: Vec<Bytes> = DEFAULT_BUDGETS_GIB.iter().map(|g| Bytes(g << 30)).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for &budget in given.unwrap_or(&default) {
        if !seen.insert(budget) {
            continue;
        }
        let mut reserved = Vec::new();
        for (g, gpu) in profile.gpus.iter().enumerate() {
            let Some(r) = gpu.vram.0.checked_sub(budget.0) else {
                let smallest = profile
                    .gpus
                    .iter()
                    .map(|g| g.vram)
                    .min()
                    .unwrap_or(gpu.vram);
                bail!(
                    "--budgets {budget}: above gpus[{g}] ({})'s vram {} in {}; give budgets up to {smallest}",
                    gpu.name,
                    gpu.vram,
                    profile_file.display()
                );
            };
            reserved.push(Bytes(r));
        }
        out.push(Budget {
            bytes: Some(budget),
            reserved,
        });
    }
    Ok(out)
}

/// A strategy's placement at a budget, and its plan written for apply.
struct Placed {
    placement: Vec<usize>,
    plan: Plan,
    plan_path: PathBuf,
    predicted_tok_per_s: f64,
    /// Which budget's instance it is a placement of.
    budget: usize,
}

/// A configuration: its row (filled as it runs) and, where it fits, its
/// placement.
struct Config {
    row: SweepRow,
    placed: Option<Placed>,
}

/// A strategy's answer at a budget: `Ok`, or why it does not fit (a row,
/// not an error).
type Fit<T> = std::result::Result<T, String>;

/// The placement of `strategy` on `inst` as a plan's solution, with the
/// time limit its plan file records (0 for a rule), or why it has none;
/// `cpu` is the placement of the profile without cards, in places
/// (`cpu_places`, made once).
fn solution_of(
    strategy: SweepStrategy,
    inst: &Instance,
    cpu_places: &Fit<Vec<Place>>,
) -> Result<Fit<(Solution, f64)>> {
    Ok(match strategy {
        SweepStrategy::Plan => {
            let options = crate::default_solve_options();
            residency_solver::solve(inst, options)
                .map(|s| (s, options.time_limit_seconds))
                .map_err(|e| e.to_string())
        }
        SweepStrategy::Greedy => greedy(inst)
            .map(|p| {
                let method = "greedy (design §4; Colibri's automatic trunk placement)";
                (Solution::fixed(inst, p, method), 0.0)
            })
            .map_err(|e| e.to_string()),
        SweepStrategy::LlamaCpp(kind) if inst.resources.gpus() == 0 => Err(format!(
            "the profile has no GPU, and llama.cpp's `{kind}` puts the trunk on one (`cpu` is llama.cpp without cards)"
        )),
        SweepStrategy::LlamaCpp(kind) => llama_cpp_strategies(inst)?
            .into_iter()
            .find(|s| s.kind == kind)
            .map(|s| (Solution::fixed(inst, s.placement, &s.flags), 0.0))
            .ok_or_else(|| {
                format!("its trunk and GPU experts overflow a card, or its CPU experts the RAM and drives (`{kind}`)")
            }),
        SweepStrategy::Cpu => cpu_places.clone().map(|places| {
            let placement = places.iter().map(|&q| inst.place_index(q)).collect();
            let method = "greedy without the cards: everything in RAM, then on the drives";
            (Solution::fixed(inst, placement, method), 0.0)
        }),
    })
}

/// Greedy on the profile without its cards: where each object goes when
/// nothing is on a GPU, as places (objects are indexed by the model and
/// heat alone, the same in every budget's instance).
fn cpu_places(inputs: &Inputs) -> Fit<Vec<Place>> {
    let mut without_cards = inputs.clone();
    without_cards.profile.gpus.clear();
    // Fails where nothing but the cards holds the trunk.
    let inst = without_cards.instance().map_err(|e| e.to_string())?;
    greedy(&inst)
        .map(|p| p.iter().map(|&q| inst.places[q]).collect())
        .map_err(|e| e.to_string())
}

/// The plan's inputs at a budget: the profile named with the budget (its
/// sha256 stays the file's, from which the budget's profile is derived).
fn refs_at(refs: &PlanInputs, budget: &Budget) -> PlanInputs {
    let mut refs = refs.clone();
    if let Some(b) = budget.bytes {
        refs.profile.name = format!(
            "{} at a {b} VRAM budget (reserved = vram - budget)",
            refs.profile.name
        );
    }
    refs
}

/// Every configuration of the sweep: one per (budget, strategy), its plan
/// written to `dir` where it fits; and the budgets' instances.
fn configurations(
    inputs: &mut Inputs,
    budgets: &[Budget],
    strategies: &[SweepStrategy],
    dir: &Path,
) -> Result<(Vec<Config>, Vec<Instance>)> {
    let cpu_places = cpu_places(inputs);
    let mut configs = Vec::new();
    let mut insts = Vec::new();
    for (b, budget) in budgets.iter().enumerate() {
        for (gpu, &reserved) in inputs.profile.gpus.iter_mut().zip(&budget.reserved) {
            gpu.reserved = reserved;
        }
        let inst = inputs
            .instance()
            .with_context(|| format!("--budgets {}", budget.label()))?;
        let refs = refs_at(&inputs.refs, budget);
        for &strategy in strategies {
            let mut row = SweepRow {
                budget_bytes: budget.bytes.map(|b| b.0),
                strategy: strategy.name().into(),
                description: String::new(),
                does_not_fit: None,
                predicted_tok_per_s: None,
                measured_tok_per_s: None,
                ratio: None,
                ratio_on_routes: None,
                runs: Vec::new(),
            };
            let placed = match solution_of(strategy, &inst, &cpu_places)? {
                Err(why) => {
                    row.does_not_fit = Some(why);
                    None
                }
                Ok((solution, time_limit_seconds)) => {
                    row.description = solution.method.clone();
                    let predicted_tok_per_s = 1.0 / solution.token_seconds;
                    row.predicted_tok_per_s = Some(predicted_tok_per_s);
                    let plan = Plan::new(&inst, &solution, refs.clone(), time_limit_seconds);
                    let slug: String = budget.label().chars().filter(|c| *c != ' ').collect();
                    let plan_path = dir.join(format!(
                        "{slug}-{strategy}.json",
                        strategy = strategy.name()
                    ));
                    plan.write(&plan_path)?;
                    Some(Placed {
                        placement: solution.placement,
                        plan,
                        plan_path,
                        predicted_tok_per_s,
                        budget: b,
                    })
                }
            };
            configs.push(Config { row, placed });
        }
        insts.push(inst);
    }
    Ok((configs, insts))
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let sweep = &args.sweep_args;
    if sweep.rounds == 0 {
        bail!("--rounds 0: give at least one round");
    }
    let mut strategies = Vec::new();
    for s in sweep.strategies.as_deref().unwrap_or(&SweepStrategy::ALL) {
        if !strategies.contains(s) {
            strategies.push(*s);
        }
    }
    let checkpoint = Checkpoint::open(&args.checkpoint)?;
    let (mut inputs, options) = args.load(&checkpoint)?;
    let profile_file = args
        .profile
        .path
        .clone()
        .unwrap_or_else(|| PathBuf::from(defaults::PROFILE_NAME));
    let mut notes = Vec::new();
    let budgets = budgets(
        &inputs.profile,
        &profile_file,
        sweep.budgets.as_deref(),
        &mut notes,
    )?;
    let temporary =
        tempfile::tempdir().context("creating a directory for the sweep's plan files")?;
    let dir = match &sweep.plans_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--plans-dir {}: creating it", dir.display()))?;
            dir.as_path()
        }
        None => temporary.path(),
    };
    let (mut configs, insts) = configurations(&mut inputs, &budgets, &strategies, dir)?;
    // Every budget's instance and every run say the same things: each once.
    let mut once = NotesOnce::default();
    once.say(&inputs.notes);
    once.say(&notes);
    check_all_runnable(&configs, &insts, &budgets, &checkpoint)?;
    let apply_options = apply_options();
    for round in 0..sweep.rounds {
        let run = RoundRun {
            args,
            insts: &insts,
            budgets: &budgets,
            checkpoint: &checkpoint,
            options: &options,
            apply_options: &apply_options,
        };
        run.round(round, &mut configs, &mut once)?;
        // The rounds so far, on file after each but the last (written
        // below): a sweep stopped by a time limit keeps what it measured,
        // and says how many rounds that was.
        if let Some(path) = args.json.as_ref().filter(|_| round + 1 < sweep.rounds) {
            let so_far = sweep_report(
                args,
                &profile_file,
                options.tokens,
                round + 1,
                &budgets,
                &configs,
            );
            write_json(path, &so_far)?;
        }
    }
    let report = sweep_report(
        args,
        &profile_file,
        options.tokens,
        sweep.rounds,
        &budgets,
        &configs,
    );
    print_table(&report, &budgets);
    if let Some(path) = &args.json {
        write_report(path, &report)?;
    }
    Ok(())
}

/// Notes said once each, however many budgets and runs repeat them.
#[derive(Default)]
struct NotesOnce(BTreeSet<String>);

impl NotesOnce {
    fn say(&mut self, notes: &[String]) {
        for note in notes {
            if self.0.insert(note.clone()) {
                crate::term::note(note);
            }
        }
    }
}

/// Every placement refused before any is loaded: a sweep stops at its
/// start, not after minutes of others' runs.
fn check_all_runnable(
    configs: &[Config],
    insts: &[Instance],
    budgets: &[Budget],
    checkpoint: &Checkpoint,
) -> Result<()> {
    for c in configs {
        if let Some(p) = &c.placed {
            check_runnable(&insts[p.budget], &p.placement, &p.plan_path, checkpoint).with_context(
                || {
                    format!(
                        "--sweep: {} at {}",
                        c.row.strategy,
                        budgets[p.budget].label()
                    )
                },
            )?;
        }
    }
    Ok(())
}

/// What every round applies and benches with.
struct RoundRun<'a> {
    args: &'a BenchArgs,
    insts: &'a [Instance],
    budgets: &'a [Budget],
    checkpoint: &'a Checkpoint,
    options: &'a BenchOptions,
    apply_options: &'a ApplyOptions,
}

impl RoundRun<'_> {
    /// Round `round`: every configuration with a placement applied and
    /// benched once, in turn, its run added to its row.
    fn round(&self, round: usize, configs: &mut [Config], once: &mut NotesOnce) -> Result<()> {
        let rounds = self.args.sweep_args.rounds;
        for c in configs {
            let Some(p) = &c.placed else { continue };
            let budget = self.budgets[p.budget].label();
            let (report, apply_notes) = apply_and_bench(
                &self.insts[p.budget],
                &p.placement,
                (&p.plan, &p.plan_path),
                self.checkpoint,
                (self.apply_options, self.args.backend.backend),
                self.options,
            )
            .with_context(|| {
                format!(
                    "--sweep round {}/{rounds}: {} at {budget}",
                    round + 1,
                    c.row.strategy,
                )
            })?;
            once.say(&apply_notes);
            once.say(&report.notes);
            eprintln!(
                "round {}/{rounds}, {budget}, {}: {:.2} tok/s measured, {:.2} predicted",
                round + 1,
                c.row.strategy,
                report.tok_per_s,
                p.predicted_tok_per_s
            );
            c.row.runs.push(SweepRun { round, report });
        }
        Ok(())
    }
}

/// The report of `rounds` finished rounds of `configs`.
fn sweep_report(
    args: &BenchArgs,
    profile_file: &Path,
    tokens: usize,
    rounds: usize,
    budgets: &[Budget],
    configs: &[Config],
) -> SweepReport {
    let rows: Vec<SweepRow> = configs.iter().map(|c| summarize(c.row.clone())).collect();
    SweepReport {
        checkpoint: args.checkpoint.display().to_string(),
        profile: profile_file.display().to_string(),
        tokens,
        seed: args.seed,
        rounds,
        budgets: budgets.iter().map(|b| budget_summary(b, &rows)).collect(),
        rows,
    }
}

/// The row's measured spread over its runs and its ratio to the prediction.
fn summarize(mut row: SweepRow) -> SweepRow {
    let measured: Vec<f64> = row.runs.iter().map(|r| r.report.tok_per_s).collect();
    row.measured_tok_per_s = Spread::of(&measured);
    row.ratio = row
        .measured_tok_per_s
        .zip(row.predicted_tok_per_s)
        .map(|(m, p)| m.median / p);
    let on_routes: Vec<f64> = row
        .runs
        .iter()
        .map(|r| r.report.tok_per_s / r.report.predicted_on_routes_tok_per_s)
        .collect();
    row.ratio_on_routes = Spread::of(&on_routes).map(|s| s.median);
    row
}

fn budget_summary(budget: &Budget, rows: &[SweepRow]) -> BudgetSummary {
    let budget_bytes = budget.bytes.map(|b| b.0);
    let here = || rows.iter().filter(|r| r.budget_bytes == budget_bytes);
    let median = |name: &str| {
        here()
            .find(|r| r.strategy == name)
            .and_then(|r| r.measured_tok_per_s)
            .map(|m| m.median)
    };
    let fastest = here()
        .filter_map(|r| Some((r.measured_tok_per_s?.median, &r.strategy)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let plan = median(SweepStrategy::Plan.name());
    let lead = |other: SweepStrategy| {
        plan.zip(median(other.name()))
            .map(|(p, o)| 100.0 * (p / o - 1.0))
    };
    BudgetSummary {
        budget_bytes,
        gpu_reserved_bytes: budget.reserved.iter().map(|r| r.0).collect(),
        fastest: fastest.map(|(_, s)| s.clone()),
        fastest_tok_per_s: fastest.map(|(t, _)| t),
        plan_lead_over_n_cpu_moe_percent: lead(SweepStrategy::LlamaCpp(LlamaCppStrategy::NCpuMoe)),
        plan_lead_over_greedy_percent: lead(SweepStrategy::Greedy),
    }
}

fn print_table(report: &SweepReport, budgets: &[Budget]) {
    println!(
        "bench --sweep of {} on {}: {} tokens a run, seed {}, {} interleaved rounds",
        report.checkpoint, report.profile, report.tokens, report.seed, report.rounds
    );
    println!(
        "  tok/s: predicted by the cost model; measured, the median and [min..max] over the rounds;"
    );
    println!(
        "  on routes: measured over the cost model priced on each run's own tokens, the median"
    );
    println!(
        "  {:<10} {:<10} {:>10} {:>10} {:>23} {:>8} {:>10}  checksum",
        "budget", "strategy", "predicted", "measured", "[min..max]", "ratio", "on routes"
    );
    for row in &report.rows {
        let label = label_of(budgets, row.budget_bytes);
        let (Some(predicted), Some(m), Some(ratio)) =
            (row.predicted_tok_per_s, row.measured_tok_per_s, row.ratio)
        else {
            let why = row.does_not_fit.as_deref().unwrap_or("not run");
            println!("  {label:<10} {:<10} does not fit: {why}", row.strategy);
            continue;
        };
        let checksums: BTreeSet<String> = row
            .runs
            .iter()
            .map(|r| format!("{:.6e}", r.report.checksum))
            .collect();
        println!(
            "  {label:<10} {:<10} {predicted:>10.2} {:>10.2} {:>23} {ratio:>8.2} {:>10.2}  {}",
            row.strategy,
            m.median,
            format!("[{:.2}..{:.2}]", m.min, m.max),
            row.ratio_on_routes.unwrap_or(f64::NAN),
            checksums.into_iter().collect::<Vec<_>>().join(" ")
        );
    }
    println!("fastest measured (median):");
    for b in &report.budgets {
        let label = label_of(budgets, b.budget_bytes);
        let Some((fastest, tok_per_s)) = b.fastest.as_ref().zip(b.fastest_tok_per_s) else {
            println!("  {label}: nothing ran");
            continue;
        };
        let lead = |percent: Option<f64>| match percent {
            Some(p) => format!("{p:+.1} %"),
            None => "-".into(),
        };
        println!(
            "  {label}: {fastest} at {tok_per_s:.2} tok/s; the plan's lead: {} over n-cpu-moe, {} over greedy",
            lead(b.plan_lead_over_n_cpu_moe_percent),
            lead(b.plan_lead_over_greedy_percent)
        );
    }
}

fn label_of(budgets: &[Budget], bytes: Option<u64>) -> String {
    budgets
        .iter()
        .find(|b| b.bytes.map(|b| b.0) == bytes)
        .map(Budget::label)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_llama_cpp_strategy_is_a_sweep_strategy() {
        for kind in LlamaCppStrategy::ALL {
            assert!(SweepStrategy::ALL.contains(&SweepStrategy::LlamaCpp(kind)));
        }
        let names: BTreeSet<&str> = SweepStrategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), SweepStrategy::ALL.len());
    }

    #[test]
    fn spread_by_hand() {
        assert_eq!(Spread::of(&[]), None);
        let odd = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Spread::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((even.median, even.min, even.max), (3.0, 1.0, 10.0));
    }
}

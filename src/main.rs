//! The `residency` command line: argument parsing and printing only; every
//! decision is made in the library crates (core, solver, formats, runtime).

mod apply_cmd;
mod bench_cmd;
mod checkpoint_cmd;
mod constraints_args;
mod explain_cmd;
mod flags;
mod heat_cmd;
mod inputs;
mod kv_cmd;
mod plan_cmd;
mod plot;
mod print;
mod profile_cmd;
mod replay_cmd;
mod schema_cmd;
mod simulate;
mod term;
mod validate_cmd;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use flags::{more_help, named, ModelArg, ProfileArg};
use residency_formats::export::Engine;
use residency_formats::heat::HeatFormat;
use residency_formats::inputs::InputPaths;
use residency_solver::SolveOptions;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "residency",
    version = VERSION,
    about = "Where should every MoE expert, trunk component and KV prefix live?"
)]
struct Cli {
    /// Print no notes (errors and results still print).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// `--version`: the package version and the commit it was built from
/// (`build.rs`; "commit unknown" when built outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RESIDENCY_COMMIT"),
    ")"
);

/// The three inputs of a plan; each defaults to the embedded example.
#[derive(clap::Args, Clone)]
#[command(mut_arg("model", more_help("default: DeepSeek-V2-Lite")))]
#[command(mut_arg("profile", more_help("default: Colibri's two-card box")))]
struct InputArgs {
    #[command(flatten)]
    profile: ProfileArg,
    #[command(flatten)]
    model: ModelArg,
    /// Heat (file or data-set directory, docs/design.md §3.3); default: the embedded
    /// ESFT heat without --model, uniform heat with it.
    #[arg(long)]
    heat: Option<PathBuf>,
    /// Heat format, when detection from magic bytes or extension is not wanted.
    #[arg(long, value_parser = named::<HeatFormat>())]
    heat_format: Option<HeatFormat>,
    #[command(flatten)]
    partial_heat: PartialHeatArg,
    /// KV prefix groups to place beside the weights (YAML or JSON, written
    /// by `residency kv-groups`); default: none. A plan carries its own.
    #[arg(long)]
    kv: Option<PathBuf>,
}

/// Heat that leaves MoE layers of the model out is refused unless asked for.
#[derive(clap::Args, Clone, Copy)]
struct PartialHeatArg {
    /// Accept heat that gives fewer MoE layers than the model: the missing
    /// layers get uniform heat (top_k / experts), with a note.
    #[arg(long)]
    allow_partial_heat: bool,
}

/// Re-planning from a plan in use (docs/design.md §4.5).
#[derive(clap::Args, Clone)]
struct ReplanArgs {
    /// Re-plan from this plan (the placement in use) for the new inputs,
    /// moving only what pays for its move over --horizon-tokens.
    #[arg(long)]
    from: Option<PathBuf>,
    /// Tokens over which a move must pay for itself.
    #[arg(long, default_value_t = 100_000.0, requires = "from")]
    horizon_tokens: f64,
    /// A move's seconds count this many times.
    #[arg(long, default_value_t = 2.0, requires = "from")]
    hysteresis: f64,
    /// Re-plan incrementally, as the serving loop does: local search from
    /// the plan in use that carries at most this much over links (e.g.
    /// `2 GiB`; a weight dropped to disk carries nothing). Its prices start
    /// from zero, as a plan file holds none. Without it, the full plan
    /// search with move costs and no budget.
    #[arg(long, value_parser = parse_move_budget, requires = "from")]
    move_budget: Option<u64>,
}

fn parse_move_budget(text: &str) -> std::result::Result<u64, String> {
    residency_core::units::parse_size(text).map(|b| b.0)
}

impl InputArgs {
    fn paths(&self) -> InputPaths {
        InputPaths {
            profile: self.profile.path.clone(),
            model: self.model.path.clone(),
            heat: self.heat.clone(),
            heat_format: self.heat_format,
            allow_partial_heat: self.partial_heat.allow_partial_heat,
            kv: self.kv.clone(),
            // Only `plan` takes --context-tokens and constraints; it sets these.
            context_tokens: None,
            constraints: None,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Solve for a placement and write the plan.
    Plan {
        #[command(flatten)]
        inputs: InputArgs,
        /// Plan file to write (.json, or .yaml/.yml).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Wall-clock seconds the solver may use, setup included; it returns
        /// earlier once the plan is within --gap of the bound.
        #[arg(long, default_value_t = PLAN_TIME_LIMIT_SECONDS)]
        time_limit: f64,
        /// Stop once the plan is proven within this much of the optimum: a
        /// share (0.001) or a percentage (0.1%).
        #[arg(long, default_value = PLAN_GAP, value_parser = parse_gap)]
        gap: f64,
        /// Also write engine settings for the plan: coli-place (Colibri's
        /// COLI_PLACE and a HEAT_FILE), llama-cpp (--override-tensor rules),
        /// ktransformers (optimize-rule YAML), kt-kernel (GPU experts per
        /// MoE layer and the SGLang command of ktransformers' kernels),
        /// sglang (--init-expert-location JSON), vllm (EPLB expert map per
        /// rank, ranks grouped by host).
        /// Repeatable, or a comma list.
        #[arg(long, value_delimiter = ',', value_parser = named::<Engine>())]
        export: Vec<Engine>,
        /// Directory for --export files (default: the directory of --out,
        /// else the current directory).
        #[arg(long)]
        export_dir: Option<PathBuf>,
        /// Also draw where everything went (.svg or .png): per MoE layer the
        /// experts of each place and the heat they carry, each place's bytes
        /// against its capacity.
        #[arg(long)]
        plot: Option<PathBuf>,
        #[command(flatten)]
        replan: ReplanArgs,
        /// Keep room on the cards for the KV cache of this many tokens
        /// before placing weights (split over the cards by capacity); the
        /// llama.cpp export starts with `-c` of it. With --from, default:
        /// the plan's own.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        context_tokens: Option<u64>,
        /// With --from, given constraints replace the plan's own.
        #[command(flatten)]
        constraints: constraints_args::ConstraintArgs,
    },
    /// Read heat in any format: print per-layer concentration, convert it.
    #[command(mut_arg("model", more_help("it maps engine layer numbers and pads experts")))]
    Heat {
        /// Heat file or data-set directory.
        input: PathBuf,
        #[arg(long, value_parser = named::<HeatFormat>())]
        format: Option<HeatFormat>,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        partial_heat: PartialHeatArg,
        /// Write the heat here (format from --out-format or the extension:
        /// .json ours, .csv, .pt SGLang's and kt-kernel's torch file,
        /// .bin/.heat coli-heat, *coli_usage); --out-format sglang-json for
        /// SGLang's JSON.
        #[arg(long, visible_alias = "to")]
        out: Option<PathBuf>,
        #[arg(long, value_parser = named::<HeatFormat>())]
        out_format: Option<HeatFormat>,
        /// Also draw the per-layer concentration to this file (.svg or .png).
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Explain a plan: marginal value of memory, expert frontiers, trunk choices.
    Explain {
        plan: PathBuf,
        #[command(flatten)]
        inputs: InputArgs,
        /// Seconds for the local re-plans behind the marginal values.
        #[arg(long, default_value_t = 2.0)]
        time_limit: f64,
    },
    /// Compare two plans of the same inputs: moves, bytes per link, time change.
    Diff {
        before: PathBuf,
        after: PathBuf,
        #[command(flatten)]
        inputs: InputArgs,
    },
    /// Check a profile, model description, heat or plan; say what is wrong.
    Validate {
        file: PathBuf,
        /// profile, model, heat, kv (KV groups) or plan (default: detected).
        #[arg(long)]
        kind: Option<String>,
        #[command(flatten)]
        inputs: InputArgs,
    },
    /// Load a plan's residents from a checkpoint through the executor.
    Apply(apply_cmd::ApplyArgs),
    /// Apply a plan and serve decode tokens where it puts the work (CPU
    /// threads, CUDA GPUs, drives): measured tok/s and seconds per stage and resource beside the
    /// cost model's; with --sweep, the planner against greedy, llama.cpp's
    /// flags and the CPU alone at several VRAM budgets.
    Bench(bench_cmd::BenchArgs),
    /// Serve a routing trace from a checkpoint through the executor, per
    /// policy: tok/s, latency, felt wait, bytes read.
    Replay(replay_cmd::ReplayArgs),
    /// Replay a trace through cache policies at byte budgets (docs/design.md §6).
    Simulate(simulate::SimulateArgs),
    /// Replay a prefix-block trace (Mooncake) through the KV prefix cache
    /// per eviction policy and capacity (docs/design.md §8).
    KvReplay(kv_cmd::KvReplayArgs),
    /// Band a prefix-block trace's reused blocks into KV prefix groups for
    /// `plan --kv` (docs/design.md §4.6).
    KvGroups(kv_cmd::KvGroupsArgs),
    /// Write a checkpoint with a model's real tensor names, shapes and dtypes
    /// and seeded random values (safetensors shards, index, config.json).
    GenCheckpoint(checkpoint_cmd::GenCheckpointArgs),
    /// Write this machine's hardware profile (`detect`) and measure its
    /// rates (`calibrate`), or take them from an engine log.
    Profile(profile_cmd::ProfileArgs),
    /// Write the JSON Schemas of the profile, model description, KV groups and
    /// plan files, and of every `--json` output.
    Schema {
        /// Directory to write the `*.schema.json` files into.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
    /// Print the shell completion script (bash, zsh, fish, powershell,
    /// elvish), e.g. `residency completions bash > /etc/bash_completion.d/residency`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page, or with --out write one page per command
    /// (residency.1, residency-plan.1, ...) into a directory.
    Man {
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// `plan`'s default `--time-limit` and `--gap`, which `bench --sweep`'s
/// `plan` strategy solves with too (`default_solve_options`).
const PLAN_TIME_LIMIT_SECONDS: f64 = 10.0;
const PLAN_GAP: &str = "0.1%";

/// What `residency plan` solves with when given no `--time-limit` or `--gap`.
fn default_solve_options() -> SolveOptions {
    SolveOptions {
        time_limit_seconds: PLAN_TIME_LIMIT_SECONDS,
        gap: parse_gap(PLAN_GAP).expect("the default gap parses"),
    }
}

/// A gap as a share (`0.001`) or a percentage (`0.1%`), not negative.
fn parse_gap(text: &str) -> std::result::Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number, 0.01),
        None => (text, 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value * scale),
        _ => Err(format!(
            "`{text}` is not a gap: give a share such as 0.001 or a percentage such as 0.1%"
        )),
    }
}

fn main() -> ExitCode {
    // A reader that stops early (`residency plan | head`) ends the process
    // quietly, as it does other command-line tools; Rust's runtime ignores
    // SIGPIPE, which turns the next `println!` into a panic.
    #[cfg(unix)]
    // SAFETY: resetting a signal's disposition to its default before any
    // thread starts has no memory-safety condition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version (to standard output, exit 0), and the help a
        // bare `residency` gets, are clap's to print.
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            term::error(one_line(&e));
            return ExitCode::FAILURE;
        }
    };
    term::set_quiet(cli.quiet);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            term::error(residency_core::error::without_controls(&chain.join(": ")));
            ExitCode::FAILURE
        }
    }
}

/// A flag clap refuses, as every other bad input is said: one `error:`
/// line with the fix (clap's own tip where it gives one, else what to do
/// and where the flags are listed) and exit code 1, not clap's usage block
/// and code 2. Lines before the usage continue the message (the names of
/// missing arguments).
fn one_line(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    let mut message = Vec::new();
    let mut tips = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        match line.strip_prefix("tip: ") {
            Some(tip) => tips.push(tip),
            None => message.push(line),
        }
    }
    // The subcommand's own help, where the command line names one.
    let command = std::env::args()
        .nth(1)
        .filter(|a| Cli::command().find_subcommand(a).is_some())
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    let help = format!("see `residency{command} --help`");
    let fix = match e.kind() {
        _ if !tips.is_empty() => tips.join("; "),
        ErrorKind::ArgumentConflict => format!("give one of them, not both ({help})"),
        _ => help,
    };
    // `term::error` puts the `error:` label back.
    let message = match message.join(" ") {
        m if m.is_empty() => "the command line is not understood".to_string(),
        m => m.strip_prefix("error: ").unwrap_or(&m).to_string(),
    };
    format!("{message}; {fix}")
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Plan {
            inputs,
            out,
            time_limit,
            gap,
            export,
            export_dir,
            plot,
            replan,
            context_tokens,
            constraints,
        } => plan_cmd::plan(
            &InputPaths {
                context_tokens,
                constraints: constraints.load()?,
                ..inputs.paths()
            },
            &replan,
            out.as_deref(),
            SolveOptions {
                time_limit_seconds: time_limit,
                gap,
            },
            &export,
            export_dir.as_deref(),
            plot.as_deref(),
        ),
        Command::Heat {
            input,
            format,
            model,
            partial_heat,
            out,
            out_format,
            plot,
        } => heat_cmd::heat_command(
            &input,
            format,
            &model,
            partial_heat,
            out.as_deref(),
            out_format,
            plot.as_deref(),
        ),
        Command::Validate { file, kind, inputs } => {
            validate_cmd::validate(&file, kind.as_deref(), &inputs)
        }
        Command::Explain {
            plan,
            inputs,
            time_limit,
        } => explain_cmd::explain(&plan, &inputs, time_limit),
        Command::Diff {
            before,
            after,
            inputs,
        } => explain_cmd::diff(&before, &after, &inputs),
        Command::Simulate(args) => simulate::run(args),
        Command::KvReplay(args) => kv_cmd::run(&args),
        Command::KvGroups(args) => kv_cmd::groups(&args),
        Command::Replay(args) => replay_cmd::run(&args),
        Command::Apply(args) => apply_cmd::run(&args),
        Command::Bench(args) => bench_cmd::run(&args),
        Command::GenCheckpoint(args) => checkpoint_cmd::gen_checkpoint(&args),
        Command::Profile(args) => profile_cmd::run(args),
        Command::Schema { out } => schema_cmd::write_schemas(&out),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "residency", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out } => man(out.as_deref()),
    }
}

/// The man pages of the clap definitions: `residency.1` to standard
/// output, or every command's page into `dir`.
fn man(dir: Option<&Path>) -> Result<()> {
    let cmd = Cli::command();
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| {
                format!(
                    "{}: cannot create the directory; give --out a writable directory",
                    dir.display()
                )
            })?;
            clap_mangen::generate_to(cmd, dir).with_context(|| {
                format!(
                    "{}: cannot write the man pages; give --out a writable directory",
                    dir.display()
                )
            })?;
            println!("wrote {}/residency*.1", dir.display());
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .context("rendering the man page")?;
            use std::io::Write;
            std::io::stdout()
                .write_all(&page)
                .context("standard output")?;
        }
    }
    Ok(())
}

//! `residency bench`: a plan applied to a checkpoint (`runtime::apply`),
//! then decode tokens served on the CPU and CUDA GPUs as the plan places
//! the work (`residency_lab::bench`), measured beside the cost model;
//! with `--sweep`, the strategies' placements at several VRAM budgets
//! (`sweep`).

pub mod sweep;

use crate::flags::{more_help, named, BackendArg, ProfileArg};
use anyhow::{bail, Context, Result};
use residency_core::cost::Instance;
use residency_core::heat::HeatTable;
use residency_core::plan::Plan;
use residency_formats::heat::{read_trace, HeatContext, HeatFormat, Trace};
use residency_formats::inputs::{InputPaths, Inputs};
use residency_lab::bench::{bench, check_runnable, BenchOptions, BenchReport, Measured};
use residency_runtime::apply::{apply, ApplyOptions};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gpu::{GpuOptions, GpuTier};
use residency_runtime::storage::{open_backend, BackendKind};
use std::path::{Path, PathBuf};

/// One of the two modes, `--plan` or `--sweep`: clap names both when
/// neither is given and refuses the two together.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["plan", "sweep"])))]
#[command(mut_arg(
    "profile",
    more_help("give the one the plan was made with: it prices the prediction (with --sweep, the budgets set its cards' reserves)")
))]
pub struct BenchArgs {
    /// Plan file (from `residency plan --model DIR`); not with --sweep,
    /// which makes its own.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Instead of one plan: make each of --strategies' placements at each
    /// of --budgets, apply and bench them in --rounds interleaved rounds,
    /// and print one table (predicted and measured tok/s, their ratio, the
    /// fastest at each budget).
    #[arg(long)]
    pub sweep: bool,
    #[command(flatten)]
    pub sweep_args: sweep::SweepArgs,
    /// Checkpoint directory the plan was made for (int4 or int8 experts).
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub profile: ProfileArg,
    /// Heat the routed experts are drawn from (default: uniform), as `plan`
    /// reads it; give the plan's own.
    #[arg(long)]
    pub heat: Option<PathBuf>,
    /// Per-token routing trace (file or data-set directory, as `replay`
    /// reads it) the routed experts come from instead of draws: its first
    /// --tokens tokens with every kept layer observed, its first MoE
    /// layers (as many as the checkpoint has). The prediction is priced
    /// with the heat of those tokens.
    #[arg(long, conflicts_with = "heat")]
    pub trace: Option<PathBuf>,
    #[arg(long, value_parser = named::<HeatFormat>(), requires = "trace")]
    pub trace_format: Option<HeatFormat>,
    /// Decode tokens to serve, at batch 1 (per run with --sweep).
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Seed of the routing draws and the generated trunk rows.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub backend: BackendArg,
    /// Write the report here as JSON (with --sweep: every run and the
    /// summary, `schemas/bench-sweep-output.schema.json`, rewritten after
    /// each round, so that a sweep stopped early keeps its finished rounds).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl BenchArgs {
    /// The planner's inputs for the checkpoint, as `plan --model DIR`
    /// reads them, and the runs' options: with --trace, its tokens'
    /// routing, and their heat in place of the inputs' heat.
    pub fn load(&self, checkpoint: &Checkpoint) -> Result<(Inputs, BenchOptions)> {
        let mut inputs = crate::inputs::load_inputs(&InputPaths {
            profile: self.profile.path.clone(),
            model: Some(self.checkpoint.clone()),
            heat: self.heat.clone(),
            ..InputPaths::default()
        })?;
        let mut options = BenchOptions {
            tokens: self.tokens,
            seed: self.seed,
            routes: None,
        };
        if let Some(path) = &self.trace {
            let trace = traced_tokens(path, self.trace_format, self.tokens, checkpoint)?;
            inputs.notes.extend(trace.notes);
            inputs.set_trace_heat(trace.heat, path, trace.format)?;
            options.tokens = trace.routes.len();
            options.routes = Some(trace.routes);
        }
        Ok((inputs, options))
    }
}

/// The tokens of a routing trace that `bench --trace` serves.
struct TracedTokens {
    /// Per token, per MoE layer of the checkpoint, the routed experts.
    routes: Vec<Vec<Vec<u32>>>,
    /// Their heat, over the checkpoint's MoE layers and experts.
    heat: HeatTable,
    format: HeatFormat,
    notes: Vec<String>,
}

/// The first `tokens` tokens of the trace at `path` with every one of the
/// checkpoint's MoE layers observed (the trace's first layers, in file
/// order), checked against the checkpoint's experts.
fn traced_tokens(
    path: &Path,
    format: Option<HeatFormat>,
    tokens: usize,
    checkpoint: &Checkpoint,
) -> Result<TracedTokens> {
    let mut notes = Vec::new();
    let mut trace = read_trace(path, format, &HeatContext::default(), &mut notes)?;
    let (layers, experts) = (
        checkpoint.config.moe_layers().len(),
        checkpoint.config.experts,
    );
    if trace.layers() < layers {
        bail!(
            "--trace {}: {} MoE layers, the checkpoint has {layers}; give a trace of its model, or a checkpoint of as many layers (gen-checkpoint --layers {})",
            path.display(),
            trace.layers(),
            trace.layers()
        );
    }
    let all = trace.tokens.len();
    let mut kept = Vec::with_capacity(tokens);
    for mut token in std::mem::take(&mut trace.tokens) {
        token.routes.truncate(layers);
        if token.routes.iter().any(Vec::is_empty) {
            continue;
        }
        for (l, ids) in token.routes.iter().enumerate() {
            if let Some(e) = ids.iter().find(|&&e| e as usize >= experts) {
                bail!(
                    "--trace {}: token {} of {}, MoE layer {l}: expert {e}, and the checkpoint's layers have {experts}; give a trace of the checkpoint's model",
                    path.display(),
                    token.pos,
                    token.seq
                );
            }
        }
        kept.push(token);
        if kept.len() == tokens {
            break;
        }
    }
    if kept.is_empty() {
        bail!(
            "--trace {}: no token routes all of the checkpoint's {layers} MoE layers; give a trace with whole tokens",
            path.display()
        );
    }
    if kept.len() < tokens {
        notes.push(format!(
            "--trace {}: {} of its {all} tokens route every one of the checkpoint's {layers} MoE layers; serving those, not --tokens {tokens}",
            path.display(),
            kept.len()
        ));
    }
    let kept = Trace {
        experts: vec![experts; layers],
        tokens: kept,
        ..trace
    };
    Ok(TracedTokens {
        heat: kept.heat().total,
        format: kept.format,
        routes: kept.tokens.into_iter().map(|t| t.routes).collect(),
        notes,
    })
}

/// How either mode applies a plan: the GPU kernels are CUDA's, so GPU
/// places go to CUDA devices (opened once for a sweep's every apply).
pub fn apply_options() -> ApplyOptions {
    ApplyOptions {
        gpus: Some(GpuTier::cuda(&GpuOptions::default())),
        ..ApplyOptions::default()
    }
}

/// One run of either mode: `plan` (`placement` of `inst`, read from or
/// written to `plan_path`) applied to `checkpoint`, then benched; the
/// apply's notes beside the report. The applied store is dropped on
/// return, so a sweep's next configuration starts with this one's memory
/// freed.
pub fn apply_and_bench(
    inst: &Instance,
    placement: &[usize],
    (plan, plan_path): (&Plan, &Path),
    checkpoint: &Checkpoint,
    (apply_options, backend): (&ApplyOptions, BackendKind),
    options: &BenchOptions,
) -> Result<(BenchReport, Vec<String>)> {
    // Refused before loading anything.
    check_runnable(inst, placement, plan_path, checkpoint)?;
    let applied = apply(
        plan,
        plan_path,
        checkpoint,
        apply_options,
        open_backend(backend),
        &|_| {},
    )?;
    let report = bench(inst, placement, plan_path, checkpoint, &applied, options)?;
    Ok((report, applied.notes))
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if args.tokens == 0 {
        bail!("--tokens 0: give at least one token");
    }
    // Said before the runs, not after them (a sweep's take minutes).
    if let Some(dir) = args.json.as_deref().and_then(Path::parent) {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            bail!(
                "--json {}: {} is not a directory; create it or give another path",
                args.json.as_deref().unwrap_or(dir).display(),
                dir.display()
            );
        }
    }
    let Some(plan_path) = &args.plan else {
        return sweep::run(args);
    };
    let plan = Plan::read(plan_path)?;
    let checkpoint = Checkpoint::open(&args.checkpoint)?;
    let (mut inputs, options) = args.load(&checkpoint)?;
    let inst = inputs.instance()?;
    crate::term::notes(&inputs.notes);
    let placement = plan.placement(&inst, plan_path)?;
    let (report, apply_notes) = apply_and_bench(
        &inst,
        &placement,
        (&plan, plan_path),
        &checkpoint,
        (&apply_options(), args.backend.backend),
        &options,
    )?;
    crate::term::notes(&apply_notes);
    crate::term::notes(&report.notes);
    println!(
        "bench {} on {}: {} tokens, seed {}",
        plan_path.display(),
        args.checkpoint.display(),
        report.tokens,
        report.seed
    );
    println!(
        "  tok/s {:.1} measured, {:.1} predicted (x{:.2}); token p50 {:.1} us, p99 {:.1} us",
        report.tok_per_s,
        report.predicted_tok_per_s,
        report.tok_per_s / report.predicted_tok_per_s,
        report.p50_token_seconds * 1e6,
        report.p99_token_seconds * 1e6
    );
    println!(
        "  priced on these tokens' own routes: {:.1} tok/s (x{:.2})",
        report.predicted_on_routes_tok_per_s,
        report.tok_per_s / report.predicted_on_routes_tok_per_s
    );
    println!(
        "  bench's own work {:.1} us a token ({:.1} % of it): drawing experts, building lists, queueing",
        report.bench_overhead_seconds * 1e6,
        report.bench_overhead_seconds / report.tok_per_s.recip() * 100.0
    );
    println!(
        "  {:<8} {:>14} {:>14} {:>8} {:>14} {:>14}",
        "per token", "measured us", "predicted us", "ratio", "bytes", "predicted B"
    );
    for m in report.stages.iter().chain(&report.resources) {
        print_row(m);
    }
    println!("  checksum {:.6e}", report.checksum);
    if let Some(path) = &args.json {
        write_report(path, &report)?;
    }
    Ok(())
}

/// Writes a `--json` report atomically and says so.
pub fn write_report(path: &Path, report: &impl serde::Serialize) -> Result<()> {
    write_json(path, report)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes a `--json` report atomically, silently.
pub fn write_json(path: &Path, report: &impl serde::Serialize) -> Result<()> {
    residency_core::error::write_atomic(path, serde_json::to_string_pretty(report)?.as_bytes())
        .with_context(|| format!("{}: writing the report", path.display()))
}

fn print_row(m: &Measured) {
    let ratio = if m.predicted_seconds > 0.0 {
        format!("{:.2}", m.measured_seconds / m.predicted_seconds)
    } else {
        "-".into()
    };
    println!(
        "  {:<8} {:>14.2} {:>14.2} {:>8} {:>14.0} {:>14.0}",
        m.name,
        m.measured_seconds * 1e6,
        m.predicted_seconds * 1e6,
        ratio,
        m.bytes_per_token,
        m.predicted_bytes_per_token
    );
}

//! `residency bench`: a plan applied to a checkpoint (`runtime::apply`),
//! then decode tokens served on the CPU and CUDA GPUs as the plan places the work
//! (`residency_hwprofile::bench`), measured beside the cost model.

use crate::flags::{more_help, BackendArg, ProfileArg};
use anyhow::{bail, Context, Result};
use residency_core::plan::Plan;
use residency_formats::inputs::InputPaths;
use residency_hwprofile::bench::{bench, check_runnable, BenchOptions, Measured};
use residency_runtime::apply::{apply, ApplyOptions};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gpu::{GpuOptions, GpuTier};
use residency_runtime::storage::open_backend;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(mut_arg(
    "profile",
    more_help("give the one the plan was made with: it prices the prediction")
))]
pub struct BenchArgs {
    /// Plan file (from `residency plan --model DIR`).
    #[arg(long)]
    plan: PathBuf,
    /// Checkpoint directory the plan was made for (int4 or int8 experts).
    #[arg(long)]
    checkpoint: PathBuf,
    #[command(flatten)]
    profile: ProfileArg,
    /// Heat the routed experts are drawn from (default: uniform), as `plan`
    /// reads it; give the plan's own.
    #[arg(long)]
    heat: Option<PathBuf>,
    /// Decode tokens to serve, at batch 1.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Seed of the routing draws and the generated trunk rows.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    backend: BackendArg,
    /// Write the report here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if args.tokens == 0 {
        bail!("--tokens 0: give at least one token");
    }
    let plan = Plan::read(&args.plan)?;
    let checkpoint = Checkpoint::open(&args.checkpoint)?;
    let mut inputs = crate::checkpoint_cmd::load_inputs(&InputPaths {
        profile: args.profile.path.clone(),
        model: Some(args.checkpoint.clone()),
        heat: args.heat.clone(),
        ..InputPaths::default()
    })?;
    let inst = inputs.instance()?;
    crate::notes(&inputs.notes);
    let placement = plan.placement(&inst, &args.plan)?;
    // Refused before loading anything.
    check_runnable(&inst, &placement, &args.plan, &checkpoint)?;
    let applied = apply(
        &plan,
        &args.plan,
        &checkpoint,
        &ApplyOptions {
            // The GPU kernels are CUDA's: GPU places go to CUDA devices.
            gpus: Some(GpuTier::cuda(&GpuOptions::default())),
            ..ApplyOptions::default()
        },
        open_backend(args.backend.backend),
        &|_| {},
    )?;
    crate::notes(&applied.notes);
    let options = BenchOptions {
        tokens: args.tokens,
        seed: args.seed,
    };
    let report = bench(
        &inst,
        &placement,
        &args.plan,
        &checkpoint,
        &applied,
        &options,
    )?;
    crate::notes(&report.notes);
    println!(
        "bench {} on {}: {} tokens, seed {}",
        args.plan.display(),
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
        residency_core::error::write_atomic(
            path,
            serde_json::to_string_pretty(&report)?.as_bytes(),
        )
        .with_context(|| format!("{}: writing the report", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
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

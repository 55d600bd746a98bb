//! `residency apply`: a plan onto a checkpoint through the executor's store,
//! with a progress bar, a per-tier table and `--json`.

use crate::flags::BackendArg;
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use residency_core::plan::Plan;
use residency_core::units::Bytes;
use residency_runtime::apply::{apply, ApplyOptions, ApplyReport};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::storage::open_backend;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Plan file (from `residency plan`).
    #[arg(long)]
    plan: PathBuf,
    /// Checkpoint directory the plan was made for.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Read every resident back and compare checksums with a plain read.
    #[arg(long)]
    verify: bool,
    #[command(flatten)]
    backend: BackendArg,
    /// A directory with identical copies of the checkpoint's shards on
    /// another drive (repeatable): each read goes to the least busy copy.
    #[arg(long)]
    mirror: Vec<PathBuf>,
    /// Loads in flight at once.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Write `{"tiers":[...], "verified": ...}` here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: &ApplyArgs) -> Result<()> {
    if args.threads == 0 {
        bail!("--threads 0: give at least one load in flight");
    }
    let plan = Plan::read(&args.plan)?;
    let checkpoint = Checkpoint::open(&args.checkpoint)?;
    let total: u64 = plan
        .usage
        .iter()
        .filter(|u| !u.place.starts_with("disk"))
        .map(|u| u.used_bytes)
        .sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "loading {bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
        )
        .expect("a valid template"),
    );
    let options = ApplyOptions {
        threads: args.threads,
        verify: args.verify,
        mirrors: args.mirror.clone(),
        ..ApplyOptions::default()
    };
    let backend = open_backend(args.backend.backend);
    let applied = apply(
        &plan,
        &args.plan,
        &checkpoint,
        &options,
        backend,
        &|bytes| bar.inc(bytes),
    );
    bar.finish_and_clear();
    let applied = applied?;
    crate::term::notes(&applied.notes);
    println!(
        "applied {} to {}",
        args.plan.display(),
        args.checkpoint.display()
    );
    println!(
        "  {:<8} {:>8} {:>12} {:>9} {:>10}",
        "place", "objects", "bytes", "seconds", "GB/s"
    );
    for t in &applied.tiers {
        println!(
            "  {:<8} {:>8} {:>12} {:>9.3} {:>10.2}",
            t.place,
            t.objects,
            Bytes(t.bytes).to_string(),
            t.seconds,
            t.bytes as f64 / t.seconds.max(1e-9) / 1e9
        );
    }
    match applied.verified {
        Some(true) => println!("verified: every resident equals a plain read of its tensors"),
        Some(false) => bail!("verification failed: some resident differs from a plain read of its tensors; check the drive and the checkpoint"),
        None => {}
    }
    if let Some(path) = &args.json {
        let doc = ApplyReport {
            verified: applied.verified.unwrap_or(false),
            telemetry: applied.store.telemetry(),
            tiers: applied.tiers,
        };
        residency_core::error::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

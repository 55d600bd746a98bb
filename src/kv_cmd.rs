//! `residency kv-replay`: a prefix-block trace (the Mooncake FAST'25
//! format) through the KV prefix index, per eviction policy and capacity:
//! arguments, the table, `--json` and `--plot`. The replay itself is
//! `residency_lab::kv::replay`, on the block store's own index.
//! `residency kv-groups`: the same trace's reused blocks as the planner's
//! KV prefix groups (`residency_lab::kv::groups`), for `plan --kv`.
//!
//! docs/design.md §6's common options are not offered: `--layers` has no meaning for
//! KV blocks, the traces have no categories, and a whole Mooncake trace
//! replays in well under a second per run, so `--tokens` would buy nothing.

use crate::flags::{more_help, named, ModelArg};
use crate::plot::{self, Line};
use anyhow::{bail, Result};
use residency_core::kv::KvGroupsFile;
use residency_core::model::Model;
use residency_core::units::{parse_size, Bytes, Seconds};
use residency_formats::inputs::defaults;
use residency_kv::EvictionPolicy;
use residency_lab::kv::groups::prefix_groups;
use residency_lab::kv::replay::{replay_grid, KvCostModel, KvReplayReport, ReplayRun};
use residency_lab::kv::trace::{read_mooncake, KvTrace};
use std::path::{Path, PathBuf};

/// Prefill speed assumed without `--prefill-tokens-per-second`: a round
/// figure for one modern GPU prefilling a mid-size model, not a
/// measurement. Seconds saved scale as 1 / rate; give the engine's own.
pub const DEFAULT_PREFILL_TOKENS_PER_SECOND: f64 = 10_000.0;

#[derive(clap::Args)]
pub struct KvReplayArgs {
    /// Trace in the Mooncake FAST'25 JSONL format: one request per line
    /// with timestamp, input_length, output_length and hash_ids.
    #[arg(long)]
    trace: PathBuf,
    /// Tokens each hash id stands for (512 in the Mooncake traces).
    #[arg(long, default_value_t = 512)]
    block_tokens: u32,
    /// Cache capacities in blocks, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    capacity_blocks: Vec<usize>,
    /// Eviction policies, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = named::<EvictionPolicy>(), default_value = "lru")]
    policy: Vec<EvictionPolicy>,
    #[command(flatten)]
    sizing: SizingArgs,
    /// Write the runs as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw hit ratio against capacity per policy (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// How blocks turn into bytes and prefill seconds.
#[derive(clap::Args)]
#[command(mut_arg(
    "model",
    more_help("its kv_bytes_per_token sizes the blocks; default: DeepSeek-V2-Lite")
))]
pub struct SizingArgs {
    /// Prefill speed: seconds saved = hit tokens / this.
    #[arg(long, default_value_t = DEFAULT_PREFILL_TOKENS_PER_SECOND)]
    prefill_tokens_per_second: f64,
    /// KV bytes per token (`70272`, `68.6KiB`); default: the model's.
    #[arg(long, value_parser = parse_size, conflicts_with = "model")]
    kv_bytes_per_token: Option<Bytes>,
    #[command(flatten)]
    model: ModelArg,
}

#[derive(clap::Args)]
pub struct KvGroupsArgs {
    /// Trace in the Mooncake FAST'25 JSONL format.
    #[arg(long)]
    trace: PathBuf,
    /// Tokens each hash id stands for (512 in the Mooncake traces).
    #[arg(long, default_value_t = 512)]
    block_tokens: u32,
    #[command(flatten)]
    sizing: SizingArgs,
    /// Groups file to write (.yaml, or .json), for `plan --kv`.
    #[arg(long)]
    out: PathBuf,
}

/// KV bytes per token from the flag, the model, or the embedded default
/// model, with where it came from.
fn kv_bytes_per_token(args: &SizingArgs) -> Result<(u64, String)> {
    if let Some(bytes) = args.kv_bytes_per_token {
        return Ok((bytes.get(), "--kv-bytes-per-token".into()));
    }
    let (model, name) = match (args.model.load()?, &args.model.path) {
        (Some(model), Some(path)) => (model, path.display().to_string()),
        _ => (
            Model::from_yaml_str(defaults::MODEL, Path::new(defaults::MODEL_NAME))?,
            defaults::MODEL_NAME.to_string(),
        ),
    };
    match model.description.kv_bytes_per_token {
        Some(bytes) => Ok((bytes.get(), name)),
        None => bail!(
            "{name}: the model description has no kv_bytes_per_token; add it, or give --kv-bytes-per-token"
        ),
    }
}

impl SizingArgs {
    /// The checked cost model, saying where the bytes per token came from.
    fn cost_model(&self) -> Result<KvCostModel> {
        let rate = self.prefill_tokens_per_second;
        if !(rate.is_finite() && rate > 0.0) {
            bail!(
                "--prefill-tokens-per-second {rate}: give a positive number of tokens per second"
            );
        }
        let (kv_bytes_per_token, source) = kv_bytes_per_token(self)?;
        crate::term::note(format!(
            "{kv_bytes_per_token} KV bytes per token, from {source}"
        ));
        Ok(KvCostModel {
            prefill_tokens_per_second: rate,
            kv_bytes_per_token,
        })
    }
}

pub fn groups(args: &KvGroupsArgs) -> Result<()> {
    let cost = args.sizing.cost_model()?;
    let trace = read_mooncake(&args.trace, args.block_tokens)?;
    let groups = prefix_groups(&trace, &cost);
    let bytes: u64 = groups.iter().map(|g| g.bytes.get()).sum();
    let saved: f64 = groups
        .iter()
        .map(|g| g.reuses_per_token * g.prefill_seconds.0)
        .sum();
    let source = format!(
        "{} ({} tokens per block, {} tokens/s prefill, {} KV bytes per token)",
        trace.path.display(),
        trace.block_tokens,
        cost.prefill_tokens_per_second,
        cost.kv_bytes_per_token
    );
    let count = groups.len();
    KvGroupsFile::new(source, groups).write(&args.out)?;
    println!(
        "kv-groups: {count} groups of reused blocks, {} in all; kept all on a GPU they save {} of prefill per generated token",
        Bytes(bytes),
        Seconds(saved)
    );
    println!("wrote {}", args.out.display());
    Ok(())
}

pub fn run(args: &KvReplayArgs) -> Result<()> {
    if let Some(file) = &args.plot {
        plot::PlotFormat::from_path(file)?;
    }
    let cost = args.sizing.cost_model()?;
    let trace = read_mooncake(&args.trace, args.block_tokens)?;
    let runs = replay_grid(&trace, &args.policy, &args.capacity_blocks, &cost);
    print_table(&trace, &cost, &runs);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&KvReplayReport::new(&trace, &cost, &runs))?;
        residency_core::error::write_atomic(path, text.as_bytes())?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        draw(path, &trace, &runs)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn print_table(trace: &KvTrace, cost: &KvCostModel, runs: &[ReplayRun]) {
    println!(
        "kv-replay: {} ({} requests, {} input tokens, {} block references, {} tokens per block)",
        trace.path.display(),
        trace.requests.len(),
        trace.total_tokens(),
        trace.block_references(),
        trace.block_tokens
    );
    println!(
        "  {:<9} {:>9} {:>11} {:>12} {:>7} {:>13} {:>11}",
        "policy", "capacity", "bytes", "hit tokens", "hit %", "prefill saved", "hit bytes"
    );
    for run in runs {
        println!(
            "  {:<9} {:>9} {:>11} {:>12} {:>6.2}% {:>12.1}s {:>11}",
            run.policy.name(),
            run.capacity_blocks,
            Bytes(run.capacity_bytes(trace.block_tokens, cost)).to_string(),
            run.hit_tokens,
            100.0 * run.hit_ratio(),
            run.prefill_seconds_saved(cost),
            Bytes(run.hit_bytes(cost)).to_string(),
        );
    }
}

/// Hit ratio against capacity, one line per policy.
fn draw(path: &Path, trace: &KvTrace, runs: &[ReplayRun]) -> Result<()> {
    let mut lines: Vec<Line> = Vec::new();
    for run in runs {
        let point = (run.capacity_blocks as f64, run.hit_ratio());
        match lines.iter_mut().find(|l| l.label == run.policy.name()) {
            Some(line) => line.points.push(point),
            None => lines.push(Line {
                label: run.policy.name().into(),
                points: vec![point],
            }),
        }
    }
    for line in &mut lines {
        line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    plot::kv_replay_plot(
        path,
        &format!("kv-replay: {}", trace.path.display()),
        trace.block_tokens,
        lines,
    )
}

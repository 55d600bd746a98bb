//! `residency gen-checkpoint`: a safetensors checkpoint with a model's
//! real tensor names, shapes and dtypes and seeded values.

use crate::flags::{more_help, named, ModelArg};
use crate::inputs::model_from_path;
use anyhow::Result;
use residency_core::units::{parse_size, Bytes};
use residency_runtime::checkpoint::{self, GenDtype, GenOptions};
use residency_runtime::identity::Family;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(mut_arg("model", |arg| more_help("its geometry is written")(arg).required(true)))]
pub struct GenCheckpointArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Directory to create; it must not exist, or be empty.
    #[arg(long)]
    out: PathBuf,
    /// Keep only the first N MoE layers (and the dense layers before them).
    #[arg(long)]
    layers: Option<usize>,
    /// Expert format: bf16, or int8/int4 packed with an F16 scale per group
    /// (group size from the description's formats, else 128 and 64).
    #[arg(long, default_value = "bf16", value_parser = named::<GenDtype>())]
    dtype: GenDtype,
    /// Tensor-naming family (default: from the model's name).
    #[arg(long, value_parser = named::<Family>())]
    family: Option<Family>,
    /// Largest shard, e.g. `2 GiB` or `64KiB`.
    #[arg(long, default_value = "2 GiB", value_parser = parse_size)]
    shard_bytes: Bytes,
    /// Seed of the random values.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn gen_checkpoint(args: &GenCheckpointArgs) -> Result<()> {
    let path = args.model.path.as_deref().expect("clap requires --model");
    let model = model_from_path(path)?;
    let opts = GenOptions {
        family: args.family,
        dtype: args.dtype,
        moe_layers: args.layers,
        shard_bytes: args.shard_bytes.0,
        seed: args.seed,
    };
    let report = checkpoint::generate(&model, path, &args.out, &opts)?;
    crate::term::notes(&report.notes);
    let c = &report.config;
    println!(
        "wrote {}: {} ({}); layers: {} ({} MoE, {} experts each, {}); {} tensors in {} shard(s), {}",
        args.out.display(),
        c.spec().model_type,
        c.family(),
        c.layers,
        c.moe_layers().len(),
        c.experts,
        c.format.name(),
        report.tensors,
        report.shards,
        Bytes(report.bytes)
    );
    Ok(())
}

//! Checkpoints on the command line: `residency gen-checkpoint`, and a
//! checkpoint directory accepted wherever a model description is (`--model
//! DIR`), its description derived by the executor's checkpoint reader.

use crate::flags::{model_help, named, ModelArg};
use anyhow::Result;
use residency_core::model::Model;
use residency_core::units::{parse_size, Bytes};
use residency_formats::inputs::{InputPaths, Inputs, LoadedModel};
use residency_runtime::checkpoint::{self, Checkpoint, GenDtype, GenOptions};
use residency_runtime::identity::Family;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(mut_arg("model", |arg| model_help("its geometry is written")(arg).required(true)))]
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
    for note in &report.notes {
        eprintln!("note: {note}");
    }
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

/// A model description from a YAML file or a checkpoint directory, and
/// what a plan records as its sha256 (for a checkpoint: its content id,
/// the sha256 of config.json, the index and the shard headers).
fn load_model(path: &Path) -> Result<(Model, String)> {
    let ckpt = Checkpoint::open(path)?;
    let model = Model::validate(ckpt.description(), path)?;
    Ok((model, ckpt.identity.content_id))
}

/// `Model::from_yaml_file`, also accepting a checkpoint directory.
pub fn model_from_path(path: &Path) -> Result<Model> {
    if path.is_dir() {
        return Ok(load_model(path)?.0);
    }
    Ok(Model::from_yaml_file(path)?)
}

/// `Inputs::load`, also accepting a checkpoint directory as `--model`.
pub fn load_inputs(paths: &InputPaths) -> Result<Inputs> {
    let Some(dir) = paths.model.as_deref().filter(|p| p.is_dir()) else {
        return Ok(Inputs::load(paths)?);
    };
    let (model, sha256) = load_model(dir)?;
    let source = model.description.source.clone().unwrap_or_default();
    let mut inputs = Inputs::load_with_model(paths, Some(LoadedModel { model, sha256 }))?;
    inputs
        .notes
        .insert(0, format!("model derived from the {source}"));
    Ok(inputs)
}

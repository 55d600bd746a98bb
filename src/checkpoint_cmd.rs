//! Checkpoints on the command line: `residency gen-checkpoint`, and a
//! checkpoint directory or a GGUF file accepted wherever a model
//! description is (`--model DIR`, `--model FILE.gguf`), its description
//! derived by the checkpoint reader or `residency_formats::gguf`.

use crate::flags::{more_help, named, ModelArg};
use anyhow::Result;
use residency_core::model::Model;
use residency_core::units::{parse_size, Bytes};
use residency_formats::gguf;
use residency_formats::inputs::{InputPaths, Inputs, LoadedModel};
use residency_runtime::checkpoint::{self, Checkpoint, GenDtype, GenOptions};
use residency_runtime::identity::Family;
use std::path::{Path, PathBuf};

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
    crate::notes(&report.notes);
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

/// A model the planner derives from a file it does not describe in YAML:
/// a checkpoint directory or a GGUF file, with its sha256 and the notes to
/// show; `None` for a description.
fn derived_model(path: &Path) -> Result<Option<(Model, String, Vec<String>)>> {
    if path.is_dir() {
        let (model, sha256) = load_model(path)?;
        let source = model.description.source.clone().unwrap_or_default();
        return Ok(Some((
            model,
            sha256,
            vec![format!("model derived from the {source}")],
        )));
    }
    if gguf::is_gguf(path) {
        return Ok(Some(gguf::read_model(path)?));
    }
    Ok(None)
}

/// `Model::from_yaml_file`, also accepting a checkpoint directory or a
/// GGUF file (its notes on standard error).
pub fn model_from_path(path: &Path) -> Result<Model> {
    match derived_model(path)? {
        Some((model, _, notes)) => {
            crate::notes(&notes);
            Ok(model)
        }
        None => Ok(Model::from_yaml_file(path)?),
    }
}

/// `Inputs::load`, also accepting a checkpoint directory or a GGUF file as
/// `--model`.
pub fn load_inputs(paths: &InputPaths) -> Result<Inputs> {
    let Some(path) = paths.model.as_deref() else {
        return Ok(Inputs::load(paths)?);
    };
    let Some((model, sha256, notes)) = derived_model(path)? else {
        return Ok(Inputs::load(paths)?);
    };
    let mut inputs = Inputs::load_with_model(paths, Some(LoadedModel { model, sha256 }))?;
    inputs.notes.splice(0..0, notes);
    Ok(inputs)
}

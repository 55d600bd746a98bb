//! Loading a command's inputs: a model given as a YAML description, a
//! checkpoint directory or a GGUF file (`--model DIR`, `--model
//! FILE.gguf`), its description derived by the checkpoint reader or
//! `residency_formats::gguf`, and the planner's inputs around it.

use anyhow::Result;
use residency_core::cost::Instance;
use residency_core::model::Model;
use residency_core::plan::{Plan, PlanInputs};
use residency_formats::gguf;
use residency_formats::inputs::{InputPaths, Inputs, LoadedModel};
use residency_runtime::checkpoint::Checkpoint;
use std::path::Path;

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
            crate::term::notes(&notes);
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

/// A plan read back for the given inputs.
pub struct LoadedPlan {
    pub plan: Plan,
    pub inst: Instance,
    pub placement: Vec<usize>,
    /// The references of the inputs given now (not the plan's).
    pub refs: PlanInputs,
    /// The model given now.
    pub model: Model,
}

/// Reads a plan and the placement it encodes for the given inputs, with the
/// KV cache of `paths.context_tokens` kept on the cards (default: the
/// plan's own).
pub fn load_plan(file: &Path, paths: &InputPaths) -> Result<LoadedPlan> {
    let plan = Plan::read(file)?;
    // The placement is read with the capacities it was made with.
    let made_with = InputPaths {
        context_tokens: plan.inputs.context_tokens,
        constraints: Some(plan.constraints(file)?),
        ..paths.clone()
    };
    let mut inputs = load_inputs(&made_with)?;
    let mut inst = inputs.instance()?;
    if inst.kv_ids.is_empty() {
        inst.add_kv_groups(&plan.kv_groups());
    }
    crate::term::notes(&inputs.notes);
    let placement = plan.placement(&inst, file)?;
    let context_tokens = paths.context_tokens.or(plan.inputs.context_tokens);
    let constraints = (paths.constraints.clone()).unwrap_or_else(|| inputs.constraints.clone());
    if context_tokens != plan.inputs.context_tokens || constraints != inputs.constraints {
        // Re-planning for another context or other constraints: the
        // placement in use may no longer fit or meet them, and the re-plan
        // repairs it.
        inputs = inputs.with_constraints(constraints);
        inputs.refs.context_tokens = context_tokens;
        inst = inputs.instance()?;
        if inst.kv_ids.is_empty() {
            inst.add_kv_groups(&plan.kv_groups());
        }
    }
    Ok(LoadedPlan {
        plan,
        inst,
        placement,
        refs: inputs.refs,
        model: inputs.model,
    })
}

//! Exports of a plan for engines users already run. Each exporter is a pure
//! function of a plan and its instance that writes its files into a
//! directory (atomically) and says, one line per finding, what the engine
//! cannot express and what it will do instead. This module owns what the
//! exporters share: [`Export`], [`Engine`] and [`export`], and the views of
//! a plan they all read (its placement, MoE layers, trunk groups, NUMA nodes).
//!
//! One module per engine: `colibri` (`coli-place`), `llama_cpp`,
//! `ktransformers`, `kt_kernel` (ktransformers' kernels in SGLang),
//! `sglang` and `vllm`. `layer_buffers` is the one buffer
//! per MoE layer of llama.cpp and ktransformers, `expert_parallel` the
//! expert slots of SGLang and vLLM.
//!
//! GPU `g` of the profile is CUDA ordinal `g` in every engine (reorder
//! `CUDA_VISIBLE_DEVICES` if the machine numbers its cards otherwise).

pub mod baselines;
mod colibri;
mod expert_parallel;
mod kt_kernel;
mod ktransformers;
mod layer_buffers;
mod llama_cpp;
mod sglang;
#[cfg(test)]
mod tests;
mod vllm;

pub use colibri::{
    coli_allowance_bytes, coli_place, coli_place_string, ColiItem, ColiSegment, ColiTarget,
    COLI_COMPONENTS, COLI_ENV_FILE, COLI_HEAT_FILE, HEAT_STEP,
};
pub use expert_parallel::EpLayout;
pub use kt_kernel::{
    kt_kernel, KtKernelGpuExperts, KtKernelLayer, KT_KERNEL_COMMAND_FILE, KT_KERNEL_COUNTS_FILE,
    KT_KERNEL_FILE,
};
pub use ktransformers::{
    ktransformers, KtMatch, KtReplace, KtRule, KT_EXPERTS_CLASS, KT_RULES_FILE,
};
pub use layer_buffers::Buffer;
pub use llama_cpp::{
    as_exported as llama_cpp_as_exported, llama_cpp, LLAMA_ARGS_FILE, LLAMA_COMMAND_FILE,
    LLAMA_MEMORY_FILE, LLAMA_OT_FILE, LLAMA_TRUNK_NAMES,
};
pub use sglang::{sglang, SglangExpertLocation, SGLANG_ARGS_FILE, SGLANG_FILE};
pub use vllm::{vllm, VllmPlacement, VllmRank, VLLM_ARGS_FILE, VLLM_FILE};

use residency_core::cost::{Instance, Place};
use residency_core::error::{PlannerError, Result};
use residency_core::model::ModelDescription;
use residency_core::plan::Plan;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// What an export wrote and what it could not express.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Export {
    pub files: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

residency_core::named! {
    /// An engine we export to.
    pub enum Engine("export") {
        ColiPlace = "coli-place",
        LlamaCpp = "llama-cpp",
        Ktransformers = "ktransformers",
        KtKernel = "kt-kernel",
        Sglang = "sglang",
        Vllm = "vllm",
    }
}

/// What an engine's command needs of the model beside the instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelFacts<'a> {
    /// The file or directory the plan was made from (`--model`).
    pub file: Option<&'a Path>,
    /// KV-cache bytes per token over all layers.
    pub kv_bytes_per_token: Option<u64>,
    /// The context the model was trained for.
    pub context_tokens: Option<u64>,
}

impl<'a> ModelFacts<'a> {
    pub fn of(model: &ModelDescription, file: Option<&'a Path>) -> ModelFacts<'a> {
        ModelFacts {
            file,
            kv_bytes_per_token: model.kv_bytes_per_token.map(|b| b.0),
            context_tokens: model.context_tokens,
        }
    }
}

/// Runs one exporter; `model` is what the engines whose command names the
/// model or sizes its context read.
pub fn export(
    engine: Engine,
    plan: &Plan,
    inst: &Instance,
    dir: &Path,
    model: ModelFacts,
) -> Result<Export> {
    match engine {
        Engine::ColiPlace => coli_place(plan, inst, dir),
        Engine::LlamaCpp => llama_cpp(plan, inst, dir, model),
        Engine::Ktransformers => ktransformers(plan, inst, dir),
        Engine::KtKernel => kt_kernel(plan, inst, dir, model.file),
        Engine::Sglang => sglang(plan, inst, dir),
        Engine::Vllm => vllm(plan, inst, dir),
    }
}

/// The placement the plan encodes, checked against the instance.
fn placement(plan: &Plan, inst: &Instance) -> Result<Vec<usize>> {
    plan.placement(inst, Path::new("plan"))
}

/// A trunk component's name and its (layer, object) members.
type TrunkGroup = (String, Vec<(Option<usize>, usize)>);

/// Trunk objects grouped by name, in model order.
fn trunk_groups(inst: &Instance) -> Vec<TrunkGroup> {
    let mut groups: Vec<TrunkGroup> = Vec::new();
    for (o, name, layer) in inst.trunk() {
        match groups.iter_mut().find(|(n, _)| n == name) {
            Some((_, members)) => members.push((layer, o)),
            None => groups.push((name.to_string(), vec![(layer, o)])),
        }
    }
    groups
}

/// Transformer layers of the model, from the stage names `L<layer>.<kind>`
/// and at least one past the last of `moe_layers` (engines index their
/// per-layer tables by transformer layer, dense layers included).
fn model_layers(inst: &Instance, moe_layers: &[usize]) -> usize {
    inst.stages
        .iter()
        .filter_map(|s| {
            s.name
                .strip_prefix('L')?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .chain(moe_layers.iter().copied())
        .max()
        .map_or(0, |l| l + 1)
}

/// The warning of an engine that runs the whole trunk on its GPUs by its
/// own parallelism, when the instance has a trunk.
fn trunk_not_expressed(engine: &str, inst: &Instance) -> Option<String> {
    inst.trunk().next().is_some().then(|| {
        format!(
            "{engine} runs the trunk (attention, dense and shared layers, lm_head) on every rank by its own parallelism: the plan's trunk placement is not expressed"
        )
    })
}

/// `text` as one POSIX shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| PlannerError::io(dir, e))
}

fn join<T: fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    items
        .into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// What an engine without a disk tier or NUMA placement cannot express of
/// the plan, worded for that engine: `on_disk` gets how many experts the
/// plan streams from a drive, `numa` the RAM nodes it chooses between.
fn unexpressed_tiers(
    inst: &Instance,
    placement: &[usize],
    on_disk: impl Fn(usize) -> String,
    numa: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let experts = experts_on_disk(inst, placement);
    if experts > 0 {
        warnings.push(on_disk(experts));
    }
    let nodes = numa_nodes_used(inst, placement);
    if !nodes.is_empty() {
        warnings.push(numa(&join(&nodes, ", ")));
    }
    warnings
}

/// Routed experts the placement streams from a drive.
fn experts_on_disk(inst: &Instance, placement: &[usize]) -> usize {
    inst.expert_ids
        .iter()
        .flatten()
        .filter(|&&o| matches!(inst.places[placement[o]], Place::Disk(_)))
        .count()
}

/// RAM nodes the placement uses, when it uses more than one.
fn numa_nodes_used(inst: &Instance, placement: &[usize]) -> Vec<Place> {
    let used: BTreeSet<Place> = placement
        .iter()
        .map(|&q| inst.places[q])
        .filter(|p| matches!(p, Place::Ram(_)))
        .collect();
    if used.len() > 1 {
        used.into_iter().collect()
    } else {
        Vec::new()
    }
}

//! The `ktransformers` export: optimize-rule YAML
//! (`--optimize_config_path`): one `match`/`replace` rule per (device,
//! layers) of routed experts (`model.layers.N.mlp.experts`,
//! `KTransformersExperts` with `generate_device` `cuda:G` or `cpu`) and
//! `class: default` rules moving trunk modules; a layer has one device,
//! chosen as for llama.cpp.

#[cfg(test)]
mod tests;

use super::layer_buffers::{layer_buffers, Buffer};
use super::llama_cpp::LLAMA_TRUNK_NAMES;
use super::{create_dir, join, placement, trunk_groups, unexpressed_tiers, Export};
use residency_core::cost::Instance;
use residency_core::error::{write_atomic, Result};
use residency_core::plan::Plan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Why the engine cannot hold per-expert decisions.
const LAYOUT: &str =
    "ktransformers replaces the routed experts of a layer as one module (model.layers.N.mlp.experts)";
pub const KT_RULES_FILE: &str = "ktransformers_optimize_rules.yaml";

/// One rule of a ktransformers optimize-rule file: modules whose name
/// matches `match.name` (Python `re.match`) are replaced by `replace`; the
/// first matching rule wins, so specific rules come first.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtRule {
    #[serde(rename = "match")]
    pub matches: KtMatch,
    pub replace: KtReplace,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtMatch {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtReplace {
    pub class: String,
    pub kwargs: BTreeMap<String, String>,
}

/// The ktransformers experts operator (CPU or GPU kernels by `generate_op`).
pub const KT_EXPERTS_CLASS: &str = "ktransformers.operators.experts.KTransformersExperts";

/// ktransformers' device name of a buffer.
fn kt_device(buffer: Buffer) -> String {
    match buffer {
        Buffer::Cuda(g) => format!("cuda:{g}"),
        Buffer::Cpu => "cpu".into(),
    }
}

/// Module-name pattern of a trunk component in ktransformers' (Hugging
/// Face) models, over the given layers.
fn kt_trunk_pattern(name: &str, layers: &BTreeSet<usize>) -> Option<String> {
    let alt = join(layers, "|");
    match name {
        "attn" => Some(format!(r"^model\.layers\.({alt})\.self_attn$")),
        "dense_ffn" => Some(format!(r"^model\.layers\.({alt})\.mlp$")),
        "shared_expert" => Some(format!(r"^model\.layers\.({alt})\.mlp\.shared_experts$")),
        "lm_head" => Some(r"^lm_head$".into()),
        _ => None,
    }
}

/// Where the plan puts the trunk, as ktransformers' rules take it.
struct Trunk {
    /// Trunk bytes per card.
    gpu_bytes: Vec<u64>,
    /// (component, buffer) -> layers, in model order of components.
    rules: Vec<((String, Buffer), BTreeSet<usize>)>,
    /// Each layer's attention buffer.
    attn_buffer: BTreeMap<usize, Buffer>,
}

/// The trunk's rules and bytes per card; components without a known
/// module name said in `warnings`.
fn trunk(inst: &Instance, placement: &[usize], warnings: &mut Vec<String>) -> Trunk {
    let mut trunk_gpu = vec![0u64; inst.resources.gpus()];
    let mut trunk_rules: Vec<((String, Buffer), BTreeSet<usize>)> = Vec::new();
    let mut attn_buffer: BTreeMap<usize, Buffer> = BTreeMap::new();
    let mut unknown: Vec<String> = Vec::new();
    for (name, members) in trunk_groups(inst) {
        if kt_trunk_pattern(&name, &BTreeSet::new()).is_none() {
            unknown.push(format!("`{name}`"));
            continue;
        }
        for (layer, o) in members {
            let buffer = Buffer::of(inst.places[placement[o]]);
            if let Buffer::Cuda(g) = buffer {
                trunk_gpu[g] += inst.objects[o].gpu_bytes;
            }
            if let (Some(layer), "attn") = (layer, name.as_str()) {
                attn_buffer.insert(layer, buffer);
            }
            let key = (name.clone(), buffer);
            match trunk_rules.iter_mut().find(|(k, _)| *k == key) {
                Some((_, layers)) => layers.extend(layer),
                None => trunk_rules.push((key, layer.into_iter().collect())),
            }
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!(
            "ktransformers: no module name is known for trunk component(s) {} (known: {}); no rule is written, so they stay where ktransformers' defaults put them",
            unknown.join(", "),
            LLAMA_TRUNK_NAMES.join(", ")
        ));
    }
    Trunk {
        gpu_bytes: trunk_gpu,
        rules: trunk_rules,
        attn_buffer,
    }
}

/// Writes `ktransformers_optimize_rules.yaml` (`--optimize_config_path`).
///
/// ktransformers replaces `model.layers.N.mlp.experts` as one module, so
/// each MoE layer gets one device, chosen like llama.cpp's buffer
/// ([`layer_buffers`]): GPU layers run `KExpertsMarlin` there, CPU layers
/// `KExpertsCPU` with their output sent to the layer's attention card.
/// Trunk components go where the plan puts them (`class: default`).
pub fn ktransformers(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let layers_of = inst.moe_layers()?;
    let mut warnings = Vec::new();

    let Trunk {
        gpu_bytes: trunk_gpu,
        rules: trunk_rules,
        attn_buffer,
    } = trunk(inst, &placement, &mut warnings);
    let chosen = layer_buffers(plan, inst, &placement, &trunk_gpu, LAYOUT, &mut warnings)?;
    let first_gpu = (inst.resources.gpus() > 0).then_some(Buffer::Cuda(0));
    let mut expert_rules: BTreeMap<(Buffer, Buffer), BTreeSet<usize>> = BTreeMap::new();
    for (&layer, &buffer) in layers_of.iter().zip(&chosen) {
        // CPU experts hand their output to the card that runs the layer's
        // attention (else the first card, else the CPU).
        let out = match buffer {
            Buffer::Cuda(_) => buffer,
            Buffer::Cpu => match attn_buffer.get(&layer) {
                Some(&b @ Buffer::Cuda(_)) => b,
                _ => first_gpu.unwrap_or(Buffer::Cpu),
            },
        };
        expert_rules.entry((buffer, out)).or_default().insert(layer);
    }
    warnings.extend(unexpressed_tiers(
        inst,
        &placement,
        |on_disk| format!(
            "ktransformers has no disk tier: the {on_disk} experts the plan streams from disk are loaded with their layer (into RAM when the layer is on the CPU)"
        ),
        |nodes| format!(
            "ktransformers' CPU experts use one memory pool: the plan's choices between {nodes} are not expressed"
        ),
    ));

    let kwargs = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    let mut rules: Vec<KtRule> = expert_rules
        .iter()
        .map(|(&(buffer, out), layers)| {
            let (op, device) = match buffer {
                Buffer::Cuda(_) => ("KExpertsMarlin", kt_device(buffer)),
                Buffer::Cpu => ("KExpertsCPU", "cpu".into()),
            };
            KtRule {
                matches: KtMatch {
                    name: format!(r"^model\.layers\.({})\.mlp\.experts$", join(layers, "|")),
                },
                replace: KtReplace {
                    class: KT_EXPERTS_CLASS.into(),
                    kwargs: kwargs(&[
                        ("prefill_device", kt_device(out)),
                        ("prefill_op", "KExpertsTorch".into()),
                        ("generate_device", device),
                        ("generate_op", op.into()),
                        ("out_device", kt_device(out)),
                    ]),
                },
                // The experts' own submodules are the operator's business.
                recursive: Some(false),
            }
        })
        .collect();
    for ((name, buffer), layers) in &trunk_rules {
        let Some(pattern) = kt_trunk_pattern(name, layers) else {
            continue;
        };
        rules.push(KtRule {
            matches: KtMatch { name: pattern },
            replace: KtReplace {
                class: "default".into(),
                kwargs: kwargs(&[
                    ("generate_device", kt_device(*buffer)),
                    ("prefill_device", kt_device(*buffer)),
                ]),
            },
            recursive: None,
        });
    }
    let yaml = serde_norway::to_string(&rules).expect("rules of strings serialise");
    create_dir(dir)?;
    let path = dir.join(KT_RULES_FILE);
    write_atomic(&path, yaml.as_bytes())?;
    Ok(Export {
        files: vec![path],
        warnings,
    })
}

// ---------------------------------------------------------------------------

//! The `kt-kernel` export: ktransformers' CPU expert kernels inside SGLang.
//! Each MoE layer keeps a set of its routed experts on the GPUs and runs
//! the rest on the CPU (AMX/AVX). This module writes the plan's set per
//! layer (`kt_kernel_gpu_experts.json`), the counts that make the engine
//! choose exactly that set (`kt_kernel_gpu_experts.pt`, written without
//! Python) and the `sglang.launch_server` command (`kt_kernel_command.txt`).
//!
//! What the engine takes, read in ktransformers' SGLang fork
//! (kvcache-ai/sglang at 04653fa: `python/sglang/srt/server_args.py`,
//! `layers/moe/kt_ep_wrapper.py` `_init_kt_gpu_experts_masks`,
//! `eplb/expert_location.py`) and in kvcache-ai/ktransformers
//! (`doc/en/kt-kernel/experts-sched-Tutorial.md`,
//! `kt-kernel/python/experts_base.py` `generate_gpu_experts_masks`):
//! - `--kt-num-gpu-experts K` is per MoE layer only as a budget: SGLang
//!   multiplies it by the MoE layers, and `--kt-gpu-experts-ratio r` sets
//!   the budget to `int(r * layers * experts)` instead.
//! - `--kt-expert-placement-strategy frequency` with `--init-expert-location
//!   FILE.pt` spends that budget on the (layer, expert) pairs with the
//!   highest `logical_count` (a torch tensor `[passes, layers, experts]`,
//!   summed over passes) over all layers at once, so layers may differ in
//!   count. It reads only `.pt` files for it, so that is what we write.
//! - Every card of `--tensor-parallel-size` holds a slice of every GPU
//!   expert: there is one mask for all cards.
//! - Upstream SGLang (sgl-project/sglang at 7a0f545, `kt_ep_wrapper.py`)
//!   takes no mask: the experts with ids below `K` in every layer are on
//!   the GPU.

#[cfg(test)]
mod tests;

use super::{
    create_dir, model_layers, placement, shell_quote, trunk_not_expressed, unexpressed_tiers,
    Export,
};
use crate::torch::{self, DType, Tensor};
use residency_core::cost::{Instance, Place};
use residency_core::error::{write_atomic, PlannerError, Result};
use residency_core::plan::Plan;
use residency_core::units::Bytes;
use std::path::Path;

pub const KT_KERNEL_FILE: &str = "kt_kernel_gpu_experts.json";
/// The torch file `--init-expert-location` reads: [`KT_KERNEL_FILE`]'s
/// masks as counts.
pub const KT_KERNEL_COUNTS_FILE: &str = "kt_kernel_gpu_experts.pt";
pub const KT_KERNEL_COMMAND_FILE: &str = "kt_kernel_command.txt";

/// `kt_kernel_gpu_experts.json`: the plan's GPU experts of every MoE layer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KtKernelGpuExperts {
    /// Transformer layers, dense ones included: rows of the count tensor.
    pub num_hidden_layers: usize,
    /// Routed experts per MoE layer: its columns.
    pub num_experts: usize,
    /// GPU experts over all MoE layers: the budget the command sets.
    pub total_gpu_experts: usize,
    /// One entry per MoE layer, in model order.
    pub layers: Vec<KtKernelLayer>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KtKernelLayer {
    /// Transformer layer (SGLang's `layer_idx`).
    pub layer: usize,
    /// Its GPU expert mask, as the ids that are true, ascending.
    pub gpu_experts: Vec<usize>,
    pub count: usize,
    /// The plan's GPU experts of the layer on each card (profile GPU `g` is
    /// CUDA ordinal `g`); kt-kernel slices each over all cards instead.
    pub by_card: Vec<Vec<usize>>,
}

/// Writes `kt_kernel_gpu_experts.json`, `kt_kernel_gpu_experts.pt` and
/// `kt_kernel_command.txt` (the server line). The `.pt` holds
/// `{"logical_count": float32 [1, num_hidden_layers, num_experts]}`: the
/// plan's GPU experts count 2 and the other routed experts of MoE layers 1
/// (dense layers' rows 0), so the frequency strategy's top `total_gpu_experts` over all layers
/// are exactly the plan's masks; `model_file` becomes `--model-path` when
/// it is a Hugging Face checkpoint directory.
pub fn kt_kernel(
    plan: &Plan,
    inst: &Instance,
    dir: &Path,
    model_file: Option<&Path>,
) -> Result<Export> {
    let gpus = inst.resources.gpus();
    if gpus == 0 {
        return Err(PlannerError::Infeasible(
            "the kt-kernel export needs at least one GPU in the profile (SGLang runs the trunk and the GPU experts there); use ktransformers, llama-cpp or coli-place for a CPU-only plan".into(),
        ));
    }
    let placement = placement(plan, inst)?;
    let layers_of = inst.moe_layers()?;
    let experts = inst.expert_ids.first().map_or(0, Vec::len);
    let layers = gpu_experts(inst, &placement, &layers_of);
    let total: usize = layers.iter().map(|l| l.count).sum();
    let file = KtKernelGpuExperts {
        num_hidden_layers: model_layers(inst, &layers_of),
        num_experts: experts,
        total_gpu_experts: total,
        layers,
    };

    let mut warnings = Vec::new();
    warnings.extend(card_warnings(inst, &placement, &file, gpus));
    warnings.extend(prefix_warning(plan, inst, &placement, &file));
    warnings.extend(unexpressed_tiers(
        inst,
        &placement,
        |on_disk| format!(
            "kt-kernel has no disk tier: the {on_disk} experts the plan streams from disk are CPU experts, held in RAM with the others (loaded from --kt-weight-path)"
        ),
        |nodes| format!(
            "kt-kernel splits every CPU expert over its thread pools, one per NUMA node (--kt-threadpool-count): the plan's choices between {nodes} are not expressed"
        ),
    ));
    warnings.extend(trunk_not_expressed("SGLang", inst));
    let model = match model_file.filter(|p| p.join("config.json").is_file()) {
        Some(p) => shell_quote(&p.display().to_string()),
        None => {
            warnings.push(format!(
                "{KT_KERNEL_COMMAND_FILE}: the plan's model is not a Hugging Face checkpoint directory, so `--model-path MODEL_DIR` stands for it; plan with --model CHECKPOINT_DIR to get its path"
            ));
            "MODEL_DIR".into()
        }
    };

    create_dir(dir)?;
    let json_path = dir.join(KT_KERNEL_FILE);
    let pt_path = dir.join(KT_KERNEL_COUNTS_FILE);
    let command_path = dir.join(KT_KERNEL_COMMAND_FILE);
    let json = serde_json::to_string_pretty(&file).expect("lists of integers serialise");
    write_atomic(&json_path, (json + "\n").as_bytes())?;
    write_atomic(
        &pt_path,
        &torch::write(&[("logical_count", &gpu_expert_counts(&file))]),
    )?;
    let command = format!(
        "# kt-kernel in SGLang: ktransformers' fork (kvcache-ai/sglang, `pip install sglang-kt`), which takes GPU expert masks.\n\
         # {pt_name}: the plan's GPU experts as the activation counts --init-expert-location reads:\n\
         # they count 2 and the layer's other experts 1, so the frequency strategy's top {total} are the plan's.\n\
         # KT_WEIGHTS_DIR: the CPU expert weights in --kt-method's format (kt-kernel/scripts/convert_cpu_weights.py;\n\
         # the model directory itself for FP8/BF16); CPU_THREADS: physical cores minus GPUs, as kt-kernel's docs advise.\n\
         # No --kt-enable-dynamic-expert-update: it would replace the plan's experts at run time.\n\
         python -m sglang.launch_server --model-path {model} --trust-remote-code \
         --kt-weight-path KT_WEIGHTS_DIR --kt-method AMXINT4 --kt-cpuinfer CPU_THREADS \
         --kt-threadpool-count {pools} --tensor-parallel-size {gpus} {budget} \
         --kt-expert-placement-strategy frequency --init-expert-location {pt_arg}\n",
        pt_name = KT_KERNEL_COUNTS_FILE,
        pools = inst.resources.numa_nodes().max(1),
        budget = budget_flag(total, layers_of.len(), experts),
        pt_arg = shell_quote(&pt_path.display().to_string()),
    );
    write_atomic(&command_path, command.as_bytes())?;
    Ok(Export {
        files: vec![json_path, pt_path, command_path],
        warnings,
    })
}

/// The counts of [`KT_KERNEL_COUNTS_FILE`]: 2 for a GPU expert, 1 for
/// another routed expert, 0 in dense layers (float32, as `torch.zeros`).
fn gpu_expert_counts(file: &KtKernelGpuExperts) -> Tensor {
    let experts = file.num_experts;
    let mut values = vec![0.0; file.num_hidden_layers * experts];
    for layer in &file.layers {
        let row = &mut values[layer.layer * experts..][..experts];
        row.fill(1.0);
        for &e in &layer.gpu_experts {
            row[e] = 2.0;
        }
    }
    Tensor {
        dtype: DType::Float32,
        shape: vec![1, file.num_hidden_layers, experts],
        values,
    }
}

/// Each MoE layer's experts the placement puts on a GPU, all cards
/// together and per card.
fn gpu_experts(inst: &Instance, placement: &[usize], layers_of: &[usize]) -> Vec<KtKernelLayer> {
    inst.expert_ids
        .iter()
        .zip(layers_of)
        .map(|(ids, &layer)| {
            let mut by_card = vec![Vec::new(); inst.resources.gpus()];
            for (e, &o) in ids.iter().enumerate() {
                if let Place::Gpu(g) = inst.places[placement[o]] {
                    by_card[g].push(e);
                }
            }
            let mut gpu_experts: Vec<usize> = by_card.iter().flatten().copied().collect();
            gpu_experts.sort_unstable();
            KtKernelLayer {
                layer,
                count: gpu_experts.len(),
                gpu_experts,
                by_card,
            }
        })
        .collect()
}

/// The flag that sets SGLang's budget to exactly `total` GPU experts over
/// `moe_layers` layers of `experts`: the per-layer count when it divides,
/// else the ratio whose `int(ratio * moe_layers * experts)` is `total` (the
/// midpoint between `total` and `total + 1`, which float rounding keeps).
fn budget_flag(total: usize, moe_layers: usize, experts: usize) -> String {
    if total.is_multiple_of(moe_layers.max(1)) {
        format!("--kt-num-gpu-experts {}", total / moe_layers.max(1))
    } else {
        let slots = (moe_layers * experts) as f64;
        format!("--kt-gpu-experts-ratio {}", (total as f64 + 0.5) / slots)
    }
}

/// Tensor parallelism slices every GPU expert and the whole trunk over all
/// cards: with several, the plan's card per expert is lost (the cost model
/// has one card per object, so the bytes per card say what changes), and a
/// card whose slice passes its capacity will not load.
fn card_warnings(
    inst: &Instance,
    placement: &[usize],
    file: &KtKernelGpuExperts,
    gpus: usize,
) -> Vec<String> {
    let mut planned = vec![0u64; gpus];
    for ids in &inst.expert_ids {
        for &o in ids {
            if let Place::Gpu(g) = inst.places[placement[o]] {
                planned[g] += inst.objects[o].gpu_bytes;
            }
        }
    }
    let experts: u64 = planned.iter().sum();
    let trunk: u64 = inst
        .trunk()
        .map(|(o, _, _)| inst.objects[o].gpu_bytes)
        .sum();
    let mut warnings = Vec::new();
    if gpus > 1 && file.total_gpu_experts > 0 {
        let per_card: Vec<String> = planned
            .iter()
            .enumerate()
            .map(|(g, &b)| format!("gpu:{g} {}", Bytes(b)))
            .collect();
        warnings.push(format!(
            "kt-kernel slices every GPU expert over the {gpus} cards of --tensor-parallel-size {gpus}: each card holds 1/{gpus} of the {} GPU experts ({} of expert weights) instead of the plan's cards per expert ({})",
            file.total_gpu_experts,
            Bytes(experts / gpus as u64),
            per_card.join(", ")
        ));
    }
    let slice = (experts + trunk).div_ceil(gpus as u64);
    for (g, &capacity) in inst.resources.gpu_capacity_bytes.iter().enumerate() {
        if slice > capacity {
            warnings.push(format!(
                "gpu:{g} gets {} ({slice} bytes): 1/{gpus} of the GPU experts and of the whole trunk, which SGLang keeps on the cards, more than its capacity {} ({capacity} bytes): expect an out-of-memory error at load; lower the budget flag in {KT_KERNEL_COMMAND_FILE}, or plan on a profile whose cards are all as large",
                Bytes(slice),
                Bytes(capacity)
            ));
        }
    }
    warnings
}

/// Upstream SGLang takes one count `K` for all layers and keeps the experts
/// with ids below it on the GPU; priced at the `K` that adds no GPU expert
/// to the plan's, when that differs from the plan's masks.
fn prefix_warning(
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    file: &KtKernelGpuExperts,
) -> Option<String> {
    let moe_layers = file.layers.len().max(1);
    let k = file.total_gpu_experts / moe_layers;
    let prefix: Vec<usize> = (0..k).collect();
    if file.layers.iter().all(|l| l.gpu_experts == prefix) {
        return None;
    }
    let exported = prefix_placement(inst, placement, file, k);
    Some(format!(
        "upstream SGLang (sgl-project/sglang) takes no masks: --kt-num-gpu-experts K keeps the experts with ids below K of every MoE layer on the GPU. The closest, K = {k} ({} of the plan's {} GPU experts), gives {:.3} ms per token by the cost model, the plan {:.3} ms: run ktransformers' fork (sglang-kt) for the plan's masks",
        k * file.layers.len(),
        file.total_gpu_experts,
        inst.evaluate(&exported).token_seconds * 1e3,
        plan.objective.token_seconds * 1e3
    ))
}

/// `placement` with the experts below `k` of each MoE layer on a GPU (where the
/// plan has them, else the card with most of the layer's GPU experts, lower
/// card on ties) and the plan's other GPU experts in the first RAM node.
fn prefix_placement(
    inst: &Instance,
    placement: &[usize],
    file: &KtKernelGpuExperts,
    k: usize,
) -> Vec<usize> {
    let mut out = placement.to_vec();
    let first_ram = inst.places.iter().position(|p| matches!(p, Place::Ram(_)));
    for (ids, layer) in inst.expert_ids.iter().zip(&file.layers) {
        let card = (0..layer.by_card.len())
            .max_by(|&a, &b| {
                layer.by_card[a]
                    .len()
                    .cmp(&layer.by_card[b].len())
                    .then(b.cmp(&a))
            })
            .unwrap_or(0);
        for (e, &o) in ids.iter().enumerate() {
            let on_gpu = matches!(inst.places[placement[o]], Place::Gpu(_));
            if e < k && !on_gpu {
                out[o] = inst.place_index(Place::Gpu(card));
            } else if e >= k && on_gpu {
                out[o] = first_ram.unwrap_or(placement[o]);
            }
        }
    }
    out
}

//! The `vllm` export: the EPLB map (`physical_to_logical_map` over MoE
//! layers) and per-rank expert lists, ranks grouped by the profile's hosts,
//! with the data-parallel and EPLB arguments per host.

#[cfg(test)]
mod tests;

use super::expert_parallel::{ep_layout, ep_warnings};
use super::{create_dir, join, placement, Export};
use residency_core::cost::Instance;
use residency_core::error::{write_atomic, Result};
use residency_core::plan::Plan;
use std::path::Path;

pub const VLLM_FILE: &str = "vllm_expert_placement.json";
pub const VLLM_ARGS_FILE: &str = "vllm_args.txt";

/// One EP rank of the vLLM export.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmRank {
    pub rank: usize,
    /// The profile's host of the GPU, null when it names none.
    pub host: Option<String>,
    pub gpu: usize,
    /// `experts[l]`: logical experts of MoE ordinal `l` in this rank's slots.
    pub experts: Vec<Vec<usize>>,
}

/// vLLM's EPLB state as a file: `physical_to_logical_map` over MoE layers
/// (EPLB's `(moe_layers, physical)` shape) and the same map rank by rank.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmPlacement {
    pub num_redundant_experts: usize,
    pub moe_layers: Vec<usize>,
    pub physical_to_logical_map: Vec<Vec<usize>>,
    pub ranks: Vec<VllmRank>,
}

/// Writes `vllm_expert_placement.json` and `vllm_args.txt`. Ranks are GPUs
/// grouped by host (vLLM numbers EP ranks node by node); the arguments give
/// the data-parallel sizes per host and EPLB's redundant experts.
pub fn vllm(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let moe = inst.moe_layers()?;
    let layout = ep_layout(inst, &placement)?;
    let mut warnings = ep_warnings("vLLM", plan, inst, &placement, &layout);
    warnings.push(
        "vLLM has no option to load an expert map at start: it begins from the trivial map and EPLB rebalances from its load windows; load physical_to_logical_map into EplbState (or compare it with EPLB's) to serve the plan's placement".into(),
    );
    let hosts = &inst.resources.gpu_hosts;
    let ranks: Vec<VllmRank> = layout
        .rank_gpus
        .iter()
        .enumerate()
        .map(|(r, &g)| VllmRank {
            rank: r,
            host: hosts[g].clone(),
            gpu: g,
            experts: layout
                .map
                .iter()
                .map(|row| row[r * layout.slots..(r + 1) * layout.slots].to_vec())
                .collect(),
        })
        .collect();
    let mut per_host: Vec<(Option<String>, usize)> = Vec::new();
    for rank in &ranks {
        match per_host.iter_mut().find(|(h, _)| *h == rank.host) {
            Some((_, n)) => *n += 1,
            None => per_host.push((rank.host.clone(), 1)),
        }
    }
    let file = VllmPlacement {
        num_redundant_experts: layout.redundant,
        moe_layers: moe,
        physical_to_logical_map: layout.map.clone(),
        ranks,
    };
    let json = serde_json::to_string_pretty(&file).expect("a map of integers serialises");
    let eplb = format!(
        "--enable-expert-parallel --data-parallel-size {} --enable-eplb --eplb-config '{{\"num_redundant_experts\":{}}}'",
        layout.rank_gpus.len(),
        layout.redundant
    );
    let args = if per_host.len() > 1 {
        join(
            per_host.iter().enumerate().map(|(i, (h, n))| {
                format!(
                    "# host {}: {eplb} --data-parallel-size-local {n} --data-parallel-start-rank {}",
                    h.as_deref().unwrap_or("(unnamed)"),
                    per_host[..i].iter().map(|(_, n)| n).sum::<usize>()
                )
            }),
            "\n",
        )
    } else {
        eplb
    };
    create_dir(dir)?;
    let path = dir.join(VLLM_FILE);
    let args_path = dir.join(VLLM_ARGS_FILE);
    write_atomic(&path, (json + "\n").as_bytes())?;
    write_atomic(&args_path, (args + "\n").as_bytes())?;
    Ok(Export {
        files: vec![path, args_path],
        warnings,
    })
}

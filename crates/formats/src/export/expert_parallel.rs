//! Expert parallelism, shared by the `sglang` and `vllm` exports: the
//! plan's GPU experts as equal slots per rank (one rank per GPU, ranks
//! grouped by the profile's hosts). Expert-parallel engines hold every
//! expert on some GPU in equal slots per rank: experts the plan leaves off
//! the GPUs, and the padding replicas, are the warnings' business.

use super::trunk_not_expressed;
use residency_core::cost::{Instance, Place};
use residency_core::error::{PlannerError, Result};
use residency_core::plan::Plan;
use residency_core::units::Bytes;

/// is slot `i` of rank `r`.
#[derive(Debug, Clone, PartialEq)]
pub struct EpLayout {
    /// GPU of each rank, grouped by host (hosts in order of their first GPU).
    pub rank_gpus: Vec<usize>,
    pub slots: usize,
    /// `map[l][p]`: logical expert of physical expert `p` of MoE ordinal `l`.
    pub map: Vec<Vec<usize>>,
    /// Physical experts beyond one per logical expert.
    pub redundant: usize,
    /// Experts the plan keeps off the GPUs, placed on one:
    /// `(ordinal, expert, gpu)`.
    pub moved: Vec<(usize, usize, usize)>,
}

/// The plan's GPU experts as EP slots. Engines with expert parallelism keep
/// every expert on some GPU, so experts the plan leaves in RAM or on disk
/// go, hottest first, to the rank with the fewest experts of their layer
/// (lower rank on ties); ranks short of `slots` (the fullest rank of any
/// layer) fill up with replicas of the layer's hottest experts they lack.
pub(super) fn ep_layout(inst: &Instance, placement: &[usize]) -> Result<EpLayout> {
    let gpus = inst.resources.gpus();
    if gpus == 0 {
        return Err(PlannerError::Infeasible(
            "the sglang and vllm exports need at least one GPU in the profile; use coli-place, llama-cpp or ktransformers for a CPU-only plan".into(),
        ));
    }
    let hosts = &inst.resources.gpu_hosts;
    let mut host_order: Vec<&Option<String>> = Vec::new();
    for h in hosts {
        if !host_order.contains(&h) {
            host_order.push(h);
        }
    }
    let rank_gpus: Vec<usize> = host_order
        .iter()
        .flat_map(|&h| (0..gpus).filter(move |&g| &hosts[g] == h))
        .collect();
    let rate = |l: usize, e: usize| inst.objects[inst.expert_ids[l][e]].use_rate;
    let mut moved = Vec::new();
    let per_rank: Vec<Vec<Vec<usize>>> = inst
        .expert_ids
        .iter()
        .enumerate()
        .map(|(l, ids)| {
            let mut ranks: Vec<Vec<usize>> = rank_gpus
                .iter()
                .map(|&g| {
                    let at = inst.place_index(Place::Gpu(g));
                    (0..ids.len())
                        .filter(|&e| placement[ids[e]] == at)
                        .collect()
                })
                .collect();
            let mut off: Vec<usize> = (0..ids.len())
                .filter(|&e| !matches!(inst.places[placement[ids[e]]], Place::Gpu(_)))
                .collect();
            off.sort_by(|&a, &b| rate(l, b).total_cmp(&rate(l, a)).then(a.cmp(&b)));
            for e in off {
                let r = (0..ranks.len())
                    .min_by_key(|&r| ranks[r].len())
                    .unwrap_or(0);
                ranks[r].push(e);
                moved.push((l, e, rank_gpus[r]));
            }
            ranks
        })
        .collect();
    let slots = per_rank.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let map = per_rank
        .into_iter()
        .enumerate()
        .map(|(l, ranks)| {
            let mut hottest: Vec<usize> = (0..inst.expert_ids[l].len()).collect();
            hottest.sort_by(|&a, &b| rate(l, b).total_cmp(&rate(l, a)).then(a.cmp(&b)));
            ranks
                .into_iter()
                .flat_map(|mut experts| {
                    let replicas: Vec<usize> = hottest
                        .iter()
                        .copied()
                        .filter(|e| !experts.contains(e))
                        .take(slots - experts.len())
                        .collect();
                    experts.extend(replicas);
                    experts
                })
                .collect()
        })
        .collect();
    let experts = inst.expert_ids.first().map_or(0, Vec::len);
    Ok(EpLayout {
        redundant: rank_gpus.len() * slots - experts,
        rank_gpus,
        slots,
        map,
        moved,
    })
}

/// Warnings shared by the expert-parallel exports: experts moved onto GPUs
/// (priced with the cost model, replicas left out: it has one place per
/// object), cards past their capacity, and the trunk the engine replicates.
pub(super) fn ep_warnings(
    engine: &str,
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    layout: &EpLayout,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let moved = &layout.moved;
    if !moved.is_empty() {
        let mut exported = placement.to_vec();
        let mut mass = 0.0;
        for &(l, e, g) in moved.iter() {
            let o = inst.expert_ids[l][e];
            exported[o] = inst.place_index(Place::Gpu(g));
            mass += inst.objects[o].use_rate;
        }
        warnings.push(format!(
            "{engine} keeps every expert on a GPU: the {} experts the plan leaves in RAM or on disk (use-rate mass {mass:.3} per token) go to the rank with the fewest experts of their layer; the cost model gives {:.3} ms per token as exported (replicas not counted), the plan {:.3} ms",
            moved.len(),
            inst.evaluate(&exported).token_seconds * 1e3,
            plan.objective.token_seconds * 1e3
        ));
    }
    for (r, &g) in layout.rank_gpus.iter().enumerate() {
        let bytes: u64 = layout
            .map
            .iter()
            .enumerate()
            .flat_map(|(l, row)| {
                row[r * layout.slots..(r + 1) * layout.slots]
                    .iter()
                    .map(move |&e| inst.objects[inst.expert_ids[l][e]].gpu_bytes)
            })
            .sum();
        let capacity = inst.resources.gpu_capacity_bytes[g];
        if bytes > capacity {
            warnings.push(format!(
                "rank {r} (gpu:{g}) gets {} ({bytes} bytes) of experts, more than gpu:{g}'s capacity {} ({capacity} bytes): expect an out-of-memory error at load; give the plan more GPUs or a smaller expert format",
                Bytes(bytes),
                Bytes(capacity)
            ));
        }
    }
    warnings.extend(trunk_not_expressed(engine, inst));
    warnings
}

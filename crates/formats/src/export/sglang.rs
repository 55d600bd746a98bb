//! The `sglang` export: the `--init-expert-location` JSON
//! (`physical_to_logical_map`, one row per layer) and the
//! `--ep-size`/`--ep-num-redundant-experts` it needs.

#[cfg(test)]
mod tests;

use super::expert_parallel::{ep_layout, ep_warnings};
use super::{create_dir, model_layers, placement, Export};
use residency_core::cost::Instance;
use residency_core::error::{write_atomic, Result};
use residency_core::plan::Plan;
use std::path::Path;

pub const SGLANG_FILE: &str = "sglang_expert_location.json";
pub const SGLANG_ARGS_FILE: &str = "sglang_args.txt";

/// The `--init-expert-location` file of SGLang: `physical_to_logical_map`,
/// one row per transformer layer (SGLang indexes by layer id; rows of dense
/// layers are the trivial map `p % experts` and unused).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangExpertLocation {
    pub physical_to_logical_map: Vec<Vec<usize>>,
}

/// Writes `sglang_expert_location.json` and `sglang_args.txt`
/// (`--ep-size`, `--ep-num-redundant-experts`, `--init-expert-location`).
/// Only the map is written: SGLang passes every key of the file to
/// `init_by_mapping`, so a `logical_count` beside it would be an error.
pub fn sglang(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let layers_of = inst.moe_layers()?;
    let layout = ep_layout(inst, &placement)?;
    let warnings = ep_warnings("SGLang", plan, inst, &placement, &layout);
    let layers = model_layers(inst, &layers_of);
    let experts = inst.expert_ids.first().map_or(0, Vec::len);
    let physical = layout.rank_gpus.len() * layout.slots;
    let mut rows: Vec<Vec<usize>> = (0..layers)
        .map(|_| (0..physical).map(|p| p % experts.max(1)).collect())
        .collect();
    for (l, &layer) in layers_of.iter().enumerate() {
        rows[layer] = layout.map[l].clone();
    }
    let file = SglangExpertLocation {
        physical_to_logical_map: rows,
    };
    let json = serde_json::to_string(&file).expect("a map of integers serialises");
    create_dir(dir)?;
    let path = dir.join(SGLANG_FILE);
    let args_path = dir.join(SGLANG_ARGS_FILE);
    write_atomic(&path, (json + "\n").as_bytes())?;
    let args = format!(
        "--ep-size {} --ep-num-redundant-experts {} --init-expert-location {}\n",
        layout.rank_gpus.len(),
        layout.redundant,
        path.display()
    );
    write_atomic(&args_path, args.as_bytes())?;
    Ok(Export {
        files: vec![path, args_path],
        warnings,
    })
}

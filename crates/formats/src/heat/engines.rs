//! Heat recorded by serving engines, read only:
//!
//! - `sglang-json`: SGLang's expert-distribution recorder,
//!   `{"logical_count": C}` with `C` per layer and logical expert
//!   (`[layers][experts]`) or per step as well (`[steps][layers][experts]`):
//!   the recorder's `logical_count` tensor written with `.tolist()` and
//!   `json.dump` (its own dump is a torch file, which needs torch to read).
//!   Rows are the model's transformer layers when there are as many as the
//!   model has (dense layers' rows are dropped, with a warning if they
//!   hold counts), else MoE ordinals.
//! - `vllm-eplb`: vLLM's EPLB load window,
//!   `{"expert_load_window": W, "physical_to_logical_map": M}`, `W` per
//!   (step,) MoE layer and physical expert slot, `M` the logical expert of
//!   each slot (-1: empty). Replicas of one logical expert add up.
//!
//! Counts come without token totals, so use rates are `top_k * c / sum c`.

use super::common::{expert_problem, json_err, resolve_shape, CountTable, LayerMap};
use super::{Heat, HeatContext, HeatFormat};
use residency_core::error::{read_text, PlannerError, Result};
use residency_core::limits;
use serde::Deserialize;
use std::path::Path;

/// Per layer and expert, with or without a leading step axis.
#[derive(Deserialize)]
#[serde(untagged)]
enum Counts {
    Layers(Vec<Vec<f64>>),
    Steps(Vec<Vec<Vec<f64>>>),
}

impl Counts {
    /// Summed over steps: `[layers][experts]`.
    fn per_layer(self) -> Vec<Vec<f64>> {
        match self {
            Counts::Layers(l) => l,
            Counts::Steps(steps) => {
                let mut sum: Vec<Vec<f64>> = Vec::new();
                for step in steps {
                    sum.resize(sum.len().max(step.len()), Vec::new());
                    for (row, s) in sum.iter_mut().zip(step) {
                        row.resize(row.len().max(s.len()), 0.0);
                        row.iter_mut().zip(s).for_each(|(a, b)| *a += b);
                    }
                }
                sum
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SglangFile {
    logical_count: Counts,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VllmFile {
    expert_load_window: Counts,
    physical_to_logical_map: Vec<Vec<i64>>,
}

const SGLANG_FIX: &str = "write {\"logical_count\": recorder.logical_count.tolist()} as JSON";
const VLLM_FIX: &str = "write {\"expert_load_window\": [...], \"physical_to_logical_map\": [...]} as JSON (tensors via .tolist())";

pub(crate) fn read(
    path: &Path,
    format: HeatFormat,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let text = read_text(path)?;
    let rows = match format {
        HeatFormat::SglangJson => {
            let file: SglangFile =
                serde_json::from_str(&text).map_err(|e| json_err(path, None, &e, SGLANG_FIX))?;
            model_rows(file.logical_count.per_layer(), path, ctx, warnings)?
        }
        _ => {
            let file: VllmFile =
                serde_json::from_str(&text).map_err(|e| json_err(path, None, &e, VLLM_FIX))?;
            logical_rows(
                file.expert_load_window.per_layer(),
                &file.physical_to_logical_map,
                path,
            )?
        }
    };
    let mut table = CountTable::default();
    for (l, row) in rows.iter().enumerate() {
        for (e, &c) in row.iter().enumerate() {
            if !(c.is_finite() && c >= 0.0) {
                return Err(PlannerError::input(
                    path,
                    format!("layer {l}, expert {e}"),
                    format!("count {c} is not a non-negative number"),
                    "counts are selections: whole non-negative numbers",
                ));
            }
            if let Some(problem) = expert_problem(ctx, l, e).filter(|_| c > 0.0) {
                return Err(PlannerError::input(
                    path,
                    format!("layer {l}, expert {e}"),
                    problem,
                    "read it with the model it was recorded on (--model)",
                ));
            }
            table.add(l, e, c);
        }
    }
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let shape = resolve_shape(ctx, rows.len(), width);
    Ok(Heat {
        model: None,
        format,
        source_layers: rows.len(),
        total: table.finish(&shape, None),
        categories: Default::default(),
    })
}

/// SGLang rows: transformer layers when the file has one per model layer
/// (mapped to MoE ordinals), else MoE ordinals already.
fn model_rows(
    rows: Vec<Vec<f64>>,
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Vec<Vec<f64>>> {
    if ctx.model_layers != Some(rows.len()) {
        return Ok(rows);
    }
    let mut map = LayerMap::from_ctx(ctx, path, "sglang-json rows")?;
    let mut out = vec![Vec::new(); map.layers()];
    for (layer, row) in rows.into_iter().enumerate() {
        let selections: f64 = row.iter().sum();
        if let Some(l) = map.ordinal_or_drop(layer as u64, selections) {
            out[l] = row;
        }
    }
    map.warn_dropped(path, "rows of dense layers", warnings);
    Ok(out)
}

/// vLLM rows: physical slots added onto the logical experts they hold.
fn logical_rows(load: Vec<Vec<f64>>, map: &[Vec<i64>], path: &Path) -> Result<Vec<Vec<f64>>> {
    if load.len() != map.len() {
        return Err(PlannerError::input(
            path,
            "physical_to_logical_map",
            format!("{} layers, the load window has {}", map.len(), load.len()),
            "give the map and the window of the same MoE layers",
        ));
    }
    let mut out = Vec::with_capacity(load.len());
    for (l, (slots, logical)) in load.iter().zip(map).enumerate() {
        if slots.len() != logical.len() {
            return Err(PlannerError::input(
                path,
                format!("physical_to_logical_map[{l}]"),
                format!(
                    "{} slots, the load window has {}",
                    logical.len(),
                    slots.len()
                ),
                "give the map and the window of the same physical slots",
            ));
        }
        // -1 marks an empty slot; an expert id is below the most experts
        // a layer may have, and a load is a count.
        let bad = |s: usize, problem: String| {
            Err(PlannerError::input(
                path,
                format!("physical_to_logical_map[{l}][{s}]"),
                problem,
                VLLM_FIX,
            ))
        };
        for (s, (&c, &e)) in slots.iter().zip(logical).enumerate() {
            if !(-1..limits::MAX_EXPERTS as i64).contains(&e) {
                return bad(
                    s,
                    format!(
                        "is {e}, not an expert id below {} or -1 (an empty slot)",
                        limits::MAX_EXPERTS
                    ),
                );
            }
            if !(0.0..=limits::MAX_HEAT_COUNT).contains(&c) {
                return bad(
                    s,
                    format!("has load {c:?} in the window, not a count from 0 to 1e15"),
                );
            }
        }
        let width = logical.iter().copied().max().unwrap_or(-1) + 1;
        let mut row = vec![0.0; width.max(0) as usize];
        for (&c, &e) in slots.iter().zip(logical) {
            if e >= 0 {
                row[e as usize] += c;
            }
        }
        out.push(row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

//! Heat recorded by serving engines, read only:
//!
//! - `sglang-json`: SGLang's expert-distribution recorder,
//!   `{"logical_count": C}` with `C` per layer and logical expert
//!   (`[layers][experts]`) or per step as well (`[steps][layers][experts]`):
//!   the recorder's `logical_count` tensor written with `.tolist()` and
//!   `json.dump`; SGLang's `--init-expert-location` reads it.
//! - `sglang-pt`: the same counts in the recorder's own torch file (read
//!   without Python, [`crate::torch`]): a dict with `logical_count` (other
//!   keys, such as `rank`, ignored) or a bare tensor, integer or float.
//!   kt-kernel's `frequency` strategy reads the same file.
//!
//!   Rows of both are the model's transformer layers when there are as many
//!   as the model has (dense layers' rows are dropped, with a warning if
//!   they hold counts), else MoE ordinals. Both are written too: one row
//!   per transformer layer when the model is known (SGLang indexes rows by
//!   layer id), a single step.
//! - `vllm-eplb`: vLLM's EPLB load window,
//!   `{"expert_load_window": W, "physical_to_logical_map": M}`, `W` per
//!   (step,) MoE layer and physical expert slot, `M` the logical expert of
//!   each slot (-1: empty). Replicas of one logical expert add up.
//!
//! Counts come without token totals, so use rates are `top_k * c / sum c`.

use super::common::{
    expert_problem, json_err, resolve_shape, warn_categories_dropped, CountTable, LayerMap,
};
use super::{Heat, HeatContext, HeatFormat};
use crate::torch::{self, DType, Tensor, Value};
use residency_core::error::{read_file, read_text, write_atomic, PlannerError, Result};
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
const SGLANG_PT_FIX: &str = "give the torch file SGLang's expert-distribution recorder writes (a dict with `logical_count`, an integer or float tensor [layers, experts] or [steps, layers, experts]), or convert it with torch: torch.save({\"logical_count\": counts}, path)";
const VLLM_FIX: &str = "write {\"expert_load_window\": [...], \"physical_to_logical_map\": [...]} as JSON (tensors via .tolist())";

pub(crate) fn read(
    path: &Path,
    format: HeatFormat,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let rows = match format {
        HeatFormat::SglangPt => model_rows(sglang_pt_rows(path)?, path, ctx, warnings)?,
        HeatFormat::SglangJson => {
            let text = read_text(path)?;
            let file: SglangFile =
                serde_json::from_str(&text).map_err(|e| json_err(path, None, &e, SGLANG_FIX))?;
            model_rows(file.logical_count.per_layer(), path, ctx, warnings)?
        }
        _ => {
            let text = read_text(path)?;
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

/// The recorder's torch file as `[layers][experts]`, steps summed.
fn sglang_pt_rows(path: &Path) -> Result<Vec<Vec<f64>>> {
    let refuse = |place: &str, problem: String| {
        PlannerError::input(path, place.to_string(), problem, SGLANG_PT_FIX)
    };
    let value = torch::read(&read_file(path)?).map_err(|e| refuse(&e.place, e.problem))?;
    let tensor = match value {
        Value::Tensor(t) => t,
        Value::Dict(items) => {
            let key = |k: &Value| match k {
                Value::Str(k) => k.clone(),
                other => format!("({})", other.kind()),
            };
            let found = items
                .iter()
                .find(|(k, _)| key(k) == "logical_count")
                .map(|(_, v)| v.clone());
            match found {
                Some(Value::Tensor(t)) => t,
                Some(other) => {
                    return Err(refuse(
                        "logical_count",
                        format!("is {}, not a tensor", other.kind()),
                    ))
                }
                None => {
                    let keys: Vec<String> = items.iter().map(|(k, _)| key(k)).collect();
                    let what = if keys.iter().any(|k| k == "physical_to_logical_map") {
                        "an expert location map (physical_to_logical_map), not counts".to_string()
                    } else {
                        format!("a dict without `logical_count` (keys: {})", keys.join(", "))
                    };
                    return Err(refuse("top level", what));
                }
            }
        }
        other => {
            return Err(refuse(
                "top level",
                format!(
                    "{}, not a tensor or a dict with `logical_count`",
                    other.kind()
                ),
            ))
        }
    };
    let (steps, layers, experts) = match tensor.shape[..] {
        [l, e] => (1, l, e),
        [s, l, e] => (s, l, e),
        ref other => {
            return Err(refuse(
                "logical_count",
                format!(
                "a tensor of shape {other:?}, not [layers, experts] or [steps, layers, experts]"
            ),
            ))
        }
    };
    let mut rows = vec![vec![0.0; experts]; layers];
    for step in tensor
        .values
        .chunks_exact((layers * experts).max(1))
        .take(steps)
    {
        for (row, values) in rows.iter_mut().zip(step.chunks_exact(experts.max(1))) {
            row.iter_mut().zip(values).for_each(|(a, b)| *a += b);
        }
    }
    Ok(rows)
}

/// Writes heat as SGLang's `logical_count` (`sglang-json` or `sglang-pt`),
/// one step: one row per transformer layer when the model is known (dense
/// layers' rows zero), else per MoE layer, with a warning. Whole counts
/// are written as integers (int64 in the tensor), others as float64.
pub(crate) fn write(
    heat: &Heat,
    path: &Path,
    format: HeatFormat,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<()> {
    warn_categories_dropped(heat, path, format.name(), warnings);
    let counts = &heat.total.counts;
    let rows: Vec<&[f64]> = match (&ctx.moe_layers, ctx.model_layers) {
        (Some(moe_layers), Some(layers)) if moe_layers.len() == counts.len() => {
            let mut rows: Vec<&[f64]> = vec![&[]; layers];
            for (row, &layer) in counts.iter().zip(moe_layers) {
                rows[layer] = row;
            }
            rows
        }
        _ => {
            warnings.push(format!(
                "{}: rows are MoE layers; SGLang indexes them by transformer layer, so for a model with dense layers pass --model",
                path.display()
            ));
            counts.iter().map(Vec::as_slice).collect()
        }
    };
    let experts = counts.iter().map(Vec::len).max().unwrap_or(0);
    let values: Vec<f64> = rows
        .iter()
        .flat_map(|row| (0..experts).map(|e| row.get(e).copied().unwrap_or(0.0)))
        .collect();
    let whole = values
        .iter()
        .all(|v| v.fract() == 0.0 && v.abs() < 2f64.powi(53));
    let bytes = if format == HeatFormat::SglangPt {
        let tensor = Tensor {
            dtype: if whole { DType::Int64 } else { DType::Float64 },
            shape: vec![1, rows.len(), experts],
            values,
        };
        torch::write(&[("logical_count", &tensor)])
    } else {
        let number = |&v: &f64| match whole {
            true => serde_json::json!(v as i64),
            false => serde_json::json!(v),
        };
        let table: Vec<Vec<serde_json::Value>> = values
            .chunks(experts.max(1))
            .map(|row| row.iter().map(number).collect())
            .collect();
        let json = serde_json::json!({ "logical_count": [table] });
        (json.to_string() + "\n").into_bytes()
    };
    write_atomic(path, &bytes)
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

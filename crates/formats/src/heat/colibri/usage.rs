//! `coli-usage`: the `.coli_usage` of Colibri's GLM engine, as v1 text
//! (header records `-1 <n_layers> <n_experts>` and `-2 1 <engine_id>`, then
//! `<layer> <expert> <count>`), legacy headerless text, or inkling's binary
//! IKU1. Rows are model layers, mapped through the model's `moe_layers`.
//! Written as v1 text, atomically.

use super::super::common::{
    expert_problem, resolve_shape, uniform_width, warn_categories_dropped, whole_u32, CountTable,
    LayerMap, LineCtx,
};
use super::super::{Heat, HeatContext, HeatFormat};
use super::{binary_table, check_ne};
use residency_core::error::{read_file, write_atomic, PlannerError, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Inkling's binary usage magic (bytes on disk `49 4B 55 31`, "IKU1").
pub const USAGE_MAGIC: u32 = 0x3155_4B49;
/// The engine whose id a `.coli_usage` header carries unless told otherwise.
pub const DEFAULT_ENGINE: &str = "glm_moe_dsa";
/// Engine names Colibri writes usage for (docs/formats.md section 2).
const KNOWN_ENGINES: [&str; 4] = ["glm_moe_dsa", "inkling", "olmoe", "kimi_k3"];

const USAGE_SYNTAX: &str =
    "each line is `<model layer> <expert> <count>`, after optional `-1 <n_layers> <n_experts>` and `-2 1 <engine_id>` (docs/formats.md section 2)";

/// The `.coli_usage` engine id: FNV-1a-32 of the engine name.
pub fn engine_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Rows mapped so far: the layer map (with its dropped rows), the table of
/// MoE ordinals and the number of rows that mapped.
struct Usage<'a> {
    map: LayerMap<'a>,
    table: CountTable,
    mapped: u64,
}

pub(crate) fn read_usage(
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let mut usage = Usage {
        map: LayerMap::from_ctx(ctx, path, "a .coli_usage file")?,
        table: CountTable::default(),
        mapped: 0,
    };
    let bytes = read_file(path)?;
    // Rows of zero counts are not written (text) or skipped (binary), so
    // the layers a file covers are those its dims name; headerless text
    // covers up to its highest MoE layer.
    let (width, given) = if bytes.len() >= 4 && bytes[..4] == USAGE_MAGIC.to_le_bytes() {
        let (nl, ne, counts) = binary_table(path, &bytes, USAGE_MAGIC, "IKU1")?;
        check_ne(path, ctx, ne, usage.map.layers())?;
        for (layer, row) in counts.chunks_exact(ne).enumerate().take(nl) {
            let sum: f64 = row.iter().map(|&c| f64::from(c)).sum();
            if sum == 0.0 {
                continue;
            }
            if let Some(ordinal) = usage.map.ordinal_or_drop(layer as u64, sum) {
                usage.mapped += 1;
                for (e, &c) in row.iter().enumerate() {
                    usage.table.add(ordinal, e, f64::from(c));
                }
            }
        }
        (ne, usage.map.layers_below(nl as u64))
    } else {
        let text = String::from_utf8(bytes).map_err(|e| {
            PlannerError::input(
                path,
                format!("byte {}", e.utf8_error().valid_up_to()),
                "neither text nor an IKU1 binary file",
                USAGE_SYNTAX,
            )
        })?;
        match usage_text(path, &text, ctx, &mut usage, warnings)? {
            Some((n_layers, n_experts)) => (
                (n_experts as usize).max(usage.table.width()),
                usage.map.layers_below(n_layers),
            ),
            None => (usage.table.width(), usage.table.layers()),
        }
    };
    usage.map.warn_dropped(path, "rows", warnings);
    usage.map.check_some_mapped(path, usage.mapped)?;
    let shape = resolve_shape(ctx, usage.map.layers(), width);
    Ok(Heat {
        model: None,
        format: HeatFormat::ColiUsage,
        source_layers: given,
        total: usage.table.finish(&shape, None),
        categories: Default::default(),
    })
}

/// Reads text records into `usage`; returns the header's (n_layers,
/// n_experts) if any.
fn usage_text(
    path: &Path,
    text: &str,
    ctx: &HeatContext,
    usage: &mut Usage,
    warnings: &mut Vec<String>,
) -> Result<Option<(u64, u64)>> {
    let model = ctx.model_name.as_deref().unwrap_or("the model");
    let mut dims: Option<(u64, u64)> = None;
    let mut data_seen = false;
    let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: USAGE_SYNTAX,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() != 3 {
            return Err(at.err(format!("has {} fields, expected 3", f.len())));
        }
        let layer = at.int(1, "layer", f[0])?;
        if layer < 0 {
            if data_seen {
                return Err(at.err(format!("header record {layer} comes after data records")));
            }
            match layer {
                -1 => {
                    let n_layers = at.uint(2, "n_layers", f[1])?;
                    let n_experts = at.uint(3, "n_experts", f[2])?;
                    if let Some(want) = ctx.model_layers.filter(|&w| w as u64 != n_layers) {
                        return Err(at.field_err(
                            2,
                            "n_layers",
                            format!("{n_layers} layers, `{model}` has {want}"),
                        ));
                    }
                    if let Some(w) = ctx
                        .experts
                        .as_ref()
                        .and_then(|w| w.iter().find(|&&w| w as u64 != n_experts))
                    {
                        return Err(at.field_err(
                            3,
                            "n_experts",
                            format!("{n_experts} experts, `{model}` has {w}"),
                        ));
                    }
                    dims = Some((n_layers, n_experts));
                }
                -2 => {
                    let version = at.uint(2, "format_version", f[1])?;
                    if version != 1 {
                        return Err(at.field_err(
                            2,
                            "format_version",
                            format!("version {version} is not supported (only 1)"),
                        ));
                    }
                    let id = at.uint(3, "engine_id", f[2])?;
                    check_engine(path, ctx, id, warnings);
                }
                _ => {
                    return Err(at.field_err(
                        1,
                        "layer",
                        format!("{layer} is not a header record (-1 or -2)"),
                    ))
                }
            }
            continue;
        }
        data_seen = true;
        let layer = layer as u64;
        let expert = at.uint(2, "expert", f[1])?;
        let count = at.uint(3, "count", f[2])? as f64;
        if let Some((n_layers, n_experts)) = dims {
            if layer > n_layers {
                return Err(at.field_err(
                    1,
                    "layer",
                    format!("{layer} is past the header's layers 0..={n_layers}"),
                ));
            }
            if expert >= n_experts {
                return Err(at.field_err(
                    2,
                    "expert",
                    format!("{expert} is past the header's {n_experts} experts"),
                ));
            }
        }
        if let Some(first) = seen.insert((layer, expert), i + 1) {
            return Err(at.err(format!(
                "layer {layer} expert {expert} is already given on line {first}"
            )));
        }
        let Some(ordinal) = usage.map.ordinal_or_drop(layer, count) else {
            continue;
        };
        if let Some(problem) = expert_problem(ctx, ordinal, expert as usize) {
            return Err(at.field_err(2, "expert", problem));
        }
        usage.mapped += 1;
        usage.table.add(ordinal, expert as usize, count);
    }
    Ok(dims)
}

fn check_engine(path: &Path, ctx: &HeatContext, id: u64, warnings: &mut Vec<String>) {
    let Some(engine) = &ctx.engine else { return };
    if u64::from(engine_id(engine)) == id {
        return;
    }
    let known = KNOWN_ENGINES.iter().find(|n| u64::from(engine_id(n)) == id);
    let written_by = known.map_or_else(|| "an unknown engine".to_string(), |n| format!("`{n}`"));
    warnings.push(format!(
        "{}: engine id {id} is {written_by}'s, not `{engine}`'s ({}); the counts may be another model's",
        path.display(),
        engine_id(engine)
    ));
}

pub(crate) fn write_usage(
    heat: &Heat,
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let moe_layers = ctx.moe_layers.as_ref().ok_or_else(|| {
        PlannerError::input(
            path,
            "layers",
            ".coli_usage numbers model layers, which only the model knows",
            "pass --model so that its moe_layers can be used",
        )
    })?;
    if moe_layers.len() != heat.total.counts.len() {
        return Err(PlannerError::input(
            path,
            "layers",
            format!(
                "heat has {} MoE layers, `{}` has {}",
                heat.total.counts.len(),
                ctx.model_name.as_deref().unwrap_or("the model"),
                moe_layers.len()
            ),
            "write heat of this model",
        ));
    }
    warn_categories_dropped(heat, path, "coli-usage", warnings);
    let n_experts = uniform_width(&heat.total, path, "coli-usage")?;
    let counts = whole_u32(&heat.total, path, "coli-usage")?;
    let n_layers = ctx
        .model_layers
        .unwrap_or_else(|| moe_layers.iter().max().map_or(0, |m| m + 1));
    let engine = ctx.engine.as_deref().unwrap_or(DEFAULT_ENGINE);
    let mut out = format!("-1 {n_layers} {n_experts}\n-2 1 {}\n", engine_id(engine));
    for (&layer, row) in moe_layers.iter().zip(&counts) {
        for (e, &c) in row.iter().enumerate().filter(|(_, &c)| c > 0) {
            let _ = writeln!(out, "{layer} {e} {c}");
        }
    }
    write_atomic(path, out.as_bytes())
}

//! Our `json` heat format (design §3.3), read and written:
//! `{"model":..,"tokens":N,"layers":[[c0,c1,..],..],"categories":{"law":{"tokens":N,"layers":[[..]]}}}`.
//! `layers[l]` is MoE ordinal `l`; `tokens` is a number (all layers), an
//! array (per layer) or null/absent. Unknown keys are refused (a typo would
//! otherwise lose data). Written with one layer per line.

use super::common::{expert_problem, json_err, ordinal_problem};
use super::{Heat, HeatContext, HeatFormat, HeatTable};
use residency_core::error::{read_text, write_atomic, PlannerError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

const FIX: &str = "write {\"tokens\": N, \"layers\": [[counts of MoE layer 0], ..], \"categories\": {..}} (design §3.3)";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHeat {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tokens: Option<Tokens>,
    layers: Vec<Vec<f64>>,
    #[serde(default)]
    categories: BTreeMap<String, FileTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTable {
    #[serde(default)]
    tokens: Option<Tokens>,
    layers: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Tokens {
    All(u64),
    PerLayer(Vec<u64>),
}

pub(crate) fn read(path: &Path, ctx: &HeatContext, _warnings: &mut Vec<String>) -> Result<Heat> {
    from_str(&read_text(path)?, path, ctx)
}

/// Parses our JSON heat from text; `path` names it in errors.
pub(crate) fn from_str(text: &str, path: &Path, ctx: &HeatContext) -> Result<Heat> {
    let file: FileHeat = serde_json::from_str(text).map_err(|e| json_err(path, None, &e, FIX))?;
    let total = table(path, "", file.tokens, file.layers, ctx)?;
    let shape: Vec<usize> = total.counts.iter().map(Vec::len).collect();
    let mut categories = BTreeMap::new();
    for (name, t) in file.categories {
        let prefix = format!("categories.{name}.");
        let table = table(path, &prefix, t.tokens, t.layers, ctx)?;
        let got: Vec<usize> = table.counts.iter().map(Vec::len).collect();
        if got != shape {
            return Err(PlannerError::input(
                path,
                format!("{prefix}layers"),
                format!("has the shape {got:?}, the total `layers` has {shape:?}"),
                "give every category the total's layers and experts",
            ));
        }
        categories.insert(name, table);
    }
    Ok(Heat {
        model: file.model,
        format: HeatFormat::Json,
        source_layers: total.counts.len(),
        total,
        categories,
    })
}

/// Validates one table; `prefix` locates it (`categories.law.`).
fn table(
    path: &Path,
    prefix: &str,
    tokens: Option<Tokens>,
    layers: Vec<Vec<f64>>,
    ctx: &HeatContext,
) -> Result<HeatTable> {
    if let Some(problem) = ordinal_problem(ctx, layers.len().saturating_sub(1)) {
        return Err(PlannerError::input(
            path,
            format!("{prefix}layers"),
            format!("has {} MoE layers: {problem}", layers.len()),
            "use heat recorded on this model",
        ));
    }
    for (l, row) in layers.iter().enumerate() {
        if let Some(problem) = expert_problem(ctx, l, row.len().saturating_sub(1)) {
            return Err(PlannerError::input(
                path,
                format!("{prefix}layers[{l}]"),
                format!("has {} experts: {problem}", row.len()),
                "use heat recorded on this model",
            ));
        }
        if let Some((e, c)) = row.iter().enumerate().find(|(_, c)| **c < 0.0) {
            return Err(PlannerError::input(
                path,
                format!("{prefix}layers[{l}][{e}]"),
                format!("count {c} is negative"),
                "counts are selections, 0 or more",
            ));
        }
    }
    let tokens = match tokens {
        None => None,
        Some(Tokens::All(n)) => Some(vec![n; layers.len()]),
        Some(Tokens::PerLayer(v)) if v.len() == layers.len() => Some(v),
        Some(Tokens::PerLayer(v)) => {
            return Err(PlannerError::input(
                path,
                format!("{prefix}tokens"),
                format!("lists {} layers, `layers` has {}", v.len(), layers.len()),
                "give one token count per MoE layer, or one number for all",
            ))
        }
    };
    Ok(HeatTable {
        counts: layers,
        tokens,
    })
}

pub(crate) fn write(heat: &Heat, path: &Path) -> Result<()> {
    let mut out = String::from("{\n");
    if let Some(model) = &heat.model {
        let _ = writeln!(out, "  \"model\": {},", json_string(model));
    }
    write_table(&mut out, &heat.total, "  ");
    if heat.categories.is_empty() {
        out.push_str("\n}\n");
    } else {
        out.push_str(",\n  \"categories\": {\n");
        for (i, (name, table)) in heat.categories.iter().enumerate() {
            let _ = writeln!(out, "    {}: {{", json_string(name));
            write_table(&mut out, table, "      ");
            out.push_str(if i + 1 < heat.categories.len() {
                "\n    },\n"
            } else {
                "\n    }\n"
            });
        }
        out.push_str("  }\n}\n");
    }
    write_atomic(path, out.as_bytes())
}

/// `"tokens": .., "layers": [..]` without a trailing newline.
fn write_table(out: &mut String, table: &HeatTable, indent: &str) {
    match &table.tokens {
        Some(t) if !t.is_empty() && t.iter().all(|&n| n == t[0]) => {
            let _ = writeln!(out, "{indent}\"tokens\": {},", t[0]);
        }
        Some(t) => {
            let _ = writeln!(out, "{indent}\"tokens\": {t:?},");
        }
        None => {}
    }
    let _ = write!(out, "{indent}\"layers\": [");
    for (l, row) in table.counts.iter().enumerate() {
        out.push_str(if l == 0 { "\n" } else { ",\n" });
        let _ = write!(out, "{indent}  [");
        for (e, c) in row.iter().enumerate() {
            if e > 0 {
                out.push_str(", ");
            }
            // Rust prints f64 as the shortest text that reads back to the
            // same value, with no exponent and no `.0` on whole numbers:
            // valid JSON that round-trips exactly.
            let _ = write!(out, "{c}");
        }
        out.push(']');
    }
    let _ = write!(out, "\n{indent}]");
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

#[cfg(test)]
mod tests;

//! `qwen3-csv`, read only: the Qwen3-30B-A3B cross-language wide CSVs
//! (`traces/SOURCES.md` 4), header `Layer,Language,Expert_0..Expert_{E-1}`,
//! one row per (MoE layer, language).
//!
//! Only `*_avg_activation.csv` files are heat: each value is the fraction of
//! tokens routed to the expert (rows sum to ~top_k), i.e. `p` itself. They
//! are stored as counts with `tokens = None`, so `p = top_k * c / sum_e c`
//! gives them back. `*_avg_dist.csv` files hold mean router softmax
//! probabilities (rows sum to ~1), which are not selections: a directory read
//! skips them and naming one is an error pointing at its avg_activation twin.
//! Categories are `<task>/<language>` (task from the file name, e.g.
//! `moe_all_layers_analysis_arc_en_he_500_.._avg_activation.csv` -> `arc`);
//! the total is the sum over categories, i.e. each (task, language) weighs
//! the same (token totals are not published).

use super::common::{finish_categories, resolve_shape, CountTable};
use super::csv::{parse_wide, split, wide_tables};
use super::{Heat, HeatContext, HeatFormat};
use residency_core::error::{read_text, PlannerError, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ACTIVATION: &str = "_avg_activation.csv";
const DIST: &str = "_avg_dist.csv";
const PREFIX: &str = "moe_all_layers_analysis_";

pub(crate) fn read(path: &Path, ctx: &HeatContext, _warnings: &mut Vec<String>) -> Result<Heat> {
    let files = files(path)?;
    let mut parts: BTreeMap<String, CountTable> = BTreeMap::new();
    let mut experts = 0;
    for file in &files {
        let name = file_name(file);
        let task = task_of(&name);
        let text = read_text(file)?;
        let csv = split(&text, file)?;
        let wide = parse_wide(&csv, file)?;
        if wide.extras != ["Language"] {
            return Err(PlannerError::input(
                file,
                format!("line {}", wide.header_line),
                format!(
                    "the columns before Expert_0 are {:?}, not [\"Language\"]",
                    wide.extras
                ),
                "a qwen3-csv header is `Layer,Language,Expert_0,..`; read other wide CSVs as csv",
            ));
        }
        experts = experts.max(wide.experts);
        for (language, table) in wide_tables(&wide, file, ctx, |row| row.extras[0].clone())? {
            let category = format!("{task}/{language}");
            if parts.insert(category.clone(), table).is_some() {
                return Err(PlannerError::input(
                    file,
                    "file name",
                    format!("category `{category}` is also given by another file"),
                    "keep one avg_activation file per task",
                ));
            }
        }
    }
    let mut total = CountTable::default();
    parts.values().for_each(|t| total.merge(t));
    let given = total.layers();
    let layers = ctx.moe_layers.as_ref().map_or(given, Vec::len);
    let shape = resolve_shape(ctx, layers, experts);
    Ok(Heat {
        model: None,
        format: HeatFormat::Qwen3Csv,
        source_layers: given,
        total: total.finish(&shape, None),
        categories: finish_categories(parts, &shape),
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `moe_all_layers_analysis_<task>_..` -> `<task>`; another name: its stem
/// without `_avg_activation`.
fn task_of(name: &str) -> String {
    let stem = name
        .strip_suffix(ACTIVATION)
        .or_else(|| name.strip_suffix(".csv"))
        .unwrap_or(name);
    match stem.strip_prefix(PREFIX) {
        Some(rest) => rest.split('_').next().unwrap_or(rest).to_string(),
        None => stem.to_string(),
    }
}

/// The avg_activation files to read: the one named, or those in a directory.
fn files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        let name = file_name(path);
        if let Some(stem) = name.strip_suffix(DIST) {
            return Err(PlannerError::input(
                path,
                "file name",
                "an avg_dist file holds mean router softmax probabilities (rows sum to 1), not expert selections",
                format!("read `{stem}{ACTIVATION}`, the selection rates of the same run"),
            ));
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = super::common::dir_entries(path)?;
    files.retain(|p| file_name(p).ends_with(ACTIVATION));
    if files.is_empty() {
        return Err(PlannerError::input(
            path,
            "directory",
            format!(
                "holds no `*{ACTIVATION}` file (avg_dist files are router probabilities, not heat)"
            ),
            "name the directory of the Qwen3 avg_activation CSVs",
        ));
    }
    Ok(files)
}

/// Mean row sum of an avg_activation table, for the test and the report.
#[cfg(test)]
fn mean_row_sum(heat: &Heat) -> f64 {
    let n = heat.total.counts.len() * heat.categories.len();
    let sum: f64 = heat
        .categories
        .values()
        .flat_map(|t| &t.counts)
        .map(|r| r.iter().sum::<f64>())
        .sum();
    sum / n as f64
}

#[cfg(test)]
mod tests;

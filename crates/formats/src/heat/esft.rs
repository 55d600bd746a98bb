//! `esft`, read only: DeepSeek ESFT expert-score logs
//! (`traces/SOURCES.md` 1), read as a per-token [`Trace`]. A data set is a
//! directory of task folders (the categories), each holding
//! `expert_weights_<L>.txt` for the MoE layers; one task folder is accepted
//! too. File `L` is model layer `L` (model layer 0 is dense): mapped through
//! the model's `moe_layers` when known, else MoE ordinal `L - 1` (the ESFT
//! repository's own reading). A line is one example:
//! `<ids, TAB-separated>` TAB TAB `<gate scores>`, ids token-major, six per
//! token; line `i` is the same example in every layer file, so token `t` of
//! line `i` is one token across layers (seq `<task>/<i>`, pos `t`).
//! `summary.json` (aggregated over the uncut files) is ignored.

use super::common::{expert_problem, LayerMap, LineCtx};
use super::trace::{TokenRoutes, Trace};
use super::{HeatContext, HeatFormat};
use residency_core::error::{read_text, PlannerError, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Experts chosen per token (DeepSeek-V2-Lite: top-6 of 64 routed experts).
pub(crate) const TOP_K: usize = 6;
const EXPERTS: usize = 64;
const SYNTAX: &str = "each line is one example: expert ids (6 per token) TAB-separated, TAB TAB, then as many gate scores";

/// `expert_weights_<L>.txt` -> L.
fn layer_of(name: &str) -> Option<u64> {
    name.strip_prefix("expert_weights_")?
        .strip_suffix(".txt")?
        .parse()
        .ok()
}

/// The layer files of a folder, by layer number.
fn layer_files(dir: &Path) -> Result<BTreeMap<u64, PathBuf>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(|e| PlannerError::io(dir, e))? {
        let path = entry.map_err(|e| PlannerError::io(dir, e))?.path();
        if let Some(layer) = path.file_name().and_then(|n| n.to_str()).and_then(layer_of) {
            files.insert(layer, path);
        }
    }
    Ok(files)
}

/// Task folders: the directory itself when it holds layer files, else its
/// subfolders that do.
fn tasks(path: &Path) -> Result<Vec<(String, BTreeMap<u64, PathBuf>)>> {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if !path.is_dir() {
        return Err(PlannerError::input(
            path,
            "path",
            "is one layer file; esft is read from a task folder or the data-set folder",
            "name the folder that holds expert_weights_<L>.txt (or the folder of task folders)",
        ));
    }
    let own = layer_files(path)?;
    if !own.is_empty() {
        return Ok(vec![(name(path), own)]);
    }
    let mut tasks = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| PlannerError::io(path, e))? {
        let sub = entry.map_err(|e| PlannerError::io(path, e))?.path();
        if sub.is_dir() {
            let files = layer_files(&sub)?;
            if !files.is_empty() {
                tasks.push((name(&sub), files));
            }
        }
    }
    tasks.sort_by(|a, b| a.0.cmp(&b.0));
    if tasks.is_empty() {
        return Err(PlannerError::input(
            path,
            "directory",
            "holds no expert_weights_<L>.txt, neither itself nor in a subfolder",
            "name an ESFT task folder or the folder of task folders",
        ));
    }
    Ok(tasks)
}

/// One layer file: per line, the ids of its tokens (6 per token).
fn read_layer(path: &Path, ctx: &HeatContext, ordinal: usize) -> Result<Vec<Vec<u32>>> {
    let text = read_text(path)?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: SYNTAX,
        };
        let (ids, gates) = line
            .split_once("\t\t")
            .ok_or_else(|| at.err("no TAB TAB between the ids and the gate scores"))?;
        let ids = ids
            .split('\t')
            .enumerate()
            .map(|(k, s)| {
                let id = at.expert(k + 1, "expert id", s)?;
                match expert_problem(ctx, ordinal, id as usize) {
                    Some(problem) => Err(at.field_err(k + 1, "expert id", problem)),
                    None => Ok(id),
                }
            })
            .collect::<Result<Vec<u32>>>()?;
        if ids.len() % TOP_K != 0 {
            return Err(at.err(format!(
                "has {} expert ids, not a multiple of {TOP_K} (top-{TOP_K} per token)",
                ids.len()
            )));
        }
        let n_gates = gates.split('\t').count();
        if n_gates != ids.len() {
            return Err(at.err(format!(
                "has {} expert ids but {n_gates} gate scores",
                ids.len()
            )));
        }
        lines.push(ids);
    }
    Ok(lines)
}

pub(crate) fn read_trace(
    path: &Path,
    ctx: &HeatContext,
    _warnings: &mut Vec<String>,
) -> Result<Trace> {
    let tasks = tasks(path)?;
    let map = LayerMap::of_model(ctx);
    // Model layers expected in every task, in ordinal order.
    let expected: Vec<u64> = match &ctx.moe_layers {
        Some(m) => m.iter().map(|&l| l as u64).collect(),
        None => {
            let top = tasks
                .iter()
                .filter_map(|(_, f)| f.keys().next_back())
                .max()
                .copied()
                .unwrap_or(0);
            (1..=top).collect()
        }
    };
    let mut tokens = Vec::new();
    for (task, files) in &tasks {
        for (&layer, file) in files {
            if let Some(map) = &map {
                if map.ordinal(layer).is_none() {
                    return Err(PlannerError::input(
                        file,
                        "file name",
                        map.not_moe(layer),
                        "use the ESFT logs of this model",
                    ));
                }
            }
            if layer == 0 {
                return Err(PlannerError::input(
                    file,
                    "file name",
                    "layer 0 is dense in DeepSeek-V2-Lite; ESFT numbers MoE layers from 1",
                    "pass --model to map other layer numbers",
                ));
            }
        }
        let mut layers: Vec<(PathBuf, Vec<Vec<u32>>)> = Vec::with_capacity(expected.len());
        for (ordinal, &layer) in expected.iter().enumerate() {
            let dir = files
                .values()
                .next()
                .and_then(|p| p.parent())
                .unwrap_or(path);
            let file = files.get(&layer).ok_or_else(|| {
                PlannerError::input(
                    dir,
                    "directory",
                    format!("expert_weights_{layer}.txt is missing (task `{task}`)"),
                    "keep the layer files of every MoE layer",
                )
            })?;
            layers.push((file.clone(), read_layer(file, ctx, ordinal)?));
        }
        let (first_file, first) = &layers[0];
        for (file, lines) in &layers[1..] {
            if lines.len() != first.len() {
                return Err(PlannerError::input(
                    file,
                    format!("line {}", lines.len().min(first.len()) + 1),
                    format!("has {} lines, {} has {}", lines.len(), first_file.display(), first.len()),
                    "line i of every layer file is the same example; use files cut at the same line",
                ));
            }
            if let Some(i) = (0..lines.len()).find(|&i| lines[i].len() != first[i].len()) {
                return Err(PlannerError::input(
                    file,
                    format!("line {}", i + 1),
                    format!(
                        "has {} tokens, line {} of {} has {}",
                        lines[i].len() / TOP_K,
                        i + 1,
                        first_file.display(),
                        first[i].len() / TOP_K
                    ),
                    "line i of every layer file is the same example; use files of one run",
                ));
            }
        }
        for (i, example) in first.iter().enumerate() {
            for t in 0..example.len() / TOP_K {
                let routes = layers
                    .iter()
                    .map(|(_, lines)| lines[i][TOP_K * t..TOP_K * (t + 1)].to_vec())
                    .collect();
                tokens.push(TokenRoutes {
                    seq: format!("{task}/{i}"),
                    pos: t as u64,
                    category: Some(task.clone()),
                    routes,
                });
            }
        }
    }
    Ok(Trace::build(
        HeatFormat::Esft,
        ctx,
        expected.len(),
        EXPERTS,
        tokens,
    ))
}

#[cfg(test)]
mod tests;

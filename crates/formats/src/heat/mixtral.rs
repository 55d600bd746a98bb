//! `mixtral-jsonl`, read only: Mixtral-8x7B routing of generated tokens
//! (`traces/SOURCES.md` 3), read as a per-token [`Trace`]. One JSON object
//! per (problem, layer, token):
//! `{"dataset","problem_id","layer","experts":[a,b],"gating_probs":[..],"token_idx"}`;
//! rows are joined on (dataset, problem_id, token_idx) into tokens (seq
//! `<dataset>/<problem_id>`, pos `token_idx`), category = dataset. `layer`
//! is the model layer (all 32 are MoE: ordinal = layer unless the model
//! says otherwise). Some (layer, token) rows are missing in the data: such
//! a token is unobserved in that layer, so `N[l]` = rows of layer `l`.
//! A directory is read through its `*_routing.jsonl` files
//! (`*_outputs.jsonl` hold prompts and texts and are ignored).

use super::common::{expert_problem, json_err, LayerMap, LineCtx};
use super::trace::{TokenRoutes, Trace};
use super::{HeatContext, HeatFormat};
use residency_core::error::{read_text, PlannerError, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const SYNTAX: &str =
    "each line is {\"dataset\": .., \"problem_id\": N, \"layer\": L, \"experts\": [a, b], \"token_idx\": T}";
const ROUTING: &str = "_routing.jsonl";
const OUTPUTS: &str = "_outputs.jsonl";
/// Mixtral-8x7B: 8 routed experts per layer.
const EXPERTS: usize = 8;

#[derive(Deserialize)]
struct Row {
    dataset: String,
    problem_id: u64,
    layer: u64,
    experts: Vec<u32>,
    token_idx: u64,
}

type Key = (String, u64, u64);

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        let n = name(path);
        if let Some(stem) = n.strip_suffix(OUTPUTS) {
            return Err(PlannerError::input(
                path,
                "file name",
                "an outputs file holds prompts and generated texts, not routes",
                format!("read `{stem}{ROUTING}`"),
            ));
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = super::common::dir_entries(path)?;
    files.retain(|p| name(p).ends_with(ROUTING));
    if files.is_empty() {
        return Err(PlannerError::input(
            path,
            "directory",
            format!("holds no `*{ROUTING}` file"),
            "name the folder of the Mixtral routing files, or one of them",
        ));
    }
    Ok(files)
}

pub(crate) fn read_trace(
    path: &Path,
    ctx: &HeatContext,
    _warnings: &mut Vec<String>,
) -> Result<Trace> {
    let map = LayerMap::of_model(ctx);
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut tokens: Vec<(Key, TokenRoutes)> = Vec::new();
    let mut layers = map.as_ref().map_or(0, LayerMap::layers);
    for file in files(path)? {
        let text = read_text(&file)?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = LineCtx {
                file: &file,
                line: i + 1,
                syntax: SYNTAX,
            };
            let row: Row =
                serde_json::from_str(line).map_err(|e| json_err(&file, Some(i + 1), &e, SYNTAX))?;
            let ordinal = match &map {
                Some(map) => map
                    .ordinal(row.layer)
                    .ok_or_else(|| at.err(map.not_moe(row.layer)))?,
                None => usize::try_from(row.layer).map_err(|_| at.err("layer is out of range"))?,
            };
            if let Some(problem) = row
                .experts
                .iter()
                .find_map(|&e| expert_problem(ctx, ordinal, e as usize))
            {
                return Err(at.err(problem));
            }
            if row.experts.is_empty() {
                return Err(at.err("`experts` is empty"));
            }
            layers = layers.max(ordinal + 1);
            let key = (row.dataset, row.problem_id, row.token_idx);
            let slot = *index.entry(key.clone()).or_insert_with(|| {
                tokens.push((
                    key.clone(),
                    TokenRoutes {
                        seq: format!("{}/{}", key.0, key.1),
                        pos: key.2,
                        category: Some(key.0.clone()),
                        routes: Vec::new(),
                    },
                ));
                tokens.len() - 1
            });
            let routes = &mut tokens[slot].1.routes;
            if routes.len() <= ordinal {
                routes.resize_with(ordinal + 1, Vec::new);
            }
            if !routes[ordinal].is_empty() {
                return Err(at.err(format!(
                    "problem {} token {} layer {} is given twice",
                    key.1, key.2, row.layer
                )));
            }
            routes[ordinal] = row.experts;
        }
    }
    tokens.sort_by(|a, b| a.0.cmp(&b.0));
    let tokens = tokens.into_iter().map(|(_, t)| t).collect();
    Ok(Trace::build(
        HeatFormat::MixtralJsonl,
        ctx,
        layers,
        EXPERTS,
        tokens,
    ))
}

#[cfg(test)]
mod tests;

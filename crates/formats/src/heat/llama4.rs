//! `llama4-json`, read only: Llama-4 MoE routing per MMLU query
//! (`traces/SOURCES.md` 2), read as a per-token [`Trace`]. A file is one
//! query: an array of steps; step 0 (prefill) and each decode step is an
//! object with keys "0".."<layers-1>" (model layers), `null` for a dense
//! layer, else one row `[expert ids]` per token of the step. Prefill rows
//! and decode steps are all tokens, in order (seq `<subject>/<file stem>`).
//! The MoE layers are the non-null keys (the same in every step and file;
//! the model's `moe_layers` when it is known). A data set is a folder of
//! subject folders (the categories) of `<n>.json`; one subject folder or
//! one file (category = its folder's name) is accepted too.

use super::common::{describe_layers, expert_problem, json_err};
use super::trace::{TokenRoutes, Trace};
use super::{HeatContext, HeatFormat};
use residency_core::error::{read_text, PlannerError, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FIX: &str = "a llama4-json file is [{\"0\": null, \"1\": [[id], ..], ..}, ..]: step 0 = prefill, then one step per decoded token";

/// One row of expert ids per token.
type Rows = Vec<Vec<u32>>;
/// One step: model layer key -> rows, `null` for a dense layer.
type Step = BTreeMap<String, Option<Rows>>;

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `*.json` files of a folder, by numeric stem (others after, by name).
fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = super::common::dir_entries(dir)?;
    files.retain(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"));
    let key = |p: &PathBuf| {
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        (stem.parse::<u64>().unwrap_or(u64::MAX), stem)
    };
    files.sort_by_key(key);
    Ok(files)
}

/// (category, files) per subject.
fn subjects(path: &Path) -> Result<Vec<(String, Vec<PathBuf>)>> {
    if path.is_file() {
        let category = path.parent().map(name).unwrap_or_default();
        return Ok(vec![(category, vec![path.to_path_buf()])]);
    }
    let own = json_files(path)?;
    if !own.is_empty() {
        return Ok(vec![(name(path), own)]);
    }
    let mut subjects = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| PlannerError::io(path, e))? {
        let sub = entry.map_err(|e| PlannerError::io(path, e))?.path();
        if sub.is_dir() {
            let files = json_files(&sub)?;
            if !files.is_empty() {
                subjects.push((name(&sub), files));
            }
        }
    }
    subjects.sort();
    if subjects.is_empty() {
        return Err(PlannerError::input(
            path,
            "directory",
            "holds no .json file, neither itself nor in a subfolder",
            "name a subject folder of <n>.json files or the folder of subject folders",
        ));
    }
    Ok(subjects)
}

/// One step's layers by number: (layer, rows or None).
fn layers_of(step: Step, path: &Path, s: usize) -> Result<Vec<(usize, Option<Rows>)>> {
    let mut layers = step
        .into_iter()
        .map(|(k, v)| match k.parse::<usize>() {
            Ok(l) => Ok((l, v)),
            Err(_) => Err(PlannerError::input(
                path,
                format!("step {s}, key {}", super::common::quote(&k)),
                "is not a layer number",
                FIX,
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    layers.sort_by_key(|(l, _)| *l);
    Ok(layers)
}

/// Reads one query file, appending its tokens; `moe` is the MoE layer set
/// every file must have (set by the model or by the first file).
fn read_query(
    path: &Path,
    ctx: &HeatContext,
    moe: &mut Option<(Vec<usize>, String)>,
    seq: String,
    category: &str,
    tokens: &mut Vec<TokenRoutes>,
) -> Result<()> {
    let text = read_text(path)?;
    let steps: Vec<Step> =
        serde_json::from_str(&text).map_err(|e| json_err(path, None, &e, FIX))?;
    if steps.is_empty() {
        return Err(PlannerError::input(path, "top level", "has no steps", FIX));
    }
    let mut pos = 0u64;
    for (s, step) in steps.into_iter().enumerate() {
        let layers = layers_of(step, path, s)?;
        let here: Vec<usize> = layers
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(l, _)| *l)
            .collect();
        match moe {
            None => *moe = Some((here.clone(), format!("{} step {s}", path.display()))),
            Some((want, source)) if *want != here => {
                return Err(PlannerError::input(
                    path,
                    format!("step {s}"),
                    format!(
                        "MoE layers (non-null keys) are {}, {source} has {}",
                        describe_layers(&here),
                        describe_layers(want)
                    ),
                    "every step of every file must route the same layers, those of the model",
                ));
            }
            Some(_) => {}
        }
        let rows: Vec<(usize, Rows)> = layers
            .into_iter()
            .filter_map(|(l, v)| v.map(|v| (l, v)))
            .collect();
        let Some((first_layer, first)) = rows.first() else {
            return Err(PlannerError::input(
                path,
                format!("step {s}"),
                "every layer is null (no MoE layer)",
                FIX,
            ));
        };
        let n = first.len();
        if let Some((l, r)) = rows.iter().find(|(_, r)| r.len() != n) {
            return Err(PlannerError::input(
                path,
                format!("step {s}, layer \"{l}\""),
                format!("has {} rows, layer \"{first_layer}\" has {n}", r.len()),
                "every MoE layer of a step holds one row per token",
            ));
        }
        for (ordinal, (l, r)) in rows.iter().enumerate() {
            for (t, ids) in r.iter().enumerate() {
                if let Some(problem) = ids
                    .iter()
                    .find_map(|&e| expert_problem(ctx, ordinal, e as usize))
                {
                    return Err(PlannerError::input(
                        path,
                        format!("step {s}, layer \"{l}\", row {t}"),
                        problem,
                        FIX,
                    ));
                }
            }
        }
        let mut columns: Vec<<Rows as IntoIterator>::IntoIter> =
            rows.into_iter().map(|(_, r)| r.into_iter()).collect();
        for _ in 0..n {
            tokens.push(TokenRoutes {
                seq: seq.clone(),
                pos,
                category: Some(category.to_string()),
                routes: columns
                    .iter_mut()
                    .map(|c| c.next().unwrap_or_default())
                    .collect(),
            });
            pos += 1;
        }
    }
    Ok(())
}

pub(crate) fn read_trace(
    path: &Path,
    ctx: &HeatContext,
    _warnings: &mut Vec<String>,
) -> Result<Trace> {
    let mut moe = ctx.moe_layers.as_ref().map(|m| {
        (
            m.clone(),
            format!("model `{}`", ctx.model_name.as_deref().unwrap_or("given")),
        )
    });
    let mut tokens = Vec::new();
    for (category, files) in subjects(path)? {
        for file in files {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            read_query(
                &file,
                ctx,
                &mut moe,
                format!("{category}/{stem}"),
                &category,
                &mut tokens,
            )?;
        }
    }
    let layers = moe.map_or(0, |(m, _)| m.len());
    Ok(Trace::build(HeatFormat::Llama4Json, ctx, layers, 0, tokens))
}

#[cfg(test)]
mod tests;

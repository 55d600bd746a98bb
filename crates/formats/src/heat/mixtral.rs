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
    let map = match &ctx.moe_layers {
        Some(_) => Some(LayerMap::from_ctx(ctx, path, "mixtral-jsonl")?),
        None => None,
    };
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
mod tests {
    use super::*;
    use crate::heat::common::test_util::{one_line, shared_data};

    fn row(dataset: &str, problem: u64, layer: u64, experts: [u32; 2], token: u64) -> String {
        format!(
            "{{\"dataset\": \"{dataset}\", \"problem_id\": {problem}, \"layer\": {layer}, \"experts\": [{}, {}], \"gating_probs\": [0.6, 0.4], \"token_idx\": {token}}}\n",
            experts[0], experts[1]
        )
    }

    #[test]
    fn joins_rows_into_tokens() {
        let dir = tempfile::tempdir().unwrap();
        // Problem 0: tokens 0, 1 in layers 0, 1, but layer 1 of token 1 missing.
        let text = [
            row("gsm8k", 0, 0, [7, 0], 0),
            row("gsm8k", 0, 0, [5, 6], 1),
            row("gsm8k", 0, 1, [7, 1], 0),
        ]
        .concat();
        std::fs::write(dir.path().join("gsm8k_2_routing.jsonl"), text).unwrap();
        std::fs::write(
            dir.path().join("code_routing.jsonl"),
            row("humaneval", 3, 0, [1, 2], 0),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("gsm8k_2_outputs.jsonl"),
            "{\"problem_id\": 0}\n",
        )
        .unwrap();
        let trace = read_trace(dir.path(), &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(trace.tokens.len(), 3);
        assert_eq!(trace.tokens[0].seq, "gsm8k/0");
        assert_eq!(trace.tokens[1].routes, vec![vec![5, 6], vec![]]);
        assert_eq!(trace.experts, vec![8, 8]);
        let h = trace.heat();
        // N = rows per layer: layer 0 has 3 rows, layer 1 has 1.
        assert_eq!(h.total.tokens, Some(vec![3, 1]));
        assert_eq!(
            h.total.counts[0],
            vec![1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
        );
        assert_eq!(h.categories["humaneval"].tokens, Some(vec![1, 0]));
    }

    #[test]
    fn bad_inputs_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad_routing.jsonl");
        let ctx = HeatContext {
            moe_layers: Some(vec![0, 1]),
            experts: Some(vec![8, 8]),
            model_name: Some("m".into()),
            ..Default::default()
        };
        let good = row("gsm8k", 0, 0, [1, 2], 0);
        let none = HeatContext::default();
        let cases: Vec<(String, &str, &HeatContext)> = vec![
            ("{\"dataset\": \"x\"}".into(), "line 2, column", &none),
            (
                "{\"dataset\": \"x\", \"problem_id\": \"zero\"".into(),
                "line 2, column",
                &none,
            ),
            (
                row("gsm8k", 0, 0, [3, 4], 0),
                "line 2: problem 0 token 0 layer 0 is given twice",
                &none,
            ),
            (
                row("gsm8k", 0, 5, [3, 4], 0),
                "line 2: layer 5 is not an MoE layer of `m`",
                &ctx,
            ),
            (
                row("gsm8k", 0, 1, [3, 9], 0),
                "line 2: expert 9 does not exist in MoE layer 1",
                &ctx,
            ),
        ];
        for (line, place, ctx) in cases {
            std::fs::write(&path, format!("{good}{line}\n")).unwrap();
            one_line(
                read_trace(&path, ctx, &mut vec![]).unwrap_err(),
                "bad_routing.jsonl",
                place,
            );
        }
        let out = dir.path().join("x_outputs.jsonl");
        std::fs::write(&out, "{}").unwrap();
        let msg = one_line(
            read_trace(&out, &none, &mut vec![]).unwrap_err(),
            "x_outputs.jsonl",
            "file name",
        );
        assert!(msg.contains("x_routing.jsonl"), "{msg}");
    }

    #[test]
    fn real_data() {
        let Some(dir) = shared_data("traces/mixtral_8x7b_speculative_moe") else {
            return;
        };
        let trace = read_trace(&dir, &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(trace.experts, vec![8; 32]);
        let h = trace.heat();
        // Row counts from `wc -l` (SOURCES.md 3): 7,889 gsm8k + 10,779 humaneval.
        let rows = |t: &crate::heat::HeatTable| t.tokens.as_ref().unwrap().iter().sum::<u64>();
        assert_eq!(rows(&h.categories["gsm8k"]), 7889);
        assert_eq!(rows(&h.categories["humaneval"]), 10779);
        // Top-2: two selections per row; layer 0 has 246 gsm8k + 337 humaneval rows
        // (counted per layer with a short Python script over the files).
        assert_eq!(h.total.tokens.as_ref().unwrap()[0], 246 + 337);
        for (row, &n) in h.total.counts.iter().zip(h.total.tokens.as_ref().unwrap()) {
            assert_eq!(row.iter().sum::<f64>(), 2.0 * n as f64);
        }
    }
}

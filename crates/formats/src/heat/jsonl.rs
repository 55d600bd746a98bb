//! Our `jsonl` per-token trace (design §3.3), read and written: one line per
//! token, `{"seq":"r1","pos":0,"category":"code","routes":[[e,..],..]}`,
//! `routes[l]` = experts chosen in MoE ordinal `l`. A layer that is `null`,
//! `[]` or past the end of `routes` was not observed for that token and does
//! not count in `N[l]`. `seq` defaults to "" and `pos` to the line index;
//! unknown keys are refused. Blank lines are skipped.

use super::common::{expert_problem, json_err, LineCtx};
use super::trace::{TokenRoutes, Trace};
use super::{HeatContext, HeatFormat};
use residency_core::error::{read_text, write_atomic, Result};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

const SYNTAX: &str =
    "each line is one token: {\"seq\": \"r1\", \"pos\": 0, \"category\": \"code\", \"routes\": [[experts of MoE layer 0], ..]}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default)]
    seq: Option<String>,
    #[serde(default)]
    pos: Option<u64>,
    #[serde(default)]
    category: Option<String>,
    routes: Vec<Option<Vec<u32>>>,
}

pub(crate) fn read_trace(
    path: &Path,
    ctx: &HeatContext,
    _warnings: &mut Vec<String>,
) -> Result<Trace> {
    let text = read_text(path)?;
    let model_layers = ctx.moe_layers.as_ref().map(Vec::len);
    let mut tokens = Vec::new();
    let mut layers = 0;
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: SYNTAX,
        };
        let line: Line =
            serde_json::from_str(raw).map_err(|e| json_err(path, Some(i + 1), &e, SYNTAX))?;
        if let Some(n) = model_layers.filter(|&n| line.routes.len() > n) {
            return Err(at.err(format!(
                "routes lists {} layers, `{}` has {n} MoE layers",
                line.routes.len(),
                ctx.model_name.as_deref().unwrap_or("the model")
            )));
        }
        let routes: Vec<Vec<u32>> = line
            .routes
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        for (l, ids) in routes.iter().enumerate() {
            if let Some(problem) = ids.iter().find_map(|&e| expert_problem(ctx, l, e as usize)) {
                return Err(at.err(format!("routes[{l}]: {problem}")));
            }
        }
        layers = layers.max(routes.len());
        tokens.push(TokenRoutes {
            seq: line.seq.unwrap_or_default(),
            pos: line.pos.unwrap_or(tokens.len() as u64),
            category: line.category,
            routes,
        });
    }
    Ok(Trace::build(
        HeatFormat::Jsonl,
        ctx,
        model_layers.unwrap_or(layers),
        0,
        tokens,
    ))
}

pub(crate) fn write_trace(trace: &Trace, path: &Path) -> Result<()> {
    let mut out = String::new();
    for t in &trace.tokens {
        let _ = write!(out, "{{\"seq\":{},\"pos\":{}", json_string(&t.seq), t.pos);
        if let Some(c) = &t.category {
            let _ = write!(out, ",\"category\":{}", json_string(c));
        }
        out.push_str(",\"routes\":[");
        for (l, ids) in t.routes.iter().enumerate() {
            if l > 0 {
                out.push(',');
            }
            out.push('[');
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{id}");
            }
            out.push(']');
        }
        out.push_str("]}\n");
    }
    write_atomic(path, out.as_bytes())
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heat::common::test_util::one_line;

    #[test]
    fn round_trip_and_heat() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tokens = vec![
            TokenRoutes {
                seq: "r 1".into(),
                pos: 0,
                category: Some("code".into()),
                routes: vec![vec![1, 0], vec![2, 3]],
            },
            TokenRoutes {
                seq: "r 1".into(),
                pos: 1,
                category: None,
                routes: vec![vec![1, 3], vec![]],
            },
        ];
        let trace = Trace::build(HeatFormat::Jsonl, &HeatContext::default(), 2, 0, tokens);
        write_trace(&trace, &path).unwrap();
        let back = read_trace(&path, &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(back, trace);
        // Hand count: L0 picks 1,0 then 1,3 -> [1,2,0,1], N0 = 2; L1 picks 2,3 (second token unobserved), N1 = 1.
        let heat = back.heat();
        assert_eq!(
            heat.total.counts,
            vec![vec![1.0, 2.0, 0.0, 1.0], vec![0.0, 0.0, 1.0, 1.0]]
        );
        assert_eq!(heat.total.tokens, Some(vec![2, 1]));
        assert_eq!(heat.categories["code"].tokens, Some(vec![1, 1]));
    }

    #[test]
    fn null_short_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"routes\":[[0],null]}\n\n{\"routes\":[[1]]}\n").unwrap();
        let trace = read_trace(&path, &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(trace.layers(), 2);
        assert_eq!(trace.tokens[1].pos, 1);
        assert_eq!(trace.heat().total.tokens, Some(vec![2, 0]));
    }

    #[test]
    fn bad_inputs_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.jsonl");
        let ctx = HeatContext {
            moe_layers: Some(vec![1, 2]),
            experts: Some(vec![4, 4]),
            model_name: Some("m".into()),
            ..Default::default()
        };
        let good = "{\"routes\":[[0],[1]]}\n";
        let cases: &[(&str, &str, &HeatContext)] = &[
            (
                "{\"routes\":[[0],[\"x\"]]}",
                "line 2, column",
                &HeatContext::default(),
            ),
            (
                "{\"route\":[[0]]}",
                "line 2, column",
                &HeatContext::default(),
            ),
            (
                "{\"routes\":[[0],[-1]]}",
                "line 2, column",
                &HeatContext::default(),
            ),
            (
                "{\"routes\":[[0],[1],[2]]}",
                "line 2: routes lists 3 layers",
                &ctx,
            ),
            (
                "{\"routes\":[[0],[4]]}",
                "line 2: routes[1]: expert 4 does not exist",
                &ctx,
            ),
            (
                "{\"routes\":[[0]",
                "line 2, column",
                &HeatContext::default(),
            ),
        ];
        for (line, place, ctx) in cases {
            std::fs::write(&path, format!("{good}{line}\n")).unwrap();
            one_line(
                read_trace(&path, ctx, &mut vec![]).unwrap_err(),
                "bad.jsonl",
                place,
            );
        }
    }
}

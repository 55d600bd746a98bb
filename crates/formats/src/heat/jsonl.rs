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
mod tests;

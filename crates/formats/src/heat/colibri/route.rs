//! `coli-route`: Colibri's ROUTE_TRACE, read only: `<call> <row> <layer>
//! <id>:<gate> ..`, one line per (MoE call, batch row), model layers; read
//! as a [`Trace`] of forwards.

use super::super::common::{expert_problem, quote, LayerMap, LineCtx};
use super::super::trace::{TokenRoutes, Trace};
use super::super::{HeatContext, HeatFormat};
use residency_core::error::Result;
use std::collections::HashMap;
use std::path::Path;

const ROUTE_SYNTAX: &str =
    "each line is `<call> <row> <model layer> <id>:<gate> ..` (docs/formats.md section 3)";

pub(crate) fn read_route_trace(
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Trace> {
    let mut map = LayerMap::from_ctx(ctx, path, "a ROUTE_TRACE")?;
    let text = residency_core::error::read_text(path)?;
    let mut tokens: Vec<TokenRoutes> = Vec::new();
    // Token index of each row of the current forward.
    let mut rows: HashMap<u64, usize> = HashMap::new();
    let mut prev: Option<(u64, u64, u64)> = None;
    let mut forward = 0u64;
    let mut mapped = 0u64;
    for (i, line) in text.lines().enumerate() {
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: ROUTE_SYNTAX,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() < 4 {
            return Err(at.err(format!(
                "has {} fields, expected `<call> <row> <layer>` and at least one `<id>:<gate>`",
                f.len()
            )));
        }
        let call = at.uint(1, "call", f[0])?;
        let row = at.uint(2, "row", f[1])?;
        let layer = at.uint(3, "layer", f[2])?;
        let mut ids = Vec::with_capacity(f.len() - 3);
        for (k, pair) in f.iter().enumerate().skip(3) {
            let (id, gate) = pair.split_once(':').ok_or_else(|| {
                at.field_err(
                    k + 1,
                    "id:gate",
                    format!("{} is not `<id>:<gate>`", quote(pair)),
                )
            })?;
            ids.push(at.expert(k + 1, "id", id)?);
            at.number(k + 1, "gate", gate)?;
        }
        // A forward is one pass over the layers: it ends when the layer
        // goes back, or the same layer starts another call or batch.
        let new_forward = prev
            .is_some_and(|(pc, pr, pl)| layer < pl || (layer == pl && (call != pc || row <= pr)));
        if new_forward {
            forward += 1;
            rows.clear();
        }
        prev = Some((call, row, layer));
        let Some(ordinal) = map.ordinal_or_drop(layer, ids.len() as f64) else {
            continue;
        };
        if let Some(problem) = ids
            .iter()
            .find_map(|&e| expert_problem(ctx, ordinal, e as usize))
        {
            return Err(at.err(problem));
        }
        mapped += 1;
        let index = *rows.entry(row).or_insert_with(|| {
            tokens.push(TokenRoutes {
                seq: forward.to_string(),
                pos: row,
                category: None,
                routes: vec![Vec::new(); map.layers()],
            });
            tokens.len() - 1
        });
        tokens[index].routes[ordinal] = ids;
    }
    map.warn_dropped(path, "lines", warnings);
    map.check_some_mapped(path, mapped)?;
    Ok(Trace::build(
        HeatFormat::ColiRoute,
        ctx,
        map.layers(),
        0,
        tokens,
    ))
}

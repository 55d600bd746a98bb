//! Per-token routing traces: the one in-memory form that every per-token
//! format (jsonl, esft, llama4-json, mixtral-jsonl, coli-route) produces, so
//! that heat is derived from all of them by one function ([`Trace::heat`])
//! and the simulator can replay any of them.

use super::common::resolve_shape;
use super::{Heat, HeatContext, HeatFormat, HeatTable};
use std::collections::BTreeMap;

/// The experts one token chose in each MoE layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRoutes {
    /// The sequence (request, example, query) the token belongs to; for a
    /// Colibri ROUTE_TRACE, the engine forward (tokens of one forward were
    /// one runtime batch).
    pub seq: String,
    /// Position of the token in its sequence (ROUTE_TRACE: row in the batch).
    pub pos: u64,
    /// Category (task, subject, data set) when the source has one.
    pub category: Option<String>,
    /// `routes[l]` = experts chosen in MoE ordinal `l`, in the source's
    /// order. An empty list means the layer was not observed for this token
    /// (a missing row); such a token does not count in that layer's `N[l]`.
    /// Always exactly `Trace::layers()` entries.
    pub routes: Vec<Vec<u32>>,
}

/// A per-token trace: tokens in source order, with the number of experts of
/// each MoE layer (every id in `routes[l]` is below `experts[l]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub model: Option<String>,
    pub format: HeatFormat,
    pub experts: Vec<usize>,
    pub tokens: Vec<TokenRoutes>,
}

impl Trace {
    /// Builds a trace from tokens whose `routes` may be shorter than
    /// `layers` (padded with "not observed"). Experts per layer: the model's
    /// (ctx) when it has `layers` MoE layers, else the larger of `declared`
    /// (the source's own expert count) and the largest id seen + 1. Readers
    /// check ids against the model before calling this.
    pub(crate) fn build(
        format: HeatFormat,
        ctx: &HeatContext,
        layers: usize,
        declared: usize,
        mut tokens: Vec<TokenRoutes>,
    ) -> Trace {
        let mut seen = 0usize;
        for token in &mut tokens {
            debug_assert!(token.routes.len() <= layers);
            token.routes.resize_with(layers, Vec::new);
            for &id in token.routes.iter().flatten() {
                seen = seen.max(id as usize + 1);
            }
        }
        Trace {
            model: None,
            format,
            experts: resolve_shape(ctx, layers, declared.max(seen)),
            tokens,
        }
    }

    /// MoE layers of the trace.
    pub fn layers(&self) -> usize {
        self.experts.len()
    }

    /// Category names in order.
    pub fn categories(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .tokens
            .iter()
            .filter_map(|t| t.category.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Heat of the trace (design §3.3): every selection counts one in
    /// `c[l][e]`; `N[l]` = tokens observed in layer `l` (non-empty routes);
    /// one table per category, and the total over all tokens (including
    /// tokens without a category). The trace gives the layers up to the
    /// last one a token was observed in: layers past it are padding (routes
    /// shorter than the model's, or never recorded).
    pub fn heat(&self) -> Heat {
        let empty = || HeatTable {
            counts: self.experts.iter().map(|&w| vec![0.0; w]).collect(),
            tokens: Some(vec![0; self.layers()]),
        };
        let mut total = empty();
        let mut categories: BTreeMap<String, HeatTable> = BTreeMap::new();
        for token in &self.tokens {
            let mut category = token
                .category
                .as_ref()
                .map(|c| categories.entry(c.clone()).or_insert_with(empty));
            for (l, ids) in token.routes.iter().enumerate() {
                if ids.is_empty() {
                    continue;
                }
                add_token(&mut total, l, ids);
                if let Some(table) = category.as_deref_mut() {
                    add_token(table, l, ids);
                }
            }
        }
        let observed = total.tokens.as_deref().unwrap_or_default();
        Heat {
            model: self.model.clone(),
            format: self.format,
            source_layers: observed.iter().rposition(|&n| n > 0).map_or(0, |l| l + 1),
            total,
            categories,
        }
    }
}

fn add_token(table: &mut HeatTable, layer: usize, ids: &[u32]) {
    if let Some(tokens) = table.tokens.as_mut() {
        tokens[layer] += 1;
    }
    for &id in ids {
        table.counts[layer][id as usize] += 1.0;
    }
}

#[cfg(test)]
mod tests;

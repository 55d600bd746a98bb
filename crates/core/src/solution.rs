//! The solver's answer as plain data: a placement, its token time, the
//! bound and how it was found, the greedy baseline beside it; and how an
//! object is named in messages. The plan file is built from it.

use crate::cost::{Instance, ObjectKind};

#[derive(Debug, Clone)]
pub struct Solution {
    /// Place index per object.
    pub placement: Vec<usize>,
    pub token_seconds: f64,
    pub lower_bound_seconds: f64,
    pub bound_method: &'static str,
    pub greedy_placement: Vec<usize>,
    pub greedy_token_seconds: f64,
    pub method: String,
    pub solve_seconds: f64,
    pub proven_optimal: bool,
}

impl Solution {
    /// `token_seconds / lower_bound - 1`.
    pub fn gap(&self) -> f64 {
        if self.lower_bound_seconds > 0.0 {
            self.token_seconds / self.lower_bound_seconds - 1.0
        } else {
            f64::INFINITY
        }
    }
}

/// A readable name of an object: `expert (3, 17)` or `trunk attn L5`.
pub fn describe(inst: &Instance, o: usize) -> String {
    match &inst.objects[o].kind {
        ObjectKind::Expert { moe, expert } => format!("expert {expert} of MoE layer {moe}"),
        ObjectKind::Trunk {
            name,
            layer: Some(l),
        } => format!("trunk {name} of layer {l}"),
        ObjectKind::Trunk { name, layer: None } => format!("trunk {name}"),
        ObjectKind::KvGroup { name, .. } => format!("KV group {name}"),
    }
}

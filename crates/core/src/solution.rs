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

/// What a fixed placement's plan file says of its bound.
pub const FIXED_BOUND_METHOD: &str = "none: a fixed rule's placement, priced, not searched";

impl Solution {
    /// A placement made by a fixed rule (greedy, a llama.cpp flag, all on
    /// the CPU), priced by the cost model so that a plan file can carry it
    /// (`residency bench --sweep` applies each). Nothing bounds it without
    /// a solve, so its bound is its own time (a plan file holds finite
    /// numbers), said by `bound_method` and `proven_optimal: false`; it is
    /// its own greedy baseline.
    pub fn fixed(inst: &Instance, placement: Vec<usize>, method: &str) -> Solution {
        let token_seconds = inst.evaluate(&placement).token_seconds;
        Solution {
            greedy_placement: placement.clone(),
            placement,
            token_seconds,
            lower_bound_seconds: token_seconds,
            bound_method: FIXED_BOUND_METHOD,
            greedy_token_seconds: token_seconds,
            method: method.to_string(),
            solve_seconds: 0.0,
            proven_optimal: false,
        }
    }

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

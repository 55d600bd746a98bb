//! The solver: greedy baseline, the participation relaxation (lower bound and
//! a fractional placement), rounding, capacity repair and local search on the
//! true objective. Returns the best placement found with an honest bound.

pub mod greedy;
pub mod relaxation;
pub mod rounding;
pub mod search;

use crate::cost::{Instance, ObjectKind};
use crate::Result;
use search::SearchState;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct SolveOptions {
    pub time_limit_seconds: f64,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions { time_limit_seconds: 2.0 }
    }
}

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

/// Gap under which a plan counts as optimal: below the bound's own tolerance margin.
const OPTIMAL_GAP: f64 = 1e-6;

pub fn solve(inst: &Instance, options: SolveOptions) -> Result<Solution> {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(options.time_limit_seconds.max(0.01));
    let deadline = start + limit;

    let greedy_placement = greedy::greedy(inst)?;
    let greedy_token_seconds = inst.evaluate(&greedy_placement).token_seconds;

    let relaxation = relaxation::solve(inst, limit.as_secs_f64() * 0.6);
    if std::env::var("RESIDENCY_DEBUG").is_ok() { if let Some(r) = &relaxation { for (s, st) in r.stages.iter().enumerate() { eprintln!("lp {} {:.9}", inst.stages[s].name, st.seconds); } } }
    let mut candidates = Vec::new();
    if let Some(relaxation) = &relaxation {
        let mut state = SearchState::new(inst, rounding::round(inst, relaxation));
        if std::env::var("RESIDENCY_DEBUG").is_ok() { eprintln!("t lp {:.3}s rounded {:.6}", start.elapsed().as_secs_f64(), state.token_seconds()); }
        if state.repair() {
            if std::env::var("RESIDENCY_DEBUG").is_ok() { eprintln!("t repair {:.3}s {:.6}", start.elapsed().as_secs_f64(), state.token_seconds()); }
            state.improve(deadline);
            if std::env::var("RESIDENCY_DEBUG").is_ok() { eprintln!("t improve {:.3}s {:.6}", start.elapsed().as_secs_f64(), state.token_seconds()); }
            candidates.push(("participation-lp rounding + local search", state.placement));
        }
    }
    if candidates.is_empty() || Instant::now() < deadline {
        let mut state = SearchState::new(inst, greedy_placement.clone());
        state.improve(deadline);
        candidates.push(("greedy + local search", state.placement));
    }
    let (method, placement) = candidates
        .into_iter()
        .map(|(m, p)| (inst.evaluate(&p).token_seconds, m, p))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, m, p)| (m, p))
        .expect("at least the greedy candidate");
    let token_seconds = inst.evaluate(&placement).token_seconds;
    let (bound, bound_method) = match &relaxation {
        Some(r) => (r.lower_bound_seconds, r.method),
        None => (relaxation::trivial_bound(inst), "work-sum"),
    };
    debug_assert!(bound <= token_seconds * (1.0 + 1e-6), "bound {bound} above plan {token_seconds}");
    let lower_bound_seconds = bound.min(token_seconds);
    Ok(Solution {
        proven_optimal: token_seconds / lower_bound_seconds - 1.0 <= OPTIMAL_GAP,
        placement,
        token_seconds,
        lower_bound_seconds,
        bound_method,
        greedy_placement,
        greedy_token_seconds,
        method: method.to_string(),
        solve_seconds: start.elapsed().as_secs_f64(),
    })
}

/// A readable name of an object: `expert (3, 17)` or `trunk attn L5`.
pub fn describe(inst: &Instance, o: usize) -> String {
    match &inst.objects[o].kind {
        ObjectKind::Expert { moe, expert } => format!("expert {expert} of MoE layer {moe}"),
        ObjectKind::Trunk { name, layer: Some(l) } => format!("trunk {name} of layer {l}"),
        ObjectKind::Trunk { name, layer: None } => format!("trunk {name}"),
    }
}

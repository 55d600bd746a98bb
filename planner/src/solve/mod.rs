//! The solver: greedy baseline, the participation relaxation (lower bound and
//! a fractional placement), rounding, capacity repair and local search on the
//! true objective. Returns the best placement found with an honest bound.
//! `replan` starts instead from a current placement and charges every move
//! away from it (DESIGN 4.5).

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
        SolveOptions {
            time_limit_seconds: 2.0,
        }
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

/// Gap above which the solver spends time on the integer refinement.
const TARGET_GAP: f64 = 1e-3;

/// Gap under which a plan counts as optimal: below the bound's own tolerance margin.
const OPTIMAL_GAP: f64 = 1e-6;

pub fn solve(inst: &Instance, options: SolveOptions) -> Result<Solution> {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(options.time_limit_seconds.max(0.01));
    let deadline = start + limit;

    let greedy_placement = greedy::greedy(inst)?;
    let greedy_token_seconds = inst.evaluate(&greedy_placement).token_seconds;

    let mut bound = (relaxation::trivial_bound(inst), "work-sum");
    let mut best = (greedy_token_seconds, "greedy", greedy_placement.clone());
    let consider = |name: &'static str,
                    start_placement: Vec<usize>,
                    until: Instant,
                    best: &mut (f64, &'static str, Vec<usize>)| {
        let mut state = SearchState::new(inst, start_placement);
        if state.repair() {
            state.improve(until);
            if state.token_seconds() < best.0 {
                *best = (state.token_seconds(), name, state.placement);
            }
        }
    };
    let lp = relaxation::solve(inst, start + limit.mul_f64(0.5));
    if let Some(lp) = &lp {
        bound = (lp.lower_bound_seconds, lp.method);
    }
    // How long rounding and polishing take, so the integer refinement leaves
    // time for them within the limit.
    let polish_start = Instant::now();
    if let Some(lp) = &lp {
        // Leave the greedy start a share of the limit: on large instances
        // under a short limit it can end better than the rounding.
        consider(
            "participation-lp rounding + local search",
            rounding::round(inst, lp),
            start + limit.mul_f64(0.8),
            &mut best,
        );
    }
    let polish = polish_start.elapsed();
    consider(
        "greedy + local search",
        greedy_placement.clone(),
        deadline,
        &mut best,
    );
    let mip_deadline = (start + limit.mul_f64(0.85)).min(deadline - polish.mul_f64(1.5).min(limit));
    let worth_it =
        best.0 > bound.0 * (1.0 + TARGET_GAP) && mip_deadline > Instant::now() + limit / 10;
    if let Some(lp) = lp.filter(|_| worth_it) {
        for mip in relaxation::refine_integer(inst, &lp, mip_deadline) {
            if mip.lower_bound_seconds > bound.0 {
                bound = (mip.lower_bound_seconds, mip.method);
            }
            consider(
                "participation-mip rounding + local search",
                rounding::round(inst, &mip),
                deadline,
                &mut best,
            );
        }
    }
    let (_, method, placement) = best;
    Ok(Solution::new(
        inst,
        placement,
        bound,
        (greedy_placement, greedy_token_seconds),
        method,
        start,
    ))
}

impl Solution {
    fn new(
        inst: &Instance,
        placement: Vec<usize>,
        (bound, bound_method): (f64, &'static str),
        (greedy_placement, greedy_token_seconds): (Vec<usize>, f64),
        method: &str,
        start: Instant,
    ) -> Solution {
        let token_seconds = inst.evaluate(&placement).token_seconds;
        debug_assert!(
            bound <= token_seconds * (1.0 + 1e-6),
            "bound {bound} above plan {token_seconds}"
        );
        let lower_bound_seconds = bound.min(token_seconds);
        Solution {
            proven_optimal: token_seconds / lower_bound_seconds - 1.0 <= OPTIMAL_GAP,
            placement,
            token_seconds,
            lower_bound_seconds,
            bound_method,
            greedy_placement,
            greedy_token_seconds,
            method: method.to_string(),
            solve_seconds: start.elapsed().as_secs_f64(),
        }
    }
}

/// How a re-plan weighs moving (DESIGN 4.5): a move must pay for itself
/// over `horizon_tokens`, with its seconds counted `hysteresis` times.
#[derive(Debug, Clone, Copy)]
pub struct ReplanOptions {
    pub time_limit_seconds: f64,
    pub horizon_tokens: f64,
    pub hysteresis: f64,
}

/// Re-plans from `current` (place index per object), minimising
/// `token_seconds + hysteresis * move_seconds / horizon_tokens`: local
/// search on that objective from two starts, the current placement (first
/// moved back within capacities when the inputs shrank a place) and a
/// fresh plan for the new inputs, keeping the better. The fresh plan's
/// bound is valid for any placement.
pub fn replan(inst: &Instance, current: &[usize], options: ReplanOptions) -> Result<Solution> {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(options.time_limit_seconds.max(0.01));
    let fresh = solve(
        inst,
        SolveOptions {
            time_limit_seconds: limit.as_secs_f64() * 0.5,
        },
    )?;
    let deadline = start + limit;
    let searched = |from: &[usize]| {
        let mut state = SearchState::new(inst, from.to_vec()).with_migration(search::Migration {
            current: current.to_vec(),
            horizon_tokens: options.horizon_tokens,
            hysteresis: options.hysteresis,
        });
        state.repair().then(|| {
            let until = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
            state.improve(until);
            (state.objective(), state.placement)
        })
    };
    let best = [searched(current), searched(&fresh.placement)]
        .into_iter()
        .flatten()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("the fresh plan fits");
    Ok(Solution::new(
        inst,
        best.1,
        (fresh.lower_bound_seconds, fresh.bound_method),
        (fresh.greedy_placement, fresh.greedy_token_seconds),
        "re-plan: local search with move costs from the current and a fresh placement",
        start,
    ))
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

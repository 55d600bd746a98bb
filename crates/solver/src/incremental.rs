//! Incremental re-planning, the API a serving loop calls every few tokens
//! (design §4.5): from the placement in use and the byte prices of the
//! solve that made it, a placement for new heat that carries at most a
//! move budget of bytes, in milliseconds.
//!
//! The objective is `replan`'s: token seconds plus `hysteresis x move
//! seconds / horizon` (`diff::move_seconds`: bytes at each link's rate).
//! The prices are searched again from the previous ones (a few cutting-plane
//! steps: they move little when the heat does) and give the bound; the
//! placement is improved by the local search of `search` from the one in
//! use, every step kept within the budget. Nothing else starts: no greedy,
//! no rounding, no kicks, so a pass costs a few scans of the objects.
//!
//! The bound is on the same objective over the placements within the
//! budget: the larger of the priced relaxation's bound on the token
//! seconds of any placement (moves counted at zero, the budget relaxed)
//! and the bound with move costs of `move_bound`, which starts from the
//! placement in use at the relaxation's prices and bounds what the moves
//! the budget allows can save, each paying its move seconds. The first
//! is tight where staying or moving little is best; the second where the
//! heat moved more than the budget lets the placement follow, where the
//! first is loose.

use crate::lagrange::{self, PriceSearch};
use crate::move_bound::{bound_with_moves, MoveBoundInputs};
use crate::search::{Migration, SearchState};
use residency_core::cost::Instance;
use residency_core::diff::move_seconds;
use residency_core::{PlannerError, Result};
use std::time::{Duration, Instant};

/// What a re-plan starts from: the placement in use (place index per
/// object) and the prices of the solve that made it (seconds per byte of
/// each GPU, then each RAM node; empty: start from zero prices).
#[derive(Debug, Clone, PartialEq)]
pub struct Warm {
    pub placement: Vec<usize>,
    pub prices_seconds_per_byte: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
pub struct IncrementalOptions {
    /// Wall seconds for the whole re-plan (one evaluation of the prices is
    /// always made, however short).
    pub time_limit_seconds: f64,
    /// Stop once the objective is proven within this share of the optimum.
    pub gap: f64,
    /// Most bytes the new placement may carry over links away from the
    /// one in use (`diff::carried_bytes`; a weight dropped to disk carries
    /// none).
    pub move_budget_bytes: u64,
    /// Tokens over which a move must pay for itself.
    pub horizon_tokens: f64,
    /// A move's seconds count this many times.
    pub hysteresis: f64,
}

/// A re-plan's answer: the placement and what it costs, and the prices
/// the next re-plan starts from (`warm`).
#[derive(Debug, Clone, PartialEq)]
pub struct Replanned {
    pub placement: Vec<usize>,
    pub prices_seconds_per_byte: Vec<f64>,
    pub token_seconds: f64,
    /// Seconds to carry every move over its link.
    pub move_seconds: f64,
    pub moved_bytes: u64,
    /// `token_seconds + hysteresis * move_seconds / horizon_tokens`: what
    /// the re-plan minimises.
    pub objective_seconds: f64,
    /// A lower bound on `objective_seconds` over every placement within
    /// the budget (`BOUND_METHOD`, the module's docs); at most
    /// `objective_seconds`.
    pub lower_bound_seconds: f64,
    /// The priced relaxation's bound on the token seconds of any placement
    /// (moves free, the budget relaxed): what a plan file reports as the
    /// bound on its token seconds (`TOKEN_BOUND_METHOD`), and what the
    /// bound was before move costs were counted.
    pub token_lower_bound_seconds: f64,
    pub solve_seconds: f64,
}

/// What a plan file says made an incremental re-plan's placement.
pub const METHOD: &str =
    "incremental re-plan: local search within the move budget from the placement in use";

/// What `Replanned::lower_bound_seconds` is.
pub const BOUND_METHOD: &str = "the objective (token seconds + hysteresis x move seconds / horizon) over placements within the move budget: the larger of the priced relaxation on token seconds (warm prices; moves counted at zero, budget relaxed) and the bound with move costs from the placement in use at its prices (move_bound)";

/// What a plan file says of an incremental re-plan's bound: the plan's
/// bound is on token seconds, which moves do not enter.
pub const TOKEN_BOUND_METHOD: &str =
    "priced relaxation on token seconds, warm prices; moves counted at zero, move budget relaxed";

impl Replanned {
    /// Relative distance of the objective from the bound: an upper bound
    /// on the distance from the best placement within the budget.
    pub fn gap(&self) -> f64 {
        self.objective_seconds / self.lower_bound_seconds - 1.0
    }

    /// Where the next re-plan starts, once this placement is in use.
    pub fn warm(&self) -> Warm {
        Warm {
            placement: self.placement.clone(),
            prices_seconds_per_byte: self.prices_seconds_per_byte.clone(),
        }
    }
}

/// Share of the time limit the prices may take; the search has the rest.
const PRICE_SHARE: f64 = 0.3;

/// Share of the limit the bound with move costs leaves for what follows it.
const BOUND_MARGIN_SHARE: f64 = 0.03;

/// The prices stop when their model promises less than this share more.
const PRICE_TOLERANCE: f64 = 1e-4;

/// Re-plans `inst` (its use rates the new heat) from `warm` within the
/// move budget. Fails only when the placement in use is not one of `inst`
/// (another length, a place it lacks or forbids) or cannot be brought
/// within the capacities inside the budget.
pub fn replan(inst: &Instance, warm: &Warm, options: IncrementalOptions) -> Result<Replanned> {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(options.time_limit_seconds.max(1e-4));
    check_placement(inst, &warm.placement)?;
    let priced = lagrange::bound_from(
        inst,
        PriceSearch {
            deadline: start + limit.mul_f64(PRICE_SHARE),
            tolerance: PRICE_TOLERANCE,
            good_enough: f64::INFINITY,
            warm_prices: Some(&warm.prices_seconds_per_byte),
            starts: false,
        },
    );
    let token_bound = priced
        .lower_bound_seconds
        .max(lagrange::work_sum_bound(inst));
    // Where the weight is not a finite non-negative number (no horizon),
    // `bound_with_moves` declines and the relaxation's bound stands.
    let inputs = MoveBoundInputs {
        current: &warm.placement,
        prices_seconds_per_byte: &priced.prices_seconds_per_byte,
        stage_bounds_seconds: &priced.stage_bounds_seconds,
        capacities_bytes: &priced.capacities_bytes,
        move_budget_bytes: options.move_budget_bytes,
        move_weight: options.hysteresis / options.horizon_tokens,
        // Where the prices took the search's time too (a loaded core),
        // the limit is kept rather than the bound: the answer's evaluation
        // after it takes less than the share of the limit left.
        deadline: Some(start + limit.mul_f64(1.0 - BOUND_MARGIN_SHARE)),
    };
    // The bound with move costs needs nothing of the search: it runs beside
    // it (a few scans of the objects, 2.5 ms at DeepSeek-V3 scale, 10 at
    // Kimi's), on another core where there is one. Before the search, its
    // time came out of the search's: at DeepSeek-V3 scale, where one
    // evaluation of the prices takes half the 20 ms, the search then often
    // moved nothing.
    let (searched, with_moves) = std::thread::scope(|scope| {
        let with_moves = scope.spawn(|| bound_with_moves(inst, inputs));
        let searched = search(inst, warm, &options, start, limit, token_bound);
        let with_moves = with_moves.join().expect("the bound with move costs");
        (searched, with_moves)
    });
    let state = searched?;
    let bound = with_moves.map_or(token_bound, |b| b.max(token_bound));
    let placement = state.placement.clone();
    let token_seconds = inst.evaluate(&placement).token_seconds;
    let move_seconds = placement
        .iter()
        .zip(&warm.placement)
        .enumerate()
        .fold(0.0, |total, (o, (&to, &from))| {
            total + move_seconds(inst, o, from, to)
        });
    let objective_seconds =
        token_seconds + options.hysteresis * move_seconds / options.horizon_tokens;
    Ok(Replanned {
        moved_bytes: state.moved_bytes(),
        placement,
        prices_seconds_per_byte: priced.prices_seconds_per_byte,
        token_seconds,
        move_seconds,
        objective_seconds,
        lower_bound_seconds: bound.min(objective_seconds),
        token_lower_bound_seconds: token_bound,
        solve_seconds: start.elapsed().as_secs_f64(),
    })
}

/// The local search from the placement in use within the budget, until
/// the deadline the limit leaves or the objective is within the gap of
/// the relaxation's bound.
fn search<'a>(
    inst: &'a Instance,
    warm: &Warm,
    options: &IncrementalOptions,
    start: Instant,
    limit: Duration,
    token_bound: f64,
) -> Result<SearchState<'a>> {
    let migration = Migration {
        current: warm.placement.clone(),
        horizon_tokens: options.horizon_tokens,
        hysteresis: options.hysteresis,
        budget_bytes: Some(options.move_budget_bytes),
    };
    let building = Instant::now();
    let mut state = SearchState::new(inst, warm.placement.clone()).with_migration(migration);
    // Constraints come before the move budget: what breaks one moves.
    state.enforce_constraints();
    // The answer's evaluation and its move seconds each scan the objects
    // as building the state did, and the search's last step (a stage's
    // scan in the trades) may pass its deadline by about as much again: the
    // search leaves three times the building's time of the limit.
    let search_deadline = (start + limit)
        .checked_sub(building.elapsed() * 3)
        .unwrap_or(start);
    if !state.repair() {
        return Err(PlannerError::Infeasible(format!(
            "the placement in use, its constraints met, does not fit the capacities, and a move budget of {} bytes cannot make it fit; allow more bytes to move",
            options.move_budget_bytes
        )));
    }
    state.improve(search_deadline, token_bound * (1.0 + options.gap.max(0.0)));
    Ok(state)
}

/// The placement in use must be one of `inst`'s.
fn check_placement(inst: &Instance, placement: &[usize]) -> Result<()> {
    if placement.len() != inst.objects.len() {
        return Err(PlannerError::Infeasible(format!(
            "the placement in use has {} objects, the instance {}; re-plan from a placement of this model",
            placement.len(),
            inst.objects.len()
        )));
    }
    match placement
        .iter()
        .enumerate()
        .find(|&(o, &q)| q >= inst.places.len() || !inst.allowed_kind(o, inst.places[q]))
    {
        Some((o, &q)) => Err(PlannerError::Infeasible(format!(
            "the placement in use puts {} at place index {q}, which this instance lacks or forbids for it",
            residency_core::solution::describe(inst, o)
        ))),
        None => Ok(()),
    }
}

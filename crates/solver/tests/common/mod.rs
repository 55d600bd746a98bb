//! Helpers shared by the solver's integration tests.

use residency_core::cost::Instance;
use residency_solver::{solve, Solution, SolveOptions};

/// Solves `inst` within `seconds`, which must give a plan the instance
/// finds feasible.
pub fn solve_feasible(inst: &Instance, seconds: f64) -> Solution {
    let solution = solve(
        inst,
        SolveOptions {
            time_limit_seconds: seconds,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    inst.check_feasible(&solution.placement).unwrap();
    solution
}

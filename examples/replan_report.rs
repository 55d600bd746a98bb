//! Wall time and quality of the incremental re-plan against `replan` (the
//! full plan search with move costs) on the same inputs: DeepSeek-V3 (61
//! layers, 58 of them MoE x 256 experts) on the two-card Threadripper box
//! (2 GPUs, RAM, a drive) and Kimi scale (64 x 1280, top-8) on the 8-GPU
//! node, as `instances::replan_cases` builds them (the heat drifts 10 %
//! from the cold plan's); 5 runs each, median and range. Beside the wall
//! time, the thread's CPU time: on a shared machine the wall time also
//! holds the time other processes had the core.
//!
//! `cargo run --release --example replan_report [-- BUDGET_GIB]` (default 2);
//! results in docs/planner-scale.md.

#[path = "../benches/support/instances.rs"]
mod instances;
#[path = "../benches/support/report.rs"]
mod report;

use report::{spread, thread_cpu_seconds};

use residency_solver::incremental::{self, IncrementalOptions};
use residency_solver::{replan, ReplanOptions};
use std::time::Instant;

const RUNS: usize = 5;
const HORIZON_TOKENS: f64 = 512.0;
const HYSTERESIS: f64 = 2.0;

fn main() {
    let budget_gib: f64 = std::env::args()
        .nth(1)
        .map_or(2.0, |b| b.parse().expect("a budget in GiB"));
    let budget_bytes = (budget_gib * (1u64 << 30) as f64) as u64;
    println!("budget {budget_gib} GiB, horizon {HORIZON_TOKENS} tokens, hysteresis {HYSTERESIS}; {RUNS} runs, median (range)");
    println!("| instance | method | limit | wall ms | CPU ms | token ms | objective ms | bound ms | token bound ms | gap | moved MiB |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for case in instances::replan_cases() {
        let (name, inst, warm, limit) = (case.name, &case.inst, &case.warm, case.limit_seconds);
        let mut rows: Vec<[f64; 8]> = Vec::new();
        for _ in 0..RUNS {
            let (started, cpu) = (Instant::now(), thread_cpu_seconds());
            let got = incremental::replan(
                inst,
                warm,
                IncrementalOptions {
                    time_limit_seconds: limit,
                    gap: residency_solver::DEFAULT_GAP,
                    move_budget_bytes: budget_bytes,
                    horizon_tokens: HORIZON_TOKENS,
                    hysteresis: HYSTERESIS,
                },
            )
            .unwrap();
            rows.push([
                started.elapsed().as_secs_f64(),
                thread_cpu_seconds() - cpu,
                got.token_seconds,
                got.objective_seconds,
                got.lower_bound_seconds,
                got.token_lower_bound_seconds,
                got.gap(),
                got.moved_bytes as f64,
            ]);
        }
        print_row(name, "incremental", limit, &rows);
        let mut rows: Vec<[f64; 8]> = Vec::new();
        for _ in 0..RUNS {
            let (started, cpu) = (Instant::now(), thread_cpu_seconds());
            let options = ReplanOptions {
                time_limit_seconds: 1.0,
                horizon_tokens: HORIZON_TOKENS,
                hysteresis: HYSTERESIS,
            };
            let got = replan(inst, &warm.placement, options).unwrap();
            let diff = residency_core::diff::diff(inst, &warm.placement, &got.placement);
            let objective = got.token_seconds + HYSTERESIS * diff.move_seconds / HORIZON_TOKENS;
            let moved: u64 = diff.links.iter().map(|l| l.bytes).sum();
            rows.push([
                started.elapsed().as_secs_f64(),
                thread_cpu_seconds() - cpu,
                got.token_seconds,
                objective,
                got.lower_bound_seconds,
                got.lower_bound_seconds,
                objective / got.lower_bound_seconds - 1.0,
                moved as f64,
            ]);
        }
        print_row(name, "replan (no budget)", 1.0, &rows);
    }
}

fn print_row(name: &str, method: &str, limit: f64, rows: &[[f64; 8]]) {
    let col = |i: usize| rows.iter().map(|r| r[i]).collect::<Vec<f64>>();
    println!(
        "| {name} | {method} | {limit} s | {} | {} | {} | {} | {} | {} | {} % | {} |",
        spread(&col(0), 1e3, 1),
        spread(&col(1), 1e3, 1),
        spread(&col(2), 1e3, 4),
        spread(&col(3), 1e3, 4),
        spread(&col(4), 1e3, 4),
        spread(&col(5), 1e3, 4),
        spread(&col(6), 100.0, 3),
        spread(&col(7), 1.0 / (1u64 << 20) as f64, 0),
    );
}

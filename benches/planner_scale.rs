//! Planner time at GLM scale (78 layers x 256 experts, real GLM-5.2 heat,
//! 6 GPUs, 2 NUMA nodes, 2 drives) and Kimi scale (64 x 1280 = 81,920
//! experts, 8 GPUs, 2 NUMA nodes, 2 drives), each with identical cards and
//! with a seeded mixed fleet (`instances.rs`), the greedy baseline in the
//! same run. Each solve runs under a 2 s limit; the gap it reaches is
//! printed beside criterion's timings.
//!
//! `cargo bench --bench planner_scale`; results and the machine in
//! docs/planner-scale.md. `RESIDENCY_TIME_LIMIT=10` changes the solver's
//! limit; a filter such as `-- greedy` skips the long solve samples but still
//! prints each instance's plan, bound and gap.

#[path = "support/instances.rs"]
mod instances;

use criterion::{criterion_group, criterion_main, Criterion};
use instances::Mix;
use residency_core::cost::Instance;
use residency_solver::{greedy::greedy, solve, SolveOptions};
use std::time::Duration;

fn scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("planner_scale");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(25))
        .warm_up_time(Duration::from_secs(1));
    let six = instances::profile("dual-socket-6gpu");
    let h200 = instances::profile("h200-node");
    let mixed = |profile| instances::mixed_fleet(profile, Mix::Bandwidths { spread: 0.05 }, 1);
    let mut instances: Vec<(&str, Instance)> = Vec::new();
    if let Some(heat) = instances::glm_heat() {
        instances.push(("glm", instances::glm(&six, &heat)));
        instances.push(("glm-mixed", instances::glm(&mixed(&six), &heat)));
    }
    instances.push(("kimi", instances::kimi(&h200)));
    instances.push(("kimi-mixed", instances::kimi(&mixed(&h200))));
    for (name, inst) in &instances {
        let limit: f64 = std::env::var("RESIDENCY_TIME_LIMIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2.0);
        let options = SolveOptions {
            time_limit_seconds: limit,
            ..SolveOptions::default()
        };
        let once = solve(inst, options).unwrap();
        eprintln!(
            "{name}: {} objects; plan {:.4} ms (greedy {:.4} ms), bound {:.4} ms ({}), gap {:.3} %, {:.2} s under a {limit} s limit",
            inst.objects.len(),
            once.token_seconds * 1e3,
            once.greedy_token_seconds * 1e3,
            once.lower_bound_seconds * 1e3,
            once.bound_method,
            once.gap() * 100.0,
            once.solve_seconds
        );
        group.bench_function(format!("{name}/greedy"), |b| {
            b.iter(|| greedy(inst).unwrap())
        });
        group.bench_function(format!("{name}/evaluate"), |b| {
            b.iter(|| inst.evaluate(&once.placement).token_seconds)
        });
        group.bench_function(format!("{name}/solve_{limit}s"), |b| {
            b.iter(|| solve(inst, options).unwrap().token_seconds)
        });
    }
    group.finish();
}

criterion_group!(benches, scale);
criterion_main!(benches);

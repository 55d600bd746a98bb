//! Wall time, plan, bound and gap per benchmark instance and time limit:
//! the numbers of docs/planner-scale.md and docs/solver-quality.md.
//!
//! `cargo run --release --example solver_report [-- LIMIT...] [--gap G] [--only NAME]`
//! (limits in seconds, default 2; gap as a share, default 0.001; NAME
//! filters instances by substring).

#[path = "../benches/support/instances.rs"]
mod instances;

use instances::Mix;
use residency_core::cost::Instance;
use residency_solver::{solve, SolveOptions};
use std::time::Instant;

fn main() {
    let mut limits = Vec::new();
    let mut gap = residency_solver::DEFAULT_GAP;
    let mut only = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--gap" => gap = args.next().and_then(|g| g.parse().ok()).expect("--gap G"),
            "--only" => only = args.next().expect("--only NAME"),
            limit => limits.push(limit.parse::<f64>().expect("a time limit in seconds")),
        }
    }
    if limits.is_empty() {
        limits.push(2.0);
    }
    let two_card = instances::profile("threadripper-3945wx-rtx3070-quadro4000");
    let six = instances::profile("dual-socket-6gpu");
    let h200 = instances::profile("h200-node");
    let mut cases: Vec<(String, Box<dyn Fn() -> Instance>)> = Vec::new();
    cases.push((
        "default (embedded)".into(),
        Box::new(move || instances::default_model(&two_card)),
    ));
    let serial = instances::serial_io_box();
    cases.push((
        "default model, serial I/O, no GPU".into(),
        Box::new(move || instances::default_model(&serial)),
    ));
    if let Some(heat) = instances::glm_heat() {
        for (name, profile) in [
            ("GLM real heat, 6 identical GPUs".to_string(), six.clone()),
            (
                "GLM real heat, 6 mixed GPUs (seed 1)".into(),
                instances::mixed_fleet(&six, Mix::Bandwidths { spread: 0.05 }, 1),
            ),
            (
                "GLM real heat, 6 mixed GPUs + VRAM (seed 2)".into(),
                instances::mixed_fleet(&six, Mix::BandwidthsAndVram { spread: 0.05 }, 2),
            ),
        ] {
            let heat = heat.clone();
            cases.push((name, Box::new(move || instances::glm(&profile, &heat))));
        }
    }
    for (name, profile) in [
        ("Kimi scale, 8 identical GPUs".to_string(), h200.clone()),
        (
            "Kimi scale, 8 mixed GPUs (seed 1)".into(),
            instances::mixed_fleet(&h200, Mix::Bandwidths { spread: 0.05 }, 1),
        ),
        (
            "Kimi scale, 8 mixed GPUs + VRAM (seed 3)".into(),
            instances::mixed_fleet(&h200, Mix::BandwidthsAndVram { spread: 0.05 }, 3),
        ),
    ] {
        cases.push((name, Box::new(move || instances::kimi(&profile))));
    }
    println!("| instance | objects | limit | wall | plan ms | greedy ms | bound ms | gap |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, build) in &cases {
        if !name.contains(&only) {
            continue;
        }
        for &limit in &limits {
            let started = Instant::now();
            let inst = build();
            let options = SolveOptions {
                time_limit_seconds: limit - started.elapsed().as_secs_f64(),
                gap,
            };
            let solution = solve(&inst, options).unwrap();
            println!(
                "| {name} | {} | {limit} s | {:.2} s | {:.4} | {:.4} | {:.4} | {:.3} % |",
                inst.objects.len(),
                started.elapsed().as_secs_f64(),
                solution.token_seconds * 1e3,
                solution.greedy_token_seconds * 1e3,
                solution.lower_bound_seconds * 1e3,
                solution.gap() * 100.0
            );
        }
    }
}

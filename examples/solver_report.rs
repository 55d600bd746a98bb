//! Wall time, plan, bound and gap per benchmark instance and time limit:
//! the numbers of docs/planner-scale.md and docs/solver-quality.md.
//!
//! `cargo run --release --example solver_report [-- LIMIT...] [--gap G] [--only NAME] [--runs N]`
//! (limits in seconds, default 2; gap as a share, default 0.001; NAME
//! filters instances by substring; N runs per limit, default 1, shown as
//! median (range)). Beside the wall time, the thread's CPU time: on a
//! shared machine the wall time also holds the time other processes had
//! the core. `streamed` is the share of the experts the plan reads from
//! the drives.

#[path = "../benches/support/instances.rs"]
mod instances;
#[path = "../benches/support/report.rs"]
mod report;

use report::{spread, thread_cpu_seconds};

use instances::Mix;
use residency_core::cost::{Instance, Place};
use residency_solver::{solve, SolveOptions};
use std::time::Instant;

fn main() {
    let mut limits = Vec::new();
    let mut runs = 1;
    let mut gap = residency_solver::DEFAULT_GAP;
    let mut only = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--gap" => gap = args.next().and_then(|g| g.parse().ok()).expect("--gap G"),
            "--only" => only = args.next().expect("--only NAME"),
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
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
    for (ram_gib, share) in [(750, "~5 %"), (512, "~20 %"), (160, "~40 %")] {
        cases.push((
            format!("Kimi streaming {share} ({ram_gib} GiB/node), 8 mixed GPUs"),
            Box::new(move || instances::kimi_streaming(ram_gib)),
        ));
    }
    cases.push((
        "DeepSeek-V3, 2 mixed 48 GB cards, 2 nodes".into(),
        Box::new(instances::deepseek_v3_two_card),
    ));
    println!("| instance | objects | limit | wall s | CPU s | plan ms | greedy ms | bound ms | gap | streamed |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, build) in &cases {
        if !name.contains(&only) {
            continue;
        }
        for &limit in &limits {
            let mut rows: Vec<[f64; 7]> = Vec::new();
            let mut objects = 0;
            for _ in 0..runs {
                let (started, cpu) = (Instant::now(), thread_cpu_seconds());
                let inst = build();
                let options = SolveOptions {
                    time_limit_seconds: limit - started.elapsed().as_secs_f64(),
                    gap,
                };
                let solution = solve(&inst, options).unwrap();
                let (wall, cpu) = (started.elapsed().as_secs_f64(), thread_cpu_seconds() - cpu);
                let experts = inst.objects.iter().filter(|o| o.is_expert()).count();
                let streamed = (0..inst.objects.len())
                    .filter(|&o| inst.objects[o].is_expert())
                    .filter(|&o| matches!(inst.places[solution.placement[o]], Place::Disk(_)))
                    .count();
                objects = inst.objects.len();
                rows.push([
                    wall,
                    cpu,
                    solution.token_seconds,
                    solution.greedy_token_seconds,
                    solution.lower_bound_seconds,
                    solution.gap(),
                    streamed as f64 / experts.max(1) as f64,
                ]);
            }
            let col = |i: usize| rows.iter().map(|r| r[i]).collect::<Vec<f64>>();
            println!(
                "| {name} | {objects} | {limit} s | {} | {} | {} | {} | {} | {} % | {} % |",
                spread(&col(0), 1.0, 2),
                spread(&col(1), 1.0, 2),
                spread(&col(2), 1e3, 4),
                spread(&col(3), 1e3, 4),
                spread(&col(4), 1e3, 4),
                spread(&col(5), 100.0, 3),
                spread(&col(6), 100.0, 1),
            );
        }
    }
}

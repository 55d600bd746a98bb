//! The re-plan's bound with move costs (`move_bound::bound_with_moves`)
//! against exhaustive enumeration: on instances small enough to try every
//! placement, the least re-plan objective (token seconds plus a weight
//! times move seconds) over the feasible placements within the move budget
//! is found by the cost model alone, and the bound must not exceed it, at
//! the relaxation's prices and at others, for budgets from zero (where
//! only free moves, drops to the drive, remain) to unlimited.

mod common;

use common::{
    for_each_feasible, kv_groups, moe_with_attention_and_head, rates, reverse_expert_rates, Lcg,
};
use residency_core::cost::Instance;
use residency_core::diff::{carried_bytes, move_seconds};
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_solver::incremental::{self, IncrementalOptions, Warm};
use residency_solver::lagrange::{self, PriceSearch};
use residency_solver::move_bound::{bound_with_moves, MoveBoundInputs};
use residency_solver::SolveOptions;
use residency_testkit::OneFormatModel;
use std::path::Path;
use std::time::{Duration, Instant};

/// Two cards (distinct rates and syncs), one node (with a stage overhead
/// of up to 0.3 ms) and one drive, its reads felt by a random share: 4
/// places, so 4^8 placements.
fn profile(rng: &mut Lcg) -> String {
    let mb = |lo: f64, hi: f64, r: &mut Lcg| (lo + (hi - lo) * r.next()).round() as u64 * 1_000_000;
    let us = |r: &mut Lcg| (10f64.powf(3.0 * r.next())).round() as u64;
    format!(
        r#"
name: tiny-moves-box
numa:
  - {{ id: 0, ram: {ram}, reserved: 0, cores: 4, gemv_bandwidth: {cpu} GB/s, stage_overhead: {ov} us }}
gpus:
  - {{ id: 0, name: a, vram: {g0}, numa: 0, gemv_bandwidth: 300 GB/s, upload_bandwidth: 20 GB/s, sync_overhead: {s0} us }}
  - {{ id: 1, name: b, vram: {g1}, numa: 0, gemv_bandwidth: 180 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: {s1} us }}
drives:
  - {{ id: 0, name: d, numa: 0, read_bandwidth: {drive} GB/s, read_latency: 100 us }}
io_overlaps_compute: true
felt_fraction: {felt:.2}
"#,
        ram = mb(150.0, 450.0, rng),
        cpu = (10.0 + 30.0 * rng.next()).round(),
        ov = (300.0 * rng.next()).round(),
        g0 = mb(100.0, 400.0, rng),
        g1 = mb(100.0, 300.0, rng),
        s0 = us(rng),
        s1 = us(rng),
        drive = (1.0 + 6.0 * rng.next()).round(),
        felt = rng.next(),
    )
}

/// Every feasible placement of `inst`.
fn feasible_placements(inst: &Instance) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    for_each_feasible(inst, |p| all.push(p.to_vec()));
    all
}

/// Per feasible placement: token seconds, bytes carried from `current`
/// and move seconds.
fn priced_placements(
    inst: &Instance,
    current: &[usize],
    all: &[Vec<usize>],
) -> Vec<(f64, u64, f64)> {
    all.iter()
        .map(|p| {
            let carried = (0..p.len())
                .map(|o| carried_bytes(inst, o, current[o], p[o]))
                .sum();
            let moving = (0..p.len())
                .map(|o| move_seconds(inst, o, current[o], p[o]))
                .sum();
            (inst.evaluate(p).token_seconds, carried, moving)
        })
        .collect()
}

/// The least re-plan objective within `budget` bytes.
fn least(priced: &[(f64, u64, f64)], budget: u64, move_weight: f64) -> f64 {
    priced
        .iter()
        .filter(|p| p.1 <= budget)
        .map(|p| p.0 + move_weight * p.2)
        .fold(f64::INFINITY, f64::min)
}

const BUDGETS: [u64; 5] = [0, 100_000_000, 250_000_000, 500_000_000, u64::MAX];
const MOVE_WEIGHTS: [f64; 3] = [0.0, 2.0 / 512.0, 0.1];

/// Checks the bound at the relaxation's prices (with its stage bounds) and
/// at scaled prices (stage bounds not known there: none) against the least
/// objective for every budget and move weight; returns how many bounds
/// beat the relaxation's own.
fn check_case(inst: &Instance, current: &[usize], priced: &[(f64, u64, f64)], case: &str) -> usize {
    let relaxed = lagrange::bound_from(
        inst,
        PriceSearch {
            deadline: Instant::now() + Duration::from_secs(2),
            tolerance: 1e-9,
            good_enough: f64::INFINITY,
            warm_prices: None,
            starts: false,
        },
    );
    let none = vec![f64::NEG_INFINITY; inst.stages.len()];
    let mut tighter = 0;
    for budget in BUDGETS {
        for move_weight in MOVE_WEIGHTS {
            let best = least(priced, budget, move_weight);
            for scale in [1.0, 0.0, 0.5, 3.0] {
                let prices: Vec<f64> = (relaxed.prices_seconds_per_byte.iter())
                    .map(|p| p * scale)
                    .collect();
                let stage_bounds = if scale == 1.0 {
                    &relaxed.stage_bounds_seconds
                } else {
                    &none
                };
                let bound = bound_with_moves(
                    inst,
                    MoveBoundInputs {
                        current,
                        prices_seconds_per_byte: &prices,
                        stage_bounds_seconds: stage_bounds,
                        capacities_bytes: &relaxed.capacities_bytes,
                        move_budget_bytes: budget,
                        move_weight,
                        deadline: None,
                    },
                )
                .expect("an unconstrained placement in use");
                assert!(
                    bound <= best * (1.0 + 1e-9),
                    "{case} budget {budget} weight {move_weight} prices x{scale}: bound {bound} above the least objective {best}"
                );
                if scale == 1.0 && bound > relaxed.lower_bound_seconds * (1.0 + 1e-9) {
                    tighter += 1;
                }
            }
        }
    }
    tighter
}

/// From the cold plan of one heat to the heat reversed, and from random
/// feasible placements, on random boxes.
#[test]
fn bound_with_moves_is_at_most_the_least_objective_within_the_budget() {
    let model = moe_with_attention_and_head("tiny-moves", 2, 3, 2);
    let mut rng = Lcg(20261206);
    let (mut cases, mut tighter) = (0, 0);
    for case in 0..6 {
        let text = profile(&mut rng);
        let profile = HardwareProfile::from_yaml_str(&text, Path::new("box.yaml")).unwrap();
        let mut inst = Instance::new(&profile, &model, &rates(&mut rng, 2));
        let all = feasible_placements(&inst);
        if all.is_empty() {
            continue;
        }
        let options = SolveOptions {
            time_limit_seconds: 1.0,
            ..SolveOptions::default()
        };
        let cold = residency_solver::solve(&inst, options).unwrap();
        reverse_expert_rates(&mut inst);
        let mut starts = vec![cold.placement];
        for _ in 0..2 {
            starts.push(all[(rng.next() * all.len() as f64) as usize].clone());
        }
        for (i, current) in starts.iter().enumerate() {
            let priced = priced_placements(&inst, current, &all);
            tighter += check_case(&inst, current, &priced, &format!("case {case}.{i}\n{text}"));
            cases += 1;
        }
    }
    assert!(cases >= 12, "{cases} cases");
    // The bound must also be of use: above the relaxation's in some cases.
    assert!(tighter >= cases, "tighter {tighter} times in {cases} cases");
}

/// KV groups (moves to and from recompute carry nothing) beside the
/// experts, on one MoE layer.
#[test]
fn bound_with_moves_holds_with_kv_groups() {
    let text = OneFormatModel::new("tiny-kv", 1, "[0]")
        .experts(3, 2)
        .width(64)
        .expert_size("100 MB")
        .yaml("  - { name: lm_head, bytes: 200 MB, stage: head }\n");
    let model = Model::from_yaml_str(&text, Path::new("tiny-kv.yaml")).unwrap();
    let mut rng = Lcg(4_7);
    for case in 0..5 {
        let text = profile(&mut rng);
        let profile = HardwareProfile::from_yaml_str(&text, Path::new("box.yaml")).unwrap();
        let mut inst = Instance::new(&profile, &model, &rates(&mut rng, 1));
        let groups = kv_groups(&mut rng);
        inst.add_kv_groups(&groups);
        let all = feasible_placements(&inst);
        for _ in 0..3 {
            let Some(current) = all.get((rng.next() * all.len() as f64) as usize) else {
                break;
            };
            let priced = priced_placements(&inst, current, &all);
            check_case(&inst, current, &priced, &format!("kv case {case}\n{text}"));
        }
    }
}

/// `incremental::replan` reports the bound with move costs: at most the
/// least objective within its budget, and at least the relaxation's.
#[test]
fn replan_reports_the_bound_with_move_costs() {
    let model = moe_with_attention_and_head("tiny-moves", 2, 3, 2);
    let mut rng = Lcg(77);
    for case in 0..4 {
        let text = profile(&mut rng);
        let profile = HardwareProfile::from_yaml_str(&text, Path::new("box.yaml")).unwrap();
        let inst = Instance::new(&profile, &model, &rates(&mut rng, 2));
        let all = feasible_placements(&inst);
        let Some(current) = all.get((rng.next() * all.len() as f64) as usize) else {
            continue;
        };
        let priced = priced_placements(&inst, current, &all);
        for budget in BUDGETS {
            let options = IncrementalOptions {
                time_limit_seconds: 1.0,
                gap: 0.0,
                move_budget_bytes: budget,
                horizon_tokens: 512.0,
                hysteresis: 2.0,
            };
            let warm = Warm {
                placement: current.clone(),
                prices_seconds_per_byte: Vec::new(),
            };
            let got = incremental::replan(&inst, &warm, options).unwrap();
            let best = least(&priced, budget, 2.0 / 512.0);
            assert!(
                got.lower_bound_seconds <= best * (1.0 + 1e-9),
                "case {case} budget {budget}: {} above {best}\n{text}",
                got.lower_bound_seconds
            );
            assert!(
                got.lower_bound_seconds >= got.token_lower_bound_seconds.min(got.objective_seconds),
                "case {case}"
            );
        }
    }
}

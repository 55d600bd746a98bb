//! design §4, "What the model must show", on Colibri's published two-card box
//! (Threadripper 3945WX, RTX 3070 + Quadro RTX 4000) running Qwen3.6-35B-A3B:
//! the plan finds from the profile alone whether to keep each experts stage
//! on one card (paying one sync overhead) with lone trunk pieces such as
//! lm_head on the other card, or to spread experts over both.
//!
//! No routing heat of Qwen3.6 is published, so the heat here is a Zipf law
//! (exponent 1.2, a fixed shuffle per layer): skewed like Colibri's warm
//! heat, where 83 % of the experts take nearly every selection.

mod common;

use common::solve_feasible;

use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::model::{Model, StageKind};
use residency_core::profile::HardwareProfile;
use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn zipf_rates(model: &Model) -> Vec<Vec<f64>> {
    let mut seed = 12345u64;
    model
        .moe
        .iter()
        .map(|m| {
            let mut w: Vec<f64> = (0..m.experts)
                .map(|i| ((i + 1) as f64).powf(-1.2))
                .collect();
            for i in (1..w.len()).rev() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                w.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let sum: f64 = w.iter().sum();
            w.iter().map(|x| model.top_k() as f64 * x / sum).collect()
        })
        .collect()
}

struct Outcome {
    spread_stages: usize,
    one_card_stages: usize,
    lm_head: Place,
    lm_head_card_experts: usize,
    token_seconds: f64,
    greedy_token_seconds: f64,
}

/// Plans the box with the given per-stage sync overheads (us) of the two cards.
fn plan(sync_us: [f64; 2]) -> Outcome {
    let profile_path =
        Path::new(ROOT).join("../../profiles/hardware/threadripper-3945wx-rtx3070-quadro4000.yaml");
    let mut profile = HardwareProfile::from_yaml_file(&profile_path).unwrap();
    for (gpu, us) in profile.gpus.iter_mut().zip(sync_us) {
        gpu.sync_overhead.0 = us * 1e-6;
    }
    let model =
        Model::from_yaml_file(&Path::new(ROOT).join("../../profiles/models/qwen3.6-35b-a3b.yaml"))
            .unwrap();
    let inst = Instance::new(&profile, &model, &zipf_rates(&model));
    let solution = solve_feasible(&inst, 10.0);
    let place = |o: usize| inst.places[solution.placement[o]];
    let (mut spread_stages, mut one_card_stages) = (0, 0);
    for stage in inst.stages.iter().filter(|s| s.kind == StageKind::Experts) {
        let cards: BTreeSet<usize> = stage
            .objects
            .iter()
            .filter(|&&o| inst.objects[o].is_expert())
            .filter_map(|&o| match place(o) {
                Place::Gpu(g) => Some(g),
                _ => None,
            })
            .collect();
        match cards.len() {
            2 => spread_stages += 1,
            1 => one_card_stages += 1,
            _ => {}
        }
    }
    let lm_head = inst
        .trunk_ids
        .iter()
        .copied()
        .find(|&o| matches!(&inst.objects[o].kind, ObjectKind::Trunk { name, .. } if name == "lm_head"))
        .unwrap();
    let lm_head_card_experts = inst
        .expert_ids
        .iter()
        .flatten()
        .filter(|&&o| place(o) == place(lm_head))
        .count();
    eprintln!(
        "sync {sync_us:?} us: plan {:.3} ms/token, greedy (spread both) {:.3} ms/token, gap {:.3} %; experts stages on two cards {spread_stages}, on one card {one_card_stages}",
        solution.token_seconds * 1e3,
        solution.greedy_token_seconds * 1e3,
        solution.gap() * 100.0,
    );
    Outcome {
        spread_stages,
        one_card_stages,
        lm_head: place(lm_head),
        lm_head_card_experts,
        token_seconds: solution.token_seconds,
        greedy_token_seconds: solution.greedy_token_seconds,
    }
}

#[test]
fn small_equal_overheads_spread_experts_over_both_cards() {
    // The profile's 34 us on both cards: splitting a stage's experts halves
    // its GPU work and pays the overhead on both cards at once.
    let o = plan([34.0, 34.0]);
    assert!(
        o.spread_stages >= 36,
        "{} of 40 experts stages spread",
        o.spread_stages
    );
    assert!(o.token_seconds <= o.greedy_token_seconds);
}

#[test]
fn a_costly_second_card_keeps_experts_on_one_card_and_takes_lm_head() {
    // If the Quadro (PCIe 3.0) paid 200 us per stage, every experts stage it
    // joined would wait for it: experts stay on the RTX 3070, and lm_head,
    // alone in its stage, moves to the Quadro to leave room for experts.
    let o = plan([34.0, 200.0]);
    assert!(
        o.one_card_stages >= 36,
        "{} of 40 experts stages on one card",
        o.one_card_stages
    );
    assert_eq!(o.lm_head, Place::Gpu(1));
    assert_eq!(
        o.lm_head_card_experts, 0,
        "the lm_head card holds no experts"
    );
    // Colibri's greedy fill spreads both and is much slower here.
    assert!(
        o.token_seconds * 1.2 < o.greedy_token_seconds,
        "plan {} vs spread-both greedy {}",
        o.token_seconds,
        o.greedy_token_seconds
    );
}

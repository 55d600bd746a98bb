//! The bound with move costs worked by hand on one MoE layer of two
//! experts, one card, one node and one drive.

use super::{bound_with_moves, MoveBoundInputs};
use crate::test_box::one_card_box;
use residency_core::cost::{Instance, Place};
use residency_core::model::Model;
use residency_testkit::OneFormatModel;
use std::path::Path;

/// Two experts of 100 MB (top-1), nothing else: the hot one (0.8 uses a
/// token) in RAM, the cold one (0.2) on the card; no GEMV or stage
/// overheads, no fixed seconds, reads not felt, so each row is its work.
fn two_experts() -> (Instance, Vec<usize>) {
    let text = OneFormatModel::new("two", 1, "[0]")
        .experts(2, 1)
        .width(64)
        .expert_size("100 MB")
        .yaml("  []\n");
    let model = Model::from_yaml_str(&text, Path::new("two.yaml")).unwrap();
    let profile = one_card_box(("4 GiB", "0 GiB"), ("4 GiB", "0 GiB"), None);
    let mut inst = Instance::new(&profile, &model, &[vec![0.8, 0.2]]);
    let r = &mut inst.resources;
    r.gpu_gemv_seconds = vec![0.0];
    r.cpu_stage_seconds = vec![0.0];
    r.fixed_token_seconds = 0.0;
    r.felt_fraction = 0.0;
    let at = |place: Place| inst.place_index(place);
    let ids = &inst.expert_ids[0];
    let mut current = vec![0; inst.objects.len()];
    current[ids[0]] = at(Place::Ram(0));
    current[ids[1]] = at(Place::Gpu(0));
    (inst, current)
}

fn bound(inst: &Instance, current: &[usize], budget_bytes: u64) -> f64 {
    bound_with_moves(
        inst,
        MoveBoundInputs {
            current,
            // At zero prices the relaxation's share of them changes nothing.
            prices_seconds_per_byte: &[0.0, 0.0],
            stage_bounds_seconds: &vec![f64::NEG_INFINITY; inst.stages.len()],
            capacities_bytes: &[4e9, 4e9],
            move_budget_bytes: budget_bytes,
            move_weight: 2.0 / 512.0,
            deadline: None,
        },
    )
    .unwrap()
}

#[test]
fn hand_worked_two_experts() {
    let (inst, current) = two_experts();
    // Rows now: the card 0.2 x 100 MB / 300 GB/s = 66.667 us plus its 30
    // us sync = 96.667 us; the node 0.8 x 100 MB / 40 GB/s = 2000 us; the
    // drive nothing. Staying costs 2000 us a token.
    let stay = inst.evaluate(&current).token_seconds;
    assert!((stay - 2000e-6).abs() < 1e-12, "{stay}");
    // Budget 0: the only free move, to the drive, puts the same 2000 us of
    // GEMV on the node's cores (the drive is on its node), so on the
    // node's row alone nothing is saved: the bound is staying's 2000 us.
    let none = bound(&inst, &current, 0);
    assert!((none - 2000e-6).abs() <= 1e-9 * stay, "{none}");
    // Budget 100 MB, one expert's move. Carrying the hot expert to the
    // card takes 100 MB / 20 GB/s = 5 ms, 5 ms x 2 / 512 = 19.531 us in
    // the objective. Rows half the node's, half the card's: now 0.5 x
    // (2000 + 96.667) = 1048.333 us; the hot expert leaving the node saves
    // 0.5 x 2000 and adds 0.5 x 0.8 x 333.333 = 133.333 on the card, less
    // its move, 847.135 us for its 100 MB; the cold one saves nothing
    // anywhere (0.5 x (66.667 + 30) on the card against 0.5 x 500 on the
    // node). With the budget's price at most 847.135 us per 100 MB the
    // bound is 1048.333 - 847.135 = 201.198 us = 0.5 x 96.667 + 133.333 +
    // 19.531; the busiest row alone (19.531 us: the move can take all of
    // the node's work) and all three rows (140.6 us) bound less.
    let one = bound(&inst, &current, 100_000_000);
    let expected = 0.5 * (66.6667e-6 + 30e-6) + 133.3333e-6 + 5e-3 * 2.0 / 512.0;
    assert!((one - expected).abs() < 1e-9, "{one} vs {expected}");
    // The least objective within 100 MB is the hot expert on the card:
    // (0.8 + 0.2) x 333.333 + 30 = 363.333 us plus its 19.531.
    assert!(one <= 363.3333e-6 + 19.5313e-6);
}

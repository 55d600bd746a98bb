//! The planner sees a CPU node's stage overhead (design §4.2): where the
//! CPU's share of a stage is cheaper than the card's time it saves, the
//! plan splits the experts; where taking part costs the node more than the
//! whole stage on the card, it keeps the CPU out. The H200 runs of
//! `residency bench` (docs/prediction.md) measured the second case: three
//! experts a layer left in RAM made the plan slower than everything on the
//! card.

mod common;

use common::solve_feasible;
use residency_core::cost::{Instance, Place};
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_testkit::OneFormatModel;
use std::path::Path;

fn instance(stage_overhead: &str) -> Instance {
    let profile = format!(
        r#"
name: box
numa:
  - {{ id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 50 GB/s, stage_overhead: {stage_overhead} }}
gpus:
  - {{ id: 0, name: g, vram: 1 GB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 10 us }}
"#
    );
    let profile = HardwareProfile::from_yaml_str(&profile, Path::new("box.yaml")).unwrap();
    // One MoE layer of 4 experts of 1 MB, top-2 (use rate 0.5 each), and a
    // 1 MB attention in its dense stage.
    let model = OneFormatModel::new("one-layer", 1, "[0]")
        .yaml("  - { name: attn, layers: [0], bytes: 1 MB, stage: dense }\n");
    let model = Model::from_yaml_str(&model, Path::new("one-layer.yaml")).unwrap();
    Instance::new(&profile, &model, &[vec![0.5; 4]])
}

fn in_ram(inst: &Instance, placement: &[usize]) -> usize {
    placement
        .iter()
        .filter(|&&q| matches!(inst.places[q], Place::Ram(_)))
        .count()
}

#[test]
fn the_plan_keeps_the_cpu_out_of_a_stage_it_cannot_pay_for() {
    // No overhead: k experts in RAM give the experts stage
    // max((4 - k) x 0.5 x 1e6 / 1e11 + 10 us, k x 0.5 x 1e6 / 5e10)
    // = max(30 - 5k, 10k) us: 30, 25, 20, 30, 40 for k = 0..4, so two in
    // RAM (20 us). The attention is 20 us on the card (10 + sync) or in
    // RAM: 40 us a token.
    let inst = instance("0 s");
    let plan = solve_feasible(&inst, 2.0);
    let ev = inst.evaluate(&plan.placement);
    assert!(
        (ev.token_seconds - 40e-6).abs() < 1e-12,
        "{}",
        ev.token_seconds
    );
    let experts = inst
        .stages
        .iter()
        .position(|s| s.name.ends_with("experts"))
        .unwrap();
    assert!((ev.stage_seconds[experts] - 20e-6).abs() < 1e-12);

    // 200 us a stage in which the node computes: any CPU share costs more
    // than the stage on the card (30 us), so nothing is in RAM and a token
    // is 20 + 30 us.
    let inst = instance("200 us");
    let plan = solve_feasible(&inst, 2.0);
    let ev = inst.evaluate(&plan.placement);
    assert_eq!(in_ram(&inst, &plan.placement), 0);
    assert!(
        (ev.token_seconds - 50e-6).abs() < 1e-12,
        "{}",
        ev.token_seconds
    );
    // The relaxation leaves the experts' overheads out: its bound stays
    // below the plan's time.
    assert!(plan.lower_bound_seconds <= ev.token_seconds + 1e-15);
    assert!(plan.lower_bound_seconds > 0.0);
}

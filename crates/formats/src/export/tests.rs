//! The export module's tests, and the instance, plans and helpers the
//! engines' tests share. Expected values are worked out by hand in the
//! comments.

use super::*;
use residency_core::model::Model;
use residency_core::plan::{HeatRef, InputRef, PlanInputs};
use residency_core::profile::HardwareProfile;
use residency_core::solution::Solution;
use residency_testkit::OneFormatModel;

pub(super) const PROFILE: &str = r#"
name: two-cards
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s }
gpus:
  - { id: 0, name: a, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }
  - { id: 1, name: b, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;

/// Four layers, MoE layers 1..=3 of 4 experts (1 MB, top-2); a trunk of
/// attention, a dense FFN, a shared expert, a head and a router bias.
pub(super) fn model_yaml() -> String {
    OneFormatModel::new("tiny", 4, "[1, 2, 3]").yaml(
        r#"  - { name: attn, layers: "0..=3", bytes: 2 MB, stage: dense }
  - { name: dense_ffn, layers: [0], bytes: 3 MB, stage: dense }
  - { name: shared_expert, layers: "1..=3", bytes: 1 MB, stage: experts }
  - { name: lm_head, bytes: 4 MB, stage: head }
  - { name: router_bias, bytes: 1 MB, stage: head }
"#,
    )
}

/// Asserts that `text` (a command, a file, the warnings) says `part`,
/// showing all of it where it does not.
pub(super) fn assert_mentions(text: &str, part: &str) {
    assert!(text.contains(part), "{text}");
}

/// Places: 0 = gpu:0, 1 = gpu:1, 2 = ram:0, 3 = disk:0.
pub(super) const G0: usize = 0;
pub(super) const G1: usize = 1;
pub(super) const RAM: usize = 2;
pub(super) const DISK: usize = 3;

/// Use rates `p[l][e]`; MoE ordinals 0, 1, 2 are transformer layers 1, 2, 3.
/// Each layer sums to 2.0 (top_k), 6.0 in all.
pub(super) const RATES: [[f64; 4]; 3] = [
    [0.9, 0.5, 0.4, 0.2],
    [0.8, 0.6, 0.3, 0.3],
    [0.7, 0.1, 0.6, 0.6],
];

pub(super) fn instance() -> Instance {
    let inst = instance_on(PROFILE);
    assert_eq!(inst.resources.gpu_capacity_bytes, vec![10_000_000; 2]);
    inst
}

/// The tiny model and its rates on another profile (YAML).
pub(super) fn instance_on(profile: &str) -> Instance {
    let profile = HardwareProfile::from_yaml_str(profile, Path::new("p")).unwrap();
    let model = Model::from_yaml_str(&model_yaml(), Path::new("m")).unwrap();
    let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
    Instance::new(&profile, &model, &rates)
}

/// Objects: experts `4 * l + e` (0..=11), then attn L0..L3 (12..=15),
/// dense_ffn L0 (16), shared_expert L1..L3 (17..=19), lm_head (20),
/// router_bias (21).
pub(super) fn placement(experts: [[usize; 4]; 3], attn: [usize; 4], lm_head: usize) -> Vec<usize> {
    let mut p: Vec<usize> = experts.iter().flatten().copied().collect();
    p.extend(attn);
    p.extend([RAM, RAM, RAM, RAM, lm_head, RAM]);
    p
}

pub(super) fn plan_of(inst: &Instance, placement: Vec<usize>) -> Plan {
    inst.check_feasible(&placement).unwrap();
    let t = inst.evaluate(&placement).token_seconds;
    let solution = Solution {
        placement: placement.clone(),
        token_seconds: t,
        lower_bound_seconds: t,
        bound_method: "by hand",
        greedy_placement: placement,
        greedy_token_seconds: t,
        method: "by hand".into(),
        solve_seconds: 0.0,
        proven_optimal: true,
    };
    let input = |name: &str| InputRef {
        name: name.into(),
        sha256: String::new(),
    };
    let inputs = PlanInputs {
        profile: input("two-cards"),
        model: input("tiny"),
        heat: HeatRef {
            source: "by hand".into(),
            format: "json".into(),
            sha256: String::new(),
            tokens: None,
        },
        kv: None,
        context_tokens: None,
        constraints: None,
    };
    Plan::new(inst, &solution, inputs, 1.0)
}

/// Scenario A: experts on gpu:0 only (one disk expert), attn L0-L1 on
/// gpu:0, lm_head on gpu:1, the rest in RAM. gpu:0 holds 5 x 1 MB +
/// 2 x 2 MB = 9 MB of its 10 MB; gpu:1 4 MB.
pub(super) fn scenario_a() -> Vec<usize> {
    placement(
        [[G0, G0, RAM, RAM], [G0, RAM, RAM, RAM], [G0, DISK, G0, RAM]],
        [G0, G0, RAM, RAM],
        G1,
    )
}

/// Scenario B: experts on both cards, two of them off their Colibri
/// home (e % 2): l1e0 on gpu:1 (home 0), l1e1 on gpu:0 (home 1).
pub(super) fn scenario_b(lm_head: usize) -> Vec<usize> {
    placement(
        [[G0, G1, RAM, RAM], [G1, G0, RAM, RAM], [G0, RAM, RAM, RAM]],
        [RAM; 4],
        lm_head,
    )
}

/// Experts of MoE ordinal `l` rank by rank, from a physical-to-logical row.
pub(super) fn ranks_of(row: &[usize], slots: usize) -> Vec<Vec<usize>> {
    row.chunks(slots).map(<[usize]>::to_vec).collect()
}

#[test]
fn export_engine_names_round_trip() {
    for e in Engine::ALL {
        assert_eq!(Engine::from_name(e.name()), Some(e));
    }
    assert_eq!(Engine::from_name("tgi"), None);
}

//! Tests of the `sglang` export (and of the expert slots it shares with
//! vLLM).

use super::*;
use crate::export::tests::{
    assert_mentions, instance, model_yaml, plan_of, ranks_of, scenario_b, G1, PROFILE, RATES,
};
use residency_core::cost::Place;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;

#[test]
fn export_sglang_maps_each_card_to_its_planned_experts() {
    let inst = instance();
    // Scenario B: l0 gpu:0 {0}, gpu:1 {1}; l1 gpu:1 {0}, gpu:0 {1};
    // l2 gpu:0 {0}. Off the GPUs, hottest first, to the emptier rank
    // (rank 0 on ties): l0 e2 (.4) -> 0, e3 (.2) -> 1; l1 e2 (.3) -> 0,
    // e3 (.3) -> 1; l2 e2 (.6) -> 1, e3 (.6) -> 0 (tie 1:1), e1 (.1) -> 1.
    // Two slots per rank, no replicas.
    let plan = plan_of(&inst, scenario_b(G1));
    let dir = tempfile::tempdir().unwrap();
    let out = sglang(&plan, &inst, dir.path()).unwrap();
    let path = dir.path().join(SGLANG_FILE);
    assert_eq!(
        out.files,
        vec![path.clone(), dir.path().join(SGLANG_ARGS_FILE)]
    );
    let file: SglangExpertLocation =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // One row per transformer layer; dense layer 0 is the trivial map.
    assert_eq!(
        file.physical_to_logical_map,
        vec![
            vec![0, 1, 2, 3],
            vec![0, 2, 1, 3],
            vec![1, 2, 0, 3],
            vec![0, 3, 2, 1],
        ]
    );
    // Round trip: every expert the plan puts on gpu:g is in rank g's slots.
    for (l, layer) in [1, 2, 3].into_iter().enumerate() {
        let ranks = ranks_of(&file.physical_to_logical_map[layer], 2);
        for (e, &q) in plan.experts[l].iter().enumerate() {
            if let Place::Gpu(g) = inst.places[q] {
                assert!(ranks[g].contains(&e), "L{layer} e{e} gpu:{g}");
            }
        }
    }
    let args = std::fs::read_to_string(dir.path().join(SGLANG_ARGS_FILE)).unwrap();
    assert_eq!(
        args,
        format!(
            "--ep-size 2 --ep-num-redundant-experts 0 --init-expert-location {}\n",
            path.display()
        )
    );
    // Moved: 7 experts, mass .4 + .2 + .3 + .3 + .6 + .6 + .1 = 2.5.
    let all = out.warnings.join("\n");
    assert_mentions(&all, "SGLang keeps every expert on a GPU: the 7 experts the plan leaves in RAM or on disk (use-rate mass 2.500 per token)");
    assert_mentions(&all, "trunk placement is not expressed");
    assert_eq!(out.warnings.len(), 2, "{all}");
}

#[test]
fn export_expert_parallel_needs_a_gpu() {
    let profile = PROFILE.replace("gpus:", "gpus: []\nunused:");
    let profile = profile
        .lines()
        .filter(|l| !l.contains("name: a,") && !l.contains("name: b,") && !l.starts_with("unused"))
        .collect::<Vec<_>>()
        .join("\n");
    let profile = HardwareProfile::from_yaml_str(&profile, Path::new("p")).unwrap();
    let model = Model::from_yaml_str(&model_yaml(), Path::new("m")).unwrap();
    let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
    let inst = Instance::new(&profile, &model, &rates);
    // Places: ram:0 (0), disk:0 (1); everything in RAM.
    let plan = plan_of(&inst, vec![0; inst.objects.len()]);
    let dir = tempfile::tempdir().unwrap();
    let err = sglang(&plan, &inst, dir.path()).unwrap_err().to_string();
    assert_mentions(&err, "exports need at least one GPU");
}

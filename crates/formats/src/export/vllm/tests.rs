//! Tests of the `vllm` export: ranks by host, replicas, the map read back.

use super::*;
use crate::export::tests::{assert_mentions, model_yaml, plan_of, ranks_of, RATES};
use residency_core::cost::Place;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;

#[test]
fn export_vllm_groups_ranks_by_host_and_pads_with_replicas() {
    // Three cards: gpu:0 and gpu:2 on host b, gpu:1 on host a. Ranks go
    // host by host in order of first GPU: b (gpu:0, gpu:2), then a (gpu:1).
    let profile = r#"
name: two-hosts
hosts:
  - { name: a, network_bandwidth: 10 GB/s, network_latency: 10 us }
  - { name: b, network_bandwidth: 10 GB/s, network_latency: 10 us }
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s, host: b }
  - { id: 1, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s, host: a }
gpus:
  - { id: 0, name: a, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: b }
  - { id: 1, name: b, vram: 10 MB, numa: 1, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: a }
  - { id: 2, name: c, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: b }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;
    let profile = HardwareProfile::from_yaml_str(profile, Path::new("p")).unwrap();
    let model = Model::from_yaml_str(&model_yaml(), Path::new("m")).unwrap();
    let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
    let inst = Instance::new(&profile, &model, &rates);
    // Places: gpu:0, gpu:1, gpu:2, ram:0, ram:1, disk:0.
    let (g0, g1, g2, ram) = (0, 1, 2, 3);
    assert_eq!(inst.places[ram], Place::Ram(0));
    let mut p: Vec<usize> = [[g0, g0, g0, ram], [g1, g2, ram, ram], [ram; 4]]
        .iter()
        .flatten()
        .copied()
        .collect();
    p.extend([ram; 10]);
    let plan = plan_of(&inst, p);
    let dir = tempfile::tempdir().unwrap();
    let out = vllm(&plan, &inst, dir.path()).unwrap();
    let file: VllmPlacement =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(VLLM_FILE)).unwrap())
            .unwrap();
    // By hand (ranks 0 = gpu:0, 1 = gpu:2, 2 = gpu:1):
    // l0: r0 {0,1,2}; e3 -> r1. l1: r1 {1}, r2 {0}; e2 -> r0, e3 -> r0
    // (tie). l2: e0 -> r0, e2 -> r1, e3 -> r2, e1 -> r0. Slots: 3 (l0 r0);
    // replicas fill each rank with the hottest experts it lacks:
    // l0 hottest 0,1,2,3: r1 [3] + [0,1], r2 [] + [0,1,2];
    // l1 hottest 0,1,2,3: r0 [2,3] + [0], r1 [1] + [0,2], r2 [0] + [1,2];
    // l2 hottest 0,2,3,1: r0 [0,1] + [2], r1 [2] + [0,3], r2 [3] + [0,2].
    assert_eq!(file.moe_layers, vec![1, 2, 3]);
    assert_eq!(file.num_redundant_experts, 9 - 4);
    assert_eq!(
        file.physical_to_logical_map,
        vec![
            vec![0, 1, 2, 3, 0, 1, 0, 1, 2],
            vec![2, 3, 0, 1, 0, 2, 0, 1, 2],
            vec![0, 1, 2, 2, 0, 3, 3, 0, 2],
        ]
    );
    let who: Vec<(usize, Option<&str>, usize)> = file
        .ranks
        .iter()
        .map(|r| (r.rank, r.host.as_deref(), r.gpu))
        .collect();
    assert_eq!(
        who,
        [(0, Some("b"), 0), (1, Some("b"), 2), (2, Some("a"), 1)]
    );
    // Round trip: rank lists agree with the map, and hold the plan's
    // GPU experts of their card.
    for rank in &file.ranks {
        for (l, experts) in rank.experts.iter().enumerate() {
            assert_eq!(
                experts,
                &ranks_of(&file.physical_to_logical_map[l], 3)[rank.rank]
            );
            for (e, &q) in plan.experts[l].iter().enumerate() {
                if inst.places[q] == Place::Gpu(rank.gpu) {
                    assert!(experts.contains(&e), "l{l} e{e} rank {}", rank.rank);
                }
            }
        }
    }
    let args = std::fs::read_to_string(dir.path().join(VLLM_ARGS_FILE)).unwrap();
    let eplb = r#"--enable-expert-parallel --data-parallel-size 3 --enable-eplb --eplb-config '{"num_redundant_experts":5}'"#;
    assert_eq!(
        args,
        format!("# host b: {eplb} --data-parallel-size-local 2 --data-parallel-start-rank 0\n# host a: {eplb} --data-parallel-size-local 1 --data-parallel-start-rank 2\n")
    );
    let all = out.warnings.join("\n");
    assert_mentions(&all, "vLLM keeps every expert on a GPU: the 7 experts");
    assert_mentions(&all, "no option to load an expert map");
    assert_eq!(out.warnings.len(), 3, "{all}");
}

//! The llama.cpp strategies priced beside a plan, on a box worked by hand:
//! one 50 MB card, four MoE layers of two 10 MB experts, 5 MB of attention
//! a layer and a 4 MB head. The trunk takes 4 x 5 + 4 = 24 MB of the card,
//! leaving 26 MB: one layer's experts (20 MB) fit beside it, two do not.

use residency_core::cost::{Instance, Place};
use residency_core::heat::HeatTable;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_formats::export::baselines::{llama_cpp_strategies, LlamaCppStrategy};
use std::path::Path;

// The box's model in YAML's flow style: four MoE layers of two 10 MB
// experts, attention of 5 MB a layer, a 4 MB head.
const MODEL: &str = r#"{ name: four-layers, layers: 4, moe_layers: "0..=3", experts: 2, top_k: 1,
  hidden: 8, expert_intermediate: 8, formats: { q: 10 MB }, tiers: { gpu: q, ram: q, disk: q },
  trunk: [ { name: attn, layers: "0..=3", bytes: 5 MB, stage: dense },
           { name: lm_head, bytes: 4 MB, stage: head } ] }"#;

const CARD: &str = r#"
name: one-card
numa:
  - id: 0
    ram: 1 GiB
    reserved: 0 B
    staging: 0 B
    cores: 8
    gemv_bandwidth: 40 GB/s
gpus:
  - id: 0
    name: card
    vram: 50 MB
    reserved: 0 B
    numa: 0
    gemv_bandwidth: 400 GB/s
    upload_bandwidth: 20 GB/s
    sync_overhead: 10 us
drives:
  - id: 0
    name: nvme
    numa: 0
    read_bandwidth: 5 GB/s
    read_latency: 80 us
io_overlaps_compute: true
felt_fraction: 0.0
fixed_token_seconds: 0 s
"#;

#[test]
fn n_cpu_moe_exps_on_cpu_and_fit_place_whole_layers() {
    let profile = HardwareProfile::from_yaml_str(CARD, Path::new("card.yaml")).unwrap();
    let model = Model::from_yaml_str(MODEL, Path::new("model.yaml")).unwrap();
    let rates = HeatTable::uniform(&model)
        .use_rates(&model, Path::new("model.yaml"), &mut Vec::new())
        .unwrap();
    let inst = Instance::new(&profile, &model, &rates);
    assert_eq!(inst.resources.gpu_capacity_bytes, vec![50_000_000]);
    let strategies = llama_cpp_strategies(&inst).unwrap();
    let flags: Vec<&str> = strategies.iter().map(|s| s.flags.as_str()).collect();
    // --n-cpu-moe 3: layers 0-2's experts on the CPU, layer 3's (20 MB) on
    // the card beside the trunk (44 MB <= 50); --n-cpu-moe 2 would need 64.
    assert_eq!(
        flags,
        [
            "-ngl 999 --n-cpu-moe 3",
            "-ngl 999 -ot exps=CPU",
            "fit: trunk, then whole layers in order (like --fit)"
        ]
    );
    // Each says which it is, so that a caller picks one without its flags.
    let kinds: Vec<LlamaCppStrategy> = strategies.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, LlamaCppStrategy::ALL);
    let on_card = |placement: &[usize]| -> Vec<usize> {
        (0..4)
            .filter(|&m| {
                inst.expert_ids[m]
                    .iter()
                    .all(|&o| inst.places[placement[o]] == Place::Gpu(0))
            })
            .collect()
    };
    assert_eq!(on_card(&strategies[0].placement), vec![3]);
    assert_eq!(on_card(&strategies[1].placement), Vec::<usize>::new());
    // fit fills from layer 0: its experts fit (44 MB), layer 1's do not.
    assert_eq!(on_card(&strategies[2].placement), vec![0]);
    for s in &strategies {
        // The trunk is on the card in each, the other experts in RAM.
        for &o in &inst.trunk_ids {
            assert_eq!(inst.places[s.placement[o]], Place::Gpu(0), "{}", s.flags);
        }
        inst.check_feasible(&s.placement).unwrap();
    }
}

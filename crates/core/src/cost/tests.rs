//! Hand-computed cases of the reference cost model. Each expected number is
//! worked out in the comment above it from the formulas of design §4.

use super::*;
use crate::kv::KvGroup;
use crate::model::Model;
use crate::profile::HardwareProfile;
use crate::units::{Bytes, Seconds};
use residency_testkit::OneFormatModel;
use std::path::Path;

const PROFILE: &str = r#"
name: tiny
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s }
gpus:
  - { id: 0, name: g, vram: 1 GB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;

/// Two layers, MoE layer 1 of 4 experts (1 MB, top-2), attention on both
/// and a head.
fn model() -> Model {
    let yaml = OneFormatModel::new("tiny", 2, "[1]").yaml(
        "  - { name: attn, layers: [0, 1], bytes: 2 MB, stage: dense }
  - { name: lm_head, bytes: 4 MB, stage: head }
",
    );
    Model::from_yaml_str(&yaml, Path::new("m")).unwrap()
}

fn instance(extra_profile: &str, rates: [f64; 4]) -> Instance {
    let profile =
        HardwareProfile::from_yaml_str(&format!("{PROFILE}{extra_profile}"), Path::new("p"))
            .unwrap();
    let model = model();
    Instance::new(&profile, &model, &[rates.to_vec()])
}

/// Places: 0 = gpu:0, 1 = ram:0, 2 = disk:0. Objects: experts 0..3, then
/// attn L0, attn L1, lm_head.
const GPU: usize = 0;
const RAM: usize = 1;
const DISK: usize = 2;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
}

#[test]
fn stages_and_places_follow_the_design() {
    let inst = instance("", [1.0, 0.5, 0.3, 0.2]);
    let names: Vec<&str> = inst.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["L0.dense", "L1.dense", "L1.experts", "head"]);
    assert_eq!(
        inst.places,
        vec![Place::Gpu(0), Place::Ram(0), Place::Disk(0)]
    );
}

#[test]
fn a_token_priced_on_its_own_routes_pays_the_max_of_its_own_loads() {
    // Experts 0 on the GPU, 1 in RAM, 2 and 3 on the disk; every expert at
    // rate 0.5, as two tokens routing {0, 1} and {2, 3} make it. Stages
    // other than L1.experts as in the case below: 1.2e-4 + 2e-4 + 1.4e-4
    // = 4.6e-4.
    let inst = instance("", [0.5; 4]);
    let placement = [GPU, RAM, DISK, DISK, GPU, RAM, GPU];
    // Token {0, 1}: G = 1e6/1e11 + sync 1e-4 = 1.1e-4, C = 1e6/1e10 =
    // 1e-4, D = 0: 1.1e-4, so 5.7e-4 in all.
    let first = inst.routed_token_seconds(&placement, &[vec![], vec![], vec![0, 1], vec![]]);
    assert!(close(first, 5.7e-4), "{first}");
    // Token {2, 3}: no GPU work, so no sync; C = 2 x 1e-4; D = 2 x (1e-4
    // + 1e6/1e9) = 2.2e-3: 2.66e-3 in all.
    let second = inst.routed_token_seconds(&placement, &[vec![], vec![], vec![2, 3], vec![]]);
    assert!(close(second, 2.66e-3), "{second}");
    // The expected loads: G = 0.5 x 1e-5 + 1e-4, C = 1.5e-4, D = 1.1e-3,
    // so evaluate's 4.6e-4 + 1.1e-3 = 1.56e-3 sits under the tokens' mean
    // (1.615e-3): the max of expectations undercounts.
    let expected = inst.evaluate(&placement).token_seconds;
    assert!(close(expected, 1.56e-3), "{expected}");
    assert!(close((first + second) / 2.0, 1.615e-3));
}

#[test]
fn overlapped_io_takes_the_max_of_resources() {
    let inst = instance("", [1.0, 0.5, 0.3, 0.2]);
    let placement = [GPU, RAM, DISK, DISK, GPU, RAM, GPU];
    let ev = inst.evaluate(&placement);
    // L0.dense: attn on GPU: 2e6/1e11 = 2e-5, + sync 1e-4 = 1.2e-4.
    // L1.dense: attn on CPU: 2e6/1e10 = 2e-4.
    // L1.experts: G = 1.0*1e6/1e11 + 1e-4 = 1.1e-4;
    //   C = 0.5*1e6/1e10 (ram) + 0.5*1e6/1e10 (disk experts computed by the CPU) = 1e-4;
    //   D = 0.5*(1e-4 + 1e6/1e9) = 5.5e-4; f = 0 -> T = 5.5e-4, bottleneck disk.
    // head: 4e6/1e11 + 1e-4 = 1.4e-4.
    let expected = [1.2e-4, 2e-4, 5.5e-4, 1.4e-4];
    for (got, want) in ev.stage_seconds.iter().zip(expected) {
        assert!(close(*got, want), "{got} vs {want}");
    }
    assert_eq!(ev.bottlenecks[2], Place::Disk(0));
    assert!(close(ev.token_seconds, 1.01e-3));
    // bytes: GPU holds expert 0 (1e6), attn L0 (2e6), lm_head (4e6); RAM expert 1 and attn L1.
    assert_eq!(ev.gpu_used_bytes, vec![7_000_000]);
    assert_eq!(ev.ram_used_bytes, vec![3_000_000]);
}

#[test]
fn without_overlap_reads_add_to_the_cpu_time() {
    let inst = instance(
        "io_overlaps_compute: false\nfixed_token_seconds: 1 ms\n",
        [1.0, 0.5, 0.3, 0.2],
    );
    let ev = inst.evaluate(&[GPU, RAM, DISK, DISK, GPU, RAM, GPU]);
    // L1.experts: C + f*D = 1e-4 + 5.5e-4 = 6.5e-4; others as above; plus 1 ms fixed.
    assert!(close(ev.stage_seconds[2], 6.5e-4));
    assert!(close(
        ev.token_seconds,
        1.2e-4 + 2e-4 + 6.5e-4 + 1.4e-4 + 1e-3
    ));
}

#[test]
fn sync_overhead_is_paid_once_per_stage_even_for_cold_objects() {
    let inst = instance("", [1.0, 1.0, 0.0, 0.0]);
    // Experts 2 and 3 (p = 0) on the GPU, 0 and 1 on the CPU:
    // G = 0 + 1e-4 (the card takes part), C = 2*1e6/1e10 = 2e-4 -> T = 2e-4.
    let ev = inst.evaluate(&[RAM, RAM, GPU, GPU, RAM, RAM, RAM]);
    assert!(close(ev.loads[2].gpu_seconds(&inst.resources, 0), 1e-4));
    assert!(close(ev.stage_seconds[2], 2e-4));
    // All four experts on the GPU: G = 2*1e6/1e11 + 1e-4 = 1.2e-4, once.
    let ev = inst.evaluate(&[GPU, GPU, GPU, GPU, RAM, RAM, RAM]);
    assert!(close(ev.stage_seconds[2], 1.2e-4));
}

#[test]
fn capacities_are_checked() {
    let inst = instance("", [1.0, 0.5, 0.3, 0.2]);
    assert!(inst
        .check_feasible(&[GPU, RAM, DISK, DISK, GPU, RAM, GPU])
        .is_ok());
    // Trunk on disk is not a place it may take.
    assert!(inst
        .check_feasible(&[GPU, RAM, DISK, DISK, DISK, RAM, GPU])
        .is_err());
    let mut small = inst.clone();
    small.resources.gpu_capacity_bytes[0] = 6_999_999;
    let err = small
        .check_feasible(&[GPU, RAM, DISK, DISK, GPU, RAM, GPU])
        .unwrap_err();
    assert!(
        err.contains("gpu:0 is over its capacity by 1 bytes"),
        "{err}"
    );
}

/// A KV group of 100 MB reused 0.01 times per token, saving 50 ms a reuse.
fn with_kv_group(inst: &mut Instance) {
    inst.add_kv_groups(&[KvGroup {
        name: "system-prompt".into(),
        bytes: Bytes(100_000_000),
        reuses_per_token: 0.01,
        prefill_seconds: Seconds(0.05),
    }]);
}

#[test]
fn kv_groups_cost_what_they_do_not_save() {
    let mut inst = instance("", [1.0, 0.5, 0.3, 0.2]);
    with_kv_group(&mut inst);
    // The group is object 7 in a last stage `kv`; `recompute` is place 3.
    assert_eq!(inst.stages.last().unwrap().name, "kv");
    assert_eq!(inst.places.last(), Some(&Place::Recompute));
    assert!(inst.allowed(7, Place::Recompute) && !inst.allowed(7, Place::Disk(0)));
    assert!(!inst.allowed(0, Place::Recompute));
    let weights = [GPU, RAM, DISK, DISK, GPU, RAM, GPU];
    // The weights cost 1.01e-3 s (`overlapped_io_takes_the_max_of_resources`).
    // Recomputed: 0.01 * 50 ms = 5e-4 s per token, and no bytes anywhere.
    let ev = inst.evaluate(&[&weights[..], &[3]].concat());
    assert!(close(ev.stage_seconds[4], 5e-4));
    assert_eq!(ev.bottlenecks[4], Place::Recompute);
    assert!(close(ev.token_seconds, 1.01e-3 + 5e-4));
    // In RAM: uploaded at 10 GB/s first, 1e8 / 1e10 = 10 ms, so a reuse saves
    // 40 ms and the group costs 0.01 * 10 ms = 1e-4 s; RAM holds its bytes.
    let ev = inst.evaluate(&[&weights[..], &[RAM]].concat());
    assert!(close(ev.stage_seconds[4], 1e-4));
    assert_eq!(ev.ram_used_bytes, vec![3_000_000 + 100_000_000]);
    // On the GPU it saves everything; the GPU holds its bytes.
    let ev = inst.evaluate(&[&weights[..], &[GPU]].concat());
    assert_eq!(ev.stage_seconds[4], 0.0);
    assert_eq!(ev.gpu_used_bytes, vec![7_000_000 + 100_000_000]);
    // The GPU (1 GB) cannot also hold a group of 995 MB.
    assert!(inst
        .check_feasible(&[&weights[..], &[GPU]].concat())
        .is_ok());
    let mut full = instance("", [1.0, 0.5, 0.3, 0.2]);
    full.add_kv_groups(&[KvGroup {
        name: "big".into(),
        bytes: Bytes(995_000_000),
        reuses_per_token: 0.01,
        prefill_seconds: Seconds(0.05),
    }]);
    assert!(full
        .check_feasible(&[&weights[..], &[GPU]].concat())
        .is_err());
}

#[test]
fn ram_kv_saves_nothing_when_the_upload_is_slower_than_prefill() {
    let mut inst = instance("", [1.0, 0.5, 0.3, 0.2]);
    inst.add_kv_groups(&[KvGroup {
        name: "slow".into(),
        bytes: Bytes(100_000_000),
        reuses_per_token: 0.01,
        // 5 ms of prefill against a 10 ms upload: RAM saves nothing (not less than nothing).
        prefill_seconds: Seconds(0.005),
    }]);
    let kv = &inst.objects[7];
    assert_eq!(
        inst.resources
            .kv_saved_seconds(kv.gpu_bytes, 0.005, Place::Ram(0)),
        0.0
    );
    let ev = inst.evaluate(&[GPU, RAM, DISK, DISK, GPU, RAM, GPU, RAM]);
    assert!(close(ev.stage_seconds[4], 0.01 * 0.005));
}

#[test]
fn cpu_stage_overhead_and_gpu_gemv_overhead_are_charged_where_they_take_part() {
    let text = PROFILE
        .replace(
            "gemv_bandwidth: 10 GB/s }",
            "gemv_bandwidth: 10 GB/s, stage_overhead: 200 us }",
        )
        .replace(
            "sync_overhead: 100 us }",
            "sync_overhead: 100 us, gemv_overhead: 2 us }",
        );
    let profile = HardwareProfile::from_yaml_str(&text, Path::new("p")).unwrap();
    let model = model();
    let inst = Instance::new(&profile, &model, &[vec![1.0, 0.5, 0.3, 0.2]]);
    let ev = inst.evaluate(&[GPU, RAM, DISK, DISK, GPU, RAM, GPU]);
    // L0.dense: attn on the GPU, one GEMV: 2e6/1e11 + 2e-6 + sync 1e-4 = 1.22e-4.
    // L1.dense: attn on the CPU: 2e6/1e10 + stage overhead 2e-4 = 4e-4.
    // L1.experts: G = 1.0 x (1e6/1e11 + 3 GEMVs x 2e-6) + 1e-4 = 1.16e-4;
    //   C = 0.5e6/1e10 + 0.5e6/1e10 + 2e-4 (ram and disk experts) = 3e-4;
    //   D = 0.5 x (1e-4 + 1e6/1e9) = 5.5e-4 -> 5.5e-4.
    // head: 4e6/1e11 + 2e-6 + 1e-4 = 1.42e-4.
    let expected = [1.22e-4, 4e-4, 5.5e-4, 1.42e-4];
    for (got, want) in ev.stage_seconds.iter().zip(expected) {
        assert!(close(*got, want), "{got} vs {want}");
    }
    assert!(close(ev.loads[2].cpu_seconds(&inst.resources, 0), 3e-4));

    // A cold expert (p = 0) in RAM still makes the node take part:
    // G = 2 x (1e-5 + 6e-6) + 1e-4 = 1.32e-4, C = 0 + 2e-4 -> 2e-4.
    let inst = Instance::new(&profile, &model, &[vec![1.0, 1.0, 0.0, 0.0]]);
    let placement = [GPU, GPU, GPU, RAM, GPU, GPU, GPU];
    let ev = inst.evaluate(&placement);
    assert!(close(ev.stage_seconds[2], 2e-4));
    assert_eq!(ev.bottlenecks[2], Place::Ram(0));
    // Moving it to the card, priced without copying the loads: the node
    // leaves the stage, which the GPU now sets at 1.32e-4, as a fresh
    // evaluation of the moved placement says.
    let changes = inst
        .resources
        .move_changes(&inst.objects[3], Place::Ram(0), Place::Gpu(0));
    let (moved, at) = ev.loads[2].seconds_with(&inst.resources, &changes);
    assert!(close(moved, 1.32e-4), "{moved}");
    assert_eq!(at, Place::Gpu(0));
    let fresh = inst.evaluate(&[GPU, GPU, GPU, GPU, GPU, GPU, GPU]);
    assert!(close(fresh.stage_seconds[2], moved));
}

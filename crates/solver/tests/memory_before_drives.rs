//! A CPU-only box whose RAM holds the whole model: when reads hide behind
//! compute, the cost model prices an expert read from the drive like one in
//! RAM (the CPU multiplies it either way), so the token time is the same
//! wherever the experts go. The plan must then keep them in memory: a user
//! with free RAM expects no expert streamed from a drive.

use residency_core::cost::{Instance, Place};
use residency_core::heat::HeatTable;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_solver::{solve, SolveOptions};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The 2-core VM of docs/zero-to-plan.md as `residency profile calibrate`
/// measured it: 5.1 GB/s of CPU GEMV, a 1.1 GB/s drive, 23.5 GiB of RAM.
const VM: &str = r#"
name: "vm"
numa:
  - id: 0
    ram: 23.54 GiB
    reserved: 2.95 GiB
    staging: 754 MiB
    cores: 2
    gemv_bandwidth: 5.131 GB/s
gpus: []
drives:
  - id: 0
    name: "vda"
    numa: 0
    read_bandwidth: 1.111 GB/s
    read_latency: 31.85 us
io_overlaps_compute: true
felt_fraction: 0.0
fixed_token_seconds: 0 s
"#;

#[test]
fn free_ram_holds_every_expert_when_the_drive_saves_nothing() {
    let profile = HardwareProfile::from_yaml_str(VM, Path::new("vm.yaml")).unwrap();
    let model_path = Path::new(ROOT).join("../../profiles/models/deepseek-v2-lite.yaml");
    let model = Model::from_yaml_file(&model_path).unwrap();
    let rates = HeatTable::uniform(&model)
        .use_rates(&model, &model_path, &mut Vec::new())
        .unwrap();
    let inst = Instance::new(&profile, &model, &rates);
    let solution = solve(&inst, SolveOptions::default()).unwrap();
    inst.check_feasible(&solution.placement).unwrap();
    let on_drive = solution
        .placement
        .iter()
        .filter(|&&q| matches!(inst.places[q], Place::Disk(_)))
        .count();
    assert_eq!(on_drive, 0, "experts streamed although RAM has room");
    // All in RAM by hand: CPU time is the same whatever streams, so the
    // plan's time equals the all-RAM placement's, evaluated independently.
    let ram = inst
        .places
        .iter()
        .position(|p| matches!(p, Place::Ram(0)))
        .unwrap();
    let all_ram: Vec<usize> = (0..inst.objects.len()).map(|_| ram).collect();
    let expected = inst.evaluate(&all_ram).token_seconds;
    assert!((solution.token_seconds - expected).abs() <= expected * 1e-9);
}

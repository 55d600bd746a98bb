//! One test per finding of the fuzz campaigns (tests/fuzz.rs): the
//! hand-made bad input is refused in one line naming the file and the
//! place, before anything is allocated from it or priced with it.

use residency_core::kv::KvGroupsFile;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_formats::inputs::{InputPaths, Inputs};
use std::path::Path;

const MODEL: &str = residency_testkit::SMALL_DEEPSEEK;

/// The refusal of `text` as a file named `name` by `read`, checked to be
/// one line naming the file and containing `place`.
fn refused<T>(name: &str, text: &str, place: &str, read: impl Fn(&Path) -> Result<T, String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let message = match read(&path) {
        Ok(_) => panic!("{name} accepted:\n{text}"),
        Err(m) => m,
    };
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains(place), "{message}");
}

fn profile(text: &str, place: &str) {
    refused("profile.yaml", text, place, |p| {
        HardwareProfile::from_yaml_file(p).map_err(|e| e.to_string())
    });
}

fn model(text: &str, place: &str) {
    refused("model.yaml", text, place, |p| {
        Model::from_yaml_file(p).map_err(|e| e.to_string())
    });
}

const PROFILE: &str = "\
name: p
numa:
  - { id: 0, ram: 4 GiB, cores: 4, gemv_bandwidth: GEMV }
gpus:
  - { id: 0, name: c, vram: 1 GiB, numa: 0, gemv_bandwidth: 200 GB/s, upload_bandwidth: 12 GB/s, sync_overhead: SYNC }
";

#[test]
fn a_rate_of_1e_minus_300_bytes_per_second_is_refused() {
    // Found as a NaN inside the solver's lower bound, then a clamp panic.
    let text = PROFILE
        .replace("GEMV", "1e-300 B/s")
        .replace("SYNC", "30 us");
    profile(&text, "numa[0].gemv_bandwidth");
}

#[test]
fn a_sync_overhead_of_1e300_seconds_is_refused() {
    let text = PROFILE
        .replace("GEMV", "20 GB/s")
        .replace("SYNC", "1e300 s");
    profile(&text, "gpus[0].sync_overhead");
}

#[test]
fn a_layer_range_to_u64_max_is_refused_before_it_is_expanded() {
    // Expanded, this range asked for 2^67 bytes.
    let text = MODEL.replace("\"0..=3\"", "\"0..=18446744073709551615\"");
    model(&text, "trunk[0]");
}

#[test]
fn four_billion_experts_are_refused_before_any_table_is_sized() {
    // The planner's per-expert tables asked for 32 GiB.
    model(
        &MODEL.replace("experts: 4", "experts: 4294967296"),
        "experts",
    );
}

#[test]
fn four_billion_layers_are_refused() {
    model(&MODEL.replace("layers: 4", "layers: 4294967296"), "layers");
}

#[test]
fn a_heat_count_of_1e308_is_refused() {
    // Summed with the rest of its layer it overflowed to infinity, and the
    // solver's lower bound turned it into NaN.
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("model.yaml");
    std::fs::write(&model_path, MODEL).unwrap();
    let heat =
        r#"{"tokens": 50, "layers": [[40, 30, 1e308, 10], [5, 50, 25, 20], [70, 10, 10, 10]]}"#;
    refused("heat.json", heat, "MoE layer 0 expert 2", |p| {
        let paths = InputPaths {
            model: Some(model_path.clone()),
            heat: Some(p.to_path_buf()),
            ..InputPaths::default()
        };
        Inputs::load(&paths)
            .and_then(|mut i| i.instance())
            .map_err(|e| e.to_string())
    });
}

#[test]
fn a_kv_group_prefill_of_1e308_ms_is_refused() {
    let text = "\
format: residency-kv-groups
groups:
  - { name: a, bytes: 64 KiB, reuses_per_token: 0.01, prefill_seconds: 1e308 ms }
";
    refused("kv.yaml", text, "groups[0].prefill_seconds", |p| {
        KvGroupsFile::read(p).map_err(|e| e.to_string())
    });
}

#[test]
fn a_kv_group_reused_1e308_times_a_token_is_refused() {
    let text = "\
format: residency-kv-groups
groups:
  - { name: a, bytes: 64 KiB, reuses_per_token: 1e308, prefill_seconds: 2 ms }
";
    refused("kv.yaml", text, "groups[0].reuses_per_token", |p| {
        KvGroupsFile::read(p).map_err(|e| e.to_string())
    });
}

//! End-to-end tests of `residency bench` on a generated int4 checkpoint:
//! with a CPU-only profile, the prediction and the work counted against
//! hand computation, the checksum across placements, and bad inputs as one
//! line naming the file; on a CUDA GPU (where there is one), the same
//! outputs as the CPU's.

#[path = "../common/mod.rs"]
mod common;
mod sweep;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `SMALL_DEEPSEEK` with int4 groups of 32 (the smallest the kernel runs:
/// one 16-byte chunk of 32 features): a dense layer 0, MoE layers of 4
/// experts, top-2, hidden 64, expert intermediate 32.
fn model_yaml() -> String {
    residency_testkit::SMALL_DEEPSEEK.replace("group: 16", "group: 32")
}

/// Round rates for hand computation: the CPU streams 1 GB/s, the drive
/// reads 1 GB/s after 1 ms, and reads are not felt.
const CPU_ONLY: &str = include_str!("cpu-only.yaml");

/// An int4 expert: 3 x 64 x 32 parameters at half a byte, plus an F16
/// scale per 32 of them.
const EXPERT_BYTES: f64 = (3 * 64 * 32 / 2 + 3 * 64 * 32 / 32 * 2) as f64;

/// A generated trunk row: 64 int4 features (32 bytes) and 2 scales.
const ROW_BYTES: u64 = 32 + 2 * 2;

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    ckpt: PathBuf,
    profile: PathBuf,
    plan: PathBuf,
}

/// The model's first two MoE layers as int4, the profile, and a plan of
/// them (everything fits in RAM).
fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let model = dir.join("model.yaml");
    std::fs::write(&model, model_yaml()).unwrap();
    let profile = dir.join("cpu.yaml");
    std::fs::write(&profile, CPU_ONLY).unwrap();
    let ckpt = dir.join("ckpt");
    run_ok(&[
        "gen-checkpoint",
        "--model",
        s(&model),
        "--out",
        s(&ckpt),
        "--layers",
        "2",
        "--dtype",
        "int4",
        "--seed",
        "3",
    ]);
    let plan = dir.join("plan.json");
    run_ok(&[
        "plan",
        "--model",
        s(&ckpt),
        "--profile",
        s(&profile),
        "--time-limit",
        "1",
        "--out",
        s(&plan),
    ]);
    Setup {
        _dir: tmp,
        dir,
        ckpt,
        profile,
        plan,
    }
}

/// The plan with experts 0 and 2 of every layer moved to the drive.
fn experts_0_and_2_on_disk(su: &Setup) -> PathBuf {
    let mut doc = read_json(&su.plan);
    let disk = place_of(&doc, "disk:0");
    for row in doc["experts"].as_array_mut().unwrap() {
        row[0] = disk.into();
        row[2] = disk.into();
    }
    let split = su.dir.join("split.json");
    std::fs::write(&split, serde_json::to_string(&doc).unwrap()).unwrap();
    split
}

fn bench_args<'a>(s_: &'a Setup, plan: &'a Path, json: &'a Path) -> Vec<&'a str> {
    let mut args = vec!["bench", "--plan", s(plan), "--checkpoint", s(&s_.ckpt)];
    args.extend(run_flags(&s_.profile, json));
    args
}

/// What every bench run of these tests is given beside its plan or sweep:
/// `profile`, 20 tokens, seed 5, and `--json` into `json`.
fn run_flags<'a>(profile: &'a Path, json: &'a Path) -> [&'a str; 8] {
    [
        "--profile",
        s(profile),
        "--tokens",
        "20",
        "--seed",
        "5",
        "--json",
        s(json),
    ]
}

/// The one-card desktop profile, and a plan of the checkpoint with it.
fn gpu_plan(su: &Setup) -> (String, PathBuf) {
    let gpu_profile = profile("desktop-1gpu-8gb");
    let gpu_plan = su.dir.join("gpu.json");
    run_ok(&[
        "plan",
        "--model",
        s(&su.ckpt),
        "--profile",
        &gpu_profile,
        "--time-limit",
        "1",
        "--out",
        s(&gpu_plan),
    ]);
    (gpu_profile, gpu_plan)
}

/// Index of place `name` in a plan's `places`.
fn place_of(plan: &Value, name: &str) -> usize {
    plan["places"]
        .as_array()
        .unwrap()
        .iter()
        .position(|p| p == name)
        .unwrap()
}

fn entry<'a>(doc: &'a Value, list: &str, name: &str) -> &'a Value {
    doc[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

/// Trunk bytes of the plan by stage kind (attn and dense_ffn dense,
/// shared_expert experts, lm_head head): placed bytes and the bytes the
/// kernel streams for them (whole generated rows).
fn trunk_bytes(plan: &Value, names: &[&str]) -> (f64, f64) {
    let mut placed = 0;
    let mut streamed = 0;
    for t in plan["trunk"].as_array().unwrap() {
        if names.contains(&t["name"].as_str().unwrap()) {
            let b = t["bytes"].as_u64().unwrap();
            placed += b;
            streamed += b / ROW_BYTES * ROW_BYTES;
        }
    }
    (placed as f64, streamed as f64)
}

#[test]
fn bench_prediction_work_and_checksum_by_hand() {
    let su = setup();
    let plan = read_json(&su.plan);
    let ram_json = su.dir.join("ram.json");
    run_ok(&bench_args(&su, &su.plan, &ram_json));
    let ram = read_json(&ram_json);
    let (dense, dense_rows) = trunk_bytes(&plan, &["attn", "dense_ffn"]);
    let (shared, shared_rows) = trunk_bytes(&plan, &["shared_expert"]);
    let (head, head_rows) = trunk_bytes(&plan, &["lm_head"]);
    // All in RAM, uniform heat (use rate 2 / 4 = 0.5), two MoE layers: a
    // stage is its bytes over 1 GB/s; experts stream 4 x 0.5 experts a layer.
    let experts = shared + 2.0 * 4.0 * 0.5 * EXPERT_BYTES;
    for (name, bytes) in [("dense", dense), ("experts", experts), ("head", head)] {
        let m = entry(&ram, "stages", name);
        assert!(
            close(m["predicted_seconds"].as_f64().unwrap(), bytes / 1e9),
            "{name}: {m}"
        );
        assert!(
            close(m["predicted_bytes_per_token"].as_f64().unwrap(), bytes),
            "{name}"
        );
    }
    // What the kernel streamed each token: whole trunk rows, and exactly
    // two experts a layer.
    let experts_rows = shared_rows + 2.0 * 2.0 * EXPERT_BYTES;
    for (name, bytes) in [
        ("dense", dense_rows),
        ("experts", experts_rows),
        ("head", head_rows),
    ] {
        let m = entry(&ram, "stages", name);
        assert_eq!(m["bytes_per_token"].as_f64().unwrap(), bytes, "{name}");
    }
    let cpu = entry(&ram, "resources", "cpu:0");
    assert_eq!(
        cpu["bytes_per_token"].as_f64().unwrap(),
        dense_rows + experts_rows + head_rows
    );
    assert_eq!(entry(&ram, "resources", "drive:0")["bytes_per_token"], 0.0);
    assert!(ram["tok_per_s"].as_f64().unwrap() > 0.0);
    // All in RAM, the main thread does every stage in turn: bench's own
    // work and the CPU's GEMV calls are disjoint parts of the token, so
    // neither is negative and together they fit in the mean token.
    let overhead = ram["bench_overhead_seconds"].as_f64().unwrap();
    let token = 1.0 / ram["tok_per_s"].as_f64().unwrap();
    let gemv = cpu["measured_seconds"].as_f64().unwrap();
    assert!(overhead >= 0.0 && overhead + gemv <= token, "{ram}");
    assert!(
        ram["p99_token_seconds"].as_f64().unwrap() >= ram["p50_token_seconds"].as_f64().unwrap()
    );

    // Experts 0 and 2 of every layer on the drive: each layer's experts
    // stage is now the drive's 2 x 0.5 x (1 ms + bytes / 1 GB/s), above
    // the CPU's (shared + 4 x 0.5 x bytes) / 1 GB/s.
    let split = experts_0_and_2_on_disk(&su);
    let disk_json = su.dir.join("disk.json");
    run_ok(&bench_args(&su, &split, &disk_json));
    let on_disk = read_json(&disk_json);
    let drive_stage = 2.0 * 0.5 * (1e-3 + EXPERT_BYTES / 1e9);
    let m = entry(&on_disk, "stages", "experts");
    assert!(
        close(m["predicted_seconds"].as_f64().unwrap(), 2.0 * drive_stage),
        "{m}"
    );
    assert_eq!(m["bytes_per_token"].as_f64().unwrap(), experts_rows);
    let d = entry(&on_disk, "resources", "drive:0");
    assert!(close(
        d["predicted_seconds"].as_f64().unwrap(),
        2.0 * drive_stage
    ));
    assert!(close(
        d["predicted_bytes_per_token"].as_f64().unwrap(),
        2.0 * EXPERT_BYTES
    ));
    // Some drawn experts came from the drive, a whole expert each read.
    let read = d["bytes_per_token"].as_f64().unwrap() * 20.0;
    assert!(read > 0.0 && (read / EXPERT_BYTES).fract() == 0.0, "{d}");
    // The same experts on the same weights, wherever they came from.
    assert_eq!(ram["checksum"], on_disk["checksum"]);
    assert_ne!(ram["checksum"], 0.0);
}

#[test]
fn bench_serves_a_trace_s_whole_tokens_priced_with_their_heat() {
    let su = setup();
    let split = experts_0_and_2_on_disk(&su);
    // Layer 0 routes {0, 1} then {2, 1}: one expert a token from the drive;
    // layer 1 routes {1, 3} then {3, 1}: none. The third token routes
    // layer 0 only, so it is not served.
    let trace = su.dir.join("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"routes\":[[0,1],[1,3]]}\n{\"routes\":[[2,1],[3,1]]}\n{\"routes\":[[0,1]]}\n",
    )
    .unwrap();
    let json = su.dir.join("trace.json");
    let mut args = bench_args(&su, &split, &json);
    args.extend(["--trace", s(&trace)]);
    let notes = stderr(&run_ok(&args));
    assert!(notes.contains("2 of its 3 tokens"), "{notes}");
    let doc = read_json(&json);
    assert_eq!(doc["tokens"], 2);
    let drive = entry(&doc, "resources", "drive:0");
    assert_eq!(drive["bytes_per_token"].as_f64().unwrap(), EXPERT_BYTES);
    // The two tokens' heat: layer 0's experts 0 and 2 each in half of
    // them, layer 1's never: one read a token expected, of 1 ms + its
    // bytes at 1 GB/s.
    assert!(close(
        drive["predicted_bytes_per_token"].as_f64().unwrap(),
        EXPERT_BYTES
    ));
    assert!(close(
        drive["predicted_seconds"].as_f64().unwrap(),
        1e-3 + EXPERT_BYTES / 1e9
    ));
    // Each of the two tokens loads every resource of every stage as their
    // heat expects (one read and one RAM expert in layer 0, two RAM
    // experts in layer 1), so priced on its own routes a token costs the
    // prediction.
    assert!(close(
        doc["predicted_on_routes_tok_per_s"].as_f64().unwrap(),
        doc["predicted_tok_per_s"].as_f64().unwrap()
    ));

    // An expert the checkpoint does not have is one line naming it, and
    // no report is written.
    std::fs::write(&trace, "{\"routes\":[[0,7],[1,3]]}\n").unwrap();
    std::fs::remove_file(&json).unwrap();
    let line = one_error_line(&args, &json);
    assert!(line.contains("MoE layer 0: expert 7"), "{line}");
    // The trace is the heat: both is refused.
    let mut both = args.clone();
    both.extend(["--heat", s(&trace)]);
    assert!(one_error_line(&both, &json).contains("--heat"));
}

#[test]
fn bench_refuses_a_foreign_plan_and_gpu_placements_without_cuda_in_one_line() {
    let su = setup();
    let json = su.dir.join("bench.json");
    // A plan for three MoE layers against the two-layer checkpoint.
    let mut doc = read_json(&su.plan);
    let row = doc["experts"][0].clone();
    doc["experts"].as_array_mut().unwrap().push(row);
    let foreign = su.dir.join("foreign.json");
    std::fs::write(&foreign, serde_json::to_string(&doc).unwrap()).unwrap();
    assert_bad_input(
        &bench_args(&su, &foreign, &json),
        &foreign,
        "experts",
        &json,
    );
    // A plan that puts an expert on a GPU, on a machine without CUDA.
    let (gpu_profile, gpu_plan) = gpu_plan(&su);
    let mut doc = read_json(&gpu_plan);
    let gpu = place_of(&doc, "gpu:0");
    doc["experts"][0][0] = gpu.into();
    std::fs::write(&gpu_plan, serde_json::to_string(&doc).unwrap()).unwrap();
    let mut args = bench_args(&su, &gpu_plan, &json);
    let at = args.iter().position(|a| *a == "--profile").unwrap();
    args[at + 1] = &gpu_profile;
    if run(&args).status.success() {
        eprintln!("not checked here: CUDA device 0 runs GPU placements (bench_on_a_cuda_gpu_computes_what_the_cpu_does checks them)");
        return;
    }
    assert_bad_input(&args, &gpu_plan, "gpus: []", &json);
}

/// Everything on a CUDA GPU, then experts 1 and 3 of every layer moved to
/// RAM: the card streams exactly what it holds of the drawn experts and
/// the trunk's whole generated rows, and every placement computes the same
/// outputs as the all-RAM one (equal up to the order in which the GPU
/// kernel sums a row, so to 1e-5 relative). Runs where CUDA device 0 is
/// (the H200 machine); elsewhere it says why it skips.
#[test]
fn bench_on_a_cuda_gpu_computes_what_the_cpu_does() {
    let su = setup();
    let ram_json = su.dir.join("ram.json");
    run_ok(&bench_args(&su, &su.plan, &ram_json));
    let ram = read_json(&ram_json);
    let (gpu_profile, gpu_plan) = gpu_plan(&su);
    let mut doc = read_json(&gpu_plan);
    let (gpu, ram_place) = (place_of(&doc, "gpu:0"), place_of(&doc, "ram:0"));
    for row in doc["experts"].as_array_mut().unwrap() {
        for e in row.as_array_mut().unwrap() {
            *e = gpu.into();
        }
    }
    for t in doc["trunk"].as_array_mut().unwrap() {
        t["place"] = "gpu:0".into();
    }
    std::fs::write(&gpu_plan, serde_json::to_string(&doc).unwrap()).unwrap();
    let json = su.dir.join("gpu-bench.json");
    let mut args = bench_args(&su, &gpu_plan, &json);
    let at = args.iter().position(|a| *a == "--profile").unwrap();
    args[at + 1] = &gpu_profile;
    let out = run(&args);
    if !out.status.success() && stderr(&out).contains("cannot run them") {
        eprintln!("skipped: no CUDA device here ({})", stderr(&out).trim());
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let on_gpu = read_json(&json);
    let plan = read_json(&gpu_plan);
    let names = ["attn", "dense_ffn", "shared_expert", "lm_head"];
    let (_, trunk_rows) = trunk_bytes(&plan, &names);
    // Two MoE layers, two experts drawn in each.
    let drawn = 2.0 * 2.0 * EXPERT_BYTES;
    let card = entry(&on_gpu, "resources", "gpu:0");
    assert_eq!(
        card["bytes_per_token"].as_f64().unwrap(),
        trunk_rows + drawn
    );
    assert!(card["measured_seconds"].as_f64().unwrap() > 0.0, "{card}");
    assert_eq!(entry(&on_gpu, "resources", "cpu:0")["bytes_per_token"], 0.0);
    let same = |a: &Value, b: &Value| {
        let (a, b) = (
            a["checksum"].as_f64().unwrap(),
            b["checksum"].as_f64().unwrap(),
        );
        (a - b).abs() <= 1e-5 * a.abs().max(b.abs())
    };
    assert!(
        same(&ram, &on_gpu),
        "{} vs {}",
        ram["checksum"],
        on_gpu["checksum"]
    );

    let mut doc = plan;
    for row in doc["experts"].as_array_mut().unwrap() {
        row[1] = ram_place.into();
        row[3] = ram_place.into();
    }
    std::fs::write(&gpu_plan, serde_json::to_string(&doc).unwrap()).unwrap();
    run_ok(&args);
    let mixed = read_json(&json);
    let card = entry(&mixed, "resources", "gpu:0")["bytes_per_token"]
        .as_f64()
        .unwrap();
    let cpu = entry(&mixed, "resources", "cpu:0")["bytes_per_token"]
        .as_f64()
        .unwrap();
    // The drawn experts split between the card and the CPU, whole ones.
    assert_eq!(card + cpu, trunk_rows + drawn);
    assert!(((cpu * 20.0) / EXPERT_BYTES).fract() == 0.0, "{cpu}");
    assert!(
        same(&ram, &mixed),
        "{} vs {}",
        ram["checksum"],
        mixed["checksum"]
    );
}

//! End-to-end tests of checkpoints on the command line: `gen-checkpoint`
//! writes a sharded checkpoint that `plan --model DIR` plans and `validate`
//! accepts; bad descriptions and damaged checkpoints give one line naming
//! the file and the place, exit 1, and no output.

mod common;

use common::*;
use residency_testkit::SMALL_DEEPSEEK;
use std::path::{Path, PathBuf};

/// Writes `SMALL_DEEPSEEK` and generates its first two MoE layers as
/// int4 in shards of at most 16 KiB.
fn small_checkpoint(dir: &Path) -> PathBuf {
    let yaml = dir.join("deepseek-v2-tiny.yaml");
    std::fs::write(&yaml, SMALL_DEEPSEEK).unwrap();
    let out = dir.join("ckpt");
    let o = run_ok(&[
        "gen-checkpoint",
        "--model",
        s(&yaml),
        "--out",
        s(&out),
        "--layers",
        "2",
        "--dtype",
        "int4",
        "--shard-bytes",
        "16KiB",
        "--seed",
        "3",
    ]);
    let text = stdout(&o);
    for needle in ["wrote", "deepseek_v2", "int4", "shard(s)"] {
        assert!(text.contains(needle), "`{needle}` missing from {text}");
    }
    out
}

/// `plan` for the checkpoint `ckpt` into `out` in a second at most, which
/// must succeed.
fn plan_checkpoint(ckpt: &Path, out: &Path) -> std::process::Output {
    run_ok(&[
        "plan",
        "--model",
        s(ckpt),
        "--time-limit",
        "1",
        "--out",
        s(out),
    ])
}

/// The small checkpoint and a plan made for it (`plan.json` in `dir`).
fn planned_checkpoint(dir: &Path) -> (PathBuf, PathBuf) {
    let ckpt = small_checkpoint(dir);
    let plan = dir.join("plan.json");
    plan_checkpoint(&ckpt, &plan);
    (ckpt, plan)
}

/// `apply` of `plan` to `ckpt` with `extra` arguments, its report to `json`.
fn apply_args<'a>(
    plan: &'a Path,
    ckpt: &'a Path,
    extra: &[&'a str],
    json: &'a Path,
) -> Vec<&'a str> {
    let head = ["apply", "--plan", s(plan), "--checkpoint", s(ckpt)];
    [&head, extra, &["--json", s(json)]].concat()
}

fn shard_holding(ckpt: &Path, tensor: &str) -> PathBuf {
    let index = std::fs::read_to_string(ckpt.join("model.safetensors.index.json")).unwrap();
    let index: serde_json::Value = serde_json::from_str(&index).unwrap();
    ckpt.join(index["weight_map"][tensor].as_str().unwrap())
}

#[test]
fn gen_checkpoint_then_plan_on_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = small_checkpoint(dir.path());
    let shards = std::fs::read_dir(&ckpt)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".safetensors")
        })
        .count();
    assert!(shards > 1, "{shards} shard");
    let config = std::fs::read_to_string(ckpt.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["model_type"], "deepseek_v2");
    assert_eq!(config["num_hidden_layers"], 3);
    assert_eq!(config["first_k_dense_replace"], 1);
    assert_eq!(config["n_shared_experts"], 2);
    assert_eq!(config["quantization_config"]["group_size"], 16);

    let plan = dir.path().join("plan.json");
    let o = plan_checkpoint(&ckpt, &plan);
    let text = stdout(&o);
    for needle in ["plan: ", "predicted:", "tok/s", "wrote"] {
        assert!(text.contains(needle), "`{needle}` missing from {text}");
    }
    assert!(stderr(&o).contains("safetensors headers"), "{}", stderr(&o));
    let written = read_json(&plan);
    let model = &written["inputs"]["model"];
    assert_eq!(model["name"], s(&ckpt));
    assert_eq!(model["sha256"].as_str().unwrap().len(), 64);
    // Two MoE layers of 4 experts; trunk: 3 attn, 1 dense_ffn, 2 shared, lm_head.
    let experts = written["experts"].as_array().unwrap();
    assert_eq!(experts.len(), 2);
    assert!(experts.iter().all(|l| l.as_array().unwrap().len() == 4));
    assert_eq!(written["trunk"].as_array().unwrap().len(), 7);

    let v = run_ok(&["validate", s(&plan), "--model", s(&ckpt)]);
    assert!(stdout(&v).contains("matches the cost model"));
}

#[test]
fn gen_checkpoint_bad_inputs_are_one_line_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // No family can be told from the name.
    let glm = PathBuf::from(model("glm-5.2"));
    assert_bad_input(
        &["gen-checkpoint", "--model", s(&glm), "--out", s(&out)],
        &glm,
        "--family",
        &out,
    );
    // More MoE layers than the model has.
    let mixtral = PathBuf::from(model("mixtral-8x7b"));
    assert_bad_input(
        &[
            "gen-checkpoint",
            "--model",
            s(&mixtral),
            "--out",
            s(&out),
            "--layers",
            "33",
        ],
        &mixtral,
        "--layers",
        &out,
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn plan_on_a_damaged_checkpoint_names_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = small_checkpoint(dir.path());
    let plan = dir.path().join("plan.json");
    let args = ["plan", "--model", s(&ckpt), "--out", s(&plan)];

    // A truncated shard.
    let shard = shard_holding(&ckpt, "model.layers.2.mlp.experts.3.down_proj.weight");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() - 100]).unwrap();
    assert_bad_input(&args, &shard, "tensor `model.layers.", &plan);
    std::fs::write(&shard, &bytes).unwrap();

    // config.json of a family we do not read.
    let config_path = ckpt.join("config.json");
    let config = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(
        &config_path,
        config
            .replace("\"deepseek_v2\"", "\"llama\"")
            .replace("DeepseekV2ForCausalLM", "LlamaForCausalLM"),
    )
    .unwrap();
    assert_bad_input(&args, &config_path, "model_type", &plan);

    // config.json that disagrees with the shards: one more expert, so the
    // first router is one row short.
    std::fs::write(
        &config_path,
        config.replace("\"n_routed_experts\": 4", "\"n_routed_experts\": 5"),
    )
    .unwrap();
    let router = "model.layers.1.mlp.gate.weight";
    let shard = shard_holding(&ckpt, router);
    assert_bad_input(
        &args,
        &shard,
        &format!("tensor `{router}`: has shape [4, 64], expected [5, 64]"),
        &plan,
    );

    // config.json routing each token to more experts than a layer has: the
    // shards agree, the derived description is refused like a YAML one.
    std::fs::write(
        &config_path,
        config.replace("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5"),
    )
    .unwrap();
    assert_bad_input(&args, &ckpt, "top_k: 5 is larger than experts 4", &plan);
}

/// Objects and bytes a plan keeps off the disks, counted from the plan file
/// itself (experts by place index, trunk by place name).
fn planned_residents(plan: &serde_json::Value) -> (usize, u64) {
    let places: Vec<&str> = plan["places"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let experts = plan["experts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap())
        .filter(|p| !places[p.as_u64().unwrap() as usize].starts_with("disk"))
        .count();
    // Trunk components and usage rows name their place.
    let off_disk = |rows: &str| {
        plan[rows]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["place"].as_str().unwrap().starts_with("disk"))
    };
    let trunk = off_disk("trunk").count();
    let bytes = off_disk("usage")
        .map(|u| u["used_bytes"].as_u64().unwrap())
        .sum();
    (experts + trunk, bytes)
}

#[test]
fn gen_plan_apply_verify_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, plan) = planned_checkpoint(dir.path());
    let (objects, bytes) = planned_residents(&read_json(&plan));
    for backend in ["io-uring", "direct", "pread", "mmap"] {
        let json = dir.path().join(format!("apply-{backend}.json"));
        let o = run(&apply_args(
            &plan,
            &ckpt,
            &["--verify", "--backend", backend],
            &json,
        ));
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("verified: every resident equals"),
            "{}",
            stdout(&o)
        );
        let doc = read_json(&json);
        assert_eq!(doc["verified"], true);
        let tiers = doc["tiers"].as_array().unwrap();
        let loaded: u64 = tiers.iter().map(|t| t["objects"].as_u64().unwrap()).sum();
        let loaded_bytes: u64 = tiers.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
        // What the store loaded is what the planner placed in memory.
        assert_eq!(
            (loaded as usize, loaded_bytes),
            (objects, bytes),
            "{backend}"
        );
        assert!(tiers.iter().all(|t| t["seconds"].as_f64().unwrap() >= 0.0));
        assert_eq!(doc["telemetry"]["physical_bytes"].as_u64().unwrap(), bytes);
    }
}

#[test]
fn apply_to_a_damaged_or_foreign_checkpoint_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, plan) = planned_checkpoint(dir.path());
    let json = dir.path().join("apply.json");
    // A plan for three MoE layers against the two-layer checkpoint.
    let mut doc = read_json(&plan);
    let row = doc["experts"][0].clone();
    doc["experts"].as_array_mut().unwrap().push(row);
    let foreign = dir.path().join("foreign.json");
    std::fs::write(&foreign, serde_json::to_string(&doc).unwrap()).unwrap();
    assert_bad_input(
        &apply_args(&foreign, &ckpt, &[], &json),
        &foreign,
        "experts",
        &json,
    );
    // A shard cut short after planning.
    let shard = shard_holding(&ckpt, "model.layers.1.mlp.experts.0.down_proj.weight");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    assert_bad_input(
        &apply_args(&plan, &ckpt, &[], &json),
        &shard,
        "truncated",
        &json,
    );
}

#[test]
fn apply_reads_from_mirrored_copies_and_refuses_a_bad_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, plan) = planned_checkpoint(dir.path());
    // A copy of the shards on "another drive" (another directory here).
    let mirror = dir.path().join("mirror");
    std::fs::create_dir(&mirror).unwrap();
    let mut shards = Vec::new();
    for entry in std::fs::read_dir(&ckpt).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            std::fs::copy(&path, mirror.join(path.file_name().unwrap())).unwrap();
            shards.push(path);
        }
    }
    let json = dir.path().join("apply.json");
    let o = run_ok(&apply_args(
        &plan,
        &ckpt,
        &["--mirror", s(&mirror), "--verify"],
        &json,
    ));
    assert!(stdout(&o).contains("verified"), "{}", stdout(&o));
    std::fs::remove_file(&json).unwrap();
    // A copy of another length is not a mirror: one line naming it.
    let bad = mirror.join(shards[0].file_name().unwrap());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&bad)
        .unwrap()
        .set_len(1)
        .unwrap();
    assert_bad_input(
        &apply_args(&plan, &ckpt, &["--mirror", s(&mirror)], &json),
        &bad,
        "mirror copy",
        &json,
    );
}

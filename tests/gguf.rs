//! `--model FILE.gguf` end to end: a GGUF file the test kit writes is
//! planned, its expert bytes are the file's, and the llama.cpp export's
//! rules match the file's own tensor names.

mod common;

use common::*;
use residency_testkit::gguf::qwen3moe;

#[test]
fn a_gguf_file_is_planned_with_its_own_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    qwen3moe(4).write(&model);
    let plan = dir.path().join("plan.json");
    let o = run_ok(&[
        "plan",
        "--model",
        s(&model),
        "--time-limit",
        "2",
        "--out",
        s(&plan),
        "--export",
        "llama-cpp",
    ]);
    let out = stdout(&o);
    assert!(out.contains("tiny-qwen3moe"), "{out}");
    // The notes say what the file's layout implies.
    assert!(
        stderr(&o).contains("token_embd") || out.contains("token_embd"),
        "{}",
        stderr(&o)
    );
    let plan = read_json(&plan);
    assert_eq!(plan["experts"].as_array().unwrap().len(), 4, "4 MoE layers");
    // The trunk as the file holds it (the test kit's layout, by hand):
    // attention with norms and router 5888 bytes a layer, the head 7056.
    let trunk: Vec<(String, u64)> = plan["trunk"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(String, u64)> = (0..4).map(|_| ("attn".to_string(), 5888)).collect();
    want.push(("lm_head".to_string(), 7056));
    assert_eq!(trunk, want);
    // Every byte placed: 16 experts of 3456 bytes (32 rows of 36 bytes for
    // gate and up, 64 rows of 18 for down) and that trunk.
    let used: u64 = plan["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["used_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(used, 16 * 3456 + 4 * 5888 + 7056);
    assert!(dir.path().join("llama_cpp_override_tensor.txt").is_file());
    // The same file validates the plan.
    let v = run(&[
        "validate",
        s(&dir.path().join("plan.json")),
        "--model",
        s(&model),
    ]);
    assert!(v.status.success(), "{}", stderr(&v));
}

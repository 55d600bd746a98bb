//! Tests of `engines`.

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn sglang_steps_add_up_and_model_rows_map_to_moe_ordinals() {
    let dir = tempfile::tempdir().unwrap();
    // Two steps, three transformer layers (layer 0 dense), 2 experts:
    // layer 1 = [1+2, 0+1] = [3, 1], layer 2 = [0+0, 4+1] = [0, 5].
    let path = write(
        dir.path(),
        "dist.json",
        r#"{"logical_count": [[[0,0],[1,0],[0,4]], [[0,0],[2,1],[0,1]]]}"#,
    );
    let ctx = HeatContext {
        moe_layers: Some(vec![1, 2]),
        model_layers: Some(3),
        experts: Some(vec![2, 2]),
        ..Default::default()
    };
    let heat = read(&path, HeatFormat::SglangJson, &ctx, &mut Vec::new()).unwrap();
    assert_eq!(heat.total.counts, vec![vec![3.0, 1.0], vec![0.0, 5.0]]);
    assert_eq!(heat.total.tokens, None);
}

#[test]
fn vllm_replicas_add_onto_their_logical_expert() {
    let dir = tempfile::tempdir().unwrap();
    // One MoE layer, 4 slots holding logical 0, 1, 0 and nothing:
    // window [5, 2, 3, 9] -> expert 0 = 5 + 3 = 8, expert 1 = 2.
    let path = write(
        dir.path(),
        "eplb.json",
        r#"{"expert_load_window": [[5,2,3,9]], "physical_to_logical_map": [[0,1,0,-1]]}"#,
    );
    let heat = read(
        &path,
        HeatFormat::VllmEplb,
        &HeatContext::default(),
        &mut Vec::new(),
    )
    .unwrap();
    assert_eq!(heat.total.counts, vec![vec![8.0, 2.0]]);
    let bad = write(
        dir.path(),
        "bad.json",
        r#"{"expert_load_window": [[5,2]], "physical_to_logical_map": [[0,1,0]]}"#,
    );
    let e = read(
        &bad,
        HeatFormat::VllmEplb,
        &HeatContext::default(),
        &mut Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("physical_to_logical_map[0]") && e.contains("3 slots"),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

#[test]
fn dumps_are_detected_by_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let sglang = write(dir.path(), "a.json", r#"{"logical_count": [[1, 2]]}"#);
    let vllm = write(
        dir.path(),
        "b.json",
        r#"{"expert_load_window": [[1]], "physical_to_logical_map": [[0]]}"#,
    );
    let ours = write(dir.path(), "c.json", r#"{"layers": [[1, 2]]}"#);
    let detect = super::super::detect_format;
    assert_eq!(detect(&sglang).unwrap(), HeatFormat::SglangJson);
    assert_eq!(detect(&vllm).unwrap(), HeatFormat::VllmEplb);
    assert_eq!(detect(&ours).unwrap(), HeatFormat::Json);
}

//! Tests of `engines`.

use super::*;
use residency_testkit::file_in;

/// `path` read as `format` without a model.
fn read_modelless(path: &Path, format: HeatFormat) -> Result<Heat> {
    read(path, format, &HeatContext::default(), &mut Vec::new())
}

#[test]
fn sglang_steps_add_up_and_model_rows_map_to_moe_ordinals() {
    let dir = tempfile::tempdir().unwrap();
    // Two steps, three transformer layers (layer 0 dense), 2 experts:
    // layer 1 = [1+2, 0+1] = [3, 1], layer 2 = [0+0, 4+1] = [0, 5].
    let path = file_in(
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
    let path = file_in(
        dir.path(),
        "eplb.json",
        r#"{"expert_load_window": [[5,2,3,9]], "physical_to_logical_map": [[0,1,0,-1]]}"#,
    );
    let heat = read_modelless(&path, HeatFormat::VllmEplb).unwrap();
    assert_eq!(heat.total.counts, vec![vec![8.0, 2.0]]);
    let bad = file_in(
        dir.path(),
        "bad.json",
        r#"{"expert_load_window": [[5,2]], "physical_to_logical_map": [[0,1,0]]}"#,
    );
    let e = read_modelless(&bad, HeatFormat::VllmEplb)
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
    let sglang = file_in(dir.path(), "a.json", r#"{"logical_count": [[1, 2]]}"#);
    let vllm = file_in(
        dir.path(),
        "b.json",
        r#"{"expert_load_window": [[1]], "physical_to_logical_map": [[0]]}"#,
    );
    let ours = file_in(dir.path(), "c.json", r#"{"layers": [[1, 2]]}"#);
    let detect = super::super::detect_format;
    assert_eq!(detect(&sglang).unwrap(), HeatFormat::SglangJson);
    assert_eq!(detect(&vllm).unwrap(), HeatFormat::VllmEplb);
    assert_eq!(detect(&ours).unwrap(), HeatFormat::Json);
}

fn moe_ctx() -> HeatContext {
    // Three transformer layers, layer 0 dense, 2 experts.
    HeatContext {
        moe_layers: Some(vec![1, 2]),
        model_layers: Some(3),
        experts: Some(vec![2, 2]),
        ..Default::default()
    }
}

#[test]
fn sglang_pt_steps_add_up_views_and_all() {
    let dir = tempfile::tempdir().unwrap();
    // The same counts as the JSON test above, as an int32 tensor
    // [2 steps, 3 layers, 2 experts]: layer 1 = [3, 1], layer 2 = [0, 5].
    let counts = Tensor {
        dtype: DType::Int32,
        shape: vec![2, 3, 2],
        values: vec![0., 0., 1., 0., 0., 4., 0., 0., 2., 1., 0., 1.],
    };
    let rank = Tensor {
        dtype: DType::Int64,
        shape: vec![],
        values: vec![0.0],
    };
    let path = dir.path().join("dist.pt");
    std::fs::write(
        &path,
        torch::write(&[("rank", &rank), ("logical_count", &counts)]),
    )
    .unwrap();
    assert_eq!(
        super::super::detect_format(&path).unwrap(),
        HeatFormat::SglangPt
    );
    let heat = read(&path, HeatFormat::SglangPt, &moe_ctx(), &mut Vec::new()).unwrap();
    assert_eq!(heat.total.counts, vec![vec![3.0, 1.0], vec![0.0, 5.0]]);
    // A bare float tensor [layers, experts] of MoE layers.
    let bare = Tensor {
        dtype: DType::Float32,
        shape: vec![2, 2],
        values: vec![0.5, 1.5, 2.0, 0.0],
    };
    std::fs::write(&path, torch::write(&[("x", &bare)])).unwrap();
    let e = read(&path, HeatFormat::SglangPt, &moe_ctx(), &mut Vec::new()).unwrap_err();
    assert!(
        e.to_string()
            .contains("a dict without `logical_count` (keys: x)"),
        "{e}"
    );
}

#[test]
fn sglang_pt_refuses_what_is_not_counts_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let map = Tensor {
        dtype: DType::Int64,
        shape: vec![1, 2],
        values: vec![0.0, 1.0],
    };
    let cube = Tensor {
        dtype: DType::Int64,
        shape: vec![1, 1, 1, 2],
        values: vec![0.0, 1.0],
    };
    let cases: [(Vec<u8>, &str); 4] = [
        (
            torch::write(&[("physical_to_logical_map", &map)]),
            "an expert location map",
        ),
        (
            torch::write(&[("logical_count", &cube)]),
            "shape [1, 1, 1, 2]",
        ),
        (b"\x80\x02}q\x00.".to_vec(), "legacy format"),
        (b"PK\x03\x04not a zip".to_vec(), "not a readable zip"),
    ];
    for (bytes, want) in cases {
        let path = dir.path().join("bad.pt");
        std::fs::write(&path, bytes).unwrap();
        let e = read(&path, HeatFormat::SglangPt, &moe_ctx(), &mut Vec::new()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(want) && !text.contains('\n'),
            "{want}: {text}"
        );
        assert!(text.starts_with(&path.display().to_string()), "{text}");
        assert!(text.contains("logical_count"), "the fix: {text}");
    }
}

#[test]
fn sglang_writes_read_back_with_model_rows() {
    let dir = tempfile::tempdir().unwrap();
    let heat = Heat {
        model: None,
        format: HeatFormat::Json,
        source_layers: 2,
        total: residency_core::heat::HeatTable {
            counts: vec![vec![3.0, 1.0], vec![0.0, 5.0]],
            tokens: None,
        },
        categories: Default::default(),
    };
    for (name, format) in [
        ("c.pt", HeatFormat::SglangPt),
        ("c.json", HeatFormat::SglangJson),
    ] {
        let path = dir.path().join(name);
        let mut warnings = Vec::new();
        super::write(&heat, &path, format, &moe_ctx(), &mut warnings).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(super::super::detect_format(&path).unwrap(), format);
        let back = read(&path, format, &moe_ctx(), &mut Vec::new()).unwrap();
        assert_eq!(back.total.counts, heat.total.counts, "{name}");
    }
    // The JSON, whole: dense layer 0's row is zero.
    let text = std::fs::read_to_string(dir.path().join("c.json")).unwrap();
    assert_eq!(text, "{\"logical_count\":[[[0,0],[3,1],[0,5]]]}\n");
    // The tensor: int64 [1, 3, 2].
    let value = torch::read(&std::fs::read(dir.path().join("c.pt")).unwrap()).unwrap();
    let Value::Dict(items) = value else { panic!() };
    assert_eq!(
        items[0].1,
        Value::Tensor(Tensor {
            dtype: DType::Int64,
            shape: vec![1, 3, 2],
            values: vec![0.0, 0.0, 3.0, 1.0, 0.0, 5.0],
        })
    );
    // Without a model the rows are MoE layers, said in a warning.
    let mut warnings = Vec::new();
    let path = dir.path().join("moe.pt");
    super::write(
        &heat,
        &path,
        HeatFormat::SglangPt,
        &HeatContext::default(),
        &mut warnings,
    )
    .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

//! Tests of `imatrix`. Files are written by the test kit's GGUF writer
//! (its own code, laid out after llama.cpp's `save_imatrix`), or by hand
//! for the legacy `.dat`.

use super::*;
use crate::heat::common::test_util::one_line;
use crate::heat::{detect_format, read_heat};
use residency_testkit::gguf::{imatrix, ImatrixWeight, F32};
use std::path::PathBuf;

fn weight(name: &str, row: u64, counts: &[f32]) -> ImatrixWeight {
    ImatrixWeight {
        name: name.to_string(),
        row,
        counts: counts.to_vec(),
    }
}

/// The three expert projections of layer `blk`, all with `counts`.
fn experts(blk: u32, counts: &[f32]) -> Vec<ImatrixWeight> {
    ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
        .iter()
        .map(|p| weight(&format!("blk.{blk}.{p}.weight"), 16, counts))
        .collect()
}

/// Layer 0 dense (one count per weight, as llama-imatrix keeps for a
/// dense matrix), layers 1 and 2 with 4 experts routed top-2 over one
/// chunk of 4 tokens: each layer's counts sum to 4 x 2 = 8.
fn three_layers() -> Vec<ImatrixWeight> {
    let mut w = vec![
        weight("blk.0.attn_q.weight", 16, &[4.0]),
        weight("blk.0.ffn_up.weight", 16, &[4.0]),
    ];
    w.extend(experts(1, &[3.0, 0.0, 4.0, 1.0]));
    w.extend(experts(2, &[2.0, 2.0, 2.0, 2.0]));
    w
}

fn write(dir: &Path, name: &str, chunks: u32, size: u32, w: &[ImatrixWeight]) -> PathBuf {
    let path = dir.join(name);
    imatrix(chunks, size, w).write(&path);
    path
}

/// The model context of `three_layers`: MoE layers 1 and 2, 4 experts each.
fn model_ctx(experts: usize) -> HeatContext {
    HeatContext {
        moe_layers: Some(vec![1, 2]),
        model_name: Some("tiny".into()),
        experts: Some(vec![experts, experts]),
        model_layers: Some(3),
        ..Default::default()
    }
}

#[test]
fn expert_counts_are_heat_per_moe_layer_with_the_chunks_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.imatrix.gguf", 1, 4, &three_layers());
    assert_eq!(detect_format(&path).unwrap(), HeatFormat::Imatrix);
    let mut notes = Vec::new();
    let heat = read_heat(&path, None, &model_ctx(4), &mut notes).unwrap();
    assert_eq!(heat.format, HeatFormat::Imatrix);
    assert_eq!(
        heat.total.counts,
        vec![vec![3.0, 0.0, 4.0, 1.0], vec![2.0, 2.0, 2.0, 2.0]]
    );
    // 1 chunk x 4 tokens through every layer.
    assert_eq!(heat.total.tokens, Some(vec![4, 4]));
    assert_eq!(heat.source_layers, 2);
    // What the counts are is said once.
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("prefill")
            && notes[0].contains("calibration.txt")
            && notes[0].contains("4 tokens"),
        "{notes:?}"
    );
}

#[test]
fn without_a_model_the_files_expert_layers_are_the_moe_layers_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.imatrix.gguf", 1, 4, &three_layers());
    let heat = read(&path, &HeatContext::default(), &mut Vec::new()).unwrap();
    assert_eq!(
        heat.total.counts,
        vec![vec![3.0, 0.0, 4.0, 1.0], vec![2.0, 2.0, 2.0, 2.0]]
    );
}

#[test]
fn projections_that_disagree_are_refused_naming_the_tensor_and_expert() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = three_layers();
    let down = w
        .iter_mut()
        .find(|w| w.name == "blk.1.ffn_down_exps.weight")
        .unwrap();
    down.counts[2] = 5.0;
    let path = write(dir.path(), "bad.imatrix.gguf", 1, 4, &w);
    let e = read(&path, &model_ctx(4), &mut Vec::new()).unwrap_err();
    // Tensors come in name order, so down is the reference gate is held to.
    let msg = one_line(e, "bad.imatrix.gguf", "blk.1.ffn_gate_exps.weight.counts");
    assert!(
        msg.contains("ffn_down_exps") && msg.contains("expert 2 counts 4 against 5"),
        "{msg}"
    );
}

#[test]
fn an_expert_dimension_unlike_the_models_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.imatrix.gguf", 1, 4, &three_layers());
    let e = read(&path, &model_ctx(8), &mut Vec::new()).unwrap_err();
    let msg = one_line(e, "m.imatrix.gguf", "blk.1.ffn_down_exps.weight.counts");
    assert!(
        msg.contains("counts 4 experts") && msg.contains("has 8"),
        "{msg}"
    );
}

#[test]
fn the_legacy_dat_is_refused_with_how_to_regenerate() {
    let dir = tempfile::tempdir().unwrap();
    // llama.cpp's `save_imatrix_legacy`: i32 entries; per entry i32 name
    // length, the name, i32 ncall, i32 nval, nval f32; then i32 chunks and
    // the i32-length dataset name.
    let mut b = Vec::new();
    b.extend(1i32.to_le_bytes());
    let name = b"blk.1.ffn_up_exps.weight";
    b.extend((name.len() as i32).to_le_bytes());
    b.extend(name);
    b.extend(3i32.to_le_bytes());
    b.extend(2i32.to_le_bytes());
    b.extend(1.5f32.to_le_bytes());
    b.extend(2.5f32.to_le_bytes());
    b.extend(3i32.to_le_bytes());
    b.extend(4i32.to_le_bytes());
    b.extend(b"wiki");
    let path = dir.path().join("imatrix.dat");
    std::fs::write(&path, &b).unwrap();
    assert_eq!(detect_format(&path).unwrap(), HeatFormat::Imatrix);
    let e = read(&path, &HeatContext::default(), &mut Vec::new()).unwrap_err();
    let msg = one_line(e, "imatrix.dat", "byte 0");
    assert!(
        msg.contains("legacy") && msg.contains("no count per expert"),
        "{msg}"
    );
    assert!(msg.contains("llama-imatrix -m MODEL.gguf"), "{msg}");
}

#[test]
fn one_count_for_all_experts_is_refused() {
    // What a legacy .dat converted to GGUF holds: one count per weight.
    let dir = tempfile::tempdir().unwrap();
    let mut w = three_layers();
    w.retain(|w| !w.name.starts_with("blk.2."));
    for w in w.iter_mut().filter(|w| w.name.starts_with("blk.1.")) {
        w.counts = vec![4.0];
    }
    let path = write(dir.path(), "old.imatrix.gguf", 1, 4, &w);
    let e = read(&path, &HeatContext::default(), &mut Vec::new()).unwrap_err();
    let msg = one_line(e, "old.imatrix.gguf", "blk.1.ffn_down_exps.weight.counts");
    assert!(msg.contains("one count for all experts"), "{msg}");
}

#[test]
fn a_model_file_given_as_heat_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    residency_testkit::gguf::qwen3moe(2).write(&path);
    let e = read_heat(&path, None, &HeatContext::default(), &mut Vec::new()).unwrap_err();
    let msg = one_line(e, "model.gguf", "general.type");
    assert!(
        msg.contains("model file") && msg.contains("--model"),
        "{msg}"
    );
}

#[test]
fn counts_beyond_the_chunks_tokens_drop_the_token_count_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    // 1 chunk of 2 tokens, but expert 2 of layer 1 counts 4 routes.
    let path = write(dir.path(), "m.imatrix.gguf", 1, 2, &three_layers());
    let mut notes = Vec::new();
    let heat = read(&path, &model_ctx(4), &mut notes).unwrap();
    assert_eq!(heat.total.tokens, None);
    assert!(
        notes.iter().any(|n| n.contains("more than the 2 tokens")),
        "{notes:?}"
    );
}

#[test]
fn the_identity_is_the_header_and_counts_not_the_sums() {
    let dir = tempfile::tempdir().unwrap();
    // Two files alike but for one in_sum2 value, a third with one count
    // changed (and its other projections, so that they agree).
    let with_sum = |sum: f32, count: f32| {
        let mut g = imatrix(1, 4, &[]);
        for p in ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"] {
            let w = format!("blk.1.{p}.weight");
            g = g
                .tensor_f32(&format!("{w}.in_sum2"), &[2, 2], vec![sum, 0.0, 0.0, 0.0])
                .tensor_f32(&format!("{w}.counts"), &[1, 2], vec![count, 1.0])
                .tensor(&format!("{w}.in_sum"), &[2, 2], F32);
        }
        g
    };
    let paths: Vec<PathBuf> = [(1.0, 3.0), (2.0, 3.0), (1.0, 2.0)]
        .iter()
        .enumerate()
        .map(|(i, &(sum, count))| {
            let p = dir.path().join(format!("{i}.imatrix.gguf"));
            with_sum(sum, count).write(&p);
            p
        })
        .collect();
    let ids: Vec<String> = paths.iter().map(|p| content_sha256(p).unwrap()).collect();
    assert_eq!(ids[0], ids[1], "the sums are not part of the identity");
    assert_ne!(ids[0], ids[2], "the counts are");
    // And the files themselves differ (the test would prove nothing if not).
    assert_ne!(
        std::fs::read(&paths[0]).unwrap(),
        std::fs::read(&paths[1]).unwrap()
    );
}

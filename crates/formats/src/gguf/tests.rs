//! The reader on GGUF files the test kit writes (`residency_testkit::gguf`).
//! Expected sizes are worked by hand from ggml's block layouts in the
//! comments.

use super::*;
use residency_core::model::StageKind;
use residency_testkit::gguf::*;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, g: &Gguf) -> PathBuf {
    let path = dir.join(name);
    g.write(&path);
    path
}

fn trunk_bytes(model: &Model, name: &str, layer: Option<usize>) -> Option<u64> {
    model
        .trunk
        .iter()
        .find(|t| t.name == name && t.layer == layer)
        .map(|t| t.bytes)
}

#[test]
fn a_qwen3moe_file_gives_the_tensors_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.gguf", &qwen3moe(2));
    assert!(is_gguf(&path));
    let (model, id, notes) = read_model(&path).unwrap();
    assert_eq!(model.name(), "tiny-qwen3moe");
    assert_eq!(model.top_k(), 2);
    assert_eq!(model.moe_layer_numbers(), vec![0, 1]);
    // One expert: gate and up are 32 rows of 64 Q4_0 values (2 blocks of 18
    // bytes = 36 bytes a row), down 64 rows of 32 (one block, 18 bytes):
    // 32*36 + 32*36 + 64*18 = 3456 bytes, in every tier.
    for m in &model.moe {
        assert_eq!(
            (m.experts, m.gpu_bytes, m.ram_bytes, m.disk_bytes),
            (4, 3456, 3456, 3456)
        );
    }
    // Attention with the layer's norms and router: attn_q 64 rows of 2 Q8_0
    // blocks (68 bytes) = 4352, two F32 norms of 64 = 2*256, the router
    // 64x4 F32 = 1024: 5888 bytes a layer.
    assert_eq!(trunk_bytes(&model, "attn", Some(0)), Some(5888));
    assert_eq!(trunk_bytes(&model, "attn", Some(1)), Some(5888));
    // The head: output 100 rows of 68 bytes = 6800, output_norm 256.
    assert_eq!(trunk_bytes(&model, "lm_head", None), Some(7056));
    assert_eq!(model.trunk.len(), 3, "{:?}", model.trunk);
    assert!(model.trunk.iter().any(|t| t.stage == StageKind::Head));
    // token_embd (6800 bytes) stays in host memory: said, not placed.
    assert!(notes.iter().any(|n| n.contains("token_embd")), "{notes:?}");
    // KV: 2 layers x 2 heads x (16 + 16) x 2 bytes (head dim 64 / 4 heads).
    assert_eq!(model.description.kv_bytes_per_token.map(|b| b.0), Some(256));
    // The trained context, llama.cpp's most `-c`: the file's context_length.
    assert_eq!(model.description.context_tokens, Some(32768));
    assert_eq!(id.len(), 64);
}

#[test]
fn a_layer_in_another_format_gets_its_own_expert_bytes() {
    // Layer 1's down projection in Q8_0 (as Q4_K_M files keep some in Q6_K):
    // 64 rows of one 34-byte block = 2176 bytes an expert, so its experts
    // are 1152 + 1152 + 2176 = 4480 bytes; layer 0 keeps 3456.
    let mut g = qwen3moe(2);
    let down = g
        .tensors
        .iter_mut()
        .find(|t| t.name == "blk.1.ffn_down_exps.weight")
        .unwrap();
    down.kind = Q8_0;
    let dir = tempfile::tempdir().unwrap();
    let (model, _, _) = read_model(&write(dir.path(), "m.gguf", &g)).unwrap();
    assert_eq!(model.moe[0].ram_bytes, 3456);
    assert_eq!(model.moe[1].ram_bytes, 4480);
    assert_eq!(model.moe[1].gpu_bytes, 4480);
}

#[test]
fn fused_gate_up_shared_experts_dense_layers_and_mtp_blocks() {
    // A GLM-4.5-shaped file: layer 0 dense, layers 1 and 2 MoE with a fused
    // gate_up and shared experts, layer 3 a multi-token-prediction block.
    let mut g = Gguf::new("glm4moe")
        .kv("glm4moe.block_count", Kv::U32(4))
        .kv("glm4moe.nextn_predict_layers", Kv::U32(1))
        .kv("glm4moe.embedding_length", Kv::U32(H as u32))
        .kv("glm4moe.expert_used_count", Kv::U32(2))
        .kv("glm4moe.attention.head_count", Kv::U32(4))
        .tensor("token_embd.weight", &[H, 10], F32)
        .tensor("output_norm.weight", &[H], F32)
        .tensor("blk.0.attn_q.weight", &[H, H], F32)
        .tensor("blk.0.ffn_gate.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_up.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_down.weight", &[96, H], F32);
    for l in 1..4 {
        let n = |s: &str| format!("blk.{l}.{s}");
        g = g
            .tensor(&n("attn_q.weight"), &[H, H], F32)
            .tensor(&n("exp_probs_b.bias"), &[E], F32)
            .tensor(&n("ffn_gate_up_exps.weight"), &[H, 2 * FF, E], MXFP4)
            .tensor(&n("ffn_down_exps.weight"), &[FF, H, E], MXFP4)
            .tensor(&n("ffn_gate_shexp.weight"), &[H, FF], F32)
            .tensor(&n("ffn_up_shexp.weight"), &[H, FF], F32)
            .tensor(&n("ffn_down_shexp.weight"), &[FF, H], F32);
    }
    let g = g.tensor("blk.3.nextn.eh_proj.weight", &[2 * H, H], F32);
    let dir = tempfile::tempdir().unwrap();
    let (model, _, notes) = read_model(&write(dir.path(), "glm.gguf", &g)).unwrap();
    assert_eq!(model.description.layers, 3);
    assert_eq!(model.moe_layer_numbers(), vec![1, 2]);
    // MXFP4 (17 bytes per 32): gate_up is 64 rows of 2 blocks = 2176, down
    // 64 rows of one block = 1088: 3264 bytes an expert.
    assert_eq!(model.moe[0].ram_bytes, 3264);
    assert_eq!(model.description.expert_intermediate, FF);
    // Dense FFN of layer 0: 3 x 64 x 96 F32 = 73728; shared experts of a
    // MoE layer: 3 x 64 x 32 F32 = 24576, in the experts stage.
    assert_eq!(trunk_bytes(&model, "dense_ffn", Some(0)), Some(73728));
    assert_eq!(trunk_bytes(&model, "shared_expert", Some(1)), Some(24576));
    // Attention of a MoE layer: attn_q 64x64 F32 = 16384 plus the 4-value
    // router bias = 16400.
    assert_eq!(trunk_bytes(&model, "attn", Some(2)), Some(16400));
    // No output.weight: the head is output_norm (256) plus the tied
    // embeddings (64 x 10 F32 = 2560).
    assert_eq!(trunk_bytes(&model, "lm_head", None), Some(2816));
    assert!(notes.iter().any(|n| n.contains("tied")), "{notes:?}");
    // Layer 3 is left out, with its 8 tensors.
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("8 tensors") && n.contains("multi-token")),
        "{notes:?}"
    );
}

#[test]
fn a_split_model_is_read_from_its_first_shard() {
    let dir = tempfile::tempdir().unwrap();
    // 3 global + 7 a layer = 17 tensors over the two shards.
    let [first, rest] = qwen3moe_split();
    let path = write(dir.path(), "m-00001-of-00002.gguf", &first);
    write(dir.path(), "m-00002-of-00002.gguf", &rest);
    let (model, _, _) = read_model(&path).unwrap();
    assert_eq!(model.moe_layer_numbers(), vec![0, 1]);
    assert_eq!(model.moe[1].ram_bytes, 3456);
    // The second shard missing: one line naming it.
    std::fs::remove_file(dir.path().join("m-00002-of-00002.gguf")).unwrap();
    let e = read_model(&path).unwrap_err().to_string();
    assert!(
        e.contains("m-00002-of-00002.gguf") && e.contains("missing"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);
}

/// The error of reading `g` (after `damage`) as one line naming the file.
fn error_of(g: &Gguf, damage: impl Fn(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.gguf", g);
    damage(&path);
    let e = read_model(&path).unwrap_err().to_string();
    assert!(e.contains("bad.gguf"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn bad_files_are_one_line_naming_the_file_and_the_place() {
    let none = |_: &Path| {};
    // Bad magic.
    let e = error_of(&qwen3moe(1), |p| {
        let mut b = std::fs::read(p).unwrap();
        b[..4].copy_from_slice(b"GGML");
        std::fs::write(p, b).unwrap();
    });
    assert!(e.contains("byte 0") && e.contains("magic"), "{e}");
    // Truncated inside the header.
    let e = error_of(&qwen3moe(1), |p| {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(200).unwrap();
    });
    assert!(e.contains("truncated"), "{e}");
    // A type this version does not know (31 was Q4_0_4_4, now removed).
    let e = error_of(
        &qwen3moe(1).tensor("blk.0.attn_k.weight", &[H, H], (31, 1, 1)),
        none,
    );
    assert!(
        e.contains("blk.0.attn_k.weight") && e.contains("ggml type 31"),
        "{e}"
    );
    // Tensor data past the end of the file.
    let e = error_of(&qwen3moe(1), |p| {
        let len = std::fs::metadata(p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(len - 64).unwrap();
    });
    assert!(e.contains("past the end"), "{e}");
    // A tensor no family holds is refused by name, not priced as zero.
    let e = error_of(
        &qwen3moe(1).tensor("blk.0.ssm_conv1d.weight", &[4, H], F32),
        none,
    );
    assert!(e.contains("blk.0.ssm_conv1d.weight"), "{e}");
    // Version 1 and a dense model.
    let mut v1 = qwen3moe(1);
    v1.version = 1;
    assert!(error_of(&v1, none).contains("version 1"));
    let mut dense = qwen3moe(1);
    dense.tensors.retain(|t| !t.name.contains("_exps"));
    assert!(error_of(&dense, none).contains("no routed expert"));
}

#[test]
fn deepseek2_mla_files_give_the_latent_kv_cache_and_a_leading_dense_layer() {
    // A DeepSeek-V2-Lite-shaped file: layer 0 dense, layers 1 and 2 MoE of
    // 4 Q4_0 experts with shared experts and a router bias; MLA attention.
    let mut g = Gguf::new("deepseek2")
        .kv("deepseek2.block_count", Kv::U32(3))
        .kv("deepseek2.leading_dense_block_count", Kv::U32(1))
        .kv("deepseek2.embedding_length", Kv::U32(H as u32))
        .kv("deepseek2.expert_used_count", Kv::U32(2))
        .kv("deepseek2.attention.head_count", Kv::U32(4))
        .kv("deepseek2.attention.kv_lora_rank", Kv::U32(32))
        .kv("deepseek2.rope.dimension_count", Kv::U32(16))
        .tensor("token_embd.weight", &[H, 10], F32)
        .tensor("output.weight", &[H, 10], F32)
        .tensor("blk.0.attn_kv_a_mqa.weight", &[H, 48], F32)
        .tensor("blk.0.ffn_gate.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_up.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_down.weight", &[96, H], F32);
    for l in 1..3 {
        let n = |s: &str| format!("blk.{l}.{s}");
        g = g
            .tensor(&n("attn_kv_a_mqa.weight"), &[H, 48], F32)
            .tensor(&n("attn_kv_a_norm.weight"), &[32], F32)
            .tensor(&n("exp_probs_b.bias"), &[E], F32)
            .tensor(&n("ffn_gate_exps.weight"), &[H, FF, E], Q4_0)
            .tensor(&n("ffn_up_exps.weight"), &[H, FF, E], Q4_0)
            .tensor(&n("ffn_down_exps.weight"), &[FF, H, E], Q4_0)
            .tensor(&n("ffn_gate_shexp.weight"), &[H, FF], F32);
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, _, _) = read_model(&write(dir.path(), "ds.gguf", &g)).unwrap();
    assert_eq!(model.moe_layer_numbers(), vec![1, 2]);
    // One Q4_0 expert as in the Qwen3 file: 3456 bytes.
    assert_eq!(model.moe[0].ram_bytes, 3456);
    // MLA caches the latent (32) and the rope key (16) per layer, F16, for
    // 3 layers: (32 + 16) x 3 x 2 = 288 bytes a token.
    assert_eq!(model.description.kv_bytes_per_token.map(|b| b.0), Some(288));
    // The dense FFN of layer 0: 3 x 64 x 96 F32; attention of a MoE layer:
    // kv_a 64 x 48 F32 (12288) + its norm (128) + the router bias (16).
    assert_eq!(trunk_bytes(&model, "dense_ffn", Some(0)), Some(73728));
    assert_eq!(trunk_bytes(&model, "attn", Some(1)), Some(12432));
    assert_eq!(trunk_bytes(&model, "shared_expert", Some(2)), Some(8192));
}

#[test]
fn gpt_oss_expert_biases_count_with_their_experts() {
    // gpt-oss: MXFP4 experts with F32 biases, attention sinks.
    let g = Gguf::new("gpt-oss")
        .kv("gpt-oss.block_count", Kv::U32(1))
        .kv("gpt-oss.embedding_length", Kv::U32(H as u32))
        .kv("gpt-oss.expert_used_count", Kv::U32(2))
        .tensor("token_embd.weight", &[H, 10], F32)
        .tensor("output.weight", &[H, 10], F32)
        .tensor("blk.0.attn_q.weight", &[H, H], F32)
        .tensor("blk.0.attn_sinks.weight", &[4], F32)
        .tensor("blk.0.post_attention_norm.weight", &[H], F32)
        .tensor("blk.0.ffn_gate_inp.weight", &[H, E], F32)
        .tensor("blk.0.ffn_gate_inp.bias", &[E], F32)
        .tensor("blk.0.ffn_gate_exps.weight", &[H, FF, E], MXFP4)
        .tensor("blk.0.ffn_gate_exps.bias", &[FF, E], F32)
        .tensor("blk.0.ffn_up_exps.weight", &[H, FF, E], MXFP4)
        .tensor("blk.0.ffn_up_exps.bias", &[FF, E], F32)
        .tensor("blk.0.ffn_down_exps.weight", &[FF, H, E], MXFP4)
        .tensor("blk.0.ffn_down_exps.bias", &[H, E], F32);
    let dir = tempfile::tempdir().unwrap();
    let (model, _, _) = read_model(&write(dir.path(), "oss.gguf", &g)).unwrap();
    // One expert: gate and up 32 rows of 2 MXFP4 blocks (34 bytes), down
    // 64 rows of one block (17): 1088 + 1088 + 1088; its biases 32 + 32 +
    // 64 F32 values: 512 bytes. 3776 in all.
    assert_eq!(model.moe[0].ram_bytes, 3776);
    // Attention: q 16384, sinks 16, the post-attention norm 256, the router
    // 1024 and its bias 16.
    assert_eq!(trunk_bytes(&model, "attn", Some(0)), Some(17696));
}

#[test]
fn llama4_interleaved_dense_and_moe_layers() {
    // Llama-4 interleaves: layers 0 and 2 dense, 1 and 3 MoE with a shared
    // expert.
    let mut g = Gguf::new("llama4")
        .kv("llama4.block_count", Kv::U32(4))
        .kv("llama4.embedding_length", Kv::U32(H as u32))
        .kv("llama4.expert_used_count", Kv::U32(1))
        .tensor("token_embd.weight", &[H, 10], F32)
        .tensor("output.weight", &[H, 10], F32)
        .tensor("rope_freqs.weight", &[8], F32);
    for l in 0..4 {
        let n = |s: &str| format!("blk.{l}.{s}");
        g = g.tensor(&n("attn_q.weight"), &[H, H], F32);
        g = if l % 2 == 0 {
            g.tensor(&n("ffn_up.weight"), &[H, 96], F32)
        } else {
            g.tensor(&n("ffn_gate_exps.weight"), &[H, FF, E], Q8_0)
                .tensor(&n("ffn_up_exps.weight"), &[H, FF, E], Q8_0)
                .tensor(&n("ffn_down_exps.weight"), &[FF, H, E], Q8_0)
                .tensor(&n("ffn_up_shexp.weight"), &[H, FF], F32)
        };
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, _, _) = read_model(&write(dir.path(), "l4.gguf", &g)).unwrap();
    assert_eq!(model.moe_layer_numbers(), vec![1, 3]);
    // Q8_0: gate and up 32 rows of 2 blocks of 34 = 68, down 64 rows of 34:
    // 2176 + 2176 + 2176 = 6528 bytes an expert.
    assert_eq!(model.moe[1].ram_bytes, 6528);
    assert_eq!(trunk_bytes(&model, "dense_ffn", Some(2)), Some(64 * 96 * 4));
    assert!(trunk_bytes(&model, "dense_ffn", Some(1)).is_none());
    // The head: output 2560 and the rope frequencies 32.
    assert_eq!(trunk_bytes(&model, "lm_head", None), Some(2592));
}

#[test]
fn mixtral_qwen2moe_and_olmoe_files() {
    // Mixtral is llama.cpp's `llama` architecture with routed experts;
    // Qwen2-MoE adds a shared expert with its own gate; OLMoE has none.
    // Each: one MoE layer of 4 Q4_0 experts of 3456 bytes (as above).
    let file = |arch: &'static str, extra: &[(&str, &[u64])]| {
        let key = |k: &str| format!("{arch}.{k}");
        let mut g = Gguf::new(arch)
            .kv(&key("block_count"), Kv::U32(1))
            .kv(&key("embedding_length"), Kv::U32(H as u32))
            .kv(&key("expert_used_count"), Kv::U32(2))
            .tensor("token_embd.weight", &[H, 10], F32)
            .tensor("output.weight", &[H, 10], F32)
            .tensor("blk.0.attn_q.weight", &[H, H], F32)
            .tensor("blk.0.ffn_gate_inp.weight", &[H, E], F32)
            .tensor("blk.0.ffn_gate_exps.weight", &[H, FF, E], Q4_0)
            .tensor("blk.0.ffn_up_exps.weight", &[H, FF, E], Q4_0)
            .tensor("blk.0.ffn_down_exps.weight", &[FF, H, E], Q4_0);
        for (name, dims) in extra {
            g = g.tensor(&format!("blk.0.{name}"), dims, F32);
        }
        g
    };
    let dir = tempfile::tempdir().unwrap();
    let qwen2_shared: &[(&str, &[u64])] = &[
        ("ffn_gate_inp_shexp.weight", &[H]),
        ("ffn_gate_shexp.weight", &[H, FF]),
        ("ffn_up_shexp.weight", &[H, FF]),
        ("ffn_down_shexp.weight", &[FF, H]),
    ];
    let olmoe_norms: &[(&str, &[u64])] =
        &[("attn_q_norm.weight", &[H]), ("attn_k_norm.weight", &[H])];
    for (arch, extra, shared) in [
        ("llama", &[][..], None),
        // 3 x 64 x 32 F32 = 24576, and the shared gate's 64 F32 = 256.
        ("qwen2moe", qwen2_shared, Some(24832)),
        ("olmoe", olmoe_norms, None),
    ] {
        let path = write(dir.path(), &format!("{arch}.gguf"), &file(arch, extra));
        let (model, _, _) = read_model(&path).unwrap();
        assert_eq!(model.moe[0].ram_bytes, 3456, "{arch}");
        assert_eq!(
            trunk_bytes(&model, "shared_expert", Some(0)),
            shared,
            "{arch}"
        );
    }
}

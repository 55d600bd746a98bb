//! A run's work over a GGUF, by hand.

use super::*;
use crate::llama_bench::runs::read_runs;
use residency_testkit::gguf::{Gguf, Kv, E, F32, FF, H};

/// A GLM-shaped file with its multi-token-prediction layer, all F32 (4
/// bytes a value), H = 64, FF = 32, E = 4 experts, top 2: layer 0 dense,
/// layer 1 MoE, layer 2 the MTP block (`nextn.*` and its own experts).
/// Every tensor on the CPU (`-ngl 0`); the embeddings stay out. By hand:
/// the head's norm 256 bytes; layer 0's attention 16,384 and dense FFN
/// 3 x 64 x 96 x 4 = 73,728; layer 1's attention 16,384 and its two
/// expert tensors of 32,768 bytes at 2 of 4 experts, 16,384 each; 139,520
/// bytes and 2 x 2 expert matrices a token. Layer 2 reads nothing at
/// decode, though `nextn.eh_proj` is of no family the planner places.
#[test]
fn the_mtp_layer_is_left_out_of_a_run_s_work() {
    let g = Gguf::new("glm4moe")
        .kv("glm4moe.block_count", Kv::U32(3))
        .kv("glm4moe.nextn_predict_layers", Kv::U32(1))
        .kv("glm4moe.embedding_length", Kv::U32(H as u32))
        .kv("glm4moe.expert_used_count", Kv::U32(2))
        .tensor("token_embd.weight", &[H, 10], F32)
        .tensor("output_norm.weight", &[H], F32)
        .tensor("blk.0.attn_q.weight", &[H, H], F32)
        .tensor("blk.0.ffn_gate.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_up.weight", &[H, 96], F32)
        .tensor("blk.0.ffn_down.weight", &[96, H], F32)
        .tensor("blk.1.attn_q.weight", &[H, H], F32)
        .tensor("blk.1.ffn_gate_exps.weight", &[H, FF, E], F32)
        .tensor("blk.1.ffn_down_exps.weight", &[FF, H, E], F32)
        .tensor("blk.2.attn_q.weight", &[H, H], F32)
        .tensor("blk.2.nextn.eh_proj.weight", &[2 * H, H], F32)
        .tensor("blk.2.ffn_gate_exps.weight", &[H, FF, E], F32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("glm.gguf");
    g.write(&path);
    let gguf = GgufModel::open(&path).unwrap();
    let json = dir.path().join("run.json");
    let run = serde_json::json!([{
        "model_filename": "glm.gguf", "model_size": tensor_bytes(&gguf), "n_threads": 16,
        "n_gpu_layers": 0, "n_prompt": 0, "n_gen": 32, "samples_ns": [1e9]
    }]);
    std::fs::write(&json, run.to_string()).unwrap();
    let runs = read_runs(&json).unwrap();
    let work = run_work(&gguf, &runs[0], &[]).unwrap();
    assert_eq!(work.cpu_bytes, 139_520.0);
    assert_eq!(work.cpu_matrices, 4.0);
}

//! Test data: the tensor names of the planned architectures, for the
//! classifier (`tensors`) and the llama.cpp export rules to be checked
//! against.

/// The tensors llama.cpp writes for each planned architecture (gguf-py's
/// `MODEL_TENSORS`, layer 1, the multi-token-prediction `nextn.*` left
/// out), without the `.weight` suffix each has in a file (`.bias` for
/// `exp_probs_b`).
const ARCH_TENSOR_BASES: [(&str, &str); 8] = [
    (
        "qwen3moe",
        "token_embd output_norm output blk.1.attn_norm blk.1.attn_q blk.1.attn_q_norm blk.1.attn_k blk.1.attn_k_norm blk.1.attn_v blk.1.attn_output blk.1.ffn_norm blk.1.ffn_gate_inp blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps",
    ),
    (
        "qwen2moe",
        "token_embd output_norm output blk.1.attn_norm blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_output blk.1.ffn_norm blk.1.ffn_gate_inp blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps blk.1.ffn_gate_inp_shexp blk.1.ffn_gate_shexp blk.1.ffn_down_shexp blk.1.ffn_up_shexp",
    ),
    (
        "deepseek2",
        "token_embd output_norm output rope_freqs blk.1.attn_norm blk.1.attn_q blk.1.attn_q_a blk.1.attn_q_b blk.1.attn_kv_a_mqa blk.1.attn_kv_b blk.1.attn_k blk.1.attn_k_b blk.1.attn_v blk.1.attn_v_b blk.1.attn_q_a_norm blk.1.attn_kv_a_norm blk.1.attn_output blk.1.attn_rot_embd blk.1.ffn_gate_inp blk.1.ffn_norm blk.1.ffn_gate blk.1.ffn_down blk.1.ffn_up blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps blk.1.ffn_gate_shexp blk.1.ffn_down_shexp blk.1.ffn_up_shexp blk.1.exp_probs_b",
    ),
    (
        "llama",
        "token_embd output_norm output rope_freqs blk.1.attn_norm blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_output blk.1.attn_rot_embd blk.1.ffn_gate_inp blk.1.ffn_norm blk.1.ffn_gate blk.1.ffn_down blk.1.ffn_up blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps",
    ),
    (
        "llama4",
        "token_embd output_norm output rope_freqs blk.1.attn_norm blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_output blk.1.attn_rot_embd blk.1.ffn_gate_inp blk.1.ffn_norm blk.1.ffn_gate blk.1.ffn_down blk.1.ffn_up blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps blk.1.ffn_gate_shexp blk.1.ffn_down_shexp blk.1.ffn_up_shexp",
    ),
    (
        "olmoe",
        "token_embd output_norm output blk.1.attn_output blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_norm blk.1.attn_q_norm blk.1.attn_k_norm blk.1.ffn_norm blk.1.ffn_gate_inp blk.1.ffn_gate_exps blk.1.ffn_up_exps blk.1.ffn_down_exps",
    ),
    (
        "gpt-oss",
        "token_embd output_norm output blk.1.attn_norm blk.1.post_attention_norm blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_output blk.1.attn_sinks blk.1.ffn_gate_inp blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps",
    ),
    (
        "glm4moe",
        "token_embd output_norm output blk.1.attn_norm blk.1.post_attention_norm blk.1.attn_q blk.1.attn_k blk.1.attn_v blk.1.attn_output blk.1.attn_q_norm blk.1.attn_k_norm blk.1.ffn_gate blk.1.ffn_down blk.1.ffn_up blk.1.ffn_gate_inp blk.1.ffn_gate_exps blk.1.ffn_down_exps blk.1.ffn_up_exps blk.1.ffn_gate_shexp blk.1.ffn_down_shexp blk.1.ffn_up_shexp blk.1.exp_probs_b",
    ),
];

/// `(architecture, tensor names as in a file)`.
pub(crate) fn arch_tensors() -> Vec<(&'static str, Vec<String>)> {
    ARCH_TENSOR_BASES
        .iter()
        .map(|&(arch, bases)| {
            let names = bases
                .split(' ')
                .map(|b| match b.ends_with("exp_probs_b") {
                    true => format!("{b}.bias"),
                    false => format!("{b}.weight"),
                })
                .collect();
            (arch, names)
        })
        .collect()
}

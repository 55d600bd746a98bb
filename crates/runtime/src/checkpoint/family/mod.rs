//! The per-family adapters: one table row per architecture says how its
//! Hugging Face checkpoint names, shapes and types every tensor; `tensors`
//! walks an `ArchConfig` through that row and lists every tensor of the
//! checkpoint with the object it belongs to (see the parent module for the
//! objects). Names follow the transformers modeling files
//! (`modeling_mixtral`, `modeling_deepseek` (V2, V3), `modeling_qwen2_moe`,
//! `modeling_qwen3_moe`, `modeling_olmoe`, `modeling_llama4`).
//!
//! A tensor belongs to one object, except a fused expert tensor (Llama-4's
//! `experts.gate_up_proj` and `experts.down_proj` hold every expert of a
//! layer): it is split along its first dimension, and expert `e`'s slice,
//! contiguous in the file, is that expert's part (`Owner::ExpertSlices`).
//!
//! This module owns the shape of a row (`ArchSpec` and the choices it
//! names) and the component names; `archs` holds the rows, `tensors` the
//! walk from a configuration to its tensors and their objects.

mod archs;
mod tensors;
#[cfg(test)]
mod tests;

pub use archs::ARCHS;
pub use tensors::{attention_bytes, tensors, Owner, TensorSpec};

use crate::identity::Family;
use residency_core::model::StageKind;

/// Trunk component names, as the model descriptions use them.
pub const ATTN: &str = "attn";
pub const DENSE_FFN: &str = "dense_ffn";
pub const SHARED_EXPERT: &str = "shared_expert";
pub const LM_HEAD: &str = "lm_head";
pub const EMBED: &str = "embed";

/// The trunk components a derived model description lists, in its order,
/// with their stage (`embed` is not among them: see the parent module).
pub const DESCRIBED_COMPONENTS: [(&str, StageKind); 4] = [
    (ATTN, StageKind::Dense),
    (DENSE_FFN, StageKind::Dense),
    (SHARED_EXPERT, StageKind::Experts),
    (LM_HEAD, StageKind::Head),
];

/// Architectures. A family may have several: Qwen2-MoE and Qwen3-MoE share
/// expert names but differ in attention and shared experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    Mixtral,
    DeepseekV2,
    DeepseekV3,
    Qwen2Moe,
    Qwen3Moe,
    Olmoe,
    /// Llama-4 (Scout, Maverick) as released: `Llama4ForConditionalGeneration`,
    /// the language model under `language_model.`, beside a vision tower.
    Llama4,
    /// Llama-4's language model alone (`Llama4ForCausalLM`, `llama4_text`).
    Llama4Text,
}

/// Attention of a GQA architecture: biases and query/key norms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// Qwen3: one `[head_dim]` norm shared by all heads.
    PerHead,
    /// OLMoE: a norm over all query (`[heads * head_dim]`) and key
    /// (`[kv_heads * head_dim]`) features.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Grouped-query attention. `head_dim_key`: config.json may set
    /// `head_dim`; otherwise it is `hidden_size / num_attention_heads`.
    Gqa {
        qkv_bias: bool,
        qk_norm: QkNorm,
        head_dim_key: bool,
    },
    /// DeepSeek's multi-head latent attention.
    Mla,
}

/// Which layers have a dense MLP instead of experts, and how config.json says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseLayers {
    /// Every layer has experts.
    None,
    /// DeepSeek: the first `first_k_dense_replace` layers.
    FirstK,
    /// Qwen: `mlp_only_layers`, and layers off `decoder_sparse_step`.
    MlpOnly,
    /// Llama-4: experts in `moe_layers` when given, else in every
    /// `interleave_moe_layer_step`-th layer (`step - 1, 2 * step - 1, ...`).
    Interleave,
}

/// Shared experts beside the routed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedExpert {
    None,
    /// DeepSeek: `mlp.shared_experts`, `n_shared_experts * moe_intermediate_size` wide.
    Deepseek,
    /// Qwen2-MoE: `mlp.shared_expert` (`shared_expert_intermediate_size`)
    /// and its sigmoid gate `mlp.shared_expert_gate` `[1, hidden]`.
    Qwen,
    /// Llama-4: `feed_forward.shared_expert` in every MoE layer, as wide as a
    /// routed expert (`intermediate_size`).
    Llama4,
}

/// How a MoE layer stores its routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertLayout {
    /// One module per expert, `<moe>.experts.{e}.<projection>`, for its gate,
    /// up and down projections (`nn.Linear` weights, `[out, in]`).
    PerExpert([&'static str; 3]),
    /// Llama-4: every expert of the layer in two parameters (no `.weight`
    /// suffix) in `x @ W` orientation: `<moe>.experts.gate_up_proj`
    /// `[experts, hidden, 2 * intermediate]` (gate, then up, along the last
    /// dimension) and `<moe>.experts.down_proj` `[experts, intermediate,
    /// hidden]`, each split per expert along its first dimension.
    Fused,
}

/// One architecture's row of the adapter table.
#[derive(Debug)]
pub struct ArchSpec {
    pub arch: Arch,
    pub family: Family,
    /// config.json `model_type` and `architectures[0]`.
    pub model_type: &'static str,
    pub architecture: &'static str,
    /// The `model_type` of config.json's `text_config`, when the language
    /// model's keys are nested there (a multimodal checkpoint).
    pub text_config: Option<&'static str>,
    /// Prefix of the language model's tensor names (`language_model.`).
    pub prefix: &'static str,
    /// Tensors that are no objects and that reading leaves alone: the vision
    /// tower and its projector, which the planner does not place.
    pub ignored_prefixes: &'static [&'static str],
    /// config.json key of the routed expert count and of one expert's width.
    pub experts_key: &'static str,
    pub expert_intermediate_key: &'static str,
    /// config.json key of the dense MLP's width.
    pub dense_intermediate_key: &'static str,
    /// Module holding router and experts in each MoE layer, and the router
    /// within it.
    pub moe_module: &'static str,
    pub router: &'static str,
    /// Module of a dense layer's MLP.
    pub dense_module: &'static str,
    pub experts: ExpertLayout,
    pub attention: AttentionKind,
    pub dense: DenseLayers,
    pub shared: SharedExpert,
    /// DeepSeek-V3's router has an F32 `e_score_correction_bias` `[experts]`.
    pub router_bias: bool,
    /// `rms_norm_eps` the family's configs use (written for engines; not read).
    pub rms_norm_eps: f64,
}

const GATE_UP_DOWN: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];

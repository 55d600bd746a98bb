//! The adapter table: one row per architecture, with the config.json keys
//! and tensor names of its transformers modeling file.

use super::{
    Arch, ArchSpec, AttentionKind, DenseLayers, ExpertLayout, QkNorm, SharedExpert, GATE_UP_DOWN,
};
use crate::identity::Family;

/// Llama-4 as released (the multimodal checkpoint); the text-only row reuses it.
const LLAMA4: ArchSpec = ArchSpec {
    arch: Arch::Llama4,
    family: Family::Llama4,
    model_type: "llama4",
    architecture: "Llama4ForConditionalGeneration",
    text_config: Some("llama4_text"),
    prefix: "language_model.",
    ignored_prefixes: &["vision_model.", "multi_modal_projector."],
    experts_key: "num_local_experts",
    expert_intermediate_key: "intermediate_size",
    dense_intermediate_key: "intermediate_size_mlp",
    moe_module: "feed_forward",
    router: "router",
    dense_module: "feed_forward",
    experts: ExpertLayout::Fused,
    // Its query/key norm (`use_qk_norm`) is an L2 norm without weights.
    attention: AttentionKind::Gqa {
        qkv_bias: false,
        qk_norm: QkNorm::None,
        head_dim_key: true,
    },
    dense: DenseLayers::Interleave,
    shared: SharedExpert::Llama4,
    router_bias: false,
    rms_norm_eps: 1e-5,
};

/// DeepSeek-V2; V3 differs in its router's bias only.
const DEEPSEEK_V2: ArchSpec = ArchSpec {
    arch: Arch::DeepseekV2,
    family: Family::DeepseekV2,
    model_type: "deepseek_v2",
    architecture: "DeepseekV2ForCausalLM",
    text_config: None,
    prefix: "",
    ignored_prefixes: &[],
    experts_key: "n_routed_experts",
    expert_intermediate_key: "moe_intermediate_size",
    dense_intermediate_key: "intermediate_size",
    moe_module: "mlp",
    router: "gate",
    dense_module: "mlp",
    experts: ExpertLayout::PerExpert(GATE_UP_DOWN),
    attention: AttentionKind::Mla,
    dense: DenseLayers::FirstK,
    shared: SharedExpert::Deepseek,
    router_bias: false,
    rms_norm_eps: 1e-6,
};

/// Qwen2-MoE: DeepSeek-V2's module layout with Qwen's expert count key,
/// attention, dense layers and shared expert; Qwen3-MoE differs from it in
/// its attention and shared expert.
const QWEN2_MOE: ArchSpec = ArchSpec {
    arch: Arch::Qwen2Moe,
    family: Family::QwenMoe,
    model_type: "qwen2_moe",
    architecture: "Qwen2MoeForCausalLM",
    experts_key: "num_experts",
    attention: AttentionKind::Gqa {
        qkv_bias: true,
        qk_norm: QkNorm::None,
        head_dim_key: false,
    },
    dense: DenseLayers::MlpOnly,
    shared: SharedExpert::Qwen,
    ..DEEPSEEK_V2
};

pub const ARCHS: [ArchSpec; 8] = [
    ArchSpec {
        arch: Arch::Mixtral,
        family: Family::Mixtral,
        model_type: "mixtral",
        architecture: "MixtralForCausalLM",
        text_config: None,
        prefix: "",
        ignored_prefixes: &[],
        experts_key: "num_local_experts",
        expert_intermediate_key: "intermediate_size",
        dense_intermediate_key: "intermediate_size",
        moe_module: "block_sparse_moe",
        router: "gate",
        dense_module: "mlp",
        // w1 gates, w3 is the up projection, w2 the down projection.
        experts: ExpertLayout::PerExpert(["w1", "w3", "w2"]),
        attention: AttentionKind::Gqa {
            qkv_bias: false,
            qk_norm: QkNorm::None,
            head_dim_key: true,
        },
        dense: DenseLayers::None,
        shared: SharedExpert::None,
        router_bias: false,
        rms_norm_eps: 1e-5,
    },
    DEEPSEEK_V2,
    ArchSpec {
        arch: Arch::DeepseekV3,
        family: Family::DeepseekV3,
        model_type: "deepseek_v3",
        architecture: "DeepseekV3ForCausalLM",
        router_bias: true,
        ..DEEPSEEK_V2
    },
    QWEN2_MOE,
    ArchSpec {
        arch: Arch::Qwen3Moe,
        model_type: "qwen3_moe",
        architecture: "Qwen3MoeForCausalLM",
        attention: AttentionKind::Gqa {
            qkv_bias: false,
            qk_norm: QkNorm::PerHead,
            head_dim_key: true,
        },
        shared: SharedExpert::None,
        ..QWEN2_MOE
    },
    ArchSpec {
        arch: Arch::Olmoe,
        family: Family::Olmoe,
        model_type: "olmoe",
        architecture: "OlmoeForCausalLM",
        text_config: None,
        prefix: "",
        ignored_prefixes: &[],
        experts_key: "num_experts",
        expert_intermediate_key: "intermediate_size",
        dense_intermediate_key: "intermediate_size",
        moe_module: "mlp",
        router: "gate",
        dense_module: "mlp",
        experts: ExpertLayout::PerExpert(GATE_UP_DOWN),
        attention: AttentionKind::Gqa {
            qkv_bias: false,
            qk_norm: QkNorm::Full,
            head_dim_key: false,
        },
        dense: DenseLayers::None,
        shared: SharedExpert::None,
        router_bias: false,
        rms_norm_eps: 1e-5,
    },
    LLAMA4,
    // The language model alone: the same tensors without the prefix.
    ArchSpec {
        arch: Arch::Llama4Text,
        model_type: "llama4_text",
        architecture: "Llama4ForCausalLM",
        text_config: None,
        prefix: "",
        ignored_prefixes: &[],
        ..LLAMA4
    },
];

impl Arch {
    pub fn spec(self) -> &'static ArchSpec {
        ARCHS
            .iter()
            .find(|s| s.arch == self)
            .expect("every architecture has a row")
    }
}

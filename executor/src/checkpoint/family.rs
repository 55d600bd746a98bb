//! The per-family adapters: one table row per architecture says how its
//! Hugging Face checkpoint names, shapes and types every tensor; the code
//! below walks a `ArchConfig` through that row and lists every tensor of the
//! checkpoint with the object it belongs to (see the parent module for the
//! objects). Names follow the transformers modeling files
//! (`modeling_mixtral`, `modeling_deepseek` (V2, V3), `modeling_qwen2_moe`,
//! `modeling_qwen3_moe`, `modeling_olmoe`, `modeling_llama4`).
//!
//! A tensor belongs to one object, except a fused expert tensor (Llama-4's
//! `experts.gate_up_proj` and `experts.down_proj` hold every expert of a
//! layer): it is split along its first dimension, and expert `e`'s slice,
//! contiguous in the file, is that expert's part (`Owner::ExpertSlices`).

use super::config::{ArchConfig, Attention};
use super::format::{tensor_bytes, ExpertFormat};
use crate::identity::{Family, ObjectKey};
use residency_planner::model::StageKind;
use safetensors::Dtype;
use std::ops::Range;

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

/// Which objects a tensor's bytes belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The whole tensor is part of one object.
    Object(ObjectKey),
    /// A fused expert tensor of MoE layer `layer`: slice `e` along the first
    /// dimension (`shape[0]` is the expert count), the `bytes / shape[0]`
    /// bytes at `e` times that from the tensor's start, is part of routed
    /// expert `e`.
    ExpertSlices { layer: u32 },
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
    ArchSpec {
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
    },
    ArchSpec {
        arch: Arch::DeepseekV3,
        family: Family::DeepseekV3,
        model_type: "deepseek_v3",
        architecture: "DeepseekV3ForCausalLM",
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
        router_bias: true,
        rms_norm_eps: 1e-6,
    },
    ArchSpec {
        arch: Arch::Qwen2Moe,
        family: Family::QwenMoe,
        model_type: "qwen2_moe",
        architecture: "Qwen2MoeForCausalLM",
        text_config: None,
        prefix: "",
        ignored_prefixes: &[],
        experts_key: "num_experts",
        expert_intermediate_key: "moe_intermediate_size",
        dense_intermediate_key: "intermediate_size",
        moe_module: "mlp",
        router: "gate",
        dense_module: "mlp",
        experts: ExpertLayout::PerExpert(GATE_UP_DOWN),
        attention: AttentionKind::Gqa {
            qkv_bias: true,
            qk_norm: QkNorm::None,
            head_dim_key: false,
        },
        dense: DenseLayers::MlpOnly,
        shared: SharedExpert::Qwen,
        router_bias: false,
        rms_norm_eps: 1e-6,
    },
    ArchSpec {
        arch: Arch::Qwen3Moe,
        family: Family::QwenMoe,
        model_type: "qwen3_moe",
        architecture: "Qwen3MoeForCausalLM",
        text_config: None,
        prefix: "",
        ignored_prefixes: &[],
        experts_key: "num_experts",
        expert_intermediate_key: "moe_intermediate_size",
        dense_intermediate_key: "intermediate_size",
        moe_module: "mlp",
        router: "gate",
        dense_module: "mlp",
        experts: ExpertLayout::PerExpert(GATE_UP_DOWN),
        attention: AttentionKind::Gqa {
            qkv_bias: false,
            qk_norm: QkNorm::PerHead,
            head_dim_key: true,
        },
        dense: DenseLayers::MlpOnly,
        shared: SharedExpert::None,
        router_bias: false,
        rms_norm_eps: 1e-6,
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

/// One tensor a checkpoint of a configuration holds, and its object(s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub owner: Owner,
}

impl TensorSpec {
    pub fn bytes(&self) -> u64 {
        tensor_bytes(self.dtype, &self.shape)
    }

    /// The objects the tensor's bytes belong to, each with its byte range
    /// within the tensor, in order: together they tile the tensor.
    pub fn parts(&self) -> Vec<(ObjectKey, Range<u64>)> {
        match self.owner {
            Owner::Object(ref key) => vec![(key.clone(), 0..self.bytes())],
            Owner::ExpertSlices { layer } => {
                let experts = self.shape[0] as u64;
                let slice = self.bytes() / experts;
                (0..experts)
                    .map(|e| {
                        let key = ObjectKey::Expert {
                            layer,
                            expert: e as u32,
                        };
                        (key, e * slice..(e + 1) * slice)
                    })
                    .collect()
            }
        }
    }
}

/// Collects the tensors of one configuration.
struct Collect<'a> {
    cfg: &'a ArchConfig,
    out: Vec<TensorSpec>,
}

impl Collect<'_> {
    fn push(&mut self, name: String, dtype: Dtype, shape: Vec<usize>, key: &ObjectKey) {
        self.out.push(TensorSpec {
            name,
            dtype,
            shape,
            owner: Owner::Object(key.clone()),
        });
    }

    /// A BF16 tensor.
    fn bf16(&mut self, name: String, shape: Vec<usize>, key: &ObjectKey) {
        self.push(name, Dtype::BF16, shape, key);
    }

    /// A linear weight `[rows, cols]` stored in `format`: `<module>.weight`
    /// and, when packed, `<module>.scales`.
    fn linear(
        &mut self,
        module: &str,
        rows: usize,
        cols: usize,
        format: ExpertFormat,
        key: &ObjectKey,
    ) {
        for (suffix, dtype, shape) in format.linear(rows, cols) {
            self.push(format!("{module}.{suffix}"), dtype, shape, key);
        }
    }

    /// A fused expert parameter of MoE layer `layer` holding every expert's
    /// `inputs` x `outputs` matrix, in the experts' format, split per expert.
    fn fused(&mut self, param: &str, inputs: usize, outputs: usize, layer: usize) {
        let cfg = self.cfg;
        for (suffix, dtype, shape) in cfg.format.fused(cfg.experts, inputs, outputs) {
            self.out.push(TensorSpec {
                name: format!("{param}{suffix}"),
                dtype,
                shape,
                owner: Owner::ExpertSlices {
                    layer: layer as u32,
                },
            });
        }
    }

    /// Gate, up and down projections of an MLP `inner` wide.
    fn mlp(
        &mut self,
        prefix: &str,
        names: [&str; 3],
        inner: usize,
        format: ExpertFormat,
        key: &ObjectKey,
    ) {
        let hidden = self.cfg.hidden;
        let [gate, up, down] = names;
        self.linear(&format!("{prefix}.{gate}"), inner, hidden, format, key);
        self.linear(&format!("{prefix}.{up}"), inner, hidden, format, key);
        self.linear(&format!("{prefix}.{down}"), hidden, inner, format, key);
    }

    fn attention(&mut self, layer: usize) {
        let cfg = self.cfg;
        let spec = cfg.arch.spec();
        let h = cfg.hidden;
        let p = format!("{}model.layers.{layer}", spec.prefix);
        let key = trunk(ATTN, Some(layer));
        let bf16 = ExpertFormat::Bf16;
        self.bf16(format!("{p}.input_layernorm.weight"), vec![h], &key);
        self.bf16(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            &key,
        );
        let a = format!("{p}.self_attn");
        match cfg.attention {
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
            } => {
                let (q, kv) = (heads * head_dim, kv_heads * head_dim);
                let AttentionKind::Gqa {
                    qkv_bias, qk_norm, ..
                } = spec.attention
                else {
                    unreachable!("a GQA configuration belongs to a GQA architecture")
                };
                for (proj, width) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                    self.linear(&format!("{a}.{proj}"), width, h, bf16, &key);
                    if qkv_bias {
                        self.bf16(format!("{a}.{proj}.bias"), vec![width], &key);
                    }
                }
                self.linear(&format!("{a}.o_proj"), h, q, bf16, &key);
                let norms = match qk_norm {
                    QkNorm::None => None,
                    QkNorm::PerHead => Some((head_dim, head_dim)),
                    QkNorm::Full => Some((q, kv)),
                };
                if let Some((q_norm, k_norm)) = norms {
                    self.bf16(format!("{a}.q_norm.weight"), vec![q_norm], &key);
                    self.bf16(format!("{a}.k_norm.weight"), vec![k_norm], &key);
                }
            }
            Attention::Mla {
                heads,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
            } => {
                let q_width = heads * (qk_nope_head_dim + qk_rope_head_dim);
                match q_lora_rank {
                    None => self.linear(&format!("{a}.q_proj"), q_width, h, bf16, &key),
                    Some(rank) => {
                        self.linear(&format!("{a}.q_a_proj"), rank, h, bf16, &key);
                        self.bf16(format!("{a}.q_a_layernorm.weight"), vec![rank], &key);
                        self.linear(&format!("{a}.q_b_proj"), q_width, rank, bf16, &key);
                    }
                }
                self.linear(
                    &format!("{a}.kv_a_proj_with_mqa"),
                    kv_lora_rank + qk_rope_head_dim,
                    h,
                    bf16,
                    &key,
                );
                self.bf16(
                    format!("{a}.kv_a_layernorm.weight"),
                    vec![kv_lora_rank],
                    &key,
                );
                self.linear(
                    &format!("{a}.kv_b_proj"),
                    heads * (qk_nope_head_dim + v_head_dim),
                    kv_lora_rank,
                    bf16,
                    &key,
                );
                self.linear(&format!("{a}.o_proj"), h, heads * v_head_dim, bf16, &key);
            }
        }
        if cfg.is_moe(layer) {
            let gate = format!("{p}.{}.{}", spec.moe_module, spec.router);
            self.linear(&gate, cfg.experts, h, bf16, &key);
            if spec.router_bias {
                self.push(
                    format!("{gate}.e_score_correction_bias"),
                    Dtype::F32,
                    vec![cfg.experts],
                    &key,
                );
            }
        }
    }

    fn feed_forward(&mut self, layer: usize) {
        let cfg = self.cfg;
        let spec = cfg.arch.spec();
        let p = format!("{}model.layers.{layer}", spec.prefix);
        let bf16 = ExpertFormat::Bf16;
        if !cfg.is_moe(layer) {
            let key = trunk(DENSE_FFN, Some(layer));
            self.mlp(
                &format!("{p}.{}", spec.dense_module),
                GATE_UP_DOWN,
                cfg.dense_intermediate,
                bf16,
                &key,
            );
            return;
        }
        let moe = format!("{p}.{}", spec.moe_module);
        let (h, inter) = (cfg.hidden, cfg.expert_intermediate);
        match spec.experts {
            ExpertLayout::PerExpert(projections) => {
                for expert in 0..cfg.experts {
                    let key = ObjectKey::Expert {
                        layer: layer as u32,
                        expert: expert as u32,
                    };
                    let module = format!("{moe}.experts.{expert}");
                    self.mlp(&module, projections, inter, cfg.format, &key);
                }
            }
            ExpertLayout::Fused => {
                self.fused(&format!("{moe}.experts.gate_up_proj"), h, 2 * inter, layer);
                self.fused(&format!("{moe}.experts.down_proj"), inter, h, layer);
            }
        }
        if cfg.shared_intermediate == 0 {
            return;
        }
        let key = trunk(SHARED_EXPERT, Some(layer));
        let width = cfg.shared_intermediate;
        match spec.shared {
            SharedExpert::None => {}
            SharedExpert::Deepseek => {
                let module = format!("{moe}.shared_experts");
                self.mlp(&module, GATE_UP_DOWN, width, bf16, &key);
            }
            SharedExpert::Qwen | SharedExpert::Llama4 => {
                let module = format!("{moe}.shared_expert");
                self.mlp(&module, GATE_UP_DOWN, width, bf16, &key);
                if spec.shared == SharedExpert::Qwen {
                    let gate = format!("{moe}.shared_expert_gate");
                    self.linear(&gate, 1, cfg.hidden, bf16, &key);
                }
            }
        }
    }
}

fn trunk(name: &str, layer: Option<usize>) -> ObjectKey {
    ObjectKey::Trunk {
        name: name.to_string(),
        layer: layer.map(|l| l as u32),
    }
}

/// Every tensor of a checkpoint of `cfg`, in checkpoint order: embedding,
/// then layer by layer, then final norm and output projection.
pub fn tensors(cfg: &ArchConfig) -> Vec<TensorSpec> {
    let mut c = Collect {
        cfg,
        out: Vec::new(),
    };
    let head = trunk(LM_HEAD, None);
    // With tied embeddings the one matrix is read every token as the head.
    let embed = if cfg.tie_word_embeddings {
        head.clone()
    } else {
        trunk(EMBED, None)
    };
    let (vocab, hidden) = (cfg.vocab, cfg.hidden);
    let prefix = cfg.spec().prefix;
    c.bf16(
        format!("{prefix}model.embed_tokens.weight"),
        vec![vocab, hidden],
        &embed,
    );
    for layer in 0..cfg.layers {
        c.attention(layer);
        c.feed_forward(layer);
    }
    c.bf16(format!("{prefix}model.norm.weight"), vec![hidden], &head);
    if !cfg.tie_word_embeddings {
        c.bf16(
            format!("{prefix}lm_head.weight"),
            vec![vocab, hidden],
            &head,
        );
    }
    c.out
}

/// Bytes of one layer's `attn` component (projections, norms, router).
pub fn attention_bytes(cfg: &ArchConfig, layer: usize) -> u64 {
    let mut c = Collect {
        cfg,
        out: Vec::new(),
    };
    c.attention(layer);
    c.out.iter().map(TensorSpec::bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::config::tests::small;

    #[test]
    fn every_table_row_is_reachable_and_distinct() {
        for (i, spec) in ARCHS.iter().enumerate() {
            assert_eq!(spec.arch.spec().model_type, spec.model_type);
            assert!(ARCHS[..i].iter().all(|o| o.model_type != spec.model_type));
        }
        for family in Family::ALL {
            assert!(ARCHS.iter().any(|s| s.family == family), "{family}");
        }
    }

    #[test]
    fn mixtral_names_and_objects() {
        let cfg = small(Arch::Mixtral);
        let t = tensors(&cfg);
        let find = |name: &str| t.iter().find(|s| s.name == name).unwrap();
        // int4, group 16: two values per byte, one scale per 16 inputs.
        let w2 = find("model.layers.1.block_sparse_moe.experts.3.w2.weight");
        assert_eq!((w2.dtype, w2.shape.clone()), (Dtype::U8, vec![64, 16]));
        let scales = find("model.layers.1.block_sparse_moe.experts.3.w2.scales");
        assert_eq!(
            (scales.dtype, scales.shape.clone()),
            (Dtype::F16, vec![64, 2])
        );
        assert_eq!(scales.owner, w2.owner);
        assert_eq!(
            w2.owner,
            Owner::Object(ObjectKey::Expert {
                layer: 1,
                expert: 3
            })
        );
        let gate = find("model.layers.0.block_sparse_moe.gate.weight");
        assert_eq!(gate.owner, Owner::Object(trunk(ATTN, Some(0))));
        let owner = |name: &str| find(name).owner.clone();
        assert_eq!(
            owner("model.norm.weight"),
            Owner::Object(trunk(LM_HEAD, None))
        );
        assert_eq!(
            owner("model.embed_tokens.weight"),
            Owner::Object(trunk(EMBED, None))
        );
        assert!(t.iter().all(|s| !s.name.contains("shared")));
    }

    #[test]
    fn llama4_fused_experts_split_per_expert() {
        // Layer 0 dense, 1 and 2 MoE; 4 experts of 32, hidden 64, int4 group 16.
        let cfg = small(Arch::Llama4);
        let t = tensors(&cfg);
        let find = |name: &str| {
            t.iter()
                .find(|s| s.name == format!("language_model.model.layers.{name}"))
                .unwrap_or_else(|| panic!("{name} missing"))
        };
        let gate_up = find("1.feed_forward.experts.gate_up_proj");
        assert_eq!(
            (gate_up.dtype, gate_up.shape.clone()),
            (Dtype::U8, vec![4, 32, 64])
        );
        assert_eq!(gate_up.owner, Owner::ExpertSlices { layer: 1 });
        let scales = find("1.feed_forward.experts.gate_up_proj_scales");
        assert_eq!(
            (scales.dtype, scales.shape.clone()),
            (Dtype::F16, vec![4, 4, 64])
        );
        let down = find("2.feed_forward.experts.down_proj");
        assert_eq!(down.shape, vec![4, 16, 64]);
        assert_eq!(
            find("2.feed_forward.experts.down_proj_scales").shape,
            vec![4, 2, 64]
        );
        // Expert e's slice: 32 * 64 bytes at e times that.
        let parts = gate_up.parts();
        assert_eq!(parts.len(), 4);
        for (e, (key, range)) in parts.into_iter().enumerate() {
            let expert = ObjectKey::Expert {
                layer: 1,
                expert: e as u32,
            };
            assert_eq!(
                (key, range),
                (expert, e as u64 * 2048..(e as u64 + 1) * 2048)
            );
        }
        let router = find("1.feed_forward.router.weight");
        assert_eq!(router.shape, vec![4, 64]);
        assert_eq!(router.owner, Owner::Object(trunk(ATTN, Some(1))));
        let dense = find("0.feed_forward.gate_proj.weight");
        assert_eq!(dense.shape, vec![96, 64]);
        assert_eq!(dense.owner, Owner::Object(trunk(DENSE_FFN, Some(0))));
        let shared = find("2.feed_forward.shared_expert.down_proj.weight");
        assert_eq!(shared.shape, vec![64, 32]);
        assert_eq!(shared.owner, Owner::Object(trunk(SHARED_EXPERT, Some(2))));
        assert!(t.iter().all(|s| s.name.starts_with("language_model.")));
        assert!(t.iter().any(|s| s.name == "language_model.lm_head.weight"));
        assert!(!t
            .iter()
            .any(|s| s.name.contains("router") && s.name.contains(".0.")));

        // The text-only checkpoint: the same tensors without the prefix.
        let text = tensors(&ArchConfig {
            arch: Arch::Llama4Text,
            ..cfg
        });
        assert_eq!(text.len(), t.len());
        for (a, b) in t.iter().zip(&text) {
            assert_eq!(a.name, format!("language_model.{}", b.name));
            assert_eq!((&a.shape, &a.owner), (&b.shape, &b.owner));
        }
    }

    #[test]
    fn deepseek_dense_layers_shared_experts_and_mla() {
        let cfg = small(Arch::DeepseekV3);
        let t = tensors(&cfg);
        let names: Vec<&str> = t.iter().map(|s| s.name.as_str()).collect();
        for name in [
            "model.layers.0.mlp.gate_proj.weight",
            "model.layers.1.mlp.experts.0.down_proj.weight",
            "model.layers.1.mlp.shared_experts.up_proj.weight",
            "model.layers.1.mlp.gate.e_score_correction_bias",
            "model.layers.0.self_attn.q_a_proj.weight",
            "model.layers.0.self_attn.q_b_proj.weight",
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
            "model.layers.0.self_attn.kv_b_proj.weight",
            "model.layers.0.self_attn.kv_a_layernorm.weight",
        ] {
            assert!(names.contains(&name), "{name} missing");
        }
        assert!(!names.contains(&"model.layers.0.mlp.gate.weight"));
        let bias = t
            .iter()
            .find(|s| s.name.ends_with("correction_bias"))
            .unwrap();
        assert_eq!(bias.dtype, Dtype::F32);
    }
}

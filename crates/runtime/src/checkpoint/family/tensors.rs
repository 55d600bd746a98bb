//! From a configuration to its tensors: every tensor's name, dtype and
//! shape, layer by layer as the row of its architecture says, and the
//! object (or, for a fused expert tensor, the per-expert slices) it
//! belongs to.

use super::super::config::{ArchConfig, Attention};
use super::super::format::{tensor_bytes, ExpertFormat};
use super::{
    AttentionKind, ExpertLayout, QkNorm, SharedExpert, ATTN, DENSE_FFN, EMBED, GATE_UP_DOWN,
    LM_HEAD, SHARED_EXPERT,
};
use crate::identity::ObjectKey;
use safetensors::Dtype;
use std::ops::Range;

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
            Attention::Mla(m) => {
                let q_width = m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim);
                match m.q_lora_rank {
                    None => self.linear(&format!("{a}.q_proj"), q_width, h, bf16, &key),
                    Some(rank) => {
                        self.linear(&format!("{a}.q_a_proj"), rank, h, bf16, &key);
                        self.bf16(format!("{a}.q_a_layernorm.weight"), vec![rank], &key);
                        self.linear(&format!("{a}.q_b_proj"), q_width, rank, bf16, &key);
                    }
                }
                self.linear(
                    &format!("{a}.kv_a_proj_with_mqa"),
                    m.kv_lora_rank + m.qk_rope_head_dim,
                    h,
                    bf16,
                    &key,
                );
                self.bf16(
                    format!("{a}.kv_a_layernorm.weight"),
                    vec![m.kv_lora_rank],
                    &key,
                );
                self.linear(
                    &format!("{a}.kv_b_proj"),
                    m.heads * (m.qk_nope_head_dim + m.v_head_dim),
                    m.kv_lora_rank,
                    bf16,
                    &key,
                );
                self.linear(
                    &format!("{a}.o_proj"),
                    h,
                    m.heads * m.v_head_dim,
                    bf16,
                    &key,
                );
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

pub(super) fn trunk(name: &str, layer: Option<usize>) -> ObjectKey {
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

//! The geometry a family adapter needs (`ArchConfig`), and its HF-style
//! `config.json`: read with each architecture's real keys
//! (`num_local_experts`, `n_routed_experts`, `num_experts`,
//! `moe_intermediate_size`, `first_k_dense_replace`, `mlp_only_layers`,
//! `interleave_moe_layer_step`, `q_lora_rank`, ...), and written with the
//! same keys by the generator. A multimodal Llama-4 config.json nests the
//! language model's keys under `text_config`; `torch_dtype` and
//! `quantization_config` are read at its top level.

use super::family::{Arch, ArchSpec, AttentionKind, DenseLayers, SharedExpert, ARCHS};
use super::format::ExpertFormat;
use super::{CheckpointError, Result, PACKING_VERSION};
use crate::identity::Family;
use residency_core::limits;
use serde_json::{json, Map, Value};
use std::fmt;
use std::path::Path;

/// Attention geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    Gqa {
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
    },
    Mla(Mla),
}

/// Multi-head latent attention (DeepSeek-V2/V3): keys and values through a
/// shared low-rank latent, queries through an optional one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mla {
    pub heads: usize,
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
}

impl fmt::Display for Attention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
            } => write!(f, "{heads} heads x {head_dim}, {kv_heads} key/value heads"),
            Attention::Mla(m) => {
                let q = m.q_lora_rank.map_or("none".to_string(), |r| r.to_string());
                write!(
                    f,
                    "MLA {} heads, q_lora_rank {q}, kv_lora_rank {}, qk {}+{}, v {}",
                    m.heads, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
                )
            }
        }
    }
}

/// Everything the adapters need to list a checkpoint's tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchConfig {
    pub arch: Arch,
    /// Transformer layers (`num_hidden_layers`).
    pub layers: usize,
    pub hidden: usize,
    pub vocab: usize,
    pub tie_word_embeddings: bool,
    /// Routed experts per MoE layer, and how many a token uses.
    pub experts: usize,
    pub top_k: usize,
    /// Width of one routed expert.
    pub expert_intermediate: usize,
    /// Layers with a dense MLP instead of experts, ascending.
    pub dense_layers: Vec<usize>,
    /// Width of the dense MLP (0 without dense layers).
    pub dense_intermediate: usize,
    /// Width of a MoE layer's shared expert(s) together (0 without).
    pub shared_intermediate: usize,
    pub attention: Attention,
    /// Storage format of the routed experts.
    pub format: ExpertFormat,
}

impl ArchConfig {
    pub fn spec(&self) -> &'static ArchSpec {
        self.arch.spec()
    }

    pub fn family(&self) -> Family {
        self.spec().family
    }

    pub fn is_moe(&self, layer: usize) -> bool {
        self.dense_layers.binary_search(&layer).is_err()
    }

    pub fn moe_layers(&self) -> Vec<usize> {
        (0..self.layers).filter(|&l| self.is_moe(l)).collect()
    }

    /// KV-cache bytes per token over all layers, in a BF16 cache (design §8).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let values_per_layer = match self.attention {
            Attention::Gqa {
                kv_heads, head_dim, ..
            } => 2 * kv_heads * head_dim,
            // MLA caches the compressed latent and the shared rope key.
            Attention::Mla(m) => m.kv_lora_rank + m.qk_rope_head_dim,
        };
        (values_per_layer * self.layers * 2) as u64
    }

    /// The HF-style `config.json` of this geometry, with the architecture's keys.
    pub fn to_json(&self) -> Value {
        let spec = self.spec();
        let mut m = Map::new();
        m.insert("torch_dtype".into(), json!("bfloat16"));
        m.insert("hidden_size".into(), json!(self.hidden));
        m.insert("num_hidden_layers".into(), json!(self.layers));
        m.insert("vocab_size".into(), json!(self.vocab));
        m.insert(
            "tie_word_embeddings".into(),
            json!(self.tie_word_embeddings),
        );
        m.insert("hidden_act".into(), json!("silu"));
        m.insert("rms_norm_eps".into(), json!(spec.rms_norm_eps));
        self.insert_attention(spec, &mut m);
        m.insert(spec.experts_key.into(), json!(self.experts));
        m.insert("num_experts_per_tok".into(), json!(self.top_k));
        m.insert(
            spec.expert_intermediate_key.into(),
            json!(self.expert_intermediate),
        );
        self.insert_dense_layers(spec, &mut m);
        self.insert_shared_experts(spec, &mut m);
        let mut m = self.nest_text_config(spec, m);
        m.insert("architectures".into(), json!([spec.architecture]));
        m.insert("model_type".into(), json!(spec.model_type));
        if let ExpertFormat::Packed { bits, group } = self.format {
            m.insert(
                "quantization_config".into(),
                json!({
                    "quant_method": "residency",
                    "bits": bits,
                    "group_size": group,
                    "packing_version": PACKING_VERSION,
                    "modules": "routed experts",
                }),
            );
        }
        Value::Object(m)
    }

    /// The attention keys of `config.json`: heads, and GQA's head size or MLA's ranks.
    fn insert_attention(&self, spec: &ArchSpec, m: &mut Map<String, Value>) {
        match self.attention {
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
            } => {
                m.insert("num_attention_heads".into(), json!(heads));
                m.insert("num_key_value_heads".into(), json!(kv_heads));
                if matches!(
                    spec.attention,
                    AttentionKind::Gqa {
                        head_dim_key: true,
                        ..
                    }
                ) {
                    m.insert("head_dim".into(), json!(head_dim));
                }
            }
            Attention::Mla(mla) => {
                m.insert("num_attention_heads".into(), json!(mla.heads));
                m.insert("num_key_value_heads".into(), json!(mla.heads));
                m.insert("q_lora_rank".into(), json!(mla.q_lora_rank));
                m.insert("kv_lora_rank".into(), json!(mla.kv_lora_rank));
                m.insert("qk_nope_head_dim".into(), json!(mla.qk_nope_head_dim));
                m.insert("qk_rope_head_dim".into(), json!(mla.qk_rope_head_dim));
                m.insert("v_head_dim".into(), json!(mla.v_head_dim));
            }
        }
    }

    /// The keys saying which layers are dense, the architecture's way, and
    /// the dense MLP's width.
    fn insert_dense_layers(&self, spec: &ArchSpec, m: &mut Map<String, Value>) {
        match spec.dense {
            DenseLayers::None => {}
            DenseLayers::FirstK => {
                m.insert(
                    "first_k_dense_replace".into(),
                    json!(self.dense_layers.len()),
                );
                m.insert("moe_layer_freq".into(), json!(1));
            }
            DenseLayers::MlpOnly => {
                m.insert("decoder_sparse_step".into(), json!(1));
                m.insert("mlp_only_layers".into(), json!(self.dense_layers));
            }
            DenseLayers::Interleave => {
                // The step when the MoE layers follow one (informative: an
                // explicit `moe_layers` wins, in transformers as here).
                let moe = self.moe_layers();
                let step = moe[0] + 1;
                if moe == (step - 1..self.layers).step_by(step).collect::<Vec<_>>() {
                    m.insert("interleave_moe_layer_step".into(), json!(step));
                }
                m.insert("moe_layers".into(), json!(moe));
            }
        }
        if !self.dense_layers.is_empty() {
            m.insert(
                spec.dense_intermediate_key.into(),
                json!(self.dense_intermediate),
            );
        }
    }

    /// The shared experts' key, the architecture's way.
    fn insert_shared_experts(&self, spec: &ArchSpec, m: &mut Map<String, Value>) {
        match spec.shared {
            SharedExpert::None => {}
            SharedExpert::Deepseek => {
                let n = self.shared_intermediate / self.expert_intermediate;
                m.insert(
                    "n_shared_experts".into(),
                    if n == 0 { Value::Null } else { json!(n) },
                );
            }
            SharedExpert::Qwen => {
                m.insert(
                    "shared_expert_intermediate_size".into(),
                    json!(self.shared_intermediate),
                );
            }
            // As wide as a routed expert: `intermediate_size`.
            SharedExpert::Llama4 => {}
        }
    }

    /// The language model's keys `m`, nested under `text_config` for a
    /// multimodal architecture, else as they are.
    fn nest_text_config(&self, spec: &ArchSpec, mut m: Map<String, Value>) -> Map<String, Value> {
        match spec.text_config {
            None => m,
            Some(text_type) => {
                m.insert("model_type".into(), json!(text_type));
                let mut top = Map::new();
                top.insert("torch_dtype".into(), json!("bfloat16"));
                top.insert(
                    "tie_word_embeddings".into(),
                    json!(self.tie_word_embeddings),
                );
                // No `vision_config`: generated checkpoints hold no vision tower.
                top.insert("text_config".into(), Value::Object(m));
                top
            }
        }
    }

    /// Reads a `config.json`; every problem names `path` and the key.
    pub fn from_json(text: &str, path: &Path) -> Result<ArchConfig> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            CheckpointError::input(
                path,
                format!("line {} column {}", e.line(), e.column()),
                format!("not valid JSON: {e}"),
                "write config.json as Hugging Face does",
            )
        })?;
        let Some(obj) = value.as_object() else {
            return Err(CheckpointError::input(
                path,
                "top level",
                "is not a JSON object",
                "write config.json as Hugging Face does",
            ));
        };
        let top = Keys {
            obj,
            path,
            prefix: "",
        };
        let spec = detect(&top)?;
        let keys = language_keys(&top, spec)?;
        let layers = keys.positive("num_hidden_layers")?;
        if layers > limits::MAX_LAYERS {
            return Err(keys.bad(
                "num_hidden_layers",
                format!("is {layers}, more than {} layers", limits::MAX_LAYERS),
            ));
        }
        let hidden = keys.positive("hidden_size")?;
        let expert_intermediate = keys.positive(spec.expert_intermediate_key)?;
        let dense_layers = dense_layers(spec, &keys, layers)?;
        let dense_intermediate = if dense_layers.is_empty() {
            0
        } else {
            keys.positive(spec.dense_intermediate_key)?
        };
        let shared_intermediate = shared_intermediate(spec, &keys, expert_intermediate)?;
        let attention = attention(spec, &keys, hidden)?;
        for k in [&top, &keys] {
            let dtype = k.obj.get("torch_dtype").or_else(|| k.obj.get("dtype"));
            if let Some(dtype) = dtype.filter(|d| d.as_str() != Some("bfloat16")) {
                return Err(k.bad(
                    "torch_dtype",
                    format!("is {dtype}; only bfloat16 checkpoints are supported"),
                ));
            }
        }
        // The language model's own key, else the top level's.
        let tie = [&keys, &top].into_iter().find_map(|k| {
            let v = k.obj.get("tie_word_embeddings").filter(|v| !v.is_null())?;
            Some((k, v))
        });
        let cfg = ArchConfig {
            arch: spec.arch,
            layers,
            hidden,
            vocab: keys.positive("vocab_size")?,
            tie_word_embeddings: match tie {
                None => false,
                Some((k, v)) => v
                    .as_bool()
                    .ok_or_else(|| k.bad("tie_word_embeddings", "is not true or false"))?,
            },
            experts: keys.positive(spec.experts_key)?,
            top_k: keys.positive("num_experts_per_tok")?,
            expert_intermediate,
            dense_layers,
            dense_intermediate,
            shared_intermediate,
            attention,
            format: quantization(&top)?,
        };
        cfg.check_sizes(&keys, spec)?;
        Ok(cfg)
    }

    /// The limits a config must keep: a MoE layer at least, routed
    /// experts the planner takes, and sizes the format's groups divide.
    fn check_sizes(&self, keys: &Keys, spec: &ArchSpec) -> Result<()> {
        if self.moe_layers().is_empty() {
            return Err(keys.bad("num_hidden_layers", "leaves no MoE layer"));
        }
        let routed = self.moe_layers().len().saturating_mul(self.experts);
        if routed > limits::MAX_ROUTED_EXPERTS {
            return Err(keys.bad(
            spec.experts_key,
            format!(
                "makes {routed} routed experts over the MoE layers, more than the {} the planner takes",
                limits::MAX_ROUTED_EXPERTS
            ),
        ));
        }
        for cols in [self.hidden, self.expert_intermediate] {
            if let Some(problem) = self.format.unfit_for(cols) {
                return Err(keys.bad("quantization_config.group_size", problem));
            }
        }
        Ok(())
    }
}

/// The keys of the language model: the top level's, or those under
/// `text_config` for the families that nest them.
fn language_keys<'a>(top: &Keys<'a>, spec: &ArchSpec) -> Result<Keys<'a>> {
    Ok(match spec.text_config {
        None => Keys {
            obj: top.obj,
            path: top.path,
            prefix: "",
        },
        Some(_) => Keys {
            obj: top
                .obj
                .get("text_config")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    top.bad(
                        "text_config",
                        format!(
                            "is missing or not an object; a {} config.json holds the language model's keys there",
                            spec.model_type
                        ),
                    )
                })?,
            path: top.path,
            prefix: "text_config.",
        },
    })
}

/// The shared experts' intermediate size, by the family's keys for them.
fn shared_intermediate(spec: &ArchSpec, keys: &Keys, expert_intermediate: usize) -> Result<usize> {
    Ok(match spec.shared {
        SharedExpert::None => 0,
        SharedExpert::Deepseek => {
            keys.optional("n_shared_experts")?.unwrap_or(0) * expert_intermediate
        }
        SharedExpert::Qwen => keys
            .optional("shared_expert_intermediate_size")?
            .unwrap_or(0),
        SharedExpert::Llama4 => expert_intermediate,
    })
}

/// The layers with a dense MLP, by the architecture's keys for them.
fn dense_layers(spec: &ArchSpec, keys: &Keys, layers: usize) -> Result<Vec<usize>> {
    Ok(match spec.dense {
        DenseLayers::None => Vec::new(),
        DenseLayers::FirstK => {
            let freq = keys.optional("moe_layer_freq")?.unwrap_or(1);
            if freq != 1 {
                return Err(keys.bad(
                    "moe_layer_freq",
                    format!("is {freq}; only 1 (every layer after the dense ones) is supported"),
                ));
            }
            let k = keys.optional("first_k_dense_replace")?.unwrap_or(0);
            (0..k.min(layers)).collect()
        }
        DenseLayers::MlpOnly => {
            let step = keys.optional("decoder_sparse_step")?.unwrap_or(1).max(1);
            let only = keys.layer_list("mlp_only_layers")?;
            (0..layers)
                .filter(|l| only.contains(l) || (l + 1) % step != 0)
                .collect()
        }
        DenseLayers::Interleave => {
            let moe = match keys.obj.get("moe_layers") {
                None | Some(Value::Null) => {
                    let step = keys
                        .optional("interleave_moe_layer_step")?
                        .unwrap_or(1)
                        .max(1);
                    (step - 1..layers).step_by(step).collect()
                }
                Some(_) => keys.layer_list("moe_layers")?,
            };
            if let Some(l) = moe.iter().find(|&&l| l >= layers) {
                return Err(keys.bad(
                    "moe_layers",
                    format!("names layer {l} of a model of {layers} layers"),
                ));
            }
            (0..layers).filter(|l| !moe.contains(l)).collect()
        }
    })
}

/// The attention geometry, by the architecture's kind of attention.
fn attention(spec: &ArchSpec, keys: &Keys, hidden: usize) -> Result<Attention> {
    Ok(match spec.attention {
        AttentionKind::Gqa { head_dim_key, .. } => {
            let heads = keys.positive("num_attention_heads")?;
            let kv_heads = keys.optional("num_key_value_heads")?.unwrap_or(heads);
            let head_dim = match keys.optional("head_dim")? {
                Some(d) if head_dim_key && d > 0 => d,
                _ if hidden.is_multiple_of(heads) => hidden / heads,
                _ => {
                    return Err(keys.bad(
                        "num_attention_heads",
                        format!("{heads} does not divide hidden_size {hidden}"),
                    ))
                }
            };
            if kv_heads == 0 || heads % kv_heads != 0 {
                return Err(keys.bad(
                    "num_key_value_heads",
                    format!("{kv_heads} does not divide num_attention_heads {heads}"),
                ));
            }
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
            }
        }
        AttentionKind::Mla => Attention::Mla(Mla {
            heads: keys.positive("num_attention_heads")?,
            q_lora_rank: keys.optional("q_lora_rank")?.filter(|&r| r > 0),
            kv_lora_rank: keys.positive("kv_lora_rank")?,
            qk_nope_head_dim: keys.positive("qk_nope_head_dim")?,
            qk_rope_head_dim: keys.positive("qk_rope_head_dim")?,
            v_head_dim: keys.positive("v_head_dim")?,
        }),
    })
}

/// The architecture from `model_type`, else `architectures[0]`.
fn detect(keys: &Keys) -> Result<&'static ArchSpec> {
    let model_type = keys.obj.get("model_type").and_then(Value::as_str);
    let architecture = keys
        .obj
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str);
    ARCHS
        .iter()
        .find(|s| Some(s.model_type) == model_type)
        .or_else(|| ARCHS.iter().find(|s| Some(s.architecture) == architecture))
        .ok_or_else(|| {
            let supported: Vec<&str> = ARCHS.iter().map(|s| s.model_type).collect();
            keys.bad(
                "model_type",
                format!(
                    "`{}` (architectures {}) is not a supported MoE family; supported: {}",
                    model_type.unwrap_or("none"),
                    architecture.unwrap_or("none"),
                    supported.join(", ")
                ),
            )
        })
}

/// The experts' storage format from `quantization_config`.
fn quantization(keys: &Keys) -> Result<ExpertFormat> {
    let Some(q) = keys.obj.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok(ExpertFormat::Bf16);
    };
    let field = |name: &str| q.get(name).and_then(Value::as_u64);
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    if method != "residency" {
        return Err(keys.bad(
            "quantization_config.quant_method",
            format!("`{method}` is not supported; BF16 checkpoints and residency's int8/int4 containers are"),
        ));
    }
    if field("packing_version") != Some(PACKING_VERSION as u64) {
        return Err(keys.bad(
            "quantization_config.packing_version",
            format!("is not {PACKING_VERSION}, the packing this build reads"),
        ));
    }
    let bits = match field("bits") {
        Some(b @ (4 | 8)) => b as u32,
        _ => return Err(keys.bad("quantization_config.bits", "is not 4 or 8")),
    };
    match field("group_size") {
        Some(group) if group > 0 => Ok(ExpertFormat::Packed { bits, group }),
        _ => Err(keys.bad("quantization_config.group_size", "is not a positive number")),
    }
}

/// Typed access to config.json keys with errors that name them.
struct Keys<'a> {
    obj: &'a Map<String, Value>,
    path: &'a Path,
    /// Where `obj` is in the file, for errors: `""` or `"text_config."`.
    prefix: &'static str,
}

impl Keys<'_> {
    fn bad(&self, key: &str, problem: impl Into<String>) -> CheckpointError {
        CheckpointError::input(
            self.path,
            format!("`{}{key}`", self.prefix),
            problem,
            "fix config.json, or regenerate the checkpoint",
        )
    }

    /// A whole number up to `limits::MAX_WIDTH` (2^24, beyond every count
    /// and width a real config gives), `None` when absent or null.
    fn optional(&self, key: &str) -> Result<Option<usize>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&n| n <= limits::MAX_WIDTH)
                .map(|n| Some(n as usize))
                .ok_or_else(|| {
                    self.bad(
                        key,
                        format!("is {v}, not a whole number from 0 to {}", limits::MAX_WIDTH),
                    )
                }),
        }
    }

    fn positive(&self, key: &str) -> Result<usize> {
        match self.optional(key)? {
            Some(n) if n > 0 => Ok(n),
            Some(_) => Err(self.bad(key, "is zero")),
            None => Err(self.bad(key, "is missing")),
        }
    }

    fn layer_list(&self, key: &str) -> Result<Vec<usize>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .map(|n| n as usize)
                        .ok_or_else(|| self.bad(key, format!("holds {v}, not a layer number")))
                })
                .collect(),
            Some(v) => Err(self.bad(key, format!("is {v}, not a list of layers"))),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small configuration of `arch` for unit tests: 3 layers (the first
    /// dense where the family has dense layers), 4 experts of width 32.
    pub(crate) fn small(arch: Arch) -> ArchConfig {
        let spec = arch.spec();
        let dense = spec.dense != DenseLayers::None;
        ArchConfig {
            arch,
            layers: 3,
            hidden: 64,
            vocab: 100,
            tie_word_embeddings: false,
            experts: 4,
            top_k: 2,
            expert_intermediate: 32,
            dense_layers: if dense { vec![0] } else { vec![] },
            dense_intermediate: if dense { 96 } else { 0 },
            shared_intermediate: if spec.shared == SharedExpert::None {
                0
            } else {
                32
            },
            attention: match spec.attention {
                AttentionKind::Mla => Attention::Mla(Mla {
                    heads: 4,
                    q_lora_rank: Some(48),
                    kv_lora_rank: 16,
                    qk_nope_head_dim: 4,
                    qk_rope_head_dim: 2,
                    v_head_dim: 4,
                }),
                AttentionKind::Gqa { .. } => Attention::Gqa {
                    heads: 4,
                    kv_heads: 2,
                    head_dim: 16,
                },
            },
            format: ExpertFormat::Packed { bits: 4, group: 16 },
        }
    }

    #[test]
    fn config_json_round_trips_for_every_architecture() {
        for spec in &ARCHS {
            let cfg = small(spec.arch);
            let text = cfg.to_json().to_string();
            let back = ArchConfig::from_json(&text, Path::new("config.json")).unwrap();
            assert_eq!(back, cfg, "{}", spec.model_type);
        }
    }

    #[test]
    fn bad_configs_name_the_key() {
        let good = small(Arch::Qwen3Moe).to_json();
        let cases: [(&str, Value, &str); 5] = [
            ("model_type", json!("llama"), "model_type"),
            ("num_experts", json!(0), "num_experts"),
            ("hidden_size", json!("wide"), "hidden_size"),
            ("torch_dtype", json!("float16"), "torch_dtype"),
            (
                "quantization_config",
                json!({"quant_method": "fp8"}),
                "quant_method",
            ),
        ];
        for (key, value, place) in cases {
            let mut v = good.clone();
            v[key] = value;
            if key == "model_type" {
                v["architectures"] = json!(["LlamaForCausalLM"]);
            }
            let e = ArchConfig::from_json(&v.to_string(), Path::new("c/config.json"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("c/config.json: "), "{e}");
            assert!(e.contains(place), "{place} not in {e}");
        }
    }
}

//! Object identity (design §7): what makes two resident byte ranges the same
//! object. Bytes loaded for one model, format, packing or layout are never
//! served for another: every field below takes part in equality.

use std::fmt;
use std::sync::Arc;

residency_core::named! {
    /// Tensor-naming family of a checkpoint (one adapter each).
    pub enum Family("family") {
        Mixtral = "mixtral",
        DeepseekV2 = "deepseek-v2",
        DeepseekV3 = "deepseek-v3",
        QwenMoe = "qwen-moe",
        Olmoe = "olmoe",
        Llama4 = "llama4",
    }
}

/// Everything about a model's bytes that an object's identity includes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelIdentity {
    /// sha256 (hex) over the checkpoint's index and safetensors headers.
    pub content_id: String,
    pub family: Family,
    /// Storage format of the experts (`bf16`, `int8`, `int4`).
    pub format: String,
    /// Quantisation group size (0 for unquantised formats).
    pub group_size: u32,
    pub hidden: u64,
    pub expert_intermediate: u64,
    pub packing_version: u32,
    pub layout_version: u32,
}

/// Which object of a model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKey {
    /// Routed expert `expert` of transformer layer `layer`.
    Expert { layer: u32, expert: u32 },
    /// A dense trunk component (`attn`, `lm_head`, ...), per layer or not.
    Trunk { name: String, layer: Option<u32> },
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectKey::Expert { layer, expert } => write!(f, "expert {expert} of layer {layer}"),
            ObjectKey::Trunk {
                name,
                layer: Some(l),
            } => write!(f, "{name} of layer {l}"),
            ObjectKey::Trunk { name, layer: None } => f.write_str(name),
        }
    }
}

/// A full identity: the model's and the object's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub model: Arc<ModelIdentity>,
    pub key: ObjectKey,
}

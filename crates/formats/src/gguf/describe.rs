//! The model description of a GGUF file: geometry from the architecture's
//! metadata, MoE layers and sizes from the tensors themselves. A layer is a
//! MoE layer when it holds routed expert tensors; its expert count is their
//! outermost dimension and one expert's bytes their bytes over it. Layers
//! llama.cpp does not run at decode (`{arch}.nextn_predict_layers`, the
//! multi-token-prediction blocks at the end) are left out, said in a note.

use super::tensors::{block_of, classify, Family};
use super::{GgufModel, TensorInfo, Value, ARCHITECTURES};
use residency_core::error::PlannerError;
use residency_core::limits;
use residency_core::model::{
    FormatSize, LayerOverride, LayerSet, ModelDescription, StageKind, TierFormats, TrunkEntry,
};
use residency_core::units::Bytes;
use std::collections::BTreeMap;
use std::path::Path;

/// The format name every tier holds: the file's own.
const FORMAT: &str = "gguf";

/// One MoE layer's routed experts as the file holds them.
#[derive(Debug, Default)]
struct LayerExperts {
    experts: u64,
    bytes: u64,
    intermediate: Option<u64>,
}

impl LayerExperts {
    /// One expert's bytes: the layer's expert tensors over their count.
    fn expert_bytes(&self) -> u64 {
        self.bytes / self.experts
    }
}

/// The description and the notes to show with it.
pub fn describe(gguf: &GgufModel) -> Result<(ModelDescription, Vec<String>), PlannerError> {
    let path = gguf.path();
    let meta = Metadata::of(gguf);
    let arch = meta.string("general.architecture")?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(meta.bad(
            "general.architecture",
            format!("is `{arch}`, not a MoE architecture residency plans"),
            &format!("plan one of: {}", ARCHITECTURES.join(", ")),
        ));
    }
    let key = |k: &str| format!("{arch}.{k}");
    let block_count = meta.whole(&key("block_count"))? as usize;
    if block_count > limits::MAX_LAYERS {
        return Err(meta.bad(
            &key("block_count"),
            format!("is {block_count}, more than {} layers", limits::MAX_LAYERS),
            "convert the model again with llama.cpp",
        ));
    }
    let nextn = meta.optional(&key("nextn_predict_layers"))?.unwrap_or(0) as usize;
    let layers = block_count.saturating_sub(nextn);
    let Scan {
        experts,
        mut trunk,
        skipped,
        skipped_bytes,
        has_output,
    } = scan(gguf, &key("block_count"), block_count, layers)?;
    let mut notes = Vec::new();
    if skipped > 0 {
        notes.push(format!(
            "{skipped} tensors ({}) of the last {nextn} layer(s), the multi-token-prediction blocks, are left out: decode does not run them",
            Bytes(skipped_bytes)
        ));
    }
    let Some(first) = experts.values().next() else {
        return Err(meta.bad(
            "tensors",
            format!(
                "holds no routed expert tensor (blk.N.ffn_*_exps): `{arch}` here is a dense model"
            ),
            "plan a MoE model",
        ));
    };
    let intermediate = match first.intermediate {
        Some(i) => i,
        None => meta.whole(&key("expert_feed_forward_length"))?,
    };
    head_and_embeddings(&mut trunk, has_output, &mut notes);
    let first_tier = FORMAT.to_string();
    let description = ModelDescription {
        name: meta
            .values
            .get("general.name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| file_stem(path)),
        source: Some(format!(
            "GGUF {} ({arch}, {} tensors in {} file(s))",
            path.display(),
            gguf.tensors().count(),
            gguf.shards.len()
        )),
        layers,
        moe_layers: LayerSet::List(experts.keys().copied().collect()),
        experts: first.experts as usize,
        top_k: meta.whole(&key("expert_used_count"))? as usize,
        hidden: meta.whole(&key("embedding_length"))?,
        expert_intermediate: intermediate,
        formats: BTreeMap::from([(
            first_tier.clone(),
            FormatSize::Bytes(Bytes(first.expert_bytes())),
        )]),
        tiers: TierFormats {
            gpu: first_tier.clone(),
            ram: first_tier.clone(),
            disk: first_tier,
        },
        trunk: trunk_entries(&trunk),
        kv_bytes_per_token: kv_bytes_per_token(&meta, arch, layers)?.map(Bytes),
        context_tokens: meta.optional(&key("context_length"))?.filter(|&t| t > 0),
        per_layer: per_layer_overrides(&experts, first),
    };
    Ok((description, notes))
}

/// What the scan of the tensors found.
struct Scan {
    experts: BTreeMap<usize, LayerExperts>,
    trunk: BTreeMap<(Family, Option<usize>), u64>,
    /// Tensors of the multi-token-prediction blocks, left out.
    skipped: usize,
    skipped_bytes: u64,
    has_output: bool,
}

/// Every tensor into its layer's experts or its trunk component; layers
/// from `layers` to `block_count` (named by `block_key`) are skipped, a
/// name of no family refused.
fn scan(
    gguf: &GgufModel,
    block_key: &str,
    block_count: usize,
    layers: usize,
) -> Result<Scan, PlannerError> {
    let path = gguf.path();
    let mut found = Scan {
        experts: BTreeMap::new(),
        trunk: BTreeMap::new(),
        skipped: 0,
        skipped_bytes: 0,
        has_output: false,
    };
    let mut unknown = Vec::new();
    for t in gguf.tensors() {
        let classified = classify(&t.name);
        // MTP blocks have tensor names of their own (`nextn.*`).
        let layer = classified.map_or_else(|| block_of(&t.name), |(l, _)| l);
        match layer {
            Some(l) if l >= block_count => {
                return Err(tensor_error(
                    path,
                    t,
                    format!("is in layer {l}, but {block_key} says {block_count}"),
                ))
            }
            Some(l) if l >= layers => {
                found.skipped_bytes += t.bytes;
                found.skipped += 1;
                continue;
            }
            _ => {}
        }
        let Some((layer, family)) = classified else {
            unknown.push(t.name.as_str());
            continue;
        };
        found.has_output |= t.name == "output.weight";
        match (family, layer) {
            (Family::RoutedExperts, Some(l)) => {
                add_experts(path, found.experts.entry(l).or_default(), t)?
            }
            _ => *found.trunk.entry((family, layer)).or_default() += t.bytes,
        }
    }
    if let Some(first) = unknown.first() {
        let shown: Vec<&str> = unknown.iter().take(5).copied().collect();
        let more = if unknown.len() > shown.len() {
            ", ..."
        } else {
            ""
        };
        return Err(PlannerError::input(
            path,
            format!("tensor {first}"),
            format!(
                "is not a tensor residency knows the place of ({} such: {}{more})",
                unknown.len(),
                shown.join(", ")
            ),
            "report the architecture and these names; residency does not guess their cost",
        ));
    }
    Ok(found)
}

/// The layers whose experts differ from the first MoE layer's in count or
/// bytes, with their own.
fn per_layer_overrides(
    experts: &BTreeMap<usize, LayerExperts>,
    first: &LayerExperts,
) -> Vec<LayerOverride> {
    experts
        .iter()
        .filter(|(_, e)| e.experts != first.experts || e.expert_bytes() != first.expert_bytes())
        .map(|(&layer, e)| LayerOverride {
            layer,
            experts: (e.experts != first.experts).then_some(e.experts as usize),
            expert_intermediate: None,
            expert_bytes: Some(Bytes(e.expert_bytes())),
        })
        .collect()
}

/// The head takes the tied embeddings when the file has no `output`; the
/// embeddings themselves stay out of the placement. Both said in notes.
fn head_and_embeddings(
    trunk: &mut BTreeMap<(Family, Option<usize>), u64>,
    has_output: bool,
    notes: &mut Vec<String>,
) {
    let Some(&embd) = trunk.get(&(Family::Embeddings, None)) else {
        return;
    };
    if !has_output {
        notes.push(format!(
            "no output.weight: the head uses the tied embeddings ({})",
            Bytes(embd)
        ));
        *trunk.entry((Family::Head, None)).or_default() += embd;
    }
    notes.push(format!(
        "token_embd ({}) is left out of the placement: llama.cpp keeps the embeddings in host memory",
        Bytes(embd)
    ));
}

/// Adds one routed-expert tensor to its layer, checking that every tensor
/// of the layer has the same expert count.
fn add_experts(path: &Path, layer: &mut LayerExperts, t: &TensorInfo) -> Result<(), PlannerError> {
    let count = *t.dims.last().expect("a tensor has a dimension");
    if count == 0 || (layer.experts != 0 && layer.experts != count) {
        return Err(tensor_error(
            path,
            t,
            format!(
                "holds {count} experts where the layer's other expert tensors hold {}",
                layer.experts
            ),
        ));
    }
    layer.experts = count;
    layer.bytes += t.bytes;
    // A weight's inner dimensions: gate and up [hidden, ff, experts],
    // down [ff, hidden, experts], fused gate_up [hidden, 2 ff, experts].
    if t.dims.len() == 3 && t.name.ends_with(".weight") {
        let ff = match t.name.rsplit('.').nth(1) {
            Some("ffn_gate_exps" | "ffn_up_exps") => Some(t.dims[1]),
            Some("ffn_gate_up_exps") => Some(t.dims[1] / 2),
            Some("ffn_down_exps") => Some(t.dims[0]),
            _ => None,
        };
        layer.intermediate = layer.intermediate.or(ff);
    }
    Ok(())
}

/// Trunk entries, one per component and size, with the layers of that size.
fn trunk_entries(trunk: &BTreeMap<(Family, Option<usize>), u64>) -> Vec<TrunkEntry> {
    let mut grouped: BTreeMap<(Family, u64), Vec<Option<usize>>> = BTreeMap::new();
    for (&(family, layer), &bytes) in trunk {
        if family.trunk_name().is_some() {
            grouped.entry((family, bytes)).or_default().push(layer);
        }
    }
    grouped
        .into_iter()
        .map(|((family, bytes), layers)| {
            let layers: Vec<usize> = layers.into_iter().flatten().collect();
            TrunkEntry {
                name: family.trunk_name().expect("filtered").to_string(),
                layers: (!layers.is_empty()).then_some(LayerSet::List(layers)),
                bytes: Bytes(bytes),
                stage: match family {
                    Family::Head => StageKind::Head,
                    Family::SharedExperts | Family::ChunkExperts => StageKind::Experts,
                    _ => StageKind::Dense,
                },
            }
        })
        .collect()
}

/// KV-cache bytes per token in an F16 cache: keys and values of every
/// key/value head of every layer, or MLA's latent and rope key.
/// `None` when the metadata lacks a size it needs; an error when one is
/// there but not a whole number.
fn kv_bytes_per_token(
    meta: &Metadata,
    arch: &str,
    layers: usize,
) -> Result<Option<u64>, PlannerError> {
    let key = |k: &str| meta.optional(&format!("{arch}.{k}"));
    let values_per_layer = match key("attention.kv_lora_rank")? {
        Some(rank) => key("rope.dimension_count")?.map(|rope| rank + rope),
        None => {
            let Some(heads) = key("attention.head_count")? else {
                return Ok(None);
            };
            let kv_key = format!("{arch}.attention.head_count_kv");
            let kv_heads = match meta.values.get(&kv_key) {
                None => heads,
                // Per layer in some files: the largest bounds the cache.
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| meta.counted(&kv_key, v))
                    .try_fold(0, |m, n| n.map(|n| n.max(m)))?,
                Some(v) => meta.counted(&kv_key, v)?,
            };
            let Some(embedding) = key("embedding_length")? else {
                return Ok(None);
            };
            let head_dim = embedding / heads.max(1);
            let k = key("attention.key_length")?.unwrap_or(head_dim);
            let v = key("attention.value_length")?.unwrap_or(head_dim);
            Some(kv_heads * (k + v))
        }
    };
    Ok(values_per_layer.map(|v| v * layers as u64 * 2))
}

/// The layer of a `blk.N.*` name.
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn tensor_error(path: &Path, t: &TensorInfo, problem: String) -> PlannerError {
    PlannerError::input(
        path,
        format!("tensor {}", t.name),
        problem,
        "convert the model again with llama.cpp",
    )
}

/// The metadata, with errors that name the key.
pub(crate) struct Metadata<'a> {
    path: &'a Path,
    values: &'a BTreeMap<String, Value>,
}

impl<'a> Metadata<'a> {
    pub(crate) fn of(gguf: &'a GgufModel) -> Metadata<'a> {
        Metadata {
            path: gguf.path(),
            values: gguf.metadata(),
        }
    }

    fn bad(&self, key: &str, problem: String, fix: &str) -> PlannerError {
        PlannerError::input(self.path, key, problem, fix)
    }

    pub(crate) fn string(&self, key: &str) -> Result<&'a str, PlannerError> {
        self.values.get(key).and_then(Value::as_str).ok_or_else(|| {
            self.bad(
                key,
                "is missing or not a string".into(),
                "convert the model again with llama.cpp",
            )
        })
    }

    /// A whole number that may be missing, below `limits::MAX_WIDTH` (2^24,
    /// beyond any layer count, width or context the planner sizes from);
    /// a negative, fractional, other-typed or larger value is refused, not
    /// read as missing.
    pub(crate) fn optional(&self, key: &str) -> Result<Option<u64>, PlannerError> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) => self.counted(key, v).map(Some),
        }
    }

    fn counted(&self, key: &str, v: &Value) -> Result<u64, PlannerError> {
        v.as_u64()
            .filter(|&n| n <= limits::MAX_WIDTH)
            .ok_or_else(|| {
                self.bad(
                    key,
                    format!("is {v}, not a whole number from 0 to {}", limits::MAX_WIDTH),
                    "convert the model again with llama.cpp",
                )
            })
    }

    /// A positive whole number the description needs.
    pub(crate) fn whole(&self, key: &str) -> Result<u64, PlannerError> {
        self.optional(key)?.filter(|&v| v > 0).ok_or_else(|| {
            self.bad(
                key,
                "is missing or 0".into(),
                "convert the model again with llama.cpp",
            )
        })
    }
}

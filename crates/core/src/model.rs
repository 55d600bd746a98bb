//! The model description (docs/design.md §3.2): geometry, expert sizes per format,
//! the format each tier holds, and the dense trunk. Read from YAML, strictly
//! validated, and expanded into per-layer facts the cost model uses.

use crate::error::{from_yaml, read_document, PlannerError, Result};
use crate::limits;
use crate::units::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Why top_k may not exceed a layer's experts: the router picks top_k
/// distinct experts per token and layer.
const TOP_K_REASON: &str = "a token cannot pick more experts than the layer has";

/// A set of transformer layers: a list `[0, 3]` or an inclusive range `"1..=26"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum LayerSet {
    List(Vec<usize>),
    Range(String),
}

impl LayerSet {
    /// The layers in ascending order, or a message saying what is wrong.
    pub fn expand(&self) -> std::result::Result<Vec<usize>, String> {
        let mut layers = match self {
            LayerSet::List(list) => list.clone(),
            LayerSet::Range(text) => {
                let (lo, hi) = text.split_once("..=").ok_or_else(|| {
                    format!("`{text}` is not a range; write it as \"1..=26\" or as a list [1, 2]")
                })?;
                let parse = |s: &str| {
                    s.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("`{text}`: `{s}` is not a layer number"))
                };
                let (lo, hi) = (parse(lo)?, parse(hi)?);
                if lo > hi {
                    return Err(format!("`{text}` is empty (start after end)"));
                }
                // Checked before the range is expanded into a list.
                if hi >= limits::MAX_LAYERS {
                    return Err(format!(
                        "`{text}` reaches layer {hi}; a model has at most {} layers",
                        limits::MAX_LAYERS
                    ));
                }
                (lo..=hi).collect()
            }
        };
        let before = layers.len();
        layers.sort_unstable();
        layers.dedup();
        if layers.len() != before {
            return Err("a layer is listed twice".into());
        }
        Ok(layers)
    }
}

/// Size of one routed expert in a format: bytes, or bits per parameter with
/// one f16 scale per `group` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FormatSize {
    Packed { bits: u32, group: u64 },
    Bytes(Bytes),
}

/// Read as a size, or as a map whose keys must be `bits` and `group`: an
/// unknown key is named with the known one nearest to it (an untagged
/// enum would only say that nothing matched).
impl<'de> Deserialize<'de> for FormatSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Packed(BTreeMap<String, u64>),
            Bytes(Bytes),
        }
        let fields = match Raw::deserialize(d)
            .map_err(|_| D::Error::custom("expected a size (`4 MiB`) or `{bits: B, group: G}`"))?
        {
            Raw::Bytes(b) => return Ok(FormatSize::Bytes(b)),
            Raw::Packed(fields) => fields,
        };
        const KNOWN: [&str; 2] = ["bits", "group"];
        if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(D::Error::custom(format!(
                "unknown field `{unknown}`, did you mean `{}`?",
                crate::names::nearest(unknown, &KNOWN)
            )));
        }
        let field = |name: &str| {
            fields
                .get(name)
                .copied()
                .ok_or_else(|| D::Error::custom(format!("missing field `{name}`")))
        };
        Ok(FormatSize::Packed {
            bits: u32::try_from(field("bits")?)
                .map_err(|_| D::Error::custom("`bits` is over 2^32"))?,
            group: field("group")?,
        })
    }
}

impl FormatSize {
    /// Bytes of an expert with `params` parameters; `reference_params` is the
    /// geometry a fixed byte size was given for (scaled, rounding up).
    pub fn expert_bytes(&self, params: u64, reference_params: u64) -> u64 {
        match *self {
            FormatSize::Packed { bits, group } => {
                (params * bits as u64).div_ceil(8) + params.div_ceil(group) * 2
            }
            FormatSize::Bytes(Bytes(b)) if params == reference_params => b,
            FormatSize::Bytes(Bytes(b)) => {
                ((b as u128 * params as u128).div_ceil(reference_params as u128)) as u64
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TierFormats {
    pub gpu: String,
    pub ram: String,
    pub disk: String,
}

/// The stage a trunk component runs in (docs/design.md §4, Stages).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    Dense,
    Experts,
    Head,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrunkEntry {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayerSet>,
    pub bytes: Bytes,
    pub stage: StageKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayerOverride {
    pub layer: usize,
    #[serde(default)]
    pub experts: Option<usize>,
    #[serde(default)]
    pub expert_intermediate: Option<u64>,
    /// One expert's exact bytes in every tier, over the formats (a GGUF
    /// file holds each layer in one format wherever it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_bytes: Option<Bytes>,
}

/// The model description file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelDescription {
    pub name: String,
    #[serde(default)]
    pub source: Option<String>,
    pub layers: usize,
    pub moe_layers: LayerSet,
    pub experts: usize,
    pub top_k: usize,
    pub hidden: u64,
    pub expert_intermediate: u64,
    pub formats: BTreeMap<String, FormatSize>,
    pub tiers: TierFormats,
    #[serde(default)]
    pub trunk: Vec<TrunkEntry>,
    #[serde(default)]
    pub kv_bytes_per_token: Option<Bytes>,
    /// The context the model was trained for (GGUF `context_length`), the
    /// most tokens an engine's KV cache is sized for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    #[serde(default)]
    pub per_layer: Vec<LayerOverride>,
}

/// One MoE layer, expanded: its transformer layer, expert count and the size
/// of one expert in each tier's format.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeLayer {
    pub layer: usize,
    pub experts: usize,
    pub gpu_bytes: u64,
    pub ram_bytes: u64,
    pub disk_bytes: u64,
}

/// One trunk component, expanded: one per layer of its entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TrunkComponent {
    pub name: String,
    pub layer: Option<usize>,
    pub bytes: u64,
    pub stage: StageKind,
}

/// A validated model: the description plus its expansion.
#[derive(Debug, Clone)]
pub struct Model {
    pub description: ModelDescription,
    pub moe: Vec<MoeLayer>,
    pub trunk: Vec<TrunkComponent>,
}

impl Model {
    pub fn name(&self) -> &str {
        &self.description.name
    }
    pub fn top_k(&self) -> usize {
        self.description.top_k
    }
    /// Transformer layer numbers of the MoE layers, by MoE ordinal.
    pub fn moe_layer_numbers(&self) -> Vec<usize> {
        self.moe.iter().map(|m| m.layer).collect()
    }
    /// Expert count per MoE ordinal.
    pub fn experts_per_layer(&self) -> Vec<usize> {
        self.moe.iter().map(|m| m.experts).collect()
    }
    pub fn expert_count(&self) -> usize {
        self.moe.iter().map(|m| m.experts).sum()
    }

    pub fn from_yaml_file(path: &Path) -> Result<Model> {
        Self::from_yaml_str(&read_document(path)?, path)
    }

    pub fn from_yaml_str(text: &str, path: &Path) -> Result<Model> {
        let description: ModelDescription = from_yaml(
            text,
            path,
            "see docs/design.md §3.2 for the model description fields",
        )?;
        Self::validate(description, path)
    }

    /// Checks the rules of docs/design.md §3.2 and expands layers and trunk.
    pub fn validate(d: ModelDescription, path: &Path) -> Result<Model> {
        let err = |place: &str, problem: String, fix: &str| {
            PlannerError::input(path, place, problem, fix)
        };
        check_sizes(&d, &err)?;
        let moe_layers = moe_layers(&d, &err)?;
        check_formats(&d, &err)?;
        let moe = expand_moe_layers(&d, &moe_layers, &err)?;
        let trunk = expand_trunk(&d, &moe_layers, &err)?;
        Ok(Model {
            description: d,
            moe,
            trunk,
        })
    }
}

/// A bad-input error at a place of the description being validated.
type InputError<'a> = dyn Fn(&str, String, &str) -> PlannerError + 'a;

/// Sizes are positive, and top_k fits in the experts.
fn check_sizes(d: &ModelDescription, err: &InputError) -> Result<()> {
    for (field, value) in [
        ("layers", d.layers as u64),
        ("experts", d.experts as u64),
        ("top_k", d.top_k as u64),
        ("hidden", d.hidden),
        ("expert_intermediate", d.expert_intermediate),
        ("context_tokens", d.context_tokens.unwrap_or(1)),
    ] {
        if value == 0 {
            return Err(err(field, "is zero".into(), "give a positive whole number"));
        }
    }
    for (field, value, max) in [
        ("layers", d.layers as u64, limits::MAX_LAYERS as u64),
        ("experts", d.experts as u64, limits::MAX_EXPERTS as u64),
        ("hidden", d.hidden, limits::MAX_WIDTH),
        (
            "expert_intermediate",
            d.expert_intermediate,
            limits::MAX_WIDTH,
        ),
    ] {
        if value > max {
            return Err(err(
                field,
                format!("is {value}, over the most the planner takes ({max})"),
                "give the model's real size",
            ));
        }
    }
    for (field, bytes) in d
        .trunk
        .iter()
        .map(|t| ("trunk", t.bytes))
        .chain(d.kv_bytes_per_token.map(|b| ("kv_bytes_per_token", b)))
        .chain(
            d.per_layer
                .iter()
                .filter_map(|o| o.expert_bytes.map(|b| ("per_layer", b))),
        )
        .chain(d.formats.values().filter_map(|f| match f {
            FormatSize::Bytes(b) => Some(("formats", *b)),
            FormatSize::Packed { .. } => None,
        }))
    {
        if bytes.0 > limits::MAX_BYTES {
            return Err(err(
                field,
                format!("gives {bytes}, over 1 EiB"),
                "give the size in bytes, such as `33 MiB`",
            ));
        }
    }
    if d.top_k > d.experts {
        return Err(err(
            "top_k",
            format!(
                "{} is larger than experts {}: {TOP_K_REASON}",
                d.top_k, d.experts
            ),
            "lower top_k or raise experts",
        ));
    }
    Ok(())
}

/// The MoE layers, each below `layers`.
fn moe_layers(d: &ModelDescription, err: &InputError) -> Result<Vec<usize>> {
    let moe_layers = d
        .moe_layers
        .expand()
        .map_err(|m| err("moe_layers", m, "list MoE layers as \"1..=26\" or [1, 2]"))?;
    if moe_layers.is_empty() {
        return Err(err(
            "moe_layers",
            "is empty".into(),
            "name at least one MoE layer",
        ));
    }
    if let Some(&last) = moe_layers.last() {
        if last >= d.layers {
            return Err(err(
                "moe_layers",
                format!(
                    "layer {last} does not exist (the model has {} layers, 0..={})",
                    d.layers,
                    d.layers - 1
                ),
                "keep MoE layers below `layers`",
            ));
        }
    }
    Ok(moe_layers)
}

/// Every format has a size, and every tier names a format.
fn check_formats(d: &ModelDescription, err: &InputError) -> Result<()> {
    for (name, format) in &d.formats {
        let bad = match *format {
            FormatSize::Packed { bits, group } => bits == 0 || bits > 64 || group == 0,
            FormatSize::Bytes(Bytes(b)) => b == 0,
        };
        if bad {
            return Err(err(
                &format!("formats.{name}"),
                "is zero or out of range".into(),
                "give bytes > 0 or {bits: 1..=64, group: > 0}",
            ));
        }
    }
    for (tier, format) in [
        ("gpu", &d.tiers.gpu),
        ("ram", &d.tiers.ram),
        ("disk", &d.tiers.disk),
    ] {
        if !d.formats.contains_key(format) {
            return Err(err(
                &format!("tiers.{tier}"),
                format!("names format `{format}`, which `formats` does not list"),
                "add it to `formats` or name a listed one",
            ));
        }
    }
    Ok(())
}

/// Each MoE layer with its expert count and per-tier expert bytes, after
/// the per-layer overrides.
fn expand_moe_layers(
    d: &ModelDescription,
    moe_layers: &[usize],
    err: &InputError,
) -> Result<Vec<MoeLayer>> {
    let reference_params = 3 * d.hidden * d.expert_intermediate;
    let size = |tier: &str, params: u64| d.formats[tier].expert_bytes(params, reference_params);
    let mut moe = Vec::with_capacity(moe_layers.len());
    for &layer in moe_layers {
        let mut experts = d.experts;
        let mut intermediate = d.expert_intermediate;
        let mut exact_bytes = None;
        for (i, o) in d.per_layer.iter().enumerate() {
            if o.layer == layer {
                experts = o.experts.unwrap_or(experts);
                intermediate = o.expert_intermediate.unwrap_or(intermediate);
                exact_bytes = o.expert_bytes.map(|b| b.0).or(exact_bytes);
                if experts > limits::MAX_EXPERTS
                    || intermediate > limits::MAX_WIDTH
                    || exact_bytes.is_some_and(|b| b > limits::MAX_BYTES)
                {
                    return Err(err(
                        &format!("per_layer[{i}]"),
                        "sets a size over the most the planner takes".into(),
                        "give the layer's real sizes",
                    ));
                }
                if experts == 0 || intermediate == 0 || exact_bytes == Some(0) {
                    return Err(err(
                        &format!("per_layer[{i}]"),
                        "sets a zero size".into(),
                        "give positive values",
                    ));
                }
                if experts < d.top_k {
                    return Err(err(
                        &format!("per_layer[{i}].experts"),
                        format!(
                            "{experts} is smaller than top_k {}: {TOP_K_REASON}",
                            d.top_k
                        ),
                        "raise this layer's experts or lower top_k",
                    ));
                }
            }
        }
        let before: usize = moe.iter().map(|m: &MoeLayer| m.experts).sum();
        if before + experts > limits::MAX_ROUTED_EXPERTS {
            return Err(err(
                "experts",
                format!(
                    "makes more than {} routed experts by layer {layer}, over the most the planner takes",
                    limits::MAX_ROUTED_EXPERTS
                ),
                "give the model's real size",
            ));
        }
        let params = 3 * d.hidden * intermediate;
        let size = |tier: &str| exact_bytes.unwrap_or_else(|| size(tier, params));
        moe.push(MoeLayer {
            layer,
            experts,
            gpu_bytes: size(&d.tiers.gpu),
            ram_bytes: size(&d.tiers.ram),
            disk_bytes: size(&d.tiers.disk),
        });
    }
    for (i, o) in d.per_layer.iter().enumerate() {
        if !moe_layers.contains(&o.layer) {
            return Err(err(
                &format!("per_layer[{i}].layer"),
                format!("layer {} is not a MoE layer", o.layer),
                "per-layer overrides apply to layers listed in moe_layers",
            ));
        }
    }
    Ok(moe)
}

/// One trunk component per `(name, layer)`.
fn expand_trunk(
    d: &ModelDescription,
    moe_layers: &[usize],
    err: &InputError,
) -> Result<Vec<TrunkComponent>> {
    let mut trunk = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, t) in d.trunk.iter().enumerate() {
        let place = format!("trunk[{i}] ({})", t.name);
        if t.bytes.0 == 0 {
            return Err(err(
                &place,
                "has zero bytes".into(),
                "give its size, e.g. `33 MiB`",
            ));
        }
        let layers = match (&t.layers, t.stage) {
            (Some(_), StageKind::Head) => {
                return Err(err(
                    &place,
                    "is a head component with `layers`".into(),
                    "drop `layers` or use stage dense",
                ))
            }
            (None, StageKind::Dense | StageKind::Experts) => {
                return Err(err(
                    &place,
                    "has no `layers` but runs in a per-layer stage".into(),
                    "give `layers`, or use stage head",
                ))
            }
            (None, StageKind::Head) => vec![None],
            (Some(set), stage) => {
                let layers = set
                    .expand()
                    .map_err(|m| err(&place, m, "write layers as \"0..=26\" or a list"))?;
                for &l in &layers {
                    if l >= d.layers {
                        return Err(err(
                            &place,
                            format!("layer {l} does not exist"),
                            "keep layers below `layers`",
                        ));
                    }
                    if stage == StageKind::Experts && !moe_layers.contains(&l) {
                        return Err(err(
                            &place,
                            format!("stage experts in layer {l}, which is not a MoE layer"),
                            "use stage dense, or list only MoE layers",
                        ));
                    }
                }
                layers.into_iter().map(Some).collect()
            }
        };
        for layer in layers {
            if !seen.insert((t.name.clone(), layer)) {
                return Err(err(
                    &place,
                    "repeats a component of the same name and layer".into(),
                    "give each component a unique name",
                ));
            }
            trunk.push(TrunkComponent {
                name: t.name.clone(),
                layer,
                bytes: t.bytes.0,
                stage: t.stage,
            });
        }
    }
    Ok(trunk)
}

#[cfg(test)]
mod tests;

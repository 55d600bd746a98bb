//! Opening a checkpoint directory: `config.json`, the shard index
//! (`model.safetensors.index.json`, or one `model.safetensors`), and each
//! shard's header only (its 8-byte length and JSON, parsed into the
//! `safetensors` crate's types; tensor data is never read here). Every tensor
//! is checked against what the family adapter expects from `config.json`
//! and against the shard's length, so a truncated shard or a wrong dtype or
//! shape is an error naming the tensor. The result maps each object to the
//! byte extents of its tensors (for a fused expert tensor, each expert's
//! slice of it), carries the model identity, and derives the planner's model
//! description (`residency plan --model DIR`).

use super::config::ArchConfig;
use super::family::{self, TensorSpec};
use super::{CheckpointError, Result, LAYOUT_VERSION, PACKING_VERSION};
use crate::identity::{ModelIdentity, ObjectKey};
use residency_core::model::{FormatSize, LayerSet, ModelDescription, TierFormats, TrunkEntry};
use residency_core::units::Bytes;
use safetensors::tensor::{Metadata, TensorInfo};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const CONFIG_FILE: &str = "config.json";
pub const INDEX_FILE: &str = "model.safetensors.index.json";
pub const SINGLE_SHARD_FILE: &str = "model.safetensors";

/// The safetensors crate's limit on a header, applied before reading one.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Where one of an object's byte ranges lies: a whole tensor, or the slice
/// of a fused expert tensor that is one expert's (`family::Owner`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub shard: PathBuf,
    /// Offset of the first byte in the shard file.
    pub offset: u64,
    pub len: u64,
    /// The tensor the range lies in.
    pub tensor: String,
}

/// An opened, validated checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: ArchConfig,
    pub identity: ModelIdentity,
    /// Shard files, in name order.
    pub shards: Vec<PathBuf>,
    /// Every object's extents, in shard and offset order.
    pub objects: BTreeMap<ObjectKey, Vec<Extent>>,
}

/// One tensor as a shard header gives it.
struct Found {
    shard: usize,
    offset: u64,
    info: TensorInfo,
}

impl Checkpoint {
    /// Opens `dir`'s checkpoint, every tensor checked (see the module).
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let (config, config_text) = read_config(dir)?;
        let mut content = Sha256::new();
        content.update(config_text.as_bytes());
        let (shard_names, index) = shard_files(dir, &mut content)?;
        let shards: Vec<PathBuf> = shard_names.iter().map(|n| dir.join(n)).collect();
        let mut found = read_headers(&shards, &shard_names, index.as_ref(), &mut content)?;
        if let Some(index) = &index {
            check_index_complete(dir, index, &found)?;
        }
        let mut objects = object_extents(dir, &config, &shards, &mut found)?;
        check_no_strays(&config, &shards, found)?;
        for extents in objects.values_mut() {
            extents.sort_by(|a, b| (&a.shard, a.offset).cmp(&(&b.shard, b.offset)));
        }
        let identity = identity(&config, content);
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            identity,
            shards,
            objects,
        })
    }

    /// The extents of an object (empty for an object the checkpoint lacks).
    pub fn extents(&self, key: &ObjectKey) -> &[Extent] {
        self.objects.get(key).map_or(&[], Vec::as_slice)
    }

    /// Bytes of an object in this checkpoint's format.
    pub fn object_bytes(&self, key: &ObjectKey) -> u64 {
        self.extents(key).iter().map(|e| e.len).sum()
    }

    /// The planner's model description of this checkpoint: its geometry, one
    /// format (the experts' actual bytes) held by every tier, and the trunk
    /// components with their actual bytes (see the parent module).
    pub fn description(&self) -> ModelDescription {
        let c = &self.config;
        let moe_layers = c.moe_layers();
        let format = c.format.name().to_string();
        let expert_bytes = self.object_bytes(&ObjectKey::Expert {
            layer: moe_layers[0] as u32,
            expert: 0,
        });
        let mut trunk = Vec::new();
        for (name, stage) in family::DESCRIBED_COMPONENTS {
            // Layers of the component grouped by size: one entry per size.
            let mut by_bytes: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
            let mut unlayered = None;
            for (key, extents) in &self.objects {
                let ObjectKey::Trunk { name: n, layer } = key else {
                    continue;
                };
                if n != name {
                    continue;
                }
                let bytes: u64 = extents.iter().map(|e| e.len).sum();
                match layer {
                    Some(l) => by_bytes.entry(bytes).or_default().push(*l as usize),
                    None => unlayered = Some(bytes),
                }
            }
            let mut entries: Vec<TrunkEntry> = by_bytes
                .into_iter()
                .map(|(bytes, mut layers)| {
                    layers.sort_unstable();
                    TrunkEntry {
                        name: name.to_string(),
                        layers: Some(layer_set(&layers)),
                        bytes: Bytes(bytes),
                        stage,
                    }
                })
                .collect();
            entries.sort_by_key(|t| first_layer(t.layers.as_ref()));
            trunk.extend(entries);
            if let Some(bytes) = unlayered {
                trunk.push(TrunkEntry {
                    name: name.to_string(),
                    layers: None,
                    bytes: Bytes(bytes),
                    stage,
                });
            }
        }
        ModelDescription {
            name: self.dir.display().to_string(),
            source: Some(format!(
                "config.json and safetensors headers of {} ({}, {format})",
                self.dir.display(),
                model_type(c)
            )),
            layers: c.layers,
            moe_layers: layer_set(&moe_layers),
            experts: c.experts,
            top_k: c.top_k,
            hidden: c.hidden as u64,
            expert_intermediate: c.expert_intermediate as u64,
            formats: BTreeMap::from([(format.clone(), FormatSize::Bytes(Bytes(expert_bytes)))]),
            tiers: TierFormats {
                gpu: format.clone(),
                ram: format.clone(),
                disk: format,
            },
            trunk,
            kv_bytes_per_token: Some(Bytes(c.kv_bytes_per_token())),
            context_tokens: None,
            per_layer: Vec::new(),
        }
    }
}
/// Reads and parses `dir`'s `config.json`; the config and the file's text.
fn read_config(dir: &Path) -> Result<(ArchConfig, String)> {
    if !dir.is_dir() {
        return Err(CheckpointError::input(
            dir,
            "directory",
            "is not a checkpoint directory",
            "give the directory holding config.json and the safetensors shards",
        ));
    }
    let config_path = dir.join(CONFIG_FILE);
    let config_text = std::fs::read_to_string(&config_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            CheckpointError::input(
                &config_path,
                "file",
                "is missing",
                "a checkpoint directory holds config.json beside its safetensors shards",
            )
        } else {
            CheckpointError::io(&config_path, e)
        }
    })?;
    let config = ArchConfig::from_json(&config_text, &config_path)?;
    Ok((config, config_text))
}

/// Every tensor of every shard's header, by name, each in one shard and,
/// with an `index`, in the shard the index maps it to.
fn read_headers(
    shards: &[PathBuf],
    shard_names: &[String],
    index: Option<&BTreeMap<String, String>>,
    content: &mut Sha256,
) -> Result<BTreeMap<String, Found>> {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for (i, path) in shards.iter().enumerate() {
        let (data_start, tensors) = read_header(path, content)?;
        for (name, info) in tensors {
            if let Some(index) = index {
                if index.get(&name) != Some(&shard_names[i]) {
                    return Err(tensor_error(
                        path,
                        &name,
                        "is in this shard but the index does not map it here",
                        "regenerate model.safetensors.index.json",
                    ));
                }
            }
            let offset = data_start + info.data_offsets.0 as u64;
            let previous = found.insert(
                name.clone(),
                Found {
                    shard: i,
                    offset,
                    info,
                },
            );
            if previous.is_some() {
                return Err(tensor_error(
                    path,
                    &name,
                    "is also in an earlier shard",
                    "keep each tensor in one shard",
                ));
            }
        }
    }
    Ok(found)
}

/// That every tensor the index maps is in a shard.
fn check_index_complete(
    dir: &Path,
    index: &BTreeMap<String, String>,
    found: &BTreeMap<String, Found>,
) -> Result<()> {
    if let Some(name) = index.keys().find(|n| !found.contains_key(*n)) {
        return Err(tensor_error(
            &dir.join(INDEX_FILE),
            name,
            format!("is mapped to {} but that shard lacks it", index[name]),
            "regenerate the index or restore the shard",
        ));
    }
    Ok(())
}

/// Each object's extents, from the tensors `config` expects, each taken out
/// of `found` once checked against its header.
fn object_extents(
    dir: &Path,
    config: &ArchConfig,
    shards: &[PathBuf],
    found: &mut BTreeMap<String, Found>,
) -> Result<BTreeMap<ObjectKey, Vec<Extent>>> {
    let expected = family::tensors(config);
    let mut objects: BTreeMap<ObjectKey, Vec<Extent>> = BTreeMap::new();
    for spec in &expected {
        let Some(f) = found.remove(&spec.name) else {
            return Err(tensor_error(
                dir,
                &spec.name,
                "is in no shard",
                &format!(
                    "a {} checkpoint with this config.json needs it; restore the missing shard",
                    model_type(config)
                ),
            ));
        };
        check_against(spec, &f.info, &shards[f.shard], config)?;
        for (key, range) in spec.parts() {
            objects.entry(key).or_default().push(Extent {
                shard: shards[f.shard].clone(),
                offset: f.offset + range.start,
                len: range.end - range.start,
                tensor: spec.name.clone(),
            });
        }
    }
    Ok(objects)
}

/// That no tensor is left over once the expected ones are taken out of
/// `found`.
fn check_no_strays(
    config: &ArchConfig,
    shards: &[PathBuf],
    mut found: BTreeMap<String, Found>,
) -> Result<()> {
    // Tensors outside the language model (Llama-4's vision tower and its
    // projector) are no objects the planner places: they are left alone,
    // though their headers count in the content id like every header.
    let ignored = config.spec().ignored_prefixes;
    found.retain(|name, _| !ignored.iter().any(|p| name.starts_with(p)));
    if let Some((name, f)) = found.iter().next() {
        return Err(tensor_error(
            &shards[f.shard],
            name,
            format!(
                "is not a tensor of a {} checkpoint with this config.json",
                model_type(config)
            ),
            "check config.json (layers, experts, model_type) against the shards",
        ));
    }
    Ok(())
}

/// The model identity of a checkpoint of `config` whose files hashed to
/// `content`.
fn identity(config: &ArchConfig, content: Sha256) -> ModelIdentity {
    // The content id covers everything that decides what the bytes mean:
    // config.json, the index, and each shard's name and header.
    ModelIdentity {
        content_id: content
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        family: config.family(),
        format: config.format.name().to_string(),
        group_size: config.format.group_size() as u32,
        hidden: config.hidden as u64,
        expert_intermediate: config.expert_intermediate as u64,
        packing_version: PACKING_VERSION,
        layout_version: LAYOUT_VERSION,
    }
}

fn model_type(config: &ArchConfig) -> &'static str {
    config.spec().model_type
}

/// A range `"a..=b"` when the layers are consecutive, else a list.
fn layer_set(layers: &[usize]) -> LayerSet {
    match (layers.first(), layers.last()) {
        (Some(&a), Some(&b)) if b - a + 1 == layers.len() => LayerSet::Range(format!("{a}..={b}")),
        _ => LayerSet::List(layers.to_vec()),
    }
}

fn first_layer(set: Option<&LayerSet>) -> usize {
    set.and_then(|s| s.expand().ok())
        .and_then(|l| l.first().copied())
        .unwrap_or(0)
}

fn tensor_error(
    file: &Path,
    tensor: &str,
    problem: impl Into<String>,
    fix: &str,
) -> CheckpointError {
    CheckpointError::input(file, format!("tensor `{tensor}`"), problem, fix)
}

/// The shard file names (sorted) and, with an index, its tensor -> shard map.
#[allow(clippy::type_complexity)]
fn shard_files(
    dir: &Path,
    content: &mut Sha256,
) -> Result<(Vec<String>, Option<BTreeMap<String, String>>)> {
    let index_path = dir.join(INDEX_FILE);
    if !index_path.exists() {
        if dir.join(SINGLE_SHARD_FILE).is_file() {
            return Ok((vec![SINGLE_SHARD_FILE.to_string()], None));
        }
        return Err(CheckpointError::input(
            dir,
            "shards",
            format!("has neither {INDEX_FILE} nor {SINGLE_SHARD_FILE}"),
            "give a Hugging Face checkpoint directory",
        ));
    }
    let text = std::fs::read(&index_path).map_err(|e| CheckpointError::io(&index_path, e))?;
    content.update(&text);
    let bad = |place: &str, problem: String| {
        CheckpointError::input(
            &index_path,
            place,
            problem,
            "write the index as Hugging Face does: {\"weight_map\": {tensor: shard file}}",
        )
    };
    let value: Value = serde_json::from_slice(&text).map_err(|e| {
        bad(
            &format!("line {} column {}", e.line(), e.column()),
            format!("not valid JSON: {e}"),
        )
    })?;
    let Some(map) = value.get("weight_map").and_then(Value::as_object) else {
        return Err(bad("weight_map", "is missing or not an object".into()));
    };
    let mut weight_map = BTreeMap::new();
    for (tensor, file) in map {
        // A shard is a file beside the index, never a path elsewhere.
        let file = file
            .as_str()
            .filter(|f| !f.is_empty() && !f.contains(['/', '\\']) && *f != "..")
            .ok_or_else(|| {
                bad(
                    &format!("weight_map.{tensor}"),
                    format!("{file} is not a shard file name"),
                )
            })?;
        weight_map.insert(tensor.clone(), file.to_string());
    }
    let mut files: Vec<String> = weight_map.values().cloned().collect();
    files.sort();
    files.dedup();
    Ok((files, Some(weight_map)))
}

/// Reads one shard's header: the offset where its data starts, and its
/// tensors, each checked for a consistent size and for lying within the file.
fn read_header(path: &Path, content: &mut Sha256) -> Result<(u64, Vec<(String, TensorInfo)>)> {
    let io = |e| CheckpointError::io(path, e);
    let mut file = File::open(path).map_err(io)?;
    let file_bytes = file.metadata().map_err(io)?.len();
    let truncated = |problem: String| {
        CheckpointError::input(
            path,
            "header",
            problem,
            "the shard is truncated or not safetensors; copy it again",
        )
    };
    let mut length = [0u8; 8];
    if file_bytes < 8 {
        return Err(truncated(format!(
            "the file has {file_bytes} bytes, less than a header length"
        )));
    }
    file.read_exact(&mut length).map_err(io)?;
    let header_bytes = u64::from_le_bytes(length);
    if header_bytes > MAX_HEADER_BYTES || 8 + header_bytes > file_bytes {
        return Err(truncated(format!(
            "a header of {header_bytes} bytes does not fit in the file's {file_bytes} bytes"
        )));
    }
    let mut header = vec![0u8; header_bytes as usize];
    file.read_exact(&mut header).map_err(io)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    content.update(name.as_bytes());
    content.update(length);
    content.update(&header);

    let fields: serde_json::Map<String, Value> = serde_json::from_slice(&header)
        .map_err(|e| truncated(format!("the header is not a JSON object: {e}")))?;
    let data_start = 8 + header_bytes;
    let mut tensors = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        if name == "__metadata__" {
            continue;
        }
        let info: TensorInfo = serde_json::from_value(value).map_err(|e| {
            tensor_error(
                path,
                &name,
                format!("unreadable header entry: {e}"),
                "regenerate the shard",
            )
        })?;
        let (start, end) = info.data_offsets;
        let bytes = super::format::tensor_bytes(info.dtype, &info.shape);
        if end < start || (end - start) as u64 != bytes {
            return Err(tensor_error(
                path,
                &name,
                format!(
                    "{} {:?} is {bytes} bytes but its data_offsets span {}",
                    info.dtype,
                    info.shape,
                    end as i128 - start as i128
                ),
                "the header is corrupt; regenerate the shard",
            ));
        }
        tensors.push((name, info));
    }
    tensors.sort_by_key(|(_, info)| info.data_offsets);
    if let Some((name, info)) = tensors
        .iter()
        .find(|(_, info)| data_start + info.data_offsets.1 as u64 > file_bytes)
    {
        return Err(tensor_error(
            path,
            name,
            format!(
                "ends at byte {} but the shard has {file_bytes} bytes (truncated)",
                data_start + info.data_offsets.1 as u64
            ),
            "copy the shard again",
        ));
    }
    // The crate's own check: tensors tile the data area without gaps or overlaps.
    Metadata::new(None, tensors.clone()).map_err(|e| {
        CheckpointError::input(path, "header", e.to_string(), "regenerate the shard")
    })?;
    Ok((data_start, tensors))
}

/// A tensor as found against the adapter's expectation.
fn check_against(
    spec: &TensorSpec,
    info: &TensorInfo,
    shard: &Path,
    config: &ArchConfig,
) -> Result<()> {
    let fix = || {
        format!(
            "a {} checkpoint with this config.json ({} experts) needs it so; fix config.json or regenerate the shard",
            model_type(config),
            config.format.name()
        )
    };
    if info.dtype != spec.dtype {
        return Err(tensor_error(
            shard,
            &spec.name,
            format!("has dtype {}, expected {}", info.dtype, spec.dtype),
            &fix(),
        ));
    }
    if info.shape != spec.shape {
        return Err(tensor_error(
            shard,
            &spec.name,
            format!("has shape {:?}, expected {:?}", info.shape, spec.shape),
            &fix(),
        ));
    }
    Ok(())
}

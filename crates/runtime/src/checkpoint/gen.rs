//! Writing a checkpoint from a model description, for tests and benchmarks:
//! the family's real tensor names, shapes and dtypes, seeded random values,
//! shards of at most a given size with their `model.safetensors.index.json`,
//! and an HF-style `config.json`.
//!
//! A description gives the experts' geometry exactly; the rest of the
//! architecture is derived from its trunk sizes (BF16, two bytes per
//! parameter): the vocabulary from `lm_head`, the dense MLP from `dense_ffn`,
//! the shared experts from `shared_expert` (Llama-4's is as wide as a routed
//! expert, as its config.json has it), and the attention heads by
//! fitting the `attn` size (the candidate geometry whose `attn` component is
//! closest, trying common head sizes first). Each derivation is reported as
//! a note. Values are seeded per tensor name, so a tensor's bytes do not
//! depend on sharding or on `--layers`. Llama-4 is written as released
//! (`Llama4ForConditionalGeneration`, tensors under `language_model.`)
//! without its vision tower, which is no object the planner places.
//!
//! The directory appears whole or not at all: everything is written into a
//! hidden sibling directory that is renamed to the output at the end.

use super::config::{ArchConfig, Attention, Mla};
use super::family::{self, Arch, AttentionKind, DenseLayers, SharedExpert, TensorSpec};
use super::format::{ExpertFormat, DEFAULT_INT4_GROUP, DEFAULT_INT8_GROUP};
use super::{CheckpointError, Result};
use crate::identity::Family;
use residency_core::model::{FormatSize, Model, ModelDescription, TrunkEntry};
use residency_core::rng::Rng;
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Largest shard by default, as Hugging Face uploads shard.
pub const DEFAULT_SHARD_BYTES: u64 = 2 << 30;
/// Vocabulary when the description has no `lm_head` to derive it from.
pub const DEFAULT_VOCAB: usize = 32_000;

residency_core::named! {
    /// Storage format of the generated experts (`--dtype`).
    pub enum GenDtype("dtype") {
        Bf16 = "bf16",
        Int8 = "int8",
        Int4 = "int4",
    }
}

#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Tensor-naming family; `None` infers it from the model's name.
    pub family: Option<Family>,
    pub dtype: GenDtype,
    /// Keep only the first N MoE layers (and the dense layers before them).
    pub moe_layers: Option<usize>,
    /// Largest shard; a single larger tensor gets a shard of its own.
    pub shard_bytes: u64,
    pub seed: u64,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            family: None,
            dtype: GenDtype::Bf16,
            moe_layers: None,
            shard_bytes: DEFAULT_SHARD_BYTES,
            seed: 0,
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct GenReport {
    pub config: ArchConfig,
    pub shards: usize,
    pub tensors: usize,
    /// Tensor data bytes (headers excluded).
    pub bytes: u64,
    /// How the architecture was derived from the description, what was left out.
    pub notes: Vec<String>,
}

/// Writes a checkpoint of `model` (read from `model_path`) to the directory `out`.
pub fn generate(
    model: &Model,
    model_path: &Path,
    out: &Path,
    opts: &GenOptions,
) -> Result<GenReport> {
    let (config, notes) = arch_config(model, model_path, opts)?;
    if opts.shard_bytes == 0 {
        return Err(CheckpointError::input(
            out,
            "--shard-bytes",
            "is zero",
            "give the largest shard size in bytes",
        ));
    }
    check_output(out)?;
    let specs = family::tensors(&config);
    let shards = plan_shards(&specs, opts.shard_bytes);
    let tmp = temporary_sibling(out);
    std::fs::create_dir(&tmp).map_err(|e| CheckpointError::io(&tmp, e))?;
    let written = write_all(&tmp, &config, &shards, opts.seed)
        .and_then(|()| std::fs::rename(&tmp, out).map_err(|e| CheckpointError::io(out, e)));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Ok(GenReport {
        config,
        shards: shards.len(),
        tensors: specs.len(),
        bytes: specs.iter().map(TensorSpec::bytes).sum(),
        notes,
    })
}

/// The output must not exist, or be an empty directory (which the rename replaces).
fn check_output(out: &Path) -> Result<()> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
    if parent.is_some_and(|p| !p.is_dir()) {
        return Err(CheckpointError::input(
            out,
            "--out",
            "its parent directory does not exist",
            "create the parent directory first",
        ));
    }
    let empty_dir = std::fs::read_dir(out).map(|mut d| d.next().is_none());
    match empty_dir {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(true) => Ok(()),
        _ => Err(CheckpointError::input(
            out,
            "--out",
            "already exists and is not an empty directory",
            "remove it or give another --out",
        )),
    }
}

fn temporary_sibling(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".into());
    out.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Consecutive tensors grouped into shards of at most `max_bytes`.
fn plan_shards(specs: &[TensorSpec], max_bytes: u64) -> Vec<Vec<&TensorSpec>> {
    let mut shards: Vec<Vec<&TensorSpec>> = vec![Vec::new()];
    let mut used = 0u64;
    for spec in specs {
        let current = shards.last_mut().expect("there is always a current shard");
        if !current.is_empty() && used + spec.bytes() > max_bytes {
            shards.push(Vec::new());
            used = 0;
        }
        shards
            .last_mut()
            .expect("there is always a current shard")
            .push(spec);
        used += spec.bytes();
    }
    shards
}

fn write_all(
    dir: &Path,
    config: &ArchConfig,
    shards: &[Vec<&TensorSpec>],
    seed: u64,
) -> Result<()> {
    let mut weight_map = BTreeMap::new();
    let mut total_bytes = 0u64;
    for (i, shard) in shards.iter().enumerate() {
        let file = if shards.len() == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", i + 1, shards.len())
        };
        let path = dir.join(&file);
        let views = shard
            .iter()
            .map(|&spec| (spec.name.as_str(), Generated { spec, seed }));
        // Hugging Face's writers mark PyTorch-layout tensors so.
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        safetensors::serialize_to_file(views, Some(metadata), &path).map_err(|e| {
            CheckpointError::input(&path, "write", e.to_string(), "check the disk and retry")
        })?;
        // The writer's temporary file is private; a checkpoint is for reading.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| CheckpointError::io(&path, e))?;
        }
        for spec in shard {
            weight_map.insert(spec.name.clone(), file.clone());
            total_bytes += spec.bytes();
        }
    }
    if shards.len() > 1 {
        let index = serde_json::json!({
            "metadata": { "total_size": total_bytes },
            "weight_map": weight_map,
        });
        write_json(&dir.join("model.safetensors.index.json"), &index)?;
    }
    write_json(&dir.join("config.json"), &config.to_json())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).expect("JSON values serialise");
    text.push('\n');
    std::fs::write(path, text).map_err(|e| CheckpointError::io(path, e))
}

/// A tensor whose bytes are generated when the writer asks for them, so only
/// one tensor is in memory at a time.
struct Generated<'a> {
    spec: &'a TensorSpec,
    seed: u64,
}

impl View for Generated<'_> {
    fn dtype(&self) -> Dtype {
        self.spec.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.spec.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(random_values(self.spec, self.seed))
    }
    fn data_len(&self) -> usize {
        self.spec.bytes() as usize
    }
}

/// Seeded values of a tensor: small finite floats of either sign (weights
/// between 2^-9 and 2^-2, positive scales between 2^-7 and 2^-4), any byte
/// for the integer containers.
fn random_values(spec: &TensorSpec, seed: u64) -> Vec<u8> {
    // FNV-1a of the name, so values do not depend on order or sharding.
    let name_hash = spec.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut out = vec![0u8; spec.bytes() as usize];
    Rng((name_hash ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1).fill_bytes(&mut out);
    match spec.dtype {
        Dtype::BF16 => {
            for c in out.chunks_exact_mut(2) {
                let r = u16::from_le_bytes([c[0], c[1]]);
                let exponent = 118 + ((r >> 7) & 7);
                c.copy_from_slice(&((r & 0x807f) | (exponent << 7)).to_le_bytes());
            }
        }
        Dtype::F16 => {
            for c in out.chunks_exact_mut(2) {
                let r = u16::from_le_bytes([c[0], c[1]]);
                let exponent = 8 + ((r >> 10) & 3);
                c.copy_from_slice(&((r & 0x03ff) | (exponent << 10)).to_le_bytes());
            }
        }
        Dtype::F32 => {
            for c in out.chunks_exact_mut(4) {
                let r = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let exponent = 118 + ((r >> 23) & 7);
                c.copy_from_slice(&((r & 0x807f_ffff) | (exponent << 23)).to_le_bytes());
            }
        }
        // Integer containers: every byte is a valid packed value.
        _ => {}
    }
    out
}

/// The family a description's name (or file name) points to.
fn infer_family(d: &ModelDescription, path: &Path) -> Option<Family> {
    const HINTS: [(&str, Family); 7] = [
        ("mixtral", Family::Mixtral),
        ("deepseek-v3", Family::DeepseekV3),
        ("deepseek-v2", Family::DeepseekV2),
        ("qwen", Family::QwenMoe),
        ("olmoe", Family::Olmoe),
        ("llama4", Family::Llama4),
        ("llama-4", Family::Llama4),
    ];
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    [Some(d.name.clone()), stem]
        .into_iter()
        .flatten()
        .find_map(|name| {
            let name = name.to_lowercase().replace(['_', ' '], "-");
            HINTS
                .iter()
                .find(|(hint, _)| name.contains(hint))
                .map(|&(_, f)| f)
        })
}

/// The trunk entry `name` covering `layer`, else the first entry of that name.
fn trunk_entry<'a>(d: &'a ModelDescription, name: &str, layer: usize) -> Option<&'a TrunkEntry> {
    let mut entries = d.trunk.iter().filter(|t| t.name == name);
    let first = entries.clone().next();
    entries
        .find(|t| {
            t.layers
                .as_ref()
                .and_then(|s| s.expand().ok())
                .is_some_and(|ls| ls.contains(&layer))
        })
        .or(first)
}

/// Whole units of `unit_bytes` nearest to `bytes`, at least one.
fn nearest(bytes: u64, unit_bytes: u64) -> usize {
    ((bytes + unit_bytes / 2) / unit_bytes).max(1) as usize
}

/// The architecture of a generated checkpoint, and notes on how it was derived.
pub fn arch_config(
    model: &Model,
    path: &Path,
    opts: &GenOptions,
) -> Result<(ArchConfig, Vec<String>)> {
    let d = &model.description;
    let family = family_of(d, path, opts.family)?;
    if !d.per_layer.is_empty() {
        return Err(CheckpointError::input(
            path,
            "per_layer",
            format!("a {family} config.json gives every MoE layer the same experts"),
            "drop per_layer to generate a checkpoint",
        ));
    }
    let all_moe = model.moe_layer_numbers();
    let layers = layer_count(d, &all_moe, path, opts.moe_layers)?;
    let dense_layers: Vec<usize> = (0..layers).filter(|l| !all_moe.contains(l)).collect();
    let has_shared = d.trunk.iter().any(|t| t.name == family::SHARED_EXPERT);
    let arch = arch_of(family, has_shared);
    let spec = arch.spec();
    check_dense_layers(spec.dense, &dense_layers, family, path)?;
    let hidden = d.hidden as usize;
    let intermediate = d.expert_intermediate as usize;
    // BF16 bytes of a [n, hidden] matrix per row, and of an MLP per unit of width.
    let (row_bytes, mlp_bytes) = (2 * d.hidden, 6 * d.hidden);
    let first_moe = all_moe[0];
    let mut notes = Vec::new();
    let dense_intermediate = dense_intermediate(d, &dense_layers, mlp_bytes, path)?;
    let shared_intermediate = shared_intermediate(d, spec.shared, first_moe, mlp_bytes);
    let vocab = vocab(d, row_bytes, &mut notes);
    let format = expert_format(d, opts.dtype);
    check_format(format, [hidden, intermediate], path)?;
    let mut config = ArchConfig {
        arch,
        layers,
        hidden,
        vocab,
        tie_word_embeddings: false,
        experts: d.experts,
        top_k: d.top_k,
        expert_intermediate: intermediate,
        dense_layers,
        dense_intermediate,
        shared_intermediate,
        attention: Attention::Gqa {
            heads: 1,
            kv_heads: 1,
            head_dim: hidden,
        },
        format,
    };
    notes.push(fit_described_attention(&mut config, d, first_moe));
    notes.extend(unwritten_trunk(d, &config));
    Ok((config, notes))
}

/// The tensor-naming family: `--family`, else inferred from the model's
/// name or file name.
fn family_of(d: &ModelDescription, path: &Path, family: Option<Family>) -> Result<Family> {
    family.or_else(|| infer_family(d, path)).ok_or_else(|| {
        let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
        CheckpointError::input(
            path,
            "name",
            format!("cannot tell the tensor-naming family of `{}`", d.name),
            format!("pass --family {}", names.join("|")),
        )
    })
}

/// Transformer layers to write: all of the model's, or those up to its
/// `moe_layers`-th MoE layer.
fn layer_count(
    d: &ModelDescription,
    all_moe: &[usize],
    path: &Path,
    moe_layers: Option<usize>,
) -> Result<usize> {
    Ok(match moe_layers {
        None => d.layers,
        Some(n) if (1..=all_moe.len()).contains(&n) => all_moe[n - 1] + 1,
        Some(n) => {
            return Err(CheckpointError::input(
                path,
                "--layers",
                format!("{n} MoE layers asked, the model has {}", all_moe.len()),
                format!("give 1..={}", all_moe.len()),
            ))
        }
    })
}

/// The architecture written for `family`.
fn arch_of(family: Family, has_shared: bool) -> Arch {
    match family {
        Family::Mixtral => Arch::Mixtral,
        Family::DeepseekV2 => Arch::DeepseekV2,
        Family::DeepseekV3 => Arch::DeepseekV3,
        // Qwen2-MoE has a shared expert, Qwen3-MoE has none.
        Family::QwenMoe if has_shared => Arch::Qwen2Moe,
        Family::QwenMoe => Arch::Qwen3Moe,
        Family::Olmoe => Arch::Olmoe,
        Family::Llama4 => Arch::Llama4,
    }
}

/// That the architecture's config.json can say which layers are dense.
fn check_dense_layers(
    dense: DenseLayers,
    dense_layers: &[usize],
    family: Family,
    path: &Path,
) -> Result<()> {
    let dense_ok = match dense {
        DenseLayers::None => dense_layers.is_empty(),
        DenseLayers::FirstK => dense_layers.iter().enumerate().all(|(i, &l)| i == l),
        DenseLayers::MlpOnly | DenseLayers::Interleave => true,
    };
    if !dense_ok {
        return Err(CheckpointError::input(
            path,
            "moe_layers",
            format!("dense layers {dense_layers:?} cannot be expressed in a {family} config.json"),
            "describe the model with the layers its family has, or pass another --family",
        ));
    }
    Ok(())
}

/// Bytes of the trunk component `name` in `layer` (`trunk_entry`).
fn trunk_bytes(d: &ModelDescription, name: &str, layer: usize) -> Option<u64> {
    trunk_entry(d, name, layer).map(|t| t.bytes.0)
}

/// Width of the dense MLP, from the first dense layer's `dense_ffn` size
/// (0 without dense layers).
fn dense_intermediate(
    d: &ModelDescription,
    dense_layers: &[usize],
    mlp_bytes: u64,
    path: &Path,
) -> Result<usize> {
    Ok(match dense_layers.first() {
        None => 0,
        Some(&l) => match trunk_bytes(d, family::DENSE_FFN, l) {
            Some(bytes) => nearest(bytes, mlp_bytes),
            None => {
                return Err(CheckpointError::input(
                    path,
                    "trunk",
                    format!("layer {l} is dense but no `dense_ffn` entry gives its size"),
                    "add a dense_ffn trunk entry for the dense layers",
                ))
            }
        },
    })
}

/// Width of the shared experts together, from the first MoE layer's
/// `shared_expert` size (0 without).
fn shared_intermediate(
    d: &ModelDescription,
    shared: SharedExpert,
    first_moe: usize,
    mlp_bytes: u64,
) -> usize {
    let intermediate = d.expert_intermediate as usize;
    match (shared, trunk_bytes(d, family::SHARED_EXPERT, first_moe)) {
        (SharedExpert::Deepseek, Some(bytes)) => {
            nearest(bytes, mlp_bytes * d.expert_intermediate) * intermediate
        }
        (SharedExpert::Qwen, Some(bytes)) => nearest(bytes, mlp_bytes),
        (SharedExpert::Llama4, _) => intermediate,
        _ => 0,
    }
}

/// The vocabulary, from the `lm_head` size, else the default (said in `notes`).
fn vocab(d: &ModelDescription, row_bytes: u64, notes: &mut Vec<String>) -> usize {
    match trunk_bytes(d, family::LM_HEAD, 0) {
        Some(bytes) => nearest(bytes, row_bytes),
        None => {
            notes.push(format!(
                "no lm_head entry: vocabulary {DEFAULT_VOCAB} assumed"
            ));
            DEFAULT_VOCAB
        }
    }
}

/// That the experts' format can pack matrices of each width in `cols`.
fn check_format(format: ExpertFormat, cols: [usize; 2], path: &Path) -> Result<()> {
    for cols in cols {
        if let Some(problem) = format.unfit_for(cols) {
            return Err(CheckpointError::input(
                path,
                format!("formats.{}", format.name()),
                problem,
                "choose a group size that divides hidden and expert_intermediate",
            ));
        }
    }
    Ok(())
}

/// Fits `config`'s attention to the description's `attn` size in
/// `first_moe`; the note saying what it became.
fn fit_described_attention(
    config: &mut ArchConfig,
    d: &ModelDescription,
    first_moe: usize,
) -> String {
    let target = trunk_bytes(d, family::ATTN, first_moe);
    config.attention = fit_attention(config, first_moe, target);
    let got = family::attention_bytes(config, first_moe);
    match target {
        Some(t) => format!(
            "attention fitted to the description's attn size: {}; attn {got} bytes per MoE layer (description: {t})",
            config.attention
        ),
        None => format!("no attn entry: attention {} assumed", config.attention),
    }
}

/// A note for each trunk component the checkpoint has no tensors for.
fn unwritten_trunk(d: &ModelDescription, config: &ArchConfig) -> Vec<String> {
    let mut notes = Vec::new();
    let mut left_out = BTreeSet::new();
    for t in &d.trunk {
        let written = match t.name.as_str() {
            family::ATTN | family::LM_HEAD => true,
            family::SHARED_EXPERT => config.shared_intermediate > 0,
            family::DENSE_FFN => !config.dense_layers.is_empty(),
            _ => false,
        };
        if !written && left_out.insert(t.name.as_str()) {
            notes.push(format!(
                "trunk `{}` has no tensors in a {} checkpoint of these layers; not written",
                t.name,
                config.spec().model_type
            ));
        }
    }
    notes
}

/// The experts' format for `--dtype`, with the description's group size when
/// it gives one for that format.
fn expert_format(d: &ModelDescription, dtype: GenDtype) -> ExpertFormat {
    let (bits, default_group) = match dtype {
        GenDtype::Bf16 => return ExpertFormat::Bf16,
        GenDtype::Int8 => (8, DEFAULT_INT8_GROUP),
        GenDtype::Int4 => (4, DEFAULT_INT4_GROUP),
    };
    let group = match d.formats.get(dtype.name()) {
        Some(&FormatSize::Packed { bits: b, group }) if b == bits => group,
        _ => default_group,
    };
    ExpertFormat::Packed { bits, group }
}

/// The attention geometry whose `attn` component in `layer` is closest to
/// `target` bytes; candidates in order of preference (common head sizes,
/// query width near `hidden`, more key/value heads), the first kept on ties.
/// Without a target, the first candidate.
fn fit_attention(base: &ArchConfig, layer: usize, target: Option<u64>) -> Attention {
    let candidates = attention_candidates(base);
    let Some(target) = target else {
        return candidates[0];
    };
    let mut best = (u64::MAX, candidates[0]);
    let mut probe = base.clone();
    for candidate in candidates {
        probe.attention = candidate;
        let diff = family::attention_bytes(&probe, layer).abs_diff(target);
        if diff < best.0 {
            best = (diff, candidate);
        }
    }
    best.1
}

fn attention_candidates(base: &ArchConfig) -> Vec<Attention> {
    let h = base.hidden;
    let powers: Vec<usize> = (0..=10).map(|i| 1 << i).collect();
    let mut out = Vec::new();
    match base.spec().attention {
        AttentionKind::Gqa { head_dim_key, .. } => {
            // Real models use heads of 64 to 256 and a query width within a
            // factor of 4 of hidden; small test models scale the head down.
            // Head counts are powers of two, or the one whose query width is
            // hidden (Llama-4-Maverick: 40 heads of 128 at hidden 5120).
            let min_head_dim = h.min(256) / 4;
            for head_dim in [128, 64, 256, 32, 16, 8, 4] {
                if head_dim < min_head_dim {
                    continue;
                }
                let mut counts = powers.clone();
                if h.is_multiple_of(head_dim) && !counts.contains(&(h / head_dim)) {
                    counts.push(h / head_dim);
                }
                let mut heads: Vec<usize> = counts
                    .iter()
                    .copied()
                    .filter(|&n| {
                        let width = n * head_dim;
                        if head_dim_key {
                            (h / 4..=4 * h).contains(&width)
                        } else {
                            width == h
                        }
                    })
                    .collect();
                heads.sort_by_key(|&n| (n * head_dim).abs_diff(h));
                for &n in &heads {
                    for &kv in powers.iter().rev().filter(|&&kv| n.is_multiple_of(kv)) {
                        out.push(Attention::Gqa {
                            heads: n,
                            kv_heads: kv,
                            head_dim,
                        });
                    }
                }
            }
            if out.is_empty() {
                // A hidden size no power-of-two head count divides: one head.
                out.push(Attention::Gqa {
                    heads: 1,
                    kv_heads: 1,
                    head_dim: h,
                });
            }
        }
        AttentionKind::Mla => {
            // DeepSeek-V2 and V3 use rope 64, nope and v 128, kv_lora 512 and
            // q_lora 1536 (when present) at hidden >= 2048; smaller models
            // scale them with hidden.
            let unit = (h / 32).clamp(1, 64);
            for q_lora_rank in [None, Some(24 * unit)] {
                for &heads in &powers {
                    out.push(Attention::Mla(Mla {
                        heads,
                        q_lora_rank,
                        kv_lora_rank: 8 * unit,
                        qk_nope_head_dim: 2 * unit,
                        qk_rope_head_dim: unit,
                        v_head_dim: 2 * unit,
                    }));
                }
            }
        }
    }
    out
}

//! Fixtures shared by the workspace's tests: small model descriptions (a
//! Mixtral-shaped one and a DeepSeek-V2-shaped one), generated checkpoints
//! of them, GGUF files (`gguf`), one-format models for the planner's tests
//! (`OneFormatModel`), the data sets under `../shared/data`, files written
//! for a test, and a directory listing.
//!
//! Unit tests inside `residency-runtime` link a second copy of that crate
//! through this one, so what they take from here is plain data: YAML text
//! and paths, never this crate's `Checkpoint`.

pub mod gguf;

use residency_core::model::Model;
use residency_runtime::checkpoint::{generate, Checkpoint, GenDtype, GenOptions};
use std::path::{Path, PathBuf};

/// A Mixtral-shaped model small enough to generate in milliseconds: two MoE
/// layers of `experts` 12 KiB bf16 experts (64 x 32, top-2), attention and
/// a head.
pub fn tiny_mixtral(experts: usize) -> String {
    format!(
        r#"
name: Mixtral-tiny
layers: 2
moe_layers: "0..=1"
experts: {experts}
top_k: 2
hidden: 64
expert_intermediate: 32
formats:
  bf16: 12288
tiers: {{ gpu: bf16, ram: bf16, disk: bf16 }}
trunk:
  - {{ name: attn, layers: "0..=1", bytes: 40960, stage: dense }}
  - {{ name: lm_head, bytes: 12800, stage: head }}
"#
    )
}

/// A small DeepSeek-V2-shaped description: a dense first layer, three MoE
/// layers of 4 experts (12 KiB in bf16) with two shared experts, MLA
/// attention, and int4 as well as bf16 formats.
pub const SMALL_DEEPSEEK: &str = r#"
name: DeepSeek-V2-tiny
layers: 4
moe_layers: "1..=3"
experts: 4
top_k: 2
hidden: 64
expert_intermediate: 32
formats:
  bf16: 12288
  int4: { bits: 4, group: 16 }
tiers: { gpu: int4, ram: int4, disk: int4 }
trunk:
  - { name: attn, layers: "0..=3", bytes: 40000, stage: dense }
  - { name: dense_ffn, layers: [0], bytes: 36864, stage: dense }
  - { name: shared_expert, layers: "1..=3", bytes: 24576, stage: experts }
  - { name: lm_head, bytes: 12800, stage: head }
"#;

/// A small MoE model description to build whose experts take one format,
/// `q`, on every tier: the planner tests' models, which differ only in
/// their layers, experts and trunk. 4 experts a MoE layer, top-2, 8 wide
/// and 1 MB an expert unless a test says otherwise.
#[derive(Debug, Clone)]
pub struct OneFormatModel {
    name: String,
    layers: usize,
    moe_layers: String,
    experts: usize,
    top_k: usize,
    width: usize,
    expert_size: String,
}

impl OneFormatModel {
    /// `layers` layers, of which `moe_layers` (YAML: a list or a range of
    /// layer numbers) are MoE layers.
    pub fn new(name: &str, layers: usize, moe_layers: &str) -> Self {
        Self {
            name: name.into(),
            layers,
            moe_layers: moe_layers.into(),
            experts: 4,
            top_k: 2,
            width: 8,
            expert_size: "1 MB".into(),
        }
    }

    /// `experts` experts a MoE layer, `top_k` of them chosen per token.
    pub fn experts(self, experts: usize, top_k: usize) -> Self {
        Self {
            experts,
            top_k,
            ..self
        }
    }

    /// `hidden` and `expert_intermediate` both.
    pub fn width(self, width: usize) -> Self {
        Self { width, ..self }
    }

    /// An expert's size in `q`, as YAML writes it (`100 MB`).
    pub fn expert_size(self, size: &str) -> Self {
        Self {
            expert_size: size.into(),
            ..self
        }
    }

    /// The YAML description, `trunk` (the entries of its `trunk:` list,
    /// one a line) as its trunk.
    pub fn yaml(&self, trunk: &str) -> String {
        let Self {
            name,
            layers,
            moe_layers,
            experts,
            top_k,
            width,
            expert_size,
        } = self;
        format!(
            "name: {name}\nlayers: {layers}\nmoe_layers: {moe_layers}\nexperts: {experts}\n\
             top_k: {top_k}\nhidden: {width}\nexpert_intermediate: {width}\n\
             formats: {{ q: {expert_size} }}\ntiers: {{ gpu: q, ram: q, disk: q }}\n\
             trunk:\n{trunk}"
        )
    }
}

/// One node, one card and one drive, small enough that `SMALL_DEEPSEEK`'s
/// experts compete for the card.
pub const TINY_PROFILE: &str = "\
name: tiny
numa:
  - { id: 0, ram: 4 MiB, reserved: 1 MiB, staging: 256 KiB, cores: 4, gemv_bandwidth: 20 GB/s, stage_overhead: 5 us }
gpus:
  - { id: 0, name: card, vram: 1 MiB, reserved: 800 KiB, numa: 0, gemv_bandwidth: 200 GB/s, upload_bandwidth: 12 GB/s, sync_overhead: 30 us }
drives:
  - { id: 0, name: nvme, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us, read_concurrency: 4 }
io_overlaps_compute: true
felt_fraction: 0.5
fixed_token_seconds: 100 us
";

/// Two KV groups for the tiny model, small enough to compete with its experts.
pub const TINY_KV: &str = "\
format: residency-kv-groups
source: hand-made
groups:
  - { name: system-prompt, bytes: 64 KiB, reuses_per_token: 0.01, prefill_seconds: 2 ms }
  - { name: few-shot, bytes: 200 KiB, reuses_per_token: 0.002, prefill_seconds: 9 ms }
";

/// The tiny inputs written into `dir`: `TINY_PROFILE` as `profile.yaml`,
/// `SMALL_DEEPSEEK` as `model.yaml` and `TINY_KV` as `kv.yaml`; their
/// paths, in that order.
pub fn write_tiny_inputs(dir: &Path) -> [PathBuf; 3] {
    let files = [
        ("profile.yaml", TINY_PROFILE),
        ("model.yaml", SMALL_DEEPSEEK),
        ("kv.yaml", TINY_KV),
    ];
    files.map(|(name, text)| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    })
}

/// Writes `yaml` to `dir/model.yaml` and generates every layer of it as
/// bf16 in shards of at most 64 KiB into `dir/ckpt`: that directory.
pub fn generate_bf16(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("model.yaml");
    std::fs::write(&path, yaml).unwrap();
    let model = Model::from_yaml_file(&path).unwrap();
    let ckpt_dir = dir.join("ckpt");
    let options = GenOptions {
        dtype: GenDtype::Bf16,
        shard_bytes: 64 << 10,
        ..GenOptions::default()
    };
    generate(&model, &path, &ckpt_dir, &options).unwrap();
    ckpt_dir
}

/// `tiny_mixtral(4)` generated into `dir` by `generate_bf16`, opened.
pub fn tiny_checkpoint(dir: &Path) -> Checkpoint {
    Checkpoint::open(&generate_bf16(dir, &tiny_mixtral(4))).unwrap()
}

/// A data set under `../shared/data/` (beside the checkout), or `None` with
/// the reason printed: tests that need one skip where it is absent.
pub fn shared_data(sub: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(sub);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipped: {} is absent (../shared/data is not beside the checkout)",
            path.display()
        );
        None
    }
}

/// A file named `name` in `dir` holding `contents`: its path.
pub fn file_in(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// The names in `dir`, sorted: to see what a command wrote, and that it
/// left no partial or temporary file.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

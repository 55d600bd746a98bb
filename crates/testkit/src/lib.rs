//! Fixtures shared by the workspace's integration tests: a tiny
//! Mixtral-shaped model and its generated checkpoint.

use residency_core::model::Model;
use residency_runtime::checkpoint::{generate, Checkpoint, GenDtype, GenOptions};
use std::path::Path;

/// A Mixtral-shaped model small enough to generate in milliseconds: two MoE
/// layers of four 12 KiB bf16 experts, attention and a head.
pub const TINY_MIXTRAL: &str = r#"
name: Mixtral-tiny
layers: 2
moe_layers: "0..=1"
experts: 4
top_k: 2
hidden: 64
expert_intermediate: 32
formats:
  bf16: 12288
tiers: { gpu: bf16, ram: bf16, disk: bf16 }
trunk:
  - { name: attn, layers: "0..=1", bytes: 40960, stage: dense }
  - { name: lm_head, bytes: 12800, stage: head }
"#;

/// Writes `TINY_MIXTRAL` to `dir/mixtral-tiny.yaml` and generates it as bf16
/// in shards of at most 64 KiB into `dir/ckpt`.
pub fn tiny_checkpoint(dir: &Path) -> Checkpoint {
    let yaml = dir.join("mixtral-tiny.yaml");
    std::fs::write(&yaml, TINY_MIXTRAL).unwrap();
    let model = Model::from_yaml_file(&yaml).unwrap();
    let ckpt_dir = dir.join("ckpt");
    let options = GenOptions {
        dtype: GenDtype::Bf16,
        shard_bytes: 64 << 10,
        ..GenOptions::default()
    };
    generate(&model, &yaml, &ckpt_dir, &options).unwrap();
    Checkpoint::open(&ckpt_dir).unwrap()
}

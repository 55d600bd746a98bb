//! A llama.cpp model file (GGUF) as the planner's model: `--model
//! FILE.gguf` (a split model by its first shard, every shard read). Only
//! the headers are read; the description is derived from the metadata of
//! the architecture (`general.architecture`, `{arch}.block_count`,
//! `{arch}.expert_used_count`, ...) and the tensor list, with the exact
//! bytes of every tensor in the file: one routed expert is its layer's
//! expert tensors over the expert count, in every tier (llama.cpp computes
//! on the file's format wherever the tensor is).

#[cfg(test)]
pub(crate) mod arch_tensors;
pub(crate) mod describe;
pub mod ggml_type;
pub mod header;
pub mod tensors;

#[cfg(test)]
mod tests;

pub use describe::describe;
pub use header::{Header, TensorInfo, Value};

use residency_core::error::PlannerError;
use residency_core::model::Model;
use residency_core::plan::sha256_hex;
use std::path::{Path, PathBuf};

/// The architectures whose GGUF files are planned (llama.cpp's names).
pub const ARCHITECTURES: [&str; 8] = [
    "qwen3moe",
    "qwen2moe",
    "deepseek2",
    "llama",
    "llama4",
    "olmoe",
    "gpt-oss",
    "glm4moe",
];

/// Whether `path` is a GGUF file: its first bytes are the magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && &magic == b"GGUF"
}

/// A GGUF model: its shards' headers, first shard first.
#[derive(Debug, Clone)]
pub struct GgufModel {
    pub shards: Vec<Header>,
}

impl GgufModel {
    /// Reads `path` and, when its metadata says it is split, every other
    /// shard beside it (`NAME-00001-of-00003.gguf` ...).
    pub fn open(path: &Path) -> Result<GgufModel, PlannerError> {
        let first = Header::read(path)?;
        let count = first.metadata.get("split.count").and_then(Value::as_u64);
        let mut shards = vec![first];
        if let Some(count) = count.filter(|&c| c > 1) {
            let no = shards[0].metadata.get("split.no").and_then(Value::as_u64);
            if no != Some(0) {
                return Err(PlannerError::input(
                    path,
                    "split.no",
                    format!("is shard {} of a split model, not the first", no.unwrap_or(0) + 1),
                    "give the first shard (NAME-00001-of-NNNNN.gguf); the others are read beside it",
                ));
            }
            for k in 1..count {
                let shard = shard_path(path, k, count)?;
                if !shard.is_file() {
                    return Err(PlannerError::input(
                        path,
                        "split.count",
                        format!(
                            "says the model has {count} shards, but shard {} ({}) is missing",
                            k + 1,
                            shard.display()
                        ),
                        "put every shard of the split model in the same directory",
                    ));
                }
                shards.push(Header::read(&shard)?);
            }
            let expected = shards[0]
                .metadata
                .get("split.tensors.count")
                .and_then(Value::as_u64);
            let found: usize = shards.iter().map(|s| s.tensors.len()).sum();
            if expected.is_some_and(|e| e != found as u64) {
                return Err(PlannerError::input(
                    path,
                    "split.tensors.count",
                    format!(
                        "is {}, but the {count} shards hold {found} tensors",
                        expected.unwrap_or(0)
                    ),
                    "download or split the model again",
                ));
            }
        }
        Ok(GgufModel { shards })
    }

    pub fn path(&self) -> &Path {
        &self.shards[0].path
    }

    /// The first shard's metadata (where llama.cpp's converter writes the
    /// model's keys).
    pub fn metadata(&self) -> &std::collections::BTreeMap<String, Value> {
        &self.shards[0].metadata
    }

    pub fn tensors(&self) -> impl Iterator<Item = &TensorInfo> {
        self.shards.iter().flat_map(|s| &s.tensors)
    }

    /// What a plan records as the model's sha256: of the shards' header
    /// hashes, so a 100 GB file is identified without reading its data.
    pub fn content_id(&self) -> String {
        let joined: Vec<&str> = self.shards.iter().map(|s| s.sha256.as_str()).collect();
        sha256_hex(joined.join("\n").as_bytes())
    }
}

/// The path of shard `k` (from 0) of `count`, beside the first shard.
fn shard_path(first: &Path, k: u64, count: u64) -> Result<PathBuf, PlannerError> {
    let name = first
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let suffix = format!("-00001-of-{count:05}.gguf");
    match name.strip_suffix(&suffix) {
        Some(stem) => Ok(first.with_file_name(format!("{stem}-{:05}-of-{count:05}.gguf", k + 1))),
        None => Err(PlannerError::input(
            first,
            "file name",
            format!("is a split model's first shard, but not named `NAME{suffix}`"),
            "keep the shard names llama-gguf-split writes",
        )),
    }
}

/// The model of a GGUF file, validated, with its content id and the notes
/// the user should see (what is left out, what is assumed).
pub fn read_model(path: &Path) -> Result<(Model, String, Vec<String>), PlannerError> {
    let gguf = GgufModel::open(path)?;
    let (description, notes) = describe(&gguf)?;
    let model = Model::validate(description, path)?;
    Ok((model, gguf.content_id(), notes))
}

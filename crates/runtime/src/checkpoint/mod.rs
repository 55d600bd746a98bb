//! Checkpoints (design §7, Checkpoints): safetensors shards with their index,
//! read through their headers only, and mapped to expert objects and trunk
//! components by small per-family adapters.
//!
//! - `family`: the adapters: for Mixtral, DeepSeek-V2/V3, Qwen-MoE (Qwen2-MoE,
//!   Qwen3-MoE), OLMoE and Llama-4 (multimodal or text-only), every tensor's
//!   real Hugging Face name, shape and dtype, and the object(s) it belongs to.
//! - `config`: the geometry an adapter needs, read from and written to an
//!   HF-style `config.json`.
//! - `format`: the storage formats of routed experts and the packed int8/int4
//!   container (its byte layout is documented there).
//! - `read`: opening a checkpoint directory: index, headers, validation,
//!   per-object extents, the model identity, and the planner's model
//!   description derived from it (`residency plan --model DIR`).
//! - `gen`: writing a checkpoint with a model's real names, shapes and dtypes
//!   and seeded random values, for tests and benchmarks
//!   (`residency gen-checkpoint`).
//!
//! Objects. Each routed expert's projections (gate, up, down, and their
//! scales when packed) form `ObjectKey::Expert`. Where a family fuses every
//! expert of a layer into one tensor (Llama-4's `experts.gate_up_proj` and
//! `experts.down_proj`, `[experts, ...]`), expert `e`'s part is its slice
//! along the first dimension, contiguous in the shard: an object's extents
//! are byte ranges, whole tensors or such slices. Everything else is a trunk
//! component (`ObjectKey::Trunk`), named as the model descriptions in
//! `profiles/models` name them:
//! - `attn` (per layer, stage dense): the attention projections, both layer
//!   norms and, in MoE layers, the router. The router is a few kilobytes
//!   that runs right after the post-attention norm; keeping it with
//!   attention keeps it out of the experts stage, whose GPU overhead it would
//!   otherwise pay on its own.
//! - `dense_ffn` (per dense layer, stage dense): the MLP of layers without
//!   experts (DeepSeek's first layers, Qwen's `mlp_only_layers`, Llama-4's
//!   layers between its interleaved MoE layers).
//! - `shared_expert` (per MoE layer, stage experts): DeepSeek's
//!   `shared_experts`, Qwen2-MoE's `shared_expert` and its gate, Llama-4's
//!   `shared_expert`.
//! - `lm_head` (stage head): the output projection and the final norm.
//! - `embed`: the token embedding. An engine reads one row of it per token,
//!   so it is not a per-token trunk read and the derived description leaves
//!   it out, as the descriptions in `profiles/models` do; with tied
//!   embeddings it is the `lm_head`.

pub mod config;
pub mod family;
pub mod format;
pub mod gen;
#[cfg(test)]
mod llama4_tests;
pub mod read;
#[cfg(test)]
mod tests;

pub use config::{ArchConfig, Attention, Mla};
pub use family::{Arch, TensorSpec};
pub use format::ExpertFormat;
pub use gen::{generate, GenDtype, GenOptions, GenReport};
pub use read::{Checkpoint, Extent};

/// Version of the packed container layout (`format`), part of every
/// object's identity.
pub const PACKING_VERSION: u32 = 1;
/// Version of the tensor-to-object mapping (`family`), part of every
/// object's identity.
pub const LAYOUT_VERSION: u32 = 1;

/// Errors of reading and writing checkpoints are the planner's input
/// errors: one line naming the file, the place in it (a tensor, a config
/// key, a flag) and the fix; or a file that could not be read or written.
pub use residency_core::error::PlannerError as CheckpointError;

pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

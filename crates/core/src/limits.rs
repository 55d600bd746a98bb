//! The largest (and smallest) values an input file may give. Every number
//! the cost model multiplies or divides by is bounded here, so that sums
//! and products of valid inputs stay finite (a heat count of 1e308 or a
//! rate of 1e-300 B/s would otherwise turn into infinities and NaN deep in
//! the solver), and every count the planner allocates from is bounded, so
//! that a file under a megabyte never asks for gigabytes. Each bound is far
//! beyond any real machine or model.

/// Bytes of any size in a profile, model or KV groups file: 1 EiB.
pub const MAX_BYTES: u64 = 1 << 60;
/// Slowest rate: 1 B/s.
pub const MIN_BYTES_PER_S: f64 = 1.0;
/// Fastest rate: 1 PB/s.
pub const MAX_BYTES_PER_S: f64 = 1e15;
/// Longest time (an overhead, a latency, a prefill): a million seconds.
pub const MAX_SECONDS: f64 = 1e6;
/// Largest heat count (selections of one expert): 1e15.
pub const MAX_HEAT_COUNT: f64 = 1e15;
/// Most reuses of a KV group per generated token.
pub const MAX_REUSES_PER_TOKEN: f64 = 1e6;
/// Most transformer layers in a model.
pub const MAX_LAYERS: usize = 1 << 12;
/// Most experts in one MoE layer.
pub const MAX_EXPERTS: usize = 1 << 16;
/// Most routed experts over all MoE layers (DeepSeek-V3 has 58 x 256 =
/// 14,848): each is an object of the planner and a tensor of a checkpoint.
pub const MAX_ROUTED_EXPERTS: usize = 1 << 20;
/// Largest hidden size or expert intermediate size.
pub const MAX_WIDTH: u64 = 1 << 24;

/// Whether `rate` (B/s) is a rate the planner can price.
pub fn rate_in_range(rate: f64) -> bool {
    (MIN_BYTES_PER_S..=MAX_BYTES_PER_S).contains(&rate)
}

/// Whether `seconds` is a time of zero or more the planner can price.
pub fn time_in_range(seconds: f64) -> bool {
    (0.0..=MAX_SECONDS).contains(&seconds)
}

/// Largest text file read whole (heat logs, CSV, llama-bench output): 1 GiB.
pub const MAX_TEXT_BYTES: u64 = 1 << 30;
/// Largest YAML or JSON document (a profile, a model description, a KV
/// groups file, a plan): 64 MiB, a thousand times the largest real one.
pub const MAX_DOCUMENT_BYTES: u64 = 64 << 20;
/// Deepest nesting of `[`/`{` a YAML document may have (the YAML parser
/// takes quadratic time in it; the deserializer stops at 128 anyway).
pub const MAX_YAML_DEPTH: usize = 128;
/// Widest indentation (spaces and `- `/`? ` indicators before a line's
/// content) a YAML document may have.
pub const MAX_YAML_INDENT: usize = 512;
/// Longest value echoed into an error line; longer ones are cut with `…`.
pub const MAX_ECHOED_CHARS: usize = 80;

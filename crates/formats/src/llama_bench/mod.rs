//! Predicting llama.cpp (docs/gguf.md, "Predicting llama.cpp"): its decode
//! time per token from where a placement puts each tensor (`graph`), fitted
//! to llama-bench runs of a few placements (`runs`, `calibrate`, `fit`) and
//! kept in the profile's `llama_cpp` section, so that the plan and the
//! baselines a llama.cpp user compares are priced as llama.cpp runs them.

pub mod calibrate;
pub mod fit;
pub mod graph;
pub mod runs;

use residency_core::cost::Instance;

/// Seconds per token of `placement` as llama.cpp runs it: by the profile's
/// llama.cpp timing where it has one, else by the cost model.
pub fn llama_cpp_seconds(inst: &Instance, placement: &[usize]) -> f64 {
    match &inst.resources.llama_cpp {
        Some(timing) => graph::instance_work(inst, placement).seconds(timing),
        None => inst.evaluate(placement).token_seconds,
    }
}

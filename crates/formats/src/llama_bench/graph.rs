//! A token's decode graph at batch 1 as llama.cpp runs it, for its timing:
//! steps in graph order, each the weights one device reads (bytes per
//! token: a layer's routed experts at their use rate), and what the steps
//! cost (`Work`) in the units of `LlamaCppTiming`'s terms. llama.cpp runs
//! the graph one device at a time (the scheduler's splits), so the time is
//! a sum: per-layer overheads by where each layer's attention runs, one
//! crossing per change of device (the embeddings are looked up on the CPU,
//! the logits read back on it), the CPU's bytes at its fitted rate and each
//! GPU's at its `gemv_bandwidth`.
//!
//! One `Work` serves both sides: the fit (`calibrate`) builds steps from a
//! GGUF's tensors and a run's flags, the prediction (`instance_work`) from
//! an instance's placement.

use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::profile::LlamaCppTiming;
use std::collections::BTreeMap;

/// Where a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Device {
    Cpu,
    Gpu(usize),
}

/// One step of the graph.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub device: Device,
    /// Weight bytes read per token.
    pub bytes: f64,
    /// Routed-expert matrices multiplied per token (see `Work::cpu_matrices`).
    pub matrices: f64,
    /// The first step of a transformer layer (its attention): the layer's
    /// overhead is charged to this step's device.
    pub starts_layer: bool,
}

/// The amounts each term of `LlamaCppTiming` multiplies, per token.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Work {
    pub gpu_layers: f64,
    pub cpu_layers: f64,
    pub crossings: f64,
    pub cpu_bytes: f64,
    /// Routed-expert matrices the CPU multiplies per token: top_k per expert
    /// tensor (gate, up, down) of a layer on the CPU. Counted per expert,
    /// not per tensor (llama.cpp's one `mul_mat_id` per tensor): a layer has
    /// three expert tensors in every geometry, so a per-tensor cost is the
    /// same per layer in `q` and `g2` and cannot see why `g2`'s CPU layers
    /// run faster at the same bytes per layer; `mul_mat_id` walks its
    /// top_k experts one matrix at a time (a GEMV each, its threads
    /// synchronised per expert), and `g2` has half as many per layer.
    pub cpu_matrices: f64,
    /// Seconds no term is fitted for: the GPUs' weights at their
    /// `gemv_bandwidth`, reads from a drive.
    pub fixed_seconds: f64,
}

impl Work {
    /// The work of `steps` in graph order; `gpu_bytes_per_s[g]` is GPU g's
    /// weight rate.
    pub fn of(steps: &[Step], gpu_bytes_per_s: &[f64]) -> Work {
        let mut work = Work::default();
        let mut at = Device::Cpu;
        for step in steps {
            if step.device != at {
                work.crossings += 1.0;
                at = step.device;
            }
            match step.device {
                Device::Cpu => {
                    work.cpu_bytes += step.bytes;
                    work.cpu_matrices += step.matrices;
                    work.cpu_layers += f64::from(u8::from(step.starts_layer));
                }
                Device::Gpu(g) => {
                    work.fixed_seconds += step.bytes / gpu_bytes_per_s[g];
                    work.gpu_layers += f64::from(u8::from(step.starts_layer));
                }
            }
        }
        if at != Device::Cpu {
            work.crossings += 1.0;
        }
        work
    }

    /// Seconds per token under `timing`.
    pub fn seconds(&self, timing: &LlamaCppTiming) -> f64 {
        timing.token_overhead.0
            + self.gpu_layers * timing.gpu_layer_overhead.0
            + self.cpu_layers * timing.cpu_layer_overhead.0
            + self.crossings * timing.crossing_overhead.0
            + self.cpu_bytes / timing.cpu_bandwidth.0
            + self.cpu_matrices * timing.cpu_matrix_overhead.0
            + self.fixed_seconds
    }
}

/// The work of an instance's placement in llama.cpp: per transformer layer
/// its trunk components in model order (attention first), then its routed
/// experts, one step per device (GPUs first); the layerless trunk (the
/// head) last. RAM and drive places are llama.cpp's CPU buffer; a drive's
/// reads (the OS paging the mapped file in) add their seconds.
pub fn instance_work(inst: &Instance, placement: &[usize]) -> Work {
    let r = &inst.resources;
    let mut by_layer: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for &o in &inst.trunk_ids {
        if let ObjectKind::Trunk { layer, .. } = inst.objects[o].kind {
            by_layer.entry(layer).or_default().push(o);
        }
    }
    // Every caller has priced the llama.cpp baselines first, which refuse an
    // instance whose MoE ordinals map to no layer; none reaches here.
    let moe_layers = inst.moe_layers().unwrap_or_default();
    for (m, &layer) in moe_layers.iter().enumerate() {
        by_layer
            .entry(Some(layer))
            .or_default()
            .extend(&inst.expert_ids[m]);
    }
    let mut steps = Vec::new();
    let mut drive_seconds = 0.0;
    // `None` (the head) sorts first in a BTreeMap: take it last.
    let ordered = by_layer
        .iter()
        .filter(|(l, _)| l.is_some())
        .chain(by_layer.iter().filter(|(l, _)| l.is_none()));
    for (layer, objects) in ordered {
        let first = steps.len();
        // (bytes, matrices) of the layer's experts per device.
        let mut experts: BTreeMap<Device, (f64, f64)> = BTreeMap::new();
        for &o in objects {
            let object = &inst.objects[o];
            let place = inst.places[placement[o]];
            let (device, bytes) = match place {
                Place::Gpu(g) => (Device::Gpu(g), object.gpu_bytes),
                Place::Ram(_) => (Device::Cpu, object.ram_bytes),
                Place::Disk(d) => {
                    let b = object.disk_bytes as f64;
                    drive_seconds += object.use_rate
                        * (r.drive_latency_seconds[d] + b / r.drive_read_bytes_per_s[d]);
                    (Device::Cpu, object.disk_bytes)
                }
                Place::Recompute => continue,
            };
            let bytes = object.use_rate * bytes as f64;
            if object.is_expert() {
                let e = experts.entry(device).or_default();
                e.0 += bytes;
                e.1 += object.use_rate * object.gemvs();
            } else {
                steps.push(Step {
                    device,
                    bytes,
                    matrices: 0.0,
                    starts_layer: false,
                });
            }
        }
        // A layer's experts on a GPU before those on the CPU: with one
        // buffer per layer (what llama.cpp holds) the order is moot.
        let mut expert_steps: Vec<(Device, (f64, f64))> = experts.into_iter().collect();
        expert_steps.sort_by_key(|(d, _)| matches!(d, Device::Cpu));
        steps.extend(
            expert_steps
                .into_iter()
                .map(|(device, (bytes, matrices))| Step {
                    device,
                    bytes,
                    matrices,
                    starts_layer: false,
                }),
        );
        if layer.is_some() && steps.len() > first {
            steps[first].starts_layer = true;
        }
    }
    let mut work = Work::of(&steps, &r.gpu_gemv_bytes_per_s);
    work.fixed_seconds += drive_seconds;
    work
}

#[cfg(test)]
mod tests;

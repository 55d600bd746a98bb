//! The hardware profile (docs/design.md §3.1): NUMA nodes, GPUs, drives and the
//! overlap of I/O with compute. Read from YAML and validated strictly, so the
//! cost model can trust every rate to be positive and every reference to exist.

use crate::error::{from_yaml, read_document, PlannerError, Result};
use crate::limits;
use crate::units::{Bytes, BytesPerSecond, Seconds};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NumaNode {
    pub id: usize,
    pub ram: Bytes,
    #[serde(default)]
    pub reserved: Bytes,
    #[serde(default)]
    pub staging: Bytes,
    pub cores: u32,
    pub gemv_bandwidth: BytesPerSecond,
    /// What a stage in which the node computes anything pays beyond its
    /// bytes: waking its threads, splitting and joining the work (0: not
    /// modelled; `profile calibrate` measures it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stage_overhead: Seconds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

fn is_zero(s: &Seconds) -> bool {
    s.0 == 0.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub id: usize,
    pub name: String,
    pub vram: Bytes,
    #[serde(default)]
    pub reserved: Bytes,
    pub numa: usize,
    pub gemv_bandwidth: BytesPerSecond,
    pub upload_bandwidth: BytesPerSecond,
    pub sync_overhead: Seconds,
    /// What each GEMV a stage runs on the card pays beyond its bytes, in a
    /// batched launch (0: not modelled; `profile calibrate` measures it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gemv_overhead: Seconds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Drive {
    pub id: usize,
    pub name: String,
    pub numa: usize,
    pub read_bandwidth: BytesPerSecond,
    pub read_latency: Seconds,
    /// Reads the drive serves at once, sharing its bandwidth: reads issued
    /// together land in waves of this many (`profile calibrate` measures
    /// it; 1: one after another). Only felt wait reads it: a layer's
    /// misses land in waves, and the compute of what has landed hides the
    /// rest.
    #[serde(default = "one_read_at_once", skip_serializing_if = "is_one")]
    pub read_concurrency: u32,
}

fn one_read_at_once() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    pub network_bandwidth: BytesPerSecond,
    pub network_latency: Seconds,
}

/// llama.cpp's decode time per token at batch 1 on this machine (docs/gguf.md,
/// "Predicting llama.cpp"), fitted by `profile calibrate --from-llama-bench`
/// from llama-bench runs of a few placements. llama.cpp runs a token's graph
/// one device at a time, so its time is a sum, not the cost model's max per
/// stage: these terms, plus the weights each GPU reads at its
/// `gemv_bandwidth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlamaCppTiming {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Weights llama.cpp's CPU kernels read per second (with the thread
    /// count of the runs).
    pub cpu_bandwidth: BytesPerSecond,
    /// Per transformer layer whose attention runs on a GPU (its kernel
    /// launches).
    pub gpu_layer_overhead: Seconds,
    /// Per transformer layer whose attention runs on the CPU (its
    /// operators' thread barriers).
    pub cpu_layer_overhead: Seconds,
    /// Per change of device along a token's graph: the activations copied
    /// and one synchronisation.
    pub crossing_overhead: Seconds,
    /// Per routed-expert matrix the CPU multiplies per token (top_k per
    /// expert tensor of a layer): at the same bytes, a geometry of more,
    /// smaller expert matrices runs slower on the CPU. Absent (0) in
    /// profiles fitted to runs of one file, which cannot tell it from the
    /// per-byte rate.
    #[serde(default)]
    pub cpu_matrix_overhead: Seconds,
    /// Per token, whatever the placement.
    #[serde(default)]
    pub token_overhead: Seconds,
}

fn default_true() -> bool {
    true
}

/// The hardware profile file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub numa: Vec<NumaNode>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub drives: Vec<Drive>,
    #[serde(default = "default_true")]
    pub io_overlaps_compute: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub felt_fraction: Option<f64>,
    #[serde(default)]
    pub fixed_token_seconds: Seconds,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<Host>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp: Option<LlamaCppTiming>,
}

impl HardwareProfile {
    /// The felt fraction `f` of docs/design.md §4: 1 without overlap, else the given share.
    pub fn felt_fraction(&self) -> f64 {
        if self.io_overlaps_compute {
            self.felt_fraction.unwrap_or(0.0)
        } else {
            1.0
        }
    }

    /// Bytes objects may use on GPU `g`: `vram - reserved`.
    pub fn gpu_capacity(&self, g: usize) -> u64 {
        self.gpus[g].vram.0 - self.gpus[g].reserved.0
    }

    /// Bytes objects may use on node `n`: `ram - reserved - staging`.
    pub fn ram_capacity(&self, n: usize) -> u64 {
        let node = &self.numa[n];
        node.ram.0 - node.reserved.0 - node.staging.0
    }

    pub fn from_yaml_file(path: &Path) -> Result<HardwareProfile> {
        Self::from_yaml_str(&read_document(path)?, path)
    }

    pub fn from_yaml_str(text: &str, path: &Path) -> Result<HardwareProfile> {
        let profile: HardwareProfile = from_yaml(
            text,
            path,
            "see docs/design.md §3.1 for the profile fields and units",
        )?;
        profile.validate(path)?;
        Ok(profile)
    }

    /// Checks the rules of docs/design.md §3.1.
    pub fn validate(&self, path: &Path) -> Result<()> {
        self.check_ids(path)?;
        self.check_numa(path)?;
        self.check_gpus(path)?;
        self.check_drives(path)?;
        self.check_felt_fraction(path)?;
        duration(path, "fixed_token_seconds".into(), self.fixed_token_seconds)?;
        self.check_hosts(path)?;
        self.check_llama_cpp(path)
    }

    /// llama.cpp's CPU rate is positive and its overheads are times.
    fn check_llama_cpp(&self, path: &Path) -> Result<()> {
        let Some(t) = &self.llama_cpp else {
            return Ok(());
        };
        positive_rate(path, "llama_cpp.cpu_bandwidth".into(), t.cpu_bandwidth)?;
        let overheads = [
            ("gpu_layer_overhead", t.gpu_layer_overhead),
            ("cpu_layer_overhead", t.cpu_layer_overhead),
            ("crossing_overhead", t.crossing_overhead),
            ("cpu_matrix_overhead", t.cpu_matrix_overhead),
            ("token_overhead", t.token_overhead),
        ];
        for (key, time) in overheads {
            if !limits::time_in_range(time.0) {
                return invalid(
                    path,
                    format!("llama_cpp.{key}"),
                    format!("is {time}"),
                    "give a time between 0 and 1e6 s, such as `40 us`",
                );
            }
        }
        Ok(())
    }

    /// At least one NUMA node, and every list's ids dense from 0.
    fn check_ids(&self, path: &Path) -> Result<()> {
        if self.numa.is_empty() {
            return invalid(
                path,
                "numa".into(),
                "lists no node".into(),
                "describe at least one NUMA node (a desktop has one)",
            );
        }
        dense_ids(path, self.numa.iter().map(|n| n.id).collect(), "numa")?;
        dense_ids(path, self.gpus.iter().map(|g| g.id).collect(), "gpus")?;
        dense_ids(path, self.drives.iter().map(|d| d.id).collect(), "drives")
    }

    /// Every node has memory and cores, some of its memory left for objects,
    /// and a positive GEMV rate.
    fn check_numa(&self, path: &Path) -> Result<()> {
        for (i, n) in self.numa.iter().enumerate() {
            size(path, format!("numa[{i}].ram"), n.ram)?;
            size(path, format!("numa[{i}].reserved"), n.reserved)?;
            size(path, format!("numa[{i}].staging"), n.staging)?;
            if n.ram.0 == 0 {
                return invalid(
                    path,
                    format!("numa[{i}].ram"),
                    "is zero".into(),
                    "give the node's memory, e.g. `256 GiB`",
                );
            }
            if n.cores == 0 {
                return invalid(
                    path,
                    format!("numa[{i}].cores"),
                    "is zero".into(),
                    "give the node's core count",
                );
            }
            if n.reserved.0 + n.staging.0 >= n.ram.0 {
                return invalid(
                    path,
                    format!("numa[{i}]"),
                    format!(
                        "reserved {} + staging {} leave nothing of ram {}",
                        n.reserved, n.staging, n.ram
                    ),
                    "reserved + staging must be below ram",
                );
            }
            positive_rate(path, format!("numa[{i}].gemv_bandwidth"), n.gemv_bandwidth)?;
            duration(path, format!("numa[{i}].stage_overhead"), n.stage_overhead)?;
        }
        Ok(())
    }

    /// Every GPU has memory left after its reservation, a listed node,
    /// positive rates and a finite sync overhead.
    fn check_gpus(&self, path: &Path) -> Result<()> {
        for (i, g) in self.gpus.iter().enumerate() {
            size(path, format!("gpus[{i}].vram"), g.vram)?;
            size(path, format!("gpus[{i}].reserved"), g.reserved)?;
            if g.vram.0 == 0 {
                return invalid(
                    path,
                    format!("gpus[{i}].vram"),
                    "is zero".into(),
                    "give the card's memory, e.g. `8 GiB`",
                );
            }
            if g.reserved.0 >= g.vram.0 {
                return invalid(
                    path,
                    format!("gpus[{i}].reserved"),
                    format!("{} leaves nothing of vram {}", g.reserved, g.vram),
                    "reserved must be below vram",
                );
            }
            self.check_node(path, format!("gpus[{i}].numa"), g.numa)?;
            positive_rate(path, format!("gpus[{i}].gemv_bandwidth"), g.gemv_bandwidth)?;
            positive_rate(
                path,
                format!("gpus[{i}].upload_bandwidth"),
                g.upload_bandwidth,
            )?;
            duration(path, format!("gpus[{i}].sync_overhead"), g.sync_overhead)?;
            duration(path, format!("gpus[{i}].gemv_overhead"), g.gemv_overhead)?;
        }
        Ok(())
    }

    /// Every drive names a listed node and reads at a positive rate.
    fn check_drives(&self, path: &Path) -> Result<()> {
        for (i, d) in self.drives.iter().enumerate() {
            self.check_node(path, format!("drives[{i}].numa"), d.numa)?;
            positive_rate(
                path,
                format!("drives[{i}].read_bandwidth"),
                d.read_bandwidth,
            )?;
            duration(path, format!("drives[{i}].read_latency"), d.read_latency)?;
        }
        Ok(())
    }

    /// That `node`, given at `place`, is a listed NUMA node.
    fn check_node(&self, path: &Path, place: String, node: usize) -> Result<()> {
        if node >= self.numa.len() {
            return invalid(
                path,
                place,
                format!(
                    "names node {}, but the profile lists {} node(s)",
                    node,
                    self.numa.len()
                ),
                "name a listed NUMA node id",
            );
        }
        Ok(())
    }

    /// The felt fraction is a share, and 1 when I/O does not overlap compute.
    fn check_felt_fraction(&self, path: &Path) -> Result<()> {
        match self.felt_fraction {
            Some(f) if !(0.0..=1.0).contains(&f) || f.is_nan() => {
                return invalid(
                    path,
                    "felt_fraction".into(),
                    format!("is {f}"),
                    "give a share between 0 and 1",
                );
            }
            Some(f) if !self.io_overlaps_compute && f != 1.0 => {
                return invalid(
                    path,
                    "felt_fraction".into(),
                    format!("is {f} but io_overlaps_compute is false, so every read is felt"),
                    "drop felt_fraction or set it to 1",
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Every host a node or GPU names is listed in `hosts`.
    fn check_hosts(&self, path: &Path) -> Result<()> {
        for (i, h) in self.hosts.iter().enumerate() {
            positive_rate(
                path,
                format!("hosts[{i}].network_bandwidth"),
                h.network_bandwidth,
            )?;
            duration(
                path,
                format!("hosts[{i}].network_latency"),
                h.network_latency,
            )?;
        }
        let host_names: Vec<&str> = self.hosts.iter().map(|h| h.name.as_str()).collect();
        let hosts = self
            .numa
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("numa[{i}].host"), &n.host))
            .chain(
                self.gpus
                    .iter()
                    .enumerate()
                    .map(|(i, g)| (format!("gpus[{i}].host"), &g.host)),
            );
        for (place, host) in hosts {
            if let Some(h) = host {
                if !host_names.contains(&h.as_str()) {
                    return invalid(
                        path,
                        place,
                        format!("names host `{h}`, which `hosts` does not list"),
                        "add it to `hosts`",
                    );
                }
            }
        }
        Ok(())
    }
}

/// The error for an invalid profile `path`, at `place`.
fn invalid(path: &Path, place: String, problem: String, fix: &str) -> Result<()> {
    Err(PlannerError::input(path, place, problem, fix))
}

/// That the ids of list `what` are unique and dense from 0, in list order.
fn dense_ids(path: &Path, ids: Vec<usize>, what: &str) -> Result<()> {
    for (i, id) in ids.into_iter().enumerate() {
        if id != i {
            return invalid(
                path,
                format!("{what}[{i}].id"),
                format!("is {id}, expected {i}"),
                "ids are unique and dense from 0, in list order",
            );
        }
    }
    Ok(())
}

/// That `rate`, given at `place`, is positive and finite.
fn positive_rate(path: &Path, place: String, rate: BytesPerSecond) -> Result<()> {
    if limits::rate_in_range(rate.0) {
        Ok(())
    } else {
        invalid(
            path,
            place,
            format!("is {rate}, not a rate between 1 B/s and 1 PB/s"),
            "give a rate such as `25 GB/s`",
        )
    }
}

fn duration(path: &Path, place: String, time: Seconds) -> Result<()> {
    if limits::time_in_range(time.0) {
        Ok(())
    } else {
        invalid(
            path,
            place,
            "is not a time between 0 and 1e6 s".into(),
            "give a time such as `120 us`",
        )
    }
}

/// That `size`, given at `place`, is at most `limits::MAX_BYTES`.
fn size(path: &Path, place: String, size: Bytes) -> Result<()> {
    if size.0 <= limits::MAX_BYTES {
        Ok(())
    } else {
        invalid(
            path,
            place,
            format!("is {size}, over 1 EiB"),
            "give the size in bytes, such as `64 GiB`",
        )
    }
}

#[cfg(test)]
mod tests;

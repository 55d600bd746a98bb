//! The reference cost model of design §4 (docs/design.md), implemented once. An
//! `Instance` is the compiled problem (objects with use rates and sizes,
//! stages, places, resource rates, capacities); `Instance::evaluate` gives
//! `token_seconds` of a placement with its per-stage, per-resource breakdown.
//! The planner, `explain`, the simulator's plan policy and the re-planner all
//! call this, never a copy of it.
//!
//! KV prefix groups (design §4.6) are objects of one extra stage, `kv`, whose
//! time is the sum (not the max) of the prefill seconds per token they still
//! cost: recomputed when not kept, uploaded when in RAM, nothing on a GPU.
//! That is design §4.6's objective plus the constant `sum r_k * prefill_k`,
//! so `token_seconds` stays positive and the gap keeps its meaning.

use crate::constraints::Compiled;
use crate::context::ContextReservation;
use crate::model::StageKind;
use crate::profile::{HardwareProfile, LlamaCppTiming};
use std::fmt;

mod compile;
mod evaluate;
mod loads;

pub use loads::{Change, Resource, StageLoads};

/// Name of the stage that holds the KV groups.
pub const KV_STAGE: &str = "kv";

/// Where an object lives (design §4, Places).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    Gpu(usize),
    Ram(usize),
    Disk(usize),
    /// Not kept: a KV group's prefix is recomputed on reuse. Only KV groups
    /// go here, and only instances with KV groups have this place.
    Recompute,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Gpu(i) => write!(f, "gpu:{i}"),
            Place::Ram(i) => write!(f, "ram:{i}"),
            Place::Disk(i) => write!(f, "disk:{i}"),
            Place::Recompute => write!(f, "recompute"),
        }
    }
}

impl std::str::FromStr for Place {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (kind, id) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}` is not a place like gpu:0"))?;
        let id: usize = id
            .parse()
            .map_err(|_| format!("`{s}`: `{id}` is not an id"))?;
        match kind {
            "gpu" => Ok(Place::Gpu(id)),
            "ram" => Ok(Place::Ram(id)),
            "disk" => Ok(Place::Disk(id)),
            _ => Err(format!("`{s}`: place kind must be gpu, ram or disk")),
        }
    }
}

/// What an object is: a routed expert, a trunk component or a KV prefix group.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectKind {
    /// MoE ordinal and expert index.
    Expert { moe: usize, expert: usize },
    /// Name and transformer layer of a trunk component.
    Trunk { name: String, layer: Option<usize> },
    /// A KV prefix group and the prefill seconds one reuse avoids on a GPU.
    KvGroup { name: String, prefill_seconds: f64 },
}

/// One placeable object with its use rate and its size in each tier.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: ObjectKind,
    pub stage: usize,
    /// Uses per token (`p_o`; 1 for trunk components, `r_k` for KV groups).
    pub use_rate: f64,
    pub gpu_bytes: u64,
    pub ram_bytes: u64,
    pub disk_bytes: u64,
}

impl Object {
    pub fn is_expert(&self) -> bool {
        matches!(self.kind, ObjectKind::Expert { .. })
    }
    pub fn is_trunk(&self) -> bool {
        matches!(self.kind, ObjectKind::Trunk { .. })
    }
    pub fn is_kv(&self) -> bool {
        matches!(self.kind, ObjectKind::KvGroup { .. })
    }
    /// GEMVs one use runs: an expert's gate, up and down projections (every
    /// MoE family the planner reads has gated experts); one for a trunk
    /// component, as `bench` runs it; none for a KV group.
    pub fn gemvs(&self) -> f64 {
        match self.kind {
            ObjectKind::Expert { .. } => 3.0,
            ObjectKind::Trunk { .. } => 1.0,
            ObjectKind::KvGroup { .. } => 0.0,
        }
    }
    /// Bytes charged to `place`'s capacity (0 on disk, the checkpoint, and
    /// when recomputed).
    pub fn bytes_at(&self, place: Place) -> u64 {
        match place {
            Place::Gpu(_) => self.gpu_bytes,
            Place::Ram(_) => self.ram_bytes,
            Place::Disk(_) | Place::Recompute => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub name: String,
    pub kind: StageKind,
    pub objects: Vec<usize>,
}

/// Rates of the machine, in the units of the formulas of design §4.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    pub gpu_gemv_bytes_per_s: Vec<f64>,
    pub gpu_sync_seconds: Vec<f64>,
    /// Per GEMV on the card beyond its bytes (`gemv_overhead`).
    pub gpu_gemv_seconds: Vec<f64>,
    pub gpu_upload_bytes_per_s: Vec<f64>,
    pub gpu_capacity_bytes: Vec<u64>,
    pub cpu_gemv_bytes_per_s: Vec<f64>,
    /// What a stage in which the node computes pays (`stage_overhead`).
    pub cpu_stage_seconds: Vec<f64>,
    pub ram_capacity_bytes: Vec<u64>,
    pub drive_numa: Vec<usize>,
    pub drive_read_bytes_per_s: Vec<f64>,
    pub drive_latency_seconds: Vec<f64>,
    pub felt_fraction: f64,
    pub fixed_token_seconds: f64,
    /// Host of each GPU (`None`: the profile names no hosts); exports to
    /// multi-node engines number ranks host by host.
    pub gpu_hosts: Vec<Option<String>>,
    /// llama.cpp's timing on this machine, where the profile has it.
    pub llama_cpp: Option<LlamaCppTiming>,
    /// The KV cache kept off `gpu_capacity_bytes` (`plan --context-tokens`).
    pub context: Option<ContextReservation>,
}

impl Resources {
    pub fn from_profile(profile: &HardwareProfile) -> Resources {
        Resources {
            gpu_gemv_bytes_per_s: profile.gpus.iter().map(|g| g.gemv_bandwidth.0).collect(),
            gpu_sync_seconds: profile.gpus.iter().map(|g| g.sync_overhead.0).collect(),
            gpu_gemv_seconds: profile.gpus.iter().map(|g| g.gemv_overhead.0).collect(),
            gpu_upload_bytes_per_s: profile.gpus.iter().map(|g| g.upload_bandwidth.0).collect(),
            gpu_capacity_bytes: (0..profile.gpus.len())
                .map(|g| profile.gpu_capacity(g))
                .collect(),
            cpu_gemv_bytes_per_s: profile.numa.iter().map(|n| n.gemv_bandwidth.0).collect(),
            cpu_stage_seconds: profile.numa.iter().map(|n| n.stage_overhead.0).collect(),
            ram_capacity_bytes: (0..profile.numa.len())
                .map(|n| profile.ram_capacity(n))
                .collect(),
            drive_numa: profile.drives.iter().map(|d| d.numa).collect(),
            drive_read_bytes_per_s: profile.drives.iter().map(|d| d.read_bandwidth.0).collect(),
            drive_latency_seconds: profile.drives.iter().map(|d| d.read_latency.0).collect(),
            felt_fraction: profile.felt_fraction(),
            gpu_hosts: profile.gpus.iter().map(|g| g.host.clone()).collect(),
            fixed_token_seconds: profile.fixed_token_seconds.0,
            llama_cpp: profile.llama_cpp.clone(),
            context: None,
        }
    }
    pub fn gpus(&self) -> usize {
        self.gpu_gemv_bytes_per_s.len()
    }
    pub fn numa_nodes(&self) -> usize {
        self.cpu_gemv_bytes_per_s.len()
    }
    pub fn drives(&self) -> usize {
        self.drive_read_bytes_per_s.len()
    }
    /// Places in plan order: GPUs, RAM nodes, drives, each by id.
    pub fn places(&self) -> Vec<Place> {
        (0..self.gpus())
            .map(Place::Gpu)
            .chain((0..self.numa_nodes()).map(Place::Ram))
            .chain((0..self.drives()).map(Place::Disk))
            .collect()
    }
    /// Capacity of a GPU or RAM place; disk and recompute are unbounded.
    pub fn capacity_bytes(&self, place: Place) -> Option<u64> {
        match place {
            Place::Gpu(g) => Some(self.gpu_capacity_bytes[g]),
            Place::Ram(n) => Some(self.ram_capacity_bytes[n]),
            Place::Disk(_) | Place::Recompute => None,
        }
    }
}

/// The compiled planning problem.
#[derive(Debug, Clone)]
pub struct Instance {
    pub resources: Resources,
    pub places: Vec<Place>,
    pub stages: Vec<Stage>,
    pub objects: Vec<Object>,
    /// Object id of expert `e` of MoE ordinal `l`: `expert_ids[l][e]`.
    pub expert_ids: Vec<Vec<usize>>,
    /// Object ids of trunk components, in model order.
    pub trunk_ids: Vec<usize>,
    /// Object ids of KV prefix groups, in input order (all in the last stage).
    pub kv_ids: Vec<usize>,
    /// The user's constraints (`Instance::constrain`); empty by default.
    pub constraints: Compiled,
}

/// The cost of a placement, stage by stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub token_seconds: f64,
    pub stage_seconds: Vec<f64>,
    pub bottlenecks: Vec<Place>,
    pub loads: Vec<StageLoads>,
    /// Bytes used per GPU and per RAM node.
    pub gpu_used_bytes: Vec<u64>,
    pub ram_used_bytes: Vec<u64>,
}

impl Evaluation {
    /// Places whose capacity the placement exceeds, with the excess bytes.
    pub fn overfull(&self, resources: &Resources) -> Vec<(Place, u64)> {
        let gpus = self
            .gpu_used_bytes
            .iter()
            .enumerate()
            .map(|(g, &u)| (Place::Gpu(g), u, resources.gpu_capacity_bytes[g]));
        let rams = self
            .ram_used_bytes
            .iter()
            .enumerate()
            .map(|(n, &u)| (Place::Ram(n), u, resources.ram_capacity_bytes[n]));
        gpus.chain(rams)
            .filter(|(_, u, c)| u > c)
            .map(|(p, u, c)| (p, u - c))
            .collect()
    }
}

#[cfg(test)]
mod tests;

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
use crate::heat::HeatTable;
use crate::kv::KvGroup;
use crate::model::{Model, StageKind};
use crate::profile::{HardwareProfile, LlamaCppTiming};
use crate::units::{Bytes, Seconds};
use crate::{PlannerError, Result};
use std::fmt;
use std::path::Path;

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

/// Work of each resource in one stage (design §4): `G` without the sync
/// overhead, `C` without felt I/O and the stage overhead, `D`; and which
/// GPUs and CPU nodes take part (objects they compute). `prefill` is the
/// KV stage's prefill seconds, added to the stage's time, not maxed.
#[derive(Debug, Clone, PartialEq)]
pub struct StageLoads {
    pub gpu: Vec<f64>,
    pub gpu_objects: Vec<u32>,
    pub cpu: Vec<f64>,
    pub cpu_objects: Vec<u32>,
    pub drive: Vec<f64>,
    pub prefill: f64,
}

impl StageLoads {
    pub fn new(resources: &Resources) -> StageLoads {
        StageLoads {
            gpu: vec![0.0; resources.gpus()],
            gpu_objects: vec![0; resources.gpus()],
            cpu: vec![0.0; resources.numa_nodes()],
            cpu_objects: vec![0; resources.numa_nodes()],
            drive: vec![0.0; resources.drives()],
            prefill: 0.0,
        }
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) object `o` at `place`.
    pub fn apply(&mut self, resources: &Resources, o: &Object, place: Place, sign: f64) {
        let count = |objects: &mut u32| *objects = (*objects as i64 + sign as i64) as u32;
        let computes = resources.computing_entry(o, place);
        for (i, (resource, work)) in resources.work(o, place).into_iter().enumerate() {
            match resource {
                Resource::Gpu(g) => {
                    self.gpu[g] += sign * work;
                    if computes == Some(i) {
                        count(&mut self.gpu_objects[g]);
                    }
                }
                Resource::Cpu(n) => {
                    self.cpu[n] += sign * work;
                    if computes == Some(i) {
                        count(&mut self.cpu_objects[n]);
                    }
                }
                Resource::Drive(d) => self.drive[d] += sign * work,
                Resource::Prefill => self.prefill += sign * work,
            }
        }
    }

    /// GPU g's time in the stage: its work plus its sync overhead if it takes part.
    pub fn gpu_seconds(&self, resources: &Resources, g: usize) -> f64 {
        let sync = if self.gpu_objects[g] > 0 {
            resources.gpu_sync_seconds[g]
        } else {
            0.0
        };
        self.gpu[g] + sync
    }

    /// Node n's CPU time in the stage: its work plus its stage overhead if
    /// it takes part (felt reads not included).
    pub fn cpu_seconds(&self, resources: &Resources, n: usize) -> f64 {
        let overhead = if self.cpu_objects[n] > 0 {
            resources.cpu_stage_seconds[n]
        } else {
            0.0
        };
        self.cpu[n] + overhead
    }

    /// `T[s]` of design §4 and the resource that sets it.
    pub fn seconds(&self, resources: &Resources) -> (f64, Place) {
        self.seconds_with(resources, &[])
    }

    /// `T[s]` as if `changes` (resource, work added, objects added) were
    /// applied: what a move would do, without copying the loads.
    pub fn seconds_with(&self, resources: &Resources, changes: &[Change]) -> (f64, Place) {
        let changed = |resource: Resource, base: f64| {
            base + changes
                .iter()
                .filter(|c| c.resource == resource)
                .map(|c| c.work)
                .sum::<f64>()
        };
        let drive = |d: usize| changed(Resource::Drive(d), self.drive[d]);
        let max_drive = (0..self.drive.len()).map(drive).fold(0.0, f64::max);
        let f = resources.felt_fraction;
        let mut best = (0.0, Place::Ram(0));
        let added_objects = |resource: Resource| {
            changes
                .iter()
                .filter(|c| c.resource == resource)
                .map(|c| c.objects)
                .sum::<i64>()
        };
        for g in 0..self.gpu.len() {
            let objects = self.gpu_objects[g] as i64 + added_objects(Resource::Gpu(g));
            let sync = if objects > 0 {
                resources.gpu_sync_seconds[g]
            } else {
                0.0
            };
            let t = changed(Resource::Gpu(g), self.gpu[g]) + sync;
            if t > best.0 {
                best = (t, Place::Gpu(g));
            }
        }
        for n in 0..self.cpu.len() {
            let objects = self.cpu_objects[n] as i64 + added_objects(Resource::Cpu(n));
            let overhead = if objects > 0 {
                resources.cpu_stage_seconds[n]
            } else {
                0.0
            };
            let t = changed(Resource::Cpu(n), self.cpu[n]) + overhead + f * max_drive;
            if t > best.0 {
                best = (t, Place::Ram(n));
            }
        }
        for d in 0..self.drive.len() {
            let t = drive(d);
            if t > best.0 {
                best = (t, Place::Disk(d));
            }
        }
        let prefill = changed(Resource::Prefill, self.prefill);
        if prefill > best.0 {
            best.1 = Place::Recompute;
        }
        (best.0 + prefill, best.1)
    }
}

/// A resource whose time counts in a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Gpu(usize),
    Cpu(usize),
    Drive(usize),
    /// Prefill seconds a KV group still costs per token.
    Prefill,
}

/// A change of one resource's work and object count in a stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    pub resource: Resource,
    pub work: f64,
    pub objects: i64,
}

impl Resources {
    /// Prefill seconds one reuse of a KV group of `bytes` avoids at `place`
    /// (`pi_k[q]` of design §4.6): all of `prefill_seconds` on a GPU; from RAM
    /// the same less its upload over the fastest link (all of it when there
    /// is no GPU: the CPU attends from RAM); nothing elsewhere.
    pub fn kv_saved_seconds(&self, bytes: u64, prefill_seconds: f64, place: Place) -> f64 {
        match place {
            Place::Gpu(_) => prefill_seconds,
            Place::Ram(_) => {
                let fastest = self
                    .gpu_upload_bytes_per_s
                    .iter()
                    .copied()
                    .fold(0.0, f64::max);
                if fastest > 0.0 {
                    (prefill_seconds - bytes as f64 / fastest).max(0.0)
                } else {
                    prefill_seconds
                }
            }
            Place::Disk(_) | Place::Recompute => 0.0,
        }
    }

    /// Prefill seconds per generated token a KV group still costs at `place`
    /// (its `Prefill` work): `r * (prefill - saved)`.
    pub fn kv_seconds(&self, o: &Object, place: Place) -> f64 {
        debug_assert!(o.is_kv(), "only KV groups cost prefill");
        self.work(o, place)[0].1
    }

    /// The work (seconds per token) object `o` puts on each resource when at
    /// `place` (design §4): a streamed expert loads its drive and the cores
    /// of the drive's node; the second entry is zero work otherwise.
    pub fn work(&self, o: &Object, place: Place) -> [(Resource, f64); 2] {
        let p = o.use_rate;
        if let ObjectKind::KvGroup {
            prefill_seconds, ..
        } = o.kind
        {
            let saved = self.kv_saved_seconds(o.gpu_bytes, prefill_seconds, place);
            return [
                (Resource::Prefill, p * (prefill_seconds - saved)),
                (Resource::Prefill, 0.0),
            ];
        }
        match place {
            Place::Gpu(g) => [
                (
                    Resource::Gpu(g),
                    p * (o.gpu_bytes as f64 / self.gpu_gemv_bytes_per_s[g]
                        + o.gemvs() * self.gpu_gemv_seconds[g]),
                ),
                (Resource::Cpu(0), 0.0),
            ],
            Place::Ram(n) => [
                (
                    Resource::Cpu(n),
                    p * o.ram_bytes as f64 / self.cpu_gemv_bytes_per_s[n],
                ),
                (Resource::Cpu(n), 0.0),
            ],
            Place::Disk(d) => {
                let b = o.disk_bytes as f64;
                let n = self.drive_numa[d];
                [
                    (
                        Resource::Drive(d),
                        p * (self.drive_latency_seconds[d] + b / self.drive_read_bytes_per_s[d]),
                    ),
                    (Resource::Cpu(n), p * b / self.cpu_gemv_bytes_per_s[n]),
                ]
            }
            Place::Recompute => unreachable!("only KV groups are recomputed"),
        }
    }

    /// Which of `work(o, place)`'s entries is the device computing `o`
    /// (its GPU, its node's CPU, or for a drive the CPU of the drive's
    /// node), whose participation in the stage it counts for; `None` for
    /// a KV group, which is prefill, not a GEMV.
    pub fn computing_entry(&self, o: &Object, place: Place) -> Option<usize> {
        match place {
            _ if o.is_kv() => None,
            Place::Gpu(_) | Place::Ram(_) => Some(0),
            Place::Disk(_) => Some(1),
            Place::Recompute => None,
        }
    }

    /// The changes of moving `o` from `from` to `to`.
    pub fn move_changes(&self, o: &Object, from: Place, to: Place) -> [Change; 4] {
        let change = |place: Place, sign: f64, i: usize| {
            let (resource, work) = self.work(o, place)[i];
            let objects = if self.computing_entry(o, place) == Some(i) {
                sign as i64
            } else {
                0
            };
            Change {
                resource,
                work: sign * work,
                objects,
            }
        };
        [
            change(from, -1.0, 0),
            change(from, -1.0, 1),
            change(to, 1.0, 0),
            change(to, 1.0, 1),
        ]
    }
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

impl Instance {
    /// Compiles profile, model and use rates (`rates[l][e]`, from heat) into an instance.
    pub fn new(profile: &HardwareProfile, model: &Model, rates: &[Vec<f64>]) -> Instance {
        let resources = Resources::from_profile(profile);
        let places = resources.places();
        let mut stages = Vec::new();
        let mut dense_stage = vec![usize::MAX; model.description.layers];
        let mut experts_stage = vec![usize::MAX; model.description.layers];
        let moe_layers = model.moe_layer_numbers();
        for layer in 0..model.description.layers {
            dense_stage[layer] = stages.len();
            stages.push(Stage {
                name: format!("L{layer}.dense"),
                kind: StageKind::Dense,
                objects: vec![],
            });
            if moe_layers.contains(&layer) {
                experts_stage[layer] = stages.len();
                stages.push(Stage {
                    name: format!("L{layer}.experts"),
                    kind: StageKind::Experts,
                    objects: vec![],
                });
            }
        }
        let head_stage = stages.len();
        stages.push(Stage {
            name: "head".into(),
            kind: StageKind::Head,
            objects: vec![],
        });

        let mut objects = Vec::new();
        let mut expert_ids = Vec::new();
        for (l, moe) in model.moe.iter().enumerate() {
            let stage = experts_stage[moe.layer];
            let mut ids = Vec::with_capacity(moe.experts);
            for (e, &use_rate) in rates[l].iter().enumerate() {
                ids.push(objects.len());
                stages[stage].objects.push(objects.len());
                objects.push(Object {
                    kind: ObjectKind::Expert { moe: l, expert: e },
                    stage,
                    use_rate,
                    gpu_bytes: moe.gpu_bytes,
                    ram_bytes: moe.ram_bytes,
                    disk_bytes: moe.disk_bytes,
                });
            }
            expert_ids.push(ids);
        }
        let mut trunk_ids = Vec::new();
        for t in &model.trunk {
            let stage = match (t.stage, t.layer) {
                (StageKind::Dense, Some(layer)) => dense_stage[layer],
                (StageKind::Experts, Some(layer)) => experts_stage[layer],
                _ => head_stage,
            };
            trunk_ids.push(objects.len());
            stages[stage].objects.push(objects.len());
            objects.push(Object {
                kind: ObjectKind::Trunk {
                    name: t.name.clone(),
                    layer: t.layer,
                },
                stage,
                use_rate: 1.0,
                gpu_bytes: t.bytes,
                ram_bytes: t.bytes,
                disk_bytes: t.bytes,
            });
        }
        Instance {
            resources,
            places,
            stages,
            objects,
            expert_ids,
            trunk_ids,
            kv_ids: Vec::new(),
            constraints: Compiled::default(),
        }
    }

    /// Adds KV prefix groups: a `kv` stage after the head holding them, and
    /// the `recompute` place for groups not kept. Call at most once.
    pub fn add_kv_groups(&mut self, groups: &[KvGroup]) {
        if groups.is_empty() {
            return;
        }
        debug_assert!(self.kv_ids.is_empty(), "KV groups are added once");
        let stage = self.stages.len();
        self.stages.push(Stage {
            name: KV_STAGE.into(),
            kind: StageKind::Head,
            objects: vec![],
        });
        self.places.push(Place::Recompute);
        for g in groups {
            let o = self.objects.len();
            self.kv_ids.push(o);
            self.stages[stage].objects.push(o);
            self.objects.push(Object {
                kind: ObjectKind::KvGroup {
                    name: g.name.clone(),
                    prefill_seconds: g.prefill_seconds.0,
                },
                stage,
                use_rate: g.reuses_per_token,
                gpu_bytes: g.bytes.0,
                ram_bytes: g.bytes.0,
                disk_bytes: 0,
            });
        }
    }

    /// The KV groups in input order: object id and the group.
    pub fn kv_groups(&self) -> impl Iterator<Item = (usize, KvGroup)> + '_ {
        self.kv_ids.iter().map(|&o| {
            let object = &self.objects[o];
            match &object.kind {
                ObjectKind::KvGroup {
                    name,
                    prefill_seconds,
                } => (
                    o,
                    KvGroup {
                        name: name.clone(),
                        bytes: Bytes(object.gpu_bytes),
                        reuses_per_token: object.use_rate,
                        prefill_seconds: Seconds(*prefill_seconds),
                    },
                ),
                _ => unreachable!("kv ids name KV groups"),
            }
        })
    }

    /// Compiles from heat, checking its shape against the model.
    pub fn from_heat(
        profile: &HardwareProfile,
        model: &Model,
        heat: &HeatTable,
        heat_file: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<Instance> {
        let rates = heat.use_rates(model, heat_file, warnings)?;
        Ok(Instance::new(profile, model, &rates))
    }

    /// The trunk components in model order: object id, name, transformer layer.
    pub fn trunk(&self) -> impl Iterator<Item = (usize, &str, Option<usize>)> + '_ {
        self.trunk_ids.iter().map(|&o| match &self.objects[o].kind {
            ObjectKind::Trunk { name, layer } => (o, name.as_str(), *layer),
            _ => unreachable!("trunk ids name trunk components"),
        })
    }

    /// Transformer layers of the model: `Instance::new` gives each one
    /// dense stage.
    pub fn layers(&self) -> usize {
        self.stages
            .iter()
            .filter(|s| s.kind == StageKind::Dense)
            .count()
    }

    /// Transformer layer of each MoE ordinal, from the stage names
    /// `L<layer>.experts` that `Instance::new` gives them.
    pub fn moe_layers(&self) -> Result<Vec<usize>> {
        self.expert_ids
            .iter()
            .map(|ids| {
                let stage = ids
                    .first()
                    .map(|&o| &self.stages[self.objects[o].stage].name);
                stage
                    .and_then(|s| s.strip_prefix('L')?.strip_suffix(".experts")?.parse().ok())
                    .ok_or_else(|| {
                        PlannerError::Solver(format!(
                            "experts stage {stage:?} is not named `L<layer>.experts`"
                        ))
                    })
            })
            .collect()
    }

    /// Replaces every expert's use rate with `rates[l][e]` (MoE ordinal
    /// `l`, expert `e`): new heat for the same model and machine, without
    /// building the instance again.
    pub fn set_expert_rates(&mut self, rates: &[Vec<f64>]) {
        for (ids, layer) in self.expert_ids.iter().zip(rates) {
            for (&o, &rate) in ids.iter().zip(layer) {
                self.objects[o].use_rate = rate;
            }
        }
    }

    /// Index of a place in `places`.
    pub fn place_index(&self, place: Place) -> usize {
        self.places
            .iter()
            .position(|&p| p == place)
            .expect("place of this instance")
    }

    /// Whether object `o` may live at `place`: where its kind may
    /// (`allowed_kind`) and, when pinned, only at its pin.
    pub fn allowed(&self, o: usize, place: Place) -> bool {
        self.allowed_kind(o, place)
            && (self.constraints.pins.get(o)).is_none_or(|pin| pin.is_none_or(|p| p == place))
    }

    /// Whether an object of `o`'s kind may live at `place`: experts
    /// anywhere but recompute, trunk on GPUs and RAM, KV groups anywhere
    /// but disk.
    pub fn allowed_kind(&self, o: usize, place: Place) -> bool {
        match place {
            Place::Gpu(_) | Place::Ram(_) => true,
            Place::Disk(_) => self.objects[o].is_expert(),
            Place::Recompute => self.objects[o].is_kv(),
        }
    }

    /// The places a plan file lists: the profile's (without `recompute`).
    pub fn profile_places(&self) -> impl Iterator<Item = Place> + '_ {
        self.places
            .iter()
            .copied()
            .filter(|&q| q != Place::Recompute)
    }

    /// The cost model's value of a placement (`placement[o]` = index into `places`).
    pub fn evaluate(&self, placement: &[usize]) -> Evaluation {
        let r = &self.resources;
        let mut gpu_used = vec![0u64; r.gpus()];
        let mut ram_used = vec![0u64; r.numa_nodes()];
        let mut loads = Vec::with_capacity(self.stages.len());
        let mut stage_seconds = Vec::with_capacity(self.stages.len());
        let mut bottlenecks = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            let mut l = StageLoads::new(r);
            for &o in &stage.objects {
                let place = self.places[placement[o]];
                l.apply(r, &self.objects[o], place, 1.0);
                match place {
                    Place::Gpu(g) => gpu_used[g] += self.objects[o].gpu_bytes,
                    Place::Ram(n) => ram_used[n] += self.objects[o].ram_bytes,
                    Place::Disk(_) | Place::Recompute => {}
                }
            }
            let (t, b) = l.seconds(r);
            stage_seconds.push(t);
            bottlenecks.push(b);
            loads.push(l);
        }
        Evaluation {
            token_seconds: stage_seconds.iter().sum::<f64>() + r.fixed_token_seconds,
            stage_seconds,
            bottlenecks,
            loads,
            gpu_used_bytes: gpu_used,
            ram_used_bytes: ram_used,
        }
    }

    /// `T` of one token that routes to the experts `routed[s]` in stage `s`
    /// (object ids): those experts used once, the stage's other experts not
    /// at all, everything else at its use rate. Its mean over tokens is the
    /// expectation of each stage's max over resources, which `evaluate`
    /// (the max of the expected loads) undercounts where a stage's
    /// resources balance and routing moves work between them.
    pub fn routed_token_seconds(&self, placement: &[usize], routed: &[Vec<usize>]) -> f64 {
        let r = &self.resources;
        let mut total = r.fixed_token_seconds;
        for (stage, experts) in self.stages.iter().zip(routed) {
            let mut l = StageLoads::new(r);
            let others = stage
                .objects
                .iter()
                .filter(|&&o| !self.objects[o].is_expert());
            for &o in others {
                l.apply(r, &self.objects[o], self.places[placement[o]], 1.0);
            }
            for &o in experts {
                let once = Object {
                    use_rate: 1.0,
                    ..self.objects[o].clone()
                };
                l.apply(r, &once, self.places[placement[o]], 1.0);
            }
            total += l.seconds(r).0;
        }
        total
    }

    /// Checks that a placement is complete, allowed (pins included), within
    /// capacities (budgets included) and spreads no constrained layer over
    /// more places than allowed.
    pub fn check_feasible(&self, placement: &[usize]) -> std::result::Result<(), String> {
        if placement.len() != self.objects.len() {
            return Err(format!(
                "{} objects placed, {} expected",
                placement.len(),
                self.objects.len()
            ));
        }
        for (o, &q) in placement.iter().enumerate() {
            if q >= self.places.len() || !self.allowed_kind(o, self.places[q]) {
                return Err(format!("object {o} has an invalid place index {q}"));
            }
            if !self.allowed(o, self.places[q]) {
                return Err(format!(
                    "{} is at {}, against a pin",
                    crate::solution::describe(self, o),
                    self.places[q]
                ));
            }
        }
        if let Some((group, n)) = self.constraints.broken_group(placement) {
            return Err(format!(
                "{} is broken: the experts use {n} places",
                group.reason
            ));
        }
        let over = self.evaluate(placement).overfull(&self.resources);
        match over.first() {
            Some((place, excess)) => Err(format!("{place} is over its capacity by {excess} bytes")),
            None => Ok(()),
        }
    }

    /// Fails unless every object can be held somewhere (design §4, Capacities).
    pub fn check_holdable(&self, file: &Path) -> Result<()> {
        let r = &self.resources;
        let room: u64 = r
            .gpu_capacity_bytes
            .iter()
            .chain(&r.ram_capacity_bytes)
            .sum();
        let must_hold: u64 = self
            .objects
            .iter()
            .filter(|o| o.is_trunk() || (o.is_expert() && r.drives() == 0))
            .map(|o| o.gpu_bytes.min(o.ram_bytes))
            .sum();
        if must_hold > room {
            let what = if r.drives() == 0 {
                "the model (no drive to stream from)"
            } else {
                "the trunk"
            };
            return Err(PlannerError::Infeasible(format!(
                "{}: {what} needs at least {} bytes in GPU and RAM, which hold {room}: {} bytes are missing",
                file.display(),
                must_hold,
                must_hold - room
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

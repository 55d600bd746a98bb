//! What a placed object costs each resource in its stage: the per-stage
//! loads of GPUs, CPU nodes, drives and prefill, the work of one object
//! at a place, and the changes a move makes to them.

use super::{Object, ObjectKind, Place, Resources};

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

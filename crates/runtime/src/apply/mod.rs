//! Applying a plan at model load (design §7): map the plan's placements onto
//! a checkpoint's objects, build the store with one budget per place, load
//! every planned resident in parallel, tier by tier, and optionally read it
//! all back and compare checksums with an independent buffered read.
//!
//! Objects the plan leaves on a disk get their home in the first RAM place,
//! unpinned: they are cached there on demand under the place's policy.
//! A `gpu:N` place's objects are uploaded to device N of the GPU tier
//! (CUDA, else Vulkan) and verified by reading them back; a GPU place
//! without a device is held in host memory (said once, by the caller,
//! through `Applied::notes`).

pub mod loader;

use crate::checkpoint::Checkpoint;
use crate::gpu::{Device, GpuLoader, GpuOptions, GpuTier};
use crate::identity::ObjectKey;
use crate::storage::{numa_nodes, HostPool, ReadBackend, StorageError};
use crate::store::{Homes, Loader, PlaceConfig, Store, StoreConfig, StoreError};
use loader::{CheckpointLoader, RETAINED_BYTES};
use residency_core::plan::Plan;
use residency_policy::{ObjectIndex, PolicyKind, PolicyParams};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Loads in flight at once.
    pub threads: usize,
    pub verify: bool,
    /// Policy of every place's cached (unplanned) part.
    pub policy: PolicyKind,
    pub staging_bytes: u64,
    /// Directories holding identical copies of the checkpoint's shards on
    /// other drives: each read goes to the least busy copy.
    pub mirrors: Vec<std::path::PathBuf>,
    /// The devices `gpu:N` places go to; `None`: `GpuTier::detect`, when
    /// the plan has GPU places.
    pub gpus: Option<GpuTier>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            threads: 8,
            verify: false,
            policy: PolicyKind::Lru,
            staging_bytes: 1 << 30,
            mirrors: Vec::new(),
            gpus: None,
        }
    }
}

/// What `residency apply --json` writes
/// (`schemas/apply-output.schema.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ApplyReport {
    pub tiers: Vec<TierLoad>,
    /// Whether every resident read back equal to a plain read (false when
    /// `--verify` did not run).
    pub verified: bool,
    pub telemetry: crate::store::telemetry::Telemetry,
}

/// What loading one place took.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TierLoad {
    pub place: String,
    pub objects: usize,
    pub bytes: u64,
    pub seconds: f64,
}

pub struct Applied {
    pub store: Store,
    /// The store's reader of the checkpoint (the chosen backend, O_DIRECT
    /// by default): what reads an object afresh, past every cache.
    pub loader: Arc<CheckpointLoader>,
    /// Dense index of every object, by key.
    pub index: HashMap<ObjectKey, ObjectIndex>,
    pub tiers: Vec<TierLoad>,
    /// `Some(all equal)` when verification ran.
    pub verified: Option<bool>,
    /// Things to say once (GPU places in host memory, objects left out).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{}: {place}: {problem}; {fix}", plan.display())]
    Mismatch {
        plan: std::path::PathBuf,
        place: String,
        problem: String,
        fix: String,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies `plan` (read from `plan_path`, for messages) to `checkpoint`,
/// reading through `backend` (`storage::open_backend`, or a fault-injecting
/// one in tests). `progress(bytes)` is called as resident bytes finish
/// loading.
pub fn apply(
    plan: &Plan,
    plan_path: &Path,
    checkpoint: &Checkpoint,
    options: &ApplyOptions,
    backend: Box<dyn ReadBackend>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Applied, ApplyError> {
    let mut notes = Vec::new();
    let places = object_places(plan, options.policy);
    let (keys, homes) = planned_objects(plan, plan_path, checkpoint, &places)?;
    let left_out = checkpoint.objects.len() - keys.len();
    if left_out > 0 {
        notes.push(format!(
            "{left_out} checkpoint objects are not in the plan (the embedding: read a row per token) and are not loaded"
        ));
    }
    let holds: Vec<bool> = (0..places.len())
        .map(|p| (0..keys.len()).any(|o| homes.pinned[o] && homes.place[o] == p))
        .collect();
    let place_devices = place_devices(&places, &holds, options.gpus.as_ref(), &mut notes);
    let pools = host_pools(&places, &place_devices);
    let loader = Arc::new(
        CheckpointLoader::new(checkpoint, keys.clone(), backend, &options.mirrors)?
            .with_pools(pools, homes.place.iter().map(|&p| p as u32).collect()),
    );
    let config = store_config(&places, options);
    let gpu = Arc::new(GpuLoader::new(
        loader.clone(),
        homes
            .place
            .iter()
            .map(|&p| place_devices[p].clone())
            .collect(),
    ));
    let store = Store::new(gpu.clone(), homes.clone(), &config)?;
    let tiers = load_places(&store, &loader, &places, &homes, options, progress)?;
    let verified = if options.verify {
        let resident: Vec<ObjectIndex> = (0..keys.len())
            .filter(|&o| homes.pinned[o])
            .map(|o| o as ObjectIndex)
            .collect();
        Some(verify(&store, &loader, &gpu, &resident)?)
    } else {
        None
    };
    let index = keys
        .into_iter()
        .enumerate()
        .map(|(o, k)| (k, o as ObjectIndex))
        .collect();
    Ok(Applied {
        store,
        loader,
        index,
        tiers,
        verified,
        notes,
    })
}

/// The error for a plan that does not fit the checkpoint, at `place` of the plan.
fn mismatch(plan_path: &Path, place: String, problem: String) -> ApplyError {
    ApplyError::Mismatch {
        plan: plan_path.to_path_buf(),
        place,
        problem,
        fix: "apply the plan to the checkpoint it was made for (plan --model DIR)".into(),
    }
}

/// Places objects can live in (not disks), with their capacities, each
/// caching under `policy`.
fn object_places(plan: &Plan, policy: PolicyKind) -> Vec<PlaceConfig> {
    plan.usage
        .iter()
        .filter(|u| !u.place.starts_with("disk"))
        .map(|u| PlaceConfig {
            name: u.place.clone(),
            capacity_bytes: u.capacity_bytes,
            tier: u.place.split(':').next().unwrap_or("ram").to_string(),
            policy,
            pin_share_bytes: None,
        })
        .collect()
}

/// Every planned object, with its home and whether it is pinned there:
/// pinned in its planned place, or unpinned in the first RAM place when the
/// plan leaves it on a disk.
fn planned_objects(
    plan: &Plan,
    plan_path: &Path,
    checkpoint: &Checkpoint,
    places: &[PlaceConfig],
) -> Result<(Vec<ObjectKey>, Homes), ApplyError> {
    let place_of = |name: &str| places.iter().position(|p| p.name == name);
    let Some(cache_home) = places.iter().position(|p| p.tier == "ram") else {
        return Err(mismatch(
            plan_path,
            "usage".into(),
            "the plan has no RAM place".into(),
        ));
    };
    let mut keys = Vec::new();
    let mut home = Vec::new();
    let mut pinned = Vec::new();
    for (key, place) in planned_places(plan, plan_path, checkpoint)? {
        let at = place_of(place);
        keys.push(key);
        home.push(at.unwrap_or(cache_home));
        pinned.push(at.is_some());
    }
    let homes = Homes {
        place: home,
        pinned,
    };
    Ok((keys, homes))
}

/// Every object the plan places (experts, then trunk), with the place the
/// plan gives it; an error when the checkpoint lacks one.
fn planned_places<'p>(
    plan: &'p Plan,
    plan_path: &Path,
    checkpoint: &Checkpoint,
) -> Result<Vec<(ObjectKey, &'p str)>, ApplyError> {
    let moe_layers = checkpoint.config.moe_layers();
    if plan.experts.len() != moe_layers.len() {
        return Err(mismatch(
            plan_path,
            "experts".into(),
            format!(
                "the plan places {} MoE layers, the checkpoint has {}",
                plan.experts.len(),
                moe_layers.len()
            ),
        ));
    }
    let experts = checkpoint.config.experts;
    if let Some(l) = plan.experts.iter().position(|row| row.len() != experts) {
        return Err(mismatch(
            plan_path,
            format!("experts[{l}]"),
            format!(
                "places {} experts, the checkpoint's MoE layers have {experts}",
                plan.experts[l].len()
            ),
        ));
    }
    let mut planned = Vec::new();
    for (l, row) in plan.experts.iter().enumerate() {
        for (e, &p) in row.iter().enumerate() {
            let key = ObjectKey::Expert {
                layer: moe_layers[l] as u32,
                expert: e as u32,
            };
            if checkpoint.extents(&key).is_empty() {
                return Err(mismatch(
                    plan_path,
                    format!("experts[{l}][{e}]"),
                    format!("the checkpoint has no {key}"),
                ));
            }
            planned.push((key, plan.places[p].as_str()));
        }
    }
    for t in &plan.trunk {
        let key = ObjectKey::Trunk {
            name: t.name.clone(),
            layer: t.layer.map(|l| l as u32),
        };
        if checkpoint.extents(&key).is_empty() {
            return Err(mismatch(
                plan_path,
                format!("trunk {key}"),
                "the checkpoint has no such component".into(),
            ));
        }
        planned.push((key, t.place.as_str()));
    }
    Ok(planned)
}

/// The host pool each place reads into. RAM places read into their node's
/// pool; GPU places read into node 0's (until the card's NUMA affinity is
/// known), page-locked for the card's DMA where its driver can, so uploads
/// need no staging copy.
fn host_pools(
    places: &[PlaceConfig],
    place_devices: &[Option<Arc<dyn Device>>],
) -> Vec<Arc<HostPool>> {
    let nodes = numa_nodes();
    places
        .iter()
        .zip(place_devices)
        .map(|(p, device)| {
            let node = p
                .name
                .strip_prefix("ram:")
                .and_then(|n| n.parse().ok())
                .filter(|n| nodes.contains(n));
            let pinner = device.as_ref().and_then(|d| d.pinner());
            HostPool::pinned_by(node.or(nodes.first().copied()), RETAINED_BYTES, pinner)
        })
        .collect()
}

/// The store's configuration: one budget per place, staging as `options` say.
fn store_config(places: &[PlaceConfig], options: &ApplyOptions) -> StoreConfig {
    StoreConfig {
        places: places.to_vec(),
        tier_capacity_bytes: Vec::new(),
        staging_bytes: options.staging_bytes,
        wait: Duration::from_secs(30),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    }
}

/// Loads each place's pinned objects, place by place, timing each.
fn load_places(
    store: &Store,
    loader: &CheckpointLoader,
    places: &[PlaceConfig],
    homes: &Homes,
    options: &ApplyOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<TierLoad>, ApplyError> {
    let mut tiers = Vec::new();
    for (p, place) in places.iter().enumerate() {
        let objects: Vec<ObjectIndex> = (0..homes.place.len())
            .filter(|&o| homes.pinned[o] && homes.place[o] == p)
            .map(|o| o as ObjectIndex)
            .collect();
        let started = Instant::now();
        store.load_all(&objects, options.threads, progress)?;
        tiers.push(TierLoad {
            place: place.name.clone(),
            objects: objects.len(),
            bytes: objects.iter().map(|&o| loader.size_bytes(o)).sum(),
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(tiers)
}

/// The device each place's objects go to: `gpu:N`'s is the tier's device
/// N. GPU places that `hold` objects but have no device are held in host
/// memory, said in one note; GPUs are looked for only when one holds any.
fn place_devices(
    places: &[PlaceConfig],
    holds: &[bool],
    gpus: Option<&GpuTier>,
    notes: &mut Vec<String>,
) -> Vec<Option<Arc<dyn Device>>> {
    let is_used_gpu = |p: usize| places[p].tier == "gpu" && holds[p];
    if !(0..places.len()).any(is_used_gpu) {
        return vec![None; places.len()];
    }
    let detected;
    let tier = match gpus {
        Some(tier) => tier,
        None => {
            detected = GpuTier::detect(&GpuOptions::default());
            &detected
        }
    };
    let devices: Vec<_> = places
        .iter()
        .map(|p| {
            tier.device(p.name.strip_prefix("gpu:")?.parse().ok()?)
                .cloned()
        })
        .collect();
    let in_host: Vec<&str> = (0..places.len())
        .filter(|&p| is_used_gpu(p) && devices[p].is_none())
        .map(|p| places[p].name.as_str())
        .collect();
    if !in_host.is_empty() {
        notes.push(format!(
            "{} held in host memory ({})",
            in_host.join(", "),
            tier.summary()
        ));
    }
    devices
}

/// Reads every object back through the store (from its device, for GPU
/// residents) and compares its sha256 with that of a buffered read of the
/// same tensors, done here independently of the backend that loaded it.
fn verify(
    store: &Store,
    loader: &CheckpointLoader,
    gpu: &GpuLoader,
    objects: &[ObjectIndex],
) -> Result<bool, ApplyError> {
    let mismatches = AtomicU64::new(0);
    for &o in objects {
        let lease = store.acquire(o)?;
        let mut reference = Sha256::new();
        for e in loader.extents(o) {
            reference.update(read_plain(&e.shard, e.offset, e.len)?);
        }
        let bytes = match lease.host() {
            Some(bytes) => Cow::Borrowed(bytes),
            // A read-back that fails fails the load's verification.
            None => Cow::Owned(
                gpu.read_back(o, lease.device().unwrap_or_default())
                    .map_err(|e| StoreError::Load {
                        object: o,
                        reason: e.to_string(),
                    })?,
            ),
        };
        if Sha256::digest(&bytes) != reference.finalize() {
            mismatches.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(mismatches.load(Ordering::Relaxed) == 0)
}

fn read_plain(path: &Path, offset: u64, len: u64) -> Result<Vec<u8>, StorageError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|source| StorageError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, offset)
        .map_err(|source| StorageError::Io {
            path: path.to_path_buf(),
            offset,
            source,
        })?;
    Ok(bytes)
}

//! GPU tier tests that run anywhere: chunking and staging, detection on a
//! machine without a driver (a clean "none" with reasons, never a panic),
//! the loader over a host-memory stand-in for a device, and Vulkan's real
//! code on a CPU implementation (lavapipe) where one is installed.

use super::*;
use crate::store::{Homes, Loader, PlaceConfig, Store, StoreConfig};
use residency_policy::{ObjectIndex, PolicyKind, PolicyParams};
use std::sync::Mutex;
use std::time::Duration;

#[test]
fn chunks_alternate_buffers_and_cover_every_byte_once() {
    assert_eq!(staged_chunks(0, 8).count(), 0);
    let chunks: Vec<_> = staged_chunks(21, 8).collect();
    assert_eq!(chunks, vec![(0, 0..8), (1, 8..16), (0, 16..21)]);
    assert_eq!(staged_chunks(8, 8).collect::<Vec<_>>(), vec![(0, 0..8)]);
}

#[test]
fn staging_fill_copies_exactly_across_pieces() {
    let src: Vec<u8> = (0..(3 << 20) + 17).map(|i: u32| (i * 13) as u8).collect();
    let mut staging = vec![0u8; src.len()];
    fill_staging(&mut staging, &src);
    assert_eq!(staging, src);
}

#[test]
fn detection_without_a_driver_is_none_with_reasons_not_a_panic() {
    let tier = GpuTier::detect(&GpuOptions::default());
    if tier.devices().is_empty() {
        // Both backends said why, each on one line.
        assert!(tier.reasons().len() >= 2, "{:?}", tier.reasons());
        assert!(tier.reasons().iter().all(|r| !r.contains('\n')));
        assert!(tier.summary().starts_with("no GPU; no cuda device"));
    }
    let cuda = GpuTier::cuda(&GpuOptions::default());
    if cuda.devices().is_empty() {
        assert!(cuda.reasons()[0].starts_with("no cuda device: "));
    }
}

/// A "device" that keeps objects in host memory, to test what sits above
/// the backends.
struct HostDevice {
    ordinal: u32,
    behaviour: Behaviour,
}

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Exact,
    /// Every upload fails.
    Fails,
    /// Every upload flips its last byte.
    Corrupts,
}

struct HostBuffer {
    ordinal: u32,
    bytes: Vec<u8>,
}

impl ObjectBytes for HostBuffer {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn host(&self) -> Option<&[u8]> {
        None
    }

    fn device(&self) -> Option<(u32, u64)> {
        Some((self.ordinal, self.bytes.as_ptr() as u64))
    }
}

impl DeviceBuffer for HostBuffer {
    fn read_back(&self) -> Result<Vec<u8>, GpuError> {
        Ok(self.bytes.clone())
    }
}

impl Device for HostDevice {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn name(&self) -> &str {
        "host stand-in"
    }

    fn upload(&self, bytes: &[u8]) -> Result<Arc<dyn DeviceBuffer>, GpuError> {
        if self.behaviour == Behaviour::Fails {
            return Err(GpuError::Failed {
                device: device_label(Backend::Cuda, self.ordinal),
                action: format!("allocating {} bytes", bytes.len()),
                problem: "out of memory".into(),
                fix: "free device memory".into(),
            });
        }
        let mut bytes = bytes.to_vec();
        if let (Behaviour::Corrupts, Some(last)) = (self.behaviour, bytes.last_mut()) {
            *last ^= 1;
        }
        Ok(Arc::new(HostBuffer {
            ordinal: self.ordinal,
            bytes,
        }))
    }
}

/// Object `o` is `o + 1` KiB of a pattern.
struct Objects;

fn object_bytes(o: ObjectIndex) -> Vec<u8> {
    (0..(o as usize + 1) << 10)
        .map(|i| (i * 7 + o as usize) as u8)
        .collect()
}

impl Loader for Objects {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        object_bytes(o).len() as u64
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        Ok(Box::new(object_bytes(o)))
    }
}

/// Objects 0 and 1 on `gpu:0` (device `device`), object 2 in `ram:0`.
fn store_over(device: HostDevice) -> (Store, Arc<GpuLoader>) {
    let device: Arc<dyn Device> = Arc::new(device);
    let loader = Arc::new(GpuLoader::new(
        Arc::new(Objects),
        vec![Some(device.clone()), Some(device), None],
    ));
    let place = |name: &str| PlaceConfig {
        name: name.into(),
        capacity_bytes: 1 << 20,
        tier: name.split(':').next().unwrap().into(),
        policy: PolicyKind::Lru,
        pin_share_bytes: None,
    };
    let config = StoreConfig {
        places: vec![place("gpu:0"), place("ram:0")],
        tier_capacity_bytes: Vec::new(),
        staging_bytes: 1 << 20,
        wait: Duration::from_millis(10),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    let homes = Homes {
        place: vec![0, 0, 1],
        pinned: vec![true; 3],
    };
    let store = Store::new(loader.clone(), homes, &config).unwrap();
    (store, loader)
}

#[test]
fn the_loader_puts_gpu_objects_on_their_device_and_reads_them_back() {
    let (store, loader) = store_over(HostDevice {
        ordinal: 0,
        behaviour: Behaviour::Exact,
    });
    for o in 0..2 {
        let lease = store.acquire(o).unwrap();
        assert!(lease.host().is_none(), "the host copy is dropped");
        assert_eq!(lease.device().unwrap().0, 0);
        assert_eq!(lease.len(), object_bytes(o).len());
        let at = lease.device().unwrap();
        assert_eq!(loader.read_back(o, at).unwrap(), object_bytes(o));
        let e = loader.read_back(o, (0, at.1 + 1)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cuda:0: reading back object {o}: ")),
            "{e}"
        );
    }
    let host = store.acquire(2).unwrap();
    assert_eq!(host.host().unwrap(), object_bytes(2));
    assert!(loader.read_back(2, (0, 0)).is_err());
}

#[test]
fn a_failed_upload_fails_the_load_naming_the_device_and_publishes_nothing() {
    let (store, _) = store_over(HostDevice {
        ordinal: 3,
        behaviour: Behaviour::Fails,
    });
    let Err(e) = store.acquire(0) else {
        panic!("the upload failed, the load must too");
    };
    let e = e.to_string();
    assert!(
        e.contains("cuda:3: allocating 1024 bytes: out of memory"),
        "{e}"
    );
    assert_eq!(store.state(0), crate::store::ObjectState::Absent);
    // Host objects are unaffected.
    assert!(store.acquire(2).unwrap().host().is_some());
}

/// Vulkan's real upload and read-back, on a CPU implementation where one
/// is installed (`apt-get install mesa-vulkan-drivers`); elsewhere, the
/// reason there is none.
#[test]
fn vulkan_round_trips_through_both_staging_halves_where_a_device_exists() {
    let options = GpuOptions {
        staging_chunk_bytes: 4 << 10,
        vulkan_cpu: true,
    };
    let tier = GpuTier::vulkan(&options);
    let Some(device) = tier.devices().first() else {
        assert!(tier.reasons()[0].starts_with("no vulkan device: "));
        return;
    };
    // Uploads from several threads take turns on the staging buffer.
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for o in 0..4u32 {
            let (device, done) = (device.clone(), &done);
            scope.spawn(move || {
                let bytes = object_bytes(o * 10 + 9);
                let buffer = device.upload(&bytes[..bytes.len() - 3]).unwrap();
                assert_eq!(buffer.read_back().unwrap(), bytes[..bytes.len() - 3]);
                done.lock().unwrap().push(buffer.device().unwrap());
            });
        }
    });
    let mut addresses = done.into_inner().unwrap();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 4, "every object has its own address");
    let empty = device.upload(&[]).unwrap();
    assert_eq!((empty.len(), empty.read_back().unwrap()), (0, vec![]));
}

/// `residency_testkit::SMALL_DEEPSEEK` generated as bf16 and a plan for it
/// on the default profile (two GPUs and a RAM node), with the first MoE
/// layer's experts moved to gpu:0 and the second's to gpu:1 (the best plan
/// for so small a model keeps everything in RAM). Its dense first layer
/// makes plan rows and checkpoint layers differ by one.
fn planned_checkpoint(
    dir: &std::path::Path,
) -> (residency_core::plan::Plan, crate::checkpoint::Checkpoint) {
    use crate::checkpoint::Checkpoint;
    use residency_core::model::Model;
    use residency_core::plan::Plan;
    use residency_formats::inputs::{InputPaths, Inputs, LoadedModel};
    use residency_solver::{solve, SolveOptions};
    // The kit's generator writes the files; this crate's `Checkpoint` reads
    // them (the kit's own type is another copy of this crate's).
    let ckpt_dir = residency_testkit::generate_bf16(dir, residency_testkit::SMALL_DEEPSEEK);
    let checkpoint = Checkpoint::open(&ckpt_dir).unwrap();
    let model = Model::validate(checkpoint.description(), &ckpt_dir).unwrap();
    let loaded = LoadedModel {
        model,
        sha256: checkpoint.identity.content_id.clone(),
    };
    let mut inputs = Inputs::load_with_model(&InputPaths::default(), Some(loaded)).unwrap();
    let inst = inputs.instance().unwrap();
    let solution = solve(
        &inst,
        SolveOptions {
            time_limit_seconds: 1.0,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    let mut plan = Plan::new(&inst, &solution, inputs.refs.clone(), 1.0);
    let place = |name: &str| plan.places.iter().position(|p| p == name).unwrap();
    let (gpu0, gpu1) = (place("gpu:0"), place("gpu:1"));
    plan.experts[0].fill(gpu0);
    plan.experts[1].fill(gpu1);
    (plan, checkpoint)
}

fn apply_with(
    plan: &residency_core::plan::Plan,
    checkpoint: &crate::checkpoint::Checkpoint,
    gpus: Option<GpuTier>,
) -> Result<crate::apply::Applied, crate::apply::ApplyError> {
    use crate::apply::{apply, ApplyOptions};
    use crate::storage::{open_backend, BackendKind};
    let options = ApplyOptions {
        verify: true,
        gpus,
        ..ApplyOptions::default()
    };
    let backend = open_backend(BackendKind::Pread);
    apply(
        plan,
        "plan.json".as_ref(),
        checkpoint,
        &options,
        backend,
        &|_| {},
    )
}

/// Every planned resident: its object index and the place the plan put it.
fn planned_places(
    plan: &residency_core::plan::Plan,
    checkpoint: &crate::checkpoint::Checkpoint,
    applied: &crate::apply::Applied,
) -> Vec<(ObjectIndex, String)> {
    use crate::identity::ObjectKey;
    let moe_layers = &checkpoint.config.moe_layers();
    let experts = plan.experts.iter().enumerate().flat_map(|(l, row)| {
        row.iter().enumerate().map(move |(e, &p)| {
            let key = ObjectKey::Expert {
                layer: moe_layers[l] as u32,
                expert: e as u32,
            };
            (key, plan.places[p].clone())
        })
    });
    let trunk = plan.trunk.iter().map(|t| {
        let key = ObjectKey::Trunk {
            name: t.name.clone(),
            layer: t.layer.map(|l| l as u32),
        };
        (key, t.place.clone())
    });
    experts
        .chain(trunk)
        .filter(|(_, place)| !place.starts_with("disk"))
        .map(|(key, place)| (applied.index[&key], place))
        .collect()
}

fn host_memory_notes(applied: &crate::apply::Applied) -> Vec<&String> {
    applied
        .notes
        .iter()
        .filter(|n| n.contains("held in host memory"))
        .collect()
}

#[test]
fn apply_uploads_gpu_places_to_their_device_and_verifies_by_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (plan, checkpoint) = planned_checkpoint(dir.path());
    let device: Arc<dyn Device> = Arc::new(HostDevice {
        ordinal: 0,
        behaviour: Behaviour::Exact,
    });
    let tier = GpuTier::from_devices(vec![device]);
    let applied = apply_with(&plan, &checkpoint, Some(tier)).unwrap();
    assert_eq!(applied.verified, Some(true), "read-backs equal plain reads");
    let places = planned_places(&plan, &checkpoint, &applied);
    for (o, place) in &places {
        let lease = applied.store.acquire(*o).unwrap();
        // gpu:0 has a device; gpu:1 and RAM places are in host memory.
        let on_device = place == "gpu:0";
        assert_eq!(
            lease.device().map(|d| d.0),
            on_device.then_some(0),
            "{place}"
        );
        assert_eq!(lease.host().is_some(), !on_device, "{place}");
    }
    let notes = host_memory_notes(&applied);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("gpu:1 held in host memory (cuda:0 host stand-in)"));
}

#[test]
fn apply_without_a_gpu_holds_gpu_places_in_host_memory_said_once() {
    if !GpuTier::detect(&GpuOptions::default()).devices().is_empty() {
        return; // This machine has a GPU: the test above covers the upload.
    }
    let dir = tempfile::tempdir().unwrap();
    let (plan, checkpoint) = planned_checkpoint(dir.path());
    let applied = apply_with(&plan, &checkpoint, None).unwrap();
    assert_eq!(applied.verified, Some(true));
    for (o, _) in planned_places(&plan, &checkpoint, &applied) {
        assert!(applied.store.acquire(o).unwrap().host().is_some());
    }
    let notes = host_memory_notes(&applied);
    assert_eq!(notes.len(), 1, "{:?}", applied.notes);
    assert!(notes[0].starts_with("gpu:0, gpu:1 held in host memory (no GPU; no cuda device: "));
}

#[test]
fn apply_fails_naming_the_device_when_an_upload_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (plan, checkpoint) = planned_checkpoint(dir.path());
    let device: Arc<dyn Device> = Arc::new(HostDevice {
        ordinal: 0,
        behaviour: Behaviour::Fails,
    });
    let Err(e) = apply_with(
        &plan,
        &checkpoint,
        Some(GpuTier::from_devices(vec![device])),
    ) else {
        panic!("an upload failed, apply must too");
    };
    assert!(e.to_string().contains(": cuda:0: allocating "), "{e}");
}

#[test]
fn apply_verification_catches_a_device_that_corrupts() {
    let dir = tempfile::tempdir().unwrap();
    let (plan, checkpoint) = planned_checkpoint(dir.path());
    let device: Arc<dyn Device> = Arc::new(HostDevice {
        ordinal: 0,
        behaviour: Behaviour::Corrupts,
    });
    let applied = apply_with(
        &plan,
        &checkpoint,
        Some(GpuTier::from_devices(vec![device])),
    );
    assert_eq!(applied.unwrap().verified, Some(false));
}

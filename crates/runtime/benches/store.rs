//! The store's speed:
//! - `load`: every object of a generated checkpoint (Mixtral-shaped, 16
//!   experts of 12 MiB plus trunk) loaded through the store with the
//!   checkpoint loader, per backend and loads in flight, with fresh host
//!   pools (what `apply` sees) and with pools warm from the previous
//!   iteration (what serving sees), against the raw O_DIRECT sequential
//!   read of the same shard files (one 4 MiB or 16 MiB read at a time into
//!   one aligned buffer) in the same run;
//! - `lease`: acquire + release of a resident object, uncontended, and the
//!   same from 1, 2, 4 and 8 threads at once (each on its own object; they
//!   share the place's policy lock), as nanoseconds per pair.
//!
//! `cargo bench -p residency-runtime --bench store`; numbers in docs/executor.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use residency_core::model::Model;
use residency_policy::{ObjectIndex, PolicyKind, PolicyParams};
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::checkpoint::{generate, Checkpoint, GenOptions};
use residency_runtime::storage::{open_backend, AlignedSlab, BackendKind};
use residency_runtime::store::{Homes, Loader, ObjectBytes, PlaceConfig, Store, StoreConfig};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODEL: &str = r#"
name: Mixtral-bench
layers: 2
moe_layers: "0..=1"
experts: 8
top_k: 2
hidden: 1024
expert_intermediate: 2048
formats:
  bf16: 12582912
tiers: { gpu: bf16, ram: bf16, disk: bf16 }
trunk:
  - { name: attn, layers: "0..=1", bytes: 8 MiB, stage: dense }
  - { name: lm_head, bytes: 64 MiB, stage: head }
"#;

const READ_BYTES: usize = 4 << 20;

fn store_config(capacity_bytes: u64) -> StoreConfig {
    StoreConfig {
        places: vec![PlaceConfig {
            name: "ram:0".into(),
            capacity_bytes,
            tier: "ram".into(),
            policy: PolicyKind::Lru,
            pin_share_bytes: None,
        }],
        tier_capacity_bytes: vec![],
        staging_bytes: 1 << 20,
        wait: Duration::from_secs(10),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    }
}

fn pinned_store(loader: Arc<dyn Loader>, objects: usize) -> Store {
    let homes = Homes {
        place: vec![0; objects],
        pinned: vec![true; objects],
    };
    Store::new(loader, homes, &store_config(u64::MAX / 4)).unwrap()
}

fn raw_direct_sequential(shards: &[PathBuf], buf: &mut AlignedSlab) -> u64 {
    let read_bytes = buf.len();
    let mut total = 0;
    for path in shards {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .unwrap();
        let len = file.metadata().unwrap().len() as usize;
        let mut offset = 0;
        while offset < len {
            // SAFETY: `buf` is an exclusively borrowed aligned allocation of
            // `read_bytes` bytes.
            let got = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    read_bytes,
                    offset as libc::off_t,
                )
            };
            assert!(got > 0);
            offset += got as usize;
        }
        total += len as u64;
    }
    total
}

fn load(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let yaml = dir.path().join("mixtral-bench.yaml");
    std::fs::write(&yaml, MODEL).unwrap();
    let model = Model::from_yaml_file(&yaml).unwrap();
    let ckpt = dir.path().join("ckpt");
    generate(&model, &yaml, &ckpt, &GenOptions::default()).unwrap();
    let checkpoint = Checkpoint::open(&ckpt).unwrap();
    let keys: Vec<_> = checkpoint.objects.keys().cloned().collect();
    let objects: Vec<ObjectIndex> = (0..keys.len() as ObjectIndex).collect();
    let object_bytes: u64 = keys.iter().map(|k| checkpoint.object_bytes(k)).sum();

    let mut group = c.benchmark_group("load");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    let shard_bytes: u64 = checkpoint
        .shards
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    group.throughput(Throughput::Bytes(shard_bytes));
    for read_bytes in [READ_BYTES, 4 * READ_BYTES] {
        let mut buf = AlignedSlab::new(read_bytes);
        group.bench_function(
            format!("raw_o_direct_sequential_{}MiB", read_bytes >> 20),
            |b| b.iter(|| raw_direct_sequential(&checkpoint.shards, &mut buf)),
        );
    }
    group.throughput(Throughput::Bytes(object_bytes));
    let loader = |kind| -> Arc<dyn Loader> {
        Arc::new(CheckpointLoader::new(&checkpoint, keys.clone(), open_backend(kind), &[]).unwrap())
    };
    for kind in [BackendKind::Direct, BackendKind::IoUring] {
        for threads in [1, 4] {
            group.bench_function(
                format!("store_{}_{threads}_in_flight_fresh_pool", kind.name()),
                |b| {
                    b.iter(|| {
                        pinned_store(loader(kind), keys.len())
                            .load_all(&objects, threads, &|_| {})
                            .unwrap()
                    })
                },
            );
        }
        let warm = loader(kind);
        group.bench_function(
            format!("store_{}_4_in_flight_warm_pool", kind.name()),
            |b| {
                b.iter(|| {
                    pinned_store(warm.clone(), keys.len())
                        .load_all(&objects, 4, &|_| {})
                        .unwrap()
                })
            },
        );
    }
    group.finish();
}

/// Small objects in memory: what the lease path costs without any I/O.
struct Resident(Vec<u64>);

impl Loader for Resident {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.0[o as usize]
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        Ok(Box::new(vec![o as u8; self.0[o as usize] as usize]))
    }
}

fn lease(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    for cached in [false, true] {
        // Pinned objects skip the policy; cached ones tell it of each hit.
        let objects = 8;
        let homes = Homes {
            place: vec![0; objects],
            pinned: vec![!cached; objects],
        };
        let store = Store::new(
            Arc::new(Resident(vec![4096; objects])),
            homes,
            &store_config(1 << 30),
        )
        .unwrap();
        store
            .load_all(&(0..objects as ObjectIndex).collect::<Vec<_>>(), 1, &|_| {})
            .unwrap();
        let kind = if cached { "cached_lru" } else { "pinned" };
        group.bench_function(format!("acquire_release_{kind}"), |b| {
            b.iter(|| drop(store.acquire(3).unwrap()))
        });
        for threads in [1usize, 2, 4, 8] {
            group.bench_function(
                format!("acquire_release_{kind}_{threads}_threads_ns_per_pair"),
                |b| {
                    b.iter_custom(|iters| {
                        let started = Instant::now();
                        std::thread::scope(|scope| {
                            for t in 0..threads {
                                let store = &store;
                                scope.spawn(move || {
                                    for _ in 0..iters {
                                        drop(store.acquire(t as ObjectIndex).unwrap());
                                    }
                                });
                            }
                        });
                        // Time per pair as one thread sees it: wall time over the
                        // pairs each thread did.
                        started.elapsed()
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, load, lease);
criterion_main!(benches);

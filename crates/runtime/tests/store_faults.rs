//! Fault injection on a real checkpoint: short reads and EIO from the
//! storage layer must fail the load with an error naming the object, leave
//! it unpublished and its bytes unreserved, and a retry must then serve
//! exactly the bytes a plain read of its tensors gives.

use residency_testkit as common;

use residency_policy::{ObjectIndex, PolicyKind, PolicyParams};
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::storage::fault::{Fault, FaultyBackend};
use residency_runtime::storage::{open_backend, BackendKind};
use residency_runtime::store::{Homes, ObjectState, PlaceConfig, Store, StoreConfig};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn faults_fail_the_load_and_publish_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = common::tiny_checkpoint(dir.path());
    let keys: Vec<_> = checkpoint.objects.keys().cloned().collect();
    // The first read of object 1 comes up 100 bytes short, the first read
    // of object 3 fails with EIO; every other read (and the retries) is real.
    let first_read = |o: usize| {
        let e = &checkpoint.extents(&keys[o])[0];
        (e.shard.clone(), e.offset)
    };
    let faults = Mutex::new(vec![
        (first_read(1), Fault::ShortRead { got: 100 }),
        (first_read(3), Fault::Eio),
    ]);
    let backend = FaultyBackend::new(open_backend(BackendKind::Direct), move |read| {
        let mut faults = faults.lock().unwrap();
        // A read covering an object starts at its first tensor's offset.
        let at = faults
            .iter()
            .position(|((path, offset), _)| path == read.path && *offset == read.offset)?;
        Some(faults.remove(at).1)
    });
    let loader =
        Arc::new(CheckpointLoader::new(&checkpoint, keys.clone(), Box::new(backend), &[]).unwrap());
    let config = StoreConfig {
        places: vec![PlaceConfig {
            name: "ram:0".into(),
            capacity_bytes: 1 << 30,
            tier: "ram".into(),
            policy: PolicyKind::Lru,
            pin_share_bytes: None,
        }],
        tier_capacity_bytes: vec![],
        staging_bytes: 1 << 20,
        wait: Duration::from_millis(10),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    let homes = Homes {
        place: vec![0; keys.len()],
        pinned: vec![true; keys.len()],
    };
    let store = Store::new(loader.clone(), homes, &config).unwrap();
    let used = || {
        store
            .telemetry()
            .budgets
            .iter()
            .find(|b| b.place == "ram:0")
            .unwrap()
            .used_bytes
    };
    let mut failed = Vec::new();
    let mut loaded_bytes = 0;
    for o in 0..4 as ObjectIndex {
        match store.acquire(o) {
            Ok(lease) => loaded_bytes += lease.len() as u64,
            Err(e) => {
                let line = e.to_string();
                assert!(line.contains(&keys[o as usize].to_string()), "{line}");
                assert!(!line.contains('\n'));
                failed.push((o, line));
            }
        }
    }
    assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1, 3]);
    assert!(failed[0].1.contains("ends early"), "{}", failed[0].1);
    assert!(
        failed[1].1.contains("Input/output error") || failed[1].1.contains("os error 5"),
        "{}",
        failed[1].1
    );
    for (o, _) in &failed {
        assert_eq!(store.state(*o), ObjectState::Absent);
    }
    assert_eq!(used(), loaded_bytes);
    // The retries read for real and must equal a plain read.
    for (o, _) in failed {
        let lease = store.acquire(o).unwrap();
        let mut plain = Vec::new();
        for e in checkpoint.extents(&keys[o as usize]) {
            let mut bytes = vec![0u8; e.len as usize];
            std::fs::File::open(&e.shard)
                .unwrap()
                .read_exact_at(&mut bytes, e.offset)
                .unwrap();
            plain.extend(bytes);
        }
        assert_eq!(lease.host().unwrap(), &plain[..]);
    }
}

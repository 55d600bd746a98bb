//! Tests of `drives`.

use super::*;
use crate::storage::tests::{pseudo_random, write_file};
use crate::storage::{open_backend, BackendKind};

const CHUNK_BYTES: usize = 2 * ALIGN_BYTES;

#[test]
fn stripe_part_lengths_by_hand() {
    // 5 chunks of 10 bytes and a 3-byte tail over 2 parts: part 0 has
    // chunks 0, 2, 4 (30 bytes), part 1 chunks 1, 3 and the tail chunk
    // 5 (23 bytes).
    assert_eq!(stripe_part_len(53, 10, 2, 0), 30);
    assert_eq!(stripe_part_len(53, 10, 2, 1), 23);
    // 3 parts: chunks 0,3 | 1,4 | 2,tail.
    assert_eq!(stripe_part_len(53, 10, 3, 0), 20);
    assert_eq!(stripe_part_len(53, 10, 3, 1), 20);
    assert_eq!(stripe_part_len(53, 10, 3, 2), 13);
    assert_eq!(stripe_part_len(0, 10, 3, 0), 0);
}

#[test]
fn write_stripes_lays_chunks_round_robin() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(5 * CHUNK_BYTES + 100, 7);
    let src = write_file(dir.path(), "src.bin", &content);
    let parts = vec![dir.path().join("p0"), dir.path().join("p1")];
    write_stripes(&src, &parts, CHUNK_BYTES).unwrap();
    let c = |i: usize| &content[i * CHUNK_BYTES..((i + 1) * CHUNK_BYTES).min(content.len())];
    assert_eq!(
        std::fs::read(&parts[0]).unwrap(),
        [c(0), c(2), c(4)].concat()
    );
    assert_eq!(
        std::fs::read(&parts[1]).unwrap(),
        [c(1), c(3), c(5)].concat()
    );
    assert!(!dir.path().join("p0.tmp").exists());
}

#[test]
fn stripe_reads_cross_chunk_boundaries_with_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(7 * CHUNK_BYTES + 1234, 11);
    let src = write_file(dir.path(), "src.bin", &content);
    let parts: Vec<PathBuf> = (0..3)
        .map(|k| dir.path().join(format!("part{k}")))
        .collect();
    write_stripes(&src, &parts, CHUNK_BYTES).unwrap();
    let c = CHUNK_BYTES as u64;
    let cases: [(u64, usize); 7] = [
        (0, content.len()),            // everything
        (c - 10, 20),                  // across chunk 0 | 1 (parts 0 | 1)
        (c - 1, 2 * CHUNK_BYTES + 2),  // touches chunks 0..=3, wraps to part 0
        (3 * c + 5, 100),              // inside one chunk
        (6 * c + 4000, 5426),          // across into the tail chunk, to the end
        (content.len() as u64 - 1, 1), // last byte
        (c, 0),                        // empty
    ];
    for kind in BackendKind::ALL {
        let set = DriveSet::stripe(&parts, CHUNK_BYTES, open_backend(kind).into()).unwrap();
        assert_eq!(set.len_bytes(), content.len() as u64);
        for (offset, len) in cases {
            let mut slab = AlignedSlab::for_read(offset, len);
            let payload = set.read_into(offset, len, &mut slab).unwrap();
            let want = &content[offset as usize..offset as usize + len];
            assert!(&slab[payload] == want, "{kind} {offset}+{len}");
        }
        assert_eq!(set.in_flight_bytes(), vec![0, 0, 0]);
        // Past the end: the part holding the tail ends early.
        let offset = content.len() as u64 - 10;
        let mut slab = AlignedSlab::for_read(offset, 20);
        let err = set.read_into(offset, 20, &mut slab).unwrap_err();
        assert!(
            matches!(&err, StorageError::ShortRead { file, .. } if file == &parts[1]),
            "{kind}: {err}"
        );
    }
}

#[test]
fn stripe_rejects_parts_that_do_not_fit_the_chunk_size() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(3 * CHUNK_BYTES, 3);
    let src = write_file(dir.path(), "src.bin", &content);
    let parts = vec![dir.path().join("a"), dir.path().join("b")];
    write_stripes(&src, &parts, CHUNK_BYTES).unwrap();
    let backend: Arc<dyn ReadBackend> = open_backend(BackendKind::Pread).into();
    // Parts of 4 | 2 blocks (chunks 0, 2 | 1); read as 1-block chunks
    // a 6-block file would be 3 | 3 blocks.
    let err = DriveSet::stripe(&parts, ALIGN_BYTES, backend.clone())
        .err()
        .expect("mismatched parts");
    assert!(err.to_string().contains("rebuild the parts"), "{err}");
    assert!(DriveSet::stripe(&parts, 100, backend).is_err());
}

/// Two "copies" with different content, so the bytes read tell which
/// copy served the read.
fn two_copies(dir: &Path) -> (Vec<PathBuf>, Vec<u8>, Vec<u8>) {
    let first = pseudo_random(3 * ALIGN_BYTES + 17, 1);
    let second = pseudo_random(first.len(), 2);
    let paths = vec![
        write_file(dir, "copy0", &first),
        write_file(dir, "copy1", &second),
    ];
    (paths, first, second)
}

#[test]
fn mirror_reads_avoid_the_busy_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, first, second) = two_copies(dir.path());
    let set = DriveSet::mirror(&paths, open_backend(BackendKind::Direct).into()).unwrap();
    let (offset, len) = (100, 5000);
    let range = offset as usize..offset as usize + len;
    let read = || {
        let mut slab = AlignedSlab::for_read(offset, len);
        let payload = set.read_into(offset, len, &mut slab).unwrap();
        slab[payload].to_vec()
    };
    // Copy 0 busy with 1 MiB: every read goes to copy 1.
    set.drives[0]
        .in_flight_bytes
        .store(1 << 20, Ordering::Relaxed);
    for _ in 0..4 {
        assert!(read() == second[range.clone()]);
    }
    assert_eq!(set.in_flight_bytes(), vec![1 << 20, 0]);
    // Copy 1 busier still: reads move to copy 0.
    set.drives[1]
        .in_flight_bytes
        .store(2 << 20, Ordering::Relaxed);
    assert!(read() == first[range.clone()]);
    // Equally idle: they take turns.
    set.drives[0].in_flight_bytes.store(0, Ordering::Relaxed);
    set.drives[1].in_flight_bytes.store(0, Ordering::Relaxed);
    let served: Vec<bool> = (0..4).map(|_| read() == first[range.clone()]).collect();
    assert!(served.windows(2).all(|w| w[0] != w[1]), "{served:?}");
}

#[test]
fn mirror_counts_bytes_in_flight_during_a_read() {
    use crate::storage::fault::{Fault, FaultCall, FaultyBackend};
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, _) = two_copies(dir.path());
    // The plan records the in-flight counters each read saw: the set
    // reads through this backend, so the set is reachable only through
    // a slot filled after construction.
    let seen: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let slot: Arc<Mutex<Option<Arc<DriveSet>>>> = Arc::default();
    let (seen_in, slot_in) = (seen.clone(), slot.clone());
    let backend = FaultyBackend::new(
        open_backend(BackendKind::Pread),
        move |_: &FaultCall<'_>| -> Option<Fault> {
            let set = slot_in.lock().unwrap().clone().unwrap();
            seen_in.lock().unwrap().push(set.in_flight_bytes());
            None
        },
    );
    let set = Arc::new(DriveSet::mirror(&paths, Arc::new(backend)).unwrap());
    *slot.lock().unwrap() = Some(set.clone());
    let mut slab = AlignedSlab::for_read(0, 300);
    set.read_into(0, 300, &mut slab).unwrap();
    set.read_into(0, 300, &mut slab).unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![vec![300, 0], vec![0, 300]]);
    assert_eq!(set.in_flight_bytes(), vec![0, 0]);
    *slot.lock().unwrap() = None; // break the cycle set -> backend -> slot -> set
}

#[test]
fn mirror_rejects_copies_of_different_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_file(dir.path(), "a", &pseudo_random(5000, 1));
    let b = write_file(dir.path(), "b", &pseudo_random(5001, 1));
    let backend: Arc<dyn ReadBackend> = open_backend(BackendKind::Pread).into();
    let err = DriveSet::mirror(&[a, b], backend.clone()).err().unwrap();
    assert!(err.to_string().contains("copy the file again"), "{err}");
    assert!(DriveSet::mirror(&[], backend).is_err());
}

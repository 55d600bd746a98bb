//! Tests of `fault`.

use super::*;
use crate::storage::tests::{pseudo_random, write_file};
use crate::storage::{open_backend, AlignedSlab, BatchRead};

#[test]
fn faults_hit_the_planned_calls_only() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(20_000, 5);
    let file = DataFile::open(&write_file(dir.path(), "f", &content)).unwrap();
    let backend = FaultyBackend::on_calls(
        open_backend(BackendKind::Pread),
        vec![(1, Fault::ShortRead { got: 10 }), (2, Fault::Eio)],
    );
    let (offset, len) = (5000, 300);
    let mut slab = AlignedSlab::for_read(offset, len);
    let want = &content[5000..5300];

    // Call 0: untouched.
    let payload = backend.read_into(&file, offset, len, &mut slab).unwrap();
    assert!(&slab[payload.clone()] == want);

    // Call 1: short, with exactly the first 10 payload bytes fresh.
    slab.fill(0xEE);
    let err = backend
        .read_into(&file, offset, len, &mut slab)
        .unwrap_err();
    assert!(matches!(
        err,
        StorageError::ShortRead {
            offset: 5000,
            wanted: 300,
            got: 10,
            ..
        }
    ));
    assert!(slab[payload.start..payload.start + 10] == want[..10]);
    assert!(slab[payload.start + 10..payload.end]
        .iter()
        .all(|&b| b == 0xEE));

    // Call 2: EIO naming the file and offset; calls 3.. work again.
    let err = backend
        .read_into(&file, offset, len, &mut slab)
        .unwrap_err();
    let line = err.to_string();
    assert!(
        matches!(&err, StorageError::Io { offset: 5000, source, .. } if source.raw_os_error() == Some(libc::EIO)),
        "{line}"
    );
    assert!(line.contains(&*file.path().to_string_lossy()), "{line}");
    assert!(!line.contains('\n'));
    assert!(backend.read_into(&file, offset, len, &mut slab).is_ok());
    assert_eq!(backend.calls(), 4);
}

#[test]
fn faults_apply_per_read_inside_batches() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(3 * 4096, 6);
    let file = DataFile::open(&write_file(dir.path(), "f", &content)).unwrap();
    // Fault by offset rather than call number.
    let backend = FaultyBackend::new(open_backend(BackendKind::IoUring), |read| {
        (read.offset == 4096).then_some(Fault::Eio)
    });
    let mut slabs: Vec<AlignedSlab> = (0..3).map(|_| AlignedSlab::new(4096)).collect();
    let mut reads: Vec<BatchRead<'_>> = slabs
        .iter_mut()
        .enumerate()
        .map(|(i, slab)| BatchRead::new(&file, 4096 * i as u64, 4096, slab))
        .collect();
    let results = backend.read_batch(&mut reads);
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, vec![true, false, true]);
    assert!(slabs[2][..] == content[8192..]);
}

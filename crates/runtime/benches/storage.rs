//! Storage backends side by side (design §7 "Storage"): a sequential read of
//! a 256 MiB file in 4 MiB reads with each backend, io_uring also with 8
//! reads in flight, and as the baseline a raw O_DIRECT `libc::pread` loop
//! into one aligned buffer.
//!
//! The page cache cannot be dropped without root: O_DIRECT and io_uring
//! read the drive, while `pread` and `mmap` read a warm page cache (the file
//! was just written and read), so they measure copies, not the drive.
//!
//! `cargo bench -p residency-runtime --bench storage` (about 30 s).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use residency_runtime::storage::{
    open_backend, AlignedSlab, BackendKind, BatchRead, DataFile, ReadBackend,
};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

const FILE_BYTES: usize = 256 << 20;
const READ_BYTES: usize = 4 << 20;
const QUEUE_DEPTH: usize = 8;

fn write_test_file(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    // Content is irrelevant to speed but must not be a sparse hole.
    let block: Vec<u8> = (0..READ_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    for _ in 0..FILE_BYTES / READ_BYTES {
        file.write_all(&block).unwrap();
    }
    file.sync_all().unwrap();
}

/// Reads the whole file, one 4 MiB read at a time.
fn read_sequential(backend: &dyn ReadBackend, file: &DataFile, slab: &mut AlignedSlab) {
    for offset in (0..FILE_BYTES).step_by(READ_BYTES) {
        backend
            .read_into(file, offset as u64, READ_BYTES, slab)
            .unwrap();
    }
}

/// Reads the whole file in batches of `QUEUE_DEPTH` 4 MiB reads.
fn read_batched(backend: &dyn ReadBackend, file: &DataFile, slabs: &mut [AlignedSlab]) {
    for batch_start in (0..FILE_BYTES).step_by(READ_BYTES * slabs.len()) {
        let mut reads: Vec<BatchRead<'_>> = slabs
            .iter_mut()
            .enumerate()
            .map(|(i, slab)| {
                BatchRead::new(
                    file,
                    (batch_start + i * READ_BYTES) as u64,
                    READ_BYTES,
                    slab,
                )
            })
            .collect();
        for result in backend.read_batch(&mut reads) {
            result.unwrap();
        }
    }
}

/// The baseline: O_DIRECT `pread` straight into one aligned buffer.
fn raw_direct_pread(path: &Path, buf: &mut AlignedSlab) {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap();
    for offset in (0..FILE_BYTES).step_by(READ_BYTES) {
        // SAFETY: `buf` is a live, exclusively borrowed allocation of
        // `buf.len() >= READ_BYTES` bytes.
        let got = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                READ_BYTES,
                offset as libc::off_t,
            )
        };
        assert_eq!(got, READ_BYTES as isize);
    }
}

fn storage(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.bin");
    write_test_file(&path);
    let file = DataFile::open(&path).unwrap();

    let mut group = c.benchmark_group("sequential_256MiB_in_4MiB");
    group
        .throughput(Throughput::Bytes(FILE_BYTES as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    let mut slab = AlignedSlab::new(READ_BYTES);
    group.bench_function("raw_o_direct_pread", |b| {
        b.iter(|| raw_direct_pread(&path, &mut slab))
    });
    for kind in BackendKind::ALL {
        let backend = open_backend(kind);
        // Named by the backend in use, in case io_uring fell back.
        group.bench_function(backend.kind().name(), |b| {
            b.iter(|| read_sequential(backend.as_ref(), &file, &mut slab))
        });
    }
    let uring = open_backend(BackendKind::IoUring);
    let mut slabs: Vec<AlignedSlab> = (0..QUEUE_DEPTH)
        .map(|_| AlignedSlab::new(READ_BYTES))
        .collect();
    group.bench_function(format!("{}_qd{QUEUE_DEPTH}", uring.kind().name()), |b| {
        b.iter(|| read_batched(uring.as_ref(), &file, &mut slabs))
    });
    group.finish();
}

criterion_group!(benches, storage);
criterion_main!(benches);

//! Tests shared by all backends, and the helpers the other storage tests
//! use: files of known pseudo-random content, which are the independent
//! reference every read is compared with.

use super::file::DataFile;
use super::uring::{fallback_was_logged, uring_or_direct, UringBackend};
use super::*;
use residency_core::rng::Rng;
use std::path::Path;

/// A fixed, seedable byte stream.
pub(super) fn pseudo_random(len_bytes: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0; len_bytes];
    Rng::seeded(seed).fill_bytes(&mut bytes);
    bytes
}

pub(super) fn write_file(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// Every backend `open_backend` can give, and the two fallbacks forced.
fn all_backends() -> Vec<(String, Box<dyn ReadBackend>)> {
    let mut backends: Vec<(String, Box<dyn ReadBackend>)> = BackendKind::ALL
        .into_iter()
        .map(|kind| (kind.name().to_string(), open_backend(kind)))
        .collect();
    let refused = std::io::Error::from_raw_os_error(libc::EPERM);
    backends.push((
        "io-uring refused".to_string(),
        uring_or_direct(Err(refused)),
    ));
    backends
}

/// Reads `[offset, offset + len)` with `backend` and returns the payload.
fn read(backend: &dyn ReadBackend, file: &DataFile, offset: u64, len: usize) -> Vec<u8> {
    let mut slab = AlignedSlab::for_read(offset, len);
    // Garbage first, so that bytes the read did not write cannot pass.
    slab.fill(0xA5);
    let payload = backend
        .read_into(file, offset, len, &mut slab)
        .unwrap_or_else(|e| panic!("{} {offset}+{len}: {e}", backend.kind()));
    assert_eq!(payload, span(offset, len).payload(len));
    slab[payload].to_vec()
}

/// Unaligned ranges of a file: random ones, ones ending exactly at the end,
/// block-aligned ones, and empty ones.
fn ranges(file_bytes: usize, seed: u64) -> Vec<(u64, usize)> {
    let mut ranges = vec![(0, file_bytes), (0, 0), (file_bytes as u64, 0)];
    let random = pseudo_random(8 * 40, seed);
    for pair in random.chunks(8) {
        let a = u32::from_le_bytes(pair[..4].try_into().unwrap()) as usize % (file_bytes + 1);
        let b = u32::from_le_bytes(pair[4..].try_into().unwrap()) as usize % (file_bytes + 1);
        let (start, end) = (a.min(b), a.max(b));
        ranges.push((start as u64, end - start));
        // The same start, up to the end of the file.
        ranges.push((start as u64, file_bytes - start));
    }
    if file_bytes >= ALIGN_BYTES {
        ranges.push((ALIGN_BYTES as u64, file_bytes - ALIGN_BYTES));
        ranges.push((0, ALIGN_BYTES));
    }
    ranges
}

#[test]
fn every_backend_reads_the_bytes_written() {
    let dir = tempfile::tempdir().unwrap();
    // Lengths around block boundaries, so the O_DIRECT tail is partial.
    let lengths = [1, 4095, 4096, 4097, 3 * 4096 + 123, (1 << 20) + 77];
    for (i, &file_bytes) in lengths.iter().enumerate() {
        let content = pseudo_random(file_bytes, i as u64);
        let file = DataFile::open(&write_file(dir.path(), &format!("f{i}"), &content)).unwrap();
        assert_eq!(file.len_bytes(), file_bytes as u64);
        for (name, backend) in all_backends() {
            for (offset, len) in ranges(file_bytes, 100 + i as u64) {
                let got = read(backend.as_ref(), &file, offset, len);
                let start = offset as usize;
                assert!(
                    got == content[start..start + len],
                    "{name}: {file_bytes}-byte file, bytes {offset}+{len}"
                );
            }
        }
    }
}

#[test]
fn reads_past_the_end_are_short_reads_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "ten-thousand.bin", &pseudo_random(10_000, 9));
    let file = DataFile::open(&path).unwrap();
    // (offset, len, bytes there): 1000 bytes left at 9000; none at or past
    // the end; 10000 - 8191 = 1809 from an aligned offset.
    let cases = [
        (9000, 2000, 1000),
        (10_000, 1, 0),
        (12_000, 10, 0),
        (8191, 4096, 1809),
    ];
    for (name, backend) in all_backends() {
        for (offset, len, there) in cases {
            let mut slab = AlignedSlab::for_read(offset, len);
            let err = backend
                .read_into(&file, offset, len, &mut slab)
                .unwrap_err();
            match &err {
                StorageError::ShortRead {
                    file: f,
                    offset: o,
                    wanted,
                    got,
                } => assert_eq!(
                    (f, *o, *wanted, *got),
                    (&path, offset, len, there),
                    "{name}"
                ),
                other => panic!("{name}: {other}"),
            }
            let line = err.to_string();
            assert!(
                line.contains("ten-thousand.bin") && !line.contains('\n'),
                "{line}"
            );
        }
    }
}

#[test]
fn batches_give_one_result_per_read_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(300_001, 4);
    let file = DataFile::open(&write_file(dir.path(), "f", &content)).unwrap();
    // 150 reads: more than one ring's worth (64), the last one past the end.
    let mut requests: Vec<(u64, usize)> = (0..149)
        .map(|i| (i * 2011 + 7, 1000 + i as usize))
        .collect();
    requests.push((300_000, 2));
    for (name, backend) in all_backends() {
        let mut slabs: Vec<AlignedSlab> = requests
            .iter()
            .map(|&(o, l)| AlignedSlab::for_read(o, l))
            .collect();
        let mut reads: Vec<BatchRead<'_>> = requests
            .iter()
            .zip(&mut slabs)
            .map(|(&(o, l), slab)| BatchRead::new(&file, o, l, slab))
            .collect();
        let results = backend.read_batch(&mut reads);
        drop(reads);
        assert_eq!(results.len(), requests.len());
        for ((result, slab), &(offset, len)) in results.iter().zip(&slabs).zip(&requests) {
            let start = offset as usize;
            if start + len <= content.len() {
                let payload = result.as_ref().unwrap().clone();
                assert!(
                    slab[payload] == content[start..start + len],
                    "{name} {offset}"
                );
            } else {
                assert!(
                    matches!(result, Err(StorageError::ShortRead { got: 1, .. })),
                    "{name}: {result:?}"
                );
            }
        }
    }
}

#[test]
fn small_slabs_are_refused_not_overrun() {
    let dir = tempfile::tempdir().unwrap();
    let file = DataFile::open(&write_file(dir.path(), "f", &pseudo_random(10_000, 1))).unwrap();
    for (name, backend) in all_backends() {
        // 4000..4200 straddles two blocks: it needs 8192 bytes.
        let mut slab = AlignedSlab::new(4096);
        let err = backend.read_into(&file, 4000, 200, &mut slab).unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::SlabTooSmall {
                    needed_bytes: 8192,
                    slab_bytes: 4096
                }
            ),
            "{name}: {err}"
        );
    }
}

#[test]
fn refused_o_direct_falls_back_to_buffered_reads() {
    let dir = tempfile::tempdir().unwrap();
    let content = pseudo_random(3 * 4096 + 5, 8);
    let file = DataFile::open(&write_file(dir.path(), "f", &content))
        .unwrap()
        .refuse_direct();
    for kind in [BackendKind::Direct, BackendKind::IoUring] {
        let backend = open_backend(kind);
        for (offset, len) in ranges(content.len(), 3) {
            let start = offset as usize;
            assert!(read(backend.as_ref(), &file, offset, len) == content[start..start + len]);
        }
    }
}

#[test]
fn refused_io_uring_falls_back_to_o_direct_once() {
    let refused = || std::io::Error::from_raw_os_error(libc::EPERM);
    assert_eq!(uring_or_direct(Err(refused())).kind(), BackendKind::Direct);
    assert!(fallback_was_logged());
    // A second refusal says nothing more (Once), and still reads.
    assert_eq!(uring_or_direct(Err(refused())).kind(), BackendKind::Direct);
}

#[test]
fn io_uring_is_used_where_the_kernel_allows_it() {
    let expected = match UringBackend::new() {
        Ok(_) => BackendKind::IoUring,
        Err(e) => {
            eprintln!("io_uring refused here ({e}); the io-uring backend runs as O_DIRECT");
            BackendKind::Direct
        }
    };
    assert_eq!(open_backend(BackendKind::IoUring).kind(), expected);
}

#[test]
fn backend_names_round_trip() {
    for kind in BackendKind::ALL {
        assert_eq!(BackendKind::from_name(kind.name()), Some(kind));
    }
    assert_eq!(
        BackendKind::from_name("io-uring"),
        Some(BackendKind::IoUring)
    );
    assert_eq!(BackendKind::from_name("uring"), None);
}

#[test]
fn missing_files_are_one_line_naming_the_path() {
    let err = DataFile::open(Path::new("/nonexistent/shard-7.safetensors")).unwrap_err();
    let line = err.to_string();
    assert!(
        line.starts_with("cannot open /nonexistent/shard-7.safetensors: "),
        "{line}"
    );
    assert!(!line.contains('\n'));
}

//! Fault injection for reliability tests: `FaultyBackend` wraps a real
//! backend and, by a deterministic plan over its calls, turns chosen reads
//! into short reads (the slab half filled, as a real one leaves it) or EIO
//! errors. The object store's tests use it to check that no half-read
//! object is ever published.

use super::{BackendKind, DataFile, ReadBackend, SlabWindow, StorageError};
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to do to one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Read only the first `got` bytes (at most the read's length) for
    /// real, then report `StorageError::ShortRead`.
    ShortRead { got: usize },
    /// Read nothing and report `StorageError::Io` with EIO, as a failing
    /// drive does.
    Eio,
}

/// One read as the plan sees it.
#[derive(Debug)]
pub struct FaultCall<'a> {
    /// Reads through this backend before this one (batches count each read).
    pub call: u64,
    pub path: &'a Path,
    pub offset: u64,
    pub len: usize,
}

type FaultPlan = dyn Fn(&FaultCall<'_>) -> Option<Fault> + Send + Sync;

pub struct FaultyBackend {
    inner: Box<dyn ReadBackend>,
    plan: Box<FaultPlan>,
    calls: AtomicU64,
}

impl FaultyBackend {
    /// Faults where `plan` says so; other reads go to `inner` unchanged.
    pub fn new(
        inner: Box<dyn ReadBackend>,
        plan: impl Fn(&FaultCall<'_>) -> Option<Fault> + Send + Sync + 'static,
    ) -> FaultyBackend {
        FaultyBackend {
            inner,
            plan: Box::new(plan),
            calls: AtomicU64::new(0),
        }
    }

    /// Faults on the given call numbers (counted from 0).
    pub fn on_calls(inner: Box<dyn ReadBackend>, faults: Vec<(u64, Fault)>) -> FaultyBackend {
        FaultyBackend::new(inner, move |read| {
            faults
                .iter()
                .find(|(call, _)| *call == read.call)
                .map(|&(_, fault)| fault)
        })
    }

    /// Reads seen so far, faulted or not.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl ReadBackend for FaultyBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn read_window(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        let call = FaultCall {
            call: self.calls.fetch_add(1, Ordering::Relaxed),
            path: file.path(),
            offset,
            len,
        };
        match (self.plan)(&call) {
            None => self.inner.read_window(file, offset, len, dest),
            Some(Fault::ShortRead { got }) => {
                let got = got.min(len);
                self.inner.read_window(file, offset, got, dest)?;
                Err(StorageError::ShortRead {
                    file: file.path().to_path_buf(),
                    offset,
                    wanted: len,
                    got,
                })
            }
            Some(Fault::Eio) => Err(StorageError::Io {
                path: file.path().to_path_buf(),
                offset,
                source: io::Error::from_raw_os_error(libc::EIO),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
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
}

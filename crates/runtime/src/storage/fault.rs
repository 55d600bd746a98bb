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
mod tests;

//! Storage backends (design §7 "Storage"): how the executor reads byte
//! ranges of checkpoint files into aligned slabs.
//!
//! - `slab`: aligned buffers and the `span` that lays every read out;
//! - `file`: `DataFile`, a file opened once for buffered, O_DIRECT and mmap
//!   reads;
//! - `posix`: buffered `pread` and O_DIRECT reads, and the one read loop all
//!   syscall backends finish with;
//! - `mmap`: copies out of a mapping, with WILLNEED readahead first;
//! - `pool`: host memory per NUMA node (mbind, huge pages, recycled slabs);
//! - `uring`: io_uring batches, detected at run time, O_DIRECT where refused;
//! - `drives`: one logical file on several drives (mirror or stripe);
//! - `fault`: deterministic short reads and I/O errors for reliability tests.
//!
//! Errors are one line each and name the file, the offset and what to do.

pub mod drives;
pub mod fault;
pub mod file;
pub mod mmap;
pub mod pool;
pub mod posix;
pub mod slab;
pub mod uring;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Once;

pub use file::DataFile;
pub use pool::{numa_nodes, HostPool, Pinner};
pub use slab::{span, AlignedSlab, SlabWindow, Span, ALIGN_BYTES};

/// Why a read (or a striped copy) failed. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("cannot open {}: {source}; check the path and its permissions", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {} at byte {offset}: {source}; check the drive (dmesg) or read from another copy", path.display())]
    Io {
        path: PathBuf,
        offset: u64,
        source: std::io::Error,
    },
    #[error("{} ends early: a read at byte {offset} wanted {wanted} bytes and got {got}; the file is truncated or does not belong to this checkpoint", file.display())]
    ShortRead {
        file: PathBuf,
        offset: u64,
        wanted: usize,
        got: usize,
    },
    #[error("a slab of {slab_bytes} bytes cannot hold a read needing {needed_bytes}; size it with AlignedSlab::for_read")]
    SlabTooSmall {
        needed_bytes: usize,
        slab_bytes: usize,
    },
    #[error("writing {}: {source}; check free space and permissions", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drive set: {0}")]
    Drives(String),
}

residency_core::named! {
    /// Which read path a backend uses.
    pub enum BackendKind("backend") {
        /// Buffered `pread` through the page cache.
        Pread = "pread",
        /// `O_DIRECT` reads into aligned slabs, bypassing the page cache.
        Direct = "direct",
        /// Copies out of a read-only mapping after WILLNEED readahead.
        Mmap = "mmap",
        /// `O_DIRECT` reads submitted together through io_uring.
        IoUring = "io-uring",
    }
}

/// One read of a batch: bytes `[offset, offset + len)` of `file` into
/// `dest`, laid out as `span(offset, len)` says.
pub struct BatchRead<'a> {
    pub file: &'a DataFile,
    pub offset: u64,
    pub len: usize,
    pub dest: SlabWindow<'a>,
}

impl<'a> BatchRead<'a> {
    pub fn new(file: &'a DataFile, offset: u64, len: usize, slab: &'a mut AlignedSlab) -> Self {
        BatchRead {
            file,
            offset,
            len,
            dest: slab.window(),
        }
    }
}

/// A way of reading byte ranges of files into aligned memory.
///
/// Every backend puts the payload of a read of `[offset, offset + len)` at
/// `span(offset, len).payload(len)` of the destination and returns that
/// range; bytes around it are unspecified. A read that ends early at the end
/// of the file is `StorageError::ShortRead`, never a partial success.
pub trait ReadBackend: Send + Sync {
    /// The read path actually in use (after any fallback).
    fn kind(&self) -> BackendKind;

    /// Reads `[offset, offset + len)` of `file` into `dest`, which must be at
    /// least `span(offset, len).aligned_len` bytes.
    fn read_window(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError>;

    /// Reads `[offset, offset + len)` of `file` into `slab` (sized by
    /// `AlignedSlab::for_read`); returns the payload range inside the slab.
    fn read_into(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        slab: &mut AlignedSlab,
    ) -> Result<Range<usize>, StorageError> {
        self.read_window(file, offset, len, slab.window())
    }

    /// Several reads, one result each, in order. io_uring submits them
    /// together; the other backends read them one after another.
    fn read_batch(&self, reads: &mut [BatchRead<'_>]) -> Vec<Result<Range<usize>, StorageError>> {
        reads
            .iter_mut()
            .map(|r| self.read_window(r.file, r.offset, r.len, r.dest.reborrow()))
            .collect()
    }
}

/// The backend for `kind`. io_uring falls back to O_DIRECT where the kernel
/// or a sandbox refuses rings (one log line per process), and O_DIRECT falls
/// back to buffered reads on files whose filesystem refuses it (likewise).
pub fn open_backend(kind: BackendKind) -> Box<dyn ReadBackend> {
    match kind {
        BackendKind::Pread => Box::new(posix::Syscall::PREAD),
        BackendKind::Direct => Box::new(posix::Syscall::DIRECT),
        BackendKind::Mmap => Box::new(mmap::Mmap),
        BackendKind::IoUring => uring::uring_or_direct(uring::UringBackend::new()),
    }
}

/// Prints `line` on stderr the first time `once` is reached in this process:
/// fallbacks are worth saying, but once, not per read.
fn note_once(once: &'static Once, line: impl FnOnce() -> String) {
    once.call_once(|| eprintln!("{}", line()));
}

/// Checks that `dest` can hold the read and returns its layout.
fn check_dest(offset: u64, len: usize, dest: &SlabWindow<'_>) -> Result<Span, StorageError> {
    let span = span(offset, len);
    if dest.len() < span.aligned_len {
        return Err(StorageError::SlabTooSmall {
            needed_bytes: span.aligned_len,
            slab_bytes: dest.len(),
        });
    }
    Ok(span)
}

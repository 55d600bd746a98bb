//! One logical file on several drives (design §7 "Several drives"):
//! - `Mirror`: whole copies on several drives; each read goes to the copy
//!   with the fewest bytes in flight (ties rotate), so a busy drive sheds
//!   load to the others;
//! - `Stripe`: n part files, part k holding chunks k, k + n, k + 2n, ... of
//!   the file back to back; a read crossing chunks becomes one read per
//!   chunk, submitted as one batch (parallel under io_uring), each landing
//!   directly at its place in the caller's slab.
//!
//! `write_stripes` builds the part files of a stripe from a plain file.

use super::{check_dest, AlignedSlab, BatchRead, DataFile, ReadBackend, StorageError};
use super::{SlabWindow, ALIGN_BYTES};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveLayout {
    Mirror,
    /// `chunk_bytes` is a multiple of `ALIGN_BYTES`, so aligned offsets of
    /// the logical file stay aligned in the parts (O_DIRECT needs that).
    Stripe {
        chunk_bytes: usize,
    },
}

struct Drive {
    file: DataFile,
    in_flight_bytes: AtomicU64,
}

/// Counts `bytes` as in flight on a drive while alive.
struct InFlight<'a> {
    counter: &'a AtomicU64,
    bytes: u64,
}

impl Drive {
    fn start(&self, bytes: usize) -> InFlight<'_> {
        let bytes = bytes as u64;
        self.in_flight_bytes.fetch_add(bytes, Ordering::Relaxed);
        InFlight {
            counter: &self.in_flight_bytes,
            bytes,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

pub struct DriveSet {
    layout: DriveLayout,
    drives: Vec<Drive>,
    len_bytes: u64,
    backend: Arc<dyn ReadBackend>,
    /// Where the next mirror pick starts looking, so equally loaded copies
    /// take turns.
    next_drive: AtomicUsize,
}

impl DriveSet {
    /// Identical copies of one file at `replicas` (one per drive).
    pub fn mirror(
        replicas: &[PathBuf],
        backend: Arc<dyn ReadBackend>,
    ) -> Result<DriveSet, StorageError> {
        let drives = open_drives(replicas)?;
        let len_bytes = drives[0].file.len_bytes();
        if let Some(odd) = drives.iter().find(|d| d.file.len_bytes() != len_bytes) {
            return Err(StorageError::Drives(format!(
                "mirror copy {} holds {} bytes but {} holds {len_bytes}; copy the file again",
                odd.file.path().display(),
                odd.file.len_bytes(),
                drives[0].file.path().display(),
            )));
        }
        Ok(DriveSet::new(
            DriveLayout::Mirror,
            drives,
            len_bytes,
            backend,
        ))
    }

    /// The part files of a stripe in part order, as `write_stripes` makes
    /// them; the file's length is the parts' total.
    pub fn stripe(
        parts: &[PathBuf],
        chunk_bytes: usize,
        backend: Arc<dyn ReadBackend>,
    ) -> Result<DriveSet, StorageError> {
        check_chunk(chunk_bytes)?;
        let drives = open_drives(parts)?;
        let len_bytes: u64 = drives.iter().map(|d| d.file.len_bytes()).sum();
        for (k, drive) in drives.iter().enumerate() {
            let expected = stripe_part_len(len_bytes, chunk_bytes as u64, drives.len(), k);
            if drive.file.len_bytes() != expected {
                return Err(StorageError::Drives(format!(
                    "stripe part {} holds {} bytes where a {len_bytes}-byte file in {chunk_bytes}-byte chunks over {} parts puts {expected}; rebuild the parts (write_stripes) or fix the chunk size",
                    drive.file.path().display(),
                    drive.file.len_bytes(),
                    drives.len(),
                )));
            }
        }
        let layout = DriveLayout::Stripe { chunk_bytes };
        Ok(DriveSet::new(layout, drives, len_bytes, backend))
    }

    fn new(
        layout: DriveLayout,
        drives: Vec<Drive>,
        len_bytes: u64,
        backend: Arc<dyn ReadBackend>,
    ) -> DriveSet {
        DriveSet {
            layout,
            drives,
            len_bytes,
            backend,
            next_drive: AtomicUsize::new(0),
        }
    }

    pub fn layout(&self) -> DriveLayout {
        self.layout
    }

    /// Length of the logical file.
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Bytes being read from each drive now, in the order given.
    pub fn in_flight_bytes(&self) -> Vec<u64> {
        self.drives
            .iter()
            .map(|d| d.in_flight_bytes.load(Ordering::Relaxed))
            .collect()
    }

    /// Reads `[offset, offset + len)` of the logical file into `slab`
    /// (sized by `AlignedSlab::for_read`); returns the payload range, the
    /// same one a single-file backend returns.
    pub fn read_into(
        &self,
        offset: u64,
        len: usize,
        slab: &mut AlignedSlab,
    ) -> Result<Range<usize>, StorageError> {
        self.read_window(offset, len, slab.window())
    }

    /// `read_into` a window of a slab (at least `span(offset,
    /// len).aligned_len` bytes); the payload range is the window's.
    pub fn read_window(
        &self,
        offset: u64,
        len: usize,
        dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        match self.layout {
            DriveLayout::Mirror => {
                let drive = &self.drives[self.least_busy()];
                let _in_flight = drive.start(len);
                self.backend.read_window(&drive.file, offset, len, dest)
            }
            DriveLayout::Stripe { chunk_bytes } => {
                self.read_striped(offset, len, chunk_bytes, dest)
            }
        }
    }

    /// The drive with the fewest bytes in flight; among equals, the first
    /// from a starting point that advances on every pick.
    fn least_busy(&self) -> usize {
        let n = self.drives.len();
        let start = self.next_drive.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| (start + i) % n)
            .min_by_key(|&i| self.drives[i].in_flight_bytes.load(Ordering::Relaxed))
            .expect("a drive set has at least one drive")
    }

    /// One read per chunk touched. Piece i's payload belongs at slab byte
    /// `payload_start + (its logical offset - offset)`, which is congruent
    /// to its offset in its part modulo `ALIGN_BYTES` (chunks are aligned),
    /// so each piece's own aligned span is a window of the slab, and these
    /// windows follow each other without overlap: inner piece boundaries
    /// are chunk boundaries, hence aligned.
    fn read_striped(
        &self,
        offset: u64,
        len: usize,
        chunk_bytes: usize,
        mut rest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        let span = check_dest(offset, len, &rest)?;
        let chunk_bytes = chunk_bytes as u64;
        let parts = self.drives.len() as u64;
        let end = offset + len as u64;
        let mut reads = Vec::new();
        let mut in_flight = Vec::new();
        let mut at = offset;
        while at < end {
            let chunk = at / chunk_bytes;
            let within = at % chunk_bytes;
            let piece_bytes = (chunk_bytes - within).min(end - at) as usize;
            let part_offset = chunk / parts * chunk_bytes + within;
            let drive = &self.drives[(chunk % parts) as usize];
            let window_bytes = super::span(part_offset, piece_bytes).aligned_len;
            let (window, tail) = rest.split_at(window_bytes);
            rest = tail;
            reads.push(BatchRead {
                file: &drive.file,
                offset: part_offset,
                len: piece_bytes,
                dest: window,
            });
            in_flight.push(drive.start(piece_bytes));
            at += piece_bytes as u64;
        }
        let results = self.backend.read_batch(&mut reads);
        drop(in_flight);
        results.into_iter().try_for_each(|r| r.map(drop))?;
        Ok(span.payload(len))
    }
}

fn open_drives(paths: &[PathBuf]) -> Result<Vec<Drive>, StorageError> {
    if paths.is_empty() {
        return Err(StorageError::Drives(
            "no files given; name at least one".to_string(),
        ));
    }
    paths
        .iter()
        .map(|p| {
            Ok(Drive {
                file: DataFile::open(p)?,
                in_flight_bytes: AtomicU64::new(0),
            })
        })
        .collect()
}

fn check_chunk(chunk_bytes: usize) -> Result<(), StorageError> {
    if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(ALIGN_BYTES) {
        return Err(StorageError::Drives(format!(
            "stripe chunk of {chunk_bytes} bytes is not a positive multiple of {ALIGN_BYTES}; pick one that is (e.g. 4 MiB)"
        )));
    }
    Ok(())
}

/// Bytes part `k` of `parts` holds when a `len_bytes` file is striped in
/// `chunk_bytes` chunks: its whole chunks, plus the short last chunk if
/// that one falls on it.
fn stripe_part_len(len_bytes: u64, chunk_bytes: u64, parts: usize, k: usize) -> u64 {
    let (parts, k) = (parts as u64, k as u64);
    let whole_chunks = len_bytes / chunk_bytes;
    let tail_bytes = len_bytes % chunk_bytes;
    let whole_here = whole_chunks / parts + u64::from(whole_chunks % parts > k);
    let tail_here = if whole_chunks % parts == k {
        tail_bytes
    } else {
        0
    };
    whole_here * chunk_bytes + tail_here
}

/// Writes the stripe of `src` over `parts` in `chunk_bytes` chunks. Each
/// part is written to `<part>.tmp`, synced, then renamed into place, so a
/// failure never leaves a part that looks complete.
pub fn write_stripes(
    src: &Path,
    parts: &[PathBuf],
    chunk_bytes: usize,
) -> Result<(), StorageError> {
    check_chunk(chunk_bytes)?;
    if parts.is_empty() {
        return Err(StorageError::Drives(
            "no part files given; name at least one".to_string(),
        ));
    }
    let temps: Vec<PathBuf> = parts
        .iter()
        .map(|p| {
            let mut name = OsString::from(p.as_os_str());
            name.push(".tmp");
            PathBuf::from(name)
        })
        .collect();
    let written = write_parts(src, &temps, chunk_bytes).and_then(|()| {
        temps.iter().zip(parts).try_for_each(|(temp, part)| {
            std::fs::rename(temp, part).map_err(|source| StorageError::Write {
                path: part.clone(),
                source,
            })
        })
    });
    if written.is_err() {
        for temp in &temps {
            // Best effort: a temp file that is already gone is fine.
            let _ = std::fs::remove_file(temp);
        }
    }
    written
}

fn write_parts(src: &Path, temps: &[PathBuf], chunk_bytes: usize) -> Result<(), StorageError> {
    let mut input = File::open(src).map_err(|source| StorageError::Open {
        path: src.to_path_buf(),
        source,
    })?;
    let mut outputs = temps
        .iter()
        .map(|t| {
            File::create(t)
                .map(BufWriter::new)
                .map_err(|source| write_error(t, source))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut chunk = vec![0u8; chunk_bytes];
    let mut offset = 0u64;
    for k in 0.. {
        let got = fill(&mut input, &mut chunk).map_err(|source| StorageError::Io {
            path: src.to_path_buf(),
            offset,
            source,
        })?;
        if got == 0 {
            break;
        }
        let part = k % temps.len();
        outputs[part]
            .write_all(&chunk[..got])
            .map_err(|source| write_error(&temps[part], source))?;
        offset += got as u64;
        if got < chunk_bytes {
            break;
        }
    }
    for (output, temp) in outputs.into_iter().zip(temps) {
        let file = output
            .into_inner()
            .map_err(|e| write_error(temp, e.into_error()))?;
        file.sync_all()
            .map_err(|source| write_error(temp, source))?;
    }
    Ok(())
}

fn write_error(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(input: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests;

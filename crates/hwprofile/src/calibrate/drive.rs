//! Drive read latency and bandwidth as a streamed expert is read: 4 KiB
//! random reads at queue depth 1 for the latency, then O_DIRECT reads of
//! one expert's bytes at random places, one at a time, for the bandwidth
//! (each read's time less the latency), on the checkpoint's shards, else
//! on a temporary file written under the model directory (removed
//! afterwards), for the profile's drive that holds that directory. The
//! cost model prices a streamed expert, and the simulator a miss, as the
//! latency plus its bytes at that bandwidth; sequential reads, which
//! neither does, run faster (docs/prediction.md).
//!
//! Then how many reads the drive serves at once: [`READS_AT_ONCE`] reads
//! of one expert's bytes at random places issued together, as a serving
//! store issues a layer's misses (single reads, not the loader's: an
//! expert it reads in several runs would land only after the others' first
//! runs, which times the loader's split rather than the drive). A
//! drive that serves `q` at a time, sharing its rate, lands them in waves
//! of `q`, the first when `q / READS_AT_ONCE` of the batch's time has
//! passed; so `q` is `READS_AT_ONCE` times the first landing over the last.

use super::{Run, LATENCY_READ_BYTES, WRITE_PIECE_BYTES};
use crate::doc::{field, rate_text, round_rate, round_time, time_text, Quantity};
use crate::gemv::fill_random;
use crate::spread::Spread;
use crate::system;
use crate::ProfileError;
use residency_core::rng::Rng;
use residency_core::units::Bytes;
use residency_policy::ObjectIndex;
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::identity::ObjectKey;
use residency_runtime::storage::posix::Syscall;
use residency_runtime::storage::{open_backend, AlignedSlab, BackendKind, DataFile, ReadBackend};
use residency_runtime::store::Loader;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Expert reads issued together to time the drive's concurrency: a layer's
/// misses of a top-8 model.
pub const READS_AT_ONCE: usize = 8;

impl Run<'_> {
    /// The profile's drive that holds `dir`, and the files to time on it
    /// (the checkpoint's shards when they are there); `None` with a note
    /// when the profile lists no such drive.
    pub(super) fn drive_to_time(&mut self, dir: &Path) -> Option<(usize, Vec<PathBuf>)> {
        let disk = match system::block_device_of(dir) {
            Ok(disk) => disk,
            Err(why) => {
                if !self.doc.profile.drives.is_empty() {
                    self.notes.push(format!("drives: not measured: {why}"));
                }
                return None;
            }
        };
        let Some(d) = self
            .doc
            .profile
            .drives
            .iter()
            .position(|d| d.name == disk.name)
        else {
            if !self.doc.profile.drives.is_empty() {
                self.notes.push(format!(
                    "drives: {} holds {}, but the profile names no drive `{}`; not measured (give --model-dir a directory on a listed drive)",
                    disk.name,
                    dir.display(),
                    disk.name
                ));
            }
            return None;
        };
        Some((d, self.source.shards().to_vec()))
    }

    /// Read bandwidth and latency of drive `d`, on `shards` or a temporary
    /// file under `dir`.
    pub(super) fn drive(
        &mut self,
        d: usize,
        shards: &[PathBuf],
        dir: &Path,
    ) -> Result<(), ProfileError> {
        let name = self.doc.profile.drives[d].name.clone();
        self.tell(&format!("drives[{d}]: writing a file to read"));
        let temporary = if shards.is_empty() {
            // 32 MiB per second of the budget, within 64 MiB..1 GiB.
            let bytes = ((self.seconds * 32.0) as u64).clamp(64, 1024) << 20;
            match TemporaryFile::write(dir, bytes) {
                Ok(file) => Some(file),
                Err(why) => {
                    self.notes
                        .push(format!("drives[{d}] ({name}): not measured: {why}"));
                    return Ok(());
                }
            }
        } else {
            None
        };
        let paths: Vec<PathBuf> = match &temporary {
            Some(t) => vec![t.path.clone()],
            None => shards.to_vec(),
        };
        let files = paths
            .iter()
            .map(|p| DataFile::open(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ProfileError::input(dir, e.to_string(), "check the files' permissions"))?;
        if let Some(f) = files.iter().find(|f| !f.has_direct()) {
            self.notes.push(format!(
                "drives[{d}] ({name}): not measured: the file system of {} refuses O_DIRECT, and buffered reads would time the page cache",
                f.path().display()
            ));
            return Ok(());
        }
        let on = match &temporary {
            Some(t) => format!("a {} temporary file", Bytes(t.bytes)),
            None => format!("{} shard(s) of the checkpoint", files.len()),
        };
        // The checkpoint's experts through the store's loader, as a
        // streamed one is read (one read per run of its tensors, into a
        // slab of the pool); else reads of one expert's bytes.
        let loader = match &temporary {
            Some(_) => None,
            None => match self.expert_loader() {
                Ok(loader) => loader,
                Err(e) => {
                    self.notes
                        .push(format!("drives[{d}] ({name}): not measured: {e}"));
                    return Ok(());
                }
            },
        };
        let read_bytes =
            (self.source.expert_bytes(self.source.cpu) as usize).max(LATENCY_READ_BYTES);
        let result = self.time_drive(d, &files, loader.as_ref(), read_bytes);
        let reads = match &loader {
            Some(_) => format!(
                "O_DIRECT reads of the checkpoint's experts ({}) at random, one at a time, as the store's loader reads a streamed one",
                Bytes(read_bytes as u64)
            ),
            None => format!(
                "O_DIRECT reads of one expert's bytes ({}) at random places of {on}, one at a time",
                Bytes(read_bytes as u64)
            ),
        };
        match result {
            Ok(spreads) => self.record_drive(d, spreads, (&reads, &on), read_bytes),
            Err(e) => self
                .notes
                .push(format!("drives[{d}] ({name}): not measured: {e}")),
        }
        Ok(())
    }

    /// The loader of the checkpoint's experts, as the store reads a
    /// streamed one; `None` without a checkpoint or experts.
    fn expert_loader(&self) -> Result<Option<CheckpointLoader>, String> {
        let Some(checkpoint) = &self.source.checkpoint else {
            return Ok(None);
        };
        let keys: Vec<ObjectKey> = checkpoint
            .objects
            .keys()
            .filter(|k| matches!(k, ObjectKey::Expert { .. }))
            .cloned()
            .collect();
        match CheckpointLoader::new(checkpoint, keys, open_backend(BackendKind::Direct), &[]) {
            Ok(loader) if !loader.keys.is_empty() => Ok(Some(loader)),
            Ok(_) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Drive `d`'s measured rate, latency and reads at once into the
    /// profile, each recorded with its spread and how it was measured.
    fn record_drive(
        &mut self,
        d: usize,
        (bandwidth, latency, concurrency): (Spread, Spread, Spread),
        (reads, on): (&str, &str),
        read_bytes: usize,
    ) {
        let rate = round_rate(bandwidth.median);
        let time = round_time(latency.median);
        let at_once = (concurrency.median.round() as u32).clamp(1, READS_AT_ONCE as u32);
        self.doc.profile.drives[d].read_bandwidth = rate;
        self.doc.profile.drives[d].read_latency = time;
        self.doc.profile.drives[d].read_concurrency = at_once;
        let shown_rate = rate_text(rate);
        let shown_time = time_text(time);
        self.record(
            &field("drives", d, "read_bandwidth"),
            shown_rate,
            &bandwidth,
            Quantity::BytesPerSecond,
            format!("{reads}, each less read_latency"),
        );
        self.record(
            &field("drives", d, "read_latency"),
            shown_time,
            &latency,
            Quantity::Seconds,
            format!("O_DIRECT random 4 KiB reads at queue depth 1 of {on}; each trial's median"),
        );
        self.record(
            &field("drives", d, "read_concurrency"),
            at_once.to_string(),
            &concurrency,
            Quantity::Count,
            format!(
                "{READS_AT_ONCE} O_DIRECT reads of {} at random places issued together on threads of their own: {READS_AT_ONCE} x the first landing / the last, each trial's mean",
                Bytes(read_bytes as u64)
            ),
        );
    }

    /// (bandwidth, latency, concurrency) spreads of drive `d` over
    /// `files`: the bandwidth of `loader`'s loads of experts at random
    /// where given, else of reads of `read_bytes` at random places; the
    /// concurrency of such reads.
    fn time_drive(
        &self,
        d: usize,
        files: &[DataFile],
        loader: Option<&CheckpointLoader>,
        read_bytes: usize,
    ) -> Result<(Spread, Spread, Spread), String> {
        let total: u64 = files.iter().map(DataFile::len_bytes).sum();
        if total < LATENCY_READ_BYTES as u64 {
            return Err("the files to read are empty".into());
        }
        let mut state = Rng(0x2545_f491_4f6c_dd1d);
        let mut slab = AlignedSlab::new(read_bytes + LATENCY_READ_BYTES);
        let mut read = |len: usize| -> Result<usize, String> {
            read_at_random(files, total, &mut state, len, &mut slab)
        };
        let step = format!("drives[{d}]: read latency");
        let (latency, _) = self.repeat(&step, self.share / 3, |reads| {
            let mut seconds = Vec::with_capacity(reads);
            for _ in 0..reads {
                let started = Instant::now();
                read(LATENCY_READ_BYTES)?;
                seconds.push(started.elapsed().as_secs_f64());
            }
            Ok(Spread::of(&seconds).expect("one read at least").median)
        })?;
        let step = format!("drives[{d}]: read bandwidth");
        let mut pick = Rng(0x9e37_79b9_7f4a_7c15);
        let (bandwidth, _) = self.repeat(&step, self.share / 3, |reads| {
            let started = Instant::now();
            let mut got = 0u64;
            for _ in 0..reads {
                got += match loader {
                    Some(loader) => {
                        let o = pick.below(loader.keys.len() as u64) as ObjectIndex;
                        loader.load(o)?.len() as u64
                    }
                    None => read(read_bytes)? as u64,
                };
            }
            let elapsed = started.elapsed().as_secs_f64();
            // Never below half the elapsed time: a latency measured high
            // must not make the rate unbounded.
            let transfer = (elapsed - reads as f64 * latency.median).max(elapsed / 2.0);
            Ok(got as f64 / transfer)
        })?;
        let concurrency = self.reads_at_once(d, files, read_bytes, &mut pick)?;
        Ok((bandwidth, latency, concurrency))
    }

    /// The spread of `READS_AT_ONCE` times the first landing over the last
    /// of that many reads of `read_bytes` at random places of `files`,
    /// issued together on threads of their own (each trial the mean over
    /// its batches), for drive `d`; `pick` seeds the places.
    fn reads_at_once(
        &self,
        d: usize,
        files: &[DataFile],
        read_bytes: usize,
        pick: &mut Rng,
    ) -> Result<Spread, String> {
        let total: u64 = files.iter().map(DataFile::len_bytes).sum();
        let step = format!("drives[{d}]: reads served at once");
        let mut slabs: Vec<AlignedSlab> = (0..READS_AT_ONCE)
            .map(|_| AlignedSlab::new(read_bytes + LATENCY_READ_BYTES))
            .collect();
        let (concurrency, _) = self.repeat(&step, self.share / 3, |batches| {
            let mut sum = 0.0;
            for _ in 0..batches {
                let seeds: Vec<u64> = (0..READS_AT_ONCE).map(|_| pick.below(u64::MAX)).collect();
                let started = Instant::now();
                let landed = std::thread::scope(|scope| {
                    let reads: Vec<_> = slabs
                        .iter_mut()
                        .zip(&seeds)
                        .map(|(slab, &seed)| {
                            scope.spawn(move || {
                                let mut state = Rng(seed | 1);
                                read_at_random(files, total, &mut state, read_bytes, slab)?;
                                Ok::<f64, String>(started.elapsed().as_secs_f64())
                            })
                        })
                        .collect();
                    reads
                        .into_iter()
                        .map(|r| r.join().expect("a read does not panic"))
                        .collect::<Result<Vec<f64>, String>>()
                })?;
                let first = landed.iter().copied().fold(f64::INFINITY, f64::min);
                let last = landed.iter().copied().fold(0.0, f64::max);
                sum += READS_AT_ONCE as f64 * first / last.max(1e-9);
            }
            Ok(sum / batches as f64)
        })?;
        Ok(concurrency)
    }
}

/// Reads `len` bytes with O_DIRECT from a random page of `files` laid end
/// to end (`total` bytes), moved back where the read would run past its
/// file's end, into `slab`; the bytes read.
fn read_at_random(
    files: &[DataFile],
    total: u64,
    state: &mut Rng,
    len: usize,
    slab: &mut AlignedSlab,
) -> Result<usize, String> {
    let page = LATENCY_READ_BYTES as u64;
    let mut at = state.below(total / page) * page;
    for f in files {
        if at < f.len_bytes() {
            let len = len.min(f.len_bytes() as usize);
            let last = (f.len_bytes() - len as u64) / page * page;
            return Syscall::DIRECT
                .read_into(f, at.min(last), len, slab)
                .map(|r| r.len())
                .map_err(|e| e.to_string());
        }
        at -= f.len_bytes();
    }
    unreachable!("`at` is below the total length")
}

/// A file of seeded bytes written to time a drive, removed on drop.
struct TemporaryFile {
    path: PathBuf,
    bytes: u64,
}

impl TemporaryFile {
    /// Writes `bytes` of incompressible data under `dir` and syncs them to
    /// the drive; `Err` says why not (no room, not writable).
    fn write(dir: &Path, bytes: u64) -> Result<TemporaryFile, String> {
        let free = free_bytes(dir)
            .ok_or_else(|| format!("cannot tell the free space of {}", dir.display()))?;
        if free < 2 * bytes {
            return Err(format!(
                "{} has {} free; timing needs a {} temporary file and as much to spare",
                dir.display(),
                Bytes(free),
                Bytes(bytes)
            ));
        }
        let path = dir.join(format!(".residency-calibrate-{}.tmp", std::process::id()));
        let file = TemporaryFile { path, bytes };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file.path)
            .map_err(|e| {
                format!(
                    "cannot write {} ({e}); give --model-dir a writable directory on the drive",
                    file.path.display()
                )
            })?;
        let mut piece = vec![0u8; WRITE_PIECE_BYTES];
        let mut written = 0u64;
        while written < bytes {
            fill_random(&mut piece, written);
            std::io::Write::write_all(&mut out, &piece)
                .map_err(|e| format!("writing {} ({e})", file.path.display()))?;
            written += piece.len() as u64;
        }
        out.sync_all()
            .map_err(|e| format!("syncing {} ({e})", file.path.display()))?;
        Ok(file)
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bytes free to this user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is valid plain data for the kernel to
    // fill; `path` is NUL-terminated and outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(path.as_ptr(), &mut stat) } == 0)
        .then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

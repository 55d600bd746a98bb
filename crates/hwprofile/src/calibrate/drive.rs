//! Drive read bandwidth and latency: O_DIRECT sequential reads of
//! `SEQUENTIAL_READ_BYTES`, and 4 KiB random reads at queue depth 1, on the
//! checkpoint's shards, else on a temporary file written under the model
//! directory (removed afterwards), for the profile's drive that holds that
//! directory.

use super::{Run, LATENCY_READ_BYTES, SEQUENTIAL_READ_BYTES};
use crate::doc::{field, rate_text, round_rate, round_time, time_text};
use crate::gemv::fill_random;
use crate::spread::Spread;
use crate::system;
use crate::ProfileError;
use residency_core::units::Bytes;
use residency_runtime::storage::posix::Syscall;
use residency_runtime::storage::{AlignedSlab, DataFile, ReadBackend};
use std::path::{Path, PathBuf};
use std::time::Instant;

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
        let result = self.time_drive(d, &files);
        match result {
            Ok((bandwidth, latency)) => {
                let rate = round_rate(bandwidth.median);
                let time = round_time(latency.median);
                self.doc.profile.drives[d].read_bandwidth = rate;
                self.doc.profile.drives[d].read_latency = time;
                let shown_rate = rate_text(rate);
                let shown_time = time_text(time);
                self.record(
                    &field("drives", d, "read_bandwidth"),
                    shown_rate,
                    &bandwidth,
                    true,
                    format!(
                        "O_DIRECT sequential {} MiB reads of {on}",
                        SEQUENTIAL_READ_BYTES >> 20
                    ),
                );
                self.record(
                    &field("drives", d, "read_latency"),
                    shown_time,
                    &latency,
                    false,
                    format!(
                        "O_DIRECT random 4 KiB reads at queue depth 1 of {on}; each trial's median"
                    ),
                );
            }
            Err(e) => self
                .notes
                .push(format!("drives[{d}] ({name}): not measured: {e}")),
        }
        Ok(())
    }

    /// (bandwidth, latency) spreads of drive `d` over `files`.
    fn time_drive(&self, d: usize, files: &[DataFile]) -> Result<(Spread, Spread), String> {
        let total: u64 = files.iter().map(DataFile::len_bytes).sum();
        if total < LATENCY_READ_BYTES as u64 {
            return Err("the files to read are empty".into());
        }
        // Byte `at` of the files laid end to end: (file, offset).
        let locate = |at: u64| -> (&DataFile, u64) {
            let mut at = at % total;
            for f in files {
                if at < f.len_bytes() {
                    return (f, at);
                }
                at -= f.len_bytes();
            }
            unreachable!("`at` is below the total length")
        };
        let mut slab = AlignedSlab::new(SEQUENTIAL_READ_BYTES);
        let read = |slab: &mut AlignedSlab, at: u64, len: usize| -> Result<usize, String> {
            let (file, offset) = locate(at);
            let len = len.min((file.len_bytes() - offset) as usize);
            Syscall::DIRECT
                .read_into(file, offset, len, slab)
                .map(|r| r.len())
                .map_err(|e| e.to_string())
        };
        let step = format!("drives[{d}]: read bandwidth");
        let mut position = 0u64;
        let (bandwidth, _) = self.repeat(&step, self.share / 2, |reads| {
            let started = Instant::now();
            let mut got = 0u64;
            for _ in 0..reads {
                // A read stops at the end of its file, so the next starts
                // at the next file's first byte, or the first file's; each
                // trial reads on where the last stopped, so that none finds
                // the drive's cache warm from the one before.
                let n = read(&mut slab, position, SEQUENTIAL_READ_BYTES)? as u64;
                got += n;
                position = (position + n) % total;
            }
            Ok(got as f64 / started.elapsed().as_secs_f64())
        })?;
        let step = format!("drives[{d}]: read latency");
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let blocks = total / LATENCY_READ_BYTES as u64;
        let (latency, _) = self.repeat(&step, self.share / 2, |reads| {
            let mut seconds = Vec::with_capacity(reads);
            for _ in 0..reads {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % blocks) * LATENCY_READ_BYTES as u64;
                let started = Instant::now();
                read(&mut slab, at, LATENCY_READ_BYTES)?;
                seconds.push(started.elapsed().as_secs_f64());
            }
            Ok(Spread::of(&seconds).expect("one read at least").median)
        })?;
        Ok((bandwidth, latency))
    }
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
        let mut piece = vec![0u8; SEQUENTIAL_READ_BYTES];
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

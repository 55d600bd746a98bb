//! `DataFile`: one file opened once for every backend: a buffered
//! descriptor (pread, mmap), an O_DIRECT descriptor where the filesystem
//! allows it (O_DIRECT, io_uring), and a read-only mapping made on first use.

use super::StorageError;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug)]
pub struct DataFile {
    path: PathBuf,
    len_bytes: u64,
    buffered: File,
    /// The O_DIRECT descriptor, or why the filesystem refused one (tmpfs
    /// before Linux 6.6, some FUSE and network filesystems answer EINVAL).
    direct: Result<File, io::Error>,
    map: OnceLock<memmap2::Mmap>,
}

impl DataFile {
    /// Opens `path` read-only, buffered and (where allowed) O_DIRECT.
    pub fn open(path: &Path) -> Result<DataFile, StorageError> {
        let open_error = |source| StorageError::Open {
            path: path.to_path_buf(),
            source,
        };
        let buffered = File::open(path).map_err(open_error)?;
        let len_bytes = buffered.metadata().map_err(open_error)?.len();
        let direct = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => Ok(file),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(e),
            Err(e) => return Err(open_error(e)),
        };
        Ok(DataFile {
            path: path.to_path_buf(),
            len_bytes,
            buffered,
            direct,
            map: OnceLock::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The length when the file was opened.
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Whether reads can bypass the page cache (the filesystem accepted
    /// O_DIRECT); without it the O_DIRECT backend reads buffered.
    pub fn has_direct(&self) -> bool {
        self.direct.is_ok()
    }

    pub(super) fn buffered(&self) -> &File {
        &self.buffered
    }

    pub(super) fn direct(&self) -> Result<&File, &io::Error> {
        self.direct.as_ref()
    }

    /// The whole file mapped read-only, mapped on first use and kept.
    pub(super) fn map(&self) -> Result<&memmap2::Mmap, StorageError> {
        if let Some(map) = self.map.get() {
            return Ok(map);
        }
        // SAFETY: the mapping is read-only and checkpoint files are never
        // written while the executor serves them; a file truncated by
        // someone else would raise SIGBUS on access, as with any mmap reader.
        let map =
            unsafe { memmap2::Mmap::map(&self.buffered) }.map_err(|source| StorageError::Io {
                path: self.path.clone(),
                offset: 0,
                source,
            })?;
        // Two threads may map at once; the loser's mapping is dropped.
        Ok(self.map.get_or_init(|| map))
    }

    /// The same file as if its filesystem had refused O_DIRECT, to test the
    /// fallback on filesystems that accept it.
    #[cfg(test)]
    pub(super) fn refuse_direct(mut self) -> DataFile {
        self.direct = Err(io::Error::from_raw_os_error(libc::EINVAL));
        self
    }
}

//! The mmap backend: copies a range out of the file's read-only mapping.
//! Before copying it asks the kernel to read the whole range ahead
//! (MADV_WILLNEED), so the copy's page faults find pages in flight or cached
//! instead of faulting them in one readahead window at a time.

use super::{check_dest, BackendKind, DataFile, ReadBackend, SlabWindow, StorageError};
use memmap2::Advice;
use std::ops::Range;

pub struct Mmap;

impl ReadBackend for Mmap {
    fn kind(&self) -> BackendKind {
        BackendKind::Mmap
    }

    fn read_window(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        mut dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        let payload = check_dest(offset, len, &dest)?.payload(len);
        if len == 0 {
            return Ok(payload);
        }
        let map = file.map()?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(map.len());
        let end = start.saturating_add(len).min(map.len());
        if end > start {
            // Advice only: a refusal leaves plain demand faulting, which
            // still reads the right bytes.
            let _ = map.advise_range(Advice::WillNeed, start, end - start);
        }
        let got = end - start;
        dest[payload.start..payload.start + got].copy_from_slice(&map[start..end]);
        if got < len {
            return Err(StorageError::ShortRead {
                file: file.path().to_path_buf(),
                offset,
                wanted: len,
                got,
            });
        }
        Ok(payload)
    }
}

//! Buffered `pread` and O_DIRECT reads (`Syscall`), and `Plan`: how
//! one read maps onto a descriptor and a slab, with the loop that every
//! syscall backend (these two, and io_uring for short or failed
//! completions) finishes a read with.

use super::{check_dest, note_once, BackendKind, DataFile, ReadBackend, StorageError};
use super::{SlabWindow, Span, ALIGN_BYTES};
use std::fs::File;
use std::io::ErrorKind;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Once;

static DIRECT_REFUSED: Once = Once::new();

/// One syscall backend for both read paths: buffered `pread` through the
/// page cache, or O_DIRECT reads of whole aligned blocks that bypass it.
pub struct Syscall {
    pub o_direct: bool,
}

impl Syscall {
    pub const PREAD: Syscall = Syscall { o_direct: false };
    pub const DIRECT: Syscall = Syscall { o_direct: true };
}

impl ReadBackend for Syscall {
    fn kind(&self) -> BackendKind {
        if self.o_direct {
            BackendKind::Direct
        } else {
            BackendKind::Pread
        }
    }

    fn read_window(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        mut dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        let span = check_dest(offset, len, &dest)?;
        Plan::new(file, offset, len, span, self.o_direct).finish(&mut dest, 0)
    }
}

/// One read laid out on a descriptor: bytes from `file_offset` on land in
/// `window` of the slab, and the caller's payload is `payload` of the slab.
pub(super) struct Plan<'f> {
    path: &'f Path,
    fd: &'f File,
    /// O_DIRECT: every syscall starts on a block boundary of file and slab.
    direct: bool,
    /// The caller's request, for errors.
    offset: u64,
    len: usize,
    file_offset: u64,
    window: Range<usize>,
    payload: Range<usize>,
}

impl<'f> Plan<'f> {
    /// O_DIRECT reads the whole aligned span; buffered reads only the
    /// payload. Without an O_DIRECT descriptor (the filesystem refused it)
    /// the read is buffered, said once per process.
    pub(super) fn new(
        file: &'f DataFile,
        offset: u64,
        len: usize,
        span: Span,
        want_direct: bool,
    ) -> Plan<'f> {
        let payload = span.payload(len);
        let direct_fd = if want_direct {
            file.direct()
                .inspect_err(|e| {
                    note_once(&DIRECT_REFUSED, || {
                        format!(
                            "O_DIRECT refused on {} ({e}); using buffered pread",
                            file.path().display()
                        )
                    })
                })
                .ok()
        } else {
            None
        };
        let (fd, direct, file_offset, window) = match direct_fd {
            Some(fd) => (fd, true, span.aligned_offset, 0..span.aligned_len),
            None => (file.buffered(), false, offset, payload.clone()),
        };
        Plan {
            path: file.path(),
            fd,
            direct,
            offset,
            len,
            file_offset,
            window,
            payload,
        }
    }

    pub(super) fn fd(&self) -> &File {
        self.fd
    }

    pub(super) fn file_offset(&self) -> u64 {
        self.file_offset
    }

    pub(super) fn window(&self) -> Range<usize> {
        self.window.clone()
    }

    /// Bytes of the window that must arrive: up to the end of the payload
    /// (the aligned tail past it may lie beyond the end of the file). An
    /// empty read needs none.
    pub(super) fn needed_bytes(&self) -> usize {
        if self.len == 0 {
            0
        } else {
            self.payload.end - self.window.start
        }
    }

    /// Completes the read, `done_bytes` of the window being filled already:
    /// loops over short reads until the payload is in, the file ends
    /// (`ShortRead`) or the drive fails (`Io`, with path and offset).
    pub(super) fn finish(
        &self,
        dest: &mut [u8],
        mut done_bytes: usize,
    ) -> Result<Range<usize>, StorageError> {
        let needed_bytes = self.needed_bytes();
        while done_bytes < needed_bytes {
            // O_DIRECT moves whole blocks, so a count ending mid-block means
            // the file ended there; reading on from an unaligned offset
            // would only fail with EINVAL.
            if self.direct && !done_bytes.is_multiple_of(ALIGN_BYTES) {
                break;
            }
            let at = self.file_offset + done_bytes as u64;
            let buf = &mut dest[self.window.start + done_bytes..self.window.end];
            match self.fd.read_at(buf, at) {
                Ok(0) => break,
                Ok(n) => done_bytes += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(StorageError::Io {
                        path: self.path.to_path_buf(),
                        offset: at,
                        source,
                    })
                }
            }
        }
        if done_bytes < needed_bytes {
            let payload_skip = self.payload.start - self.window.start;
            return Err(StorageError::ShortRead {
                file: self.path.to_path_buf(),
                offset: self.offset,
                wanted: self.len,
                got: done_bytes.saturating_sub(payload_skip),
            });
        }
        Ok(self.payload.clone())
    }
}

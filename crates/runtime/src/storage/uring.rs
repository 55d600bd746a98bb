//! The io_uring backend: a batch of reads is submitted together (O_DIRECT
//! where the filesystem allows it) and waited for once, so several drives
//! or a deep queue on one drive work at the same time from one thread.
//! Rings are detected at run time: kernels or sandboxes that refuse them
//! (EPERM under seccomp, ENOSYS, `kernel.io_uring_disabled`) get O_DIRECT
//! reads instead, said once per process.

use super::posix::{Plan, Syscall};
use super::{check_dest, note_once, BackendKind, BatchRead, DataFile, ReadBackend};
use super::{SlabWindow, StorageError};
use io_uring::{opcode, types, IoUring};
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, Once, PoisonError};

/// Submission queue depth: reads in flight per ring; larger batches go in
/// chunks of this many.
const RING_ENTRIES: u32 = 64;

/// The most one submission asks for. Linux moves at most 2 GiB - 4 KiB per
/// read anyway; a larger window is finished by the synchronous loop. A
/// multiple of the alignment, so O_DIRECT accepts it.
const MAX_OP_BYTES: usize = 1 << 30;

static URING_REFUSED: Once = Once::new();

pub struct UringBackend {
    /// Idle rings. A ring serves one batch at a time, so concurrent callers
    /// each take one (and make another when none is idle) instead of
    /// queueing behind a lock held across the wait.
    rings: Mutex<Vec<IoUring>>,
}

impl UringBackend {
    /// Creates the first ring; fails where io_uring is refused.
    pub fn new() -> io::Result<UringBackend> {
        Ok(UringBackend {
            rings: Mutex::new(vec![IoUring::new(RING_ENTRIES)?]),
        })
    }

    fn take_ring(&self) -> Option<IoUring> {
        let idle = self
            .rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        idle.or_else(|| IoUring::new(RING_ENTRIES).ok())
    }

    fn put_ring(&self, ring: IoUring) {
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ring);
    }
}

/// The io_uring backend when its ring could be made, else O_DIRECT reads
/// with one log line. `open_backend` passes the real attempt; tests pass a
/// refusal to exercise the fallback on kernels that allow rings.
pub(super) fn uring_or_direct(ring: io::Result<UringBackend>) -> Box<dyn ReadBackend> {
    match ring {
        Ok(backend) => Box::new(backend),
        Err(e) => {
            note_once(&URING_REFUSED, || {
                format!("io_uring unavailable ({e}); using O_DIRECT reads")
            });
            Box::new(Syscall::DIRECT)
        }
    }
}

#[cfg(test)]
pub(super) fn fallback_was_logged() -> bool {
    URING_REFUSED.is_completed()
}

impl ReadBackend for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::IoUring
    }

    fn read_window(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
        dest: SlabWindow<'_>,
    ) -> Result<Range<usize>, StorageError> {
        let mut read = [BatchRead {
            file,
            offset,
            len,
            dest,
        }];
        self.read_batch(&mut read)
            .pop()
            .expect("one read gives one result")
    }

    fn read_batch(&self, reads: &mut [BatchRead<'_>]) -> Vec<Result<Range<usize>, StorageError>> {
        // No ring to be had now (resource limits): the same reads, one by
        // one, through O_DIRECT.
        let Some(mut ring) = self.take_ring() else {
            return Syscall::DIRECT.read_batch(reads);
        };
        let mut results = Vec::with_capacity(reads.len());
        for chunk in reads.chunks_mut(RING_ENTRIES as usize) {
            results.extend(read_chunk(&mut ring, chunk));
        }
        // Every submission has completed: the ring is clean for reuse.
        self.put_ring(ring);
        results
    }
}

/// Submits up to `RING_ENTRIES` reads, waits for all, and finishes each
/// with the synchronous loop (which does nothing for complete reads, reads
/// on after short ones, and redoes failed ones so that their error carries
/// path and offset).
fn read_chunk(
    ring: &mut IoUring,
    chunk: &mut [BatchRead<'_>],
) -> Vec<Result<Range<usize>, StorageError>> {
    let plans: Vec<Result<Plan<'_>, StorageError>> = chunk
        .iter()
        .map(|r| {
            let file: &DataFile = r.file;
            check_dest(r.offset, r.len, &r.dest)
                .map(|span| Plan::new(file, r.offset, r.len, span, true))
        })
        .collect();
    let mut submitted = 0;
    for (i, (read, plan)) in chunk.iter_mut().zip(&plans).enumerate() {
        let Ok(plan) = plan else { continue };
        if plan.needed_bytes() == 0 {
            continue;
        }
        let window = plan.window();
        let op_bytes = window.len().min(MAX_OP_BYTES);
        let buf = read.dest[window].as_mut_ptr();
        let sqe = opcode::Read::new(types::Fd(plan.fd().as_raw_fd()), buf, op_bytes as u32)
            .offset(plan.file_offset())
            .build()
            .user_data(i as u64);
        // SAFETY: `buf..buf + op_bytes` lies inside `read.dest`, borrowed
        // mutably through `chunk` until `wait_all` below has reaped every
        // completion, and the descriptor stays open through `plan`'s
        // borrow of the `DataFile`. The queue has room: a chunk holds at
        // most `RING_ENTRIES` reads and the queue is empty on entry.
        unsafe { ring.submission().push(&sqe) }.expect("a chunk fits the submission queue");
        submitted += 1;
    }
    let mut op_results = vec![0i32; chunk.len()];
    wait_all(ring, submitted, &mut op_results);
    chunk
        .iter_mut()
        .zip(plans)
        .zip(op_results)
        .map(|((read, plan), op_result)| {
            // A negative result is an errno: redo the read from the start.
            let done_bytes = usize::try_from(op_result).unwrap_or(0);
            plan?.finish(&mut read.dest, done_bytes)
        })
        .collect()
}

/// Submits what is queued and reaps `pending` completions into
/// `op_results` (by the read's index, kept in `user_data`).
fn wait_all(ring: &mut IoUring, mut pending: usize, op_results: &mut [i32]) {
    while pending > 0 {
        match ring.submit_and_wait(pending) {
            Ok(_) => {}
            // Interrupted, or the completion queue is full: reap and retry.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                // Returning (or unwinding) would free or reuse buffers the
                // kernel may still be writing into.
                eprintln!("io_uring wait failed with {pending} reads in flight ({e}); aborting");
                std::process::abort();
            }
        }
        for cqe in ring.completion() {
            op_results[cqe.user_data() as usize] = cqe.result();
            pending -= 1;
        }
    }
}

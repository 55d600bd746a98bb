//! Aligned memory for reads: `AlignedSlab` (an owned heap buffer whose start
//! and length are multiples of `ALIGN_BYTES`), `SlabWindow` (an aligned part
//! of one, what a backend reads into), and `span`, which covers an unaligned
//! byte range of a file with aligned I/O.
//!
//! Every backend lays a read out the same way, the one `span` gives, so a
//! caller finds its payload at the same place whichever backend ran.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;
use std::sync::Arc;

use super::pool::{HostPool, Region};

/// Alignment of slabs and of O_DIRECT offsets and lengths. 4096 covers the
/// logical block size of every drive we target (512 and 4096 byte sectors)
/// and the page size, which io_uring and mmap copies like too.
pub const ALIGN_BYTES: usize = 4096;

/// How an unaligned range `[offset, offset + len)` of a file sits inside an
/// aligned read: the read covers `[aligned_offset, aligned_offset +
/// aligned_len)` of the file and the payload starts `payload_start` bytes
/// into it. All three are in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub aligned_offset: u64,
    pub aligned_len: usize,
    pub payload_start: usize,
}

impl Span {
    /// Where the payload of `len` bytes lies inside the slab.
    pub fn payload(&self, len: usize) -> Range<usize> {
        self.payload_start..self.payload_start + len
    }
}

/// The aligned read that covers bytes `[offset, offset + len)`.
pub fn span(offset: u64, len: usize) -> Span {
    let payload_start = (offset % ALIGN_BYTES as u64) as usize;
    Span {
        aligned_offset: offset - payload_start as u64,
        aligned_len: round_up(payload_start + len),
        payload_start,
    }
}

/// `bytes` rounded up to a multiple of `ALIGN_BYTES`.
pub fn round_up(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN_BYTES) * ALIGN_BYTES
}

/// An owned buffer aligned to `ALIGN_BYTES`, its length a multiple of
/// `ALIGN_BYTES`: from the heap (zeroed), or from a `HostPool` (zeroed when
/// freshly mapped, else holding what its previous slab held; always
/// initialised memory).
pub struct AlignedSlab {
    ptr: NonNull<u8>,
    len_bytes: usize,
    backing: Backing,
}

enum Backing {
    /// What was allocated: at least one block even for an empty slab,
    /// since a zero-sized allocation is not allowed.
    Heap(Layout),
    /// A region of this pool, of `max(len_bytes, ALIGN_BYTES)` bytes, given
    /// back on drop.
    Pool(Arc<HostPool>),
}

// SAFETY: the slab owns its allocation exclusively (like a `Vec<u8>`); the
// raw pointer is never shared outside borrows tied to `&self`/`&mut self`.
unsafe impl Send for AlignedSlab {}
// SAFETY: `&AlignedSlab` only hands out `&[u8]`, which is safe to share.
unsafe impl Sync for AlignedSlab {}

impl AlignedSlab {
    /// A slab of at least `len_bytes`, rounded up to a multiple of
    /// `ALIGN_BYTES`. Zeroed, so no uninitialised byte is ever visible.
    pub fn new(len_bytes: usize) -> AlignedSlab {
        let len_bytes = round_up(len_bytes);
        let layout = Layout::from_size_align(len_bytes.max(ALIGN_BYTES), ALIGN_BYTES)
            .expect("slab size overflows the address space");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        AlignedSlab {
            ptr,
            len_bytes,
            backing: Backing::Heap(layout),
        }
    }

    /// A slab of at least `len_bytes` from `pool` (bound to its node,
    /// recycled), rounded up like `new`.
    pub fn in_pool(pool: &Arc<HostPool>, len_bytes: usize) -> AlignedSlab {
        let len_bytes = round_up(len_bytes);
        let region = pool.take(len_bytes.max(ALIGN_BYTES));
        AlignedSlab {
            ptr: region.ptr,
            len_bytes,
            backing: Backing::Pool(Arc::clone(pool)),
        }
    }

    /// A slab exactly large enough for reading `[offset, offset + len)`,
    /// from `pool` when given, else from the heap.
    pub fn for_read_in(pool: Option<&Arc<HostPool>>, offset: u64, len: usize) -> AlignedSlab {
        let len_bytes = span(offset, len).aligned_len;
        match pool {
            Some(pool) => AlignedSlab::in_pool(pool, len_bytes),
            None => AlignedSlab::new(len_bytes),
        }
    }

    /// A heap slab exactly large enough for reading `[offset, offset + len)`.
    pub fn for_read(offset: u64, len: usize) -> AlignedSlab {
        AlignedSlab::for_read_in(None, offset, len)
    }

    /// The whole slab as an aligned window to read into.
    pub fn window(&mut self) -> SlabWindow<'_> {
        SlabWindow { bytes: self }
    }
}

impl Deref for AlignedSlab {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to at least `len_bytes` initialised bytes
        // owned by `self` (see `Backing`); the borrow is tied to `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl DerefMut for AlignedSlab {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl Drop for AlignedSlab {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: `ptr` was allocated by `alloc_zeroed` with `layout`.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr(), *layout) },
            Backing::Pool(pool) => pool.give(Region {
                ptr: self.ptr,
                len_bytes: self.len_bytes.max(ALIGN_BYTES),
            }),
        }
    }
}

impl std::fmt::Debug for AlignedSlab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedSlab({} bytes)", self.len_bytes)
    }
}

/// A mutable part of a slab that starts on an `ALIGN_BYTES` boundary and
/// whose length is a multiple of `ALIGN_BYTES`: what O_DIRECT and io_uring
/// reads may target. Only `AlignedSlab::window` and `split_at` make one, so
/// the invariant holds by construction.
pub struct SlabWindow<'a> {
    bytes: &'a mut [u8],
}

impl<'a> SlabWindow<'a> {
    /// Two disjoint windows, `[0, at)` and `[at, len)`.
    ///
    /// Panics if `at` is not a multiple of `ALIGN_BYTES` or lies past the
    /// end: both are bugs in the caller, not conditions of the data.
    pub fn split_at(self, at: usize) -> (SlabWindow<'a>, SlabWindow<'a>) {
        assert!(
            at.is_multiple_of(ALIGN_BYTES),
            "slab windows split on {ALIGN_BYTES}-byte boundaries, not at {at}"
        );
        let (head, tail) = self.bytes.split_at_mut(at);
        (SlabWindow { bytes: head }, SlabWindow { bytes: tail })
    }

    /// The same window for a shorter borrow (to lend it to a call and use
    /// it again afterwards).
    pub fn reborrow(&mut self) -> SlabWindow<'_> {
        SlabWindow {
            bytes: &mut *self.bytes,
        }
    }
}

impl Deref for SlabWindow<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl DerefMut for SlabWindow<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

#[cfg(test)]
mod tests;

//! Host memory pools (design §7 "Tiers"): slabs for one NUMA node, mapped
//! with `mmap`, bound to the node with `mbind`, backed by transparent huge
//! pages where they are large, and recycled when an object is dropped.
//!
//! Why: a fresh heap buffer is faulted in page by page while the drive's
//! DMA waits on it, which held loads to about 60 % of a raw O_DIRECT read
//! here; a recycled slab is already faulted and on the right node. Freed
//! slabs are kept up to `max_retained_bytes` per pool (outside every
//! budget, which counts objects, not retained memory); beyond that they are
//! unmapped. A one-node machine, or a kernel or sandbox that refuses
//! `mbind`, gets unbound slabs and one log line.
//!
//! A pool whose slabs feed a GPU can page-lock each region once, when it is
//! mapped, through a [`Pinner`] (CUDA's `cuMemHostRegister`): reads then
//! land in memory the DMA engine can copy from directly, with no staging
//! copy, and recycled regions stay pinned.

use std::collections::HashMap;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Once};

/// Slabs at least this large ask for transparent huge pages.
const HUGE_PAGE_BYTES: usize = 2 << 20;
/// `MPOL_BIND` of `<linux/mempolicy.h>`.
const MPOL_BIND: libc::c_int = 2;

static MBIND_REFUSED: Once = Once::new();
static PIN_REFUSED: Once = Once::new();

/// Page-locks host memory for a device's DMA engine.
pub trait Pinner: Send + Sync {
    /// Pins `[ptr, ptr + len_bytes)`; false when the driver refuses (the
    /// region's uploads are then staged).
    fn pin(&self, ptr: *mut u8, len_bytes: usize) -> bool;
    /// Unpins a region `pin` accepted, before it is unmapped.
    fn unpin(&self, ptr: *mut u8);
}

/// NUMA nodes with memory, from sysfs (`[0]` where sysfs says nothing).
pub fn numa_nodes() -> Vec<u32> {
    let mut nodes: Vec<u32> = std::fs::read_dir(Path::new("/sys/devices/system/node"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    nodes.sort_unstable();
    if nodes.is_empty() {
        nodes.push(0);
    }
    nodes
}

/// A region of mapped memory, page aligned.
pub(crate) struct Region {
    pub ptr: NonNull<u8>,
    pub len_bytes: usize,
}

// SAFETY: a region is exclusively owned memory, like a `Vec<u8>`'s buffer.
unsafe impl Send for Region {}

impl Region {
    fn unmap(self) {
        // SAFETY: `ptr..ptr+len_bytes` was returned by `mmap` and is no
        // longer referenced (its slab is gone).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len_bytes) };
    }
}

pub struct HostPool {
    /// The node slabs are bound to; `None`: wherever the kernel puts them.
    node: Option<u32>,
    max_retained_bytes: usize,
    pinner: Option<Arc<dyn Pinner>>,
    /// Free regions by length, and their total bytes.
    free: Mutex<(HashMap<usize, Vec<Region>>, usize)>,
    /// Start addresses of the regions `pinner` pinned (to unpin on unmap).
    pinned: Mutex<std::collections::HashSet<usize>>,
}

impl HostPool {
    pub fn new(node: Option<u32>, max_retained_bytes: usize) -> Arc<HostPool> {
        HostPool::pinned_by(node, max_retained_bytes, None)
    }

    /// A pool whose regions `pinner` page-locks once each.
    pub fn pinned_by(
        node: Option<u32>,
        max_retained_bytes: usize,
        pinner: Option<Arc<dyn Pinner>>,
    ) -> Arc<HostPool> {
        Arc::new(HostPool {
            node,
            max_retained_bytes,
            pinner,
            free: Mutex::new((HashMap::new(), 0)),
            pinned: Mutex::new(Default::default()),
        })
    }

    pub fn node(&self) -> Option<u32> {
        self.node
    }

    /// Bytes of freed slabs kept for reuse.
    pub fn retained_bytes(&self) -> usize {
        self.free.lock().unwrap().1
    }

    /// A region of exactly `len_bytes` (a multiple of the page size): a
    /// recycled one, or a new mapping.
    pub(crate) fn take(&self, len_bytes: usize) -> Region {
        {
            let mut free = self.free.lock().unwrap();
            if let Some(region) = free.0.get_mut(&len_bytes).and_then(Vec::pop) {
                free.1 -= len_bytes;
                return region;
            }
        }
        self.map(len_bytes)
    }

    /// Takes a region back, keeping it while the pool retains less than its
    /// limit.
    pub(crate) fn give(&self, region: Region) {
        let mut free = self.free.lock().unwrap();
        if free.1 + region.len_bytes <= self.max_retained_bytes {
            free.1 += region.len_bytes;
            free.0.entry(region.len_bytes).or_default().push(region);
        } else {
            drop(free);
            self.unmap(region);
        }
    }

    fn unmap(&self, region: Region) {
        let was_pinned = self
            .pinned
            .lock()
            .unwrap()
            .remove(&(region.ptr.as_ptr() as usize));
        if let (true, Some(pinner)) = (was_pinned, &self.pinner) {
            pinner.unpin(region.ptr.as_ptr());
        }
        region.unmap();
    }

    fn map(&self, len_bytes: usize) -> Region {
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            let layout =
                std::alloc::Layout::from_size_align(len_bytes, 4096).expect("a valid layout");
            std::alloc::handle_alloc_error(layout);
        }
        if len_bytes >= HUGE_PAGE_BYTES {
            // SAFETY: advice on the mapping just made; failure only means
            // small pages.
            unsafe { libc::madvise(raw, len_bytes, libc::MADV_HUGEPAGE) };
        }
        if let Some(node) = self.node {
            bind(raw, len_bytes, node);
        }
        if let Some(pinner) = &self.pinner {
            if pinner.pin(raw.cast(), len_bytes) {
                self.pinned.lock().unwrap().insert(raw as usize);
            } else {
                PIN_REFUSED.call_once(|| {
                    eprintln!(
                        "note: the GPU driver refused to page-lock host slabs; uploads are staged"
                    );
                });
            }
        }
        Region {
            ptr: NonNull::new(raw.cast()).expect("mmap never returns null on success"),
            len_bytes,
        }
    }
}

impl Drop for HostPool {
    fn drop(&mut self) {
        let free = std::mem::take(&mut self.free.get_mut().unwrap().0);
        for region in free.into_values().flatten() {
            self.unmap(region);
        }
    }
}

/// Binds `[addr, addr + len)` to `node` before any page is touched.
fn bind(addr: *mut libc::c_void, len: usize, node: u32) {
    let bits = u64::BITS as usize;
    let mut mask = vec![0u64; node as usize / bits + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // SAFETY: mbind reads `mask` (maxnode bits) and changes the policy of a
    // mapping we own; it does not touch the memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_BIND,
            mask.as_ptr(),
            mask.len() * bits + 1,
            0,
        )
    };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        MBIND_REFUSED.call_once(|| {
            eprintln!("note: mbind to NUMA node {node} refused ({error}); host slabs are not bound to a node");
        });
    }
}

#[cfg(test)]
mod tests;

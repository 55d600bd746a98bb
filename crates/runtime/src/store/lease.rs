//! Leases: a pin on an object's bytes for as long as it lives, released
//! on drop; the last release drops an object chosen as a victim meanwhile.

use super::{Resident, Slot};
use crate::sync::{lock, Mutex, Ordering};
use residency_policy::ObjectIndex;
use std::sync::Arc;

/// A pin on an object's bytes: while it lives, the object is neither
/// evicted, moved nor demoted.
pub struct Lease {
    pub(super) slot: Arc<Mutex<Slot>>,
    pub(super) object: ObjectIndex,
    pub(super) resident: Arc<Resident>,
    /// False for a transient slot (not admitted): nothing to release.
    pub(super) published: bool,
}

impl Lease {
    pub fn object(&self) -> ObjectIndex {
        self.object
    }

    /// Bytes of the object.
    pub fn len(&self) -> usize {
        self.resident.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object's bytes, when it lives in host memory.
    pub fn host(&self) -> Option<&[u8]> {
        self.resident.bytes.host()
    }

    /// `(device ordinal, device address)`, when it lives on a GPU.
    pub fn device(&self) -> Option<(u32, u64)> {
        self.resident.bytes.device()
    }

    /// Whether the object was admitted (false: a transient slot).
    pub fn is_resident(&self) -> bool {
        self.published
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.published {
            return;
        }
        let mut slot = lock(&self.slot);
        if let Slot::Ready {
            resident,
            leases,
            evict_on_release,
            ..
        } = &mut *slot
        {
            if Arc::ptr_eq(resident, &self.resident) {
                *leases -= 1;
                if *leases == 0 && *evict_on_release {
                    *slot = Slot::Absent;
                    self.resident
                        .counters
                        .evictions
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

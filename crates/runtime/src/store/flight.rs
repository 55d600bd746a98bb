//! Single flight: the one load in flight that concurrent misses of an
//! object join, and the leader's guard that finishes it whatever happens,
//! so that a loader's panic fails the joiners instead of stranding them.

use super::{Loaded, Slot, Store, StoreError};
use crate::sync::{lock, wait, AtomicBool, Condvar, Mutex};
use residency_policy::ObjectIndex;
use std::sync::Arc;

pub(super) struct Flight {
    pub(super) result: Mutex<Option<Result<Loaded, StoreError>>>,
    pub(super) done: Condvar,
    /// Chosen as a victim while loading: published already marked, or not
    /// published at all if chosen before the load had room (see `load`).
    pub(super) evict_when_done: AtomicBool,
}

/// The leader's duty to the requests that joined its load: a finished
/// flight, whatever happens. Dropped unfinished (the loader or a policy
/// panicked), it clears the slot and hands the joiners an error, so that
/// none of them waits forever and the object can be requested again; the
/// reservation, if taken, went back as the panic unwound.
pub(super) struct Leader<'a> {
    pub(super) store: &'a Store,
    pub(super) object: ObjectIndex,
    /// `None` once finished.
    pub(super) flight: Option<Arc<Flight>>,
}

impl Leader<'_> {
    pub(super) fn flight(&self) -> &Flight {
        self.flight
            .as_ref()
            .expect("a leader is finished only once")
    }

    pub(super) fn finish(mut self, result: Result<Loaded, StoreError>) {
        if let Some(flight) = self.flight.take() {
            flight.finish(result);
        }
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        let mut slot = lock(&self.store.inner.slots[self.object as usize]);
        if matches!(&*slot, Slot::Loading(f) if Arc::ptr_eq(f, &flight)) {
            *slot = Slot::Absent;
        }
        drop(slot);
        flight.finish(Err(StoreError::Load {
            object: self.object,
            reason: "the loader panicked while reading it; the next request loads it again".into(),
        }));
    }
}

impl Flight {
    pub(super) fn finish(&self, result: Result<Loaded, StoreError>) {
        *lock(&self.result) = Some(result);
        self.done.notify_all();
    }

    pub(super) fn wait(&self) -> Result<Loaded, StoreError> {
        let mut result = lock(&self.result);
        while result.is_none() {
            result = wait(&self.done, result);
        }
        result.clone().unwrap()
    }
}

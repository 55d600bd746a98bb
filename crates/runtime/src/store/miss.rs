//! A miss: the object loaded once however many ask for it (one flight, the
//! others wait on it), room made by evicting the policy's victims, and the
//! lease handed out, published or transient.

use super::budget::{reserve, reserve_unless};
use super::flight::Flight;
use super::lease::Lease;
use super::{Loaded, Resident, Slot, Store, StoreError};
use crate::sync::{lock, Ordering};
use residency_policy::{ObjectIndex, Outcome, Request, NEVER};
use std::sync::Arc;
use std::time::Instant;

impl Store {
    /// Advances the clock and records the reuse distance of `o`.
    pub(super) fn tick(&self, o: ObjectIndex) -> u64 {
        let now = self.inner.clock.fetch_add(1, Ordering::Relaxed);
        self.inner.counters.record_reuse(o, now);
        now
    }

    pub(super) fn tell_policy_of_hit(&self, o: ObjectIndex, now: u64) {
        if self.is_pinned(o) {
            return;
        }
        let place = &self.inner.places[self.inner.homes.place[o as usize]];
        let mut evicted = Vec::new();
        let mut policy = lock(&place.policy);
        policy.access(&self.request(o, now), &mut evicted);
        // A hit on an object chosen as a victim while leased (to go at its
        // last release) re-admits it: the policy counts it again, so the
        // store must keep it. Under the policy lock, so that no victim
        // choice comes between.
        if policy.contains(o) {
            if let Slot::Ready {
                evict_on_release, ..
            } = &mut *lock(&self.inner.slots[o as usize])
            {
                *evict_on_release = false;
            }
        }
        drop(policy);
        // Some policies (SLRU with unequal sizes) evict on a hit.
        for v in evicted {
            self.evict_victim(v);
        }
    }

    pub(super) fn request(&self, o: ObjectIndex, now: u64) -> Request {
        Request {
            object: o,
            size_bytes: self.inner.loader.size_bytes(o),
            time: now,
            next_access: NEVER,
        }
    }

    /// The leader of a miss: admission, victims, budget, read, publication.
    pub(super) fn load(
        &self,
        o: ObjectIndex,
        now: u64,
        flight: &Flight,
    ) -> Result<Loaded, StoreError> {
        let inner = &self.inner;
        let place = &inner.places[inner.homes.place[o as usize]];
        let mut admitted = self.is_pinned(o) || {
            let mut evicted = Vec::new();
            let outcome = lock(&place.policy).access(&self.request(o, now), &mut evicted);
            for v in evicted {
                self.evict_victim(v);
            }
            // A policy that believes `o` resident (a load of it failed
            // before) is told nothing new: the bytes are simply loaded again.
            outcome != Outcome::Bypassed
        };
        let counters = &inner.counters;
        counters.physical_misses.fetch_add(1, Ordering::Relaxed);
        if admitted {
            counters.admissions.fetch_add(1, Ordering::Relaxed);
        } else {
            counters.rejections.fetch_add(1, Ordering::Relaxed);
        }
        let size = inner.loader.size_bytes(o);
        // A later miss may make the policy evict `o` before `o` has room.
        // From then on the policy counts neither `o` nor its bytes, and the
        // room `o` waits for may be held by residents the policy keeps until
        // some later access evicts them, which never comes when the caller
        // needs `o` first (the replay's one-expert budget). So `o` stops
        // waiting and runs from a transient slot, as a declined miss does.
        let in_place = if admitted {
            let evicted = || flight.evict_when_done.load(Ordering::Relaxed);
            reserve_unless(&place.budgets, size, inner.wait, &evicted)
        } else {
            Ok(None)
        };
        let reservation = match in_place {
            Ok(Some(reservation)) => Ok(reservation),
            Ok(None) => {
                if admitted {
                    counters.bypasses.fetch_add(1, Ordering::Relaxed);
                }
                admitted = false;
                reserve(std::slice::from_ref(&inner.staging), size, inner.wait)
            }
            Err(e) => Err(e),
        };
        let result = reservation
            .map_err(StoreError::from)
            .and_then(|reservation| {
                if reservation.waited() {
                    counters.lease_waits.fetch_add(1, Ordering::Relaxed);
                }
                let started = Instant::now();
                let read = inner.loader.load(o);
                counters.add_seconds(&counters.read_service_nanos, started.elapsed());
                let bytes = read.map_err(|reason| StoreError::Load { object: o, reason })?;
                if bytes.len() as u64 != size {
                    return Err(StoreError::Load {
                        object: o,
                        reason: format!(
                            "the loader gave {} bytes, the object has {size}",
                            bytes.len()
                        ),
                    });
                }
                counters.physical_bytes.fetch_add(size, Ordering::Relaxed);
                Ok(Arc::new(Resident {
                    bytes,
                    _reservation: reservation,
                    counters: Arc::clone(&inner.counters),
                }))
            });
        let mut slot = lock(&inner.slots[o as usize]);
        *slot = match &result {
            Ok(resident) if admitted => Slot::Ready {
                resident: Arc::clone(resident),
                leases: 1,
                used: true,
                evict_on_release: flight.evict_when_done.load(Ordering::Relaxed),
            },
            _ => Slot::Absent,
        };
        result.map(|resident| Loaded { resident, admitted })
    }

    /// Drops a victim now, or marks it to go at its last release.
    pub(super) fn evict_victim(&self, v: ObjectIndex) {
        let inner = &self.inner;
        let mut slot = lock(&inner.slots[v as usize]);
        let loading = match &mut *slot {
            Slot::Ready { leases: 0, .. } => {
                *slot = Slot::Absent;
                inner.counters.evictions.fetch_add(1, Ordering::Relaxed);
                false
            }
            Slot::Ready {
                evict_on_release, ..
            } => {
                *evict_on_release = true;
                false
            }
            Slot::Loading(flight) => {
                flight.evict_when_done.store(true, Ordering::Relaxed);
                true
            }
            Slot::Absent => false,
        };
        drop(slot);
        if loading {
            // Its load may be waiting for room, which it now gives up.
            for b in &inner.places[inner.homes.place[v as usize]].budgets {
                b.wake();
            }
        }
    }

    /// A lease on a published object (its count already taken); `waited`:
    /// when the request started, if it waited for a load (felt wait).
    pub(super) fn lease(
        &self,
        o: ObjectIndex,
        resident: Arc<Resident>,
        waited: Option<Instant>,
    ) -> Lease {
        let counters = &self.inner.counters;
        if let Some(started) = waited {
            counters.add_seconds(&counters.felt_wait_nanos, started.elapsed());
        }
        counters.logical_bytes.add(resident.bytes.len() as u64);
        self.published_lease(o, resident)
    }

    /// A lease on `o`'s published slot, whose lease count the caller has
    /// already raised.
    pub(super) fn published_lease(&self, o: ObjectIndex, resident: Arc<Resident>) -> Lease {
        Lease {
            slot: Arc::clone(&self.inner.slots[o as usize]),
            object: o,
            resident,
            published: true,
        }
    }

    /// A lease on a transient slot: nothing to release but the bytes.
    pub(super) fn transient_lease(
        &self,
        o: ObjectIndex,
        resident: Arc<Resident>,
        started: Instant,
    ) -> Lease {
        let mut lease = self.lease(o, resident, Some(started));
        lease.published = false;
        lease
    }
}

//! What is held from the start and how much each place may hold: the
//! pinned set loaded and changed, and the places' capacities moved, their
//! policies told what they lost.

use super::{ObjectState, Store, StoreError};
use crate::sync::{lock, AtomicUsize, Mutex, Ordering};
use residency_policy::{ObjectIndex, Outcome};
use std::sync::Arc;

impl Store {
    /// Loads `objects` with `threads` loads in flight, keeping no lease;
    /// `progress(bytes)` after each. Stops at the first failure.
    pub fn load_all(
        &self,
        objects: &[ObjectIndex],
        threads: usize,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(), StoreError> {
        let next = AtomicUsize::new(0);
        let failed = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| {
                    while let Some(&o) = objects.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if lock(&failed).is_some() {
                            return;
                        }
                        if let Err(e) = self.prefetch(o) {
                            lock(&failed).get_or_insert(e);
                            return;
                        }
                        progress(self.inner.loader.size_bytes(o));
                    }
                });
            }
        });
        match failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Changes which objects are pinned at their places while serving:
    /// `demote` leave the pinned set and join the place's cache when its
    /// policy has room for them and admits them, else are dropped (now, or
    /// at their last release if leased); `promote` join it, taken from the
    /// place's cache when the policy holds them (the policy forgets them),
    /// else loaded. The caller keeps the pinned bytes of a place within its
    /// `pin_share_bytes`; budgets hold regardless (a load waits for room).
    /// Returns the bytes loaded.
    pub fn repin(
        &self,
        promote: &[ObjectIndex],
        demote: &[ObjectIndex],
    ) -> Result<u64, StoreError> {
        let inner = &self.inner;
        for &o in demote {
            if inner.pinned[o as usize].swap(false, Ordering::Relaxed) && !self.cache_demoted(o) {
                self.evict_victim(o);
            }
        }
        let mut loaded_bytes = 0;
        for &o in promote {
            if inner.pinned[o as usize].load(Ordering::Relaxed) {
                continue;
            }
            let place = &inner.places[inner.homes.place[o as usize]];
            // Under the policy lock, so that a hit cannot re-admit it meanwhile.
            let mut policy = lock(&place.policy);
            inner.pinned[o as usize].store(true, Ordering::Relaxed);
            let cached = policy.contains(o);
            policy.remove(o);
            drop(policy);
            if !cached || matches!(self.state(o), ObjectState::Absent) {
                let size = inner.loader.size_bytes(o);
                self.prefetch(o)?;
                loaded_bytes += size;
                inner.counters.migrations.fetch_add(1, Ordering::Relaxed);
                inner
                    .counters
                    .migration_bytes
                    .fetch_add(size, Ordering::Relaxed);
            }
        }
        Ok(loaded_bytes)
    }

    /// Moves the places' capacities while serving (per-layer budgets that
    /// `residency_policy::online` re-allocates); `capacities_bytes[p]` is
    /// place `p`'s whole capacity, its pinned share kept. Every shrink
    /// comes before any grow, so the places' capacities never sum above
    /// their tier's at any moment. A shrinking place's policy evicts its
    /// own coldest residents; a leased one goes at its last release and its
    /// bytes count until then, so a load into a grown place waits for them
    /// in the tier's budget. Everything is checked before anything moves.
    pub fn set_capacities(&self, capacities_bytes: &[u64]) -> Result<(), StoreError> {
        let places = &self.inner.places;
        if capacities_bytes.len() != places.len() {
            return Err(StoreError::Capacities {
                given: capacities_bytes.len(),
                places: places.len(),
            });
        }
        let current = |p: usize| places[p].budgets[0].capacity_bytes();
        for (p, place) in places.iter().enumerate() {
            if capacities_bytes[p] == current(p) {
                continue;
            }
            if !place.config.policy.resizes() {
                return Err(StoreError::CannotResize {
                    place: place.config.name.clone(),
                    policy: place.config.policy,
                });
            }
            if capacities_bytes[p] < place.pin_share_bytes {
                return Err(StoreError::PinsTooLarge {
                    place: place.config.name.clone(),
                    bytes: place.pin_share_bytes,
                    capacity_bytes: capacities_bytes[p],
                });
            }
        }
        for place in places {
            let tier = &place.budgets[1];
            let bytes: u64 = places
                .iter()
                .zip(capacities_bytes)
                .filter(|(q, _)| Arc::ptr_eq(&q.budgets[1], tier))
                .map(|(_, &c)| c)
                .sum();
            if bytes > tier.capacity_bytes() {
                return Err(StoreError::OverTier {
                    tier: tier.name().into(),
                    bytes,
                    capacity_bytes: tier.capacity_bytes(),
                });
            }
        }
        let mut order: Vec<usize> = (0..places.len())
            .filter(|&p| capacities_bytes[p] != current(p))
            .collect();
        order.sort_by_key(|&p| capacities_bytes[p] > current(p));
        for p in order {
            let place = &places[p];
            let mut evicted = Vec::new();
            let resized = lock(&place.policy)
                .resize(capacities_bytes[p] - place.pin_share_bytes, &mut evicted);
            debug_assert!(resized, "checked by PolicyKind::resizes");
            place.budgets[0].set_capacity_bytes(capacities_bytes[p]);
            for v in evicted {
                self.evict_victim(v);
            }
        }
        Ok(())
    }

    /// Hands a resident, just demoted `o` to its place's policy when the
    /// policy has room for it without evicting anything (a cold demotion
    /// must not push out warmer cached objects); whether it was kept.
    pub(super) fn cache_demoted(&self, o: ObjectIndex) -> bool {
        if matches!(
            self.state(o),
            ObjectState::Absent | ObjectState::Loading | ObjectState::Demoting
        ) {
            return false;
        }
        let inner = &self.inner;
        let size = inner.loader.size_bytes(o);
        let now = self.tick(o);
        let place = &inner.places[inner.homes.place[o as usize]];
        let mut policy = lock(&place.policy);
        if policy.capacity_bytes() - policy.used_bytes() < size {
            return false;
        }
        let mut evicted = Vec::new();
        let outcome = policy.access(&self.request(o, now), &mut evicted);
        debug_assert!(evicted.is_empty(), "there was room");
        outcome != Outcome::Bypassed
    }
}

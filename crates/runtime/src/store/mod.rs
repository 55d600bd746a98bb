//! The object store (design §7): lifecycle, single flight, leases, budgets.
//!
//! Every object has one home place (a NUMA node's RAM, a GPU) chosen by the
//! plan. Planned residents are pinned: loaded once, charged to the place,
//! never chosen as victims. Every other object is cached at its place under
//! that place's policy (the same `residency_policy` code the simulator
//! replays); a miss the policy declines runs from a transient slot charged
//! to the staging budget and is dropped after its last lease.
//!
//! Lifecycle: `Absent -> Loading -> Ready -> InUse -> Evictable ->
//! (Demoting) -> Absent`. An object is published (Ready) only after the
//! loader has read, validated and prepared all of its bytes; concurrent
//! misses join the one load in flight. A lease pins an object: a victim that
//! is leased is marked and dropped at its last release, and the bytes it
//! holds keep counting against the budget until then, so budgets are never
//! exceeded; a load that cannot get room waits (bounded) and then fails
//! with an error naming the budget, unless the policy evicts the object
//! meanwhile: it then stops waiting and runs from a transient slot.

pub mod budget;
mod flight;
mod lease;
mod miss;
mod pins;
pub mod telemetry;

use crate::sync::{lock, AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};
use budget::{Budget, BudgetError, Reservation};
use flight::{Flight, Leader};
pub use lease::Lease;
use residency_policy::{
    build, Knowledge, ObjectIndex, Policy, PolicyError, PolicyKind, PolicyParams, PolicySetup,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use telemetry::{Counters, Telemetry};

/// The prepared bytes of one object, in whatever memory the loader chose:
/// host memory (an aligned slab that O_DIRECT filled, a plain buffer) or a
/// device buffer.
pub trait ObjectBytes: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, when they are in host memory.
    fn host(&self) -> Option<&[u8]>;
    /// `(device ordinal, device address)`, when they are on a GPU.
    fn device(&self) -> Option<(u32, u64)> {
        None
    }
}

impl ObjectBytes for Vec<u8> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn host(&self) -> Option<&[u8]> {
        Some(self)
    }
}

/// Reads, validates and prepares objects; the store never sees files.
/// Budgets count `size_bytes`; alignment slack of the loader's buffers is
/// not counted (under 8 KiB an object for O_DIRECT).
pub trait Loader: Send + Sync {
    /// Bytes of object `o` once prepared for its tier.
    fn size_bytes(&self, o: ObjectIndex) -> u64;
    /// Reads `o` (exactly `size_bytes(o)` bytes), or says why not. It runs
    /// after the bytes were reserved; a failure leaves nothing published.
    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String>;
}

/// One place objects live in.
#[derive(Debug, Clone)]
pub struct PlaceConfig {
    /// `ram:0`, `gpu:1`, ...
    pub name: String,
    pub capacity_bytes: u64,
    /// The tier budget this place also draws from (`ram`, `gpu`).
    pub tier: String,
    /// Policy of the cached (non-pinned) part of the place.
    pub policy: PolicyKind,
    /// Bytes reserved for pinned objects when pins change while serving
    /// (`Store::repin`): the policy gets the rest. `None`: the pins given at
    /// creation, which then never grow.
    pub pin_share_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub places: Vec<PlaceConfig>,
    /// Capacity per tier name; a tier without an entry is the sum of its places.
    pub tier_capacity_bytes: Vec<(String, u64)>,
    pub staging_bytes: u64,
    /// How long a load waits for budget before failing.
    pub wait: Duration,
    pub params: PolicyParams,
    /// What the places' policies know (priors, miss costs); sizes come from
    /// the loader, and missing miss and hit costs default to 1 s and 0 s.
    pub knowledge: Knowledge,
}

/// Where each object lives and whether the plan pins it there.
#[derive(Debug, Clone)]
pub struct Homes {
    pub place: Vec<usize>,
    pub pinned: Vec<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Budget(#[from] BudgetError),
    #[error("loading object {object} failed: {reason}")]
    Load { object: ObjectIndex, reason: String },
    #[error("object {object} does not exist; the store has {objects} objects")]
    NoSuchObject { object: ObjectIndex, objects: usize },
    #[error("place {place}: {source}")]
    Policy {
        place: String,
        #[source]
        source: PolicyError,
    },
    #[error("{given} capacities for {places} places; give one per place")]
    Capacities { given: usize, places: usize },
    #[error("place {place}: policy `{policy}` cannot change its capacity while serving; give that place {}", PolicyKind::resizing_names())]
    CannotResize { place: String, policy: PolicyKind },
    #[error("the places of tier {tier} would hold {bytes} bytes, more than its {capacity_bytes}; give capacities that sum to at most the tier's")]
    OverTier {
        tier: String,
        bytes: u64,
        capacity_bytes: u64,
    },
    #[error("the pinned objects of {place} need {bytes} bytes, more than its {capacity_bytes}; plan with this place's real capacity")]
    PinsTooLarge {
        place: String,
        bytes: u64,
        capacity_bytes: u64,
    },
}

/// Lifecycle state (design §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectState {
    Absent,
    Loading,
    /// Published, never leased yet.
    Ready,
    /// Published and leased.
    InUse,
    /// Published, used, no lease: a possible victim.
    Evictable,
    /// Chosen as a victim while leased: dropped at its last release.
    Demoting,
}

struct Resident {
    bytes: Box<dyn ObjectBytes>,
    _reservation: Reservation,
    /// For the rare eviction at a last release; cloned once per load so
    /// that a lease touches nothing shared with other objects' leases.
    counters: Arc<Counters>,
}

/// What a finished load hands to the requests that joined it.
#[derive(Clone)]
struct Loaded {
    resident: Arc<Resident>,
    /// Published in the slot (false: a transient slot, shared by the joiners).
    admitted: bool,
}

enum Slot {
    Absent,
    Loading(Arc<Flight>),
    Ready {
        resident: Arc<Resident>,
        leases: u32,
        used: bool,
        evict_on_release: bool,
    },
}

struct Place {
    config: PlaceConfig,
    /// The place's own budget, then its tier's.
    budgets: Vec<Arc<Budget>>,
    /// Bytes of the capacity kept for pinned objects; the policy has the rest.
    pin_share_bytes: u64,
    policy: Mutex<Box<dyn Policy + Send>>,
}

struct Inner {
    loader: Arc<dyn Loader>,
    places: Vec<Place>,
    staging: Arc<Budget>,
    slots: Vec<Arc<Mutex<Slot>>>,
    homes: Homes,
    /// Pinned now (`homes.pinned` at creation, then `repin`'s).
    pinned: Vec<AtomicBool>,
    clock: AtomicU64,
    wait: Duration,
    counters: Arc<Counters>,
}

/// The store; cheap to clone (shared).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// A store over `homes.place.len()` objects. Pinned objects are not
    /// loaded here (see [`Store::acquire`] / [`Store::prefetch`]); their
    /// bytes are reserved out of the policy's share from the start.
    pub fn new(
        loader: Arc<dyn Loader>,
        homes: Homes,
        config: &StoreConfig,
    ) -> Result<Store, StoreError> {
        let objects = homes.place.len();
        let mut tiers: Vec<(String, Arc<Budget>)> = Vec::new();
        for p in &config.places {
            if !tiers.iter().any(|(t, _)| *t == p.tier) {
                let capacity = config
                    .tier_capacity_bytes
                    .iter()
                    .find(|(t, _)| *t == p.tier)
                    .map(|&(_, c)| c)
                    .unwrap_or_else(|| {
                        config
                            .places
                            .iter()
                            .filter(|q| q.tier == p.tier)
                            .map(|q| q.capacity_bytes)
                            .sum()
                    });
                tiers.push((p.tier.clone(), Budget::new(p.tier.clone(), capacity)));
            }
        }
        let mut knowledge = config.knowledge.clone();
        knowledge.sizes_bytes = (0..objects)
            .map(|o| loader.size_bytes(o as ObjectIndex))
            .collect();
        if knowledge.miss_seconds.len() != objects {
            knowledge.miss_seconds = vec![1.0; objects];
        }
        if knowledge.hit_seconds.len() != objects {
            knowledge.hit_seconds = vec![0.0; objects];
        }
        let mut places = Vec::new();
        for (i, p) in config.places.iter().enumerate() {
            let pinned_bytes: u64 = (0..objects)
                .filter(|&o| homes.place[o] == i && homes.pinned[o])
                .map(|o| loader.size_bytes(o as ObjectIndex))
                .sum();
            let share = p
                .pin_share_bytes
                .unwrap_or(pinned_bytes)
                .min(p.capacity_bytes);
            if pinned_bytes > share {
                return Err(StoreError::PinsTooLarge {
                    place: p.name.clone(),
                    bytes: pinned_bytes,
                    capacity_bytes: share,
                });
            }
            // The policy sees only this place's cached objects, in its own
            // share of the capacity.
            let setup = PolicySetup {
                capacity_bytes: p.capacity_bytes - share,
                objects,
                knowledge: knowledge.clone(),
                params: config.params.clone(),
            };
            let policy = build(p.policy, &setup).map_err(|source| StoreError::Policy {
                place: p.name.clone(),
                source,
            })?;
            let tier = tiers.iter().find(|(t, _)| *t == p.tier).unwrap().1.clone();
            places.push(Place {
                config: p.clone(),
                budgets: vec![Budget::new(p.name.clone(), p.capacity_bytes), tier],
                pin_share_bytes: share,
                policy: Mutex::new(policy),
            });
        }
        Ok(Store {
            inner: Arc::new(Inner {
                loader,
                staging: Budget::new("staging", config.staging_bytes),
                slots: (0..objects)
                    .map(|_| Arc::new(Mutex::new(Slot::Absent)))
                    .collect(),
                counters: Arc::new(Counters::new(config.places.len(), objects)),
                places,
                pinned: homes.pinned.iter().map(|&p| AtomicBool::new(p)).collect(),
                homes,
                clock: AtomicU64::new(0),
                wait: config.wait,
            }),
        })
    }

    pub fn objects(&self) -> usize {
        self.inner.slots.len()
    }

    /// Leases `o`, loading it first when absent (joining a load in flight).
    pub fn acquire(&self, o: ObjectIndex) -> Result<Lease, StoreError> {
        let slot_lock = self.slot(o)?;
        let started = Instant::now();
        let mut waited = false;
        loop {
            let mut slot = lock(slot_lock);
            match &mut *slot {
                Slot::Ready { .. } => {
                    return Ok(self.lease_ready(o, slot, waited.then_some(started)));
                }
                Slot::Loading(flight) => {
                    let flight = Arc::clone(flight);
                    drop(slot);
                    self.inner
                        .counters
                        .single_flight_joins
                        .fetch_add(1, Ordering::Relaxed);
                    waited = true;
                    let loaded = flight.wait()?;
                    if !loaded.admitted {
                        return Ok(self.transient_lease(o, loaded.resident, started));
                    }
                    // Published: take the lease under the slot lock (it may
                    // have been evicted meanwhile; then load again).
                }
                Slot::Absent => {
                    let flight = Arc::new(Flight {
                        result: Mutex::new(None),
                        done: Condvar::new(),
                        evict_when_done: AtomicBool::new(false),
                    });
                    *slot = Slot::Loading(Arc::clone(&flight));
                    drop(slot);
                    let leader = Leader {
                        store: self,
                        object: o,
                        flight: Some(flight),
                    };
                    let now = self.tick(o);
                    let result = self.load(o, now, leader.flight());
                    leader.finish(result.clone());
                    let loaded = result?;
                    if !loaded.admitted {
                        return Ok(self.transient_lease(o, loaded.resident, started));
                    }
                    // The leader's own lease was taken at publication.
                    return Ok(self.lease(o, loaded.resident, Some(started)));
                }
            }
        }
    }

    /// Leases `o` only when it is resident now (a hit, counted as one);
    /// `None` when it is absent or loading. Never loads and never waits,
    /// so a caller holding other leases cannot deadlock on it.
    pub fn try_acquire(&self, o: ObjectIndex) -> Result<Option<Lease>, StoreError> {
        let slot = lock(self.slot(o)?);
        Ok(matches!(*slot, Slot::Ready { .. }).then(|| self.lease_ready(o, slot, None)))
    }

    /// Leases `o` when it is resident now, for a copy of its bytes (the
    /// VRAM tier's uploads): not a request, so no hit is counted and the
    /// policy is not told. `None` when it is absent or loading; never
    /// loads, never waits.
    pub fn lease_for_copy(&self, o: ObjectIndex) -> Result<Option<Lease>, StoreError> {
        let mut slot = lock(self.slot(o)?);
        let Slot::Ready {
            resident, leases, ..
        } = &mut *slot
        else {
            return Ok(None);
        };
        *leases += 1;
        Ok(Some(self.published_lease(o, Arc::clone(resident))))
    }

    fn slot(&self, o: ObjectIndex) -> Result<&Arc<Mutex<Slot>>, StoreError> {
        self.inner
            .slots
            .get(o as usize)
            .ok_or(StoreError::NoSuchObject {
                object: o,
                objects: self.inner.slots.len(),
            })
    }

    /// Leases a `Ready` slot; a hit for the policy and the counters unless
    /// the caller waited for the load (then it was counted as a miss).
    fn lease_ready(
        &self,
        o: ObjectIndex,
        mut slot: MutexGuard<'_, Slot>,
        waited: Option<Instant>,
    ) -> Lease {
        let Slot::Ready {
            resident,
            leases,
            used,
            ..
        } = &mut *slot
        else {
            unreachable!("callers pass a Ready slot")
        };
        *leases += 1;
        *used = true;
        let resident = Arc::clone(resident);
        drop(slot);
        let now = self.tick(o);
        if waited.is_none() {
            self.inner.counters.tier_hits[self.inner.homes.place[o as usize]].add(1);
            self.tell_policy_of_hit(o, now);
        }
        self.lease(o, resident, waited)
    }

    /// Loads `o` without keeping a lease (plan residents at start-up,
    /// prefetches); a no-op when it is already there or on its way.
    pub fn prefetch(&self, o: ObjectIndex) -> Result<(), StoreError> {
        if matches!(self.state(o), ObjectState::Absent) {
            drop(self.acquire(o)?);
        }
        Ok(())
    }

    /// Whether `o` is pinned now.
    pub fn is_pinned(&self, o: ObjectIndex) -> bool {
        self.inner.pinned[o as usize].load(Ordering::Relaxed)
    }

    /// Drops `o` now if it is published and not leased (an explicit
    /// eviction, e.g. by re-planning); returns whether it was dropped.
    pub fn evict(&self, o: ObjectIndex) -> bool {
        let inner = &self.inner;
        let mut slot = lock(&inner.slots[o as usize]);
        if !matches!(&*slot, Slot::Ready { leases: 0, .. }) {
            return false;
        }
        *slot = Slot::Absent;
        drop(slot);
        inner.counters.evictions.fetch_add(1, Ordering::Relaxed);
        // The policy must not go on counting bytes the store dropped.
        let place = &inner.places[inner.homes.place[o as usize]];
        lock(&place.policy).remove(o);
        true
    }

    pub fn state(&self, o: ObjectIndex) -> ObjectState {
        match &*lock(&self.inner.slots[o as usize]) {
            Slot::Absent => ObjectState::Absent,
            Slot::Loading(_) => ObjectState::Loading,
            Slot::Ready {
                evict_on_release: true,
                ..
            } => ObjectState::Demoting,
            Slot::Ready { leases, .. } if *leases > 0 => ObjectState::InUse,
            Slot::Ready { used: false, .. } => ObjectState::Ready,
            Slot::Ready { .. } => ObjectState::Evictable,
        }
    }

    /// Counters and budgets now (design §7 telemetry).
    pub fn telemetry(&self) -> Telemetry {
        let inner = &self.inner;
        let mut budgets: Vec<&Arc<Budget>> = inner.places.iter().flat_map(|p| &p.budgets).collect();
        budgets.push(&inner.staging);
        budgets.sort_by(|a, b| a.name().cmp(b.name()));
        budgets.dedup_by(|a, b| a.name() == b.name());
        inner.counters.snapshot(
            inner.places.iter().map(|p| p.config.name.as_str()),
            budgets
                .iter()
                .map(|b| (b.name(), b.capacity_bytes(), b.used_bytes())),
        )
    }
}

#[cfg(test)]
mod tests;

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
pub mod telemetry;

use crate::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};
use budget::{reserve, reserve_unless, Budget, BudgetError, Reservation};
use flight::{Flight, Leader};
pub use lease::Lease;
use residency_policy::{
    build, Knowledge, ObjectIndex, Outcome, Policy, PolicyError, PolicyKind, PolicyParams,
    PolicySetup, Request, NEVER,
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
    fn cache_demoted(&self, o: ObjectIndex) -> bool {
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

    /// Advances the clock and records the reuse distance of `o`.
    fn tick(&self, o: ObjectIndex) -> u64 {
        let now = self.inner.clock.fetch_add(1, Ordering::Relaxed);
        self.inner.counters.record_reuse(o, now);
        now
    }

    fn tell_policy_of_hit(&self, o: ObjectIndex, now: u64) {
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

    fn request(&self, o: ObjectIndex, now: u64) -> Request {
        Request {
            object: o,
            size_bytes: self.inner.loader.size_bytes(o),
            time: now,
            next_access: NEVER,
        }
    }

    /// The leader of a miss: admission, victims, budget, read, publication.
    fn load(&self, o: ObjectIndex, now: u64, flight: &Flight) -> Result<Loaded, StoreError> {
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
    fn evict_victim(&self, v: ObjectIndex) {
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
    fn lease(&self, o: ObjectIndex, resident: Arc<Resident>, waited: Option<Instant>) -> Lease {
        let counters = &self.inner.counters;
        if let Some(started) = waited {
            counters.add_seconds(&counters.felt_wait_nanos, started.elapsed());
        }
        counters.logical_bytes.add(resident.bytes.len() as u64);
        self.published_lease(o, resident)
    }

    /// A lease on `o`'s published slot, whose lease count the caller has
    /// already raised.
    fn published_lease(&self, o: ObjectIndex, resident: Arc<Resident>) -> Lease {
        Lease {
            slot: Arc::clone(&self.inner.slots[o as usize]),
            object: o,
            resident,
            published: true,
        }
    }

    /// A lease on a transient slot: nothing to release but the bytes.
    fn transient_lease(&self, o: ObjectIndex, resident: Arc<Resident>, started: Instant) -> Lease {
        let mut lease = self.lease(o, resident, Some(started));
        lease.published = false;
        lease
    }
}

#[cfg(test)]
mod tests;

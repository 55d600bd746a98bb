//! residency-policy: the cache policies the object store runs (design §6;
//! LRU to W-TinyLFU, the cost-aware admission and the plan's pins), one
//! trait for all of them, and the online per-layer budget allocator
//! (`online`) with the two pieces it prices budgets with: LRU miss curves
//! from stack distances (`stack`) and water-filling across layers
//! (`budget`). The replay simulator (`residency-sim`) runs the same code,
//! so what it measures is what serves; nothing here reads a trace.
//!
//! Objects are dense indices (`0..objects`): the simulator maps libCacheSim
//! ids and MoE `(layer, expert)` pairs to them once, so a policy works on
//! arrays, never on hash maps. Semantics are libCacheSim's, byte-weighted:
//! an object larger than the capacity is not inserted and evicts nothing;
//! otherwise the policy evicts while `used + size > capacity`, then inserts;
//! no per-object overhead. Admission policies may decline a miss: the
//! request then runs from a transient slot ([`Outcome::Bypassed`]).

/// The `Policy` accessors of a policy whose residents are one field
/// (`residents` unless named: a `heap::ScoredResidents`, a
/// `recency::SizedList`, SLRU's segments); defined before the modules, so
/// in scope in each.
macro_rules! resident_accessors {
    () => {
        resident_accessors!(residents);
    };
    ($field:ident) => {
        fn contains(&self, object: ObjectIndex) -> bool {
            self.$field.contains(object)
        }

        fn used_bytes(&self) -> u64 {
            self.$field.used_bytes()
        }

        fn capacity_bytes(&self) -> u64 {
            self.$field.capacity_bytes()
        }
    };
}

pub mod budget;
pub mod online;
pub mod stack;

mod admission;
mod arc;
mod belady;
mod clock;
pub mod counts;
mod heap;
mod lfru;
mod lfu;
pub mod lru;
mod pinned_lru;
mod recency;
mod s3fifo;
mod sieve;
mod slru;
mod static_plan;
mod wtinylfu;

pub use static_plan::knapsack;

/// Dense index of a cacheable object.
pub type ObjectIndex = u32;

/// `Request::next_access` of an object that is never requested again.
pub const NEVER: u64 = u64::MAX;

/// One request, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub object: ObjectIndex,
    pub size_bytes: u64,
    /// Position of this request in the replay (0-based): the policies' clock.
    pub time: u64,
    /// Position of the next request for the same object, or [`NEVER`]. Only
    /// the offline bound (`belady`) looks at it
    /// ([`Policy::reads_next_access`]); the others may be given [`NEVER`].
    pub next_access: u64,
}

/// What serving a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The object was resident.
    Hit,
    /// A miss; the object is now resident (after the evictions reported).
    Admitted,
    /// A miss served from a transient slot: not inserted, nothing evicted.
    /// Objects larger than the capacity always end here.
    Bypassed,
}

/// A cache policy over dense objects with a byte capacity fixed at creation.
pub trait Policy {
    /// Serves one request. Objects evicted to make room are pushed to
    /// `evicted` (which the caller clears); weights are discarded, never
    /// written back.
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome;
    /// Whether `object` is resident now.
    fn contains(&self, object: ObjectIndex) -> bool;
    /// Bytes of the resident objects; never above the capacity.
    fn used_bytes(&self) -> u64;
    /// The capacity fixed at creation.
    fn capacity_bytes(&self) -> u64;
    /// Forgets a resident the store dropped or took over from outside the
    /// policy (an explicit eviction, a failed load, a re-planned pin): it is no
    /// longer resident and its bytes are free. A no-op for a non-resident.
    ///
    /// Forgetting is not a request and not an eviction by the policy: nothing
    /// is counted, no ghost entry is made, and what the policy learned about
    /// the object (counters, sketches, ghosts of other objects) stays. Each
    /// policy's `remove` says what it keeps. O(1) or O(log n).
    fn remove(&mut self, object: ObjectIndex);
    /// Changes the capacity while serving (per-layer budgets that move,
    /// [`online`]): residents are evicted in the policy's own victim
    /// order, pushed to `evicted`, until they fit the new capacity; a
    /// larger capacity evicts nothing. Returns false, changing nothing, for
    /// a policy that cannot; [`PolicyKind::resizes`] names those that can.
    fn resize(&mut self, _capacity_bytes: u64, _evicted: &mut Vec<ObjectIndex>) -> bool {
        false
    }
    /// Whether `access` reads [`Request::next_access`]. Only the offline
    /// bound does; a replay builds the next-access index for it alone and
    /// gives the others [`NEVER`].
    fn reads_next_access(&self) -> bool {
        false
    }
}

residency_core::named! {
    /// The policies by name (design §6).
    pub enum PolicyKind("policy") {
        Lru = "lru",
        Fifo = "fifo",
        Clock = "clock",
        PinnedLru = "pinned-lru",
        Lfu = "lfu",
        Lfru = "lfru",
        Slru = "slru",
        WTinyLfu = "wtinylfu",
        S3Fifo = "s3fifo",
        Sieve = "sieve",
        Arc = "arc",
        Frequency = "frequency",
        Cost = "cost",
        Belady = "belady",
        Plan = "plan",
    }
}

/// See [`PolicyKind::resizes`].
const RESIZING: [PolicyKind; 6] = [
    PolicyKind::Lru,
    PolicyKind::Fifo,
    PolicyKind::Sieve,
    PolicyKind::S3Fifo,
    PolicyKind::Lfu,
    PolicyKind::Lfru,
];

impl PolicyKind {
    /// Policies that use what was learned on training data
    /// ([`Knowledge::prior_rate`] or [`Knowledge::pinned`]); the held-out
    /// gate trains them on some categories and evaluates on others.
    pub fn learns(self) -> bool {
        matches!(
            self,
            PolicyKind::PinnedLru | PolicyKind::Frequency | PolicyKind::Cost | PolicyKind::Plan
        )
    }

    /// Policies whose capacity can move while serving ([`Policy::resize`]):
    /// those whose residents are one or more FIFO or recency lists, or a
    /// heap of counts, so that shrinking evicts the next victims a miss
    /// would.
    pub fn resizes(self) -> bool {
        RESIZING.contains(&self)
    }

    /// The policies that resize, for messages: "lru, fifo, ... or lfru".
    pub fn resizing_names() -> String {
        let names: Vec<&str> = RESIZING.iter().map(|p| p.name()).collect();
        let (last, rest) = names.split_last().expect("some policies resize");
        format!("{} or {last}", rest.join(", "))
    }

    /// Policies whose decisions depend on the miss costs, so that felt wait
    /// under other miss costs needs a new replay (not just a re-weighting).
    pub fn uses_miss_costs(self) -> bool {
        matches!(self, PolicyKind::Cost | PolicyKind::Plan)
    }
}

/// What the cost-aware and learning policies know about the objects, all
/// indexed by [`ObjectIndex`].
#[derive(Debug, Clone, Default)]
pub struct Knowledge {
    /// Felt seconds one miss of the object costs (design §6 `m_l` of its layer).
    pub miss_seconds: Vec<f64>,
    /// Seconds one hit costs in this cache's tier (0 when reading it is free).
    pub hit_seconds: Vec<f64>,
    /// Requests per tick learned from training data; empty when nothing was
    /// learned (the policy then learns online only).
    pub prior_rate: Vec<f64>,
    /// Static residents: the plan of `plan`, the pins of `pinned-lru`. Their
    /// bytes never exceed the capacity (the caller chooses them so).
    pub pinned: Vec<ObjectIndex>,
    /// Size of every object, known before it is requested (the pins of
    /// `plan` and `pinned-lru` are charged from the start); empty when unknown.
    pub sizes_bytes: Vec<u64>,
}

/// Tunables; the defaults are the constants design §6 names.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyParams {
    /// `lfu`, `lfru`, `frequency`, `cost`: decayed counters are halved every
    /// this many ticks (requests).
    pub halve_every_ticks: u64,
    /// `frequency`: admit only if `f_new > admission_ratio * f_victim`.
    pub admission_ratio: f64,
    /// `cost`: the horizon `H` (ticks) over which a move is paid back.
    pub horizon_ticks: f64,
    /// `cost`: seconds per byte of moving an object in after a demand miss.
    pub move_seconds_per_byte: f64,
    /// `cost`: utility (seconds per tick per byte) a candidate must exceed
    /// its victims' by.
    pub hysteresis: f64,
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams {
            halve_every_ticks: 100_000,
            admission_ratio: 1.10,
            horizon_ticks: 100_000.0,
            move_seconds_per_byte: 0.0,
            hysteresis: 0.0,
        }
    }
}

/// A policy as [`build`] makes it, owned and sendable to another thread.
pub type BoxedPolicy = Box<dyn Policy + Send>;

/// Everything a policy is built from.
#[derive(Debug, Clone)]
pub struct PolicySetup {
    pub capacity_bytes: u64,
    /// Objects are `0..objects`.
    pub objects: usize,
    pub knowledge: Knowledge,
    pub params: PolicyParams,
}

/// What to do with a policy [`build_with`] makes, given its own type: a
/// loop over many requests (the simulator's replay) is then compiled for
/// each policy and calls `access` and `contains` inlined, not through a
/// vtable once or twice a request.
pub trait WithPolicy {
    type Output;
    fn with<P: Policy + Send + 'static>(self, policy: P) -> Self::Output;
}

/// [`build`]'s [`WithPolicy`]: the policy boxed.
struct Boxed;

impl WithPolicy for Boxed {
    type Output = BoxedPolicy;

    fn with<P: Policy + Send + 'static>(self, policy: P) -> BoxedPolicy {
        Box::new(policy)
    }
}

/// Builds a policy by kind. Knowledge a policy needs but the setup lacks is
/// the caller's error; it is checked here so no policy panics later.
pub fn build(kind: PolicyKind, setup: &PolicySetup) -> Result<BoxedPolicy, PolicyError> {
    build_with(kind, setup, Boxed)
}

/// Builds a policy by kind, as [`build`] does, and hands it to `with`.
pub fn build_with<W: WithPolicy>(
    kind: PolicyKind,
    setup: &PolicySetup,
    with: W,
) -> Result<W::Output, PolicyError> {
    let need = |what: &'static str, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(PolicyError::Missing { policy: kind, what })
        }
    };
    let n = setup.objects;
    let k = &setup.knowledge;
    if kind == PolicyKind::Cost {
        need("a miss cost per object", k.miss_seconds.len() == n)?;
        need("a hit cost per object", k.hit_seconds.len() == n)?;
    }
    if !k.prior_rate.is_empty() {
        need("a prior rate per object", k.prior_rate.len() == n)?;
    }
    need(
        "pinned objects inside 0..objects",
        k.pinned.iter().all(|&o| (o as usize) < n),
    )?;
    if matches!(kind, PolicyKind::PinnedLru | PolicyKind::Plan) {
        need("a size per object", k.sizes_bytes.len() == n)?;
        let (_, pinned_bytes) = static_plan::pinned_set(setup);
        need(
            "pinned objects whose bytes fit the capacity",
            pinned_bytes <= setup.capacity_bytes,
        )?;
    }
    if kind == PolicyKind::Cost {
        need("a positive horizon_ticks", setup.params.horizon_ticks > 0.0)?;
    }
    Ok(match kind {
        PolicyKind::Lru => with.with(lru::Lru::new(setup, true)),
        PolicyKind::Fifo => with.with(lru::Lru::new(setup, false)),
        PolicyKind::Clock => with.with(clock::Clock::new(setup)),
        PolicyKind::PinnedLru => with.with(pinned_lru::PinnedLru::new(setup)),
        PolicyKind::Lfu => with.with(lfu::Lfu::new(setup)),
        PolicyKind::Lfru => with.with(lfru::Lfru::new(setup)),
        PolicyKind::Slru => with.with(slru::Slru::new(setup)),
        PolicyKind::WTinyLfu => with.with(wtinylfu::WTinyLfu::new(setup)),
        PolicyKind::S3Fifo => with.with(s3fifo::S3Fifo::new(setup)),
        PolicyKind::Sieve => with.with(sieve::Sieve::new(setup)),
        PolicyKind::Arc => with.with(arc::Arc::new(setup)),
        PolicyKind::Frequency => with.with(admission::Admission::frequency(setup)),
        PolicyKind::Cost => with.with(admission::Admission::cost(setup)),
        PolicyKind::Belady => with.with(belady::Belady::new(setup)),
        PolicyKind::Plan => with.with(static_plan::StaticPlan::new(setup)),
    })
}

/// A policy that cannot be built from the setup given.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("policy `{policy}` needs {what}; give it (or choose another policy)")]
    Missing {
        policy: PolicyKind,
        what: &'static str,
    },
}

#[cfg(test)]
pub(crate) mod testing;

//! Replays a stream through one policy and counts what design §6 asks for:
//! misses and miss bytes (libCacheSim's `n_miss`, `n_miss_byte`), felt wait
//! per layer, hits on seeded versus admitted objects, admissions, evictions.
//!
//! Felt wait is counted per leased group (one token's requests of one
//! layer, `Stream::leased_group_end`), as a serving store waits: it starts
//! the group's reads, which the drive serves `reads_at_once` at a time, so
//! they land in waves, while its compute thread multiplies the hits, then
//! each miss once it has landed. The group waits for a wave what the reads
//! up to it take beyond the compute before it (the hits', and the earlier
//! waves'), at the worst wave ([`FeltCosts`]). Without compute costs every
//! miss is felt in full.
//!
//! Paired arms start from the same state: cold, or seeded with the same
//! residents. Seeding feeds the seed objects through the policy itself
//! before counting starts, so every policy builds its own state for them.

use super::lru_parts;
use super::stream::Stream;
use residency_policy::online::OnlineAllocator;
use residency_policy::{
    build_with, BoxedPolicy, ObjectIndex, Outcome, Policy, PolicyError, PolicyKind, PolicySetup,
    Request, WithPolicy, NEVER,
};

/// Counts of one replay. Seeding requests are not counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayStats {
    pub requests: u64,
    /// Bytes of all requests (hits and misses).
    pub requested_bytes: u64,
    pub misses: u64,
    pub miss_bytes: u64,
    /// Hits on objects resident since seeding.
    pub hits_seeded: u64,
    /// Hits on objects admitted after a demand miss.
    pub hits_admitted: u64,
    pub admissions: u64,
    pub admitted_bytes: u64,
    /// Misses served from a transient slot (not admitted).
    pub bypasses: u64,
    pub evictions: u64,
    /// Seed objects resident when counting started (start-up residents).
    pub seeded_bytes: u64,
    pub misses_by_layer: Vec<u64>,
    /// Felt wait per layer: over its groups, what their misses' reads take
    /// beyond their hits' compute (see [`FeltCosts`]).
    pub felt_wait_seconds_by_layer: Vec<f64>,
}

/// What felt wait counts, per object of the stream: `miss_seconds[o]`,
/// reading `o` on a miss, and `hit_compute_seconds[o]`, computing `o`,
/// during which the same group's reads go on; the drive serves
/// `reads_at_once` of them at a time (its `read_concurrency`). Empty
/// `hit_compute_seconds`: nothing is hidden (a miss cost calibrated from an
/// engine's felt wait already has the overlap in it).
#[derive(Debug, Clone, Copy)]
pub struct FeltCosts<'a> {
    pub miss_seconds: &'a [f64],
    pub hit_compute_seconds: &'a [f64],
    pub reads_at_once: u32,
}

impl<'a> FeltCosts<'a> {
    /// Every miss felt in full.
    pub fn in_full(miss_seconds: &'a [f64]) -> FeltCosts<'a> {
        FeltCosts {
            miss_seconds,
            hit_compute_seconds: &[],
            reads_at_once: 1,
        }
    }
}

/// One group's wait so far: the hits come first in a group (see
/// `leased_order`), so their compute is all known when the misses come.
/// The drive serves `wave` reads at a time, sharing its rate, so the misses
/// land in waves of that many, each when the reads up to its end are done.
/// Without compute costs (`hit_compute_seconds` empty) nothing overlaps
/// and every miss's read is felt in full.
#[derive(Default)]
struct GroupWait<'a> {
    hit_compute_seconds: &'a [f64],
    wave: u32,
    layer: u32,
    /// Compute before the next wave's first miss can start: the hits',
    /// then each landed miss's.
    computed_seconds: f64,
    /// Reads of the landed waves.
    reads_seconds: f64,
    /// The wave not landed yet: its misses, reads and compute.
    pending: u32,
    pending_reads_seconds: f64,
    pending_compute_seconds: f64,
    /// The longest the compute thread has waited for a wave so far (every
    /// read, without compute costs).
    waited_seconds: f64,
}

impl<'a> GroupWait<'a> {
    fn new(costs: FeltCosts<'a>) -> GroupWait<'a> {
        GroupWait {
            hit_compute_seconds: costs.hit_compute_seconds,
            wave: costs.reads_at_once.max(1),
            ..GroupWait::default()
        }
    }

    /// A hit of `o`, computed while the group's reads go on.
    #[inline(always)]
    fn hit(&mut self, o: ObjectIndex) {
        if let Some(&seconds) = self.hit_compute_seconds.get(o as usize) {
            self.computed_seconds += seconds;
        }
    }

    /// A miss of `o` in `layer`, reading for `read_seconds`.
    #[inline(always)]
    fn miss(&mut self, o: ObjectIndex, layer: u32, read_seconds: f64) {
        self.layer = layer;
        let Some(&compute_seconds) = self.hit_compute_seconds.get(o as usize) else {
            self.waited_seconds += read_seconds;
            return;
        };
        self.pending += 1;
        self.pending_reads_seconds += read_seconds;
        self.pending_compute_seconds += compute_seconds;
        if self.pending == self.wave {
            self.land();
        }
    }

    /// The pending wave lands: its first miss waits for every read so far
    /// beyond the compute before it.
    #[inline(always)]
    fn land(&mut self) {
        self.reads_seconds += self.pending_reads_seconds;
        let wait = self.reads_seconds - self.computed_seconds;
        self.waited_seconds = self.waited_seconds.max(wait);
        self.computed_seconds += self.pending_compute_seconds;
        self.pending = 0;
        self.pending_reads_seconds = 0.0;
        self.pending_compute_seconds = 0.0;
    }

    /// Adds the group's wait to `stats` and starts the next group: the
    /// waits before a wave overlap the later ones, so the worst is the
    /// group's.
    #[inline(always)]
    fn close(&mut self, stats: &mut ReplayStats) {
        if self.pending > 0 {
            self.land();
        }
        if self.waited_seconds > 0.0 {
            stats.felt_wait_seconds_by_layer[self.layer as usize] += self.waited_seconds;
        }
        *self = GroupWait {
            hit_compute_seconds: self.hit_compute_seconds,
            wave: self.wave,
            ..GroupWait::default()
        };
    }
}

impl ReplayStats {
    pub fn felt_wait_seconds(&self) -> f64 {
        self.felt_wait_seconds_by_layer.iter().sum()
    }

    /// Felt wait with layer `l`'s miss cost scaled by `scale[l]`.
    pub fn felt_wait_scaled(&self, scale: &[f64]) -> f64 {
        self.felt_wait_seconds_by_layer
            .iter()
            .zip(scale)
            .map(|(f, s)| f * s)
            .sum()
    }

    /// Adds another replay's counts (per-layer caches sum to the whole).
    pub fn add(&mut self, other: &ReplayStats) {
        self.requests += other.requests;
        self.requested_bytes += other.requested_bytes;
        self.misses += other.misses;
        self.miss_bytes += other.miss_bytes;
        self.hits_seeded += other.hits_seeded;
        self.hits_admitted += other.hits_admitted;
        self.admissions += other.admissions;
        self.admitted_bytes += other.admitted_bytes;
        self.bypasses += other.bypasses;
        self.evictions += other.evictions;
        self.seeded_bytes += other.seeded_bytes;
        add_vec(&mut self.misses_by_layer, &other.misses_by_layer);
        add_vec(
            &mut self.felt_wait_seconds_by_layer,
            &other.felt_wait_seconds_by_layer,
        );
    }
}

impl ReplayStats {
    /// Counts `request` (its object's layer and miss cost in `misses`)
    /// that ended in `outcome` after `evicted` left, its felt wait in its
    /// group's `wait`; `seeded[o]`: whether `o`
    /// is resident since seeding, `seeded` empty when nothing was seeded
    /// (a cold replay then reads and clears no flag: one cache line less a
    /// request). Inlined by force: it runs once a
    /// request, and left to itself the compiler kept it out of line (a
    /// call of six arguments a request, an eighth of a replay, `perf`).
    #[inline(always)]
    fn tally(
        &mut self,
        seeded: &mut [bool],
        evicted: &[ObjectIndex],
        request: &Request,
        misses: &[MissRecord],
        wait: &mut GroupWait,
        outcome: Outcome,
    ) {
        let (o, size) = (request.object, request.size_bytes);
        if !seeded.is_empty() {
            for &v in evicted {
                seeded[v as usize] = false;
            }
        }
        self.evictions += evicted.len() as u64;
        if outcome == Outcome::Hit {
            wait.hit(o);
        }
        match outcome {
            Outcome::Hit if !seeded.is_empty() && seeded[o as usize] => self.hits_seeded += 1,
            Outcome::Hit => self.hits_admitted += 1,
            miss => {
                let MissRecord {
                    miss_seconds,
                    layer,
                } = misses[o as usize];
                self.misses += 1;
                self.miss_bytes += size;
                self.misses_by_layer[layer as usize] += 1;
                wait.miss(o, layer, miss_seconds);
                if miss == Outcome::Admitted {
                    self.admissions += 1;
                    self.admitted_bytes += size;
                } else {
                    self.bypasses += 1;
                }
            }
        }
    }
}

fn add_vec<T: Copy + Default + std::ops::AddAssign>(a: &mut Vec<T>, b: &[T]) {
    if a.len() < b.len() {
        a.resize(b.len(), T::default());
    }
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

impl ReplayStats {
    /// Nothing counted yet, over `layers` layers.
    fn of_layers(layers: usize) -> ReplayStats {
        ReplayStats {
            misses_by_layer: vec![0; layers],
            felt_wait_seconds_by_layer: vec![0.0; layers],
            ..Default::default()
        }
    }
}

/// Builds a `kind` policy from `setup` and replays `stream` through it:
/// [`replay`] compiled for that policy (`residency_policy::build_with`),
/// so that the loop calls `access` and `contains` directly, inlined,
/// instead of through the vtable once or twice a request. A cold LRU over
/// a long stream of one-request groups runs in parts side by side instead
/// (`lru_parts`, exact).
pub fn replay_kind(
    kind: PolicyKind,
    setup: &PolicySetup,
    stream: &Stream,
    seeds: &[ObjectIndex],
    costs: FeltCosts,
) -> Result<ReplayStats, PolicyError> {
    build_with(
        kind,
        setup,
        Replay {
            kind,
            stream,
            seeds,
            costs,
        },
    )
}

/// [`replay_kind`]'s replay of the policy built.
struct Replay<'a> {
    kind: PolicyKind,
    stream: &'a Stream,
    seeds: &'a [ObjectIndex],
    costs: FeltCosts<'a>,
}

impl WithPolicy for Replay<'_> {
    type Output = ReplayStats;

    fn with<P: Policy + Send + 'static>(self, mut policy: P) -> ReplayStats {
        let cold = self.kind == PolicyKind::Lru && self.seeds.is_empty();
        if cold && self.stream.requests.len() >= lru_parts::MIN_REQUESTS {
            let capacity_bytes = policy.capacity_bytes();
            if let Some((stats, _)) =
                lru_parts::replay_lru(self.stream, capacity_bytes, self.costs, lru_parts::PARTS)
            {
                return stats;
            }
        }
        replay(&mut policy, self.stream, self.seeds, self.costs)
    }
}

/// Replays `stream` through `policy` after seeding it with `seeds`, felt
/// wait counted with `costs`. Generic so that [`replay_kind`] compiles it
/// for each policy.
pub fn replay<P: Policy + ?Sized>(
    policy: &mut P,
    stream: &Stream,
    seeds: &[ObjectIndex],
    costs: FeltCosts,
) -> ReplayStats {
    replay_range(policy, stream, 0..stream.requests.len(), seeds, costs)
}

/// [`replay`] of the requests in `range` only (whole groups: it must start
/// and end at group boundaries), counted as if the stream held no others.
pub(crate) fn replay_range<P: Policy + ?Sized>(
    policy: &mut P,
    stream: &Stream,
    range: std::ops::Range<usize>,
    seeds: &[ObjectIndex],
    costs: FeltCosts,
) -> ReplayStats {
    let layers = stream.layers();
    let mut stats = ReplayStats::of_layers(layers);
    let mut evicted = Vec::new();
    let mut seeded = seed_flags(stream, !seeds.is_empty());
    let offset = seeds.len() as u64;
    if !seeds.is_empty() {
        let first = first_accesses(stream);
        for (t, &o) in seeds.iter().enumerate() {
            let next = first[o as usize];
            let request = Request {
                object: o,
                size_bytes: stream.sizes_bytes[o as usize],
                time: t as u64,
                next_access: if next == NEVER { NEVER } else { next + offset },
            };
            policy.access(&request, &mut evicted);
        }
        for &o in seeds {
            if policy.contains(o) && !seeded[o as usize] {
                seeded[o as usize] = true;
                stats.seeded_bytes += stream.sizes_bytes[o as usize];
            }
        }
    }
    // Building the next-access index costs more than an LRU replay; only
    // the policies that read it pay for it, the others see NEVER.
    let next_access = policy.reads_next_access().then(|| stream.next_access());
    let misses = MissRecord::all(stream, costs.miss_seconds);
    let mut wait = GroupWait::new(costs);
    let mut order = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let end = stream.leased_group_end(start);
        let group: &[usize] = if end == start + 1 {
            // Nothing to reorder (every request of a generic trace).
            std::slice::from_ref(&start)
        } else {
            leased_order(&*policy, stream, start..end, |o| o, &mut order);
            &order
        };
        for &i in group {
            let o = stream.requests[i];
            let next = next_access.map_or(NEVER, |n| n[i]);
            let size_bytes = stream.sizes_bytes[o as usize];
            stats.requested_bytes += size_bytes;
            let request = Request {
                object: o,
                size_bytes,
                time: i as u64 + offset,
                next_access: if next == NEVER { NEVER } else { next + offset },
            };
            evicted.clear();
            let outcome = policy.access(&request, &mut evicted);
            stats.tally(&mut seeded, &evicted, &request, &misses, &mut wait, outcome);
        }
        wait.close(&mut stats);
        start = end;
    }
    stats.requests = range.len() as u64;
    stats
}

/// What a miss reads of its object, in one record: the stream keeps layers
/// and miss costs in arrays of their own, and with a few thousand objects
/// they outgrow L1, so a miss read two more cache lines than it needs,
/// each a wait (most of the loop's time, `perf`). Hits read neither.
#[derive(Clone, Copy)]
struct MissRecord {
    miss_seconds: f64,
    layer: u32,
}

impl MissRecord {
    /// By object of `stream`; `miss_seconds[o]` is what a miss of `o` costs.
    fn all(stream: &Stream, miss_seconds: &[f64]) -> Vec<MissRecord> {
        stream
            .layer_of
            .iter()
            .zip(miss_seconds)
            .map(|(&layer, &miss_seconds)| MissRecord {
                miss_seconds,
                layer,
            })
            .collect()
    }
}

/// The requests `group` (one token's of one layer, see
/// `Stream::leased_group_end`) in the order a serving store sees them:
/// those `policy` holds first (leased without loading), then the misses,
/// each part in the trace's order. A miss then never evicts an expert the
/// same token asks for later, as it would one request at a time. `local`
/// maps a stream object to the policy's numbering.
fn leased_order<P: Policy + ?Sized>(
    policy: &P,
    stream: &Stream,
    group: std::ops::Range<usize>,
    local: impl Fn(ObjectIndex) -> ObjectIndex,
    order: &mut Vec<usize>,
) {
    order.clear();
    let held = |i: &usize| policy.contains(local(stream.requests[*i]));
    order.extend(group.clone().filter(held));
    order.extend(group.filter(|i| !held(i)));
}

/// What a replay with online per-layer budgets did.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineReplay {
    pub stats: ReplayStats,
    /// Bytes of each layer's cache at the end.
    pub capacities_bytes: Vec<u64>,
    /// Passes that moved budgets, and the bytes of the new slots.
    pub moves: u64,
    pub moved_bytes: u64,
}

/// Replays `stream` through one cache per layer (`policies[l]`, over the
/// layer's own objects numbered from 0, at the allocator's capacities)
/// while `allocator` re-allocates their budgets between tokens: every
/// shrink before any grow, so the capacities never sum above the budget.
/// `seeds[l]` (local indices) are fed through layer `l`'s policy before
/// counting starts; felt wait is counted with `costs`. `observe` sees the caches after every request and every move
/// (tests check the budget there). Tokens are the stream's
/// (`Stream::token_of`).
pub fn replay_online(
    policies: &mut [BoxedPolicy],
    stream: &Stream,
    seeds: &[Vec<ObjectIndex>],
    costs: FeltCosts,
    allocator: &mut OnlineAllocator,
    observe: &mut dyn FnMut(&[BoxedPolicy]),
) -> OnlineReplay {
    let layers = stream.layers();
    let mut stats = ReplayStats::of_layers(layers);
    let mut evicted = Vec::new();
    let mut seeded = seed_flags(stream, seeds.iter().any(|s| !s.is_empty()));
    let mut clock = 0u64;
    for (l, layer_seeds) in seeds.iter().enumerate() {
        let start = stream.layer_start[l];
        for &o in layer_seeds {
            let request = Request {
                object: o,
                size_bytes: stream.sizes_bytes[(start + o) as usize],
                time: clock,
                next_access: NEVER,
            };
            clock += 1;
            policies[l].access(&request, &mut evicted);
        }
        for &o in layer_seeds {
            let g = (start + o) as usize;
            if policies[l].contains(o) && !seeded[g] {
                seeded[g] = true;
                stats.seeded_bytes += stream.sizes_bytes[g];
            }
        }
    }
    let misses = MissRecord::all(stream, costs.miss_seconds);
    let mut wait = GroupWait::new(costs);
    let (mut moves, mut moved_bytes) = (0, 0);
    let mut order = Vec::new();
    let mut start = 0;
    while start < stream.requests.len() {
        let end = stream.leased_group_end(start);
        let i = start;
        let token = stream.token_of(i);
        if i > 0 && token > stream.token_of(i - 1) && allocator.due(token) {
            let pass = allocator.pass(token);
            if pass.moved {
                moves += 1;
                moved_bytes += pass.move_bytes;
                let capacities = allocator.capacities_bytes();
                let mut order: Vec<usize> = (0..layers).collect();
                // Shrinks first: their bytes are free before a grow uses them.
                order.sort_by_key(|&l| capacities[l] > policies[l].capacity_bytes());
                for l in order {
                    evicted.clear();
                    let resized = policies[l].resize(capacities[l], &mut evicted);
                    debug_assert!(resized, "the caller built resizable policies");
                    let start = stream.layer_start[l];
                    if !seeded.is_empty() {
                        for &v in &evicted {
                            seeded[(start + v) as usize] = false;
                        }
                    }
                    stats.evictions += evicted.len() as u64;
                    observe(policies);
                }
            }
        }
        let l = stream.layer_of[stream.requests[start] as usize] as usize;
        let first = stream.layer_start[l];
        leased_order(&*policies[l], stream, start..end, |o| o - first, &mut order);
        start = end;
        for &i in &order {
            let o = stream.requests[i];
            let local = o - stream.layer_start[l];
            let size = stream.sizes_bytes[o as usize];
            stats.requested_bytes += size;
            let request = Request {
                object: local,
                size_bytes: size,
                time: clock,
                next_access: NEVER,
            };
            clock += 1;
            evicted.clear();
            let outcome = policies[l].access(&request, &mut evicted);
            // Seeded flags are per stream object: make the evicted global.
            let start = stream.layer_start[l];
            evicted.iter_mut().for_each(|v| *v += start);
            let global = Request {
                object: o,
                ..request
            };
            stats.tally(&mut seeded, &evicted, &global, &misses, &mut wait, outcome);
            allocator.record(l, local);
            observe(policies);
        }
        wait.close(&mut stats);
    }
    stats.requests = stream.requests.len() as u64;
    OnlineReplay {
        stats,
        capacities_bytes: policies.iter().map(|p| p.capacity_bytes()).collect(),
        moves,
        moved_bytes,
    }
}

/// Whether each object of `stream` is resident since seeding, all false:
/// empty where nothing is seeded (see `ReplayStats::tally`).
fn seed_flags(stream: &Stream, seeding: bool) -> Vec<bool> {
    if seeding {
        vec![false; stream.objects()]
    } else {
        Vec::new()
    }
}

/// Index of each object's first request, or NEVER.
fn first_accesses(stream: &Stream) -> Vec<u64> {
    let mut first = vec![NEVER; stream.objects()];
    for (i, &o) in stream.requests.iter().enumerate().rev() {
        first[o as usize] = i as u64;
    }
    first
}

#[cfg(test)]
mod tests;

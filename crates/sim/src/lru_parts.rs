//! A cold LRU replay of a long stream whose every request is its own group
//! (a generic trace, such as libCacheSim's), cut into parts replayed side
//! by side, with the counts of one pass.
//!
//! Why the parts can start empty: LRU's residents are the longest prefix
//! of its recency stack (every object admitted so far, newest first) whose
//! bytes fit, because it only ever evicts from the stack's bottom. So a
//! request hits exactly when its object's bytes, plus those of the
//! distinct objects asked for since its last request, fit. For a request
//! whose object was already asked for in the same part, all of those lie in
//! the part: a replay of the part alone, from empty, gets it right. Only
//! each object's first request in a part depends on what came before, and
//! for it the stack at the part's start says: it hits when the bytes of the
//! part's objects before it, of the objects above it in that stack that
//! the part has not asked for yet, and its own, fit. Those first requests
//! (at most one an object a part) are what this module settles in order,
//! after the parts ran.
//!
//! Counts are sums over the parts, so they are the one pass's; felt wait
//! is a sum of floats in another order, equal to rounding. Objects larger
//! than the cache are never admitted, so they are in no stack and every
//! request of one is a bypass, in a part as in one pass.

use super::replay::{FeltCosts, ReplayStats};
use super::stream::Stream;
use rayon::prelude::*;
use residency_policy::lru::Lru;
use residency_policy::stack::Fenwick;
use residency_policy::{
    Knowledge, ObjectIndex, Outcome, Policy, PolicyParams, PolicySetup, Request, NEVER,
};

/// Parts a replay is cut into, whatever the threads: the parts' felt wait
/// is summed in part order, so the result does not depend on the machine.
pub const PARTS: usize = 8;
/// Shorter streams are replayed in one pass: the parts would save less
/// than their setup costs.
pub const MIN_REQUESTS: usize = 1 << 20;

/// What one part's replay from empty left: its counts, its objects in the
/// order of their first requests, and its residents, newest first.
struct Part {
    stats: ReplayStats,
    firsts: Vec<ObjectIndex>,
    residents: Vec<ObjectIndex>,
}

/// A cold LRU cache of `capacity_bytes` replaying `stream` in `parts`
/// parts: the counts of one pass, and the residents at its end, newest
/// first; `None` where the stream has groups of several requests (a
/// token's experts of a layer are leased together, so their order within
/// a group depends on the cache).
pub fn replay_lru(
    stream: &Stream,
    capacity_bytes: u64,
    costs: FeltCosts,
    parts: usize,
) -> Option<(ReplayStats, Vec<ObjectIndex>)> {
    let setup = PolicySetup {
        capacity_bytes,
        objects: stream.sizes_bytes.len(),
        knowledge: Knowledge::default(),
        params: PolicyParams::default(),
    };
    let n = stream.requests.len();
    if !stream.one_request_a_token() || parts == 0 {
        return None;
    }
    let bounds: Vec<usize> = (0..=parts).map(|k| k * n / parts).collect();
    let runs: Vec<Part> = bounds
        .par_windows(2)
        .enumerate()
        .map(|(k, w)| {
            let mut part = replay_part(stream, w[0]..w[1], &setup, costs);
            // The first part's first requests are first in the stream.
            if k == 0 {
                part.firsts.clear();
            }
            part
        })
        .collect();
    let sizes = &stream.sizes_bytes;
    let mut total = ReplayStats::default();
    let mut stack: Vec<ObjectIndex> = Vec::new();
    for (k, part) in runs.into_iter().enumerate() {
        let mut stats = part.stats;
        if k > 0 {
            settle_firsts(
                stream,
                capacity_bytes,
                costs,
                &stack,
                &part.firsts,
                &mut stats,
            );
        }
        // The stack's fitting prefix after the part: the part's residents,
        // then, where the part evicted nothing (all its objects fit), the
        // earlier ones it did not ask for, while they fit.
        let mut next = part.residents;
        if stats.evictions == 0 {
            let asked: std::collections::HashSet<ObjectIndex> =
                part.firsts.iter().copied().collect();
            let mut used: u64 = next.iter().map(|&o| sizes[o as usize]).sum();
            for &o in stack.iter().filter(|o| !asked.contains(o)) {
                used += sizes[o as usize];
                if used > capacity_bytes {
                    break;
                }
                next.push(o);
            }
        }
        stack = next;
        total.add(&stats);
    }
    // Every admission is resident at the end or was evicted once.
    total.evictions = total.admissions - stack.len() as u64;
    Some((total, stack))
}

/// The requests in `range` replayed by LRU from empty, counted as
/// `replay` counts them. Every request is its own group, so a miss is felt
/// in full (nothing of its group computes beside it) whatever the compute
/// costs: the loop only counts each object's misses, and prices them once
/// at the end, which keeps the replay's per-request bookkeeping out of the
/// loop. An object's first request in the part is its first miss there.
fn replay_part(
    stream: &Stream,
    range: std::ops::Range<usize>,
    setup: &PolicySetup,
    costs: FeltCosts,
) -> Part {
    let sizes = &stream.sizes_bytes;
    let mut lru = Lru::new(setup, true);
    let mut misses_of = vec![0u32; sizes.len()];
    let mut firsts = Vec::new();
    let mut evicted = Vec::new();
    let mut stats = ReplayStats {
        requests: range.len() as u64,
        misses_by_layer: vec![0; stream.layers()],
        felt_wait_seconds_by_layer: vec![0.0; stream.layers()],
        ..ReplayStats::default()
    };
    for &o in &stream.requests[range] {
        let size_bytes = sizes[o as usize];
        stats.requested_bytes += size_bytes;
        if lru.hit(o) {
            stats.hits_admitted += 1;
            continue;
        }
        let request = Request {
            object: o,
            size_bytes,
            time: 0,
            next_access: NEVER,
        };
        evicted.clear();
        let outcome = lru.access(&request, &mut evicted);
        debug_assert_ne!(outcome, Outcome::Hit, "not resident, so not a hit");
        if outcome == Outcome::Admitted {
            stats.admissions += 1;
            stats.admitted_bytes += size_bytes;
            stats.evictions += evicted.len() as u64;
        }
        let misses = &mut misses_of[o as usize];
        if *misses == 0 {
            firsts.push(o);
        }
        *misses += 1;
    }
    for &o in &firsts {
        let (misses, size) = (u64::from(misses_of[o as usize]), sizes[o as usize]);
        let layer = stream.layer_of[o as usize] as usize;
        stats.misses += misses;
        stats.miss_bytes += misses * size;
        stats.misses_by_layer[layer] += misses;
        if size > setup.capacity_bytes {
            stats.bypasses += misses;
        }
        let read = costs.miss_seconds[o as usize];
        if read > 0.0 {
            stats.felt_wait_seconds_by_layer[layer] += misses as f64 * read;
        }
    }
    Part {
        stats,
        firsts,
        residents: lru.newest_first(),
    }
}

/// Moves to the hits the first requests of a part (each a miss of its
/// replay from empty) that hit after what came before: `stack` is the
/// fitting prefix of the recency stack at the part's start, newest first.
fn settle_firsts(
    stream: &Stream,
    capacity_bytes: u64,
    costs: FeltCosts,
    stack: &[ObjectIndex],
    firsts: &[ObjectIndex],
    stats: &mut ReplayStats,
) {
    let sizes = &stream.sizes_bytes;
    let mut position = vec![u32::MAX; sizes.len()];
    for (j, &o) in stack.iter().enumerate() {
        position[o as usize] = j as u32;
    }
    // Bytes of the stack's objects the part has not asked for yet, by
    // position, summed over prefixes.
    let mut untouched = Fenwick::new(stack.len());
    for (j, &o) in stack.iter().enumerate() {
        untouched.add(j, sizes[o as usize] as i64);
    }
    let mut part_bytes = 0u64;
    for &o in firsts {
        let size = sizes[o as usize];
        if size > capacity_bytes {
            continue;
        }
        let j = position[o as usize];
        if j != u32::MAX {
            let above = untouched.prefix(j as usize) as u64;
            untouched.add(j as usize, -(size as i64));
            if part_bytes + above + size <= capacity_bytes {
                let layer = stream.layer_of[o as usize] as usize;
                stats.misses -= 1;
                stats.miss_bytes -= size;
                stats.admissions -= 1;
                stats.admitted_bytes -= size;
                stats.hits_admitted += 1;
                stats.misses_by_layer[layer] -= 1;
                // A request alone in its group waits its whole read.
                let read = costs.miss_seconds[o as usize];
                if read > 0.0 {
                    stats.felt_wait_seconds_by_layer[layer] -= read;
                }
            }
        }
        part_bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{replay as one_pass, replay_kind};
    use residency_core::rng::Rng;
    use residency_policy::{build, PolicyKind};

    fn setup(capacity_bytes: u64, objects: usize) -> PolicySetup {
        PolicySetup {
            capacity_bytes,
            objects,
            knowledge: Knowledge::default(),
            params: PolicyParams::default(),
        }
    }

    fn lru(capacity_bytes: u64, objects: usize) -> Box<dyn Policy + Send> {
        build(PolicyKind::Lru, &setup(capacity_bytes, objects)).unwrap()
    }

    /// The residents of a one-pass cache, newest first, from the stream's
    /// last requests backwards (the recency order by definition).
    fn residents_by_recency(p: &dyn Policy, stream: &Stream) -> Vec<ObjectIndex> {
        let mut seen = vec![false; stream.sizes_bytes.len()];
        let mut out = Vec::new();
        for &o in stream.requests.iter().rev() {
            if !std::mem::replace(&mut seen[o as usize], true) && p.contains(o) {
                out.push(o);
            }
        }
        out
    }

    fn parts_of(
        stream: &Stream,
        capacity: u64,
        costs: FeltCosts,
        parts: usize,
    ) -> (ReplayStats, Vec<ObjectIndex>) {
        replay_lru(stream, capacity, costs, parts).unwrap()
    }

    #[test]
    fn a_part_s_first_requests_are_settled_on_the_stack_before_it() {
        // Capacity 3 slots; requests 0 1 2 | 0 3 1 4 in two parts. One
        // pass by hand: 0 1 2 miss (stack 2 1 0); 0 hits (0 2 1); 3 misses
        // and evicts 1; 1 misses and evicts 2; 4 misses and evicts 0:
        // 6 misses, 1 hit, 3 evictions, residents 4 1 3 newest first. The
        // second part from empty misses all four; settled on the stack
        // 2 1 0: 0 has the two untouched objects above it, 0 + 2 + 1 = 3
        // fits, a hit; 1 has 2 above it and 0 and 3 asked for before it,
        // 2 + 1 + 1 = 4 does not fit; 3 and 4 are not in the stack.
        let stream = Stream::new(vec![1; 5], vec![0, 5], vec![0, 1, 2, 0, 3, 1, 4], 7);
        let read = [1.0; 5];
        let (stats, residents) = parts_of(&stream, 3, FeltCosts::in_full(&read), 2);
        assert_eq!(
            (stats.misses, stats.hits_admitted, stats.evictions),
            (6, 1, 3)
        );
        assert_eq!(stats.felt_wait_seconds(), 6.0);
        assert_eq!(residents, vec![4, 1, 3]);
    }

    #[test]
    fn parts_count_what_one_pass_counts_at_every_capacity() {
        // 200 objects of 1-10 bytes (two of 40, larger than the smaller
        // caches: always bypassed there), over two layers; 30,000 requests
        // skewed to the low objects. The one pass is the reference.
        let objects = 200;
        let mut rng = Rng(7);
        let mut sizes: Vec<u64> = (0..objects).map(|_| 1 + rng.next_u64() % 10).collect();
        sizes[5] = 40;
        sizes[150] = 40;
        let requests: Vec<ObjectIndex> = (0..30_000)
            .map(|_| {
                let u = rng.unit();
                (u * u * objects as f64) as ObjectIndex
            })
            .collect();
        let n = requests.len() as u64;
        let stream = Stream::new(sizes, vec![0, 100, 200], requests, n);
        let read: Vec<f64> = (0..objects).map(|o| 0.001 * (o % 7) as f64).collect();
        let compute: Vec<f64> = (0..objects).map(|o| 0.0005 * (o % 3) as f64).collect();
        let costs = FeltCosts {
            miss_seconds: &read,
            hit_compute_seconds: &compute,
            reads_at_once: 2,
        };
        for capacity in [10, 35, 120, 400, 2000] {
            let mut reference = lru(capacity, objects);
            let want = one_pass(&mut *reference, &stream, &[], costs);
            for parts in [2, 3, 8] {
                let (got, residents) = parts_of(&stream, capacity, costs, parts);
                let counts = |s: &ReplayStats| {
                    (
                        s.requests,
                        s.requested_bytes,
                        s.misses,
                        s.miss_bytes,
                        s.hits_admitted,
                        s.admissions,
                        s.admitted_bytes,
                        s.bypasses,
                        s.evictions,
                        s.misses_by_layer.clone(),
                    )
                };
                assert_eq!(
                    counts(&got),
                    counts(&want),
                    "capacity {capacity}, {parts} parts"
                );
                for (a, b) in got
                    .felt_wait_seconds_by_layer
                    .iter()
                    .zip(&want.felt_wait_seconds_by_layer)
                {
                    assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
                }
                assert_eq!(residents, residents_by_recency(&*reference, &stream));
            }
        }
    }

    #[test]
    fn a_long_cold_lru_replay_runs_in_parts_and_counts_what_one_pass_counts() {
        // A stream long enough for the parts (`replay_kind` of a cold LRU),
        // 1,000 unit objects, a cache of 300.
        let objects = 1000;
        let mut rng = Rng(11);
        let requests: Vec<ObjectIndex> = (0..MIN_REQUESTS + 5)
            .map(|_| {
                let u = rng.unit();
                (u * u * objects as f64) as ObjectIndex
            })
            .collect();
        let n = requests.len() as u64;
        let stream = Stream::new(vec![1; objects], vec![0, objects as u32], requests, n);
        let read = vec![0.002; objects];
        let costs = FeltCosts::in_full(&read);
        let got = replay_kind(PolicyKind::Lru, &setup(300, objects), &stream, &[], costs).unwrap();
        let (parted, _) = parts_of(&stream, 300, costs, PARTS);
        assert_eq!(got, parted);
        let mut reference = lru(300, objects);
        let want = one_pass(&mut *reference, &stream, &[], costs);
        assert_eq!(
            (got.misses, got.evictions, got.hits_admitted),
            (want.misses, want.evictions, want.hits_admitted)
        );
    }

    #[test]
    fn grouped_streams_are_left_to_the_one_pass() {
        // Two requests a token: a token's experts of a layer are leased
        // together, hits first, so parts could not start from empty.
        let stream = Stream::new(vec![1; 4], vec![0, 4], vec![0, 1, 2, 3], 2);
        let none = replay_lru(&stream, 2, FeltCosts::in_full(&[0.0; 4]), 2);
        assert!(none.is_none());
    }
}

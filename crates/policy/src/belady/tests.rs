//! Tests of `belady`.

use super::super::testing::{knowing_setup, misses, replay, setup, unit};
use super::super::{build, lru::Lru, PolicyKind};
use super::*;
use Outcome::{Admitted as A, Bypassed as B, Hit as H};

#[test]
fn evicts_the_furthest_and_bypasses_what_returns_later() {
    // Capacity 2 slots; (object: next access) per resident.
    // a b c a c b: t0 a (a:3), t1 b (b:4) free room.
    //   t2 c (next 5) would displace b (4): 5 >= 4: bypassed.
    //   t3 a, t4 b hits; t5 c never again: bypassed. 4 misses (MIN
    //   without bypass: 5).
    let r = replay(&mut Belady::new(&setup(2, 3)), &unit(&[0, 1, 2, 0, 1, 2]));
    let outcomes: Vec<_> = r.iter().map(|(o, _)| *o).collect();
    assert_eq!(outcomes, [A, A, B, H, H, B]);
    // a b c a c b a: t2 c (next 4) displaces b (5); t3 a, t4 c hits;
    //   t5 b never again: bypassed; t6 a hit.
    let r = replay(
        &mut Belady::new(&setup(2, 3)),
        &unit(&[0, 1, 2, 0, 2, 1, 0]),
    );
    let outcomes: Vec<_> = r.iter().map(|(o, _)| *o).collect();
    assert_eq!(outcomes, [A, A, A, H, H, B, H]);
    assert_eq!(r[2].1, vec![1]);
    // Never requested again: bypassed even into free room.
    assert_eq!(replay(&mut Belady::new(&setup(2, 1)), &unit(&[0]))[0].0, B);
}

#[test]
fn byte_weighted_needs_to_return_before_every_victim() {
    // Capacity 10; a=0 (4 B), b=1 (4 B), c=2 (8 B), d=3 (11 B).
    // a b c c a b d: t0 a (next 4), t1 b (next 5): 8 B.
    // t2 c (next 3): 8 + 8 > 10: victims b (5) then a (4), 3 < both:
    //   evict b, a. t3 c hit. t4 a never again: bypassed (8 + 4 > 10,
    //   and it would be useless anyway); t5 b likewise; t6 d larger
    //   than the cache.
    let trace = [(0, 4), (1, 4), (2, 8), (2, 8), (0, 4), (1, 4), (3, 11)];
    let r = replay(&mut Belady::new(&setup(10, 4)), &trace);
    let expected = [(A, vec![]), (A, vec![]), (A, vec![1, 0]), (H, vec![])];
    assert_eq!(r[..4], expected);
    assert!(r[4..].iter().all(|x| *x == (B, vec![])));
    // a b c a b c: t2 c (next 5) needs only b (next 4, the furthest):
    //   5 >= 4: bypassed; a and b hit.
    let trace = [(0, 4), (1, 4), (2, 6), (0, 4), (1, 4), (2, 6)];
    let r = replay(&mut Belady::new(&setup(10, 4)), &trace);
    assert_eq!(misses(&r), 4);
    assert_eq!(r[2], (B, vec![]));
}

/// Fewest misses over every choice at every miss (bypass, insert into
/// free room, or evict any resident) for a unit-size trace, by dynamic
/// programming over (position, resident set).
fn optimal_misses(trace: &[ObjectIndex], capacity: u32) -> u32 {
    let states = 1usize << 4;
    let mut best = vec![0u32; states]; // after the last request: 0
    for &o in trace.iter().rev() {
        let bit = 1usize << o;
        let next = best.clone();
        for (mask, b) in best.iter_mut().enumerate() {
            if mask.count_ones() > capacity {
                continue;
            }
            *b = if mask & bit != 0 {
                next[mask]
            } else {
                let mut choice = next[mask]; // bypass
                if mask.count_ones() < capacity {
                    choice = choice.min(next[mask | bit]);
                }
                for v in (0..4).map(|v| 1usize << v).filter(|v| mask & v != 0) {
                    choice = choice.min(next[mask & !v | bit]);
                }
                1 + choice
            };
        }
    }
    best[0]
}

#[test]
fn unit_sizes_match_brute_force_on_every_short_trace() {
    // All 4^8 traces of 8 requests over 4 objects, capacities 1..=3.
    for capacity in 1..=3u32 {
        for code in 0..4u32.pow(8) {
            let trace: Vec<ObjectIndex> = (0..8).map(|i| code >> (2 * i) & 3).collect();
            let r = replay(&mut Belady::new(&setup(capacity.into(), 4)), &unit(&trace));
            let optimum = optimal_misses(&trace, capacity);
            assert_eq!(
                misses(&r) as u32,
                optimum,
                "trace {trace:?} capacity {capacity}"
            );
        }
    }
}

/// A skewed pseudo-random trace (an LCG; low objects popular) and one
/// fixed size per object in `1..=max_size`.
fn random_trace(
    requests: usize,
    objects: u32,
    max_size: u64,
) -> (Vec<(ObjectIndex, u64)>, Vec<u64>) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as f64 / (1u64 << 31) as f64
    };
    let sizes: Vec<u64> = (0..objects)
        .map(|_| 1 + (next() * max_size as f64) as u64 % max_size)
        .collect();
    let trace = (0..requests)
        .map(|_| {
            let u = next();
            let o = (u * u * u * f64::from(objects)) as ObjectIndex;
            (o, sizes[o as usize])
        })
        .collect();
    (trace, sizes)
}

const MINE: [PolicyKind; 7] = [
    PolicyKind::Lfu,
    PolicyKind::Lfru,
    PolicyKind::PinnedLru,
    PolicyKind::Frequency,
    PolicyKind::Cost,
    PolicyKind::Plan,
    PolicyKind::Belady,
];

/// Every policy of [`MINE`] and LRU over the trace; misses per policy
/// and the number of pinned objects.
fn misses_per_policy(
    trace: &[(ObjectIndex, u64)],
    sizes: &[u64],
    capacity: u64,
) -> (Vec<usize>, usize) {
    let mut s = knowing_setup(capacity, sizes, 3);
    s.params.move_seconds_per_byte = 1e-4;
    s.params.hysteresis = 1e-6;
    let k = &mut s.knowledge;
    // Pin the lowest objects (the popular ones) up to half the capacity.
    let mut pinned_bytes = 0;
    for (o, &size) in sizes.iter().enumerate() {
        if pinned_bytes + size > capacity / 2 {
            break;
        }
        pinned_bytes += size;
        k.pinned.push(o as ObjectIndex);
    }
    let mut counts: Vec<usize> = MINE
        .iter()
        .map(|&kind| misses(&replay(build(kind, &s).unwrap().as_mut(), trace)))
        .collect();
    counts.push(misses(&replay(&mut Lru::new(&s, true), trace)));
    (counts, s.knowledge.pinned.len())
}

#[test]
fn belady_bounds_every_policy_on_a_random_trace() {
    // Unit sizes: MIN with bypass is optimal for a cache that starts
    // empty. pinned-lru and plan start with their pins resident, which
    // is worth at most one miss per pin to a cold cache.
    let (trace, _) = random_trace(20_000, 300, 1);
    let unit_sizes = vec![1; 300];
    for capacity in [1, 5, 30, 100, 299] {
        let (counts, pins) = misses_per_policy(&trace, &unit_sizes, capacity);
        let belady = counts[MINE.len() - 1];
        for (i, &other) in counts.iter().enumerate() {
            let warm = matches!(MINE.get(i), Some(PolicyKind::PinnedLru | PolicyKind::Plan));
            let allowance = if warm { pins } else { 0 };
            assert!(
                belady <= other + allowance,
                "capacity {capacity}: belady {belady} > {other} ({i})"
            );
        }
    }
    // Sizes 1..=50: the invariants (checked by replay) for every policy.
    let (trace, sizes) = random_trace(20_000, 300, 50);
    for capacity in [10, 50, 500, 2000, 8000] {
        misses_per_policy(&trace, &sizes, capacity);
    }
}

//! Tests of `stack`.

use super::*;
use crate::replay::{replay, FeltCosts};
use residency_policy::{build, PolicyKind, PolicySetup};

fn stream(requests: &[u32], sizes: &[u64]) -> Stream {
    Stream::new(
        sizes.to_vec(),
        vec![0, sizes.len() as u32],
        requests.to_vec(),
        requests.len() as u64,
    )
}

#[test]
fn distances_by_hand() {
    // a(1) b(2) c(4) a b b: a's second request saw b, c and itself:
    // 2 + 4 + 1 = 7; b then saw c, a and itself: 4 + 1 + 2 = 7; b again
    // right away: only itself, 2.
    let s = stream(&[0, 1, 2, 0, 1, 1], &[1, 2, 4]);
    assert_eq!(
        stack_distances(&s),
        vec![None, None, None, Some(7), Some(7), Some(2)]
    );
}

#[test]
fn colibri_925_cycle_needs_three_slots() {
    // [0,1,2,0,1,2,3] x 20 (140 requests). With 1 or 2 slots LRU never
    // hits (every reuse is 3 distinct objects away); with 3 slots the
    // inner `0 1 2` repeats hit: 3 hits per round = 60, 80 misses
    // (worked by hand in `residency_policy::budget`'s test); 4 slots hold
    // everything, only the 4 compulsory misses remain.
    let cycle = [0u32, 1, 2, 0, 1, 2, 3];
    let requests: Vec<u32> = (0..20).flat_map(|_| cycle).collect();
    let s = stream(&requests, &[1; 4]);
    assert_eq!(lru_misses_per_slot(&s), vec![140, 140, 140, 80, 4]);
}

/// Property: the curve from one pass equals a full LRU replay at every
/// capacity, on pseudo-random traces with unequal sizes.
#[test]
fn one_pass_curve_equals_lru_replay_at_every_capacity() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20 {
        let objects = 5 + (next() % 60) as usize;
        let sizes: Vec<u64> = (0..objects).map(|_| 1 + next() % 9).collect();
        // Skewed ids so that both hits and misses happen.
        let requests: Vec<u32> = (0..2000)
            .map(|_| {
                ((next() % objects as u64) * (next() % objects as u64) / objects as u64) as u32
            })
            .collect();
        let s = stream(&requests, &sizes);
        let distances = stack_distances(&s);
        let total: u64 = sizes.iter().sum();
        let capacities: Vec<u64> = (s.max_object_bytes()..=total + 1).collect();
        let curve = lru_misses_at(&distances, &capacities);
        for (&c, &m) in capacities.iter().zip(&curve) {
            let setup = PolicySetup {
                capacity_bytes: c,
                objects,
                knowledge: Default::default(),
                params: Default::default(),
            };
            let mut lru = build(PolicyKind::Lru, &setup).unwrap();
            let stats = replay(
                lru.as_mut(),
                &s,
                &[],
                FeltCosts::in_full(&vec![0.0; objects]),
            );
            assert_eq!(stats.misses, m, "round {round}, capacity {c}");
        }
    }
}

//! Tests of `stack`.

use super::*;
use residency_core::rng::Rng;

/// LRU with `k` unit slots by brute force: a most-recent-first list.
fn brute_lru_misses(requests: &[u32], k: usize) -> u64 {
    let mut stack: Vec<u32> = Vec::new();
    let mut misses = 0;
    for &o in requests {
        match stack.iter().position(|&x| x == o) {
            Some(i) => {
                stack.remove(i);
            }
            None => {
                misses += 1;
                if stack.len() == k {
                    stack.pop();
                }
            }
        }
        if k > 0 {
            stack.insert(0, o);
        }
    }
    misses
}

#[test]
fn slot_misses_by_hand_and_by_brute_force() {
    // 0 1 2 0 1 3 0 over 4 objects: the second 0 saw {1, 2, 0} (distance
    // 3 slots), the second 1 {2, 0, 1} (3), 3 is new, the third 0 saw
    // {1, 3, 0} (3). So 3 hits need 3 slots: misses 7 7 7 4 4.
    let requests = [0, 1, 2, 0, 1, 3, 0];
    let curve = slot_misses(&requests, 4);
    assert_eq!(curve, vec![7, 7, 7, 4, 4]);
    for (k, &m) in curve.iter().enumerate() {
        assert_eq!(m, brute_lru_misses(&requests, k), "k = {k}");
    }
    // And on pseudo-random sequences, at every k.
    let mut rng = Rng(7);
    for _ in 0..30 {
        let objects = 1 + (rng.next_u64() % 12) as usize;
        let requests: Vec<u32> = (0..300)
            .map(|_| (rng.next_u64() % objects as u64) as u32)
            .collect();
        let curve = slot_misses(&requests, objects);
        for (k, &m) in curve.iter().enumerate() {
            assert_eq!(m, brute_lru_misses(&requests, k), "k = {k}");
        }
    }
}

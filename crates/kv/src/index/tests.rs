//! Tests of `index`.

use super::*;
use residency_core::rng::Rng;

fn index(policy: EvictionPolicy, capacity_blocks: usize) -> PrefixIndex<u64> {
    PrefixIndex::new(IndexConfig {
        capacity_blocks,
        policy,
        block_tokens: 4,
        prefill_tokens_per_second: 1000.0,
    })
}

/// Inserts the chain `keys` (each under the previous), then releases
/// them last to first.
fn chain(ix: &mut PrefixIndex<u64>, keys: &[u64]) -> Vec<Option<u64>> {
    let mut evicted = Vec::new();
    let mut ids = Vec::new();
    for &k in keys {
        evicted.push(ix.make_room().unwrap().map(|(k, ())| k));
        let id = ix.insert(k, (), ids.last().copied(), 4, 4);
        ids.push(id);
    }
    for &id in ids.iter().rev() {
        ix.release(id);
    }
    ix.check();
    evicted
}

#[test]
fn lru_evicts_the_least_recently_released_block() {
    let mut ix = index(EvictionPolicy::Lru, 3);
    // Released 3, 2, 1: block 1 is the most recent, 3 the least.
    assert_eq!(chain(&mut ix, &[1, 2, 3]), [None, None, None]);
    assert_eq!(chain(&mut ix, &[4]), [Some(3)]);
    // Plain LRU ignores the tree: 2 (parent of nothing cached now) goes.
    assert_eq!(chain(&mut ix, &[5]), [Some(2)]);
}

#[test]
fn lru_leaf_evicts_leaves_only_and_then_their_parents() {
    let mut ix = index(EvictionPolicy::LruLeaf, 4);
    chain(&mut ix, &[1, 2]);
    // A second branch under 1, used later: 1 -> 2 and 1 -> 3 -> 4.
    let one = ix.get(&1).unwrap();
    ix.acquire(one);
    assert_eq!(ix.make_room(), Ok(None));
    let three = ix.insert(3, (), Some(one), 4, 4);
    assert_eq!(ix.make_room(), Ok(None));
    let four = ix.insert(4, (), Some(three), 4, 4);
    for id in [four, three, one] {
        ix.release(id);
    }
    ix.check();
    // Leaves are 2 (older) and 4: 2 goes, then 4, then 3 (now a leaf),
    // and 1, the root, last.
    let mut order = Vec::new();
    for k in 10..14 {
        let victim = ix.make_room().unwrap().map(|(k, ())| k);
        order.push(victim.unwrap());
        let id = ix.insert(k, (), None, 4, 4);
        ix.release(id);
        ix.check();
    }
    assert_eq!(order, [2, 4, 3, 1]);
}

#[test]
fn leased_blocks_are_never_victims_and_full_is_said() {
    for policy in EvictionPolicy::ALL {
        let mut ix = index(policy, 2);
        chain(&mut ix, &[1, 2]);
        let (a, b) = (ix.get(&1).unwrap(), ix.get(&2).unwrap());
        ix.acquire(a);
        ix.acquire(b);
        assert_eq!(ix.make_room(), Err(Full), "{policy:?}");
        ix.release(b);
        // Under the tree policies 1 is 2's parent; either way 2 goes.
        assert_eq!(ix.make_room(), Ok(Some((2, ()))), "{policy:?}");
        ix.release(a);
        ix.check();
    }
    assert_eq!(index(EvictionPolicy::Lru, 0).make_room(), Err(Full));
}

/// Phase 1 teaches `utility` that fresh full blocks are reused late
/// (each is held by a lease, then hit and released 100 rounds later, at
/// an age of about 200 ticks) and that partial blocks and full blocks
/// reused once are not (they are evicted and never come back). Phase 2
/// inserts one fresh full block, then 150 partial blocks while 100
/// blocks stay leased: LRU evicts the full block, by then the oldest
/// candidate; `utility` keeps it (its age stays under 200).
fn survives_a_flood_of_partial_blocks(policy: EvictionPolicy) -> bool {
    let mut ix = index(policy, 200);
    let mut held = std::collections::VecDeque::new();
    for round in 0..1000u64 {
        ix.make_room().unwrap();
        held.push_back(ix.insert(1000 + round, (), None, 4, 4));
        ix.make_room().unwrap();
        let partial = ix.insert(5000 + round, (), None, 2, 2);
        ix.release(partial);
        if held.len() > 100 {
            let old = held.pop_front().unwrap();
            ix.record_hit(old);
            ix.release(old);
        }
    }
    ix.make_room().unwrap();
    let fresh = ix.insert(1, (), None, 4, 4);
    ix.release(fresh);
    for k in 0..150 {
        ix.make_room().unwrap();
        let partial = ix.insert(9000 + k, (), None, 2, 2);
        ix.release(partial);
    }
    ix.check();
    ix.get(&1).is_some()
}

#[test]
fn utility_keeps_the_class_that_is_reused() {
    assert!(survives_a_flood_of_partial_blocks(EvictionPolicy::Utility));
    assert!(!survives_a_flood_of_partial_blocks(EvictionPolicy::Lru));
}

#[test]
fn no_policy_evicts_a_leased_block_or_a_parent_before_its_children() {
    for policy in EvictionPolicy::ALL {
        let mut rng = Rng::seeded(7);
        let mut ix = index(policy, 12);
        // Keys 1..=3 are roots; key k >= 4 has parent k / 4, so key
        // k's children are 4k..=4k+3.
        let parent_of = |k: u64| (k >= 4).then_some(k / 4);
        let mut held: Vec<NodeId> = Vec::new();
        for _ in 0..5000 {
            match rng.next_u64() % 3 {
                // Walk down from a root through cached blocks (as a
                // request's lookup does) and insert the first missing.
                0 => {
                    let mut k = 1 + rng.next_u64() % 3;
                    while ix.get(&k).is_some() && k < 1 << 12 {
                        k = 4 * k + rng.next_u64() % 4;
                    }
                    if ix.get(&k).is_some() {
                        continue;
                    }
                    let leased: Vec<u64> = held.iter().map(|&id| *ix.key(id)).collect();
                    let Ok(victim) = ix.make_room() else { continue };
                    if let Some((v, ())) = victim {
                        assert!(!leased.contains(&v), "{policy:?} evicted leased {v}");
                        if policy.keeps_tree() {
                            for child in 4 * v..4 * v + 4 {
                                assert!(
                                    ix.get(&child).is_none(),
                                    "{policy:?} evicted {v} before its child {child}"
                                );
                            }
                        }
                    }
                    let parent = parent_of(k).map(|p| ix.get(&p));
                    if parent == Some(None) {
                        continue; // the victim was the parent (lru)
                    }
                    let tokens = if k.is_multiple_of(5) { 2 } else { 4 };
                    let id = ix.insert(k, (), parent.flatten(), tokens, u64::from(tokens));
                    held.push(id);
                }
                // Lease a cached block, or release a held one.
                1 => {
                    let k = rng.next_u64() % 400;
                    if let Some(id) = ix.get(&k) {
                        ix.acquire(id);
                        ix.record_hit(id);
                        held.push(id);
                    }
                }
                _ => {}
            }
            // Release one at random, and more while over 6 leases.
            while !held.is_empty() && (held.len() > 6 || rng.next_u64().is_multiple_of(2)) {
                let i = (rng.next_u64() % held.len() as u64) as usize;
                ix.release(held.swap_remove(i));
            }
            ix.check();
        }
        assert!(
            ix.counters().evicted_blocks > 500,
            "{policy:?}: {:?}",
            ix.counters()
        );
    }
}

#[test]
fn remove_refuses_parents_and_leased_blocks() {
    let mut ix = index(EvictionPolicy::LruLeaf, 4);
    chain(&mut ix, &[1, 2]);
    let (a, b) = (ix.get(&1).unwrap(), ix.get(&2).unwrap());
    assert!(ix.remove(a).is_none());
    ix.acquire(b);
    assert!(ix.remove(b).is_none());
    ix.release(b);
    assert_eq!(ix.remove(b), Some((2, ())));
    assert_eq!(ix.remove(a), Some((1, ())));
    assert!(ix.is_empty());
    ix.check();
}

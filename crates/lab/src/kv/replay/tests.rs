//! Tests of `replay`.

use super::*;
use crate::kv::trace::read_mooncake_str;
use std::path::Path;

const COST: KvCostModel = KvCostModel {
    prefill_tokens_per_second: 1000.0,
    kv_bytes_per_token: 2,
};

fn trace(lines: &[(u64, &[u64])]) -> KvTrace {
    let text: String = lines
            .iter()
            .map(|(input, ids)| {
                format!("{{\"timestamp\":0,\"input_length\":{input},\"output_length\":1,\"hash_ids\":{ids:?}}}\n")
            })
            .collect();
    read_mooncake_str(&text, Path::new("t.jsonl"), 4).unwrap()
}

#[test]
fn lru_on_a_hand_computed_trace() {
    // Blocks of 4 tokens, capacity 3. By hand, the cache in LRU to MRU
    // order after each request:
    // r1 [1,2] 7 tokens: miss; insert 1, 2; touch 2, 1 -> (2, 1).
    // r2 [1,3] 8 tokens: hit 1 (4 tokens); insert 3 -> (2, 3, 1).
    // r3 [4,5,6] 12: miss; insert 4 evicting 2 (the LRU block not in
    //     the request), 5 evicting 3, 6 evicting 1 (4 and 5 are the
    //     request's) -> (6, 5, 4).
    // r4 [1,2] 8: miss; insert 1 evicting 6, 2 evicting 5 -> (4, 2, 1).
    // r5 [4,5,6] 12: 4 cached, 5 not: hit 1 block = 4 tokens; insert 5
    //     evicting 2, 6 evicting 1 -> (6, 5, 4).
    let t = trace(&[
        (7, &[1, 2]),
        (8, &[1, 3]),
        (12, &[4, 5, 6]),
        (8, &[1, 2]),
        (12, &[4, 5, 6]),
    ]);
    let run = replay(&t, EvictionPolicy::Lru, 3, &COST);
    assert_eq!(run.hit_tokens, 8);
    assert_eq!(run.total_tokens, 47);
    assert_eq!(run.hit_blocks, 2);
    // Inserted 2 + 1 + 3 + 2 + 2; evicted 3 + 2 + 2.
    assert_eq!(run.inserted_blocks, 10);
    assert_eq!(run.evicted_blocks, 7);
    assert_eq!(run.uncached_blocks, 0);
    assert!((run.prefill_seconds_saved(&COST) - 0.008).abs() < 1e-12);
    assert_eq!(run.hit_bytes(&COST), 16);
    assert_eq!(run.capacity_bytes(4, &COST), 24);
}

#[test]
fn blocks_not_cached_when_the_request_fills_the_cache() {
    // Capacity 2: a 3-block request caches its first two only; the
    // next identical request hits both (8 tokens of 10).
    let t = trace(&[(10, &[1, 2, 3]), (10, &[1, 2, 3])]);
    for policy in EvictionPolicy::ALL {
        let run = replay(&t, policy, 2, &COST);
        assert_eq!(run.hit_tokens, 8, "{policy:?}");
        assert_eq!(run.uncached_blocks, 2, "{policy:?}");
    }
    // Capacity 0 caches nothing.
    let run = replay(&t, EvictionPolicy::Lru, 0, &COST);
    assert_eq!((run.hit_tokens, run.uncached_blocks), (0, 6));
}

#[test]
fn hit_tokens_stop_at_the_input_length() {
    // 3 blocks for 9 tokens: a full hit is 9 tokens, not 12.
    let t = trace(&[(9, &[1, 2, 3]), (9, &[1, 2, 3])]);
    let run = replay(&t, EvictionPolicy::LruLeaf, 8, &COST);
    assert_eq!(run.hit_tokens, 9);
}

#[test]
fn lru_and_lru_leaf_agree_when_parents_are_touched_after_children() {
    // The replay touches a request's blocks last to first, so a parent
    // is always more recent than its cached descendants, and LRU's
    // victim is a leaf already: the two policies choose the same
    // victims on any trace of prefix ids (the real trace too, in
    // tests/kv.rs). They differ in the store, where leases end in any
    // order (index.rs tests that).
    let t = trace(&[
        (8, &[1, 2]),
        (12, &[1, 3, 4]),
        (8, &[5, 6]),
        (8, &[1, 2]),
        (12, &[1, 3, 7]),
        (8, &[5, 6]),
        (4, &[8]),
    ]);
    let facts = |r: ReplayRun| (r.hit_tokens, r.inserted_blocks, r.evicted_blocks);
    for capacity in 0..9 {
        assert_eq!(
            facts(replay(&t, EvictionPolicy::Lru, capacity, &COST)),
            facts(replay(&t, EvictionPolicy::LruLeaf, capacity, &COST)),
            "capacity {capacity}"
        );
    }
}

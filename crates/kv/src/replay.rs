//! A prefix-block trace through the prefix index (`residency kv-replay`):
//! hit tokens, prefill seconds saved and bytes per policy and capacity.
//!
//! Each request, in file order (the issue's `lru` semantics, which every
//! policy follows; only the choice of victim differs):
//! 1. hit blocks = the longest leading run of its ids that is cached; hit
//!    tokens = `min(hit blocks x block tokens, input tokens)`;
//! 2. every cached block of the request is leased, so no victim is part of
//!    the current request;
//! 3. each missing block is inserted in order, evicting the policy's victim
//!    when the cache is full; when nothing can be evicted, the remaining
//!    blocks are not cached;
//! 4. the request's cached blocks are released (touched) from last to
//!    first, so its first block ends most recent.
//!
//! The index is the block store's own (`index.rs`), so the numbers are
//! about the code that serves.

use super::index::{EvictionPolicy, IndexConfig, PrefixIndex};
use super::trace::KvTrace;
use rayon::prelude::*;

/// What turns tokens into seconds and bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvCostModel {
    /// Prefill speed: seconds saved = hit tokens / this.
    pub prefill_tokens_per_second: f64,
    /// KV bytes of one token (all layers, K and V).
    pub kv_bytes_per_token: u64,
}

/// The result of one policy at one capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRun {
    pub policy: EvictionPolicy,
    pub capacity_blocks: usize,
    pub requests: u64,
    pub hit_tokens: u64,
    pub total_tokens: u64,
    pub hit_blocks: u64,
    pub inserted_blocks: u64,
    pub evicted_blocks: u64,
    /// Missing blocks left out because every cached block was protected.
    pub uncached_blocks: u64,
}

impl ReplayRun {
    pub fn hit_ratio(&self) -> f64 {
        if self.total_tokens == 0 {
            0.0
        } else {
            self.hit_tokens as f64 / self.total_tokens as f64
        }
    }

    pub fn prefill_seconds_saved(&self, cost: &KvCostModel) -> f64 {
        self.hit_tokens as f64 / cost.prefill_tokens_per_second
    }

    pub fn hit_bytes(&self, cost: &KvCostModel) -> u64 {
        self.hit_tokens * cost.kv_bytes_per_token
    }

    pub fn capacity_bytes(&self, block_tokens: u32, cost: &KvCostModel) -> u64 {
        self.capacity_blocks as u64 * u64::from(block_tokens) * cost.kv_bytes_per_token
    }

    pub fn to_json(&self, block_tokens: u32, cost: &KvCostModel) -> serde_json::Value {
        serde_json::json!({
            "policy": self.policy.name(),
            "capacity_blocks": self.capacity_blocks,
            "hit_tokens": self.hit_tokens,
            "total_tokens": self.total_tokens,
            "hit_ratio": self.hit_ratio(),
            "prefill_seconds_saved": self.prefill_seconds_saved(cost),
            "capacity_bytes": self.capacity_bytes(block_tokens, cost),
            "hit_bytes": self.hit_bytes(cost),
            "requests": self.requests,
            "hit_blocks": self.hit_blocks,
            "inserted_blocks": self.inserted_blocks,
            "evicted_blocks": self.evicted_blocks,
            "uncached_blocks": self.uncached_blocks,
        })
    }
}

/// Replays `trace` with `policy` in a cache of `capacity_blocks` blocks.
pub fn replay(
    trace: &KvTrace,
    policy: EvictionPolicy,
    capacity_blocks: usize,
    cost: &KvCostModel,
) -> ReplayRun {
    let block_tokens = trace.block_tokens;
    let mut index: PrefixIndex<u64> = PrefixIndex::new(IndexConfig {
        capacity_blocks,
        policy,
        block_tokens,
        prefill_tokens_per_second: cost.prefill_tokens_per_second,
    });
    let mut run = ReplayRun {
        policy,
        capacity_blocks,
        requests: trace.requests.len() as u64,
        hit_tokens: 0,
        total_tokens: 0,
        hit_blocks: 0,
        inserted_blocks: 0,
        evicted_blocks: 0,
        uncached_blocks: 0,
    };
    let mut held = Vec::new();
    for request in &trace.requests {
        let ids = &request.block_ids;
        let hit = index.leading_run(ids);
        run.hit_tokens += (hit as u64 * u64::from(block_tokens)).min(request.input_tokens);
        run.total_tokens += request.input_tokens;
        held.clear();
        held.extend(ids.iter().map(|id| index.get(id)));
        for (i, node) in held.iter().enumerate() {
            if let Some(node) = *node {
                index.acquire(node);
                if i < hit {
                    index.record_hit(node);
                }
            }
        }
        for i in 0..ids.len() {
            if held[i].is_some() {
                continue;
            }
            if index.make_room().is_err() {
                run.uncached_blocks += held[i..].iter().filter(|n| n.is_none()).count() as u64;
                break;
            }
            // Under the tree policies the previous block is cached: a hit,
            // or inserted just before (an insertion that fails stops here).
            let parent = i.checked_sub(1).and_then(|p| held[p]);
            let tokens = request.block_token_count(i, block_tokens);
            let bytes = u64::from(tokens) * cost.kv_bytes_per_token;
            held[i] = Some(index.insert(ids[i], (), parent, tokens, bytes));
        }
        for node in held.iter().rev().flatten() {
            index.release(*node);
        }
    }
    let counters = index.counters();
    run.hit_blocks = counters.hit_blocks;
    run.inserted_blocks = counters.inserted_blocks;
    run.evicted_blocks = counters.evicted_blocks;
    run
}

/// Every policy at every capacity (in parallel), ordered by policy as
/// given, then capacity as given.
pub fn replay_grid(
    trace: &KvTrace,
    policies: &[EvictionPolicy],
    capacities_blocks: &[usize],
    cost: &KvCostModel,
) -> Vec<ReplayRun> {
    let arms: Vec<(EvictionPolicy, usize)> = policies
        .iter()
        .flat_map(|&p| capacities_blocks.iter().map(move |&c| (p, c)))
        .collect();
    arms.par_iter()
        .map(|&(policy, capacity)| replay(trace, policy, capacity, cost))
        .collect()
}

/// The `--json` document: the trace, the model and every run.
pub fn runs_json(trace: &KvTrace, cost: &KvCostModel, runs: &[ReplayRun]) -> serde_json::Value {
    serde_json::json!({
        "trace": trace.path.display().to_string(),
        "requests": trace.requests.len(),
        "block_tokens": trace.block_tokens,
        "prefill_tokens_per_second": cost.prefill_tokens_per_second,
        "kv_bytes_per_token": cost.kv_bytes_per_token,
        "runs": runs.iter().map(|r| r.to_json(trace.block_tokens, cost)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::read_mooncake_str;
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
}

//! A prefix-block trace through the prefix index (`residency kv-replay`):
//! hit tokens, prefill seconds saved and bytes per policy and capacity.
//!
//! Each request, in file order (the `lru` semantics of docs/kv.md, which every
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
//! The index is the block store's own (`residency_kv::index`), so the numbers are
//! about the code that serves.

use super::trace::KvTrace;
use rayon::prelude::*;
use residency_kv::{EvictionPolicy, IndexConfig, PrefixIndex};

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

/// What `residency kv-replay --json` writes
/// (`schemas/kv-replay-output.schema.json`): the trace, the model and
/// every run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct KvReplayReport {
    pub trace: String,
    pub requests: usize,
    pub block_tokens: u32,
    pub prefill_tokens_per_second: f64,
    pub kv_bytes_per_token: u64,
    pub runs: Vec<KvRunRecord>,
}

/// One eviction policy at one capacity.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct KvRunRecord {
    pub policy: String,
    pub capacity_blocks: usize,
    pub hit_tokens: u64,
    pub total_tokens: u64,
    pub hit_ratio: f64,
    pub prefill_seconds_saved: f64,
    pub capacity_bytes: u64,
    pub hit_bytes: u64,
    pub requests: u64,
    pub hit_blocks: u64,
    pub inserted_blocks: u64,
    pub evicted_blocks: u64,
    pub uncached_blocks: u64,
}

impl KvReplayReport {
    pub fn new(trace: &KvTrace, cost: &KvCostModel, runs: &[ReplayRun]) -> KvReplayReport {
        KvReplayReport {
            trace: trace.path.display().to_string(),
            requests: trace.requests.len(),
            block_tokens: trace.block_tokens,
            prefill_tokens_per_second: cost.prefill_tokens_per_second,
            kv_bytes_per_token: cost.kv_bytes_per_token,
            runs: runs
                .iter()
                .map(|r| KvRunRecord {
                    policy: r.policy.name().into(),
                    capacity_blocks: r.capacity_blocks,
                    hit_tokens: r.hit_tokens,
                    total_tokens: r.total_tokens,
                    hit_ratio: r.hit_ratio(),
                    prefill_seconds_saved: r.prefill_seconds_saved(cost),
                    capacity_bytes: r.capacity_bytes(trace.block_tokens, cost),
                    hit_bytes: r.hit_bytes(cost),
                    requests: r.requests,
                    hit_blocks: r.hit_blocks,
                    inserted_blocks: r.inserted_blocks,
                    evicted_blocks: r.evicted_blocks,
                    uncached_blocks: r.uncached_blocks,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;

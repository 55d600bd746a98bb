//! KV prefix groups for the planner (design §4.6) from a prefix-block trace:
//! how often each block is reused, banded by reuse count so one group holds
//! blocks of one value per byte.
//!
//! A block kept resident for the whole trace is computed by the first
//! request that holds it and reused by every later one, so its reuses are
//! its occurrences less one. A group's `prefill_seconds` is its tokens over
//! the prefill rate (what reusing all of it once avoids) and its
//! `reuses_per_token` the token-weighted mean of its blocks' reuses per
//! generated token, so `reuses_per_token * prefill_seconds` is exactly the
//! prefill its blocks save per generated token, and `reuses_per_token *
//! bytes` exactly the bytes uploaded from RAM per generated token.
//!
//! A parent block is reused at least as often as any child, so bands of
//! higher reuse hold the parents of lower ones; the planner's knapsack,
//! which takes the densest bands first, then keeps prefixes whole. It can
//! still keep a small low band without a large high one when only that
//! fits, which overstates the saving by that band.

use super::replay::KvCostModel;
use super::trace::KvTrace;
use residency_core::kv::KvGroup;
use residency_core::units::{Bytes, Seconds};
use std::collections::{BTreeMap, HashMap};

/// Reuse counts up to this get a band each; above, bands double.
const EXACT_BANDS: u64 = 16;

/// The band of a block reused `reuses` (>= 1) times: itself up to
/// `EXACT_BANDS`, else the power of two at or below it.
fn band(reuses: u64) -> u64 {
    if reuses <= EXACT_BANDS {
        reuses
    } else {
        1 << reuses.ilog2()
    }
}

/// Groups of the trace's reused blocks, most reused band first. Blocks
/// never reused are left out: keeping them saves nothing.
pub fn prefix_groups(trace: &KvTrace, sizing: &KvCostModel) -> Vec<KvGroup> {
    // Per block id: occurrences and its tokens (the last block of a prompt
    // may be partial; an id names one prefix, so its tokens agree).
    let mut blocks: HashMap<u64, (u64, u32)> = HashMap::new();
    for request in &trace.requests {
        for (i, &id) in request.block_ids.iter().enumerate() {
            let tokens = request.block_token_count(i, trace.block_tokens);
            let entry = blocks.entry(id).or_insert((0, tokens));
            entry.0 += 1;
            entry.1 = entry.1.max(tokens);
        }
    }
    let output_tokens: u64 = trace.requests.iter().map(|r| r.output_tokens).sum();
    // Per band: blocks, tokens, and reuses weighted by tokens.
    let mut bands: BTreeMap<u64, (u64, u64, f64)> = BTreeMap::new();
    for &(occurrences, tokens) in blocks.values() {
        let reuses = occurrences - 1;
        if reuses == 0 || tokens == 0 {
            continue;
        }
        let entry = bands.entry(band(reuses)).or_default();
        entry.0 += 1;
        entry.1 += u64::from(tokens);
        entry.2 += reuses as f64 * f64::from(tokens);
    }
    bands
        .into_iter()
        .rev()
        .map(|(band, (count, tokens, weighted_reuses))| {
            let upper = if band < EXACT_BANDS {
                band
            } else {
                2 * band - 1
            };
            let name = if upper == band {
                format!("reused-{band}x")
            } else {
                format!("reused-{band}-{upper}x")
            };
            KvGroup {
                name: format!("{name}-{count}-blocks"),
                bytes: Bytes(tokens * sizing.kv_bytes_per_token),
                reuses_per_token: weighted_reuses / tokens as f64 / output_tokens.max(1) as f64,
                prefill_seconds: Seconds(tokens as f64 / sizing.prefill_tokens_per_second),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::trace::read_mooncake_str;
    use std::path::Path;

    #[test]
    fn bands_and_their_savings_are_counted_by_hand() {
        // Block size 4. Request 1: ids 1,2 (8 tokens, output 10); request
        // 2: 1,2,3 with 10 tokens (block 3 holds 2; output 20); request 3:
        // 1,4 with 6 tokens (block 4 holds 2; output 10).
        // Occurrences: 1 -> 3, 2 -> 2, 3 -> 1, 4 -> 1. Reused: block 1
        // twice (band 2, 4 tokens), block 2 once (band 1, 4 tokens).
        let text = "{\"timestamp\":0,\"input_length\":8,\"output_length\":10,\"hash_ids\":[1,2]}\n\
                    {\"timestamp\":1,\"input_length\":10,\"output_length\":20,\"hash_ids\":[1,2,3]}\n\
                    {\"timestamp\":2,\"input_length\":6,\"output_length\":10,\"hash_ids\":[1,4]}\n";
        let trace = read_mooncake_str(text, Path::new("t.jsonl"), 4).unwrap();
        let sizing = KvCostModel {
            kv_bytes_per_token: 100,
            prefill_tokens_per_second: 2.0,
        };
        let groups = prefix_groups(&trace, &sizing);
        assert_eq!(groups.len(), 2);
        let (two, one) = (&groups[0], &groups[1]);
        assert_eq!(two.name, "reused-2x-1-blocks");
        assert_eq!(one.name, "reused-1x-1-blocks");
        // 4 tokens of 100 bytes; 4 tokens at 2 tokens/s = 2 s.
        assert_eq!(two.bytes.0, 400);
        assert_eq!(two.prefill_seconds.0, 2.0);
        // 40 generated tokens: block 1 is reused 2 / 40, block 2 1 / 40.
        assert!((two.reuses_per_token - 2.0 / 40.0).abs() < 1e-15);
        assert!((one.reuses_per_token - 1.0 / 40.0).abs() < 1e-15);
    }

    #[test]
    fn a_band_weights_reuses_by_tokens() {
        // Block 7 is in all 31 requests (reused 30 times, 4 tokens), block 8
        // in the first 21 (reused 20 times, a 2-token tail): both in band
        // 16 (16..=31), weighted mean reuses (30*4 + 20*2) / 6 over 31
        // generated tokens.
        let mut text = String::new();
        for i in 0..31 {
            let (ids, len) = if i < 21 { ("[7,8]", 6) } else { ("[7]", 4) };
            text.push_str(&format!(
                "{{\"timestamp\":{i},\"input_length\":{len},\"output_length\":1,\"hash_ids\":{ids}}}\n"
            ));
        }
        let trace = read_mooncake_str(&text, Path::new("t.jsonl"), 4).unwrap();
        let sizing = KvCostModel {
            kv_bytes_per_token: 1,
            prefill_tokens_per_second: 1.0,
        };
        let groups = prefix_groups(&trace, &sizing);
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!(g.name, "reused-16-31x-2-blocks");
        assert_eq!(g.bytes.0, 6);
        assert!((g.reuses_per_token - (30.0 * 4.0 + 20.0 * 2.0) / 6.0 / 31.0).abs() < 1e-12);
    }
}

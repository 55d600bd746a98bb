//! LRU miss curves from one stack-distance pass (Mattson et al.): the
//! byte-weighted LRU cache of capacity C holds exactly the longest prefix of
//! the recency stack whose bytes fit in C (evictions only ever cut the tail,
//! hits only reorder inside the prefix), so a request hits at every capacity
//! at least its stack distance in bytes. A Fenwick tree over request
//! positions sums the sizes of the objects requested since, in O(log n)
//! (`residency_policy::stack`, which the online allocator runs too); here
//! the curves of whole streams.
//!
//! Exact for capacities at least the largest object; below that, objects
//! that LRU would refuse still count in the distances of others, so the
//! simulator replays instead (see `lru_misses_at`).

use crate::stream::Stream;
use residency_policy::stack::{distances, slot_misses};

/// `stack_distance_bytes[i]`: bytes of the distinct objects requested since
/// the previous request for the same object, its own size included; `None`
/// for a first request (a compulsory miss at every capacity).
pub fn stack_distances(stream: &Stream) -> Vec<Option<u64>> {
    distances(&stream.requests, stream.objects(), |o| {
        stream.sizes_bytes[o as usize]
    })
}

/// Misses of byte-weighted LRU at each capacity (each at least the largest
/// object of the stream).
pub fn lru_misses_at(distances: &[Option<u64>], capacities_bytes: &[u64]) -> Vec<u64> {
    let mut finite: Vec<u64> = distances.iter().flatten().copied().collect();
    finite.sort_unstable();
    capacities_bytes
        .iter()
        .map(|&c| (distances.len() - finite.partition_point(|&d| d <= c)) as u64)
        .collect()
}

/// Misses of LRU with `k` slots for every `k` in `0..=objects`, for a
/// stream whose objects all have the same size (one MoE layer).
pub fn lru_misses_per_slot(stream: &Stream) -> Vec<u64> {
    debug_assert!(stream.sizes_bytes.windows(2).all(|w| w[0] == w[1]));
    slot_misses(&stream.requests, stream.objects())
}

#[cfg(test)]
mod tests;

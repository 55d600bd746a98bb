//! LRU miss curves from one stack-distance pass (Mattson et al.): the
//! byte-weighted LRU cache of capacity C holds exactly the longest prefix of
//! the recency stack whose bytes fit in C (evictions only ever cut the tail,
//! hits only reorder inside the prefix), so a request hits at every capacity
//! at least its stack distance in bytes. A Fenwick tree over request
//! positions sums the sizes of the objects requested since, in O(log n).
//!
//! Exact for capacities at least the largest object; below that, objects
//! that LRU would refuse still count in the distances of others, so the
//! simulator replays instead (see `lru_misses_at`).

use super::stream::Stream;
use crate::policy::ObjectIndex;

/// `stack_distance_bytes[i]`: bytes of the distinct objects requested since
/// the previous request for the same object, its own size included; `None`
/// for a first request (a compulsory miss at every capacity).
pub fn stack_distances(stream: &Stream) -> Vec<Option<u64>> {
    distances(&stream.requests, stream.objects(), |o| {
        stream.sizes_bytes[o as usize]
    })
}

/// Stack distances of `requests` over objects `0..objects`, each weighing
/// `size(o)`.
fn distances(
    requests: &[ObjectIndex],
    objects: usize,
    size: impl Fn(ObjectIndex) -> u64,
) -> Vec<Option<u64>> {
    let n = requests.len();
    let mut tree = Fenwick::new(n);
    let mut last = vec![usize::MAX; objects];
    let mut out = Vec::with_capacity(n);
    for (i, &o) in requests.iter().enumerate() {
        let size = size(o);
        let prev = last[o as usize];
        if prev == usize::MAX {
            out.push(None);
        } else {
            out.push(Some(tree.sum_after(prev, i) + size));
            tree.add(prev, -(size as i64));
        }
        tree.add(i, size as i64);
        last[o as usize] = i;
    }
    out
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

/// Misses of LRU with `k` slots for every `k` in `0..=objects`, for
/// `requests` over `objects` objects of one size (counted in slots). The
/// online allocator's curve of one layer's recent requests.
pub fn slot_misses(requests: &[ObjectIndex], objects: usize) -> Vec<u64> {
    let mut hits_at_depth = vec![0u64; objects + 1];
    for d in distances(requests, objects, |_| 1).into_iter().flatten() {
        hits_at_depth[d as usize] += 1;
    }
    let mut misses = requests.len() as u64;
    hits_at_depth
        .iter()
        .map(|&h| {
            misses -= h;
            misses
        })
        .collect()
}

/// Prefix sums over positions with point updates (also `lru_parts`'s).
pub(super) struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    pub(super) fn new(n: usize) -> Self {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }

    pub(super) fn add(&mut self, at: usize, delta: i64) {
        let mut i = at + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of positions `0..end`.
    pub(super) fn prefix(&self, end: usize) -> i64 {
        let mut i = end;
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// Sum of positions strictly between `from` and `to`.
    fn sum_after(&self, from: usize, to: usize) -> u64 {
        (self.prefix(to) - self.prefix(from + 1)) as u64
    }
}

#[cfg(test)]
mod tests;

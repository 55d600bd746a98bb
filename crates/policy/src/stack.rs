//! LRU miss curves from one stack-distance pass (Mattson et al.): the
//! byte-weighted LRU cache of capacity C holds exactly the longest prefix of
//! the recency stack whose bytes fit in C (evictions only ever cut the tail,
//! hits only reorder inside the prefix), so a request hits at every capacity
//! at least its stack distance in bytes. A Fenwick tree over request
//! positions sums the sizes of the objects requested since, in O(log n).
//! Here the distances and the per-slot curve of one layer's requests, which
//! the online allocator prices budgets with; the simulator's `stack` builds
//! whole-stream curves on them.

use crate::ObjectIndex;

/// Stack distances of `requests` over objects `0..objects`, each weighing
/// `size(o)`.
pub fn distances(
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

/// Prefix sums over positions with point updates (also the simulator's parted LRU replay's).
pub struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    pub fn new(n: usize) -> Self {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }

    pub fn add(&mut self, at: usize, delta: i64) {
        let mut i = at + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of positions `0..end`.
    pub fn prefix(&self, end: usize) -> i64 {
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

//! An indexed binary min-heap over dense object indices, and the byte-weighted
//! resident set built on it that `lfu`, `lfru`, `cost` and `belady` share:
//! residents ordered by a score, the smallest evicted first, victims
//! collected before the admission decision so that a refused candidate
//! evicts nothing. O(log n) per operation, no allocation after creation.

use super::{ObjectIndex, Outcome, PolicySetup};

const ABSENT: u32 = u32::MAX;

/// Members ordered by `key`, the smallest at the top. Keys should be unique
/// (policies append a tick) so that popping and pushing back members leaves
/// the same order.
#[derive(Debug, Clone)]
pub(crate) struct IndexedHeap<K> {
    heap: Vec<ObjectIndex>,
    /// `key[o]` of member `o` (stale for non-members).
    key: Vec<K>,
    /// `pos[o]`: where `o` is in `heap`, or [`ABSENT`].
    pos: Vec<u32>,
}

impl<K: Copy + PartialOrd + Default> IndexedHeap<K> {
    pub fn new(objects: usize) -> Self {
        IndexedHeap {
            heap: Vec::with_capacity(objects),
            key: vec![K::default(); objects],
            pos: vec![ABSENT; objects],
        }
    }

    pub fn contains(&self, o: ObjectIndex) -> bool {
        self.pos[o as usize] != ABSENT
    }

    /// Inserts a non-member.
    pub fn push(&mut self, o: ObjectIndex, key: K) {
        debug_assert!(!self.contains(o));
        self.key[o as usize] = key;
        self.pos[o as usize] = self.heap.len() as u32;
        self.heap.push(o);
        self.sift_up(self.heap.len() - 1);
    }

    /// Removes and returns the member with the smallest key.
    pub fn pop(&mut self) -> Option<(ObjectIndex, K)> {
        let top = *self.heap.first()?;
        self.remove(top);
        Some((top, self.key[top as usize]))
    }

    /// Removes a member.
    pub fn remove(&mut self, o: ObjectIndex) {
        let i = self.pos[o as usize] as usize;
        let last = self.heap.len() - 1;
        self.swap(i, last);
        self.heap.pop();
        self.pos[o as usize] = ABSENT;
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    /// Changes a member's key.
    pub fn set_key(&mut self, o: ObjectIndex, key: K) {
        self.key[o as usize] = key;
        let i = self.pos[o as usize] as usize;
        self.sift_down(i);
        self.sift_up(i);
    }

    /// Re-keys every member (`new_key(o, old_key)`) and restores the heap
    /// order in O(n).
    pub fn rekey(&mut self, mut new_key: impl FnMut(ObjectIndex, K) -> K) {
        for &o in &self.heap {
            self.key[o as usize] = new_key(o, self.key[o as usize]);
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    fn less(&self, i: usize, j: usize) -> bool {
        self.key[self.heap[i] as usize] < self.key[self.heap[j] as usize]
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.pos[self.heap[i] as usize] = i as u32;
        self.pos[self.heap[j] as usize] = j as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.less(l, least) {
                least = l;
            }
            if r < self.heap.len() && self.less(r, least) {
                least = r;
            }
            if least == i {
                break;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

/// Byte-weighted residents evicted smallest key first.
pub(crate) struct ScoredResidents<K> {
    heap: IndexedHeap<K>,
    size_bytes: Vec<u64>,
    used_bytes: u64,
    capacity_bytes: u64,
    /// Would-be victims of the current miss, smallest key first (scratch).
    victims: Vec<(ObjectIndex, K)>,
}

impl<K: Copy + PartialOrd + Default> ScoredResidents<K> {
    pub fn new(setup: &PolicySetup) -> Self {
        ScoredResidents {
            heap: IndexedHeap::new(setup.objects),
            size_bytes: vec![0; setup.objects],
            used_bytes: 0,
            capacity_bytes: setup.capacity_bytes,
            victims: Vec::new(),
        }
    }

    /// Serves a request for `o` whose key is now `key`. A hit re-keys it. A
    /// miss that fits collects the residents it would displace (smallest key
    /// first, until it fits; none while there is free room) and asks `admit`;
    /// refused, the victims stay and the miss is bypassed.
    pub fn access(
        &mut self,
        o: ObjectIndex,
        size_bytes: u64,
        key: K,
        evicted: &mut Vec<ObjectIndex>,
        admit: impl FnOnce(&[(ObjectIndex, K)]) -> bool,
    ) -> Outcome {
        if self.heap.contains(o) {
            self.heap.set_key(o, key);
            return Outcome::Hit;
        }
        if size_bytes > self.capacity_bytes {
            return Outcome::Bypassed;
        }
        self.victims.clear();
        let mut freed_bytes = 0;
        while self.used_bytes + size_bytes > self.capacity_bytes + freed_bytes {
            let (v, k) = self.heap.pop().expect("used bytes imply a member");
            freed_bytes += self.size_bytes[v as usize];
            self.victims.push((v, k));
        }
        if !admit(&self.victims) {
            for &(v, k) in &self.victims {
                self.heap.push(v, k);
            }
            return Outcome::Bypassed;
        }
        evicted.extend(self.victims.iter().map(|&(v, _)| v));
        self.used_bytes -= freed_bytes;
        self.heap.push(o, key);
        self.size_bytes[o as usize] = size_bytes;
        self.used_bytes += size_bytes;
        Outcome::Admitted
    }

    /// Sets the capacity, evicting the smallest keys (pushed to `evicted`)
    /// until the residents fit it, as a miss would choose its victims.
    pub fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) {
        while self.used_bytes > capacity_bytes {
            let (v, _) = self.heap.pop().expect("used bytes imply a member");
            self.used_bytes -= self.size_bytes[v as usize];
            evicted.push(v);
        }
        self.capacity_bytes = capacity_bytes;
    }

    /// Forgets a resident (a no-op for a non-resident): it leaves the heap
    /// (O(log n)) and its bytes are freed.
    pub fn remove(&mut self, o: ObjectIndex) {
        if self.heap.contains(o) {
            self.heap.remove(o);
            self.used_bytes -= self.size_bytes[o as usize];
        }
    }

    /// Re-keys every resident (`new_key(o, size_bytes, old_key)`).
    pub fn rekey(&mut self, mut new_key: impl FnMut(ObjectIndex, u64, K) -> K) {
        let sizes = &self.size_bytes;
        self.heap.rekey(|o, old| new_key(o, sizes[o as usize], old));
    }

    pub fn contains(&self, o: ObjectIndex) -> bool {
        self.heap.contains(o)
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_key_order_after_updates_removals_and_rekeys() {
        let mut h = IndexedHeap::new(6);
        for (o, k) in [(0, 50), (1, 10), (2, 40), (3, 30), (4, 20)] {
            h.push(o, k);
        }
        h.set_key(0, 5); // 0:5 1:10 4:20 3:30 2:40
        h.remove(4); // 0:5 1:10 3:30 2:40
        h.set_key(1, 45); // 0:5 3:30 2:40 1:45
        assert_eq!(h.pop(), Some((0, 5)));
        h.rekey(|o, k| if o == 1 { 1 } else { k }); // 1:1 3:30 2:40
        let order: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(order, vec![(1, 1), (3, 30), (2, 40)]);
        assert!(!h.contains(1));
    }
}

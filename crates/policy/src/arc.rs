//! ARC (Megiddo & Modha, FAST '03), byte-weighted as libCacheSim `ARC.c`:
//! resident LRU lists T1 (seen once) and T2 (seen again), ghost lists B1 and
//! B2 of their recent evictions, all measured in bytes, and the target `p`
//! for T1's bytes.
//! - A hit in T1 moves the object to T2's front; a hit in T2 to its front.
//! - A miss found in B1 raises `p` by `max(|B2| / |B1|, 1)` (up to the
//!   capacity), one in B2 lowers it by `max(|B1| / |B2|, 1)` (down to 0);
//!   the object leaves its ghost list and enters T2. Other misses enter T1.
//! - Each eviction after a ghost hit is REPLACE: T1's tail goes to B1 if
//!   T1 is non-empty and over `p` (or at `p` on a B2 hit) or T2 is empty,
//!   else T2's tail to B2. After other misses (the paper's case IV): if
//!   `|T1| + |B1| + size > c`, B1's tail is forgotten and REPLACE runs, or,
//!   B1 being empty, T1's tail is evicted without a ghost; else B2's tail
//!   is forgotten when all four lists reach `2c`, and REPLACE runs.
//!
//! As in libCacheSim, `p` is an `f64` in bytes and a ghost hit moves it by
//! the ratio of the ghost lists' bytes (at least 1 byte), not by the
//! object's size: with large objects `p` adapts slowly.

use super::recency::RecencyList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// An LRU list over dense objects that sums its bytes.
struct Lru {
    order: RecencyList,
    bytes: u64,
}

impl Lru {
    fn new(objects: usize) -> Self {
        Lru {
            order: RecencyList::new(objects),
            bytes: 0,
        }
    }

    fn push(&mut self, o: ObjectIndex, size_bytes: &[u64]) {
        self.order.push_front(o);
        self.bytes += size_bytes[o as usize];
    }

    fn remove(&mut self, o: ObjectIndex, size_bytes: &[u64]) {
        self.order.remove(o);
        self.bytes -= size_bytes[o as usize];
    }

    fn pop_back(&mut self, size_bytes: &[u64]) -> ObjectIndex {
        let o = self.order.back().expect("a non-empty list has a tail");
        self.remove(o, size_bytes);
        o
    }
}

pub(crate) struct Arc {
    t1: Lru,
    t2: Lru,
    b1: Lru,
    b2: Lru,
    /// Target bytes of T1.
    p: f64,
    /// Size at insertion, of residents and ghosts alike.
    size_bytes: Vec<u64>,
    capacity_bytes: u64,
}

/// The ghost list a miss was found in.
#[derive(Clone, Copy, PartialEq)]
enum Ghost {
    None,
    B1,
    B2,
}

impl Arc {
    pub fn new(setup: &PolicySetup) -> Self {
        Arc {
            t1: Lru::new(setup.objects),
            t2: Lru::new(setup.objects),
            b1: Lru::new(setup.objects),
            b2: Lru::new(setup.objects),
            p: 0.0,
            size_bytes: vec![0; setup.objects],
            capacity_bytes: setup.capacity_bytes,
        }
    }

    /// The paper's REPLACE: one resident moves to its ghost list.
    fn replace(&mut self, ghost: Ghost, evicted: &mut Vec<ObjectIndex>) {
        let t1_bytes = self.t1.bytes as f64;
        let prefer_t1 = (self.t1.bytes > 0
            && (t1_bytes > self.p || (t1_bytes == self.p && ghost == Ghost::B2)))
            || self.t2.bytes == 0;
        // Only lists of zero-byte objects make the preferred one empty.
        let from_t1 = if prefer_t1 {
            self.t1.order.len() > 0
        } else {
            self.t2.order.len() == 0
        };
        let (from, to) = if from_t1 {
            (&mut self.t1, &mut self.b1)
        } else {
            (&mut self.t2, &mut self.b2)
        };
        let o = from.pop_back(&self.size_bytes);
        to.push(o, &self.size_bytes);
        evicted.push(o);
    }

    /// One eviction for a miss found in no list (the paper's case IV).
    fn evict_cold(&mut self, size: u64, evicted: &mut Vec<ObjectIndex>) {
        let c = self.capacity_bytes;
        if self.t1.bytes + self.b1.bytes + size > c {
            if self.b1.bytes > 0 {
                self.b1.pop_back(&self.size_bytes);
                self.replace(Ghost::None, evicted);
            } else {
                evicted.push(self.t1.pop_back(&self.size_bytes));
            }
        } else {
            let all = self.t1.bytes + self.b1.bytes + self.t2.bytes + self.b2.bytes;
            if all >= c.saturating_mul(2) && self.b2.bytes > 0 {
                self.b2.pop_back(&self.size_bytes);
            }
            self.replace(Ghost::None, evicted);
        }
    }
}

impl Policy for Arc {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, size) = (request.object, request.size_bytes);
        if self.t1.order.contains(o) {
            self.t1.remove(o, &self.size_bytes);
            self.t2.push(o, &self.size_bytes);
            return Outcome::Hit;
        }
        if self.t2.order.contains(o) {
            self.t2.order.move_to_front(o);
            return Outcome::Hit;
        }
        // Adapt on a ghost hit, even if the object is then refused.
        let ghost = if self.b1.order.contains(o) {
            let delta = (self.b2.bytes as f64 / self.b1.bytes as f64).max(1.0);
            self.p = (self.p + delta).min(self.capacity_bytes as f64);
            self.b1.remove(o, &self.size_bytes);
            Ghost::B1
        } else if self.b2.order.contains(o) {
            let delta = (self.b1.bytes as f64 / self.b2.bytes as f64).max(1.0);
            self.p = (self.p - delta).max(0.0);
            self.b2.remove(o, &self.size_bytes);
            Ghost::B2
        } else {
            Ghost::None
        };
        if size > self.capacity_bytes {
            return Outcome::Bypassed;
        }
        while self.used_bytes() + size > self.capacity_bytes {
            if ghost == Ghost::None {
                self.evict_cold(size, evicted);
            } else {
                self.replace(ghost, evicted);
            }
        }
        self.size_bytes[o as usize] = size;
        let to = if ghost == Ghost::None {
            &mut self.t1
        } else {
            &mut self.t2
        };
        to.push(o, &self.size_bytes);
        Outcome::Admitted
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.t1.order.contains(object) || self.t2.order.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.t1.bytes + self.t2.bytes
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Unlinks the object from T1 or T2. B1, B2 and `p` are unchanged: the
    /// object does not become a ghost (that is for the policy's own
    /// evictions; a resident is never in a ghost list), so a later request
    /// is a cold miss into T1.
    fn remove(&mut self, object: ObjectIndex) {
        if self.t1.order.contains(object) {
            self.t1.remove(object, &self.size_bytes);
        } else if self.t2.order.contains(object) {
            self.t2.remove(object, &self.size_bytes);
        }
    }
}

#[cfg(test)]
mod tests;

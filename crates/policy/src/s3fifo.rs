//! S3-FIFO (Yang et al., SOSP '23), as libCacheSim `S3FIFO.c` (the current
//! version, not `S3FIFOv0.c`) with its defaults `small-size-ratio=0.10,
//! ghost-size-ratio=0.90, move-to-main-threshold=2`:
//! - small FIFO `floor(capacity / 10)` bytes, main FIFO the rest, ghost FIFO
//!   of object ids weighing `floor(0.9 * capacity)` bytes (by their sizes);
//! - a hit adds 1 to the object's frequency, capped at 3;
//! - a miss found in the ghost leaves it and enters main; any other enters
//!   small, except that until the first eviction a full small sends it to
//!   main;
//! - eviction works on main if main is over its share or small is empty,
//!   else on small; small moves its tail to main while the tail's frequency
//!   is `>= 2` (frequency reset to 0) and evicts the first other one into the
//!   ghost; main reinserts its tail at the head with frequency - 1 while it
//!   is `>= 1` and evicts the first at 0;
//! - an object larger than small is never inserted, and one exactly as
//!   large only from the ghost (libCacheSim `S3FIFO_can_insert` and
//!   `S3FIFO_insert`). So a cache that holds fewer than about ten objects
//!   caches little or nothing.
//!
//! Deviation: libCacheSim evicts for an object as large as small before it
//! refuses it; here it is refused first (`Bypassed` evicts nothing).

use super::recency::RecencyList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// Hits counted per object (libCacheSim's 2-bit clock in main).
const MAX_FREQ: u8 = 3;
/// A small object with this many hits moves to main instead of leaving.
const MOVE_TO_MAIN_FREQ: u8 = 2;

/// A FIFO over dense objects that sums its bytes.
struct Fifo {
    order: RecencyList,
    used_bytes: u64,
    capacity_bytes: u64,
}

impl Fifo {
    fn new(objects: usize, capacity_bytes: u64) -> Self {
        Fifo {
            order: RecencyList::new(objects),
            used_bytes: 0,
            capacity_bytes,
        }
    }

    fn push(&mut self, o: ObjectIndex, size: u64) {
        self.order.push_front(o);
        self.used_bytes += size;
    }

    fn remove(&mut self, o: ObjectIndex, size: u64) {
        self.order.remove(o);
        self.used_bytes -= size;
    }
}

/// Bytes of small, main and the ghost for a capacity: floor(0.1 c), the
/// rest, and floor(0.9 c), as libCacheSim's doubles give them.
fn shares(capacity_bytes: u64) -> [u64; 3] {
    let small = capacity_bytes / 10;
    [
        small,
        capacity_bytes - small,
        capacity_bytes - capacity_bytes.div_ceil(10),
    ]
}

pub(crate) struct S3Fifo {
    small: Fifo,
    main: Fifo,
    /// Ids only; their bytes count against the ghost's own capacity.
    ghost: Fifo,
    freq: Vec<u8>,
    /// Size at insertion, of residents and ghosts alike.
    size_bytes: Vec<u64>,
    has_evicted: bool,
    capacity_bytes: u64,
}

impl S3Fifo {
    pub fn new(setup: &PolicySetup) -> Self {
        let n = setup.objects;
        let capacity = setup.capacity_bytes;
        let [small_bytes, main_bytes, ghost_bytes] = shares(capacity);
        S3Fifo {
            small: Fifo::new(n, small_bytes),
            main: Fifo::new(n, main_bytes),
            ghost: Fifo::new(n, ghost_bytes),
            freq: vec![0; n],
            size_bytes: vec![0; n],
            has_evicted: false,
            capacity_bytes: capacity,
        }
    }

    fn size(&self, o: ObjectIndex) -> u64 {
        self.size_bytes[o as usize]
    }

    fn evict(&mut self, evicted: &mut Vec<ObjectIndex>) {
        self.has_evicted = true;
        if self.main.used_bytes > self.main.capacity_bytes || self.small.used_bytes == 0 {
            self.evict_main(evicted);
        } else {
            self.evict_small(evicted);
        }
    }

    /// Moves frequent tails to main until one leaves for the ghost (or small
    /// empties).
    fn evict_small(&mut self, evicted: &mut Vec<ObjectIndex>) {
        while let Some(o) = self.small.order.back() {
            let size = self.size(o);
            self.small.remove(o, size);
            if self.freq[o as usize] >= MOVE_TO_MAIN_FREQ {
                self.freq[o as usize] = 0;
                self.main.push(o, size);
            } else {
                self.remember(o, size);
                evicted.push(o);
                return;
            }
        }
    }

    /// Gives accessed tails another round, one hit less, until one leaves.
    fn evict_main(&mut self, evicted: &mut Vec<ObjectIndex>) {
        while let Some(o) = self.main.order.back() {
            let size = self.size(o);
            self.main.remove(o, size);
            if self.freq[o as usize] >= 1 {
                self.freq[o as usize] -= 1;
                self.main.push(o, size);
            } else {
                evicted.push(o);
                return;
            }
        }
    }

    /// Adds an evicted object to the ghost, forgetting its oldest entries to
    /// make room (an object larger than the ghost is not remembered).
    fn remember(&mut self, o: ObjectIndex, size: u64) {
        if size > self.ghost.capacity_bytes {
            return;
        }
        while self.ghost.used_bytes + size > self.ghost.capacity_bytes {
            let old = self.ghost.order.back().expect("ghost bytes imply a member");
            self.ghost.remove(old, self.size(old));
        }
        self.ghost.push(o, size);
    }
}

impl Policy for S3Fifo {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, size) = (request.object, request.size_bytes);
        if self.contains(o) {
            let f = &mut self.freq[o as usize];
            *f = (*f + 1).min(MAX_FREQ);
            return Outcome::Hit;
        }
        // libCacheSim forgets the ghost entry even if it then refuses `o`.
        let from_ghost = self.ghost.order.contains(o);
        if from_ghost {
            self.ghost.remove(o, self.size(o));
        }
        let small_bytes = self.small.capacity_bytes;
        if size > self.capacity_bytes || size > small_bytes || (!from_ghost && size == small_bytes)
        {
            return Outcome::Bypassed;
        }
        while self.used_bytes() + size > self.capacity_bytes {
            self.evict(evicted);
        }
        self.freq[o as usize] = 0;
        self.size_bytes[o as usize] = size;
        let to_main = from_ghost || (!self.has_evicted && self.small.used_bytes >= small_bytes);
        if to_main {
            self.main.push(o, size);
        } else {
            self.small.push(o, size);
        }
        Outcome::Admitted
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.small.order.contains(object) || self.main.order.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.small.used_bytes + self.main.used_bytes
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// The three queues take their shares of the new capacity; residents
    /// leave by the policy's own eviction (small's tail to the ghost or to
    /// main, main's tail by its frequency), and the ghost forgets its
    /// oldest ids beyond its share.
    fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        let [small, main, ghost] = shares(capacity_bytes);
        (self.small.capacity_bytes, self.main.capacity_bytes) = (small, main);
        self.ghost.capacity_bytes = ghost;
        self.capacity_bytes = capacity_bytes;
        while self.used_bytes() > capacity_bytes {
            self.evict(evicted);
        }
        while self.ghost.used_bytes > ghost {
            let old = self.ghost.order.back().expect("ghost bytes imply a member");
            self.ghost.remove(old, self.size(old));
        }
        true
    }

    /// Unlinks the object from small or main (its frequency reset). The
    /// ghost keeps what it holds and does not take the object (it remembers
    /// the policy's own evictions from small; a resident is never in it), so
    /// a later request is a plain miss into small. Whether anything was
    /// evicted yet (the warm-up rule) is unchanged.
    fn remove(&mut self, object: ObjectIndex) {
        let size = self.size(object);
        if self.small.order.contains(object) {
            self.small.remove(object, size);
        } else if self.main.order.contains(object) {
            self.main.remove(object, size);
        } else {
            return;
        }
        self.freq[object as usize] = 0;
    }
}

#[cfg(test)]
mod tests;

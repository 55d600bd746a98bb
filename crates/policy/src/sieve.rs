//! SIEVE (Zhang et al., NSDI '24), as libCacheSim `Sieve.c`: a FIFO queue
//! with one visited bit per object, set by a hit; a miss enters at the head
//! unvisited. The hand keeps its position between evictions: it walks from
//! where it stopped (the tail at first) towards the head, clearing visited
//! bits, wraps to the tail, and evicts the first unvisited object; it then
//! rests on that object's neighbour towards the head. Survivors are never
//! moved. No deviation.

use super::recency::SizedList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct Sieve {
    /// Front: head (newest); back: tail (oldest).
    residents: SizedList,
    visited: Vec<bool>,
    /// Where the next eviction starts; `None`: at the tail.
    hand: Option<ObjectIndex>,
}

impl Sieve {
    pub fn new(setup: &PolicySetup) -> Self {
        Sieve {
            residents: SizedList::new(setup),
            visited: vec![false; setup.objects],
            hand: None,
        }
    }

    fn evict(&mut self, evicted: &mut Vec<ObjectIndex>) {
        let queue = self.residents.list();
        let or_tail = |o: Option<ObjectIndex>| {
            o.or_else(|| queue.back())
                .expect("used bytes imply a member")
        };
        let mut o = or_tail(self.hand);
        while std::mem::take(&mut self.visited[o as usize]) {
            o = or_tail(queue.before(o));
        }
        self.hand = queue.before(o);
        self.residents.remove(o);
        evicted.push(o);
    }
}

impl Policy for Sieve {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let o = request.object;
        if self.residents.contains(o) {
            self.visited[o as usize] = true;
            return Outcome::Hit;
        }
        let size = request.size_bytes;
        if size > self.residents.capacity_bytes() {
            return Outcome::Bypassed;
        }
        while !self.residents.fits(size) {
            self.evict(evicted);
        }
        self.residents.push_front(o, size);
        self.visited[o as usize] = false;
        Outcome::Admitted
    }

    resident_accessors!();

    /// Evicts with the hand, as misses would (visited objects get their
    /// second chance).
    fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        while self.residents.used_bytes() > capacity_bytes {
            self.evict(evicted);
        }
        self.residents.set_capacity_bytes(capacity_bytes);
        true
    }

    /// Unlinks the object and clears its visited bit. A hand resting on it
    /// moves to its neighbour towards the head (none: the tail), where it
    /// would rest had the object been evicted; the sweep goes on from there.
    fn remove(&mut self, object: ObjectIndex) {
        if !self.residents.contains(object) {
            return;
        }
        if self.hand == Some(object) {
            self.hand = self.residents.list().before(object);
        }
        self.residents.remove(object);
        self.visited[object as usize] = false;
    }
}

#[cfg(test)]
mod tests;

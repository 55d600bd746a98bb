//! SIEVE (Zhang et al., NSDI '24), as libCacheSim `Sieve.c`: a FIFO queue
//! with one visited bit per object, set by a hit; a miss enters at the head
//! unvisited. The hand keeps its position between evictions: it walks from
//! where it stopped (the tail at first) towards the head, clearing visited
//! bits, wraps to the tail, and evicts the first unvisited object; it then
//! rests on that object's neighbour towards the head. Survivors are never
//! moved. No deviation.

use super::recency::RecencyList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct Sieve {
    /// Front: head (newest); back: tail (oldest).
    queue: RecencyList,
    visited: Vec<bool>,
    /// Where the next eviction starts; `None`: at the tail.
    hand: Option<ObjectIndex>,
    size_bytes: Vec<u64>,
    used_bytes: u64,
    capacity_bytes: u64,
}

impl Sieve {
    pub fn new(setup: &PolicySetup) -> Self {
        Sieve {
            queue: RecencyList::new(setup.objects),
            visited: vec![false; setup.objects],
            hand: None,
            size_bytes: vec![0; setup.objects],
            used_bytes: 0,
            capacity_bytes: setup.capacity_bytes,
        }
    }

    fn evict(&mut self, evicted: &mut Vec<ObjectIndex>) {
        let or_tail = |q: &RecencyList, o: Option<ObjectIndex>| {
            o.or_else(|| q.back()).expect("used bytes imply a member")
        };
        let mut o = or_tail(&self.queue, self.hand);
        while std::mem::take(&mut self.visited[o as usize]) {
            o = or_tail(&self.queue, self.queue.before(o));
        }
        self.hand = self.queue.before(o);
        self.queue.remove(o);
        self.used_bytes -= self.size_bytes[o as usize];
        evicted.push(o);
    }
}

impl Policy for Sieve {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let o = request.object;
        if self.queue.contains(o) {
            self.visited[o as usize] = true;
            return Outcome::Hit;
        }
        let size = request.size_bytes;
        if size > self.capacity_bytes {
            return Outcome::Bypassed;
        }
        while self.used_bytes + size > self.capacity_bytes {
            self.evict(evicted);
        }
        self.queue.push_front(o);
        self.visited[o as usize] = false;
        self.size_bytes[o as usize] = size;
        self.used_bytes += size;
        Outcome::Admitted
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.queue.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Unlinks the object and clears its visited bit. A hand resting on it
    /// moves to its neighbour towards the head (none: the tail), where it
    /// would rest had the object been evicted; the sweep goes on from there.
    fn remove(&mut self, object: ObjectIndex) {
        if !self.queue.contains(object) {
            return;
        }
        if self.hand == Some(object) {
            self.hand = self.queue.before(object);
        }
        self.queue.remove(object);
        self.visited[object as usize] = false;
        self.used_bytes -= self.size_bytes[object as usize];
    }
}

#[cfg(test)]
mod tests;

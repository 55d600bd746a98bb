//! `belady`: the offline bound (design §6), from each request's
//! `next_access`. Evicts the residents whose next request is furthest
//! (ties: the higher object index), and bypasses a candidate that is never
//! requested again or whose next request is no sooner than that of every
//! victim it would displace. For unit sizes this is Belady's MIN with bypass
//! and minimises misses (checked against brute force below); for variable
//! sizes the optimum is NP-hard and this is a heuristic bound, not a proof.

use std::cmp::Reverse;

use super::heap::ScoredResidents;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request, NEVER};

pub(crate) struct Belady {
    /// Residents keyed so the furthest next access is popped first.
    residents: ScoredResidents<Reverse<(u64, ObjectIndex)>>,
}

impl Belady {
    pub fn new(setup: &PolicySetup) -> Self {
        Belady {
            residents: ScoredResidents::new(setup),
        }
    }
}

impl Policy for Belady {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, next) = (request.object, request.next_access);
        let key = Reverse((next, o));
        self.residents
            .access(o, request.size_bytes, key, evicted, |victims| {
                next != NEVER
                    && victims
                        .iter()
                        .all(|&(_, Reverse((v_next, _)))| next < v_next)
            })
    }

    resident_accessors!();

    /// The object leaves the resident heap; there is no history (its next
    /// request brings its next access with it).
    fn remove(&mut self, object: ObjectIndex) {
        self.residents.remove(object);
    }

    fn reads_next_access(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;

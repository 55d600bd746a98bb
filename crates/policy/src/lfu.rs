//! LFU over decayed counts (`counts.rs`): evicts the resident requested
//! least often in the decayed window, ties to the least recently used (the
//! lowest tick of last access). Every miss that fits is admitted. `lfru` is
//! this policy with Colibri's admission test ([`Lfu::gated`]).

use super::counts::DecayedCounts;
use super::heap::ScoredResidents;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// Whether a candidate with count `hot` may displace a resident with count
/// `cold`.
pub(super) type Gate = fn(hot: u32, cold: u32) -> bool;

pub(crate) struct Lfu {
    /// Online counts only: `lfu` and `lfru` are the baselines that learn
    /// nothing beforehand, so they ignore `prior_rate`.
    counts: DecayedCounts,
    /// Residents keyed by (decayed count, tick of last access).
    residents: ScoredResidents<(u32, u64)>,
    gate: Option<Gate>,
}

impl Lfu {
    pub fn new(setup: &PolicySetup) -> Self {
        Lfu::gated(setup, None)
    }

    /// LFU whose misses must pass `gate` against every victim they need.
    pub(super) fn gated(setup: &PolicySetup, gate: Option<Gate>) -> Self {
        Lfu {
            counts: DecayedCounts::new(setup, false),
            residents: ScoredResidents::new(setup),
            gate,
        }
    }
}

impl Policy for Lfu {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, tick) = (request.object, request.time);
        if self.counts.record(o, tick) {
            let counts = &self.counts;
            self.residents
                .rekey(|v, _, (_, last_tick)| (counts.count(v), last_tick));
        }
        let hot = self.counts.count(o);
        let gate = self.gate;
        self.residents.access(
            o,
            request.size_bytes,
            (hot, tick),
            evicted,
            |victims| match gate {
                None => true,
                Some(promotes) => victims.iter().all(|&(_, (cold, _))| promotes(hot, cold)),
            },
        )
    }

    resident_accessors!();

    /// The least frequent go first (ties to the least recent), as a
    /// miss's victims do.
    fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        self.residents.resize(capacity_bytes, evicted);
        true
    }

    /// The object leaves the resident heap. Its decayed count stays (and
    /// keeps decaying): counts are per object, resident or not, so a later
    /// request finds it as if the object had been evicted.
    fn remove(&mut self, object: ObjectIndex) {
        self.residents.remove(object);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, replay, setup, unit};
    use super::*;
    use Outcome::{Admitted as A, Bypassed as B, Hit as H};

    #[test]
    fn evicts_the_least_frequent_ties_to_the_least_recent() {
        // Capacity 2 slots, a=0 b=1 c=2; (count, last tick) per resident:
        // t0 a miss, free: {a(1,0)}        t1 a hit: {a(2,1)}
        // t2 b miss, free: {a(2,1) b(1,2)}
        // t3 c: evict b (count 1): {a(2,1) c(1,3)}
        // t4 b (now count 2): evict c (1): {a(2,1) b(2,4)}
        // t5 c (2): a and b tie at 2, a is less recent: evict a
        // t6 a (3): b(2,4) and c(2,5) tie, evict b
        let r = replay(&mut Lfu::new(&setup(2, 3)), &unit(&[0, 0, 1, 2, 1, 2, 0]));
        let expected = [(A, vec![]), (H, vec![]), (A, vec![])];
        assert_eq!(r[..3], expected);
        assert_eq!(
            r[3..],
            [(A, vec![1]), (A, vec![2]), (A, vec![0]), (A, vec![1])]
        );
        assert_eq!(misses(&r), 6);
    }

    #[test]
    fn byte_weighted_with_halving_every_four_ticks() {
        // Capacity 10, halved at ticks 4, 8. Sizes a=4 b=4 c=3 d=11 e=6.
        // t0 a miss {a(1,0)} 4 B; t1, t2 a hits {a(3,2)}
        // t3 b miss {a(3,2) b(1,3)} 8 B
        // t4 halving: a 3 -> 1, b 1 -> 0; then the b hit: {a(1,2) b(1,4)}
        // t5 c(3): 8 + 3 > 10, a and b tie at 1, a less recent: evict a
        //    (without the halving b, count 1 < 3, would go). 7 B.
        // t6 d(11) larger than the cache: bypassed, evicts nothing.
        // t7 e(6): 7 + 6 > 10; victims b(1,4) then c(1,5): b frees 4,
        //    3 + 6 fits: evict b only. 9 B.
        let mut s = setup(10, 5);
        s.params.halve_every_ticks = 4;
        let trace = [
            (0, 4),
            (0, 4),
            (0, 4),
            (1, 4),
            (1, 4),
            (2, 3),
            (3, 11),
            (4, 6),
        ];
        let mut lfu = Lfu::new(&s);
        let r = replay(&mut lfu, &trace);
        let expected = [
            (A, vec![]),
            (H, vec![]),
            (H, vec![]),
            (A, vec![]),
            (H, vec![]),
        ];
        assert_eq!(r[..5], expected);
        assert_eq!(r[5..], [(A, vec![0]), (B, vec![]), (A, vec![1])]);
        assert_eq!(lfu.used_bytes(), 9);
    }
}

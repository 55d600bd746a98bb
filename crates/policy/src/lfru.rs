//! LFRU as in Colibri's `tier.h` (design §6): LFU over integer heat counters
//! (every request counts, all halved every N ticks), where a missing
//! candidate replaces the coldest resident only when `hot > cold + cold/4 + 4`
//! (a 25 % plus 4-request hysteresis against churn). Colibri swaps one
//! expert of one size; byte-weighted, the candidate must pass the test
//! against every victim it needs (coldest first), else it is bypassed and
//! evicts nothing. While there is free room it is admitted without the test.
//! Ties in heat go to the least recently used, as Colibri's recency bonus
//! does within 255 ticks.

use super::lfu::Lfu;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct Lfru(Lfu);

/// Colibri's promotion rule, in 64 bits so a saturated counter cannot wrap.
fn promotes(hot: u32, cold: u32) -> bool {
    let (hot, cold) = (u64::from(hot), u64::from(cold));
    hot > cold + cold / 4 + 4
}

impl Lfru {
    pub fn new(setup: &PolicySetup) -> Self {
        Lfru(Lfu::gated(setup, Some(promotes)))
    }
}

impl Policy for Lfru {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        self.0.access(request, evicted)
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.0.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.0.used_bytes()
    }

    fn capacity_bytes(&self) -> u64 {
        self.0.capacity_bytes()
    }

    /// As `lfu`: the coldest go first. Shrinking evicts without the
    /// promotion test, which guards admissions, not a smaller budget.
    fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        self.0.resize(capacity_bytes, evicted)
    }

    /// As `lfu`: the object leaves the residents, its heat counter stays.
    fn remove(&mut self, object: ObjectIndex) {
        self.0.remove(object);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, replay, setup, unit};
    use super::*;
    use Outcome::{Admitted as A, Bypassed as B, Hit as H};

    #[test]
    fn a_candidate_needs_more_than_a_quarter_plus_four_over_the_coldest() {
        assert!(!promotes(5, 1) && promotes(6, 1)); // 1 + 0 + 4 = 5
        assert!(!promotes(14, 8) && promotes(15, 8)); // 8 + 2 + 4 = 14
        assert!(promotes(u32::MAX, u32::MAX / 2)); // no wrap
                                                   // Capacity 2 slots, a=0 b=1 c=2.
                                                   // t0 a, t1 b: free room, admitted untested (heat 1 each).
                                                   // t2..t6 c with heat 1..5 against the coldest, a (heat 1, tie with b
                                                   //   broken by recency): needs > 5: bypassed five times.
                                                   // t7 c heat 6 > 5: replaces a.
                                                   // t8 a heat 2 against b (heat 1): 2 > 5 fails: bypassed.
                                                   // t9 b: hit.
        let r = replay(
            &mut Lfru::new(&setup(2, 3)),
            &unit(&[0, 1, 2, 2, 2, 2, 2, 2, 0, 1]),
        );
        let outcomes: Vec<_> = r.iter().map(|(o, _)| *o).collect();
        assert_eq!(outcomes, [A, A, B, B, B, B, B, A, B, H]);
        assert_eq!(r[7].1, vec![0]);
        assert_eq!(misses(&r), 9);
    }

    #[test]
    fn byte_weighted_candidate_must_beat_every_victim() {
        // Capacity 10; a=0 (5 B), b=1 (5 B), c=2 (10 B), d=3 (5 B).
        // t0 a, t1 b: free room, admitted; t2..t8 b hits: heat a 1, b 8.
        // t9..t14 c (10 B) needs both victims: a (cold 1, needs > 5) and b
        //   (cold 8, needs > 14); heat 1..6 never beats b: six bypasses,
        //   nothing evicted, though at t14 (heat 6) it beats a.
        // t15..t20 d (5 B) needs only a (the coldest): bypassed at heat 1..5,
        //   admitted at heat 6 (t20), evicting a.
        let mut trace = vec![(0, 5)];
        trace.extend([(1, 5); 8]);
        trace.extend([(2, 10); 6]);
        trace.extend([(3, 5); 6]);
        let mut lfru = Lfru::new(&setup(10, 4));
        let r = replay(&mut lfru, &trace);
        assert!(r[2..9].iter().all(|x| *x == (H, vec![])));
        assert!(r[9..20].iter().all(|x| *x == (B, vec![])));
        assert_eq!(r[20], (A, vec![0]));
        assert_eq!(misses(&r), 14);
        assert!(lfru.contains(1) && lfru.contains(3) && lfru.used_bytes() == 10);
    }

    #[test]
    fn shrinking_evicts_the_coldest_without_the_promotion_test() {
        // Room for 3 unit experts: 0 asked 3 times, 1 twice, 2 once (all
        // admitted into free room). Shrunk to 1: 2 then 1 go (coldest
        // first), 0 stays. Grown to 3 again: nothing evicted, and 1 fits
        // into the free room without the test.
        let mut p = Lfru::new(&setup(3, 3));
        replay(&mut p, &unit(&[0, 0, 0, 1, 1, 2]));
        let mut evicted = Vec::new();
        assert!(p.resize(1, &mut evicted));
        assert_eq!(evicted, vec![2, 1]);
        assert!(p.contains(0) && p.used_bytes() == 1 && p.capacity_bytes() == 1);
        evicted.clear();
        assert!(p.resize(3, &mut evicted));
        assert!(evicted.is_empty());
        assert_eq!(misses(&replay(&mut p, &unit(&[1]))), 1);
        assert!(p.contains(1) && p.used_bytes() == 2);
    }
}

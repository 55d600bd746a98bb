//! LRU and FIFO: one list, one difference: LRU moves a hit to the front,
//! FIFO leaves the insertion order alone (libCacheSim `LRU`, `FIFO`).
//! Public beside `build` for the simulator's parted LRU replay, which
//! runs it without a vtable and reads its recency order.

use super::recency::SizedList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub struct Lru {
    residents: SizedList,
    move_on_hit: bool,
}

impl Lru {
    /// `move_on_hit`: true for LRU, false for FIFO.
    pub fn new(setup: &PolicySetup, move_on_hit: bool) -> Self {
        Lru {
            residents: SizedList::new(setup),
            move_on_hit,
        }
    }

    /// The residents, newest first.
    pub fn newest_first(&self) -> Vec<ObjectIndex> {
        let mut order: Vec<ObjectIndex> = self.residents.list().iter_from_back().collect();
        order.reverse();
        order
    }

    /// A hit's whole work, `access` without a request: true, and `o` made
    /// the newest, if `o` is resident.
    #[inline]
    pub fn hit(&mut self, o: ObjectIndex) -> bool {
        let resident = self.residents.contains(o);
        if resident && self.move_on_hit {
            self.residents.move_to_front(o);
        }
        resident
    }

    /// Raises the capacity (`pinned-lru` hands an unpinned object's bytes to
    /// its LRU part); nothing is evicted, so it must not fall below the used
    /// bytes.
    pub(super) fn set_capacity_bytes(&mut self, capacity_bytes: u64) {
        self.residents.set_capacity_bytes(capacity_bytes);
    }
}

impl Policy for Lru {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let o = request.object;
        if self.hit(o) {
            return Outcome::Hit;
        }
        let size = request.size_bytes;
        if size > self.residents.capacity_bytes() {
            return Outcome::Bypassed;
        }
        while !self.residents.fits(size) {
            let victim = self.residents.pop_back();
            evicted.push(victim.expect("used bytes imply a member"));
        }
        self.residents.push_front(o, size);
        Outcome::Admitted
    }

    resident_accessors!();

    /// Evicts from the back (least recent for LRU, oldest for FIFO), as
    /// misses would.
    fn resize(&mut self, capacity_bytes: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        while self.residents.used_bytes() > capacity_bytes {
            evicted.push(
                self.residents
                    .pop_back()
                    .expect("used bytes imply a member"),
            );
        }
        self.residents.set_capacity_bytes(capacity_bytes);
        true
    }

    /// Unlinks the object from the order; the others keep their places. No
    /// history to keep.
    fn remove(&mut self, object: ObjectIndex) {
        self.residents.remove(object);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, remove, replay, setup, unit};
    use super::*;

    #[test]
    fn lru_keeps_the_recent_fifo_the_first() {
        // Capacity 3 slots; trace a b c a d b (a=0 ...). By hand:
        // LRU: a b c miss; a hit (order a c b); d evicts b; b misses.
        // FIFO: a b c miss; a hit (order unchanged); d evicts a; b hits.
        let trace = unit(&[0, 1, 2, 0, 3, 1]);
        let lru = replay(&mut Lru::new(&setup(3, 4), true), &trace);
        assert_eq!(misses(&lru), 5);
        assert_eq!(lru[4].1, vec![1]);
        let fifo = replay(&mut Lru::new(&setup(3, 4), false), &trace);
        assert_eq!(misses(&fifo), 4);
        assert_eq!(fifo[4].1, vec![0]);
    }

    #[test]
    fn byte_weighted_evicts_until_it_fits_and_skips_the_oversized() {
        // Capacity 10: a(4) b(4) then c(6): 8 + 6 > 10 evicts a (4 + 6 = 10
        // fits exactly). d(11) is larger than the cache: bypassed, evicts
        // nothing. e(10) equals the capacity: admitted after evicting all.
        let trace = [(0, 4), (1, 4), (2, 6), (3, 11), (4, 10)];
        let r = replay(&mut Lru::new(&setup(10, 5), true), &trace);
        assert_eq!(r[2], (Outcome::Admitted, vec![0]));
        assert_eq!(r[3], (Outcome::Bypassed, vec![]));
        assert_eq!(r[4], (Outcome::Admitted, vec![1, 2]));
    }

    #[test]
    fn removing_the_lru_tail_makes_the_next_miss_evict_the_next_one() {
        // Capacity 10; a=0(4) b=1(3) c=2(3) d=3(6). Order front..back.
        //  1-3 a b c: [c b a] 10.  4 a hit: [a c b], b is the tail.
        //  remove b: [a c] 7 (3 freed).  remove b again: a no-op.
        //  5 d(6): 7 + 6 > 10 evicts the tail c (without the removal it
        //    would have evicted b, then c); 4 + 6 fits: [d a] 10.
        //  remove the head d: [a] 4.  6 b(3): 7, nothing evicted: [b a].
        let mut lru = Lru::new(&setup(10, 4), true);
        let r = replay(&mut lru, &[(0, 4), (1, 3), (2, 3), (0, 4)]);
        assert_eq!(r[3].0, Outcome::Hit);
        assert_eq!(remove(&mut lru, 1), 3);
        assert_eq!(remove(&mut lru, 1), 0);
        assert_eq!(lru.used_bytes(), 7);
        assert_eq!(replay(&mut lru, &[(3, 6)]), [(Outcome::Admitted, vec![2])]);
        assert_eq!(
            lru.residents.list().iter_from_back().collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!(remove(&mut lru, 3), 6);
        assert_eq!(replay(&mut lru, &[(1, 3)]), [(Outcome::Admitted, vec![])]);
        assert_eq!(
            lru.residents.list().iter_from_back().collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(lru.used_bytes(), 7);
    }

    #[test]
    fn resize_evicts_from_the_back_and_a_larger_capacity_evicts_nothing() {
        // Capacity 3; 0 1 2 then a hit on 0: LRU order (front..back)
        // 0 2 1, FIFO order 2 1 0. Shrinking to 1 slot: LRU evicts 1 then
        // 2 (keeps 0), FIFO evicts 0 then 1 (keeps 2). Growing to 4 evicts
        // nothing, and a new object then fits beside the kept one.
        let trace = unit(&[0, 1, 2, 0]);
        for (move_on_hit, expect, kept) in [(true, vec![1, 2], 0), (false, vec![0, 1], 2)] {
            let mut p = Lru::new(&setup(3, 4), move_on_hit);
            replay(&mut p, &trace);
            let mut evicted = Vec::new();
            assert!(p.resize(1, &mut evicted));
            assert_eq!(evicted, expect);
            assert!(p.contains(kept) && p.used_bytes() == 1 && p.capacity_bytes() == 1);
            evicted.clear();
            assert!(p.resize(4, &mut evicted));
            assert!(evicted.is_empty());
            assert_eq!(misses(&replay(&mut p, &unit(&[3, kept]))), 1);
        }
    }
}

//! `pinned-lru` (Colibri today, design §6): `knowledge.pinned` objects are
//! resident from the start and never evicted; their bytes (from
//! `knowledge.sizes_bytes`, since a pin may be requested late or never) are
//! charged to the capacity, and the rest of it is an ordinary LRU. An object
//! that does not fit the LRU part is bypassed: it could only enter by
//! evicting a pin.
//!
//! [`Policy::remove`] of a pin unpins it for good: it is no longer resident,
//! its bytes go to the LRU part (whose capacity grows by them), and a later
//! request for it is an ordinary LRU miss. A removed LRU object just leaves
//! the LRU.

use super::lru::Lru;
use super::static_plan::pinned_set;
use super::{Knowledge, ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct PinnedLru {
    pinned: Vec<bool>,
    pinned_bytes: u64,
    /// `knowledge.sizes_bytes`: what a pin is charged, and freed on removal.
    sizes_bytes: Vec<u64>,
    capacity_bytes: u64,
    /// LRU over the capacity the pins leave.
    lru: Lru,
}

impl PinnedLru {
    /// Needs `sizes_bytes` and pins that fit (`build` checks).
    pub fn new(setup: &PolicySetup) -> Self {
        let (pinned, pinned_bytes) = pinned_set(setup);
        let rest = PolicySetup {
            capacity_bytes: setup.capacity_bytes.saturating_sub(pinned_bytes),
            objects: setup.objects,
            knowledge: Knowledge::default(),
            params: setup.params.clone(),
        };
        PinnedLru {
            pinned,
            pinned_bytes,
            sizes_bytes: setup.knowledge.sizes_bytes.clone(),
            capacity_bytes: setup.capacity_bytes,
            lru: Lru::new(&rest, true),
        }
    }
}

impl Policy for PinnedLru {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        if self.pinned[request.object as usize] {
            return Outcome::Hit;
        }
        self.lru.access(request, evicted)
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.pinned[object as usize] || self.lru.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.pinned_bytes + self.lru.used_bytes()
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Unpins a pin (module doc) or takes an object out of the LRU part.
    fn remove(&mut self, object: ObjectIndex) {
        if std::mem::take(&mut self.pinned[object as usize]) {
            self.pinned_bytes -= self.sizes_bytes[object as usize];
            let rest = self.capacity_bytes.saturating_sub(self.pinned_bytes);
            self.lru.set_capacity_bytes(rest);
        } else {
            self.lru.remove(object);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, remove, replay, setup, unit};
    use super::*;
    use Outcome::{Admitted as A, Bypassed as B, Hit as H};

    #[test]
    fn pins_hit_from_the_start_and_the_rest_is_lru() {
        // Capacity 3 slots, pin {0}: LRU over 2 slots; order most recent first.
        // t0 1 [1], t1 2 [2 1], t2 0 pinned hit, t3 3 evicts 1 [3 2],
        // t4 1 evicts 2 [1 3], t5 0 hit, t6 2 evicts 3.
        let mut s = setup(3, 4);
        s.knowledge.sizes_bytes = vec![1; 4];
        s.knowledge.pinned = vec![0];
        let mut p = PinnedLru::new(&s);
        assert!(p.contains(0) && p.used_bytes() == 1);
        let r = replay(&mut p, &unit(&[1, 2, 0, 3, 1, 0, 2]));
        let expected = [(A, vec![]), (A, vec![]), (H, vec![]), (A, vec![1])];
        assert_eq!(r[..4], expected);
        assert_eq!(r[4..], [(A, vec![2]), (H, vec![]), (A, vec![3])]);
        assert_eq!(misses(&r), 5);
        assert_eq!(p.used_bytes(), 3);
    }

    #[test]
    fn byte_weighted_pins_shrink_the_lru_part() {
        // Capacity 10, pin 0 (4 B): LRU part 6 B. Sizes 1=3, 2=3, 3=7.
        // t0 0 hit (4 B charged from the start), t1 1 and t2 2 fill the
        // LRU part (4 + 6 = 10 B); t3 3 (7 B) fits the cache but not the
        // LRU part: bypassed, evicts nothing; t4 1 hit; t5 3 bypassed again.
        let mut s = setup(10, 4);
        s.knowledge.sizes_bytes = vec![4, 3, 3, 7];
        s.knowledge.pinned = vec![0];
        let mut p = PinnedLru::new(&s);
        let r = replay(&mut p, &[(0, 4), (1, 3), (2, 3), (3, 7), (1, 3), (3, 7)]);
        let outcomes: Vec<_> = r.iter().map(|(o, _)| *o).collect();
        assert_eq!(outcomes, [H, A, A, B, H, B]);
        assert!(r.iter().all(|(_, evicted)| evicted.is_empty()));
        assert_eq!(p.used_bytes(), 10);
    }

    #[test]
    fn a_removed_pin_is_unpinned_and_its_bytes_go_to_the_lru_part() {
        // Capacity 10, pin 0 (4 B): LRU part 6 B. Sizes 1=3, 2=7.
        // t0 1: [1] 3, used 7. t1 2 (7 B): over the LRU part: bypassed.
        // remove 0: unpinned, 4 B freed; the LRU part is now 10 B.
        // t2 2: 3 + 7 fits: admitted. t3 0: an LRU miss now: 10 + 4 > 10
        // evicts the LRU tail 1, then 7 + 4 > 10 evicts 2.
        let mut s = setup(10, 3);
        s.knowledge.sizes_bytes = vec![4, 3, 7];
        s.knowledge.pinned = vec![0];
        let mut p = PinnedLru::new(&s);
        let r = replay(&mut p, &[(1, 3), (2, 7)]);
        assert_eq!(r[1], (B, vec![]));
        assert_eq!(remove(&mut p, 0), 4);
        assert_eq!(remove(&mut p, 0), 0);
        let r = replay(&mut p, &[(2, 7), (0, 4)]);
        assert_eq!(r, [(A, vec![]), (A, vec![1, 2])]);
        assert_eq!(p.used_bytes(), 4);
        assert_eq!(remove(&mut p, 0), 4);
        assert_eq!(p.used_bytes(), 0);
    }
}

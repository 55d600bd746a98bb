//! Segmented LRU, as libCacheSim `SLRU.c` with its defaults: 4 segments of
//! `capacity / 4` bytes each; segment 0 is the probationary end, the last
//! the most protected. [`Segmented`] is the structure and is shared with
//! `wtinylfu`, whose main cache is the same thing with two segments (20 %
//! probation, 80 % protected, libCacheSim's `seg-size=1:4`).
//!
//! libCacheSim semantics, kept as they are:
//! - a miss goes into the lowest segment with room for it (so while the
//!   cache warms up, segments fill bottom to top), else, after evicting,
//!   into segment 0;
//! - a hit moves the object to the front of the next segment up (the top
//!   segment: to its front); an overfull segment then moves its tail to the
//!   front of the segment below, cascading down; an overfull segment 0
//!   evicts, so with unequal sizes a hit can evict;
//! - the victim is the tail of the lowest non-empty segment;
//! - an object larger than the smallest segment is not inserted
//!   (libCacheSim `SLRU_can_insert`).

use super::recency::RecencyList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// libCacheSim's default number of segments.
const SEGMENTS: usize = 4;
/// `segment_of` of an object that is not resident.
const ABSENT: u8 = u8::MAX;

/// LRU segments over dense objects with a byte limit each and a total
/// capacity.
pub(crate) struct Segmented {
    /// Segment 0 first (probation), the most protected last.
    segments: Vec<RecencyList>,
    segment_used_bytes: Vec<u64>,
    segment_max_bytes: Vec<u64>,
    segment_of: Vec<u8>,
    size_bytes: Vec<u64>,
    used_bytes: u64,
    capacity_bytes: u64,
    /// The smallest segment: larger objects are never inserted.
    largest_object_bytes: u64,
}

impl Segmented {
    /// `segment_max_bytes[0]` is the probationary segment. The capacity may
    /// exceed the segments' sum by rounding; the total is what evicts.
    pub fn new(objects: usize, capacity_bytes: u64, segment_max_bytes: Vec<u64>) -> Self {
        assert!(!segment_max_bytes.is_empty() && segment_max_bytes.len() < ABSENT as usize);
        Segmented {
            segments: (0..segment_max_bytes.len())
                .map(|_| RecencyList::new(objects))
                .collect(),
            segment_used_bytes: vec![0; segment_max_bytes.len()],
            largest_object_bytes: segment_max_bytes.iter().copied().min().unwrap_or(0),
            segment_max_bytes,
            segment_of: vec![ABSENT; objects],
            size_bytes: vec![0; objects],
            used_bytes: 0,
            capacity_bytes,
        }
    }

    pub fn contains(&self, o: ObjectIndex) -> bool {
        self.segment_of[o as usize] != ABSENT
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.size_bytes[o as usize]
    }

    pub fn len(&self) -> usize {
        self.segments.iter().map(RecencyList::len).sum()
    }

    /// Whether an object of `size` may be inserted at all.
    pub fn can_hold(&self, size: u64) -> bool {
        size <= self.capacity_bytes && size <= self.largest_object_bytes
    }

    /// A hit on a resident: promotes it one segment and cools the segments
    /// it overfills; objects that fall out of segment 0 go to `evicted`.
    pub fn hit(&mut self, o: ObjectIndex, evicted: &mut Vec<ObjectIndex>) {
        let id = self.segment_of[o as usize] as usize;
        if id + 1 == self.segments.len() {
            self.segments[id].move_to_front(o);
            return;
        }
        self.unlink(o);
        self.link_front(o, id + 1);
        // `o` is at the front and no larger than any segment, so only
        // others move down (`can_hold`).
        while self.segment_used_bytes[id + 1] > self.segment_max_bytes[id + 1] {
            self.cool(id + 1, evicted);
        }
    }

    /// Moves the tail of segment `id` down one segment (segment 0 evicts),
    /// cascading while the segment below is overfull.
    fn cool(&mut self, id: usize, evicted: &mut Vec<ObjectIndex>) {
        if id == 0 {
            self.evict(evicted);
            return;
        }
        let o = self.segments[id]
            .back()
            .expect("an overfull segment has a tail");
        self.unlink(o);
        self.link_front(o, id - 1);
        while self.segment_used_bytes[id - 1] > self.segment_max_bytes[id - 1] {
            self.cool(id - 1, evicted);
        }
    }

    /// Residents in eviction order: segment 0 from its tail, then upwards.
    pub fn victims(&self) -> impl Iterator<Item = ObjectIndex> + '_ {
        self.segments.iter().flat_map(RecencyList::iter_from_back)
    }

    /// Evicts the next victim (see [`Segmented::victims`]).
    pub fn evict(&mut self, evicted: &mut Vec<ObjectIndex>) {
        let o = self.victims().next().expect("evicting from an empty cache");
        self.unlink(o);
        self.used_bytes -= self.size_bytes[o as usize];
        evicted.push(o);
    }

    /// Forgets a resident (a no-op for a non-resident): it leaves its
    /// segment, whose bytes and the total drop by its size. Nothing moves
    /// between segments; the room is used by later inserts and demotions.
    pub fn remove(&mut self, o: ObjectIndex) {
        if self.contains(o) {
            self.unlink(o);
            self.used_bytes -= self.size_bytes[o as usize];
        }
    }

    /// Inserts a non-resident that fits the total capacity (the caller
    /// evicted) into the lowest segment with room, else into segment 0.
    pub fn insert(&mut self, o: ObjectIndex, size: u64) {
        debug_assert!(self.used_bytes + size <= self.capacity_bytes);
        let id = (0..self.segments.len())
            .find(|&i| self.segment_used_bytes[i] + size <= self.segment_max_bytes[i])
            .unwrap_or(0);
        self.size_bytes[o as usize] = size;
        self.used_bytes += size;
        self.link_front(o, id);
    }

    fn unlink(&mut self, o: ObjectIndex) {
        let id = self.segment_of[o as usize] as usize;
        self.segments[id].remove(o);
        self.segment_used_bytes[id] -= self.size_bytes[o as usize];
        self.segment_of[o as usize] = ABSENT;
    }

    fn link_front(&mut self, o: ObjectIndex, id: usize) {
        self.segments[id].push_front(o);
        self.segment_used_bytes[id] += self.size_bytes[o as usize];
        self.segment_of[o as usize] = id as u8;
    }
}

pub(crate) struct Slru {
    cache: Segmented,
}

impl Slru {
    pub fn new(setup: &PolicySetup) -> Self {
        let segment_bytes = setup.capacity_bytes / SEGMENTS as u64;
        Slru {
            cache: Segmented::new(
                setup.objects,
                setup.capacity_bytes,
                vec![segment_bytes; SEGMENTS],
            ),
        }
    }
}

impl Policy for Slru {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, size) = (request.object, request.size_bytes);
        if self.cache.contains(o) {
            self.cache.hit(o, evicted);
            return Outcome::Hit;
        }
        if !self.cache.can_hold(size) {
            return Outcome::Bypassed;
        }
        while self.cache.used_bytes() + size > self.cache.capacity_bytes() {
            self.cache.evict(evicted);
        }
        self.cache.insert(o, size);
        Outcome::Admitted
    }

    resident_accessors!(cache);

    /// [`Segmented::remove`]: the object leaves its segment; no history.
    fn remove(&mut self, object: ObjectIndex) {
        self.cache.remove(object);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, replay, setup, unit};
    use super::*;

    #[test]
    fn hits_promote_one_segment_and_demotions_cascade() {
        // Capacity 4: four segments of 1 (S0 probation .. S3 protected).
        // a=0 .. g=6. By hand:
        //  1-4 a b c d: each goes to the lowest segment with room:
        //      S0[a] S1[b] S2[c] S3[d]
        //  5 e: full; the victim is the tail of S0: a. S0[e]
        //  6 b hit: S1 -> S2 [b c], overfull: c down to S1. S1[c] S2[b]
        //  7 e hit: S0 -> S1 [e c], overfull: c down to S0. S0[c] S1[e]
        //  8 f: evicts S0's c. S0[f]
        //  9 d hit: already at the top, stays. 10 b hit: S2 -> S3 [b d]:
        //      d down to S2. S2[d] S3[b]
        // 11 g: evicts S0's f.   Final: S0[g] S1[e] S2[d] S3[b]
        let trace = unit(&[0, 1, 2, 3, 4, 1, 4, 5, 3, 1, 6]);
        let r = replay(&mut Slru::new(&setup(4, 7)), &trace);
        let evictions: Vec<_> = r.iter().map(|(_, e)| e.clone()).collect();
        assert_eq!(misses(&r), 7);
        assert_eq!(r[5].0, Outcome::Hit);
        assert_eq!(r[9].0, Outcome::Hit);
        let expect: [&[ObjectIndex]; 11] =
            [&[], &[], &[], &[], &[0], &[], &[], &[2], &[], &[], &[5]];
        assert_eq!(evictions, expect.map(<[_]>::to_vec));
    }

    #[test]
    fn byte_weighted_hit_can_evict_and_large_objects_bypass() {
        // Capacity 20: segments of 5 bytes. a=0 .. f=5, x=6. By hand
        // (segment contents front..tail, bytes):
        //  1 x(6): larger than a segment: bypassed.
        //  2 a(5): S0[a]5.  3 b(2): S0 full -> S1[b]2.
        //  4 c(3): S1 2+3 <= 5 -> S1[c b]5.  5 d(5): S2[d]5.  6 e(4): S3[e]4.
        //  7 a hit: S1[a c b]10 > 5: b down -> S0[b]2, S1 8 > 5: c down
        //    -> S0[c b]5, S1[a]5. Nothing evicted.
        //  8 b hit: S0[c]3, S1[b a]7 > 5: a down -> S0[a c]8 > 5: segment 0
        //    evicts its tail c. S0[a]5 S1[b]2: a hit that evicts c.
        //  9 f(5): used 16 + 5 > 20: evict S0's tail a; S0 has room: S0[f].
        let trace = [
            (6, 6),
            (0, 5),
            (1, 2),
            (2, 3),
            (3, 5),
            (4, 4),
            (0, 5),
            (1, 2),
            (5, 5),
        ];
        let mut slru = Slru::new(&setup(20, 7));
        let r = replay(&mut slru, &trace);
        assert_eq!(r[0], (Outcome::Bypassed, vec![]));
        assert!(r[1..6].iter().all(|x| *x == (Outcome::Admitted, vec![])));
        assert_eq!(r[6], (Outcome::Hit, vec![]));
        assert_eq!(r[7], (Outcome::Hit, vec![2]));
        assert_eq!(r[8], (Outcome::Admitted, vec![0]));
        assert_eq!(slru.used_bytes(), 5 + 2 + 5 + 4);
    }
}

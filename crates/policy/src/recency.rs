//! An intrusive doubly linked list over dense object indices: the recency
//! (or insertion) order behind LRU, FIFO, SLRU, ARC, S3-FIFO and W-TinyLFU.
//! O(1) insert, remove and move with no allocation after creation; and
//! `SizedList`, such a list of residents that counts their bytes against a
//! capacity (LRU, FIFO, CLOCK, SIEVE, frequency admission).

use super::{ObjectIndex, PolicySetup};

const NIL: u32 = u32::MAX;

/// The neighbours of one node. Both in one record, so that an unlink or a
/// link touches one cache line per node rather than one per array: replays
/// run this list once or twice a request, over more objects than L1 holds.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// `NIL` for a non-member: membership needs no array of its own.
    prev: u32,
    next: u32,
}

/// Objects in order from front (most recent) to back (next victim).
#[derive(Debug, Clone)]
pub(crate) struct RecencyList {
    /// The links of member `o`; index `objects` is the sentinel (its `next`
    /// is the front, its `prev` the back).
    links: Vec<Link>,
    len: usize,
}

impl RecencyList {
    pub fn new(objects: usize) -> Self {
        let sentinel = objects as u32;
        let mut links = vec![
            Link {
                prev: NIL,
                next: NIL
            };
            objects + 1
        ];
        links[objects] = Link {
            prev: sentinel,
            next: sentinel,
        };
        RecencyList { links, len: 0 }
    }

    #[inline]
    fn sentinel(&self) -> u32 {
        (self.links.len() - 1) as u32
    }

    #[inline]
    pub fn contains(&self, o: ObjectIndex) -> bool {
        debug_assert!(o < self.sentinel());
        self.links[o as usize].prev != NIL
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Inserts a non-member at the front.
    #[inline]
    pub fn push_front(&mut self, o: ObjectIndex) {
        let s = self.sentinel();
        self.link_after(s, o);
    }

    #[inline]
    fn link_after(&mut self, at: u32, o: ObjectIndex) {
        debug_assert!(!self.contains(o));
        let after = self.links[at as usize].next;
        self.links[o as usize] = Link {
            prev: at,
            next: after,
        };
        self.links[at as usize].next = o;
        self.links[after as usize].prev = o;
        self.len += 1;
    }

    /// Removes a member.
    #[inline]
    pub fn remove(&mut self, o: ObjectIndex) {
        debug_assert!(self.contains(o));
        let Link { prev, next } = self.links[o as usize];
        self.links[prev as usize].next = next;
        self.links[next as usize].prev = prev;
        self.links[o as usize].prev = NIL;
        self.len -= 1;
    }

    /// Moves a member to the front.
    #[inline]
    pub fn move_to_front(&mut self, o: ObjectIndex) {
        self.remove(o);
        self.push_front(o);
    }

    /// The back (least recent) member.
    #[inline]
    pub fn back(&self) -> Option<ObjectIndex> {
        let last = self.links[self.sentinel() as usize].prev;
        (last != self.sentinel()).then_some(last)
    }

    /// Removes and returns the back member.
    #[inline]
    pub fn pop_back(&mut self) -> Option<ObjectIndex> {
        let last = self.back()?;
        self.remove(last);
        Some(last)
    }

    /// The member in front of `o` (towards the front), if any.
    pub fn before(&self, o: ObjectIndex) -> Option<ObjectIndex> {
        let p = self.links[o as usize].prev;
        (p != self.sentinel()).then_some(p)
    }

    /// Members from back to front.
    pub fn iter_from_back(&self) -> impl Iterator<Item = ObjectIndex> + '_ {
        std::iter::successors(self.back(), move |&o| self.before(o))
    }
}

/// Residents in a recency list, with their sizes: `used_bytes` is always
/// the members' bytes, and `push_front` and `pop_back` keep it so.
pub(crate) struct SizedList {
    list: RecencyList,
    size_bytes: Vec<u64>,
    used_bytes: u64,
    capacity_bytes: u64,
}

impl SizedList {
    pub fn new(setup: &PolicySetup) -> Self {
        SizedList {
            list: RecencyList::new(setup.objects),
            size_bytes: vec![0; setup.objects],
            used_bytes: 0,
            capacity_bytes: setup.capacity_bytes,
        }
    }

    /// The order, front (newest) to back.
    pub fn list(&self) -> &RecencyList {
        &self.list
    }

    #[inline]
    pub fn contains(&self, o: ObjectIndex) -> bool {
        self.list.contains(o)
    }

    #[inline]
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    #[inline]
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Changes the capacity; nothing is evicted, so it must not fall below
    /// the used bytes.
    pub fn set_capacity_bytes(&mut self, capacity_bytes: u64) {
        assert!(self.used_bytes <= capacity_bytes);
        self.capacity_bytes = capacity_bytes;
    }

    /// Whether `size_bytes` more fit without an eviction.
    #[inline]
    pub fn fits(&self, size_bytes: u64) -> bool {
        self.used_bytes + size_bytes <= self.capacity_bytes
    }

    pub fn size_of(&self, o: ObjectIndex) -> u64 {
        self.size_bytes[o as usize]
    }

    #[inline]
    pub fn move_to_front(&mut self, o: ObjectIndex) {
        self.list.move_to_front(o);
    }

    /// Inserts a non-member of `size_bytes` at the front.
    #[inline]
    pub fn push_front(&mut self, o: ObjectIndex, size_bytes: u64) {
        self.list.push_front(o);
        self.size_bytes[o as usize] = size_bytes;
        self.used_bytes += size_bytes;
    }

    /// Takes the back member out, its bytes freed.
    #[inline]
    pub fn pop_back(&mut self) -> Option<ObjectIndex> {
        let o = self.list.pop_back()?;
        self.used_bytes -= self.size_bytes[o as usize];
        Some(o)
    }

    /// Takes `o` out, its bytes freed; false (and nothing done) for a
    /// non-member.
    pub fn remove(&mut self, o: ObjectIndex) -> bool {
        if !self.list.contains(o) {
            return false;
        }
        self.list.remove(o);
        self.used_bytes -= self.size_bytes[o as usize];
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_follows_pushes_moves_and_removals() {
        let mut l = RecencyList::new(5);
        l.push_front(0);
        l.push_front(1);
        l.push_front(2); // front 2 1 0 back
        l.move_to_front(0); // 0 2 1
        l.push_front(4); // 4 0 2 1
        l.remove(2); // 4 0 1
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![1, 0, 4]);
        assert_eq!(l.len(), 3);
        assert_eq!(l.pop_back(), Some(1));
        assert_eq!(l.pop_back(), Some(0));
        assert_eq!(l.pop_back(), Some(4));
        assert_eq!(l.pop_back(), None);
        assert!(!l.contains(0));
    }
}

//! W-TinyLFU (Einziger et al., TOS '17) with Caffeine's constants (design §6):
//! a window LRU of `floor(capacity / 100)` bytes in front of a main SLRU of
//! the rest (20 % probation, 80 % protected: the [`Segmented`] of `slru`
//! with two segments, as libCacheSim `WTinyLFU.c` builds it with
//! `seg-size=1:4`), and a TinyLFU admission filter: a 4-bit count-min
//! sketch, 4 rows of `next_power_of_two(expected objects)` counters (at
//! least 64), every counter halved after `10 * expected objects`
//! increments. No doorkeeper (Caffeine has none; libCacheSim's is a TODO).
//!
//! - Every request (hit, miss or bypass) counts once in the sketch, as in
//!   Caffeine (libCacheSim counts main hits, insertions and candidates).
//! - A miss enters the window; the window's overflow, LRU tail first, is
//!   offered to main: it enters probation if main has room, else it must
//!   beat, by sketch estimate (`>`), each main victim needed to make room
//!   (probation tail first); it then evicts them all, or else it is
//!   evicted itself and main is untouched. All-or-nothing is our choice for
//!   variable sizes: Caffeine duels victim by victim and may evict some
//!   before the candidate loses; with one victim they agree.
//! - Deviation from libCacheSim, which refuses objects larger than the
//!   window: such an object skips the window and is offered to main at once
//!   (as in Caffeine, where it would pass through the window); if it loses
//!   it is `Bypassed`. Only objects larger than probation are refused
//!   (libCacheSim `SLRU_can_insert`), so the policy works for caches of a
//!   few large objects (MoE experts).
//! - Expected objects: a byte cache's object count is unknown up front, so
//!   the sketch is built when the cache first reaches half its capacity
//!   (Caffeine does the same for weighted caches), sized for
//!   `ceil(capacity * residents / used bytes)` objects (at most
//!   `setup.objects`). Until then nothing is counted; no duel happens
//!   before that, because main is full only after.

use super::recency::RecencyList;
use super::slru::Segmented;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// Rows of the sketch.
const ROWS: usize = 4;
/// Smallest row width, so that tiny caches do not collide all the time.
const MIN_WIDTH: usize = 64;
/// Counters per `u64` word.
const COUNTERS_PER_WORD: usize = 16;
/// Saturation of a 4-bit counter.
const MAX_COUNT: u64 = 15;

/// A count-min sketch of 4-bit counters (Caffeine's `FrequencySketch`, one
/// counter per row rather than Caffeine's cache-line blocks).
pub(crate) struct FrequencySketch {
    /// `ROWS` rows of `width` counters, 16 to a word.
    table: Vec<u64>,
    width_mask: u64,
    words_per_row: usize,
    /// Increments since the last halving (halved with the counters).
    increments: u64,
    halve_after: u64,
}

impl FrequencySketch {
    pub fn new(expected_objects: usize) -> Self {
        let width = expected_objects.next_power_of_two().max(MIN_WIDTH);
        let words_per_row = width / COUNTERS_PER_WORD;
        FrequencySketch {
            table: vec![0; ROWS * words_per_row],
            width_mask: width as u64 - 1,
            words_per_row,
            increments: 0,
            halve_after: 10 * expected_objects.max(1) as u64,
        }
    }

    /// Word index and bit shift of `o`'s counter in `row`.
    fn slot(&self, o: ObjectIndex, row: usize) -> (usize, u32) {
        // SplitMix64's finaliser over the object and a per-row seed.
        let mut z = u64::from(o) ^ (row as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let i = (z & self.width_mask) as usize;
        let word = row * self.words_per_row + i / COUNTERS_PER_WORD;
        (word, 4 * (i % COUNTERS_PER_WORD) as u32)
    }

    /// Counts one access: each row's counter below 15 gains 1.
    pub fn increment(&mut self, o: ObjectIndex) {
        let mut added = false;
        for row in 0..ROWS {
            let (word, shift) = self.slot(o, row);
            if (self.table[word] >> shift) & MAX_COUNT < MAX_COUNT {
                self.table[word] += 1 << shift;
                added = true;
            }
        }
        if added {
            self.increments += 1;
            if self.increments >= self.halve_after {
                self.halve();
            }
        }
    }

    /// The smallest of `o`'s counters: its accesses, over-estimated only by
    /// collisions, decayed by the halvings.
    pub fn estimate(&self, o: ObjectIndex) -> u64 {
        (0..ROWS)
            .map(|row| {
                let (word, shift) = self.slot(o, row);
                (self.table[word] >> shift) & MAX_COUNT
            })
            .min()
            .unwrap_or(0)
    }

    /// Caffeine's reset: every counter halved (rounding down).
    fn halve(&mut self) {
        for w in &mut self.table {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
        self.increments /= 2;
    }
}

pub(crate) struct WTinyLfu {
    window: RecencyList,
    window_size_bytes: Vec<u64>,
    window_used_bytes: u64,
    window_capacity_bytes: u64,
    main: Segmented,
    /// Built at half capacity (module doc).
    sketch: Option<FrequencySketch>,
    objects: usize,
    capacity_bytes: u64,
}

impl WTinyLfu {
    pub fn new(setup: &PolicySetup) -> Self {
        let capacity = setup.capacity_bytes;
        let window_bytes = capacity / 100;
        let main_bytes = capacity - window_bytes;
        let probation_bytes = main_bytes / 5;
        WTinyLfu {
            window: RecencyList::new(setup.objects),
            window_size_bytes: vec![0; setup.objects],
            window_used_bytes: 0,
            window_capacity_bytes: window_bytes,
            main: Segmented::new(
                setup.objects,
                main_bytes,
                vec![probation_bytes, main_bytes - probation_bytes],
            ),
            sketch: None,
            objects: setup.objects,
            capacity_bytes: capacity,
        }
    }

    fn estimate(&self, o: ObjectIndex) -> u64 {
        self.sketch.as_ref().map_or(0, |s| s.estimate(o))
    }

    fn build_sketch_at_half_capacity(&mut self) {
        let used = self.used_bytes();
        if self.sketch.is_some() || used == 0 || 2 * used < self.capacity_bytes {
            return;
        }
        let residents = (self.window.len() + self.main.len()) as u128;
        let expected = (u128::from(self.capacity_bytes) * residents).div_ceil(u128::from(used));
        let expected = expected.min(self.objects as u128) as usize;
        self.sketch = Some(FrequencySketch::new(expected));
    }

    /// Offers a non-resident candidate to main; returns whether it entered.
    /// Victims it beat are pushed to `evicted`; a loser is not.
    fn offer(&mut self, o: ObjectIndex, size: u64, evicted: &mut Vec<ObjectIndex>) -> bool {
        let need = (self.main.used_bytes() + size).saturating_sub(self.main.capacity_bytes());
        if need > 0 {
            let candidate = self.estimate(o);
            let (mut freed, mut victims) = (0, 0);
            for v in self.main.victims() {
                if candidate <= self.estimate(v) {
                    return false;
                }
                freed += self.main.size_bytes(v);
                victims += 1;
                if freed >= need {
                    break;
                }
            }
            for _ in 0..victims {
                self.main.evict(evicted);
            }
        }
        self.main.insert(o, size);
        true
    }
}

impl Policy for WTinyLfu {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, size) = (request.object, request.size_bytes);
        self.build_sketch_at_half_capacity();
        if let Some(sketch) = &mut self.sketch {
            sketch.increment(o);
        }
        if self.window.contains(o) {
            self.window.move_to_front(o);
            return Outcome::Hit;
        }
        if self.main.contains(o) {
            self.main.hit(o, evicted);
            return Outcome::Hit;
        }
        if !self.main.can_hold(size) {
            return Outcome::Bypassed;
        }
        if size > self.window_capacity_bytes {
            let admitted = self.offer(o, size, evicted);
            return if admitted {
                Outcome::Admitted
            } else {
                Outcome::Bypassed
            };
        }
        self.window.push_front(o);
        self.window_size_bytes[o as usize] = size;
        self.window_used_bytes += size;
        // `o` fits the window alone, so it is never its own overflow.
        while self.window_used_bytes > self.window_capacity_bytes {
            let c = self.window.pop_back().expect("window bytes imply a member");
            let c_size = self.window_size_bytes[c as usize];
            self.window_used_bytes -= c_size;
            if !self.offer(c, c_size, evicted) {
                evicted.push(c);
            }
        }
        Outcome::Admitted
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.window.contains(object) || self.main.contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.window_used_bytes + self.main.used_bytes()
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Unlinks the object from the window or from main's segment
    /// ([`Segmented::remove`]). The sketch keeps its counts (forgetting is
    /// not a request: nothing is counted either), so a later request is
    /// judged by the object's frequency as before; a sketch not yet built
    /// is built as usual once the cache reaches half its capacity.
    fn remove(&mut self, object: ObjectIndex) {
        if self.window.contains(object) {
            self.window.remove(object);
            self.window_used_bytes -= self.window_size_bytes[object as usize];
        } else {
            self.main.remove(object);
        }
    }
}

#[cfg(test)]
mod tests;

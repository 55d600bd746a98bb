//! The learned reuse probability behind the `utility` eviction policy
//! (design §8): a block's worth is `P(reuse) * prefill seconds avoided /
//! bytes`; this module learns `P(reuse)` online.
//!
//! A cached block lives through intervals, each starting at a use (a
//! release of its lease) and ending in a reuse (a lookup hit) or not.
//! Blocks fall in classes by what is known of them: how often they were
//! reused (0, 1, 2, 3 or more) and whether they are partial (a request's
//! last block, which a longer request's block at that position never
//! matches). Ages are half-octave buckets of the index's clock. Per class
//! and age bucket the model counts how intervals ended, and
//!
//! `P(reuse | class c, idle for a) = reuses(c, >= a) / intervals(c, >= a)`,
//!
//! the share of the intervals that lasted at least `a` which ended in a
//! reuse. Where a class has no interval that old, the classes pooled
//! answer, and where none has, 0: a block older than any ever reused is
//! the first to go (so nothing learned means age order, as LRU).
//!
//! An eviction does not end an interval at once: the evicted key is kept as
//! a ghost for a while, and a ghost inserted again counts as a reuse at its
//! true age, one the cache missed; a ghost that expires ends its interval
//! without one. Without ghosts every eviction would count as "never
//! reused", and a class would look worse the sooner it is evicted. The
//! ghost window is an eighth of the capacity: on the Mooncake traces longer
//! windows win more on the conversation trace and lose on the synthetic
//! one, since they credit reuses further away than the cache can hold
//! (docs/kv.md gives the numbers). Counts are halved every [`HALVE_EVERY`]
//! observations so the model follows a workload that changes.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Classes: reuses so far (0, 1, 2, 3 or more) x partial block.
pub const CLASSES: usize = 8;
/// Half-octave age buckets: enough for ages up to 2^31 ticks.
const AGE_BUCKETS: usize = 64;
/// Observations between two rebuilds of the probability table.
const REFRESH_EVERY: u32 = 256;
/// Observations between two halvings of the counts.
pub const HALVE_EVERY: u64 = 1 << 18;
/// Ghosts kept per block of capacity: 1 / this.
const CAPACITY_PER_GHOST: usize = 8;

/// The class of a block reused `hits` times, `partial` when it holds fewer
/// tokens than a full block.
pub fn class(hits: u32, partial: bool) -> u8 {
    (hits.min(3) * 2 + u32::from(partial)) as u8
}

/// Half-octave bucket of an age: 0 for 0, then two buckets per power of two.
pub fn age_bucket(age: u64) -> usize {
    if age == 0 {
        return 0;
    }
    let octave = 63 - age.leading_zeros() as usize;
    let half = if octave == 0 {
        0
    } else {
        ((age >> (octave - 1)) & 1) as usize
    };
    (1 + 2 * octave + half).min(AGE_BUCKETS - 1)
}

/// An evicted block still watched for its next use.
#[derive(Debug, Clone, Copy)]
struct Ghost {
    class: u8,
    last_use: u64,
    evicted_at: u64,
}

/// Counts per age bucket.
type Row = [f64; AGE_BUCKETS];

/// Suffix sums of (reuses, intervals) at each age bucket.
fn suffix(reuses: &Row, ends: &Row) -> [(f64, f64); AGE_BUCKETS] {
    let (mut r, mut n) = (0.0, 0.0);
    let mut out = [(0.0, 0.0); AGE_BUCKETS];
    for b in (0..AGE_BUCKETS).rev() {
        r += reuses[b];
        n += reuses[b] + ends[b];
        out[b] = (r, n);
    }
    out
}

/// `P(reuse)` per class and age, learned from the index's events.
#[derive(Debug, Clone)]
pub struct UtilityModel<K> {
    /// Intervals that ended in a reuse, by class and age.
    reuses: [Row; CLASSES],
    /// Intervals that ended without one (their ghost expired).
    ends: [Row; CLASSES],
    /// `P(reuse | class, age bucket)`, rebuilt every `REFRESH_EVERY`.
    p_reuse: [Row; CLASSES],
    since_refresh: u32,
    observed: u64,
    ghosts: HashMap<K, Ghost>,
    /// Ghosts oldest first, with their eviction time (a key evicted,
    /// inserted and evicted again appears twice; the map has the latest).
    ghost_order: VecDeque<(K, u64)>,
    ghost_capacity: usize,
}

impl<K: Hash + Eq + Clone> UtilityModel<K> {
    pub fn new(capacity_blocks: usize) -> Self {
        UtilityModel {
            reuses: [[0.0; AGE_BUCKETS]; CLASSES],
            ends: [[0.0; AGE_BUCKETS]; CLASSES],
            p_reuse: [[0.0; AGE_BUCKETS]; CLASSES],
            since_refresh: 0,
            observed: 0,
            ghosts: HashMap::new(),
            ghost_order: VecDeque::new(),
            ghost_capacity: capacity_blocks.div_ceil(CAPACITY_PER_GHOST),
        }
    }

    /// A block of `class` was reused after idling `age` ticks.
    pub fn observe_reuse(&mut self, class: u8, age: u64) {
        self.reuses[class as usize][age_bucket(age)] += 1.0;
        self.observed();
    }

    /// `key`, of `class` and last used at `last_use`, was evicted at `now`.
    pub fn evicted(&mut self, key: K, class: u8, last_use: u64, now: u64) {
        let ghost = Ghost {
            class,
            last_use,
            evicted_at: now,
        };
        self.ghosts.insert(key.clone(), ghost);
        self.ghost_order.push_back((key, now));
        while self.ghost_order.len() > self.ghost_capacity {
            let (key, evicted_at) = self.ghost_order.pop_front().expect("not empty");
            // Only the ghost's latest eviction is live.
            if let Some(g) = self.ghosts.get(&key).filter(|g| g.evicted_at == evicted_at) {
                let (class, age) = (g.class, now - g.last_use);
                self.ghosts.remove(&key);
                self.ends[class as usize][age_bucket(age)] += 1.0;
                self.observed();
            }
        }
    }

    /// `key` is inserted at `now`: a ghost's reuse, missed by the cache.
    pub fn inserted(&mut self, key: &K, now: u64) {
        if let Some(g) = self.ghosts.remove(key) {
            self.observe_reuse(g.class, now - g.last_use);
        }
    }

    fn observed(&mut self) {
        self.observed += 1;
        if self.observed.is_multiple_of(HALVE_EVERY) {
            for row in self.reuses.iter_mut().chain(self.ends.iter_mut()) {
                row.iter_mut().for_each(|c| *c *= 0.5);
            }
        }
        self.since_refresh += 1;
        if self.since_refresh >= REFRESH_EVERY {
            self.refresh();
        }
    }

    /// Rebuilds the table from the counts.
    pub fn refresh(&mut self) {
        self.since_refresh = 0;
        let mut all_reuses = [0.0; AGE_BUCKETS];
        let mut all_ends = [0.0; AGE_BUCKETS];
        for c in 0..CLASSES {
            for b in 0..AGE_BUCKETS {
                all_reuses[b] += self.reuses[c][b];
                all_ends[b] += self.ends[c][b];
            }
        }
        let pooled = suffix(&all_reuses, &all_ends);
        for c in 0..CLASSES {
            let own = suffix(&self.reuses[c], &self.ends[c]);
            for b in 0..AGE_BUCKETS {
                // At least one interval (halved counts may be fractions).
                self.p_reuse[c][b] = [own[b], pooled[b]]
                    .into_iter()
                    .find(|&(_, n)| n >= 1.0)
                    .map_or(0.0, |(r, n)| r / n);
            }
        }
    }

    /// `P(reuse)` of a block of `class` idle for `age` ticks.
    pub fn p_reuse(&self, class: u8, age: u64) -> f64 {
        self.p_reuse[class as usize][age_bucket(age)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_buckets_are_half_octaves() {
        // By hand: 1 -> octave 0; 2 -> octave 1, lower half; 3 -> octave
        // 1, upper half; 4, 5 -> octave 2 lower; 6, 7 -> octave 2 upper.
        let buckets: Vec<usize> = (0..8).map(age_bucket).collect();
        assert_eq!(buckets, [0, 1, 3, 4, 5, 5, 6, 6]);
        assert_eq!(age_bucket(u64::MAX), AGE_BUCKETS - 1);
        assert_eq!((class(0, false), class(1, true), class(7, true)), (0, 3, 7));
    }

    #[test]
    fn probability_is_the_share_of_long_intervals_that_ended_in_a_reuse() {
        // Capacity 16: two ghosts.
        let mut m: UtilityModel<u32> = UtilityModel::new(16);
        // Class 0: reuses at ages 1 and 1 (in the cache) and 6 (a ghost
        // inserted again); an interval of age 9 without one (a ghost
        // pushed out by two later evictions, which stay ghosts).
        m.observe_reuse(0, 1);
        m.observe_reuse(0, 1);
        m.evicted(10, 0, 0, 4);
        m.inserted(&10, 6);
        m.evicted(11, 0, 0, 5);
        m.evicted(12, 2, 8, 9);
        m.evicted(13, 2, 8, 9);
        // Class 2 (one reuse): a single reuse at age 100.
        m.observe_reuse(2, 100);
        m.refresh();
        // Class 0 at age >= 1: 3 reuses of 4 intervals; >= 6 (bucket 4):
        // 1 of 2; >= 8 (bucket 7): 0 of 1.
        assert_eq!(m.p_reuse(0, 1), 0.75);
        assert_eq!(m.p_reuse(0, 6), 0.5);
        assert_eq!(m.p_reuse(0, 8), 0.0);
        assert_eq!(m.p_reuse(2, 90), 1.0);
        // Class 1 has no intervals: the pooled 4 reuses of 5 at >= 1.
        assert_eq!(m.p_reuse(1, 1), 0.8);
        // Older than every interval seen: 0.
        assert_eq!(m.p_reuse(1, 1 << 20), 0.0);
    }
}

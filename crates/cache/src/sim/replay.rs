//! Replays a stream through one policy and counts what design §6 asks for:
//! misses and miss bytes (libCacheSim's `n_miss`, `n_miss_byte`), felt wait
//! per layer, hits on seeded versus admitted objects, admissions, evictions.
//!
//! Paired arms start from the same state: cold, or seeded with the same
//! residents. Seeding feeds the seed objects through the policy itself
//! before counting starts, so every policy builds its own state for them.

use super::stream::Stream;
use crate::policy::{ObjectIndex, Outcome, Policy, Request, NEVER};

/// Counts of one replay. Seeding requests are not counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayStats {
    pub requests: u64,
    /// Bytes of all requests (hits and misses).
    pub requested_bytes: u64,
    pub misses: u64,
    pub miss_bytes: u64,
    /// Hits on objects resident since seeding.
    pub hits_seeded: u64,
    /// Hits on objects admitted after a demand miss.
    pub hits_admitted: u64,
    pub admissions: u64,
    pub admitted_bytes: u64,
    /// Misses served from a transient slot (not admitted).
    pub bypasses: u64,
    pub evictions: u64,
    /// Seed objects resident when counting started (start-up residents).
    pub seeded_bytes: u64,
    pub misses_by_layer: Vec<u64>,
    /// Felt wait per layer: the sum of `miss_seconds` of its misses.
    pub felt_wait_seconds_by_layer: Vec<f64>,
}

impl ReplayStats {
    pub fn felt_wait_seconds(&self) -> f64 {
        self.felt_wait_seconds_by_layer.iter().sum()
    }

    /// Felt wait with layer `l`'s miss cost scaled by `scale[l]`.
    pub fn felt_wait_scaled(&self, scale: &[f64]) -> f64 {
        self.felt_wait_seconds_by_layer
            .iter()
            .zip(scale)
            .map(|(f, s)| f * s)
            .sum()
    }

    /// Adds another replay's counts (per-layer caches sum to the whole).
    pub fn add(&mut self, other: &ReplayStats) {
        self.requests += other.requests;
        self.requested_bytes += other.requested_bytes;
        self.misses += other.misses;
        self.miss_bytes += other.miss_bytes;
        self.hits_seeded += other.hits_seeded;
        self.hits_admitted += other.hits_admitted;
        self.admissions += other.admissions;
        self.admitted_bytes += other.admitted_bytes;
        self.bypasses += other.bypasses;
        self.evictions += other.evictions;
        self.seeded_bytes += other.seeded_bytes;
        add_vec(&mut self.misses_by_layer, &other.misses_by_layer);
        add_vec(
            &mut self.felt_wait_seconds_by_layer,
            &other.felt_wait_seconds_by_layer,
        );
    }
}

fn add_vec<T: Copy + Default + std::ops::AddAssign>(a: &mut Vec<T>, b: &[T]) {
    if a.len() < b.len() {
        a.resize(b.len(), T::default());
    }
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Replays `stream` through `policy` after seeding it with `seeds`.
/// `miss_seconds[o]` is the felt wait one miss of object `o` costs.
pub fn replay(
    policy: &mut dyn Policy,
    stream: &Stream,
    seeds: &[ObjectIndex],
    miss_seconds: &[f64],
) -> ReplayStats {
    let layers = stream.layers();
    let mut stats = ReplayStats {
        misses_by_layer: vec![0; layers],
        felt_wait_seconds_by_layer: vec![0.0; layers],
        ..Default::default()
    };
    let mut evicted = Vec::new();
    let mut seeded = vec![false; stream.objects()];
    let offset = seeds.len() as u64;
    if !seeds.is_empty() {
        let first = first_accesses(stream);
        for (t, &o) in seeds.iter().enumerate() {
            let next = first[o as usize];
            let request = Request {
                object: o,
                size_bytes: stream.sizes_bytes[o as usize],
                time: t as u64,
                next_access: if next == NEVER { NEVER } else { next + offset },
            };
            policy.access(&request, &mut evicted);
        }
        for &o in seeds {
            if policy.contains(o) && !seeded[o as usize] {
                seeded[o as usize] = true;
                stats.seeded_bytes += stream.sizes_bytes[o as usize];
            }
        }
    }
    // Building the next-access index costs more than an LRU replay; only
    // the policies that read it pay for it, the others see NEVER.
    let next_access = policy.reads_next_access().then(|| stream.next_access());
    for (i, &o) in stream.requests.iter().enumerate() {
        let next = next_access.map_or(NEVER, |n| n[i]);
        let size = stream.sizes_bytes[o as usize];
        stats.requested_bytes += size;
        let request = Request {
            object: o,
            size_bytes: size,
            time: i as u64 + offset,
            next_access: if next == NEVER { NEVER } else { next + offset },
        };
        evicted.clear();
        let outcome = policy.access(&request, &mut evicted);
        for &v in &evicted {
            seeded[v as usize] = false;
        }
        stats.evictions += evicted.len() as u64;
        match outcome {
            Outcome::Hit if seeded[o as usize] => stats.hits_seeded += 1,
            Outcome::Hit => stats.hits_admitted += 1,
            miss => {
                let l = stream.layer_of[o as usize] as usize;
                stats.misses += 1;
                stats.miss_bytes += size;
                stats.misses_by_layer[l] += 1;
                stats.felt_wait_seconds_by_layer[l] += miss_seconds[o as usize];
                if miss == Outcome::Admitted {
                    stats.admissions += 1;
                    stats.admitted_bytes += size;
                } else {
                    stats.bypasses += 1;
                }
            }
        }
    }
    stats.requests = stream.requests.len() as u64;
    stats
}

/// Index of each object's first request, or NEVER.
fn first_accesses(stream: &Stream) -> Vec<u64> {
    let mut first = vec![NEVER; stream.objects()];
    for (i, &o) in stream.requests.iter().enumerate().rev() {
        first[o as usize] = i as u64;
    }
    first
}

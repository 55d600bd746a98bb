//! Admission policies (design §6): a miss that needs evictions is admitted
//! only when it is worth more than what it displaces; refused, it runs from
//! a transient slot and evicts nothing. While there is free room every miss
//! is admitted. Both learn: counts (`counts.rs`) plus `prior_rate`.
//!
//! - `frequency`: victims in LRU order; admit only if
//!   `f_new > admission_ratio * (f_v1 + f_v2 + ...)`, summing the decayed
//!   counts (plus prior) of all the victims the candidate needs, since it
//!   takes all their bytes.
//! - `cost`: utility `u(o) = rate(o) * (miss_seconds - hit_seconds) / bytes`
//!   (felt seconds saved per tick per resident byte), `rate` = decayed count
//!   plus prior per tick; the lowest utility is evicted first (ties to the
//!   least recently used) and a candidate is admitted only if
//!   `u_new - move_seconds_per_byte / horizon_ticks > max u_victim + hysteresis`:
//!   it must pay back its move within the horizon and beat every victim.

use super::counts::DecayedCounts;
use super::heap::ScoredResidents;
use super::recency::SizedList;
use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) enum Admission {
    Frequency(Frequency),
    Cost(Cost),
}

impl Admission {
    pub fn frequency(setup: &PolicySetup) -> Self {
        Admission::Frequency(Frequency {
            counts: DecayedCounts::new(setup, true),
            residents: SizedList::new(setup),
            admission_ratio: setup.params.admission_ratio,
        })
    }

    /// Needs `miss_seconds` and `hit_seconds` per object (`build` checks).
    pub fn cost(setup: &PolicySetup) -> Self {
        let k = &setup.knowledge;
        let p = &setup.params;
        Admission::Cost(Cost {
            counts: DecayedCounts::new(setup, true),
            residents: ScoredResidents::new(setup),
            saved_seconds: k
                .miss_seconds
                .iter()
                .zip(&k.hit_seconds)
                .map(|(m, h)| m - h)
                .collect(),
            move_utility: p.move_seconds_per_byte / p.horizon_ticks,
            hysteresis: p.hysteresis,
        })
    }

    fn inner(&self) -> &dyn Policy {
        match self {
            Admission::Frequency(f) => f,
            Admission::Cost(c) => c,
        }
    }
}

impl Policy for Admission {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        match self {
            Admission::Frequency(f) => f.access(request, evicted),
            Admission::Cost(c) => c.access(request, evicted),
        }
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.inner().contains(object)
    }

    fn used_bytes(&self) -> u64 {
        self.inner().used_bytes()
    }

    fn capacity_bytes(&self) -> u64 {
        self.inner().capacity_bytes()
    }

    fn remove(&mut self, object: ObjectIndex) {
        match self {
            Admission::Frequency(f) => f.remove(object),
            Admission::Cost(c) => c.remove(object),
        }
    }
}

pub(crate) struct Frequency {
    counts: DecayedCounts,
    /// Most recent first.
    residents: SizedList,
    admission_ratio: f64,
}

impl Policy for Frequency {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let o = request.object;
        // No heap to re-key: victims come in recency order.
        self.counts.record(o, request.time);
        if self.residents.contains(o) {
            self.residents.move_to_front(o);
            return Outcome::Hit;
        }
        let size = request.size_bytes;
        let r = &self.residents;
        if size > r.capacity_bytes() {
            return Outcome::Bypassed;
        }
        // Count the victims from the LRU end before deciding: a refused
        // candidate must leave them resident.
        let (mut victims, mut freed_bytes, mut victims_frequency) = (0, 0, 0.0);
        for v in r.list().iter_from_back() {
            if r.used_bytes() + size <= r.capacity_bytes() + freed_bytes {
                break;
            }
            victims += 1;
            freed_bytes += r.size_of(v);
            victims_frequency += self.counts.score(v);
        }
        if victims > 0 && self.counts.score(o) <= self.admission_ratio * victims_frequency {
            return Outcome::Bypassed;
        }
        for _ in 0..victims {
            evicted.push(self.residents.pop_back().expect("counted above"));
        }
        self.residents.push_front(o, size);
        Outcome::Admitted
    }

    resident_accessors!();

    /// The object leaves the recency order. Its decayed count and prior
    /// stay: a later request is judged by them as before.
    fn remove(&mut self, object: ObjectIndex) {
        self.residents.remove(object);
    }
}

pub(crate) struct Cost {
    counts: DecayedCounts,
    /// Residents keyed by (utility, tick of last access).
    residents: ScoredResidents<(f64, u64)>,
    /// `miss_seconds - hit_seconds` per object: what one hit saves.
    saved_seconds: Vec<f64>,
    /// `move_seconds_per_byte / horizon_ticks`: the utility a move in costs.
    move_utility: f64,
    hysteresis: f64,
}

impl Cost {
    /// Felt seconds saved per tick per byte while `o` is resident.
    fn utility(
        counts: &DecayedCounts,
        saved_seconds: &[f64],
        o: ObjectIndex,
        size_bytes: u64,
    ) -> f64 {
        // max(1): a zero-byte object must not make 0 / 0.
        counts.rate_per_tick(o) * saved_seconds[o as usize] / size_bytes.max(1) as f64
    }
}

impl Policy for Cost {
    fn access(&mut self, request: &Request, evicted: &mut Vec<ObjectIndex>) -> Outcome {
        let (o, tick) = (request.object, request.time);
        let halved = self.counts.record(o, tick);
        let (counts, saved) = (&self.counts, &self.saved_seconds);
        if halved {
            // The prior does not halve, so utilities change order.
            self.residents.rekey(|v, size, (_, last_tick)| {
                (Cost::utility(counts, saved, v, size), last_tick)
            });
        }
        let u = Cost::utility(counts, saved, o, request.size_bytes);
        let (move_utility, hysteresis) = (self.move_utility, self.hysteresis);
        self.residents
            .access(o, request.size_bytes, (u, tick), evicted, |victims| {
                // Above every victim is above the largest; none: free room.
                victims
                    .iter()
                    .all(|&(_, (u_victim, _))| u - move_utility > u_victim + hysteresis)
            })
    }

    resident_accessors!();

    /// The object leaves the utility heap. Its decayed count and prior stay
    /// (so its utility, should it be requested again).
    fn remove(&mut self, object: ObjectIndex) {
        self.residents.remove(object);
    }
}

#[cfg(test)]
mod tests;

//! Decayed request counters, one per object, shared by `lfu`, `lfru`,
//! `frequency` and `cost`. Every request counts, resident or not; all
//! counters are halved every `halve_every_ticks` ticks (Colibri: "halve every
//! N ticks"), so a count estimates requests per window of N ticks (between
//! one and two windows' worth, as in Colibri's heat). Integer counters,
//! because `lfru`'s test is Colibri's integer rule.

use super::{ObjectIndex, PolicySetup};

pub struct DecayedCounts {
    count: Vec<u32>,
    halve_every_ticks: u64,
    /// Halvings applied so far: the window of the last tick counted.
    window: u64,
    /// `prior_rate[o] * halve_every_ticks`: the count learned from training
    /// data expected in one window; empty when nothing was learned or the
    /// policy ignores it.
    prior_count: Vec<f64>,
}

impl DecayedCounts {
    /// `use_prior`: whether [`score`](Self::score) adds the learned prior.
    pub fn new(setup: &PolicySetup, use_prior: bool) -> Self {
        let halve_every_ticks = setup.params.halve_every_ticks.max(1);
        let prior_count = if use_prior {
            let rates = &setup.knowledge.prior_rate;
            rates.iter().map(|r| r * halve_every_ticks as f64).collect()
        } else {
            Vec::new()
        };
        DecayedCounts {
            count: vec![0; setup.objects],
            halve_every_ticks,
            window: 0,
            prior_count,
        }
    }

    /// Counts one request for `o` at `tick`, after the halvings due by then
    /// (at ticks N, 2N, ...). Returns whether any happened: halving changes
    /// the order of scores (ties appear, the prior weighs more), so callers
    /// that keep scores in a heap re-key it (amortised O(objects / N)).
    pub fn record(&mut self, o: ObjectIndex, tick: u64) -> bool {
        let window = tick / self.halve_every_ticks;
        let halvings = window.saturating_sub(self.window);
        if halvings > 0 {
            self.window = window;
            for c in &mut self.count {
                *c = if halvings >= 32 { 0 } else { *c >> halvings };
            }
        }
        let c = &mut self.count[o as usize];
        *c = c.saturating_add(1);
        halvings > 0
    }

    /// The decayed count alone.
    pub fn count(&self, o: ObjectIndex) -> u32 {
        self.count[o as usize]
    }

    /// The decayed count plus the prior's expected count in one window.
    pub fn score(&self, o: ObjectIndex) -> f64 {
        let prior = self.prior_count.get(o as usize).copied().unwrap_or(0.0);
        f64::from(self.count(o)) + prior
    }

    /// [`score`](Self::score) as requests per tick.
    pub fn rate_per_tick(&self, o: ObjectIndex) -> f64 {
        self.score(o) / self.halve_every_ticks as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::setup;
    use super::*;

    #[test]
    fn counts_halve_at_each_window_and_the_prior_adds_a_window() {
        let mut s = setup(10, 2);
        s.params.halve_every_ticks = 4;
        s.knowledge.prior_rate = vec![0.5, 0.0];
        let mut c = DecayedCounts::new(&s, true);
        // Window 0 (ticks 0..4): object 0 at ticks 0 1 2, 1 at 3: counts 3, 1.
        for (o, t) in [(0, 0), (0, 1), (0, 2), (1, 3)] {
            assert!(!c.record(o, t));
        }
        assert_eq!((c.count(0), c.count(1)), (3, 1));
        // Tick 4 opens window 1: halve (3 -> 1, 1 -> 0), then count 1: 1, 1.
        assert!(c.record(1, 4));
        assert_eq!((c.count(0), c.count(1)), (1, 1));
        // Prior of 0: 0.5 per tick * 4 ticks = 2 requests per window.
        assert_eq!(c.score(0), 3.0);
        assert_eq!(c.rate_per_tick(0), 0.75);
        // Tick 13 is window 3: two halvings at once (1 -> 0, 1 -> 0).
        assert!(c.record(0, 13));
        assert_eq!((c.count(0), c.count(1)), (1, 0));
        // Without the prior the score is the count.
        assert_eq!(DecayedCounts::new(&s, false).score(0), 0.0);
    }
}

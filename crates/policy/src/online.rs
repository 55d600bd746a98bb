//! Per-layer budgets re-allocated while serving (design §6 "dynamic",
//! online): one allocator that the simulator
//! (`residency_sim::replay::replay_online`) and the store
//! (`residency_lab::replay`, `Store::set_capacities`) both run,
//! so a simulated allocation is the one that serves.
//!
//! It keeps a sliding window of the last `window_accesses` requests of all
//! layers (a layer that stops being routed to slides out of it). Every
//! `every_tokens` tokens a pass builds each layer's exact LRU miss curve of
//! its requests in the window (stack distances, `stack::slot_misses`)
//! and water-fills the budget on them with the offline `budget::water_fill`,
//! on byte cost and felt-wait price, exactly as `dynamic` does
//! offline. The target replaces the current slots only when it pays:
//! the felt seconds it saves per token (from the window's curves) times the
//! horizon must exceed the seconds of the move times the hysteresis, where
//! filling one new slot costs one miss of its layer (the shrinking layers'
//! loss is already in their curves). The bytes of the new slots are further
//! bounded by an allowance that accrues per token. A move is all or
//! nothing, so the slots are always a water-filled allocation of the budget.
//! Bytes the window cannot price (slots that save nothing in it) stay where
//! they are, then go round the layers, rather than stay empty. Every layer
//! keeps a floor of the experts one token leases in it at once (its top-k,
//! `budget::floor_slots`) and only the budget above the floors is
//! water-filled: a layer left fewer slots (none, at small budgets) served
//! its whole traffic from transient slots in the store.
//!
//! The curves are LRU's whatever the policy inside a layer (FIFO, SIEVE,
//! S3-FIFO are recency-like): stack distances price every capacity in one
//! pass, a shadow replay per capacity would cost layers x slots replays.

use crate::budget::{floor_slots, uniform_slots, water_fill_above, LayerCurve};
use crate::stack::slot_misses;
use crate::ObjectIndex;
use std::collections::VecDeque;

/// Tunables of the online allocator.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineParams {
    /// Requests (of all layers) the curves are built from.
    pub window_accesses: usize,
    /// Tokens between passes.
    pub every_tokens: u64,
    /// Tokens `H` over which a move must pay for itself.
    pub horizon_tokens: f64,
    /// A move's saving over the horizon must exceed its cost times this.
    pub hysteresis: f64,
    /// Bytes of new slots allowed per token served (accrues, capped at the
    /// budget).
    pub bytes_per_token: u64,
}

impl Default for OnlineParams {
    /// The re-planner's horizon, hysteresis and allowance
    /// (`serve::replan::ReplanParams`); a window of a few dozen tokens of a
    /// DeepSeek-V2-Lite-sized model (26 layers x 6 experts a token).
    fn default() -> Self {
        OnlineParams {
            window_accesses: 8192,
            every_tokens: 16,
            horizon_tokens: 512.0,
            hysteresis: 2.0,
            bytes_per_token: 64 << 20,
        }
    }
}

/// Why the allocator cannot run as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OnlineError {
    #[error("online allocation: {what} is {value}; give {fix}")]
    Param {
        what: &'static str,
        value: String,
        fix: &'static str,
    },
}

impl OnlineParams {
    pub fn check(&self) -> Result<(), OnlineError> {
        let bad = |what, value: String, fix| Err(OnlineError::Param { what, value, fix });
        if self.window_accesses == 0 {
            return bad(
                "the window",
                "0 accesses".into(),
                "a positive number of accesses",
            );
        }
        if self.every_tokens == 0 {
            return bad(
                "the period",
                "0 tokens".into(),
                "a positive number of tokens",
            );
        }
        if !(self.horizon_tokens.is_finite() && self.horizon_tokens > 0.0) {
            return bad(
                "the horizon",
                format!("{} tokens", self.horizon_tokens),
                "a positive number of tokens",
            );
        }
        if !(self.hysteresis.is_finite() && self.hysteresis >= 0.0) {
            return bad(
                "the hysteresis",
                self.hysteresis.to_string(),
                "a non-negative factor",
            );
        }
        Ok(())
    }
}

/// One layer as the allocator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerShape {
    /// Bytes of one expert (a slot).
    pub slot_bytes: u64,
    /// Experts of the layer: more slots than this never help.
    pub experts: usize,
    /// Felt seconds of one miss.
    pub miss_seconds: f64,
    /// Experts a token asks of this layer at once (its top-k), leased
    /// together while the layer computes: the layer's floor of slots.
    pub leased_at_once: usize,
}

/// What one pass found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    /// The water-filled slots on the window's curves.
    pub target: Vec<usize>,
    /// Felt seconds the target saves against the current slots over the
    /// horizon (negative: it loses).
    pub gain_seconds: f64,
    /// Felt seconds of filling the target's new slots.
    pub move_seconds: f64,
    /// Bytes of the target's new slots.
    pub move_bytes: u64,
    /// Whether the target became the current slots.
    pub moved: bool,
}

pub struct OnlineAllocator {
    params: OnlineParams,
    layers: Vec<LayerShape>,
    budget_bytes: u64,
    /// `(layer, expert)` of the last requests, oldest first.
    window: VecDeque<(u32, ObjectIndex)>,
    slots: Vec<usize>,
    /// Slots no layer goes below (`floor_slots`); the uniform start holds them.
    floors: Vec<usize>,
    allowance_bytes: u64,
    last_pass: u64,
    /// Requests recorded since the start (for requests per token).
    accesses: u64,
}

impl OnlineAllocator {
    /// Starts from the uniform split of `budget_bytes`, at token 0.
    pub fn new(
        params: OnlineParams,
        layers: Vec<LayerShape>,
        budget_bytes: u64,
    ) -> Result<OnlineAllocator, OnlineError> {
        params.check()?;
        let slot_bytes: Vec<u64> = layers.iter().map(|l| l.slot_bytes).collect();
        let slots = uniform_slots(&slot_bytes, budget_bytes);
        let leased: Vec<usize> = layers.iter().map(|l| l.leased_at_once).collect();
        let floors = floor_slots(&leased, &slot_bytes, budget_bytes);
        Ok(OnlineAllocator {
            floors,
            window: VecDeque::with_capacity(params.window_accesses + 1),
            params,
            layers,
            budget_bytes,
            slots,
            allowance_bytes: 0,
            last_pass: 0,
            accesses: 0,
        })
    }

    pub fn params(&self) -> &OnlineParams {
        &self.params
    }

    /// Slots of each layer now.
    pub fn slots(&self) -> &[usize] {
        &self.slots
    }

    /// Bytes of each layer's cache now; their sum never exceeds the budget.
    pub fn capacities_bytes(&self) -> Vec<u64> {
        self.slots
            .iter()
            .zip(&self.layers)
            .map(|(&k, l)| k as u64 * l.slot_bytes)
            .collect()
    }

    /// Records one request for `expert` of `layer`.
    pub fn record(&mut self, layer: usize, expert: ObjectIndex) {
        self.window.push_back((layer as u32, expert));
        if self.window.len() > self.params.window_accesses {
            self.window.pop_front();
        }
        self.accesses += 1;
    }

    /// Whether a pass is due after `token` tokens.
    pub fn due(&self, token: u64) -> bool {
        token >= self.last_pass + self.params.every_tokens
    }

    /// One pass after `token` tokens (see the module doc).
    pub fn pass(&mut self, token: u64) -> Pass {
        let p = &self.params;
        self.allowance_bytes = self
            .allowance_bytes
            .saturating_add(p.bytes_per_token.saturating_mul(token - self.last_pass))
            .min(self.budget_bytes);
        self.last_pass = token;
        let curves = self.curves();
        let target = self.fill_rest(water_fill_above(&curves, &self.floors, self.budget_bytes));
        let felt = |slots: &[usize]| -> f64 {
            slots
                .iter()
                .zip(&curves)
                .map(|(&k, c)| c.misses[k.min(c.misses.len() - 1)] as f64 * c.miss_seconds)
                .sum()
        };
        // The window's felt seconds per request, times requests per token,
        // times the horizon.
        let per_token = self.accesses as f64 / token.max(1) as f64;
        let gain_seconds = (felt(&self.slots) - felt(&target)) / self.window.len().max(1) as f64
            * per_token
            * p.horizon_tokens;
        let (mut move_seconds, mut move_bytes) = (0.0, 0u64);
        for ((&to, &from), layer) in target.iter().zip(&self.slots).zip(&self.layers) {
            let grown = to.saturating_sub(from);
            move_seconds += grown as f64 * layer.miss_seconds;
            move_bytes += grown as u64 * layer.slot_bytes;
        }
        let moved = target != self.slots
            && gain_seconds > move_seconds * p.hysteresis
            && move_bytes <= self.allowance_bytes;
        if moved {
            self.allowance_bytes -= move_bytes;
            self.slots = target.clone();
        }
        Pass {
            target,
            gain_seconds,
            move_seconds,
            move_bytes,
            moved,
        }
    }

    /// The bytes water-filling leaves unused (slots that save nothing in the
    /// window, which is shorter than a whole trace, are not bought) are not
    /// left empty: a layer first keeps what it has now, up to its current
    /// slots (so moves are only those water-filling asks for), then every
    /// layer gets one more slot in turn while one fits.
    fn fill_rest(&self, mut target: Vec<usize>) -> Vec<usize> {
        let used: u64 = target
            .iter()
            .zip(&self.layers)
            .map(|(&k, l)| k as u64 * l.slot_bytes)
            .sum();
        let mut left = self.budget_bytes - used;
        for ((k, &now), layer) in target.iter_mut().zip(&self.slots).zip(&self.layers) {
            let keep = (now.saturating_sub(*k) as u64).min(left / layer.slot_bytes.max(1));
            *k += keep as usize;
            left -= keep * layer.slot_bytes;
        }
        loop {
            let mut added = false;
            for (k, layer) in target.iter_mut().zip(&self.layers) {
                if *k < layer.experts && layer.slot_bytes <= left {
                    *k += 1;
                    left -= layer.slot_bytes;
                    added = true;
                }
            }
            if !added {
                return target;
            }
        }
    }

    /// Each layer's LRU misses at every slot count over the window.
    fn curves(&self) -> Vec<LayerCurve> {
        let mut requests: Vec<Vec<ObjectIndex>> = vec![Vec::new(); self.layers.len()];
        for &(l, e) in &self.window {
            requests[l as usize].push(e);
        }
        requests
            .iter()
            .zip(&self.layers)
            .map(|(r, layer)| LayerCurve {
                slot_bytes: layer.slot_bytes,
                misses: slot_misses(r, layer.experts),
                miss_seconds: layer.miss_seconds,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

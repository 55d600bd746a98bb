//! The re-planner of the serving loop (design §4.5): every
//! pass, from live use rates, which objects should be pinned in a place's
//! pinned share, and which moves are worth their cost now.
//!
//! The target is the knapsack of the share by value per byte (`rate *
//! miss_seconds / bytes`: the planner's objective restricted to one cache
//! tier, as in the simulator). A move happens only when it pays: promoting
//! `c` in place of victims `V` saves `(rate_c m_c - sum rate_v m_v)` seconds
//! per token, which over the horizon `H` must exceed the move's seconds
//! (`diff::carry_seconds`, the planner's one move cost) times the
//! hysteresis factor. Moves are
//! further bounded by a minimum age of a pin, a minimum interval between two
//! moves of one object, a bytes-moved allowance that accrues per token, and
//! a maximum of promotions per pass, so churn never eats the gain.

use residency_core::cost::{Place, Resources};
use residency_core::diff::carry_seconds;
use residency_policy::ObjectIndex;

/// The link a promotion comes over: from where the object is read to the
/// place of the pinned share, on the machine's rates.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLink {
    pub resources: Resources,
    pub from: Place,
    pub to: Place,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplanParams {
    /// Tokens between passes.
    pub every_tokens: u64,
    /// Seconds between passes, when set: a pass is due after whichever of
    /// the two comes first.
    pub every_seconds: Option<f64>,
    /// A move's saving over the horizon must exceed its cost times this.
    pub hysteresis: f64,
    /// Tokens `H` over which a move must pay for itself.
    pub horizon_tokens: f64,
    /// A pin stays at least this many tokens.
    pub min_age_tokens: u64,
    /// Tokens between two moves of one object.
    pub min_move_interval_tokens: u64,
    /// Bytes of promotions allowed per token served (accrues, capped at
    /// the share).
    pub bytes_per_token: u64,
    /// Promotions per pass at most.
    pub max_promotions: usize,
}

impl Default for ReplanParams {
    fn default() -> Self {
        ReplanParams {
            every_tokens: 32,
            every_seconds: None,
            hysteresis: 2.0,
            horizon_tokens: 512.0,
            min_age_tokens: 64,
            min_move_interval_tokens: 128,
            bytes_per_token: 64 << 20,
            max_promotions: 16,
        }
    }
}

impl ReplanParams {
    /// The card's: a pass every 4 tokens, no minimum age or interval and
    /// no cap on promotions, so the upload allowance alone throttles the
    /// moves. An upload costs the card little, and on the ESFT trace
    /// (26 layers, held out, seeded) the simulator computed 7-24 % more
    /// experts on the card with these than with the RAM tier's
    /// defaults, which wait 64 tokens before a pin may leave.
    pub fn card() -> ReplanParams {
        ReplanParams {
            every_tokens: 4,
            min_age_tokens: 0,
            min_move_interval_tokens: 0,
            max_promotions: usize::MAX,
            ..ReplanParams::default()
        }
    }
}

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Moves {
    pub promote: Vec<ObjectIndex>,
    pub demote: Vec<ObjectIndex>,
}

pub struct Replanner {
    params: ReplanParams,
    share_bytes: u64,
    sizes_bytes: Vec<u64>,
    miss_seconds: Vec<f64>,
    link: MoveLink,
    pinned: Vec<bool>,
    pinned_bytes: u64,
    pinned_at: Vec<u64>,
    last_move: Vec<Option<u64>>,
    allowance_bytes: u64,
    last_pass: u64,
    last_pass_seconds: f64,
}

impl Replanner {
    /// Starts from `pinned` (already in the share), at token 0.
    pub fn new(
        params: ReplanParams,
        share_bytes: u64,
        sizes_bytes: Vec<u64>,
        miss_seconds: Vec<f64>,
        link: MoveLink,
        pinned: &[ObjectIndex],
    ) -> Replanner {
        let n = sizes_bytes.len();
        let mut is_pinned = vec![false; n];
        for &o in pinned {
            is_pinned[o as usize] = true;
        }
        let pinned_bytes = pinned.iter().map(|&o| sizes_bytes[o as usize]).sum();
        Replanner {
            params,
            share_bytes,
            sizes_bytes,
            miss_seconds,
            link,
            pinned: is_pinned,
            pinned_bytes,
            pinned_at: vec![0; n],
            last_move: vec![None; n],
            allowance_bytes: 0,
            last_pass: 0,
            last_pass_seconds: 0.0,
        }
    }

    pub fn params(&self) -> &ReplanParams {
        &self.params
    }

    /// Whether a pass is due at `token`, `seconds` into serving.
    pub fn due(&self, token: u64, seconds: f64) -> bool {
        token >= self.last_pass + self.params.every_tokens
            || self
                .params
                .every_seconds
                .is_some_and(|every| seconds >= self.last_pass_seconds + every)
    }

    /// One pass at `token`, `seconds` into serving, with `rate[o]` =
    /// expected requests of `o` per token. The moves returned are already
    /// taken as done.
    pub fn pass(&mut self, token: u64, seconds: f64, rate: &[f64]) -> Moves {
        let p = &self.params;
        self.allowance_bytes = (self.allowance_bytes
            + p.bytes_per_token * (token - self.last_pass))
            .min(self.share_bytes);
        self.last_pass = token;
        self.last_pass_seconds = seconds;
        let saving = |o: usize| rate[o] * self.miss_seconds[o];
        let density = |o: usize| saving(o) / self.sizes_bytes[o].max(1) as f64;
        let mut order: Vec<usize> = (0..rate.len()).collect();
        order.sort_by(|&a, &b| density(b).total_cmp(&density(a)).then(a.cmp(&b)));
        // The target: the share filled by value per byte.
        let mut target = vec![false; rate.len()];
        let mut left = self.share_bytes;
        for &o in &order {
            if rate[o] > 0.0 && self.sizes_bytes[o] <= left {
                left -= self.sizes_bytes[o];
                target[o] = true;
            }
        }
        let settled = |o: usize, s: &Self| {
            s.last_move[o].is_none_or(|t| token >= t + s.params.min_move_interval_tokens)
        };
        // Victims: pinned, off target, old enough, coldest first.
        let mut victims: Vec<usize> = order
            .iter()
            .rev()
            .copied()
            .filter(|&o| {
                self.pinned[o]
                    && !target[o]
                    && token >= self.pinned_at[o] + p.min_age_tokens
                    && settled(o, self)
            })
            .collect();
        victims.reverse();
        let mut moves = Moves::default();
        let candidates: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&c| target[c] && !self.pinned[c])
            .collect();
        for c in candidates {
            if moves.promote.len() >= self.params.max_promotions {
                break;
            }
            let size = self.sizes_bytes[c];
            if size > self.allowance_bytes || !settled(c, self) {
                continue;
            }
            // Coldest victims until `c` fits.
            let mut freed = self.share_bytes - self.pinned_bytes;
            let mut taken = 0;
            let mut lost = 0.0;
            while freed < size && taken < victims.len() {
                let v = victims[victims.len() - 1 - taken];
                freed += self.sizes_bytes[v];
                lost += saving(v);
                taken += 1;
            }
            let link = &self.link;
            let move_seconds = carry_seconds(&link.resources, size, link.from, link.to);
            let pays = (saving(c) - lost) * self.params.horizon_tokens
                > move_seconds * self.params.hysteresis;
            if freed < size || !pays {
                continue;
            }
            for _ in 0..taken {
                let v = victims.pop().expect("counted above");
                self.pinned[v] = false;
                self.pinned_bytes -= self.sizes_bytes[v];
                self.last_move[v] = Some(token);
                moves.demote.push(v as ObjectIndex);
            }
            self.pinned[c] = true;
            self.pinned_bytes += size;
            self.pinned_at[c] = token;
            self.last_move[c] = Some(token);
            self.allowance_bytes -= size;
            moves.promote.push(c as ObjectIndex);
        }
        moves
    }

    /// Whether `o` is pinned now.
    pub fn is_pinned(&self, o: ObjectIndex) -> bool {
        self.pinned[o as usize]
    }

    /// Pinned objects now.
    pub fn pinned(&self) -> Vec<ObjectIndex> {
        (0..self.pinned.len())
            .filter(|&o| self.pinned[o])
            .map(|o| o as ObjectIndex)
            .collect()
    }

    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes
    }
}

#[cfg(test)]
mod tests;

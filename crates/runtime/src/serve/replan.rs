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

use residency_cache::policy::ObjectIndex;
use residency_core::cost::{Place, Resources};
use residency_core::diff::carry_seconds;

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
mod tests {
    use super::*;

    /// Ten objects of 100 bytes, 1 ms per miss, read from a drive at
    /// 100 kB/s into RAM (a move costs 1 ms), share of 3 objects.
    fn replanner(params: ReplanParams, pinned: &[ObjectIndex]) -> Replanner {
        let resources = Resources {
            gpu_gemv_bytes_per_s: vec![],
            gpu_sync_seconds: vec![],
            gpu_upload_bytes_per_s: vec![],
            gpu_capacity_bytes: vec![],
            cpu_gemv_bytes_per_s: vec![1e9],
            ram_capacity_bytes: vec![300],
            drive_numa: vec![0],
            drive_read_bytes_per_s: vec![1e5],
            drive_latency_seconds: vec![0.0],
            felt_fraction: 1.0,
            fixed_token_seconds: 0.0,
            gpu_hosts: vec![],
        };
        let link = MoveLink {
            resources,
            from: Place::Disk(0),
            to: Place::Ram(0),
        };
        Replanner::new(params, 300, vec![100; 10], vec![1e-3; 10], link, pinned)
    }

    #[test]
    fn a_move_must_pay_for_itself_over_the_horizon() {
        // Pinned {0,1,2} at rates 0.10, 0.10, 0.05; object 3 rises to 0.06.
        // Swapping 2 for 3 saves (0.06 - 0.05) * 1 ms = 10 us per token;
        // over 512 tokens 5.12 ms against 1 ms x 2 (hysteresis): it pays.
        // At 0.051 it saves 1 us per token, 0.512 ms: it does not.
        let params = ReplanParams {
            min_age_tokens: 0,
            ..ReplanParams::default()
        };
        let mut rate = vec![0.0; 10];
        rate[..4].copy_from_slice(&[0.10, 0.10, 0.05, 0.051]);
        let mut r = replanner(params.clone(), &[0, 1, 2]);
        assert_eq!(r.pass(32, 0.0, &rate), Moves::default());
        rate[3] = 0.06;
        let mut r = replanner(params, &[0, 1, 2]);
        assert_eq!(
            r.pass(32, 0.0, &rate),
            Moves {
                promote: vec![3],
                demote: vec![2]
            }
        );
        assert_eq!(r.pinned(), vec![0, 1, 3]);
    }

    #[test]
    fn the_same_heat_gives_the_same_moves() {
        // A seeded heat drifting over 40 passes: two re-planners fed the same
        // rates decide the same moves at every pass (no hidden state such as
        // hash order or time).
        let params = ReplanParams {
            min_age_tokens: 0,
            ..ReplanParams::default()
        };
        let (mut a, mut b) = (
            replanner(params.clone(), &[0, 1, 2]),
            replanner(params, &[0, 1, 2]),
        );
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut moved = 0;
        for pass in 1..=40u64 {
            let rate: Vec<f64> = (0..10)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 1000) as f64 / 1000.0
                })
                .collect();
            let (ma, mb) = (a.pass(pass * 32, 0.0, &rate), b.pass(pass * 32, 0.0, &rate));
            moved += ma.promote.len();
            assert_eq!(ma, mb, "pass {pass}");
        }
        // The heat moved enough for pins to change.
        assert!(moved > 0);
    }

    #[test]
    fn a_pass_is_due_after_tokens_or_seconds_whichever_first() {
        let params = ReplanParams {
            every_tokens: 100,
            every_seconds: Some(1.0),
            ..ReplanParams::default()
        };
        let mut r = replanner(params, &[0, 1, 2]);
        assert!(!r.due(1, 0.5));
        assert!(r.due(1, 1.0));
        r.pass(1, 1.0, &[0.0; 10]);
        assert!(!r.due(2, 1.5));
        assert!(r.due(2, 2.0));
        // Tokens alone still make it due.
        assert!(r.due(101, 1.2));
    }

    #[test]
    fn drift_is_followed_within_the_budgets() {
        // Category A uses 0,1,2; then the heat moves to B: 7,8,9. With 2
        // promotions per pass and 100 bytes of allowance per token, the pins
        // follow in two passes; no pass promotes more than 2 objects, and
        // the pinned bytes never exceed the share.
        let params = ReplanParams {
            every_tokens: 10,
            min_age_tokens: 0,
            max_promotions: 2,
            bytes_per_token: 10,
            ..ReplanParams::default()
        };
        let mut r = replanner(params, &[0, 1, 2]);
        let mut rate = vec![0.0; 10];
        rate[7..].copy_from_slice(&[0.3, 0.3, 0.3]);
        let first = r.pass(10, 0.0, &rate);
        // 10 tokens x 10 bytes = 100 bytes of allowance: one promotion.
        assert_eq!(first.promote.len(), 1);
        let second = r.pass(30, 0.0, &rate);
        assert_eq!(second.promote.len(), 2);
        assert_eq!(r.pinned(), vec![7, 8, 9]);
        assert!(r.pinned_bytes() <= 300);
        // Settled: nothing more moves.
        assert_eq!(r.pass(60, 0.0, &rate), Moves::default());
    }

    #[test]
    fn young_pins_and_recent_movers_stay_put() {
        let params = ReplanParams {
            min_age_tokens: 100,
            ..ReplanParams::default()
        };
        let mut r = replanner(params, &[0, 1, 2]);
        let mut rate = vec![0.0; 10];
        rate[5] = 1.0;
        // Pins are at most 40 tokens old at token 40: none may go, and the
        // share is full, so 5 waits.
        assert_eq!(r.pass(40, 0.0, &rate), Moves::default());
        assert_eq!(
            r.pass(100, 0.0, &rate),
            Moves {
                promote: vec![5],
                demote: vec![2]
            }
        );
    }
}

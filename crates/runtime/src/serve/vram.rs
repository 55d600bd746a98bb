//! The VRAM tier of the serving loop (issue 15 item 3): which routed
//! experts have a copy on a GPU, so that they are computed there while the
//! rest take the CPU path.
//!
//! Residency is a cache policy's. It is `lfru` by default, Colibri's rule:
//! a candidate replaces the coldest resident only when
//! `hot > cold + cold/4 + 4`, with heat halved every `halve_every_ticks`
//! requests. The policy sees each token's routes once the token is
//! computed, so nothing a token uses is freed under it. Copies follow in the
//! background, at most `allowance_bytes_per_token` a token on average, so
//! a promotion never stalls a token: an expert the policy admitted is
//! computed on the CPU until its copy has landed.
//!
//! This module owns the decisions (what to upload, what to free, and when)
//! and the bytes the device holds. It never lets them pass the budget. An
//! expert evicted while its copy is in flight keeps its bytes counted
//! until the copy lands and is freed. The copies and the kernels belong to
//! the caller.

use residency_cache::policy::{
    build, Knowledge, ObjectIndex, Outcome, Policy, PolicyError, PolicyKind, PolicyParams,
    PolicySetup, Request, NEVER,
};
use std::collections::VecDeque;

/// Where an expert's device copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    None,
    /// Admitted by the policy, waiting for the allowance or for room.
    Queued,
    /// Handed to the caller to upload.
    Uploading,
    OnDevice,
    /// Evicted while uploading: freed when it lands.
    Doomed,
}

/// What the caller does between tokens.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VramMoves {
    /// Copy these to the device, then call [`VramResidency::landed`] for
    /// each.
    pub uploads: Vec<ObjectIndex>,
    /// Free these copies now.
    pub frees: Vec<ObjectIndex>,
}

pub struct VramResidency {
    policy: Box<dyn Policy + Send>,
    sizes_bytes: Vec<u64>,
    copies: Vec<CopyState>,
    /// Admitted, oldest first.
    queue: VecDeque<ObjectIndex>,
    capacity_bytes: u64,
    /// Bytes on the device or on their way: landed, uploading and doomed.
    device_bytes: u64,
    allowance_bytes_per_token: u64,
    /// Upload bytes the allowance has left. It accrues each token, up to a
    /// token's allowance or the largest expert, whichever is more, so an
    /// expert larger than the allowance still goes up, just not every token.
    credit_bytes: u64,
    largest_bytes: u64,
    ticks: u64,
    evicted: Vec<ObjectIndex>,
}

impl VramResidency {
    /// A tier of `capacity_bytes` over experts of `sizes_bytes`, resident by
    /// `policy` (one that holds bytes: not `plan`, `pinned-lru` or the
    /// learned ones, which need a prior).
    pub fn new(
        policy: PolicyKind,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        params: PolicyParams,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, PolicyError> {
        let setup = PolicySetup {
            capacity_bytes,
            objects: sizes_bytes.len(),
            knowledge: Knowledge::default(),
            params,
        };
        Ok(VramResidency {
            policy: build(policy, &setup)?,
            copies: vec![CopyState::None; sizes_bytes.len()],
            largest_bytes: sizes_bytes.iter().copied().max().unwrap_or(0),
            sizes_bytes,
            queue: VecDeque::new(),
            capacity_bytes,
            device_bytes: 0,
            allowance_bytes_per_token,
            credit_bytes: 0,
            ticks: 0,
            evicted: Vec::new(),
        })
    }

    /// Whether `o` is computed on the device now: its copy has landed.
    pub fn on_device(&self, o: ObjectIndex) -> bool {
        self.copies[o as usize] == CopyState::OnDevice
    }

    /// Bytes on the device or on their way to it: never above the budget.
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// After a token is computed: its routed experts go through the policy,
    /// in route order, and the token's allowance is spent on the oldest
    /// admissions that fit in the budget.
    pub fn after_token(&mut self, routes: &[ObjectIndex]) -> VramMoves {
        let mut moves = VramMoves::default();
        for &o in routes {
            let request = Request {
                object: o,
                size_bytes: self.sizes_bytes[o as usize],
                time: self.ticks,
                next_access: NEVER,
            };
            self.ticks += 1;
            self.evicted.clear();
            let outcome = self.policy.access(&request, &mut self.evicted);
            for i in 0..self.evicted.len() {
                let v = self.evicted[i];
                self.evict(v, &mut moves.frees);
            }
            if outcome == Outcome::Admitted {
                self.copies[o as usize] = CopyState::Queued;
                self.queue.push_back(o);
            }
        }
        self.credit_bytes = (self.credit_bytes + self.allowance_bytes_per_token)
            .min(self.allowance_bytes_per_token.max(self.largest_bytes));
        while let Some(&o) = self.queue.front() {
            let size = self.sizes_bytes[o as usize];
            if size > self.credit_bytes || self.device_bytes + size > self.capacity_bytes {
                break;
            }
            self.queue.pop_front();
            self.credit_bytes -= size;
            self.device_bytes += size;
            self.copies[o as usize] = CopyState::Uploading;
            moves.uploads.push(o);
        }
        moves
    }

    /// `o`'s copy has landed. True if it must be freed at once: it was
    /// evicted while in flight.
    pub fn landed(&mut self, o: ObjectIndex) -> bool {
        match self.copies[o as usize] {
            CopyState::Uploading => {
                self.copies[o as usize] = CopyState::OnDevice;
                false
            }
            CopyState::Doomed => {
                self.copies[o as usize] = CopyState::None;
                self.device_bytes -= self.sizes_bytes[o as usize];
                true
            }
            state => panic!("expert {o} landed in state {state:?}: a caller bug"),
        }
    }

    /// The policy evicted `v`: its copy goes, now or when it lands.
    fn evict(&mut self, v: ObjectIndex, frees: &mut Vec<ObjectIndex>) {
        let size = self.sizes_bytes[v as usize];
        self.copies[v as usize] = match self.copies[v as usize] {
            CopyState::Queued => {
                self.queue.retain(|&q| q != v);
                CopyState::None
            }
            CopyState::OnDevice => {
                self.device_bytes -= size;
                frees.push(v);
                CopyState::None
            }
            CopyState::Uploading | CopyState::Doomed => CopyState::Doomed,
            CopyState::None => CopyState::None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(capacity: u64, experts: usize, allowance: u64) -> VramResidency {
        VramResidency::new(
            PolicyKind::Lfru,
            capacity,
            vec![1; experts],
            PolicyParams::default(),
            allowance,
        )
        .unwrap()
    }

    /// Uploads `moves` and lands them at once, as a copy that finishes
    /// within its token.
    fn land_all(t: &mut VramResidency, moves: &VramMoves) {
        for &o in &moves.uploads {
            assert!(!t.landed(o));
        }
    }

    #[test]
    fn colibri_s_rule_promotes_on_the_sixth_request_over_a_coldest_of_one() {
        // Room for two unit experts, one upload a token. Experts 0 and 1
        // fill the free room without the test (one request each: heat 1).
        // Then expert 2 needs hot > 1 + 1/4 + 4 = 5 against the coldest,
        // so its sixth request promotes it, evicting 0 (heat ties go to the
        // least recently used) and freeing 0's landed copy.
        let mut t = tier(2, 3, 1);
        for o in [0, 1] {
            let moves = t.after_token(&[o]);
            assert_eq!(moves.uploads, vec![o]);
            land_all(&mut t, &moves);
        }
        for k in 1..=5 {
            let moves = t.after_token(&[2]);
            assert_eq!(moves, VramMoves::default(), "request {k} of 2");
        }
        let moves = t.after_token(&[2]);
        assert_eq!(
            moves,
            VramMoves {
                uploads: vec![2],
                frees: vec![0]
            }
        );
        assert!(!t.on_device(2) && t.on_device(1) && !t.on_device(0));
        land_all(&mut t, &moves);
        assert!(t.on_device(2));
        assert_eq!(t.device_bytes(), 2);
    }

    #[test]
    fn the_allowance_spreads_uploads_over_tokens_oldest_first() {
        // Three admissions in one token, one expert's bytes a token: 3,
        // then 1, then 4, one a token; nothing is on the device until it
        // lands, so the token after the admissions computes all three on
        // the CPU.
        let mut t = tier(10, 5, 1);
        let first = t.after_token(&[3, 1, 4]);
        assert_eq!(first.uploads, vec![3]);
        assert!(!t.on_device(3));
        land_all(&mut t, &first);
        assert_eq!(t.after_token(&[]).uploads, vec![1]);
        assert_eq!(t.after_token(&[]).uploads, vec![4]);
        assert_eq!(t.after_token(&[]).uploads, Vec::<ObjectIndex>::new());
    }

    #[test]
    fn an_expert_larger_than_the_allowance_still_goes_up() {
        // Experts of 3 bytes, 1 byte a token: the credit grows to 3 (the
        // largest expert) by the third token, which uploads it.
        let mut t =
            VramResidency::new(PolicyKind::Lru, 6, vec![3; 2], PolicyParams::default(), 1).unwrap();
        assert!(t.after_token(&[0]).uploads.is_empty());
        assert!(t.after_token(&[]).uploads.is_empty());
        assert_eq!(t.after_token(&[]).uploads, vec![0]);
    }

    #[test]
    fn an_expert_evicted_in_flight_is_freed_when_it_lands() {
        // LRU of one unit expert: 0 is admitted and starts uploading; the
        // next token's 1 evicts it while in flight. Its byte stays counted,
        // so 1 cannot start until 0 lands and is freed.
        let mut t =
            VramResidency::new(PolicyKind::Lru, 1, vec![1; 2], PolicyParams::default(), 1).unwrap();
        assert_eq!(t.after_token(&[0]).uploads, vec![0]);
        let moves = t.after_token(&[1]);
        assert_eq!(moves, VramMoves::default());
        assert_eq!(t.device_bytes(), 1);
        assert!(t.landed(0), "doomed in flight: free it");
        assert_eq!(t.device_bytes(), 0);
        assert_eq!(t.after_token(&[]).uploads, vec![1]);
    }

    #[test]
    fn the_budget_holds_whenever_copies_land_late() {
        // Random routes of experts of 1-4 bytes into 9 bytes, each copy
        // landing 0-3 tokens after it started: the device's bytes never
        // pass the budget, every landed expert is one the policy holds,
        // and the same seed gives the same moves.
        let run = |seed: u64| {
            let mut rng = residency_cache::sim::synthetic::Rng(seed);
            let sizes: Vec<u64> = (0..12).map(|_| 1 + rng.next_u64() % 4).collect();
            let mut t =
                VramResidency::new(PolicyKind::Lfru, 9, sizes, PolicyParams::default(), 3).unwrap();
            let mut in_flight: Vec<(u64, ObjectIndex)> = Vec::new();
            let mut log = Vec::new();
            for token in 0..2000u64 {
                let routes: Vec<ObjectIndex> = (0..3)
                    .map(|_| (rng.next_u64() % 12) as ObjectIndex)
                    .collect();
                let moves = t.after_token(&routes);
                assert!(t.device_bytes() <= 9, "token {token}");
                for &o in &moves.uploads {
                    in_flight.push((token + rng.next_u64() % 4, o));
                }
                in_flight.retain(|&(due, o)| {
                    if due > token {
                        return true;
                    }
                    t.landed(o);
                    false
                });
                for o in 0..12 {
                    assert!(!t.on_device(o) || t.policy.contains(o), "token {token}");
                }
                log.push(moves);
            }
            log
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }
}

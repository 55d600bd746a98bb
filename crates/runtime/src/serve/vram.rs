//! The VRAM tier of the serving loop (issue 15 item 3): which routed
//! experts have a copy on a GPU, so that they are computed there while the
//! rest take the CPU path.
//!
//! Residency is a cache policy's, one for every expert or, for `dynamic`,
//! one a MoE layer whose budgets the online allocator moves between
//! layers as their curves ask (shrinks before grows, as the RAM tier's
//! `dynamic`). It is `lfru` by default, Colibri's rule:
//! a candidate replaces the coldest resident only when
//! `hot > cold + cold/4 + 4`, with heat halved every `halve_every_ticks`
//! requests. The policy sees each token's routes once the token is
//! computed, so nothing a token uses is freed under it. Copies follow in the
//! background, at most `allowance_bytes_per_token` a token on average, so
//! a promotion never stalls a token: an expert the policy admitted is
//! computed on the CPU until its copy has landed. Copies come from RAM:
//! one whose host copy has gone is skipped, and the expert goes up the
//! next time it is routed.
//!
//! This module owns the decisions (what to upload, what to free, and when)
//! and the bytes the device holds. It never lets them pass the budget. An
//! expert evicted while its copy is in flight keeps its bytes counted
//! until the copy lands and is freed. The copies and the kernels belong to
//! the caller.

use residency_cache::online::{LayerShape, OnlineAllocator, OnlineParams};
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
    /// Admitted, but its upload was skipped: its host copy had left RAM
    /// (the card's copies come from RAM, never from the drive). Queued
    /// again the next time it is routed, when the CPU has just loaded it.
    Skipped,
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
    /// The tier's caches: one over every expert, or one a layer whose
    /// budgets `allocator` moves (`dynamic`).
    caches: Vec<Cache>,
    /// Experts a cache covers (the last may cover fewer).
    cache_objects: usize,
    allocator: Option<OnlineAllocator>,
    tokens: u64,
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

/// A policy over the experts from `first` on, numbered from 0 inside it.
struct Cache {
    policy: Box<dyn Policy + Send>,
    first: ObjectIndex,
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
        let n = sizes_bytes.len();
        let cache = cache(policy, capacity_bytes, 0, n, &params)?;
        Ok(VramResidency::of(
            vec![cache],
            n,
            None,
            capacity_bytes,
            sizes_bytes,
            allowance_bytes_per_token,
        ))
    }

    /// `dynamic` on the card: one cache a layer (`layers[l]`, its experts
    /// `l * experts..`), each resident by `policy` (one that resizes), from
    /// the uniform split of `capacity_bytes` that `online` then moves
    /// between layers as their curves ask, as the RAM tier's `dynamic`
    /// does.
    pub fn per_layer(
        policy: PolicyKind,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        layers: Vec<LayerShape>,
        params: PolicyParams,
        online: OnlineParams,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, String> {
        if !policy.resizes() {
            return Err(format!(
                "--vram-policy {}: per-layer budgets that move need {} inside each layer",
                policy.name(),
                PolicyKind::resizing_names()
            ));
        }
        let experts = layers.first().map_or(0, |l| l.experts);
        let allocator =
            OnlineAllocator::new(online, layers, capacity_bytes).map_err(|e| e.to_string())?;
        let caches = allocator
            .capacities_bytes()
            .iter()
            .enumerate()
            .map(|(l, &bytes)| cache(policy, bytes, l * experts, experts, &params))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(VramResidency::of(
            caches,
            experts,
            Some(allocator),
            capacity_bytes,
            sizes_bytes,
            allowance_bytes_per_token,
        ))
    }

    fn of(
        caches: Vec<Cache>,
        cache_objects: usize,
        allocator: Option<OnlineAllocator>,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        allowance_bytes_per_token: u64,
    ) -> VramResidency {
        VramResidency {
            caches,
            cache_objects: cache_objects.max(1),
            allocator,
            tokens: 0,
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
        }
    }

    /// Each cache's budget: one, or one a layer.
    pub fn capacities_bytes(&self) -> Vec<u64> {
        self.caches
            .iter()
            .map(|c| c.policy.capacity_bytes())
            .collect()
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
            let k = o as usize / self.cache_objects;
            let first = self.caches[k].first;
            let request = Request {
                object: o - first,
                size_bytes: self.sizes_bytes[o as usize],
                time: self.ticks,
                next_access: NEVER,
            };
            self.ticks += 1;
            self.evicted.clear();
            let outcome = self.caches[k].policy.access(&request, &mut self.evicted);
            self.evict_all(first, &mut moves.frees);
            if outcome == Outcome::Hit && self.copies[o as usize] == CopyState::Skipped {
                self.copies[o as usize] = CopyState::Queued;
                self.queue.push_back(o);
            }
            if outcome == Outcome::Admitted {
                if self.copies[o as usize] == CopyState::Doomed {
                    // Evicted in flight and wanted again: the copy on its
                    // way is the one to keep.
                    self.copies[o as usize] = CopyState::Uploading;
                } else {
                    self.copies[o as usize] = CopyState::Queued;
                    self.queue.push_back(o);
                }
            }
            if let Some(a) = &mut self.allocator {
                a.record(k, o - first);
            }
        }
        self.tokens += 1;
        self.move_budgets(&mut moves.frees);
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

    /// `o`'s upload did not happen: its host copy had left RAM. Its bytes
    /// leave the device's account; it goes up once it is routed again.
    pub fn skipped(&mut self, o: ObjectIndex) {
        let size = self.sizes_bytes[o as usize];
        self.copies[o as usize] = match self.copies[o as usize] {
            CopyState::Uploading => CopyState::Skipped,
            CopyState::Doomed => CopyState::None,
            state => panic!("expert {o} skipped in state {state:?}: a caller bug"),
        };
        self.device_bytes -= size;
    }

    /// `dynamic`: when a pass of the allocator moves budgets, every cache
    /// that shrinks does so (evicting) before any grows, so their budgets
    /// never sum above the tier's.
    fn move_budgets(&mut self, frees: &mut Vec<ObjectIndex>) {
        let Some(a) = &mut self.allocator else {
            return;
        };
        if !a.due(self.tokens) || !a.pass(self.tokens).moved {
            return;
        }
        let target = a.capacities_bytes();
        for shrink in [true, false] {
            for (k, &bytes) in target.iter().enumerate() {
                if (bytes < self.caches[k].policy.capacity_bytes()) == shrink {
                    self.evicted.clear();
                    let resized = self.caches[k].policy.resize(bytes, &mut self.evicted);
                    debug_assert!(resized, "per_layer checked the policy resizes");
                    let first = self.caches[k].first;
                    self.evict_all(first, frees);
                }
            }
        }
    }

    /// The experts in `evicted` (numbered from `first`) lose their copies.
    fn evict_all(&mut self, first: ObjectIndex, frees: &mut Vec<ObjectIndex>) {
        for i in 0..self.evicted.len() {
            let v = self.evicted[i] + first;
            self.evict(v, frees);
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
            CopyState::None | CopyState::Skipped => CopyState::None,
        };
    }
}

/// A cache of `policy` over `objects` experts from `first` on.
fn cache(
    policy: PolicyKind,
    capacity_bytes: u64,
    first: usize,
    objects: usize,
    params: &PolicyParams,
) -> Result<Cache, PolicyError> {
    let setup = PolicySetup {
        capacity_bytes,
        objects,
        knowledge: Knowledge::default(),
        params: params.clone(),
    };
    Ok(Cache {
        policy: build(policy, &setup)?,
        first: first as ObjectIndex,
    })
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

    /// Copies in flight, each landing (or skipped) 0-3 tokens after it
    /// started.
    #[derive(Default)]
    struct Flights(Vec<(u64, ObjectIndex)>);

    impl Flights {
        /// Starts `moves`' uploads at token `now`, then lands every copy
        /// due by then.
        fn step(
            &mut self,
            t: &mut VramResidency,
            moves: &VramMoves,
            now: u64,
            rng: &mut residency_cache::sim::synthetic::Rng,
        ) {
            for &o in &moves.uploads {
                self.0.push((now + rng.next_u64() % 4, o));
            }
            self.0.retain(|&(due, o)| {
                if due > now {
                    return true;
                }
                // One in eight skipped: its host copy had left RAM.
                if rng.next_u64().is_multiple_of(8) {
                    t.skipped(o);
                } else {
                    t.landed(o);
                }
                false
            });
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
    fn a_skipped_upload_frees_its_bytes_and_goes_up_when_routed_again() {
        // LRU (admits every miss) with room for one unit expert. 0 is
        // admitted and its upload skipped: nothing on the device, no
        // bytes counted, no upload the next token either (0 not routed).
        let mut t =
            VramResidency::new(PolicyKind::Lru, 1, vec![1; 3], PolicyParams::default(), 1).unwrap();
        assert_eq!(t.after_token(&[0]).uploads, vec![0]);
        t.skipped(0);
        assert!(!t.on_device(0));
        assert_eq!(t.device_bytes(), 0);
        assert_eq!(t.after_token(&[]), VramMoves::default());
        // Routed again (a hit for the policy): queued and uploaded.
        let moves = t.after_token(&[0]);
        assert_eq!(moves.uploads, vec![0]);
        land_all(&mut t, &moves);
        assert!(t.on_device(0));
        assert_eq!(t.device_bytes(), 1);
        // Skipped while evicted in flight: simply gone. 1 evicts 0 (a
        // landed copy, freed), 2 evicts 1 while 1 is in flight.
        let moves = t.after_token(&[1]);
        assert_eq!(moves.frees, vec![0]);
        assert_eq!(moves.uploads, vec![1]);
        let moves = t.after_token(&[2]);
        assert!(moves.uploads.is_empty(), "1's bytes still count: no room");
        t.skipped(1);
        assert_eq!(t.device_bytes(), 0);
        // 2 was queued behind 1's bytes and now goes up; 1, evicted, is
        // not queued again when routed (a miss the policy admits anew).
        assert_eq!(t.after_token(&[]).uploads, vec![2]);
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
        // pass the budget, every landed expert is one the policy holds, no
        // copy lands twice (`landed` would panic), and the same seed gives
        // the same moves.
        let run = |policy: PolicyKind, seed: u64| {
            let mut rng = residency_cache::sim::synthetic::Rng(seed);
            let sizes: Vec<u64> = (0..12).map(|_| 1 + rng.next_u64() % 4).collect();
            let mut t = VramResidency::new(policy, 9, sizes, PolicyParams::default(), 3).unwrap();
            let mut flights = Flights::default();
            let mut log = Vec::new();
            for token in 0..2000u64 {
                let routes: Vec<ObjectIndex> = (0..3)
                    .map(|_| (rng.next_u64() % 12) as ObjectIndex)
                    .collect();
                let moves = t.after_token(&routes);
                assert!(t.device_bytes() <= 9, "token {token}");
                flights.step(&mut t, &moves, token, &mut rng);
                for o in 0..12 {
                    assert!(
                        !t.on_device(o) || t.caches[0].policy.contains(o),
                        "token {token}"
                    );
                }
                log.push(moves);
            }
            log
        };
        // LRU re-admits what it just evicted, often while its copy is
        // still in flight; LFRU's rule rarely does.
        for policy in [PolicyKind::Lfru, PolicyKind::Lru] {
            assert_eq!(run(policy, 5), run(policy, 5));
            assert_ne!(run(policy, 5), run(policy, 6));
        }
    }

    /// A layer of 8 unit experts, one a token, a miss priced at 1 s.
    const UNIT_LAYER: LayerShape = LayerShape {
        slot_bytes: 1,
        experts: 8,
        miss_seconds: 1.0,
        leased_at_once: 1,
    };

    /// Two layers of 8 unit experts on a card of 8 bytes, LRU inside each
    /// layer, passes every token over a window of 48 requests.
    fn two_layers() -> VramResidency {
        let online = OnlineParams {
            window_accesses: 48,
            every_tokens: 1,
            ..OnlineParams::default()
        };
        VramResidency::per_layer(
            PolicyKind::Lru,
            8,
            vec![1; 16],
            vec![UNIT_LAYER; 2],
            PolicyParams::default(),
            online,
            8,
        )
        .unwrap()
    }

    /// A token that cycles `busy` (layer 0 or 1) over 6 of its experts and
    /// asks the other layer for its expert 0 only.
    fn token(busy: usize, t: u32) -> Vec<ObjectIndex> {
        let cycling = busy as u32 * 8 + t % 6;
        let still = (1 - busy as u32) * 8;
        vec![cycling, still]
    }

    #[test]
    fn dynamic_budgets_follow_traffic_from_one_layer_to_the_other() {
        // Uniform start: 4 bytes a layer. A layer cycling over 6 experts
        // hits only with 6 slots; the other needs 1. Once layer 0 cycles,
        // the allocator gives it the room, and after the traffic moves to
        // layer 1 the budget follows within 50 passes (one a token); the
        // budgets never sum above the card's 8 bytes, nor do the bytes on
        // the card, with every copy landing at once.
        let mut t = two_layers();
        assert_eq!(t.capacities_bytes(), vec![4, 4]);
        let run = |t: &mut VramResidency, busy: usize, tokens: u32| {
            for k in 0..tokens {
                let moves = t.after_token(&token(busy, k));
                for &o in &moves.uploads {
                    t.landed(o);
                }
                assert!(t.capacities_bytes().iter().sum::<u64>() <= 8);
                assert!(t.device_bytes() <= 8);
            }
        };
        run(&mut t, 0, 100);
        let c = t.capacities_bytes();
        assert!(c[0] >= 6 && c[0] > c[1], "{c:?}");
        run(&mut t, 1, 50);
        let c = t.capacities_bytes();
        assert!(c[1] >= 6 && c[1] > c[0], "{c:?}");
    }

    #[test]
    fn dynamic_needs_a_policy_that_resizes() {
        let e = VramResidency::per_layer(
            PolicyKind::Arc,
            8,
            vec![1; 16],
            vec![UNIT_LAYER; 2],
            PolicyParams::default(),
            OnlineParams::default(),
            8,
        )
        .err()
        .unwrap();
        assert!(
            e.contains("--vram-policy arc") && e.contains("lru, fifo, sieve, s3fifo, lfu or lfru"),
            "{e}"
        );
    }

    #[test]
    fn dynamic_keeps_the_budget_and_its_seed_while_budgets_move() {
        // Random traffic that shifts between the layers every 40 tokens,
        // copies landing 0-3 tokens late: the bytes on the card and the
        // caches' budgets stay within 8, landed experts are ones their
        // layer's cache holds, and a seed gives the same moves.
        let run = |seed: u64| {
            let mut rng = residency_cache::sim::synthetic::Rng(seed);
            let mut t = two_layers();
            let mut flights = Flights::default();
            let mut log = Vec::new();
            for step in 0..600u64 {
                let busy = (step / 40 % 2) as usize;
                let spread = |rng: &mut residency_cache::sim::synthetic::Rng, n| {
                    (rng.next_u64() % n) as ObjectIndex
                };
                let routes = vec![
                    busy as ObjectIndex * 8 + spread(&mut rng, 7),
                    (1 - busy) as ObjectIndex * 8 + spread(&mut rng, 2),
                ];
                let moves = t.after_token(&routes);
                assert!(t.device_bytes() <= 8, "step {step}");
                assert!(t.capacities_bytes().iter().sum::<u64>() <= 8, "step {step}");
                flights.step(&mut t, &moves, step, &mut rng);
                for o in 0..16u32 {
                    let cache = &t.caches[o as usize / 8];
                    assert!(
                        !t.on_device(o) || cache.policy.contains(o - cache.first),
                        "step {step}"
                    );
                }
                log.push((moves, t.capacities_bytes()));
            }
            log
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}

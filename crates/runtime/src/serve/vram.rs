//! The VRAM tier of the serving loop: which routed experts have a copy on
//! a GPU, so that they are computed there while the rest take the CPU path.
//!
//! Residency is decided one of two ways ([`VramPolicy`]):
//! - **A cache policy** fed each token's routes once the token is
//!   computed, so nothing a token uses is freed under it: one cache for
//!   every expert or, for `dynamic`, one a MoE layer whose budgets the
//!   online allocator moves between layers as their curves ask (shrinks
//!   before grows, as the RAM tier's `dynamic`). It is `lfru` by default,
//!   Colibri's rule: a candidate replaces the coldest resident only when
//!   `hot > cold + cold/4 + 4`, with heat halved every
//!   `halve_every_ticks` requests. The planner-aware policies (`cost`,
//!   `frequency`, `plan`) know each expert's size, the CPU seconds a copy
//!   saves per request and the upload's seconds per byte; `belady` knows
//!   the future requests (offline; not a bound where uploads are
//!   rationed and land late).
//! - **The planner in the loop** (`replan`): the card's knapsack of the
//!   training heat is uploaded before serving, then every pass re-solves
//!   it from live heat and moves only what pays for its upload over the
//!   horizon, times the hysteresis ([`Replanner`], the RAM tier's
//!   re-planner, on the card's link).
//!
//! Copies follow in the background, at most `allowance_bytes_per_token` a
//! token on average, so a promotion never stalls a token: an expert
//! admitted is computed on the CPU until its copy has landed. Copies come
//! from RAM: one whose host copy has gone is skipped, and the expert goes
//! up the next time it is routed (if it is still wanted).
//!
//! This module owns the decisions (what to upload, what to free, and when)
//! and the bytes the device holds. It never lets them pass the budget. An
//! expert evicted while its copy is in flight keeps its bytes counted
//! until the copy lands and is freed. The copies and the kernels belong to
//! the caller.

use super::heat::LiveHeat;
use super::replan::{ReplanParams, Replanner};
use crate::serve::replan::MoveLink;
use residency_policy::knapsack;
use residency_policy::online::OnlineAllocator;
use residency_policy::{ObjectIndex, Outcome, Policy, PolicyKind, Request, NEVER};
use std::collections::VecDeque;

mod build;

residency_core::named! {
    /// What decides which experts have a copy on the card: the cache
    /// policies that can run there (by their simulator names), and the
    /// planner in the loop. `pinned-lru` is not one: its moving pins on
    /// the card are `replan`, its static ones `plan`.
    pub enum VramPolicy("VRAM policy") {
        Lru = "lru",
        Fifo = "fifo",
        Clock = "clock",
        Lfu = "lfu",
        /// Colibri's rule.
        Lfru = "lfru",
        Slru = "slru",
        WTinyLfu = "wtinylfu",
        S3Fifo = "s3fifo",
        Sieve = "sieve",
        Arc = "arc",
        /// Frequency admission, the training heat as prior.
        Frequency = "frequency",
        /// Cost-aware admission: the CPU seconds a copy saves against its
        /// upload, the training heat as prior.
        Cost = "cost",
        /// The training knapsack, uploaded before serving and kept.
        Plan = "plan",
        /// Offline: Belady's MIN on the future requests.
        Belady = "belady",
        /// The planner in the loop: the training knapsack first, then
        /// re-solved from live heat every pass, moving what pays.
        Replan = "replan",
    }
}

impl VramPolicy {
    /// The cache policy of the same name; `None` for `replan`.
    pub fn cache_policy(self) -> Option<PolicyKind> {
        PolicyKind::from_name(self.name())
    }

    /// Whether the card's budget can be split per layer and moved
    /// (`--vram-allocation dynamic`).
    pub fn resizes(self) -> bool {
        self.cache_policy().is_some_and(PolicyKind::resizes)
    }

    /// Whether it sees the future: offline, a reference, not a policy
    /// an engine can run.
    pub fn is_offline(self) -> bool {
        self == VramPolicy::Belady
    }

    /// Its name as runs print it. `belady` says it sees the future, and
    /// not that it bounds the others: on the card uploads are rationed
    /// and land a token late, where MIN is not optimal (on ESFT at 10 %
    /// of VRAM it computed fewer experts on the card than `lfru`).
    pub fn label(self) -> String {
        if self.is_offline() {
            format!(
                "{} (offline: sees the future; not a bound under the upload allowance)",
                self.name()
            )
        } else {
            self.name().to_string()
        }
    }
}

/// What the card's planner-aware policies know of the experts, every
/// vector indexed by object.
#[derive(Debug, Clone, PartialEq)]
pub struct CardKnowledge {
    /// Requests of each expert in the training tokens: the prior of
    /// `frequency` and `cost`, the knapsack of `plan` and `replan`.
    pub train_counts: Vec<u64>,
    /// Seconds the CPU takes to compute each expert: what a copy saves
    /// each time the expert is routed.
    pub cpu_seconds: Vec<f64>,
    /// The link an upload takes, RAM to the card (what a move costs).
    pub link: MoveLink,
    /// Every expert routed, in the order the tier will be told of them
    /// (seed tokens, then the served ones): `belady`'s future.
    pub future: Vec<ObjectIndex>,
    /// `replan`'s passes ([`ReplanParams::card`] serving).
    pub replan: ReplanParams,
    /// `replan`'s live heat is halved every this many tokens of a layer
    /// ([`CARD_HEAT_HALVE_EVERY_TOKENS`] serving).
    pub heat_halve_every_tokens: u64,
}

/// The card's live heat for `replan` is halved every 64 tokens, not the
/// RAM tier's 1024: simulated on DeepSeek-V2-Lite's ESFT trace (26
/// layers, held out, seeded), a window of 64 tokens computed 1-7 % more
/// experts on the card than 1024 did (docs/serving.md), as a faster decay
/// does for `lfru`.
pub const CARD_HEAT_HALVE_EVERY_TOKENS: u64 = 64;

impl CardKnowledge {
    /// The training requests as a share of all of them: requests per
    /// request of the tier's clock, the policies' prior rate.
    fn prior_rate(&self) -> Vec<f64> {
        let total = self.train_counts.iter().sum::<u64>().max(1) as f64;
        self.train_counts
            .iter()
            .map(|&c| c as f64 / total)
            .collect()
    }

    /// The training knapsack of `capacity_bytes`: the experts with the
    /// most CPU seconds saved per byte.
    fn knapsack(&self, sizes_bytes: &[u64], capacity_bytes: u64) -> Vec<ObjectIndex> {
        knapsack(
            sizes_bytes,
            &self.prior_rate(),
            &self.cpu_seconds,
            capacity_bytes,
        )
    }

    /// Seconds per byte of an upload (0 where the link has no rate).
    fn upload_seconds_per_byte(&self) -> f64 {
        let l = &self.link;
        residency_core::diff::carry_seconds(&l.resources, 1 << 20, l.from, l.to) / (1 << 20) as f64
    }
}

/// Where an expert's device copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    None,
    /// Admitted, waiting for the allowance or for room.
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

/// Who decides the card's residents.
enum Decider {
    /// Cache policies fed every route: one over every expert, or one a
    /// layer whose budgets `allocator` moves (`dynamic`).
    Caches {
        caches: Vec<Cache>,
        /// Experts a cache covers (the last may cover fewer).
        cache_objects: usize,
        allocator: Option<OnlineAllocator>,
        /// `belady`: the next request of each tick's object; empty for
        /// the online policies.
        next_access: Vec<u64>,
    },
    /// The planner in the loop, from live heat of every route.
    Planner {
        replanner: Box<Replanner>,
        heat: LiveHeat,
        experts: usize,
    },
}

pub struct VramResidency {
    decider: Decider,
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
    /// Queues `objects` for upload, oldest first.
    fn queue_all(&mut self, objects: &[ObjectIndex]) {
        for &o in objects {
            self.copies[o as usize] = CopyState::Queued;
            self.queue.push_back(o);
        }
    }

    /// Each cache's budget: one, or one a layer.
    pub fn capacities_bytes(&self) -> Vec<u64> {
        match &self.decider {
            Decider::Caches { caches, .. } => {
                caches.iter().map(|c| c.policy.capacity_bytes()).collect()
            }
            Decider::Planner { .. } => vec![self.capacity_bytes],
        }
    }

    /// Whether the decider holds `o`: its cache's policy, or the planner's
    /// pins.
    fn decided(&self, o: ObjectIndex) -> bool {
        match &self.decider {
            Decider::Caches {
                caches,
                cache_objects,
                ..
            } => {
                let cache = &caches[o as usize / cache_objects];
                cache.policy.contains(o - cache.first)
            }
            Decider::Planner { replanner, .. } => replanner.is_pinned(o),
        }
    }

    /// Whether `o` is computed on the device now: its copy has landed.
    pub fn on_device(&self, o: ObjectIndex) -> bool {
        self.copies[o as usize] == CopyState::OnDevice
    }

    /// Bytes on the device or on their way to it: never above the budget.
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// Before serving: what the decider holds from the start (`plan`'s and
    /// `replan`'s knapsack), uploaded at once, outside the allowance, as a
    /// plan is applied at load. The caller lands them before the first
    /// token.
    pub fn startup(&mut self) -> Vec<ObjectIndex> {
        let mut uploads = Vec::new();
        while let Some(&o) = self.queue.front() {
            let size = self.sizes_bytes[o as usize];
            if self.device_bytes + size > self.capacity_bytes {
                break;
            }
            self.queue.pop_front();
            self.device_bytes += size;
            self.copies[o as usize] = CopyState::Uploading;
            uploads.push(o);
        }
        uploads
    }

    /// After a token is computed: its routed experts go to the decider, in
    /// route order, and the token's allowance is spent on the oldest
    /// admissions that fit in the budget.
    pub fn after_token(&mut self, routes: &[ObjectIndex]) -> VramMoves {
        let mut moves = VramMoves::default();
        match self.decider {
            Decider::Caches { .. } => self.through_caches(routes, &mut moves.frees),
            Decider::Planner { .. } => self.through_planner(routes, &mut moves.frees),
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

    /// A token's routes through the cache policies, then `dynamic`'s
    /// budgets.
    fn through_caches(&mut self, routes: &[ObjectIndex], frees: &mut Vec<ObjectIndex>) {
        for &o in routes {
            let Decider::Caches {
                caches,
                cache_objects,
                allocator,
                next_access,
            } = &mut self.decider
            else {
                unreachable!("called for caches only");
            };
            let k = o as usize / *cache_objects;
            let first = caches[k].first;
            let request = Request {
                object: o - first,
                size_bytes: self.sizes_bytes[o as usize],
                time: self.ticks,
                next_access: next_access
                    .get(self.ticks as usize)
                    .copied()
                    .unwrap_or(NEVER),
            };
            self.ticks += 1;
            self.evicted.clear();
            let outcome = caches[k].policy.access(&request, &mut self.evicted);
            if let Some(a) = allocator {
                a.record(k, o - first);
            }
            self.evict_all(first, frees);
            if outcome == Outcome::Hit && self.copies[o as usize] == CopyState::Skipped {
                self.queue_all(&[o]);
            }
            if outcome == Outcome::Admitted {
                self.admit(o);
            }
        }
        self.tokens += 1;
        self.move_budgets(frees);
    }

    /// A token's routes into live heat; on a pass, the planner's moves.
    fn through_planner(&mut self, routes: &[ObjectIndex], frees: &mut Vec<ObjectIndex>) {
        let Decider::Planner {
            replanner,
            heat,
            experts,
        } = &mut self.decider
        else {
            unreachable!("called for the planner only");
        };
        let experts = *experts;
        let mut route = Vec::new();
        for l in 0..heat.layers() {
            route.clear();
            route.extend(
                routes
                    .iter()
                    .filter(|&&o| o as usize / experts == l)
                    .map(|&o| o - (l * experts) as ObjectIndex),
            );
            heat.report_route(l, &route)
                .expect("routes are the tier's own experts");
        }
        self.tokens += 1;
        let moves = replanner
            .due(self.tokens, 0.0)
            .then(|| replanner.pass(self.tokens, 0.0, &heat.rates()));
        for &o in routes {
            // Skipped while pinned, and routed now that the CPU has it.
            if self.copies[o as usize] == CopyState::Skipped && self.decided(o) {
                self.queue_all(&[o]);
            }
        }
        let Some(moves) = moves else {
            return;
        };
        for &v in &moves.demote {
            self.evict(v, frees);
        }
        for &c in &moves.promote {
            self.admit(c);
        }
    }

    /// The decider took `o` in: its copy is queued (or, evicted in flight
    /// and wanted again, the copy on its way is kept).
    fn admit(&mut self, o: ObjectIndex) {
        if self.copies[o as usize] == CopyState::Doomed {
            self.copies[o as usize] = CopyState::Uploading;
        } else {
            self.queue_all(&[o]);
        }
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
        let Decider::Caches {
            allocator: Some(a), ..
        } = &mut self.decider
        else {
            return;
        };
        if !a.due(self.tokens) || !a.pass(self.tokens).moved {
            return;
        }
        let target = a.capacities_bytes();
        for shrink in [true, false] {
            for (k, &bytes) in target.iter().enumerate() {
                let Decider::Caches { caches, .. } = &mut self.decider else {
                    unreachable!("matched above");
                };
                if (bytes < caches[k].policy.capacity_bytes()) == shrink {
                    self.evicted.clear();
                    let resized = caches[k].policy.resize(bytes, &mut self.evicted);
                    debug_assert!(resized, "per_layer checked the policy resizes");
                    let first = caches[k].first;
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

    /// The decider evicted `v`: its copy goes, now or when it lands.
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

#[cfg(test)]
pub(crate) mod tests;

//! The store an arm serves from: one global RAM tier or one per MoE
//! layer, and the per-layer capacities `dynamic` moves between tokens.

use super::card::{copies_from_ram, object_of, ram_share, routed_objects};
use super::report::{ReplayConfig, ReplayError, ServePolicy};
use super::twin::simulator;
use residency_formats::heat::TokenRoutes;
use residency_policy::budget::uniform_slots;
use residency_policy::knapsack;
use residency_policy::online::{LayerShape, OnlineAllocator};
use residency_policy::{Knowledge, ObjectIndex, PolicyParams};
use residency_runtime::apply::loader::CheckpointLoader;
use residency_runtime::serve::gpu_tier::{GpuTier, Landed, Uploader};
use residency_runtime::serve::heat::LiveHeat;
use residency_runtime::store::Loader;
use residency_runtime::store::{Homes, PlaceConfig, Store, StoreConfig, StoreError};
use residency_sim::allocation::Allocation;
use std::sync::Arc;
use std::time::Duration;

/// A store arm's store, with the pins its policy starts from.
pub(super) struct ArmStore {
    pub(super) store: Store,
    pub(super) pins: Vec<ObjectIndex>,
    /// The budget's share the pins may take.
    pub(super) share_bytes: u64,
    pub(super) miss_seconds: Vec<f64>,
}

impl ArmStore {
    /// The store of the budget: one RAM place, its pins the training
    /// knapsack of the pinned share (`plan`: all of it; `replan`:
    /// --pin-share of it; others: none); or for the per-layer arms one
    /// place per MoE layer in a RAM tier of the budget, sized uniformly,
    /// water-filled on `tokens` (`dynamic-offline`) or as the online
    /// allocator starts (`dynamic`: uniformly).
    pub(super) fn new(
        loader: Arc<CheckpointLoader>,
        sizes: &[u64],
        train_counts: &[u64],
        config: &ReplayConfig,
        policy: ServePolicy,
        tokens: &[TokenRoutes],
        experts: usize,
    ) -> Result<ArmStore, ReplayError> {
        let n = sizes.len();
        let total: u64 = train_counts.iter().sum::<u64>().max(1);
        let prior_rate: Vec<f64> = train_counts
            .iter()
            .map(|&c| c as f64 / total as f64)
            .collect();
        let miss_seconds = vec![config.miss_seconds; n];
        let budget = config.ram_budget_bytes;
        let share_bytes = match policy {
            ServePolicy::Plan => budget,
            ServePolicy::Replan => (budget as f64 * config.pin_share) as u64,
            _ => 0,
        };
        let pins: Vec<ObjectIndex> = if share_bytes > 0 {
            knapsack(sizes, &prior_rate, &miss_seconds, share_bytes)
        } else {
            Vec::new()
        };
        let mut pinned = vec![false; n];
        for &o in &pins {
            pinned[o as usize] = true;
        }
        let cache_policy = policy.cache_policy(config.layer_policy);
        let (places, place_of): (Vec<PlaceConfig>, Vec<usize>) = if policy.per_layer() {
            let capacities = layer_capacities(config, policy, sizes, tokens, experts)?;
            let places = capacities
                .iter()
                .enumerate()
                .map(|(l, &capacity_bytes)| PlaceConfig {
                    name: format!("ram:0/layer{l}"),
                    capacity_bytes,
                    tier: "ram".into(),
                    policy: cache_policy,
                    pin_share_bytes: Some(0),
                })
                .collect();
            (places, (0..n).map(|o| o / experts).collect())
        } else {
            let place = PlaceConfig {
                name: "ram:0".into(),
                capacity_bytes: budget,
                tier: "ram".into(),
                policy: cache_policy,
                pin_share_bytes: Some(share_bytes),
            };
            (vec![place], vec![0; n])
        };
        let store_config = StoreConfig {
            places,
            tier_capacity_bytes: vec![("ram".into(), budget)],
            staging_bytes: budget.max(sizes.iter().copied().max().unwrap_or(0) * 64),
            wait: Duration::from_secs(60),
            params: PolicyParams::default(),
            knowledge: Knowledge {
                miss_seconds: miss_seconds.clone(),
                hit_seconds: vec![0.0; n],
                prior_rate: prior_rate.clone(),
                ..Knowledge::default()
            },
        };
        let store = Store::new(
            loader,
            Homes {
                place: place_of,
                pinned,
            },
            &store_config,
        )?;
        Ok(ArmStore {
            store,
            pins,
            share_bytes,
            miss_seconds,
        })
    }

    /// Loads the pins (and with --warm every expert) and the card's
    /// start-up copies (read by `loader`, past the RAM tier), then serves
    /// the seed tokens untimed.
    pub(super) fn warm_and_seed(
        &self,
        config: &ReplayConfig,
        loader: &CheckpointLoader,
        heat: &mut LiveHeat,
        experts: usize,
        (mut reallocator, mut card): (Option<&mut Reallocator>, Option<&mut GpuTier>),
    ) -> Result<(), ReplayError> {
        let store = &self.store;
        store.load_all(&self.pins, 8, &|_| {})?;
        if config.warm {
            let all: Vec<ObjectIndex> = (0..store.objects() as ObjectIndex).collect();
            store.load_all(&all, 8, &|_| {})?;
        }
        // Seeding serves the tokens that came before, untimed, so every arm
        // starts in the state its own policy would have reached (the paired
        // arms of design §6, seeded rather than cold). The card is seeded
        // as it serves: the RAM tier sees each token less the experts with
        // copies, and a token's uploads land before the next token is
        // served (as `simulated_card` has them); the last token's land
        // before the clock starts.
        let startup = card
            .as_deref_mut()
            .map(GpuTier::startup)
            .unwrap_or_default();
        let uploader = match &card {
            Some(_) if !config.seed.is_empty() || !startup.is_empty() => {
                Some(Uploader::open().map_err(ReplayError::Gpu)?)
            }
            _ => None,
        };
        if let (Some(card), Some(uploader)) = (card.as_deref_mut(), &uploader) {
            // A plan applied at load: its copies read from the checkpoint,
            // not through the RAM tier, whose state stays the arm's own.
            let landed = startup
                .into_iter()
                .map(|o| {
                    let bytes = loader
                        .load(o)
                        .map_err(|reason| StoreError::Load { object: o, reason })?;
                    let host = bytes.host().expect("replay keeps experts in host memory");
                    Ok((o, Some(uploader.upload(host).map_err(ReplayError::Gpu)?)))
                })
                .collect::<Result<Vec<Landed>, ReplayError>>()?;
            card.land(landed);
        }
        let mut uploads = Vec::new();
        for token in &config.seed {
            let ram_share = ram_share(token, experts, card.as_deref());
            for (l, route) in ram_share.routes.iter().enumerate() {
                heat.report_route(l, route)
                    .expect("routes were checked against the checkpoint");
                for &e in route {
                    drop(store.acquire(object_of(l, e, experts))?);
                }
            }
            if let Some(r) = reallocator.as_deref_mut() {
                r.after_token(store, &ram_share)?;
            }
            if let (Some(card), Some(uploader)) = (card.as_deref_mut(), &uploader) {
                let landed = copies_from_ram(store, uploader, uploads.drain(..))?;
                uploads = card.after_token(&routed_objects(token, experts), landed);
            }
        }
        if let (Some(card), Some(uploader)) = (card, &uploader) {
            card.land(copies_from_ram(store, uploader, uploads)?);
        }
        Ok(())
    }
}

/// Bytes of each layer's cache for a per-layer arm: `budget / layers`
/// (`uniform`; `dynamic`, where the online allocator starts), or the
/// simulator's offline water-filling on `tokens`' own curves
/// (`dynamic-offline`), the same code as `simulate --allocation dynamic`.
fn layer_capacities(
    config: &ReplayConfig,
    policy: ServePolicy,
    sizes: &[u64],
    tokens: &[TokenRoutes],
    experts: usize,
) -> Result<Vec<u64>, ReplayError> {
    let layers = sizes.len() / experts;
    let slot_bytes: Vec<u64> = (0..layers).map(|l| sizes[l * experts]).collect();
    if policy != ServePolicy::DynamicOffline {
        return Ok(uniform_slots(&slot_bytes, config.ram_budget_bytes)
            .into_iter()
            .zip(&slot_bytes)
            .map(|(k, &b)| k as u64 * b)
            .collect());
    }
    let mut sim = simulator(config, config.rates(), sizes, tokens, None, experts);
    sim.layer_capacities(
        config.layer_policy,
        Allocation::Dynamic,
        config.ram_budget_bytes,
        &vec![1.0; layers],
    )
    .map_err(ReplayError::from)
}

/// Each MoE layer as the online allocator sees it: `tokens`' widest route
/// in it (seed tokens included) is what it leases at once.
pub(super) fn layer_shapes(
    config: &ReplayConfig,
    sizes: &[u64],
    experts: usize,
    tokens: &[TokenRoutes],
) -> Vec<LayerShape> {
    (0..sizes.len() / experts)
        .map(|l| LayerShape {
            slot_bytes: sizes[l * experts],
            experts,
            miss_seconds: config.miss_seconds,
            leased_at_once: tokens
                .iter()
                .chain(&config.seed)
                .map(|t| t.routes[l].len())
                .max()
                .unwrap_or(0),
        })
        .collect()
}

/// `dynamic`'s online allocator and the tokens it has seen (the seed
/// tokens, then the served ones): after each token it records the routes
/// and, when a pass moves budgets, the store's places follow.
pub(super) struct Reallocator {
    allocator: OnlineAllocator,
    tokens: u64,
}

impl Reallocator {
    /// `tokens`: the tokens to serve, whose widest route in each layer
    /// (seed tokens included) is what that layer leases at once.
    pub(super) fn new(
        config: &ReplayConfig,
        sizes: &[u64],
        experts: usize,
        tokens: &[TokenRoutes],
    ) -> Result<Self, ReplayError> {
        Ok(Reallocator {
            allocator: OnlineAllocator::new(
                config.online.clone(),
                layer_shapes(config, sizes, experts, tokens),
                config.ram_budget_bytes,
            )?,
            tokens: 0,
        })
    }

    /// Between tokens, so that no lease is held and a shrink evicts at once.
    pub(super) fn after_token(
        &mut self,
        store: &Store,
        token: &TokenRoutes,
    ) -> Result<(), StoreError> {
        for (l, route) in token.routes.iter().enumerate() {
            for &e in route {
                self.allocator.record(l, e);
            }
        }
        self.tokens += 1;
        if self.allocator.due(self.tokens) && self.allocator.pass(self.tokens).moved {
            store.set_capacities(&self.allocator.capacities_bytes())?;
        }
        Ok(())
    }
}

//! The simulator's twin of each served arm: the same tokens, budget and
//! policy through `residency_sim`, for the misses and felt wait
//! printed beside the measured ones, and `--predict-only`.

use super::card::{card_knowledge, simulated_card};
use super::report::{ReplayConfig, ReplayError, ServePolicy, Simulated};
use super::store::layer_shapes;
use super::{check_geometry, expert_sizes};
use residency_formats::heat::TokenRoutes;
use residency_runtime::checkpoint::Checkpoint;
use residency_sim::allocation::Allocation;
use residency_sim::arms::{Arm, SimOptions, Simulator};
use residency_sim::stream::Stream;
use std::borrow::Cow;

/// The simulator's view of a replay: the tokens as they reach the RAM
/// tier (with a VRAM tier: less the experts the simulated card computes),
/// and each arm's predicted misses and felt wait where it has the arm.
pub(super) struct Predicted<'t> {
    seed: Cow<'t, [TokenRoutes]>,
    tokens: Cow<'t, [TokenRoutes]>,
    /// Experts of the tokens the simulated card computed.
    pub(super) on_card: u64,
    sizes: Vec<u64>,
    experts: usize,
    /// Per arm of `config.policies`: its allocation, misses and felt wait.
    pub(super) arms: Vec<Option<(Allocation, (u64, f64))>>,
}

impl<'t> Predicted<'t> {
    /// Checks the replay's geometry and flags, then simulates every arm
    /// that has a prediction on `tokens` after `config.seed`.
    pub(super) fn of(
        checkpoint: &Checkpoint,
        tokens: &'t [TokenRoutes],
        train_counts: &[u64],
        config: &'t ReplayConfig,
    ) -> Result<Predicted<'t>, ReplayError> {
        check_geometry(checkpoint, tokens.iter().chain(&config.seed))?;
        let moving = config.policies.contains(&ServePolicy::Dynamic);
        if moving && !config.layer_policy.resizes() {
            return Err(ReplayError::LayerPolicy(config.layer_policy));
        }
        config.online.check()?;
        let sizes = expert_sizes(checkpoint);
        let experts = checkpoint.config.experts;
        // With a VRAM tier the simulator sees what reaches the RAM tier:
        // the tokens (and the seed) less the experts the card computes.
        let simulated = config
            .policies
            .iter()
            .any(|&p| simulated_allocation(config, p).is_some());
        let (seed, sim_tokens, on_card) = match &config.vram {
            Some(vram) if simulated => {
                let layers = layer_shapes(config, &sizes, experts, tokens);
                let served = (&config.seed[..], tokens);
                let knowledge = card_knowledge(config, vram, &sizes, train_counts, served, experts);
                let card = simulated_card(vram, &sizes, layers, &knowledge, served, experts)?;
                (Cow::Owned(card.seed), Cow::Owned(card.tokens), card.on_card)
            }
            _ => (Cow::Borrowed(&config.seed[..]), Cow::Borrowed(tokens), 0),
        };
        let mut predicted = Predicted {
            seed,
            tokens: sim_tokens,
            on_card,
            sizes,
            experts,
            arms: Vec::with_capacity(config.policies.len()),
        };
        // One simulator for every arm (its per-layer curves are shared),
        // made only when an arm has a prediction.
        let mut sim = None;
        for &policy in &config.policies {
            let arm = match simulated_allocation(config, policy) {
                None => None,
                Some(allocation) => {
                    let sim = sim.get_or_insert_with(|| {
                        predicted.simulator(config, config.rates(), train_counts)
                    });
                    Some((allocation, sim.arm(config, policy, allocation)?))
                }
            };
            predicted.arms.push(arm);
        }
        Ok(predicted)
    }

    /// The simulator of the RAM tier's tokens at `rates`.
    pub(super) fn simulator(
        &self,
        config: &ReplayConfig,
        rates: (f64, f64),
        train_counts: &[u64],
    ) -> RunSimulator {
        let tokens = (&self.seed[..], &self.tokens[..]);
        RunSimulator::new(
            config,
            rates,
            &self.sizes,
            tokens,
            train_counts,
            self.experts,
        )
    }
}

/// What the simulator predicts for every arm of `config` on `tokens`,
/// serving nothing: `replay --predict-only`. Arms it does not have
/// (`replan`'s RAM tier, `resident`, warm runs) are left out.
pub fn predict(
    checkpoint: &Checkpoint,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<(ServePolicy, Simulated)>, ReplayError> {
    let predicted = Predicted::of(checkpoint, tokens, train_counts, config)?;
    Ok(config
        .policies
        .iter()
        .zip(&predicted.arms)
        .filter_map(|(&policy, arm)| {
            let (_, (misses, felt_wait_seconds)) = (*arm)?;
            Some((
                policy,
                Simulated {
                    misses,
                    felt_wait_seconds,
                    felt_wait_seconds_at_run_reads: felt_wait_seconds,
                    felt_wait_seconds_at_run_rates: felt_wait_seconds,
                    gpu_experts: predicted.on_card,
                },
            ))
        })
        .collect())
}

/// The simulator's allocation for `policy`'s arm, where it has the arm:
/// `lru`, `lfru`, `frequency`, `cost` and `plan` as one global cache, the
/// per-layer arms as their allocation (`uniform`, offline `dynamic`,
/// `online`) under the layer policy. None for `replan`, which re-plans
/// from live heat while serving (the simulator's pins are static), for
/// `resident` (no store), for `warm` runs (every expert loaded first),
/// and for offline `dynamic` after seed tokens (the run water-fills on
/// the replayed tokens alone, the simulator would on the seed too). A
/// seeded arm is simulated after its seed tokens ([`RunSimulator`]); with
/// a VRAM tier, on what reaches the RAM tier ([`simulated_card`]).
pub(super) fn simulated_allocation(
    config: &ReplayConfig,
    policy: ServePolicy,
) -> Option<Allocation> {
    let seeded = !config.seed.is_empty();
    match policy {
        ServePolicy::Replan | ServePolicy::Resident => None,
        _ if config.warm => None,
        ServePolicy::DynamicOffline if seeded => None,
        ServePolicy::Uniform => Some(Allocation::Uniform),
        ServePolicy::DynamicOffline => Some(Allocation::Dynamic),
        ServePolicy::Dynamic => Some(Allocation::Online),
        _ => Some(Allocation::Global),
    }
}

/// The simulator's misses and felt wait for `policy`'s arm under
/// `allocation`, on `sim`'s tokens at the replay's budget.
fn simulate_arm(
    sim: &mut Simulator,
    config: &ReplayConfig,
    policy: ServePolicy,
    allocation: Allocation,
) -> Result<(u64, f64), ReplayError> {
    let layers = sim.stream().layers();
    let run = sim.run(
        Arm {
            policy: policy.cache_policy(config.layer_policy),
            allocation,
            budget_bytes: config.ram_budget_bytes,
        },
        &vec![1.0; layers],
    )?;
    Ok((run.stats.misses, run.felt_wait_seconds))
}

/// The simulator of a run's tokens started as the run starts: cold, or
/// after its seed tokens. A seeded arm's misses and felt wait are those of
/// the seed and the tokens less those of the seed alone: a policy's state
/// after the seed is the same in both replays, and both sums add up token
/// by token.
pub(super) struct RunSimulator {
    seed_and_tokens: Simulator,
    seed: Option<Simulator>,
}

impl RunSimulator {
    pub(super) fn new(
        config: &ReplayConfig,
        rates: (f64, f64),
        sizes: &[u64],
        (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
        train_counts: &[u64],
        experts: usize,
    ) -> RunSimulator {
        let counts = Some(train_counts);
        let sim = |tokens| simulator(config, rates, sizes, tokens, counts, experts);
        RunSimulator {
            seed_and_tokens: sim(seed.iter().chain(tokens)),
            seed: (!seed.is_empty()).then(|| sim(seed.iter().chain(&[]))),
        }
    }

    /// `policy`'s misses and felt wait on the tokens, under `allocation`.
    pub(super) fn arm(
        &mut self,
        config: &ReplayConfig,
        policy: ServePolicy,
        allocation: Allocation,
    ) -> Result<(u64, f64), ReplayError> {
        let (misses, felt) = simulate_arm(&mut self.seed_and_tokens, config, policy, allocation)?;
        let Some(seed) = self.seed.as_mut() else {
            return Ok((misses, felt));
        };
        let (seed_misses, seed_felt) = simulate_arm(seed, config, policy, allocation)?;
        Ok((misses - seed_misses, felt - seed_felt))
    }
}

/// A simulator of `tokens` over the checkpoint's experts (`sizes`, every
/// layer's `experts` in turn), each miss read in `miss_seconds`, each hit
/// computed at `compute_bytes_per_s`, `online` as the replay's;
/// `train_counts` is its learning policies' prior, `None` the tokens' own
/// counts (in hindsight).
pub(super) fn simulator<'t>(
    config: &ReplayConfig,
    (miss_seconds, compute_bytes_per_s): (f64, f64),
    sizes: &[u64],
    tokens: impl IntoIterator<Item = &'t TokenRoutes>,
    train_counts: Option<&[u64]>,
    experts: usize,
) -> Simulator {
    let layers = sizes.len() / experts;
    let slot_bytes: Vec<u64> = (0..layers).map(|l| sizes[l * experts]).collect();
    let stream = Stream::from_tokens(tokens, &vec![experts; layers], &slot_bytes);
    let options = SimOptions {
        online: config.online.clone(),
        hit_compute_seconds: sizes
            .iter()
            .map(|&b| b as f64 / compute_bytes_per_s)
            .collect(),
        reads_at_once: config.reads_at_once,
        ..SimOptions::default()
    };
    let counts = train_counts.map_or_else(|| stream.counts(), <[u64]>::to_vec);
    Simulator::new(stream, counts, vec![miss_seconds; sizes.len()], options)
}

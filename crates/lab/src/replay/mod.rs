//! `residency replay`: a real data path. Every token of a
//! routing trace asks, layer by layer, for its routed experts through the
//! store (misses read from the checkpoint with O_DIRECT, so the page cache
//! hides nothing), and a CPU matrix-vector product over each expert's bytes
//! puts compute on the critical path. Within a layer the misses load in
//! parallel while the experts already there are computed, as an engine
//! overlaps them; the compute thread's waits are the felt wait.
//!
//! Policies are arms run one after another on fresh stores, interleaved
//! over rounds (A B B A), each cold except for its planned pins, which are
//! loaded before the clock starts and reported as start-up (with `warm`,
//! everything the budget holds is). `replan` re-plans between tokens and
//! applies its moves on a background thread. The per-layer arms
//! (`uniform`, `dynamic-offline`, `dynamic`) give each MoE layer a place of
//! its own in one RAM tier of the budget; `dynamic` moves their capacities
//! between tokens with the simulator's online allocator. The outputs'
//! checksum depends only on the expert bytes and the routes, so it must be
//! identical for every placement policy.

mod arm;
mod bound;
mod card;
pub mod card_choice;
mod replanning;
mod report;
mod store;
mod token;
mod twin;

use arm::run_arm;
pub use bound::{miss_bound, replay_bound, MissBound};
use card::{card_knowledge, simulated_card};
pub use report::{
    PinShareChoice, PinShareSource, ReadBurst, ReplayConfig, ReplayError, ReplayReport, ReplayRun,
    ServePolicy, Simulated,
};
use residency_core::stats::upper_median;
use residency_formats::heat::TokenRoutes;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gemv::NodeThreads;
use residency_runtime::identity::ObjectKey;
use residency_runtime::serve::compute::ExpertKernel;
use store::layer_shapes;
pub use twin::predict;
use twin::Predicted;

/// The objects a replay serves: every routed expert, numbered
/// `l * experts + e` for MoE ordinal `l`.
fn expert_keys(checkpoint: &Checkpoint) -> Vec<ObjectKey> {
    let experts = checkpoint.config.experts as u32;
    checkpoint
        .config
        .moe_layers()
        .into_iter()
        .flat_map(|layer| {
            (0..experts).map(move |expert| ObjectKey::Expert {
                layer: layer as u32,
                expert,
            })
        })
        .collect()
}

/// Each served object's bytes, in [`expert_keys`] order.
fn expert_sizes(checkpoint: &Checkpoint) -> Vec<u64> {
    expert_keys(checkpoint)
        .iter()
        .map(|k| checkpoint.object_bytes(k))
        .collect()
}

/// Requests per `(MoE layer, expert)`, numbered `l * experts + e`, of
/// tokens whose geometry was checked against the checkpoint.
pub fn count_routes<'t>(
    tokens: impl IntoIterator<Item = &'t TokenRoutes>,
    checkpoint: &Checkpoint,
) -> Vec<u64> {
    let experts = checkpoint.config.experts;
    let mut counts = vec![0u64; experts * checkpoint.config.moe_layers().len()];
    for t in tokens {
        for (l, route) in t.routes.iter().enumerate() {
            for &e in route {
                counts[l * experts + e as usize] += 1;
            }
        }
    }
    counts
}

/// How the replay multiplies `checkpoint`'s experts (its store's objects,
/// [`expert_keys`] order): on a thread pinned to each of `cpus`, or on
/// the serving thread alone where it names one or none.
pub fn expert_kernel(checkpoint: &Checkpoint, cpus: &[u32]) -> Result<ExpertKernel, ReplayError> {
    let threads = match cpus.len() {
        0 | 1 => None,
        _ => Some(NodeThreads::new(cpus).map_err(|e| ReplayError::Threads(e.to_string()))?),
    };
    Ok(ExpertKernel::of(
        checkpoint,
        &expert_keys(checkpoint),
        threads,
    ))
}

/// That `tokens` route every MoE layer of the checkpoint, and only experts
/// it has: what serving them, or counting them per `(layer, expert)`, needs.
pub fn check_geometry<'a>(
    checkpoint: &Checkpoint,
    tokens: impl Iterator<Item = &'a TokenRoutes> + Clone,
) -> Result<(), ReplayError> {
    let layers = checkpoint.config.moe_layers().len();
    let experts = checkpoint.config.experts;
    let trace_layers = tokens.clone().next().map_or(0, |t| t.routes.len());
    let widest = tokens
        .clone()
        .flat_map(|t| t.routes.iter().flatten())
        .max()
        .map_or(0, |&e| e as usize + 1);
    let ragged = tokens.clone().any(|t| t.routes.len() != trace_layers);
    if trace_layers != layers || ragged || widest > experts {
        return Err(ReplayError::Geometry {
            trace: trace_layers,
            trace_experts: widest,
            checkpoint: layers,
            checkpoint_experts: experts,
        });
    }
    Ok(())
}

/// Replays `tokens` through every arm of `config`. `train_counts[o]`:
/// requests for expert `o` in the training data (the evaluated tokens
/// themselves for an in-sample run).
pub fn replay(
    checkpoint: &Checkpoint,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<ReplayRun>, ReplayError> {
    let predicted = Predicted::of(checkpoint, tokens, train_counts, config)?;
    // One layout of the experts' projections for every arm and round.
    let kernel = expert_kernel(checkpoint, &config.compute_cpus)?;
    let mut runs = Vec::new();
    let mut arm_of_run = Vec::new();
    for round in 0..config.rounds.max(1) {
        let mut order: Vec<usize> = (0..config.policies.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let policy = config.policies[i];
            runs.push(run_arm(
                checkpoint,
                &kernel,
                tokens,
                train_counts,
                config,
                policy,
                round,
            )?);
            arm_of_run.push(i);
        }
    }
    for (i, &policy) in config.policies.iter().enumerate() {
        let Some((allocation, (misses, felt_wait_seconds))) = predicted.arms[i] else {
            continue;
        };
        let of_arm = || runs.iter().zip(&arm_of_run).filter(|(_, &a)| a == i);
        let per_miss: Vec<f64> = of_arm()
            .filter(|(r, _)| r.misses > 0)
            .map(|(r, _)| r.miss_reads_seconds / r.misses as f64)
            .collect();
        let compute_rate: Vec<f64> = of_arm()
            .filter(|(r, _)| r.compute_bytes_per_s > 0.0)
            .map(|(r, _)| r.compute_bytes_per_s)
            .collect();
        let at_run = |read_seconds: f64, compute_bytes_per_s: f64| {
            predicted
                .simulator(config, (read_seconds, compute_bytes_per_s), train_counts)
                .arm(config, policy, allocation)
                .map(|(_, felt)| felt)
        };
        let (at_run_reads, at_run_rates) = match upper_median(&per_miss) {
            Some(read_seconds) => (
                at_run(read_seconds, config.hit_compute_bytes_per_s)?,
                match upper_median(&compute_rate) {
                    Some(rate) => at_run(read_seconds, rate)?,
                    None => felt_wait_seconds,
                },
            ),
            None => (felt_wait_seconds, felt_wait_seconds),
        };
        let simulated = Simulated {
            misses,
            felt_wait_seconds,
            felt_wait_seconds_at_run_reads: at_run_reads,
            felt_wait_seconds_at_run_rates: at_run_rates,
            gpu_experts: predicted.on_card,
        };
        for (run, _) in runs.iter_mut().zip(&arm_of_run).filter(|(_, &a)| a == i) {
            run.simulated = Some(simulated.clone());
        }
    }
    let bound = replay_bound(checkpoint, tokens, config);
    for run in &mut runs {
        run.miss_bound = Some(bound);
    }
    Ok(runs)
}

/// What reaches the RAM tier of a run under a VRAM tier, as the serving
/// loop's tier decides it: each token less the experts on the card.
pub(super) struct CardShares {
    seed: Vec<TokenRoutes>,
    tokens: Vec<TokenRoutes>,
    /// Experts of the tokens (not the seed) the card computes.
    pub(super) on_card: u64,
}

#[cfg(test)]
mod tests {
    use super::token::combine;
    use super::*;
    use residency_core::cost::{Place, Resources};
    use residency_core::profile::HardwareProfile;
    use residency_runtime::serve::gpu_tier::VramConfig;
    use residency_runtime::serve::replan::{MoveLink, ReplanParams};
    use residency_runtime::serve::vram::{CardKnowledge, VramPolicy};

    /// RAM to card 0 at 1 GB/s, on a machine with room for everything.
    fn upload_link() -> MoveLink {
        let profile = HardwareProfile::from_yaml_str(
            "name: link
numa: [{ id: 0, ram: 1024 GiB, cores: 1, gemv_bandwidth: 1 GB/s }]
gpus: [{ id: 0, name: g, vram: 1024 GiB, numa: 0, gemv_bandwidth: 1 TB/s, upload_bandwidth: 1 GB/s, sync_overhead: 0 s }]
drives: []
felt_fraction: 1.0
",
            std::path::Path::new("link.yaml"),
        )
        .unwrap();
        MoveLink {
            resources: Resources::from_profile(&profile),
            from: Place::Ram(0),
            to: Place::Gpu(0),
        }
    }

    #[test]
    fn combine_folds_and_bounds() {
        // x = [0.5, 0.5]; outputs [1000, 0, 2000] fold to [3000, 0] * 1e-3
        // = [3, 0]; next = [3.5, 0.5], scaled by 3.5: [1, 1/7].
        let next = combine(&[0.5, 0.5], &[vec![1000.0, 0.0, 2000.0]]);
        assert!((next[0] - 1.0).abs() < 1e-6 && (next[1] - 0.5 / 3.5).abs() < 1e-6);
    }

    #[test]
    fn the_simulated_card_computes_what_has_landed_and_the_ram_tier_the_rest() {
        // One layer of 4 experts of 10 bytes, a card of 20 bytes under
        // LRU, the allowance never binding. By hand, copies landing a
        // token after they are sent:
        // t0 {0,1}: card empty, both to the CPU; 0 and 1 go up.
        // t1 {0,2}: 0 and 1 land only now: both to the CPU; 2 evicts 1
        //           (0 is more recent) and goes up.
        // t2 {0,1}: 0 on the card, 1 to the CPU; 2 lands; 1 evicts 2.
        // t3 {0,1}: 0 on the card, 1 still in flight: to the CPU.
        let vram = VramConfig {
            budget_bytes: 20,
            policy: VramPolicy::Lru,
            allowance_bytes_per_token: 1 << 20,
            halve_every_ticks: 1 << 20,
            dynamic: None,
            link: upload_link(),
        };
        // Untrained, each copy saving a second a request, re-planned every token.
        let knowledge = CardKnowledge {
            train_counts: vec![0; 4],
            cpu_seconds: vec![1.0; 4],
            link: upload_link(),
            future: Vec::new(),
            replan: ReplanParams {
                every_tokens: 1,
                ..ReplanParams::card()
            },
            heat_halve_every_tokens: 1024,
        };
        let token = |route: Vec<u32>| TokenRoutes {
            seq: "s".into(),
            pos: 0,
            category: None,
            routes: vec![route],
        };
        let tokens = [
            token(vec![0, 1]),
            token(vec![0, 2]),
            token(vec![0, 1]),
            token(vec![0, 1]),
        ];
        let shares = |seed: &[TokenRoutes], tokens: &[TokenRoutes]| {
            let card =
                simulated_card(&vram, &[10; 4], Vec::new(), &knowledge, (seed, tokens), 4).unwrap();
            let routes = |ts: &[TokenRoutes]| -> Vec<Vec<u32>> {
                ts.iter().map(|t| t.routes[0].clone()).collect()
            };
            (routes(&card.seed), routes(&card.tokens), card.on_card)
        };
        assert_eq!(
            shares(&[], &tokens),
            (vec![], vec![vec![0, 1], vec![0, 2], vec![1], vec![1]], 2)
        );
        // Seeded with t0 and t1: the seed's shares are the same, but its
        // last copies (2) land before t2, so by hand: t2 {0,1}: 0 on the
        // card, 1 to the CPU, 1 evicts 2 (0 was touched after 2);
        // t3 {0,1}: 1 still in flight. Only the tokens' experts count.
        assert_eq!(
            shares(&tokens[..2], &tokens[2..]),
            (vec![vec![0, 1], vec![0, 2]], vec![vec![1], vec![1]], 2)
        );
        // Seeded with t0 alone and t0 replayed: 0 and 1 landed before the
        // tokens, so both are on the card at once (cold, neither was).
        assert_eq!(
            shares(&tokens[..1], &tokens[..1]),
            (vec![vec![0, 1]], vec![vec![]], 2)
        );
    }
}

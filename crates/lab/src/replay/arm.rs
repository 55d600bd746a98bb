//! One arm of the replay: a fresh store for the policy, its pins loaded
//! before the clock, every token served, the counters gathered.

use super::card::card_knowledge;
use super::expert_keys;
use super::replanning::{serve_replanning, Movers};
use super::report::{ReplayConfig, ReplayError, ReplayRun, ServePolicy};
use super::store::{layer_shapes, ArmStore, Reallocator};
use super::token::{serve, LayerWaits, Served};
use residency_formats::heat::TokenRoutes;
use residency_policy::ObjectIndex;
use residency_runtime::apply::loader::{CheckpointLoader, RETAINED_BYTES};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::compute::ExpertKernel;
use residency_runtime::serve::gpu_tier::GpuTier;
use residency_runtime::serve::heat::{LiveHeat, DEFAULT_HALVE_EVERY_TOKENS};
use residency_runtime::serve::replan::Replanner;
use residency_runtime::storage::{numa_nodes, open_backend, HostPool};
use residency_runtime::store::Loader;
use residency_runtime::store::{ObjectBytes, StoreError};
use std::sync::Arc;
use std::time::Instant;

pub(super) fn run_arm(
    checkpoint: &Checkpoint,
    kernel: &ExpertKernel,
    tokens: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
    policy: ServePolicy,
    round: usize,
) -> Result<ReplayRun, ReplayError> {
    let keys = expert_keys(checkpoint);
    let n = keys.len();
    let experts = checkpoint.config.experts;
    let hidden = checkpoint.config.hidden;
    let pool = HostPool::new(numa_nodes().first().copied(), RETAINED_BYTES);
    let loader = Arc::new(
        CheckpointLoader::new(checkpoint, keys.clone(), open_backend(config.backend), &[])?
            .with_pools(vec![pool], vec![0; n]),
    );
    let sizes: Vec<u64> = keys.iter().map(|k| checkpoint.object_bytes(k)).collect();
    if policy == ServePolicy::Resident {
        let started = Instant::now();
        let (served, startup_seconds) =
            serve_resident(&loader, kernel, n, tokens, (experts, hidden), started)?;
        return Ok(ReplayRun {
            hits: tokens
                .iter()
                .flat_map(|t| &t.routes)
                .map(|r| r.len() as u64)
                .sum(),
            startup_bytes: sizes.iter().sum(),
            startup_seconds,
            ..served.run(policy, round)
        });
    }
    let arm = ArmStore::new(
        loader.clone(),
        &sizes,
        train_counts,
        config,
        policy,
        tokens,
        experts,
    )?;
    let mut heat = LiveHeat::new(
        &vec![experts; checkpoint.config.moe_layers().len()],
        DEFAULT_HALVE_EVERY_TOKENS,
    );
    let mut reallocator = (policy == ServePolicy::Dynamic)
        .then(|| Reallocator::new(config, &sizes, experts, tokens))
        .transpose()?;
    let mut tier = open_card(config, kernel, &sizes, train_counts, tokens, experts)?;
    let started = Instant::now();
    let movers = (reallocator.as_mut(), tier.as_mut());
    arm.warm_and_seed(config, &loader, &mut heat, experts, movers)?;
    let startup_seconds = started.elapsed().as_secs_f64();
    let store = &arm.store;
    let startup = store.telemetry();
    let replanner = (policy == ServePolicy::Replan).then(|| {
        Replanner::new(
            config.replan.clone(),
            arm.share_bytes,
            sizes.clone(),
            arm.miss_seconds.clone(),
            config.move_link.clone(),
            &arm.pins,
        )
    });
    let movers = Movers {
        replanner,
        reallocator,
        tier,
    };
    let served = serve_replanning(store, kernel, tokens, (experts, hidden), &mut heat, movers)?;
    let end = store.telemetry();
    let hits = |t: &residency_runtime::store::telemetry::Telemetry| {
        t.tier_hits.iter().map(|h| h.1).sum::<u64>()
    };
    Ok(ReplayRun {
        read_service_seconds: end.read_service_seconds - startup.read_service_seconds,
        bytes_read: end.physical_bytes - startup.physical_bytes,
        startup_bytes: startup.physical_bytes,
        startup_seconds,
        hits: hits(&end) - hits(&startup),
        misses: end.physical_misses - startup.physical_misses,
        rejections: end.rejections - startup.rejections,
        bypasses: end.bypasses - startup.bypasses,
        evictions: end.evictions - startup.evictions,
        migration_bytes: end.migration_bytes,
        ..served.run(policy, round)
    })
}

/// The card's VRAM tier where the replay has one, knowing what
/// `config`'s policy may know of the experts.
fn open_card<'k>(
    config: &ReplayConfig,
    kernel: &'k ExpertKernel,
    sizes: &[u64],
    train_counts: &[u64],
    tokens: &[TokenRoutes],
    experts: usize,
) -> Result<Option<GpuTier<'k>>, ReplayError> {
    let Some(vram) = &config.vram else {
        return Ok(None);
    };
    // The card launches only the served tokens' routes (seeding computes
    // nothing), so its output buffer holds their widest.
    let widest_route = tokens
        .iter()
        .flat_map(|t| &t.routes)
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    let layers = layer_shapes(config, sizes, experts, tokens);
    let served = (&config.seed[..], tokens);
    let knowledge = card_knowledge(config, vram, sizes, train_counts, served, experts);
    GpuTier::open(
        vram,
        kernel,
        sizes.to_vec(),
        layers,
        &knowledge,
        widest_route,
    )
    .map(Some)
    .map_err(ReplayError::Gpu)
}

/// The `resident` arm: every expert read into memory first, then served
/// with no store at all; also the startup seconds since `started`.
fn serve_resident(
    loader: &CheckpointLoader,
    kernel: &ExpertKernel,
    objects: usize,
    tokens: &[TokenRoutes],
    (experts, hidden): (usize, usize),
    started: Instant,
) -> Result<(Served, f64), ReplayError> {
    let bytes: Vec<Box<dyn ObjectBytes>> = (0..objects as ObjectIndex)
        .map(|o| {
            loader
                .load(o)
                .map_err(|reason| StoreError::Load { object: o, reason })
        })
        .collect::<Result<_, _>>()?;
    let startup_seconds = started.elapsed().as_secs_f64();
    let served = serve(
        tokens,
        experts,
        hidden,
        |objects, x| {
            let input = kernel.input(x);
            let outputs = objects
                .iter()
                .map(|&o| {
                    let host = bytes[o as usize].host().expect("read into memory");
                    kernel.compute(o as usize, host, &input)
                })
                .collect();
            Ok((outputs, LayerWaits::default()))
        },
        |_, _| Ok(()),
    )?;
    Ok((served, startup_seconds))
}

//! The card's share of a token: which routed experts the VRAM tier
//! computes, which it copies from RAM, which stay on the CPU; and what the
//! simulator knows of the card.

use super::report::{ReplayConfig, ReplayError};
use super::CardShares;
use residency_formats::heat::TokenRoutes;
use residency_policy::online::LayerShape;
use residency_policy::ObjectIndex;
use residency_runtime::gpu::DeviceBuffer;
use residency_runtime::serve::gpu_tier::{GpuTier, Landed, Uploader, VramConfig};
use residency_runtime::serve::replan::ReplanParams;
use residency_runtime::serve::vram::{
    CardKnowledge, VramPolicy, VramResidency, CARD_HEAT_HALVE_EVERY_TOKENS,
};
use residency_runtime::store::Store;
use std::borrow::Cow;
use std::sync::Arc;

/// The store's object of expert `e` of MoE layer `l`, in a checkpoint of
/// `experts` a layer.
pub(super) fn object_of(l: usize, e: u32, experts: usize) -> ObjectIndex {
    (l * experts + e as usize) as ObjectIndex
}

/// Every expert `token` routes, as objects (layer by layer).
pub(super) fn routed_objects(token: &TokenRoutes, experts: usize) -> Vec<ObjectIndex> {
    token
        .routes
        .iter()
        .enumerate()
        .flat_map(|(l, route)| route.iter().map(move |&e| object_of(l, e, experts)))
        .collect()
}

/// What the RAM tier serves of `token`: all of it, or with a card, the
/// token less the experts the card holds now.
pub(super) fn ram_share<'t>(
    token: &'t TokenRoutes,
    experts: usize,
    card: Option<&GpuTier>,
) -> Cow<'t, TokenRoutes> {
    match card {
        Some(card) => Cow::Owned(cpu_share(token, experts, |o| card.holds(o))),
        None => Cow::Borrowed(token),
    }
}

/// `o`'s copy on the card, from its bytes in the RAM tier; `None` where it
/// has left RAM (the copy is skipped, not read from the drive).
pub(super) fn copy_from_ram(
    store: &Store,
    card: &Uploader,
    o: ObjectIndex,
) -> Result<Option<Arc<dyn DeviceBuffer>>, ReplayError> {
    match store.lease_for_copy(o)? {
        Some(lease) => {
            let bytes = lease.host().expect("replay keeps experts in host memory");
            Ok(Some(card.upload(bytes).map_err(ReplayError::Gpu)?))
        }
        None => Ok(None),
    }
}

/// Each of `objects` copied to the card now, as [`copy_from_ram`].
pub(super) fn copies_from_ram(
    store: &Store,
    card: &Uploader,
    objects: impl IntoIterator<Item = ObjectIndex>,
) -> Result<Vec<Landed>, ReplayError> {
    objects
        .into_iter()
        .map(|o| Ok((o, copy_from_ram(store, card, o)?)))
        .collect()
}

/// `token` less the experts that `on_card` says the card computes: what
/// the RAM tier serves of it.
fn cpu_share(
    token: &TokenRoutes,
    experts: usize,
    on_card: impl Fn(ObjectIndex) -> bool,
) -> TokenRoutes {
    let routes = token
        .routes
        .iter()
        .enumerate()
        .map(|(l, route)| {
            route
                .iter()
                .copied()
                .filter(|&e| !on_card(object_of(l, e, experts)))
                .collect()
        })
        .collect();
    TokenRoutes {
        routes,
        ..token.clone()
    }
}

/// What the card's policies know on a replay of `seed` then `tokens`:
/// the training counts, the CPU seconds a copy saves (an expert's bytes
/// at the compute thread's rate), the upload link, `replan`'s card
/// passes and heat window and,
/// for `belady` alone, every expert routed in order.
pub(super) fn card_knowledge(
    config: &ReplayConfig,
    vram: &VramConfig,
    sizes: &[u64],
    train_counts: &[u64],
    (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
    experts: usize,
) -> CardKnowledge {
    let future = if vram.policy == VramPolicy::Belady {
        seed.iter()
            .chain(tokens)
            .flat_map(|t| routed_objects(t, experts))
            .collect()
    } else {
        Vec::new()
    };
    CardKnowledge {
        train_counts: train_counts.to_vec(),
        cpu_seconds: sizes
            .iter()
            .map(|&b| b as f64 / config.hit_compute_bytes_per_s)
            .collect(),
        link: vram.link.clone(),
        future,
        replan: ReplanParams::card(),
        heat_halve_every_tokens: CARD_HEAT_HALVE_EVERY_TOKENS,
    }
}

/// What reaches the RAM tier of `seed` and then `tokens` under `vram`'s
/// tier, as the serving loop's tier decides it, with every copy landing
/// while the token after its upload is served (and the seed's last
/// copies before the tokens, as seeding has them): an upload takes tens
/// of microseconds of a token's milliseconds, and a later one leaves its
/// expert on the CPU for a token more than this says. The run also skips
/// the upload of an expert that has left RAM; the card here decides
/// apart from the RAM tier and does not see those.
pub(super) fn simulated_card(
    vram: &VramConfig,
    sizes: &[u64],
    layers: Vec<LayerShape>,
    knowledge: &CardKnowledge,
    (seed, tokens): (&[TokenRoutes], &[TokenRoutes]),
    experts: usize,
) -> Result<CardShares, ReplayError> {
    let mut residency = vram
        .residency(sizes.to_vec(), layers, knowledge)
        .map_err(ReplayError::Gpu)?;
    for o in residency.startup() {
        residency.landed(o);
    }
    let mut in_flight = Vec::new();
    let serve = |residency: &mut VramResidency, token, in_flight: &mut Vec<ObjectIndex>| {
        let share = cpu_share(token, experts, |o| residency.on_device(o));
        for o in in_flight.drain(..) {
            // An expert evicted in flight is freed on landing; either way
            // the residency keeps the account.
            residency.landed(o);
        }
        *in_flight = residency
            .after_token(&routed_objects(token, experts))
            .uploads;
        share
    };
    let seed = seed
        .iter()
        .map(|t| serve(&mut residency, t, &mut in_flight))
        .collect();
    for o in in_flight.drain(..) {
        residency.landed(o);
    }
    let count = |t: &TokenRoutes| t.routes.iter().map(Vec::len).sum::<usize>() as u64;
    let mut on_card = 0;
    let tokens = tokens
        .iter()
        .map(|token| {
            let share = serve(&mut residency, token, &mut in_flight);
            on_card += count(token) - count(&share);
            share
        })
        .collect();
    Ok(CardShares {
        seed,
        tokens,
        on_card,
    })
}

//! `replan`'s loop: tokens served while the re-planner runs between them
//! and its moves land on a background thread.

use super::card::{copy_from_ram, ram_share, routed_objects};
use super::report::ReplayError;
use super::store::Reallocator;
use super::token::{layer, serve, LayerWaits, Served};
use residency_formats::heat::TokenRoutes;
use residency_policy::ObjectIndex;
use residency_runtime::serve::compute::{ExpertKernel, LayerInput};
use residency_runtime::serve::gpu_tier::{GpuTier, Uploader};
use residency_runtime::serve::heat::LiveHeat;
use residency_runtime::serve::replan::{Moves, Replanner};
use residency_runtime::store::{Store, StoreError};
use std::cell::RefCell;
use std::time::Instant;

/// What moves while serving: `replan`'s pins, `dynamic`'s budgets, and
/// the VRAM tier's copies.
pub(super) struct Movers<'k> {
    pub(super) replanner: Option<Replanner>,
    pub(super) reallocator: Option<Reallocator>,
    pub(super) tier: Option<GpuTier<'k>>,
}

/// Serves the tokens from the store, reporting routes to `heat`, sending
/// the re-planner's moves to a repinning thread, moving the per-layer
/// budgets of `dynamic` between tokens, and with a VRAM tier computing the
/// experts it holds on the card while the CPU computes the rest, its
/// uploads on a thread of their own.
pub(super) fn serve_replanning(
    store: &Store,
    kernel: &ExpertKernel,
    tokens: &[TokenRoutes],
    (experts, hidden): (usize, usize),
    heat: &mut LiveHeat,
    movers: Movers,
) -> Result<Served, ReplayError> {
    let Movers {
        mut replanner,
        mut reallocator,
        tier,
    } = movers;
    let with_tier = tier.is_some();
    let tier = RefCell::new(tier);
    // Repins run on a thread of their own, as an engine would run them: a
    // promotion's read overlaps serving instead of stalling a token.
    let (moves_sender, moves) = std::sync::mpsc::channel::<Moves>();
    let (upload_sender, uploads) = std::sync::mpsc::channel::<ObjectIndex>();
    let (landed_sender, landed) = std::sync::mpsc::channel();
    let serving = Instant::now();
    std::thread::scope(|scope| {
        let repinner = scope.spawn(|| {
            for m in moves {
                store.repin(&m.promote, &m.demote)?;
            }
            Ok::<_, StoreError>(())
        });
        // The card's copies come from the RAM tier's bytes, never from the
        // drive: an expert that left RAM is skipped (its read would
        // compete with the tokens' misses, and its lease would count as a
        // request of the RAM tier).
        let uploader = with_tier.then(|| {
            scope.spawn(move || {
                let card = Uploader::open().map_err(ReplayError::Gpu)?;
                for o in uploads {
                    let copy = copy_from_ram(store, &card, o)?;
                    if landed_sender.send((o, copy)).is_err() {
                        break;
                    }
                }
                Ok::<_, ReplayError>(())
            })
        });
        let served = serve(
            tokens,
            experts,
            hidden,
            |objects, x| {
                let input = kernel.input(x);
                match tier.borrow_mut().as_mut() {
                    None => Ok(layer(store, kernel, objects, &input)?),
                    Some(card) => layer_with_card(store, kernel, card, objects, &input),
                }
            },
            |served_tokens, token| {
                // What reached the RAM tier: the token less the experts the
                // card computed (its copies change only below).
                let ram_share = ram_share(token, experts, tier.borrow().as_ref());
                for (l, route) in ram_share.routes.iter().enumerate() {
                    heat.report_route(l, route)
                        .expect("routes were checked against the checkpoint");
                }
                let seconds = serving.elapsed().as_secs_f64();
                if let Some(r) = replanner.as_mut().filter(|r| r.due(served_tokens, seconds)) {
                    let rates = heat.rates();
                    // A send fails only when the repinner stopped on an
                    // error, which its join reports.
                    let _ = moves_sender.send(r.pass(served_tokens, seconds, &rates));
                }
                if let Some(r) = reallocator.as_mut() {
                    r.after_token(store, &ram_share)?;
                }
                if let Some(card) = tier.borrow_mut().as_mut() {
                    let routed = routed_objects(token, experts);
                    for o in card.after_token(&routed, landed.try_iter()) {
                        // As the repinner's: a failed send is the
                        // uploader's error, which its join reports.
                        let _ = upload_sender.send(o);
                    }
                }
                Ok(())
            },
        );
        drop(moves_sender);
        drop(upload_sender);
        let repinned = repinner.join().expect("the repinner does not panic");
        let uploaded = uploader.map(|u| u.join().expect("the uploader does not panic"));
        let served = served?;
        repinned?;
        uploaded.transpose()?;
        let gpu_experts = tier.borrow().as_ref().map_or(0, |card| card.computed);
        Ok(Served {
            gpu_experts,
            ..served
        })
    })
}

/// One layer of a token with a VRAM tier: the card's share launched
/// first, the rest computed on the CPU meanwhile, the outputs in
/// `objects`' order.
fn layer_with_card(
    store: &Store,
    kernel: &ExpertKernel,
    card: &mut GpuTier<'_>,
    objects: &[ObjectIndex],
    input: &LayerInput,
) -> Result<(Vec<Vec<f32>>, LayerWaits), ReplayError> {
    let launched = card.launch(objects, input).map_err(ReplayError::Gpu)?;
    let on_cpu: Vec<usize> = (0..objects.len())
        .filter(|&i| !card.holds(objects[i]))
        .collect();
    let cpu_objects: Vec<ObjectIndex> = on_cpu.iter().map(|&i| objects[i]).collect();
    let (cpu_outputs, waits) = layer(store, kernel, &cpu_objects, input)?;
    let mut outputs = vec![Vec::new(); objects.len()];
    for (&i, y) in on_cpu.iter().zip(cpu_outputs) {
        outputs[i] = y;
    }
    card.finish(launched, &mut outputs)
        .map_err(ReplayError::Gpu)?;
    Ok((outputs, waits))
}

//! One buffer per MoE layer, for the engines that place all routed experts
//! of a layer as one tensor or module (llama.cpp, ktransformers): the
//! buffer types, each layer's choice (the plan's majority by use-rate mass,
//! moved off a card its whole layers overflow), and the lost per-expert
//! decisions priced with the cost model.

use super::join;
use residency_core::cost::{Instance, Place};
use residency_core::error::Result;
use residency_core::plan::Plan;
use residency_core::solution::describe;
use residency_core::units::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A llama.cpp buffer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Buffer {
    Cuda(usize),
    Cpu,
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffer::Cuda(g) => write!(f, "CUDA{g}"),
            Buffer::Cpu => f.write_str("CPU"),
        }
    }
}

impl Buffer {
    /// GPUs become `CUDA<g>`; RAM and disk the CPU buffer (llama.cpp mmaps the GGUF).
    pub(super) fn of(place: Place) -> Buffer {
        match place {
            Place::Gpu(g) => Buffer::Cuda(g),
            Place::Ram(_) | Place::Disk(_) => Buffer::Cpu,
            Place::Recompute => unreachable!("only KV groups are recomputed"),
        }
    }
}

/// The placement llama.cpp runs with these rules, for the cost model:
/// routed experts on their layer's buffer (an expert the plan keeps in RAM
/// or on disk stays there when its layer is on the CPU; one the plan puts on
/// a GPU goes to the first RAM node), trunk as planned.
pub(super) fn llama_placement(
    inst: &Instance,
    placement: &[usize],
    chosen: &[Buffer],
) -> Vec<usize> {
    let mut out = placement.to_vec();
    let first_ram = inst.places.iter().position(|p| matches!(p, Place::Ram(_)));
    for (ids, &buffer) in inst.expert_ids.iter().zip(chosen) {
        for &o in ids {
            let planned = inst.places[placement[o]];
            out[o] = match (buffer, planned) {
                (Buffer::Cuda(g), _) => inst.place_index(Place::Gpu(g)),
                (Buffer::Cpu, Place::Gpu(_)) => first_ram.unwrap_or(placement[o]),
                (Buffer::Cpu, _) => placement[o],
            };
        }
    }
    out
}

/// One buffer per MoE layer, for engines that place a layer's routed
/// experts as one module or tensor (llama.cpp, ktransformers): the buffer
/// with the most of the layer's use-rate mass in the plan (then the most
/// experts, then the lower buffer). Where whole layers then overflow a card
/// beside `trunk_gpu`, the layers with the least of the plan's mass on that
/// card go to their next buffer by mass with room, else the CPU. Returns the
/// buffers, and adds to `warnings` the lost per-expert decisions priced
/// with the cost model; `layout` says why the engine cannot hold
/// per-expert decisions.
pub(super) fn layer_buffers(
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    trunk_gpu: &[u64],
    layout: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<Buffer>> {
    let layers_of = inst.moe_layers()?;
    let shares = layer_shares(inst, placement);
    let mut chosen: Vec<Buffer> = shares
        .iter()
        .map(|share| {
            share
                .iter()
                .max_by(|a, b| {
                    a.1 .0
                        .total_cmp(&b.1 .0)
                        .then(a.1 .1.cmp(&b.1 .1))
                        .then(b.0.cmp(a.0))
                })
                .map_or(Buffer::Cpu, |(&b, _)| b)
        })
        .collect();
    fit_cards(inst, &shares, &mut chosen, trunk_gpu, &layers_of, warnings);
    price_lost_decisions(plan, inst, placement, (&shares, &chosen), layout, warnings);
    Ok(chosen)
}

/// Per MoE layer, the use-rate mass and expert count of each buffer.
type Shares = Vec<BTreeMap<Buffer, (f64, usize)>>;

/// Each MoE layer's mass and experts per buffer, as the plan places them.
fn layer_shares(inst: &Instance, placement: &[usize]) -> Shares {
    inst.expert_ids
        .iter()
        .map(|ids| {
            let mut share: BTreeMap<Buffer, (f64, usize)> = BTreeMap::new();
            for &o in ids {
                let entry = share
                    .entry(Buffer::of(inst.places[placement[o]]))
                    .or_default();
                entry.0 += inst.objects[o].use_rate;
                entry.1 += 1;
            }
            share
        })
        .collect()
}

/// Where whole layers overflow a card beside `trunk_gpu`, the layers with
/// the least of the plan's mass on that card moved to their next buffer by
/// mass with room, else the CPU; each card's moves and any overflow left
/// said in `warnings`.
fn fit_cards(
    inst: &Instance,
    shares: &Shares,
    chosen: &mut [Buffer],
    trunk_gpu: &[u64],
    layers_of: &[usize],
    warnings: &mut Vec<String>,
) {
    let layer_bytes: Vec<u64> = inst
        .expert_ids
        .iter()
        .map(|ids| ids.iter().map(|&o| inst.objects[o].gpu_bytes).sum())
        .collect();
    let capacity = &inst.resources.gpu_capacity_bytes;
    let mut load = trunk_gpu.to_vec();
    for (l, &b) in chosen.iter().enumerate() {
        if let Buffer::Cuda(g) = b {
            load[g] += layer_bytes[l];
        }
    }
    for g in 0..inst.resources.gpus() {
        let whole = load[g];
        // A layer the constraints hold on this card (kept whole, or every
        // expert pinned there) stays; the others make room.
        let held = |l: usize| {
            let c = &inst.constraints;
            let ids = &inst.expert_ids[l];
            c.groups
                .iter()
                .any(|group| group.max_places == 1 && group.objects == *ids)
                || ids
                    .iter()
                    .all(|&o| c.pins.get(o).copied().flatten() == Some(Place::Gpu(g)))
        };
        let mut on_card: Vec<usize> = (0..chosen.len())
            .filter(|&l| chosen[l] == Buffer::Cuda(g) && !held(l))
            .collect();
        // Least planned mass on this card last, so it is popped first.
        let planned_mass = |l: usize| shares[l].get(&Buffer::Cuda(g)).map_or(0.0, |s| s.0);
        on_card.sort_by(|&a, &b| planned_mass(b).total_cmp(&planned_mass(a)).then(a.cmp(&b)));
        let mut demoted: BTreeMap<Buffer, BTreeSet<usize>> = BTreeMap::new();
        while load[g] > capacity[g] {
            let Some(l) = on_card.pop() else { break };
            // The layer's next buffer by planned mass that has room, else the CPU.
            let mut next: Vec<(&Buffer, &(f64, usize))> = shares[l]
                .iter()
                .filter(|(b, _)| match b {
                    Buffer::Cuda(h) => *h != g && load[*h] + layer_bytes[l] <= capacity[*h],
                    Buffer::Cpu => true,
                })
                .collect();
            next.sort_by(|a, b| {
                b.1 .0
                    .total_cmp(&a.1 .0)
                    .then(b.1 .1.cmp(&a.1 .1))
                    .then(a.0.cmp(b.0))
            });
            let to = next.first().map_or(Buffer::Cpu, |(&b, _)| b);
            chosen[l] = to;
            load[g] -= layer_bytes[l];
            if let Buffer::Cuda(h) = to {
                load[h] += layer_bytes[l];
            }
            demoted.entry(to).or_default().insert(layers_of[l]);
        }
        if !demoted.is_empty() {
            warnings.push(format!(
                "CUDA{g} cannot hold the whole layers of its majority: {} ({whole} bytes) with its trunk, more than gpu:{g}'s capacity {} ({capacity} bytes); the routed experts of the layers with the least of the plan's gpu:{g} mass go to the next buffer of their mass with room instead: {}",
                Bytes(whole),
                Bytes(capacity[g]),
                join(
                    demoted
                        .iter()
                        .map(|(b, layers)| format!("layer(s) {} to {b}", join(layers, ", "))),
                    "; "
                ),
                capacity = capacity[g]
            ));
        }
        if load[g] > capacity[g] {
            warnings.push(format!(
                "CUDA{g} gets {} ({} bytes), more than gpu:{g}'s capacity {} ({} bytes): expect an out-of-memory error at load",
                Bytes(load[g]),
                load[g],
                Bytes(capacity[g]),
                capacity[g]
            ));
        }
    }
}

/// The per-expert decisions the layers' buffers lose, priced with the
/// cost model, in `warnings` where any expert moves.
fn price_lost_decisions(
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    (shares, chosen): (&Shares, &[Buffer]),
    layout: &str,
    warnings: &mut Vec<String>,
) {
    let place = |o: usize| inst.places[placement[o]];
    let (mut mixed, mut moved, mut moved_mass, mut total_mass) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut moves: BTreeMap<(Place, Buffer), (usize, f64)> = BTreeMap::new();
    for (l, ids) in inst.expert_ids.iter().enumerate() {
        if shares[l].len() > 1 {
            mixed += 1;
        }
        for &o in ids {
            let p = inst.objects[o].use_rate;
            total_mass += p;
            if Buffer::of(place(o)) != chosen[l] {
                moved += 1;
                moved_mass += p;
                let m = moves.entry((place(o), chosen[l])).or_default();
                m.0 += 1;
                m.1 += p;
            }
        }
    }
    let broken_pins: Vec<String> = (inst.expert_ids.iter().zip(chosen.iter()))
        .flat_map(|(ids, &b)| ids.iter().map(move |&o| (o, b)))
        .filter_map(|(o, b)| {
            let pin = inst.constraints.pins.get(o).copied().flatten()?;
            (Buffer::of(pin) != b)
                .then(|| format!("{} (pinned to {pin}) on {b}", describe(inst, o)))
        })
        .collect();
    if let Some(first) = broken_pins.first() {
        warnings.push(format!(
            "{layout}, so {} pinned expert(s) cannot stay where pinned, e.g. {first}; pin whole layers (L<n>.experts) or keep them whole (--keep-whole) for this engine",
            broken_pins.len()
        ));
    }
    if moved == 0 {
        return;
    }
    let exported = inst
        .evaluate(&llama_placement(inst, placement, chosen))
        .token_seconds;
    let percent = if total_mass > 0.0 {
        100.0 * moved_mass / total_mass
    } else {
        0.0
    };
    warnings.push(format!(
        "{layout}, so a layer has one buffer: {mixed} of {} MoE layers mix places in the plan, and {moved} experts whose per-expert decision cannot be expressed move (use-rate mass {moved_mass:.3} of {total_mass:.3} per token, {percent:.1}%; the cost model gives {:.3} ms per token as exported, the plan {:.3} ms): {}",
        inst.expert_ids.len(),
        exported * 1e3,
        plan.objective.token_seconds * 1e3,
        join(
            moves
                .iter()
                .map(|((from, to), (n, mass))| format!("{n} {from} -> {to} (mass {mass:.3})")),
            ", "
        )
    ));
}

//! The greedy baseline of design §4, reported beside every plan: roughly what
//! Colibri does today. Trunk largest first to the roomiest GPU, else the
//! roomiest RAM node (to the fullest place that takes it, when that rule
//! strands a component); then experts hottest first, each to the first place
//! with room among GPU `e mod n_gpus`, the RAM nodes in id order, `disk:0`;
//! then KV groups (design §4.6 names no baseline) in the room left, most
//! saved seconds per byte first, GPUs then RAM nodes in id order, else
//! recomputed.

use residency_core::cost::{Instance, ObjectKind, Place};
use residency_core::{PlannerError, Result};

/// Free bytes per place, indexed like `Instance::places` (disk: unbounded).
pub(crate) fn capacities(inst: &Instance) -> Vec<u64> {
    inst.places
        .iter()
        .map(|&q| inst.resources.capacity_bytes(q).unwrap_or(u64::MAX))
        .collect()
}

pub fn greedy(inst: &Instance) -> Result<Vec<usize>> {
    let mut placement = vec![usize::MAX; inst.objects.len()];
    let gpus: Vec<usize> = (0..inst.resources.gpus())
        .map(|g| inst.place_index(Place::Gpu(g)))
        .collect();
    let rams: Vec<usize> = (0..inst.resources.numa_nodes())
        .map(|n| inst.place_index(Place::Ram(n)))
        .collect();

    let mut trunk = inst.trunk_ids.clone();
    trunk.sort_by(|&a, &b| {
        let (oa, ob) = (&inst.objects[a], &inst.objects[b]);
        ob.gpu_bytes
            .cmp(&oa.gpu_bytes)
            .then_with(|| trunk_key(&oa.kind).cmp(&trunk_key(&ob.kind)))
    });
    let (placed, mut free) = match place_trunk(inst, &trunk, &gpus, &rams, false) {
        Ok(done) => done,
        // The roomiest rule can strand a component that a tighter packing
        // holds: then each goes to the fullest place that still takes it.
        Err(error) => place_trunk(inst, &trunk, &gpus, &rams, true).map_err(|_| error)?,
    };
    for &o in &trunk {
        placement[o] = placed[o];
    }

    let mut experts: Vec<usize> = inst.expert_ids.iter().flatten().copied().collect();
    // Stable sort: ties keep (l, e) order.
    experts.sort_by(|&a, &b| {
        inst.objects[b]
            .use_rate
            .total_cmp(&inst.objects[a].use_rate)
    });
    let disk = (inst.resources.drives() > 0).then(|| inst.place_index(Place::Disk(0)));
    for o in experts {
        let ObjectKind::Expert { expert, .. } = inst.objects[o].kind else {
            unreachable!()
        };
        let home_gpu = (!gpus.is_empty()).then(|| gpus[expert % gpus.len()]);
        let q = home_gpu
            .into_iter()
            .chain(rams.iter().copied())
            .find(|&q| free[q] >= inst.objects[o].bytes_at(inst.places[q]))
            .or(disk)
            .ok_or_else(|| missing(inst, o, &free))?;
        free[q] -= inst.objects[o].bytes_at(inst.places[q]);
        placement[o] = q;
    }

    if !inst.kv_ids.is_empty() {
        place_kv_groups(inst, &gpus, &rams, &mut free, &mut placement);
    }
    Ok(placement)
}

/// KV groups into the room left, most recompute seconds per byte first, to
/// the first GPU or RAM node with room where keeping them saves anything.
fn place_kv_groups(
    inst: &Instance,
    gpus: &[usize],
    rams: &[usize],
    free: &mut [u64],
    placement: &mut [usize],
) {
    let kv_seconds = |o: usize, place: Place| inst.resources.kv_seconds(&inst.objects[o], place);
    let mut kv = inst.kv_ids.clone();
    let density = |o: usize| kv_seconds(o, Place::Recompute) / inst.objects[o].gpu_bytes as f64;
    kv.sort_by(|&a, &b| density(b).total_cmp(&density(a)));
    let recompute = inst.place_index(Place::Recompute);
    for o in kv {
        let bytes = inst.objects[o].gpu_bytes;
        let q = gpus
            .iter()
            .chain(rams)
            .copied()
            .find(|&q| {
                free[q] >= bytes && kv_seconds(o, inst.places[q]) < kv_seconds(o, Place::Recompute)
            })
            .unwrap_or(recompute);
        if q != recompute {
            free[q] -= bytes;
        }
        placement[o] = q;
    }
}

fn trunk_key(kind: &ObjectKind) -> (String, Option<usize>) {
    match kind {
        ObjectKind::Trunk { name, layer } => (name.clone(), *layer),
        _ => (String::new(), None),
    }
}

/// Trunk components in `order` to the roomiest GPU (lowest id on ties),
/// else the roomiest RAM node; with `best_fit`, to the place of either kind
/// with the least room that still takes them. Place per object (trunk
/// only) and the room left, or the first component that fits nowhere.
fn place_trunk(
    inst: &Instance,
    order: &[usize],
    gpus: &[usize],
    rams: &[usize],
    best_fit: bool,
) -> Result<(Vec<usize>, Vec<u64>)> {
    let mut free = capacities(inst);
    let mut placement = vec![usize::MAX; inst.objects.len()];
    for &o in order {
        let bytes = inst.objects[o].gpu_bytes;
        let roomiest = |ids: &[usize], free: &[u64]| {
            ids.iter()
                .copied()
                .filter(|&q| free[q] >= bytes)
                .max_by(|&a, &b| free[a].cmp(&free[b]).then(b.cmp(&a)))
        };
        let q = if best_fit {
            gpus.iter()
                .chain(rams)
                .copied()
                .filter(|&q| free[q] >= bytes)
                .min_by_key(|&q| (free[q], q))
        } else {
            roomiest(gpus, &free).or_else(|| roomiest(rams, &free))
        }
        .ok_or_else(|| missing(inst, o, &free))?;
        free[q] -= bytes;
        placement[o] = q;
    }
    Ok((placement, free))
}

fn missing(inst: &Instance, o: usize, free: &[u64]) -> PlannerError {
    let object = &inst.objects[o];
    let largest = inst
        .places
        .iter()
        .zip(free)
        .filter(|(&q, _)| inst.resources.capacity_bytes(q).is_some())
        .max_by_key(|(_, &f)| f);
    let (bytes, room) = match largest {
        Some((q, &f)) => (
            object.bytes_at(*q),
            format!("the roomiest place, {q}, has {f} bytes free"),
        ),
        None => (object.ram_bytes, "there is no GPU or RAM node".to_string()),
    };
    PlannerError::Infeasible(format!(
        "greedy placement: {} ({} bytes) fits nowhere and there is no drive to stream it from: {room}, {} bytes are missing",
        crate::describe(inst, o),
        bytes,
        bytes.saturating_sub(largest.map(|(_, &f)| f).unwrap_or(0))
    ))
}

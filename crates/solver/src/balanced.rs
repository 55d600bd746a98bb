//! A start for the plan search that needs no prices: the trunk where its
//! stage takes least time, then every stage with experts gets the same
//! share of each GPU's and RAM node's room left, and fills it stage by
//! stage, hottest experts first, the fastest kind of place first (least
//! work per unit of use rate: GPUs, then RAM, then drives), each expert to
//! the place of that kind whose time it raises least. Where the stages'
//! heat has one shape this is close to the best plan; where drives carry
//! experts it counts what their reads cost the node's cores, felt share
//! included, which the greedy baseline does not. Under a short limit the
//! priced relaxation may not leave zero prices, whose relaxed placement
//! piles every expert on the GPUs; this start does not depend on it.

use residency_core::cost::{Instance, Place, Resource, StageLoads};

/// `base` with its trunk and experts placed again: each trunk component,
/// largest first, where its stage's time grows least among the places
/// with room; then per stage an equal share of the room left on each GPU
/// and RAM node, each kind of place filled in turn, fastest first. KV
/// groups stay where `base` has them; an object that no allowed place has
/// room for stays there too. May still break a constraint (the
/// search's repair then moves it).
pub fn balanced(inst: &Instance, base: &[usize]) -> Vec<usize> {
    let r = &inst.resources;
    let mut placement = base.to_vec();
    let mut free: Vec<i128> = super::greedy::capacities(inst)
        .into_iter()
        .map(i128::from)
        .collect();
    for (o, &q) in base.iter().enumerate() {
        if inst.objects[o].is_kv() {
            free[q] -= inst.objects[o].bytes_at(inst.places[q]) as i128;
        }
    }
    // Trunk components, largest first, each where its stage's trunk
    // takes least time (the fastest card with the least sync overhead,
    // while it has room); where `base` has it when no place has room.
    let mut trunk = inst.trunk_ids.clone();
    trunk.sort_by(|&a, &b| {
        (inst.objects[b].gpu_bytes)
            .cmp(&inst.objects[a].gpu_bytes)
            .then(a.cmp(&b))
    });
    let mut trunk_loads: Vec<StageLoads> = inst.stages.iter().map(|_| StageLoads::new(r)).collect();
    for o in trunk {
        let object = &inst.objects[o];
        let loads = &trunk_loads[object.stage];
        let q = (0..inst.places.len())
            .filter(|&q| {
                matches!(inst.places[q], Place::Gpu(_) | Place::Ram(_))
                    && inst.allowed(o, inst.places[q])
                    && free[q] >= object.bytes_at(inst.places[q]) as i128
            })
            .map(|q| {
                let mut after = loads.clone();
                after.apply(r, object, inst.places[q], 1.0);
                (after.seconds(r).0, q)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map_or(base[o], |(_, q)| q);
        free[q] -= object.bytes_at(inst.places[q]) as i128;
        trunk_loads[object.stage].apply(r, object, inst.places[q], 1.0);
        placement[o] = q;
    }
    let with_experts = inst
        .stages
        .iter()
        .filter(|s| s.objects.iter().any(|&o| inst.objects[o].is_expert()))
        .count()
        .max(1) as i128;
    // Each stage's share of the room; drives and recompute are unbounded.
    let share: Vec<i128> = (0..inst.places.len())
        .map(|q| match inst.resources.capacity_bytes(inst.places[q]) {
            Some(_) => free[q].max(0) / with_experts,
            None => i128::MAX,
        })
        .collect();
    for stage in &inst.stages {
        let mut experts: Vec<usize> = stage
            .objects
            .iter()
            .copied()
            .filter(|&o| inst.objects[o].is_expert())
            .collect();
        let Some(&first) = experts.first() else {
            continue;
        };
        experts.sort_by(|&a, &b| {
            inst.objects[b]
                .use_rate
                .total_cmp(&inst.objects[a].use_rate)
                .then(a.cmp(&b))
        });
        let mut loads = StageLoads::new(r);
        for &o in &stage.objects {
            if !inst.objects[o].is_expert() {
                loads.apply(r, &inst.objects[o], inst.places[placement[o]], 1.0);
            }
        }
        // Kinds of place, least work per unit of use rate first.
        let per_rate = |place: Place| {
            let mut unit = inst.objects[first].clone();
            unit.use_rate = 1.0;
            r.work(&unit, place).iter().map(|w| w.1).sum::<f64>()
        };
        let mut kinds: Vec<(f64, Vec<usize>)> = Vec::new();
        for kind in 0..3 {
            let places: Vec<usize> = (0..inst.places.len())
                .filter(|&q| {
                    matches!(
                        (kind, inst.places[q]),
                        (0, Place::Gpu(_)) | (1, Place::Ram(_)) | (2, Place::Disk(_))
                    )
                })
                .collect();
            if places.is_empty() {
                continue;
            }
            let mean = places
                .iter()
                .map(|&q| per_rate(inst.places[q]))
                .sum::<f64>()
                / places.len() as f64;
            kinds.push((mean, places));
        }
        kinds.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = share.clone();
        for o in experts {
            let object = &inst.objects[o];
            let chosen = kinds.iter().find_map(|(_, places)| {
                places
                    .iter()
                    .copied()
                    .filter(|&q| {
                        inst.allowed(o, inst.places[q])
                            && left[q] >= object.bytes_at(inst.places[q]) as i128
                    })
                    .map(|q| (time_with(inst, &loads, o, inst.places[q]), q))
                    .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                    .map(|(_, q)| q)
            });
            let q = chosen.unwrap_or(base[o]);
            if left[q] != i128::MAX {
                left[q] -= object.bytes_at(inst.places[q]) as i128;
            }
            loads.apply(r, object, inst.places[q], 1.0);
            placement[o] = q;
        }
    }
    placement
}

/// The time of the resources `o` loads at `place` once it is there: its
/// GPU (sync included), its node's cores (stage overhead and the felt share
/// of the drives' reads included), its drive.
fn time_with(inst: &Instance, loads: &StageLoads, o: usize, place: Place) -> f64 {
    let r = &inst.resources;
    let max_drive = loads.drive.iter().copied().fold(0.0, f64::max);
    let work = r.work(&inst.objects[o], place);
    let added = |resource: Resource| {
        work.iter()
            .filter(|w| w.0 == resource)
            .map(|w| w.1)
            .sum::<f64>()
    };
    let drive_after = |d: usize| loads.drive[d] + added(Resource::Drive(d));
    let new_max_drive = (0..loads.drive.len())
        .map(drive_after)
        .fold(max_drive, f64::max);
    let cpu = |n: usize| {
        loads.cpu[n]
            + added(Resource::Cpu(n))
            + r.cpu_stage_seconds[n]
            + r.felt_fraction * new_max_drive
    };
    match place {
        Place::Gpu(g) => loads.gpu[g] + added(Resource::Gpu(g)) + r.gpu_sync_seconds[g],
        Place::Ram(n) => cpu(n),
        Place::Disk(d) => drive_after(d).max(cpu(r.drive_numa[d])),
        Place::Recompute => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::balanced;
    use residency_core::cost::{Instance, Place};
    use residency_core::model::Model;
    use std::path::Path;

    /// Two MoE layers of 8 experts of 100 MB on a card with room for 8 of
    /// them, a node with room for 4 and a drive: by hand, each layer gets
    /// 4 on the card (its share: half of 8), 2 in RAM (half of 4) and the
    /// 2 coldest on the drive; the card takes the hottest.
    #[test]
    fn each_stage_gets_its_share_hottest_on_the_card() {
        let model = Model::from_yaml_str(
            "name: tiny\nlayers: 2\nmoe_layers: [0, 1]\nexperts: 8\ntop_k: 2\nhidden: 64\n\
             expert_intermediate: 64\nformats: { q: 100 MB }\n\
             tiers: { gpu: q, ram: q, disk: q }\n",
            Path::new("tiny.yaml"),
        )
        .unwrap();
        let profile =
            crate::test_box::one_card_box(("1424 MiB", "1 GiB"), ("1824 MiB", "1 GiB"), Some(0.3));
        // Layer 0 hottest first in id order, layer 1 in reverse.
        let rates: Vec<Vec<f64>> = vec![
            (0..8).map(|e| 0.5 / (e + 1) as f64).collect(),
            (0..8).map(|e| 0.5 / (8 - e) as f64).collect(),
        ];
        let inst = Instance::new(&profile, &model, &rates);
        let card = inst.resources.capacity_bytes(Place::Gpu(0)).unwrap();
        let ram = inst.resources.capacity_bytes(Place::Ram(0)).unwrap();
        assert_eq!((card / 100_000_000, ram / 100_000_000), (8, 4));
        let base = crate::greedy::greedy(&inst).unwrap();
        let placement = balanced(&inst, &base);
        let place = |l: usize, e: usize| inst.places[placement[inst.expert_ids[l][e]]];
        for l in 0..2 {
            let hot_first: Vec<usize> = if l == 0 {
                (0..8).collect()
            } else {
                (0..8).rev().collect()
            };
            let at: Vec<Place> = hot_first.iter().map(|&e| place(l, e)).collect();
            assert!(
                at[..4].iter().all(|p| *p == Place::Gpu(0)),
                "layer {l}: {at:?}"
            );
            assert!(
                at[4..6].iter().all(|p| *p == Place::Ram(0)),
                "layer {l}: {at:?}"
            );
            assert!(
                at[6..].iter().all(|p| *p == Place::Disk(0)),
                "layer {l}: {at:?}"
            );
        }
        assert!(inst.check_feasible(&placement).is_ok());
    }
}

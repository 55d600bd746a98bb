//! Rounds the relaxation to a whole placement: per stage the heaviest
//! participation pattern, per bucket whole counts by largest remainder, GPU
//! groups split over their cards hottest-first to the least loaded card with
//! room; KV groups where most of each is kept. The result may overfill a
//! place; `SearchState::repair` fixes that.

use super::relaxation::{Relaxation, Slot};
use crate::cost::{Instance, Place, StageLoads};

pub fn round(inst: &Instance, relaxation: &Relaxation) -> Vec<usize> {
    let r = &inst.resources;
    let mut placement = vec![usize::MAX; inst.objects.len()];
    let mut free: Vec<i128> = super::greedy::capacities(inst)
        .into_iter()
        .map(i128::from)
        .collect();
    for stage in &relaxation.stages {
        let Some(pattern) = stage
            .patterns
            .iter()
            .max_by(|a, b| a.weight.total_cmp(&b.weight))
        else {
            continue;
        };
        let weight = pattern.weight.max(1e-12);
        let mut loads = StageLoads::new(r);
        let mut put = |o: usize, slot: Slot, loads: &mut StageLoads, free: &mut Vec<i128>| {
            let q = slot_place(inst, relaxation, o, slot, loads, free);
            loads.apply(r, &inst.objects[o], inst.places[q], 1.0);
            free[q] -= inst.objects[o].bytes_at(inst.places[q]) as i128;
            placement[o] = q;
        };
        for (o, shares) in &pattern.trunk {
            let (slot, _) = shares
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .expect("a trunk object has a slot");
            put(*o, *slot, &mut loads, &mut free);
        }
        // Whole counts per slot; the densest slot takes the hottest experts.
        let counts = largest_remainder(
            pattern.experts.iter().map(|e| e.1 / weight).collect(),
            stage.experts.len(),
        );
        let mut order: Vec<usize> = (0..pattern.experts.len()).collect();
        let density = |i: usize| pattern.experts[i].2 / pattern.experts[i].1.max(1e-12);
        order.sort_by(|&a, &b| density(b).total_cmp(&density(a)));
        let mut experts = stage.experts.iter();
        for i in order {
            for &o in experts.by_ref().take(counts[i]) {
                put(o, pattern.experts[i].0, &mut loads, &mut free);
            }
        }
    }
    // KV groups: kept where the relaxation keeps most of them, when that is
    // at least half; else recomputed.
    let no_loads = StageLoads::new(r);
    for (o, shares) in &relaxation.kv {
        let kept = shares
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .filter(|share| share.1 >= 0.5);
        let q = match kept {
            Some(&(slot, _)) => slot_place(inst, relaxation, *o, slot, &no_loads, &free),
            None => inst.place_index(Place::Recompute),
        };
        free[q] -= inst.objects[*o].bytes_at(inst.places[q]) as i128;
        placement[*o] = q;
    }
    placement
}

/// The place index of a relaxation slot for object `o`: a RAM node or drive
/// as is; for a GPU group, its least loaded card with room, else the roomiest.
fn slot_place(
    inst: &Instance,
    relaxation: &Relaxation,
    o: usize,
    slot: Slot,
    loads: &StageLoads,
    free: &[i128],
) -> usize {
    match slot {
        Slot::Place(place) => inst.place_index(place),
        Slot::Group(j) => {
            let cards = &relaxation.groups[j].gpus;
            let index = |g: usize| inst.place_index(Place::Gpu(g));
            let bytes = inst.objects[o].gpu_bytes as i128;
            cards
                .iter()
                .copied()
                .filter(|&g| free[index(g)] >= bytes)
                .min_by(|&a, &b| loads.gpu[a].total_cmp(&loads.gpu[b]))
                .or_else(|| cards.iter().copied().max_by_key(|&g| free[index(g)]))
                .map(index)
                .expect("a group has at least one card")
        }
    }
}

/// Whole numbers summing to `total`, each the floor of its share plus one
/// for the largest remainders.
fn largest_remainder(shares: Vec<f64>, total: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = shares.iter().map(|x| x.max(0.0).floor() as usize).collect();
    let mut assigned: usize = counts.iter().sum();
    while assigned > total {
        let i = (0..counts.len())
            .filter(|&i| counts[i] > 0)
            .min_by(|&a, &b| shares[a].total_cmp(&shares[b]))
            .unwrap();
        counts[i] -= 1;
        assigned -= 1;
    }
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        (shares[b] - shares[b].floor()).total_cmp(&(shares[a] - shares[a].floor()))
    });
    for &i in order.iter().cycle().take(total - assigned) {
        counts[i] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::largest_remainder;

    #[test]
    fn largest_remainder_keeps_the_total() {
        // 2.6 + 1.3 + 0.1 = 4: floors 2, 1, 0 (3), the largest remainder (0.6) gets the last one.
        assert_eq!(largest_remainder(vec![2.6, 1.3, 0.1], 4), vec![3, 1, 0]);
        // Floating noise above the total is taken back from the smallest share.
        assert_eq!(largest_remainder(vec![3.0000001, 1.0000001], 4), vec![3, 1]);
        assert_eq!(
            largest_remainder(vec![0.0, 0.0], 2).iter().sum::<usize>(),
            2
        );
    }
}

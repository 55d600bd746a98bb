//! Rounds the relaxed placement to a whole one: per stage, whole expert
//! counts per block by largest remainder, taken back where rounding up
//! overfills a place, the hottest experts to the first (hottest) block;
//! objects placed whole (trunk components, KV groups) where the relaxation
//! put them. The result may still overfill a place; `SearchState::repair`
//! fixes that.

use super::lagrange::Fractional;
use crate::cost::Instance;

/// `expert_order[s]`: stage `s`'s experts, hottest first.
pub fn round(inst: &Instance, expert_order: &[Vec<usize>], fractional: &Fractional) -> Vec<usize> {
    let mut placement = vec![usize::MAX; inst.objects.len()];
    let mut free: Vec<i128> = super::greedy::capacities(inst)
        .into_iter()
        .map(i128::from)
        .collect();
    let mut counts: Vec<Vec<usize>> = Vec::with_capacity(fractional.stages.len());
    for (stage, order) in fractional.stages.iter().zip(expert_order) {
        for &(o, place) in &stage.whole {
            let q = inst.place_index(place);
            placement[o] = q;
            free[q] -= inst.objects[o].bytes_at(place) as i128;
        }
        let whole = largest_remainder(stage.blocks.iter().map(|b| b.1).collect(), order.len());
        for (&(place, _), &count) in stage.blocks.iter().zip(&whole) {
            if let Some(&first) = order.first() {
                free[inst.place_index(place)] -=
                    count as i128 * inst.objects[first].bytes_at(place) as i128;
            }
        }
        counts.push(whole);
    }
    // Rounding up in many stages can overfill a place: take experts back
    // from the stages whose share there was rounded up most, each to the
    // stage's next colder block.
    for q in 0..inst.places.len() {
        while free[q] < 0 {
            let worst = fractional
                .stages
                .iter()
                .enumerate()
                .flat_map(|(s, stage)| {
                    let counts = &counts[s];
                    stage
                        .blocks
                        .windows(2)
                        .enumerate()
                        .filter_map(move |(i, pair)| {
                            let here = inst.place_index(pair[0].0) == q && counts[i] > 0;
                            here.then(|| (counts[i] as f64 - pair[0].1, s, i))
                        })
                })
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let Some((_, s, i)) = worst else { break };
            let blocks = &fractional.stages[s].blocks;
            let expert = &inst.objects[expert_order[s][0]];
            let next = inst.place_index(blocks[i + 1].0);
            counts[s][i] -= 1;
            counts[s][i + 1] += 1;
            free[q] += expert.bytes_at(blocks[i].0) as i128;
            free[next] -= expert.bytes_at(blocks[i + 1].0) as i128;
        }
    }
    for ((stage, order), counts) in fractional.stages.iter().zip(expert_order).zip(&counts) {
        let mut experts = order.iter();
        for (&(place, _), &count) in stage.blocks.iter().zip(counts) {
            for &o in experts.by_ref().take(count) {
                placement[o] = inst.place_index(place);
            }
        }
    }
    debug_assert!(placement.iter().all(|&q| q != usize::MAX));
    placement
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

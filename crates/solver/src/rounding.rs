//! Rounds the relaxed placement to a whole one: per stage, whole expert
//! counts per block by largest remainder, the hottest experts to the first
//! (hottest) block; objects placed whole (trunk components, KV groups)
//! where the relaxation put them. The result may overfill a place;
//! `SearchState::repair` fixes that.

use super::lagrange::Fractional;
use residency_core::cost::Instance;

/// `expert_order[s]`: stage `s`'s experts, hottest first.
pub fn round(inst: &Instance, expert_order: &[Vec<usize>], fractional: &Fractional) -> Vec<usize> {
    let mut placement = vec![usize::MAX; inst.objects.len()];
    for (stage, order) in fractional.stages.iter().zip(expert_order) {
        for &(o, place) in &stage.whole {
            placement[o] = inst.place_index(place);
        }
        let counts = largest_remainder(stage.blocks.iter().map(|b| b.1).collect(), order.len());
        let mut experts = order.iter();
        for (&(place, _), count) in stage.blocks.iter().zip(counts) {
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

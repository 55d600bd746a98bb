//! How a byte budget is split across MoE layers (design §6): the same bytes
//! for every layer (`uniform_slots`), or water-filling on each layer's
//! exact LRU benefit curve (`water_fill`), which the online allocator runs
//! while serving and the simulator's `dynamic` allocation once offline.
//!
//! Benefit curves are not concave (a cyclic layer, as in Colibri's traces, gains
//! nothing from 1 or 2 slots and a lot from 3), so a one-slot-at-a-time
//! greedy would give such a layer nothing. Water-filling first follows the
//! upper concave hull of every layer (jumps between hull vertices in order
//! of saving per byte), then, where the next hull jump no longer fits,
//! considers every feasible capacity of every layer.

/// One layer's LRU curve: `misses[k]` with `k` slots of `slot_bytes`, for
/// `k` in `0..=experts`, and the felt seconds of one miss.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerCurve {
    pub slot_bytes: u64,
    pub misses: Vec<u64>,
    pub miss_seconds: f64,
}

impl LayerCurve {
    /// Felt seconds saved with `k` slots against none.
    fn saving(&self, k: usize) -> f64 {
        (self.misses[0] - self.misses[k]) as f64 * self.miss_seconds
    }
}

/// Slots per layer when every layer gets `budget / layers` bytes, in whole
/// slots of `slot_bytes[l]`.
pub fn uniform_slots(slot_bytes: &[u64], budget_bytes: u64) -> Vec<usize> {
    let share = budget_bytes / slot_bytes.len().max(1) as u64;
    slot_bytes
        .iter()
        .map(|&b| (share / b.max(1)) as usize)
        .collect()
}

/// Slots each layer keeps whatever water-filling says: the experts a
/// token leases in it at once (`leased[l]`, its top-k), so that a layer
/// that receives traffic never has fewer slots than one token holds (with
/// fewer, water-filling may leave a layer no slot at all and every request
/// of it runs from a transient slot). A budget below the sum of the top-ks
/// cannot give every layer that many: there each layer's floor is its
/// uniform split instead (`uniform_slots`), never more than its top-k, so
/// no budget is refused and water-filling moves nothing the uniform split
/// needs.
pub fn floor_slots(leased: &[usize], slot_bytes: &[u64], budget_bytes: u64) -> Vec<usize> {
    uniform_slots(slot_bytes, budget_bytes)
        .into_iter()
        .zip(leased)
        .map(|(uniform, &k)| uniform.min(k))
        .collect()
}

/// [`water_fill`] of the budget above `floors[l]` slots per layer (from
/// [`floor_slots`], which fit the budget), on each curve beyond its floor.
pub fn water_fill_above(curves: &[LayerCurve], floors: &[usize], budget_bytes: u64) -> Vec<usize> {
    let floor_bytes: u64 = curves
        .iter()
        .zip(floors)
        .map(|(c, &f)| f as u64 * c.slot_bytes)
        .sum();
    debug_assert!(floor_bytes <= budget_bytes, "floor_slots fit the budget");
    let above: Vec<LayerCurve> = curves
        .iter()
        .zip(floors)
        .map(|(c, &f)| LayerCurve {
            misses: c.misses[f.min(c.misses.len() - 1)..].to_vec(),
            ..c.clone()
        })
        .collect();
    water_fill(&above, budget_bytes.saturating_sub(floor_bytes))
        .into_iter()
        .zip(floors)
        .map(|(k, &f)| k + f)
        .collect()
}

/// Slots per layer for a total budget (see the module doc).
pub fn water_fill(curves: &[LayerCurve], budget_bytes: u64) -> Vec<usize> {
    let mut slots = vec![0usize; curves.len()];
    let mut left = budget_bytes;
    // Hull phase: segments of all layers by decreasing saving per byte;
    // within a layer hull slopes decrease, so this order respects each
    // layer's own order. A layer whose next segment does not fit stops.
    let mut segments: Vec<(f64, usize, usize, usize)> = Vec::new();
    for (l, curve) in curves.iter().enumerate() {
        let hull = upper_hull(curve);
        for w in hull.windows(2) {
            let slope = (curve.saving(w[1]) - curve.saving(w[0]))
                / ((w[1] - w[0]) as f64 * curve.slot_bytes as f64);
            if slope > 0.0 {
                segments.push((slope, l, w[0], w[1]));
            }
        }
    }
    segments.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let mut blocked = vec![false; curves.len()];
    for &(_, l, from, to) in &segments {
        if blocked[l] || slots[l] != from {
            continue;
        }
        let bytes = (to - from) as u64 * curves[l].slot_bytes;
        if bytes <= left {
            slots[l] = to;
            left -= bytes;
        } else {
            blocked[l] = true;
        }
    }
    // Remainder phase: the best feasible jump of any layer, until none saves.
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for (l, curve) in curves.iter().enumerate() {
            let from = slots[l];
            let fit = (left / curve.slot_bytes.max(1)) as usize;
            let base = curve.saving(from);
            for to in from + 1..=(from + fit).min(curve.misses.len() - 1) {
                let rate =
                    (curve.saving(to) - base) / ((to - from) as f64 * curve.slot_bytes as f64);
                if rate > 0.0 && best.is_none_or(|(r, _, _)| rate > r) {
                    best = Some((rate, l, to));
                }
            }
        }
        let Some((_, l, to)) = best else { break };
        left -= (to - slots[l]) as u64 * curves[l].slot_bytes;
        slots[l] = to;
    }
    slots
}

/// Vertices of the upper concave hull of `(k, saving(k))`, from 0 to the
/// last point, collinear points dropped (so slopes strictly decrease).
fn upper_hull(curve: &LayerCurve) -> Vec<usize> {
    let mut hull: Vec<usize> = Vec::new();
    for k in 0..curve.misses.len() {
        while hull.len() >= 2 {
            let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            let cross = (b - a) as f64 * (curve.saving(k) - curve.saving(a))
                - (k - a) as f64 * (curve.saving(b) - curve.saving(a));
            if cross >= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(k);
    }
    hull
}

#[cfg(test)]
mod tests;

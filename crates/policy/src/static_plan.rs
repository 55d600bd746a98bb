//! `plan`: a planner's placement, static (design §6). `knowledge.pinned` is
//! the resident set from the start and for ever: requests for it hit, every
//! other request runs from a transient slot (bypassed); nothing is evicted.
//! Also owns the pinned-set bookkeeping `pinned-lru` and `build` share, and
//! the knapsack that chooses pins by value per byte (the simulator's
//! training residents, the GPU tier's uploads).
//!
//! [`Policy::remove`] takes an object out of the plan for good: its bytes
//! are freed and later requests for it are bypassed (the plan admits
//! nothing; a new plan is a new policy).

use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

/// Membership of `knowledge.pinned` per object, and the bytes of the pinned
/// objects (each counted once; `knowledge.sizes_bytes` must cover them).
pub(super) fn pinned_set(setup: &PolicySetup) -> (Vec<bool>, u64) {
    let mut pinned = vec![false; setup.objects];
    let mut pinned_bytes = 0u64;
    for &o in &setup.knowledge.pinned {
        if !std::mem::replace(&mut pinned[o as usize], true) {
            pinned_bytes = pinned_bytes.saturating_add(setup.knowledge.sizes_bytes[o as usize]);
        }
    }
    (pinned, pinned_bytes)
}

/// The most valuable objects that fit in `budget_bytes`: by value per byte
/// (`rate * miss_seconds / size`), hottest first, skipping what no longer
/// fits. With equal sizes (one MoE layer) this is the exact optimum of the
/// static single-tier placement, the planner's objective restricted to one
/// cache; indices are local to the slice.
pub fn knapsack(
    sizes_bytes: &[u64],
    rate: &[f64],
    miss_seconds: &[f64],
    budget_bytes: u64,
) -> Vec<ObjectIndex> {
    let mut order: Vec<usize> = (0..sizes_bytes.len()).filter(|&o| rate[o] > 0.0).collect();
    let density = |o: usize| rate[o] * miss_seconds[o] / sizes_bytes[o] as f64;
    order.sort_by(|&a, &b| density(b).total_cmp(&density(a)).then(a.cmp(&b)));
    let mut left = budget_bytes;
    let mut chosen = Vec::new();
    for o in order {
        if sizes_bytes[o] <= left {
            left -= sizes_bytes[o];
            chosen.push(o as ObjectIndex);
        }
    }
    chosen
}

pub(crate) struct StaticPlan {
    resident: Vec<bool>,
    /// `knowledge.sizes_bytes`: what a planned object is charged.
    sizes_bytes: Vec<u64>,
    used_bytes: u64,
    capacity_bytes: u64,
}

impl StaticPlan {
    /// Needs `sizes_bytes` and pins that fit (`build` checks).
    pub fn new(setup: &PolicySetup) -> Self {
        let (resident, used_bytes) = pinned_set(setup);
        StaticPlan {
            resident,
            sizes_bytes: setup.knowledge.sizes_bytes.clone(),
            used_bytes,
            capacity_bytes: setup.capacity_bytes,
        }
    }
}

impl Policy for StaticPlan {
    fn access(&mut self, request: &Request, _evicted: &mut Vec<ObjectIndex>) -> Outcome {
        if self.resident[request.object as usize] {
            Outcome::Hit
        } else {
            Outcome::Bypassed
        }
    }

    fn contains(&self, object: ObjectIndex) -> bool {
        self.resident[object as usize]
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Drops the object from the plan (module doc).
    fn remove(&mut self, object: ObjectIndex) {
        if std::mem::take(&mut self.resident[object as usize]) {
            self.used_bytes -= self.sizes_bytes[object as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{misses, replay, setup, unit};
    use super::super::{build, PolicyError, PolicyKind};
    use super::*;
    use Outcome::{Bypassed as B, Hit as H};

    #[test]
    fn the_plan_hits_on_its_residents_only() {
        // Capacity 3 slots, plan {0, 2}: resident before any request.
        // 0 hit, 1 bypass, 2 hit, 3 bypass, 0 hit, 1 bypass again (never
        // admitted, so no second-request hit).
        let mut s = setup(3, 4);
        s.knowledge.sizes_bytes = vec![1; 4];
        s.knowledge.pinned = vec![0, 2];
        let mut plan = StaticPlan::new(&s);
        assert!(plan.contains(0) && plan.contains(2) && plan.used_bytes() == 2);
        let r = replay(&mut plan, &unit(&[0, 1, 2, 3, 0, 1]));
        let outcomes: Vec<_> = r.iter().map(|(o, _)| *o).collect();
        assert_eq!(outcomes, [H, B, H, B, H, B]);
        assert_eq!(misses(&r), 3);
        assert!(r.iter().all(|(_, evicted)| evicted.is_empty()));
    }

    #[test]
    fn byte_weighted_plan_fills_the_capacity_and_build_checks_it() {
        // Sizes 6 5 4, capacity 10, plan {0, 2} (listed twice: charged once):
        // 6 + 4 = 10 bytes used; object 1 (5 B) would fit an empty cache but
        // is not planned: bypassed each time.
        let mut s = setup(10, 3);
        s.knowledge.sizes_bytes = vec![6, 5, 4];
        s.knowledge.pinned = vec![0, 2, 0];
        let mut plan = build(PolicyKind::Plan, &s).unwrap();
        assert_eq!(plan.used_bytes(), 10);
        let r = replay(plan.as_mut(), &[(1, 5), (0, 6), (1, 5)]);
        assert_eq!(r, [(B, vec![]), (H, vec![]), (B, vec![])]);
        // Pins over the capacity (6 + 5 > 10), or no sizes: refused.
        s.knowledge.pinned = vec![0, 1];
        let err = |s: &PolicySetup| build(PolicyKind::Plan, s).err();
        let over = err(&s);
        assert!(matches!(over, Some(PolicyError::Missing { what, .. }) if what.contains("fit")));
        s.knowledge.sizes_bytes.clear();
        assert!(
            matches!(err(&s), Some(PolicyError::Missing { what, .. }) if what.contains("size"))
        );
    }
}

//! Helpers for hand-computed policy tests: replay a short trace and check
//! the invariants every policy owes (capacity never exceeded, admitted
//! objects resident, evicted ones gone); forget residents with
//! [`Policy::remove`] likewise. Also the randomized test of `remove` over
//! every policy.

use super::{Knowledge, ObjectIndex, Outcome, Policy, PolicyParams, PolicySetup, Request, NEVER};

/// A setup with `capacity` bytes over `objects` objects and no knowledge.
pub(crate) fn setup(capacity: u64, objects: usize) -> PolicySetup {
    PolicySetup {
        capacity_bytes: capacity,
        objects,
        knowledge: Knowledge::default(),
        params: PolicyParams::default(),
    }
}

/// A setup over objects of `sizes` that knows what every policy may be
/// given but pins: miss costs of 1 to `miss_classes` seconds by object
/// (`1 + o % miss_classes`), hits of 0.1 s, a prior falling with the
/// object's number, and counts halved every 1,000 ticks.
pub(crate) fn knowing_setup(capacity: u64, sizes: &[u64], miss_classes: usize) -> PolicySetup {
    let n = sizes.len();
    let mut s = setup(capacity, n);
    s.params.halve_every_ticks = 1_000;
    let k = &mut s.knowledge;
    k.sizes_bytes = sizes.to_vec();
    k.miss_seconds = (0..n).map(|o| 1.0 + (o % miss_classes) as f64).collect();
    k.hit_seconds = vec![0.1; n];
    k.prior_rate = (0..n).map(|o| 0.01 / (o + 1) as f64).collect();
    s
}

/// Unit-size requests for the given objects.
pub(crate) fn unit(objects: &[ObjectIndex]) -> Vec<(ObjectIndex, u64)> {
    objects.iter().map(|&o| (o, 1)).collect()
}

/// Replays `(object, size)` requests; returns each outcome with the objects
/// it evicted. `next_access` is filled by a backward scan.
pub(crate) fn replay(
    policy: &mut dyn Policy,
    trace: &[(ObjectIndex, u64)],
) -> Vec<(Outcome, Vec<ObjectIndex>)> {
    let mut next = vec![NEVER; trace.len()];
    let mut seen = std::collections::HashMap::new();
    for (i, &(o, _)) in trace.iter().enumerate().rev() {
        if let Some(&j) = seen.get(&o) {
            next[i] = j;
        }
        seen.insert(o, i as u64);
    }
    trace
        .iter()
        .enumerate()
        .map(|(i, &(object, size_bytes))| {
            let mut evicted = Vec::new();
            let outcome = policy.access(
                &Request {
                    object,
                    size_bytes,
                    time: i as u64,
                    next_access: next[i],
                },
                &mut evicted,
            );
            match outcome {
                Outcome::Hit | Outcome::Admitted => assert!(policy.contains(object)),
                Outcome::Bypassed => assert!(!policy.contains(object)),
            }
            for &v in &evicted {
                assert!(
                    v == object || !policy.contains(v),
                    "evicted {v} still resident"
                );
            }
            assert!(policy.used_bytes() <= policy.capacity_bytes());
            (outcome, evicted)
        })
        .collect()
}

/// Misses in a replay.
pub(crate) fn misses(replay: &[(Outcome, Vec<ObjectIndex>)]) -> usize {
    replay.iter().filter(|(o, _)| *o != Outcome::Hit).count()
}

/// Removes `object` and checks what every policy owes: it is no longer
/// resident, the capacity holds, and a non-resident's removal frees
/// nothing. Returns the bytes freed.
pub(crate) fn remove(policy: &mut dyn Policy, object: ObjectIndex) -> u64 {
    let was_resident = policy.contains(object);
    let before = policy.used_bytes();
    policy.remove(object);
    let after = policy.used_bytes();
    assert!(!policy.contains(object), "removed {object} still resident");
    assert!(after <= before, "removing {object} added bytes");
    assert!(
        was_resident || after == before,
        "removing non-resident {object} freed bytes"
    );
    assert!(after <= policy.capacity_bytes());
    before - after
}

#[cfg(test)]
mod tests;

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

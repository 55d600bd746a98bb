//! Tests of `testing`.

use super::super::{build, PolicyKind};
use super::*;

const OBJECTS: usize = 200;
const REQUESTS: usize = 20_000;

/// A 64-bit LCG (Knuth's MMIX constants), high bits out.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// What every policy may be given: sizes, miss and hit costs, a prior,
/// and pins (every seventh object while they fit half the capacity).
fn full_setup(capacity: u64, sizes: &[u64]) -> PolicySetup {
    let mut s = knowing_setup(capacity, sizes, 4);
    let k = &mut s.knowledge;
    let mut pinned_bytes = 0;
    for o in (0..sizes.len()).step_by(7) {
        if pinned_bytes + sizes[o] <= capacity / 2 {
            pinned_bytes += sizes[o];
            k.pinned.push(o as ObjectIndex);
        }
    }
    s
}

/// Checks the policy against the shadow: bytes always, every object's
/// residency when `all`.
fn check(policy: &dyn Policy, resident: &[bool], bytes: u64, all: bool, what: &str) {
    assert_eq!(policy.used_bytes(), bytes, "{what}: used bytes");
    assert!(policy.used_bytes() <= policy.capacity_bytes(), "{what}");
    if all {
        for (o, &r) in resident.iter().enumerate() {
            assert_eq!(policy.contains(o as ObjectIndex), r, "{what}: object {o}");
        }
    }
}

#[test]
fn random_removes_keep_every_policy_consistent() {
    let mut rng = Lcg(0x2545_F491_4F6C_DD1D);
    let sizes: Vec<u64> = (0..OBJECTS).map(|_| 1 + rng.below(30)).collect();
    // Skewed: the product of two uniforms favours low indices.
    let n = OBJECTS as u64;
    let trace: Vec<ObjectIndex> = (0..REQUESTS)
        .map(|_| (rng.below(n) * rng.below(n) / n) as ObjectIndex)
        .collect();
    let mut next = vec![NEVER; REQUESTS];
    let mut seen = vec![NEVER; OBJECTS];
    for (i, &o) in trace.iter().enumerate().rev() {
        next[i] = seen[o as usize];
        seen[o as usize] = i as u64;
    }
    for capacity in [0, 30, 300, 1_500] {
        let s = full_setup(capacity, &sizes);
        for kind in PolicyKind::ALL {
            let what = format!("{kind}@{capacity}");
            let mut policy = build(kind, &s).unwrap();
            let mut rng = Lcg(capacity ^ 0x9E37_79B9_7F4A_7C15);
            // The shadow starts with the pins of the policies that
            // charge them from the start.
            let mut resident = vec![false; OBJECTS];
            if matches!(kind, PolicyKind::PinnedLru | PolicyKind::Plan) {
                for &o in &s.knowledge.pinned {
                    resident[o as usize] = true;
                }
            }
            let mut bytes: u64 = (0..OBJECTS)
                .filter(|&o| resident[o])
                .map(|o| sizes[o])
                .sum();
            check(policy.as_ref(), &resident, bytes, true, &what);
            let (mut hits, mut removed_residents) = (0, 0);
            let mut evicted = Vec::new();
            for (i, &o) in trace.iter().enumerate() {
                let request = Request {
                    object: o,
                    size_bytes: sizes[o as usize],
                    time: i as u64,
                    next_access: next[i],
                };
                evicted.clear();
                let outcome = policy.access(&request, &mut evicted);
                let was_resident = resident[o as usize];
                for &v in &evicted {
                    assert!(resident[v as usize], "{what}: evicted non-resident {v}");
                    resident[v as usize] = false;
                    bytes -= sizes[v as usize];
                }
                match outcome {
                    Outcome::Hit => {
                        assert!(was_resident, "{what}: hit on non-resident {o}");
                        hits += 1;
                    }
                    Outcome::Admitted => {
                        assert!(!was_resident, "{what}: admitted resident {o}");
                        resident[o as usize] = true;
                        bytes += sizes[o as usize];
                    }
                    Outcome::Bypassed => {
                        assert!(!was_resident, "{what}: bypassed resident {o}");
                        assert!(evicted.is_empty(), "{what}: a bypass evicted");
                    }
                }
                assert_eq!(policy.contains(o), resident[o as usize], "{what}: {o}");
                check(policy.as_ref(), &resident, bytes, i % 64 == 0, &what);
                // About one request in four is followed by a removal:
                // of a resident (the next one from a random object on)
                // or, one time in four, of any object (maybe a no-op).
                if rng.below(4) != 0 {
                    continue;
                }
                let mut x = rng.below(n) as usize;
                if rng.below(4) != 0 {
                    if let Some(r) = (0..OBJECTS)
                        .map(|d| (x + d) % OBJECTS)
                        .find(|&r| resident[r])
                    {
                        x = r;
                    }
                }
                let freed = remove(policy.as_mut(), x as ObjectIndex);
                if std::mem::take(&mut resident[x]) {
                    assert_eq!(freed, sizes[x], "{what}: removing {x}");
                    bytes -= sizes[x];
                    removed_residents += 1;
                } else {
                    assert_eq!(freed, 0, "{what}: removing non-resident {x}");
                }
                check(policy.as_ref(), &resident, bytes, i % 64 == 1, &what);
            }
            check(policy.as_ref(), &resident, bytes, true, &what);
            // Every cache that holds a few objects was exercised. (The
            // plan's pins all go early, and s3fifo admits nothing below
            // ten objects' worth.)
            if capacity >= 300 && kind != PolicyKind::Plan {
                assert!(
                    hits > 100 && removed_residents > 1_000,
                    "{what}: {hits} {removed_residents}"
                );
            }
        }
    }
}

//! LRU and FIFO on libCacheSim's cloudPhysicsIO trace must reproduce the
//! exact counts of libCacheSim's `cachesim` (commit aa0fc40), as listed in
//! `../shared/data/cache-oracle/SOURCES.md`: an independent reference;
//! LRU also in parts side by side (`sim::lru_parts`).

use residency_policy::{build, PolicyKind, PolicySetup};
use residency_sim::lru_parts::replay_lru;
use residency_sim::oracle::read_oracle_general;
use residency_sim::replay::{replay, FeltCosts};
use residency_sim::stack::{lru_misses_at, stack_distances};
use std::path::PathBuf;

fn trace() -> Option<PathBuf> {
    residency_testkit::shared_data("cache-oracle/cloudPhysicsIO.oracleGeneral.bin")
}

const MIB: u64 = 1 << 20;

/// (capacity, LRU misses, LRU miss bytes, FIFO misses, FIFO miss bytes)
/// from SOURCES.md.
const EXPECTED: [(u64, u64, u64, u64, u64); 8] = [
    (128 * MIB, 93374, 4214303232, 93403, 4213112832),
    (256 * MIB, 89783, 4061242368, 89386, 4052646400),
    (512 * MIB, 81722, 3660569600, 84025, 3807412736),
    (1024 * MIB, 71704, 3061662720, 72140, 3077547520),
    (2048 * MIB, 48974, 2029769728, 48974, 2029769728),
    (4096 * MIB, 48974, 2029769728, 48974, 2029769728),
    (8192 * MIB, 48974, 2029769728, 48974, 2029769728),
    (16384 * MIB, 48974, 2029769728, 48974, 2029769728),
];

#[test]
fn lru_and_fifo_match_libcachesim_exactly() {
    let Some(path) = trace() else { return };
    let stream = read_oracle_general(&path).unwrap();
    assert_eq!(stream.requests.len(), 113_872);
    assert_eq!(stream.objects(), 48_974);
    let zero = vec![0.0; stream.objects()];
    for (capacity, lru_misses, lru_bytes, fifo_misses, fifo_bytes) in EXPECTED {
        for (kind, misses, bytes) in [
            (PolicyKind::Lru, lru_misses, lru_bytes),
            (PolicyKind::Fifo, fifo_misses, fifo_bytes),
        ] {
            let setup = PolicySetup {
                capacity_bytes: capacity,
                objects: stream.objects(),
                knowledge: Default::default(),
                params: Default::default(),
            };
            let mut policy = build(kind, &setup).unwrap();
            let stats = replay(policy.as_mut(), &stream, &[], FeltCosts::in_full(&zero));
            assert_eq!(stats.requests, 113_872);
            assert_eq!(
                (stats.misses, stats.miss_bytes),
                (misses, bytes),
                "{kind} at {capacity}"
            );
            if kind == PolicyKind::Lru {
                // The trace in 8 parts side by side, as a long one is.
                let (parts, _) =
                    replay_lru(&stream, capacity, FeltCosts::in_full(&zero), 8).unwrap();
                assert_eq!(
                    (parts.misses, parts.miss_bytes),
                    (misses, bytes),
                    "LRU in parts at {capacity}"
                );
            }
        }
    }
}

#[test]
fn one_stack_pass_gives_the_same_lru_misses() {
    let Some(path) = trace() else { return };
    let stream = read_oracle_general(&path).unwrap();
    let capacities: Vec<u64> = EXPECTED.iter().map(|e| e.0).collect();
    let misses = lru_misses_at(&stack_distances(&stream), &capacities);
    let expected: Vec<u64> = EXPECTED.iter().map(|e| e.1).collect();
    assert_eq!(misses, expected);
}

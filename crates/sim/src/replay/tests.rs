//! Tests of `replay`: the online per-layer replay.

use super::*;
use crate::allocation::Allocation;
use crate::arms::{Arm, SimOptions, Simulator};
use residency_core::rng::Rng;
use residency_policy::online::{LayerShape, OnlineParams};
use residency_policy::{build, PolicyKind, PolicySetup};

/// Two layers of 8 experts (2 bytes in layer 0, 1 byte in layer 1); each
/// token asks the hot layer for 3 experts cycling over 6 and the other for
/// 3 consecutive ones of 4 from a random start (top-3 in both layers, as
/// MoE tokens route); the hot layer switches halfway.
fn drift(tokens: u64, seed: u64) -> Stream {
    let mut rng = Rng(seed);
    let mut requests = Vec::new();
    for t in 0..tokens {
        let hot = usize::from(t >= tokens / 2);
        let cold = (rng.next_u64() % 4) as usize;
        for l in 0..2 {
            if l == hot {
                requests.extend((0..3).map(|i| (8 * l + (3 * t as usize + i) % 6) as u32));
            } else {
                requests.extend((0..3).map(|i| (8 * l + (cold + i) % 4) as u32));
            }
        }
    }
    let sizes = [vec![2u64; 8], vec![1u64; 8]].concat();
    Stream::new(sizes, vec![0, 8, 16], requests, tokens)
}

fn online(every_tokens: u64, hysteresis: f64) -> OnlineParams {
    OnlineParams {
        window_accesses: 64,
        every_tokens,
        horizon_tokens: 512.0,
        hysteresis,
        bytes_per_token: 4,
    }
}

#[test]
fn online_budgets_never_exceed_the_budget_while_they_move() {
    // Budget 16 bytes: uniform starts at 4 slots of layer 0 (8 bytes) and
    // 8 of layer 1. The hot layer 0 needs 6 slots (12 bytes), the other 2
    // slots: (6, 2) pays; after the switch layer 1 needs 6 and layer 0 2
    // (4 bytes). After every request and every single resize the
    // capacities sum to at most 16, and every cache holds at most its
    // capacity.
    let stream = drift(200, 1);
    for kind in PolicyKind::ALL.into_iter().filter(|k| k.resizes()) {
        let shapes = (0..2)
            .map(|l| LayerShape {
                slot_bytes: 2 - l as u64,
                experts: 8,
                miss_seconds: 1.0,
                leased_at_once: 0,
            })
            .collect();
        let mut allocator = OnlineAllocator::new(online(4, 2.0), shapes, 16).unwrap();
        let mut policies: Vec<_> = allocator
            .capacities_bytes()
            .iter()
            .map(|&c| {
                build(
                    kind,
                    &PolicySetup {
                        capacity_bytes: c,
                        objects: 8,
                        knowledge: Default::default(),
                        params: Default::default(),
                    },
                )
                .unwrap()
            })
            .collect();
        let mut checks = 0;
        let run = replay_online(
            &mut policies,
            &stream,
            &[Vec::new(), Vec::new()],
            FeltCosts::in_full(&[1.0; 16]),
            &mut allocator,
            &mut |ps| {
                checks += 1;
                let capacity: u64 = ps.iter().map(|p| p.capacity_bytes()).sum();
                let used: u64 = ps.iter().map(|p| p.used_bytes()).sum();
                assert!(capacity <= 16 && used <= 16, "{kind}: {capacity} {used}");
                assert!(ps.iter().all(|p| p.used_bytes() <= p.capacity_bytes()));
            },
        );
        assert!(
            run.moves >= 2,
            "{kind}: the drift moves budgets twice at least"
        );
        assert!(
            checks > stream.requests.len(),
            "{kind}: every resize was seen too"
        );
        assert_eq!(run.stats.requests, stream.requests.len() as u64);
    }
}

#[test]
fn online_runs_are_deterministic_and_without_moves_equal_uniform() {
    let stream = drift(300, 9);
    let sim = |hysteresis: f64| {
        Simulator::new(
            stream.clone(),
            stream.counts(),
            vec![1.0; 16],
            SimOptions {
                online: online(4, hysteresis),
                ..SimOptions::default()
            },
        )
    };
    let arm = |allocation| Arm {
        policy: PolicyKind::Lru,
        allocation,
        budget_bytes: 16,
    };
    // Same inputs, fresh simulators: the same misses and final capacities.
    let a = sim(2.0).run(arm(Allocation::Online), &[1.0, 1.0]).unwrap();
    let b = sim(2.0).run(arm(Allocation::Online), &[1.0, 1.0]).unwrap();
    assert_eq!(a, b);
    assert_ne!(a.capacities_bytes, vec![8, 8], "the drift moved budgets");
    // A hysteresis no gain can beat keeps the uniform split: the online
    // replay then counts exactly what the per-layer uniform replays count
    // (an independent code path: one memoised replay per layer).
    let frozen = sim(f64::MAX)
        .run(arm(Allocation::Online), &[1.0, 1.0])
        .unwrap();
    let uniform = sim(2.0).run(arm(Allocation::Uniform), &[1.0, 1.0]).unwrap();
    assert_eq!(frozen.stats, uniform.stats);
    assert_eq!(frozen.capacities_bytes, uniform.capacities_bytes);
}

#[test]
fn online_refuses_a_policy_that_cannot_resize() {
    let stream = drift(20, 1);
    let mut sim = Simulator::new(
        stream.clone(),
        stream.counts(),
        vec![1.0; 16],
        SimOptions::default(),
    );
    let arm = Arm {
        policy: PolicyKind::Arc,
        allocation: Allocation::Online,
        budget_bytes: 12,
    };
    let e = sim.run(arm, &[1.0, 1.0]).unwrap_err().to_string();
    assert!(
        e.contains("`arc` cannot change its capacity") && !e.contains('\n'),
        "{e}"
    );
}

#[test]
fn a_token_s_resident_experts_are_served_before_its_misses() {
    // One layer of 3 one-byte experts, LRU with 2 bytes; token 1 asks 0 1,
    // token 2 asks 2 0. One at a time, 2 would evict 0 (the least recent)
    // and 0 would miss: 4 misses. A store leases the resident 0 first (1
    // becomes the least recent), then 2 evicts 1: 3 misses, one hit.
    let stream = Stream::new(vec![1; 3], vec![0, 3], vec![0, 1, 2, 0], 2);
    let setup = PolicySetup {
        capacity_bytes: 2,
        objects: 3,
        knowledge: Default::default(),
        params: Default::default(),
    };
    let mut lru = build(PolicyKind::Lru, &setup).unwrap();
    let stats = replay(&mut *lru, &stream, &[], FeltCosts::in_full(&[1.0; 3]));
    assert_eq!((stats.misses, stats.hits_admitted), (3, 1));
    assert!(lru.contains(0) && lru.contains(2) && !lru.contains(1));
}

#[test]
fn a_token_s_wait_in_a_layer_is_its_reads_beyond_the_compute_before_each() {
    // One layer of 4 one-byte experts, LRU with 2 bytes; token 1 asks 0 1
    // (two misses), token 2 asks 0 2 (0 hits, 2 misses). A miss reads for
    // 3 s, an expert computes in 1 s. By hand, the compute thread's
    // timeline (it computes the hits, then each miss once it has landed):
    // - one read at a time: token 1's misses land at 3 and 6; it waits 3,
    //   computes to 4, waits 2 more: 5. Token 2 computes 0 (to 1), its miss
    //   lands at 3: waits 2. In all 7.
    // - two at a time: token 1's both land at 6: waits 6; token 2: 2. 8.
    // - without compute costs every read is felt in full: 3 misses x 3 = 9.
    let stream = Stream::new(vec![1; 4], vec![0, 4], vec![0, 1, 0, 2], 2);
    let setup = PolicySetup {
        capacity_bytes: 2,
        objects: 4,
        knowledge: Default::default(),
        params: Default::default(),
    };
    // The online replay (one layer, so nothing moves) counts the same way.
    let felt = |hit_compute_seconds: &[f64], reads_at_once: u32| {
        let costs = FeltCosts {
            miss_seconds: &[3.0; 4],
            hit_compute_seconds,
            reads_at_once,
        };
        let mut lru = build(PolicyKind::Lru, &setup).unwrap();
        let stats = replay(&mut *lru, &stream, &[], costs);
        assert_eq!((stats.misses, stats.hits_admitted), (3, 1));
        let shape = LayerShape {
            slot_bytes: 1,
            experts: 4,
            miss_seconds: 3.0,
            leased_at_once: 2,
        };
        let mut allocator = OnlineAllocator::new(online(1, 2.0), vec![shape], 2).unwrap();
        let mut policies = vec![build(PolicyKind::Lru, &setup).unwrap()];
        let online = replay_online(
            &mut policies,
            &stream,
            &[Vec::new()],
            costs,
            &mut allocator,
            &mut |_| {},
        );
        assert_eq!(online.stats.felt_wait_seconds(), stats.felt_wait_seconds());
        stats.felt_wait_seconds()
    };
    assert_eq!(felt(&[1.0; 4], 1), 7.0);
    assert_eq!(felt(&[1.0; 4], 2), 8.0);
    assert_eq!(felt(&[], 1), 9.0);
}

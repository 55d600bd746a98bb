//! Tests of `arms`.

use super::*;

fn one_layer(requests: &[u32], objects: usize) -> Stream {
    Stream::new(
        vec![1; objects],
        vec![0, objects as u32],
        requests.to_vec(),
        requests.len() as u64,
    )
}

#[test]
fn seeded_arms_start_from_the_training_knapsack() {
    // Training counts [5, 3, 0, 0], budget 2: seeds {0, 1} (0 first, so
    // 1 is the most recent after seeding). LRU on 0 1 2 0: 0 hits a seed
    // (order 0 1), 1 hits a seed (1 0), 2 misses and evicts 0, 0 misses.
    let options = SimOptions {
        start: Start::Seeded,
        ..SimOptions::default()
    };
    let mut sim = Simulator::new(
        one_layer(&[0, 1, 2, 0], 4),
        vec![5, 3, 0, 0],
        vec![1.0; 4],
        options,
    );
    let arm = Arm {
        policy: PolicyKind::Lru,
        allocation: Allocation::Global,
        budget_bytes: 2,
    };
    let run = sim.run(arm, &[1.0]).unwrap();
    assert_eq!(run.stats.hits_seeded, 2);
    assert_eq!(run.stats.hits_admitted, 0);
    assert_eq!(run.stats.misses, 2);
    assert_eq!(run.stats.seeded_bytes, 2);
    assert_eq!(run.felt_wait_seconds, 2.0);
}

#[test]
fn remembered_replays_equal_fresh_ones_and_capacities_fit() {
    // Two layers (objects 0..3 of 2 bytes, 3..6 of 1 byte).
    let requests = [0u32, 3, 1, 4, 0, 5, 2, 3, 0, 4, 1, 3, 2, 5, 0, 3];
    let stream = Stream::new(vec![2, 2, 2, 1, 1, 1], vec![0, 3, 6], requests.to_vec(), 8);
    let counts = stream.counts();
    let fresh = || {
        Simulator::new(
            stream.clone(),
            counts.clone(),
            vec![1.0; 6],
            SimOptions::default(),
        )
    };
    let mut sim = fresh();
    for allocation in [Allocation::Uniform, Allocation::Dynamic, Allocation::Global] {
        for policy in [PolicyKind::Lru, PolicyKind::Frequency, PolicyKind::Cost] {
            for scale in [[1.0, 1.0], [0.5, 1.0], [1.0, 1.5]] {
                let arm = Arm {
                    policy,
                    allocation,
                    budget_bytes: 5,
                };
                let again = sim.run(arm, &scale).unwrap();
                assert_eq!(again, fresh().run(arm, &scale).unwrap());
                assert!(again.capacities_bytes.iter().sum::<u64>() <= 5);
            }
        }
    }
}

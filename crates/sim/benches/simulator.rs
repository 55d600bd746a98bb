//! Simulator speed (design §6) on a synthetic 1,000,000-event
//! trace (60 layers x 256 experts, top-8, 4 categories):
//! - `lru_replay`: raw byte-weighted LRU replay of all events, one cache;
//! - `stack_curves`: the LRU curves of all 60 layers from one pass each;
//! - `full_gate`: the held-out gate with uniform and dynamic allocation,
//!   LRU and frequency, at three budgets, with the 2 x 60 sensitivity reruns.
//!
//! `cargo bench -p residency-sim --bench simulator`; numbers in
//! docs/simulator.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use residency_policy::{PolicyKind, PolicySetup};
use residency_sim::allocation::Allocation;
use residency_sim::arms::SimOptions;
use residency_sim::gate::{gate, held_out_splits, GateConfig};
use residency_sim::replay::{replay_kind, FeltCosts};
use residency_sim::stack::lru_misses_per_slot;
use residency_sim::stream::Stream;
use residency_sim::synthetic::{zipf_trace, SyntheticShape};
use std::time::Duration;

const EXPERT_BYTES: u64 = 4 << 20;

fn shape() -> SyntheticShape {
    // 60 x 8 x 521 x 4 = 1,000,320 events.
    SyntheticShape {
        layers: 60,
        experts: 256,
        top_k: 8,
        tokens_per_category: 521,
        categories: 4,
        zipf_s: 0.9,
        seed: 42,
    }
}

fn budgets() -> Vec<u64> {
    let all = 60 * 256 * EXPERT_BYTES;
    vec![all / 10, all / 4, all / 2]
}

fn bench(c: &mut Criterion) {
    let shape = shape();
    let trace = zipf_trace(&shape);
    let sizes = vec![EXPERT_BYTES; shape.layers];
    let stream = Stream::from_tokens(&trace.tokens, &trace.experts, &sizes);
    let events = stream.requests.len() as u64;
    let mut group = c.benchmark_group("simulator_1m");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(events));
    group.bench_function("lru_replay", |b| {
        let zero = vec![0.0; stream.objects()];
        b.iter(|| {
            let setup = PolicySetup {
                capacity_bytes: budgets()[1],
                objects: stream.objects(),
                knowledge: Default::default(),
                params: Default::default(),
            };
            replay_kind(
                PolicyKind::Lru,
                &setup,
                &stream,
                &[],
                FeltCosts::in_full(&zero),
            )
            .unwrap()
            .misses
        })
    });
    group.bench_function("stack_curves", |b| {
        b.iter(|| {
            stream
                .split_layers()
                .iter()
                .map(lru_misses_per_slot)
                .count()
        })
    });
    let miss_seconds = vec![1e-3; stream.objects()];
    let config = GateConfig {
        budgets_bytes: budgets(),
        candidates: vec![
            (PolicyKind::Lru, Allocation::Dynamic),
            (PolicyKind::Frequency, Allocation::Uniform),
            (PolicyKind::Frequency, Allocation::Dynamic),
        ],
        sensitivity: true,
        options: SimOptions::default(),
    };
    group.throughput(Throughput::Elements(events));
    group.bench_function("full_gate", |b| {
        b.iter(|| {
            let splits = held_out_splits(&trace, &sizes);
            gate(splits, &miss_seconds, &config).unwrap().results.len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! `kv_replay`: the Mooncake conversation trace through the KV prefix
//! index at 10,000 blocks, per policy, per block reference (skipped
//! without `../shared/data`).
//!
//! `cargo bench -p residency-lab --bench kv_replay`; numbers in docs/kv.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use residency_kv::EvictionPolicy;
use residency_lab::kv::replay::{replay, KvCostModel};
use residency_lab::kv::trace::read_mooncake;
use std::path::Path;
use std::time::Duration;

fn replay_bench(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/kv/mooncake-fast25/conversation_trace.jsonl");
    let Ok(trace) = read_mooncake(&path, 512) else {
        eprintln!("kv_replay skipped: {} is absent", path.display());
        return;
    };
    let cost = KvCostModel {
        prefill_tokens_per_second: 10_000.0,
        kv_bytes_per_token: 70_272,
    };
    let mut group = c.benchmark_group("kv_replay");
    group.throughput(Throughput::Elements(trace.block_references() as u64));
    group.sample_size(10);
    for policy in EvictionPolicy::ALL {
        group.bench_function(
            format!("conversation, {}, 10000 blocks", policy.name()),
            |b| b.iter(|| replay(&trace, policy, 10_000, &cost)),
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = replay_bench
}
criterion_main!(benches);

//! The KV prefix cache's speed and size:
//! - `kv_keys`: chained block keys of a 4096-token prompt (64-token
//!   blocks), in tokens per second;
//! - `kv_lookup`: the longest-prefix lookup of a 32-block prompt whose
//!   blocks are all in RAM, leases taken and released, per block;
//! - `kv_insert`: 32 new blocks inserted as a chain into a full RAM tier
//!   (each insert evicts one), per policy, per block;
//! - metadata: bytes of heap per block beyond its KV, counted by a global
//!   allocator that tallies every allocation, full and in steady state
//!   (with `utility`'s ghosts), printed once.
//!
//! `cargo bench -p residency-kv --bench kv`; numbers in docs/kv.md. The
//! trace replay's speed is `residency-lab`'s `kv_replay` bench.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use residency_kv::{
    block_keys, BlockKey, BlockLease, BlockStore, EvictionPolicy, KvIdentity, KvStoreConfig,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

/// The system allocator, keeping a tally of live heap bytes.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BLOCK_TOKENS: u32 = 64;
const CHAIN_BLOCKS: usize = 32;
/// KV bytes per token in the benches: small, so they time the metadata
/// work, not memcpy.
const BYTES_PER_TOKEN: u64 = 1;

fn store(policy: EvictionPolicy, ram_blocks: usize) -> BlockStore {
    BlockStore::open(KvStoreConfig {
        block_tokens: BLOCK_TOKENS,
        kv_bytes_per_token: BYTES_PER_TOKEN,
        ram_blocks,
        disk: None,
        policy,
        prefill_tokens_per_second: 10_000.0,
    })
    .unwrap()
    .0
}

/// The keys of prompt `n`: `CHAIN_BLOCKS` blocks after a shared first one.
fn chain(n: u64) -> Vec<BlockKey> {
    let mut tokens = vec![0u32; BLOCK_TOKENS as usize];
    tokens.extend((0..(CHAIN_BLOCKS as u32 - 1) * BLOCK_TOKENS).map(|t| t ^ (n as u32) << 12));
    block_keys(
        &KvIdentity::default().digest(),
        b"",
        &tokens,
        BLOCK_TOKENS as usize,
    )
}

/// Inserts `keys` as a chain (each under the previous) and releases it.
fn insert_chain(store: &BlockStore, keys: &[BlockKey], payload: &[u8]) {
    let mut parent: Option<BlockLease> = None;
    for key in keys {
        let lease = store
            .insert(parent.as_ref(), *key, BLOCK_TOKENS, payload)
            .unwrap();
        parent = Some(lease);
    }
}

fn payload() -> Vec<u8> {
    vec![7u8; (u64::from(BLOCK_TOKENS) * BYTES_PER_TOKEN) as usize]
}

fn keys_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv_keys");
    let tokens: Vec<u32> = (0..4096).collect();
    let identity = KvIdentity::default().digest();
    group.throughput(Throughput::Elements(tokens.len() as u64));
    group.bench_function("4096 tokens, 64 per block", |b| {
        b.iter(|| block_keys(&identity, b"salt", black_box(&tokens), 64))
    });
    group.finish();
}

fn lookup_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv_lookup");
    let store = store(EvictionPolicy::LruLeaf, 64 * CHAIN_BLOCKS);
    let payload = payload();
    let chains: Vec<Vec<BlockKey>> = (0..32).map(chain).collect();
    for keys in &chains {
        insert_chain(&store, keys, &payload);
    }
    group.throughput(Throughput::Elements(CHAIN_BLOCKS as u64));
    let mut n = 0;
    group.bench_function("32 cached blocks", |b| {
        b.iter(|| {
            n = (n + 1) % chains.len();
            let prefix = store.lookup(&chains[n]);
            assert_eq!(prefix.len(), CHAIN_BLOCKS);
            prefix
        })
    });
    group.finish();
}

fn insert_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv_insert");
    group.throughput(Throughput::Elements(CHAIN_BLOCKS as u64));
    let payload = payload();
    for policy in EvictionPolicy::ALL {
        let store = store(policy, 4096);
        let chains: Vec<Vec<BlockKey>> = (0..1024).map(chain).collect();
        let mut n = 0;
        group.bench_function(format!("{} into a full tier", policy.name()), |b| {
            b.iter(|| {
                n = (n + 1) % chains.len();
                insert_chain(&store, &chains[n], &payload);
            })
        });
    }
    group.finish();
}

/// Heap bytes per block beyond the KV itself: a tier of 100,000 blocks
/// filled, then pushed through another 100,000 inserts (steady state:
/// `utility`'s ghosts are full too). Each block's KV costs its payload and
/// the 16-byte counts of its `Arc<[u8]>`; the rest is metadata.
fn metadata_bytes_per_block() {
    const BLOCKS: usize = 100_000;
    let payload = payload();
    let per_block_kv = payload.len() as isize + 16;
    let chains: Vec<Vec<BlockKey>> = (0..2 * BLOCKS / CHAIN_BLOCKS)
        .map(|n| chain(n as u64 + 10_000))
        .collect();
    for policy in EvictionPolicy::ALL {
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        let store = store(policy, BLOCKS);
        let (full, steady) = chains.split_at(chains.len() / 2);
        for keys in full {
            insert_chain(&store, keys, &payload);
        }
        let blocks = store.blocks().0 as isize;
        let filled = LIVE_BYTES.load(Ordering::Relaxed) - before - blocks * per_block_kv;
        for keys in steady {
            insert_chain(&store, keys, &payload);
        }
        let steady_bytes = LIVE_BYTES.load(Ordering::Relaxed) - before - blocks * per_block_kv;
        println!(
            "kv metadata, {}: {:.0} bytes per block filled, {:.0} in steady state ({blocks} blocks)",
            policy.name(),
            filled as f64 / blocks as f64,
            steady_bytes as f64 / blocks as f64,
        );
        drop(store);
    }
}

fn metadata(_: &mut Criterion) {
    metadata_bytes_per_block();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = metadata, keys_bench, lookup_bench, insert_bench
}
criterion_main!(benches);

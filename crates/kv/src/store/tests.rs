//! Tests of `store`.

use super::*;
use crate::key::{block_keys, KvIdentity};

const BLOCK_TOKENS: u32 = 4;
const BYTES_PER_TOKEN: u64 = 8;

fn config(ram_blocks: usize, disk: Option<(&std::path::Path, usize)>) -> KvStoreConfig {
    with_policy(EvictionPolicy::LruLeaf, ram_blocks, disk)
}

fn with_policy(
    policy: EvictionPolicy,
    ram_blocks: usize,
    disk: Option<(&std::path::Path, usize)>,
) -> KvStoreConfig {
    KvStoreConfig {
        block_tokens: BLOCK_TOKENS,
        kv_bytes_per_token: BYTES_PER_TOKEN,
        ram_blocks,
        disk: disk.map(|(dir, blocks)| DiskConfig {
            dir: dir.to_path_buf(),
            blocks,
        }),
        policy,
        prefill_tokens_per_second: 1000.0,
    }
}

fn keys(n: usize) -> Vec<BlockKey> {
    let tokens: Vec<u32> = (0..n as u32 * BLOCK_TOKENS).collect();
    block_keys(
        &KvIdentity::default().digest(),
        b"",
        &tokens,
        BLOCK_TOKENS as usize,
    )
}

/// The KV of block `i` of the chain: a pattern a test can recompute.
fn kv(i: usize) -> Vec<u8> {
    (0..BLOCK_TOKENS as u64 * BYTES_PER_TOKEN)
        .map(|b| (b as usize * 31 + i * 7) as u8)
        .collect()
}

/// Inserts the chain `keys`, each under the previous (leased while its
/// child is inserted), releasing as it goes.
fn insert_chain(store: &BlockStore, keys: &[BlockKey]) {
    let mut parent: Option<BlockLease> = None;
    for (i, key) in keys.iter().enumerate() {
        let lease = store
            .insert(parent.as_ref(), *key, BLOCK_TOKENS, kv(i))
            .unwrap();
        parent = Some(lease);
    }
}

fn served(prefix: &Prefix) -> Vec<Vec<u8>> {
    prefix.blocks().iter().map(|l| l.bytes().to_vec()).collect()
}

#[test]
fn lookup_leases_the_longest_cached_prefix() {
    let (store, report) = BlockStore::open(config(8, None)).unwrap();
    assert!(report.is_none());
    let chain = keys(3);
    insert_chain(&store, &chain);
    let prefix = store.lookup(&chain);
    assert_eq!(served(&prefix), [kv(0), kv(1), kv(2)]);
    assert_eq!(prefix.tokens(), 12);
    // A request that diverges after block 2 shares blocks 0 and 1.
    let mut other = chain[..2].to_vec();
    other.push(BlockKey([9; 16]));
    assert_eq!(store.lookup(&other).len(), 2);
    assert_eq!(store.lookup(&[BlockKey([9; 16])]).len(), 0);
    // Inserting a cached key leases the cached block: no copy.
    let again = store.insert(None, chain[0], BLOCK_TOKENS, kv(0)).unwrap();
    assert!(std::ptr::eq(again.bytes(), prefix.blocks()[0].bytes()));
    let c = store.counters();
    assert_eq!((c.inserted_blocks, c.deduplicated_inserts), (3, 1));
    assert_eq!((c.lookups, c.ram_hit_blocks), (3, 5));
}

#[test]
fn leased_blocks_stay_and_a_full_store_says_so() {
    let (store, _) = BlockStore::open(config(2, None)).unwrap();
    let chain = keys(3);
    let first = store.insert(None, chain[0], BLOCK_TOKENS, kv(0)).unwrap();
    let second = store
        .insert(Some(&first), chain[1], BLOCK_TOKENS, kv(1))
        .unwrap();
    let err = store
        .insert(Some(&second), chain[2], BLOCK_TOKENS, kv(2))
        .unwrap_err();
    assert_eq!(
            err.to_string(),
            "the RAM tier's 2 blocks are all leased or ancestors of leased blocks; release leases (drop Prefix, BlockLease or Sequence values) or give the store more RAM blocks"
        );
    drop(second);
    // Block 1 is free now (a leaf); block 0 is leased.
    let third = store
        .insert(Some(&first), chain[2], BLOCK_TOKENS, kv(2))
        .unwrap();
    assert_eq!(first.bytes(), &kv(0)[..]);
    assert_eq!(store.lookup(&chain[..2]).len(), 1);
    drop(third);
    // Wrong sizes and foreign parents are refused, naming the block.
    let err = store
        .insert(None, chain[1], BLOCK_TOKENS, vec![0; 3])
        .unwrap_err();
    assert!(err.to_string().contains("3 bytes for 4 tokens"), "{err}");
    let (other, _) = BlockStore::open(config(2, None)).unwrap();
    let err = other
        .insert(Some(&first), chain[1], BLOCK_TOKENS, kv(1))
        .unwrap_err();
    assert!(err.to_string().contains("another store"), "{err}");
}

#[test]
fn ram_victims_go_to_disk_and_come_back_verified() {
    // Plain LRU: RAM may evict a parent, so a chain longer than RAM
    // fits across the tiers (the tree policies keep ancestors of
    // leased blocks in RAM).
    let dir = tempfile::tempdir().unwrap();
    let open = |ram| {
        BlockStore::open(with_policy(
            EvictionPolicy::Lru,
            ram,
            Some((dir.path(), 16)),
        ))
        .unwrap()
    };
    let (store, report) = open(3);
    assert_eq!(report.unwrap().blocks, 0);
    let chain = keys(6);
    insert_chain(&store, &chain);
    // RAM holds 3; the 3 evicted went to disk.
    assert_eq!(store.blocks(), (3, 3));
    let c = store.counters();
    assert_eq!((c.ram_evicted_blocks, c.demoted_blocks), (3, 3));
    // Blocks 0..3 come back from disk (evicting 3..6 to disk); block 3
    // would need a fourth leased RAM block: the prefix stops there.
    let prefix = store.lookup(&chain);
    assert_eq!(served(&prefix), (0..3).map(kv).collect::<Vec<_>>());
    drop(prefix);
    assert_eq!(store.counters().disk_hit_blocks, 3);
    assert_eq!(store.blocks(), (3, 6));

    // A restart: the disk blocks are found and served again.
    drop(store);
    let (store, report) = open(3);
    let report = report.unwrap();
    assert_eq!((report.blocks, report.discarded.len()), (6, 0));
    assert_eq!(
        served(&store.lookup(&chain[..3])),
        (0..3).map(kv).collect::<Vec<_>>()
    );

    // A block corrupted after the open is discarded at its read and
    // never served: the prefix stops before it.
    drop(store);
    let (store, _) = open(3);
    let path = dir.path().join(format!("{}.kvb", chain[1]));
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let prefix = store.lookup(&chain);
    assert_eq!(served(&prefix), [kv(0)]);
    let c = store.counters();
    assert_eq!(c.discarded_blocks, 1);
    assert!(c.last_disk_error.unwrap().ends_with("checksum mismatch"));
    assert!(!path.exists());
}

#[test]
fn a_promotion_survives_a_full_disk_tier() {
    // RAM 1, disk 1: A goes to disk when B is inserted. Looking A up
    // evicts B from RAM; B's demotion finds the disk tier full of A,
    // which is being promoted: A stays, B is dropped.
    let dir = tempfile::tempdir().unwrap();
    let config = with_policy(EvictionPolicy::Lru, 1, Some((dir.path(), 1)));
    let (store, _) = BlockStore::open(config).unwrap();
    let chain = keys(2);
    drop(store.insert(None, chain[0], BLOCK_TOKENS, kv(0)).unwrap());
    drop(store.insert(None, chain[1], BLOCK_TOKENS, kv(1)).unwrap());
    assert_eq!(served(&store.lookup(&chain[..1])), [kv(0)]);
    assert_eq!(store.blocks(), (1, 1));
    let on_disk: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(on_disk.len(), 1);
    assert_eq!(store.lookup(&chain[1..]).len(), 0);
}

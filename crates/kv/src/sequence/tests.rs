//! Tests of `sequence`.

use super::*;
use crate::index::EvictionPolicy;
use crate::key::KvIdentity;
use crate::store::KvStoreConfig;

fn store(ram_blocks: usize) -> BlockStore {
    BlockStore::open(KvStoreConfig {
        block_tokens: 4,
        kv_bytes_per_token: 2,
        ram_blocks,
        disk: None,
        policy: EvictionPolicy::LruLeaf,
        prefill_tokens_per_second: 1000.0,
    })
    .unwrap()
    .0
}

/// Two bytes of KV per token, derived from the token and its position.
fn kv(tokens: &[u32], start: usize) -> Vec<u8> {
    tokens
        .iter()
        .enumerate()
        .flat_map(|(i, &t)| [t as u8, (start + i) as u8])
        .collect()
}

fn id() -> IdentityDigest {
    KvIdentity::default().digest()
}

#[test]
fn appended_blocks_are_sealed_shared_and_found_again() {
    let store = store(16);
    let prompt: Vec<u32> = (100..110).collect();
    let mut a = Sequence::begin(&store, &id(), b"t", &prompt);
    assert_eq!(a.cached_tokens(), 0);
    a.append(&prompt, &kv(&prompt, 0)).unwrap();
    // 10 tokens: two sealed blocks of 4, 2 in the tail.
    assert_eq!(a.blocks().len(), 2);
    assert_eq!(a.tail_tokens(), &prompt[8..]);
    assert_eq!(a.tail_kv(), &kv(&prompt[8..], 8)[..]);
    let expected = block_keys(&id(), b"t", &prompt, 4);
    let sealed: Vec<_> = a.blocks().iter().map(BlockLease::key).collect();
    assert_eq!(sealed, expected);
    assert_eq!(a.blocks()[1].bytes(), &kv(&prompt[4..8], 4)[..]);
    // The same prompt again finds both blocks, the same bytes.
    let b = Sequence::begin(&store, &id(), b"t", &prompt);
    assert_eq!(b.cached_tokens(), 8);
    assert!(std::ptr::eq(a.blocks()[0].bytes(), b.blocks()[0].bytes()));
    // Wrong KV length: refused, nothing appended.
    let err = a.append(&[1, 2], &[0; 3]).unwrap_err();
    assert!(err.to_string().contains("give 2 bytes per token"), "{err}");
    assert_eq!(a.cached_tokens(), 10);
}

#[test]
fn forks_share_the_prefix_and_copy_the_tail_on_write() {
    let store = store(16);
    let prompt: Vec<u32> = (0..6).collect();
    let mut a = Sequence::begin(&store, &id(), b"", &prompt);
    a.append(&prompt, &kv(&prompt, 0)).unwrap();
    let mut b = a.fork();
    assert!(a.tail_is_shared() && b.tail_is_shared());
    // The fork writes: its tail is copied, the original's unchanged.
    b.append(&[50], &kv(&[50], 6)).unwrap();
    assert!(!a.tail_is_shared() && !b.tail_is_shared());
    assert_eq!(a.tail_tokens(), [4, 5]);
    assert_eq!(b.tail_tokens(), [4, 5, 50]);
    // Each fills its block differently: different keys, one shared
    // first block.
    a.append(&[7, 8], &kv(&[7, 8], 6)).unwrap();
    b.append(&[9], &kv(&[9], 7)).unwrap();
    assert_eq!((a.blocks().len(), b.blocks().len()), (2, 2));
    assert!(std::ptr::eq(a.blocks()[0].bytes(), b.blocks()[0].bytes()));
    assert_ne!(a.blocks()[1].key(), b.blocks()[1].key());
    assert_eq!(a.blocks()[1].bytes(), &kv(&[4, 5, 7, 8], 4)[..]);
    assert_eq!(b.blocks()[1].bytes(), &kv(&[4, 5, 50, 9], 4)[..]);
}

#[test]
fn a_block_without_room_stays_private_until_there_is() {
    let store = store(2);
    let tokens: Vec<u32> = (0..12).collect();
    let mut a = Sequence::begin(&store, &id(), b"", &tokens);
    a.append(&tokens, &kv(&tokens, 0)).unwrap();
    // Two blocks fill RAM (both leased by `a`); the third stays.
    assert_eq!(a.blocks().len(), 2);
    assert_eq!(a.tail_tokens().len(), 4);
    assert_eq!(a.cached_tokens(), 12);
}

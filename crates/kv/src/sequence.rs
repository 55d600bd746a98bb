//! One request's KV (design §8 "Store"): the longest cached prefix, leased
//! and shared, then a private tail the engine appends to.
//!
//! Full blocks are immutable and shared through the store; the tokens after
//! the last full block are the request's own, still being written. When a
//! request diverges (parallel samples, a branch of an agent), [`fork`]
//! shares both the leased prefix and the tail, and the tail is copied only
//! when one of the two writes to it (copy-on-write through `Arc`). A tail
//! that reaches a block's worth of tokens is sealed into a block (its key
//! chained from the last block's) and inserted into the store; when the
//! store has no room (every RAM block leased), the tokens stay in the
//! private tail and sealing is tried again at the next append.
//!
//! [`fork`]: Sequence::fork

use super::key::{block_key, block_keys, IdentityDigest};
use super::store::{BlockLease, BlockStore, Prefix};
use super::KvError;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
struct Tail {
    tokens: Vec<u32>,
    kv: Vec<u8>,
}

/// A request's blocks: a shared prefix and a private tail.
#[derive(Clone)]
pub struct Sequence {
    store: BlockStore,
    identity: IdentityDigest,
    tenant_salt: Arc<[u8]>,
    prefix: Prefix,
    tail: Arc<Tail>,
}

impl Sequence {
    /// Starts a request with prompt `tokens`: leases the longest cached
    /// prefix of its full blocks. The engine prefills the tokens after
    /// [`Sequence::cached_tokens`] and appends them with their KV.
    pub fn begin(
        store: &BlockStore,
        identity: &IdentityDigest,
        tenant_salt: &[u8],
        tokens: &[u32],
    ) -> Sequence {
        let block_tokens = store.config().block_tokens as usize;
        let keys = block_keys(identity, tenant_salt, tokens, block_tokens);
        Sequence {
            store: store.clone(),
            identity: *identity,
            tenant_salt: tenant_salt.into(),
            prefix: store.lookup(&keys),
            tail: Arc::default(),
        }
    }

    /// Tokens whose KV the sequence holds: shared blocks, then the tail.
    pub fn cached_tokens(&self) -> u64 {
        self.prefix.tokens() + self.tail.tokens.len() as u64
    }

    /// The shared blocks, first to last.
    pub fn blocks(&self) -> &[BlockLease] {
        self.prefix.blocks()
    }

    pub fn tail_tokens(&self) -> &[u32] {
        &self.tail.tokens
    }

    pub fn tail_kv(&self) -> &[u8] {
        &self.tail.kv
    }

    /// Whether another sequence (a fork) still shares this tail.
    pub fn tail_is_shared(&self) -> bool {
        Arc::strong_count(&self.tail) > 1
    }

    /// Appends `tokens` and their KV (`kv_bytes_per_token` bytes each),
    /// copying a shared tail first, and seals every full block.
    pub fn append(&mut self, tokens: &[u32], kv: &[u8]) -> Result<(), KvError> {
        let per_token = self.store.config().kv_bytes_per_token;
        if kv.len() as u64 != tokens.len() as u64 * per_token {
            return Err(KvError::Argument(format!(
                "KV append: {} bytes of KV for {} tokens; give {per_token} bytes per token",
                kv.len(),
                tokens.len()
            )));
        }
        if !tokens.is_empty() {
            let tail = Arc::make_mut(&mut self.tail);
            tail.tokens.extend_from_slice(tokens);
            tail.kv.extend_from_slice(kv);
        }
        self.seal()
    }

    /// A second request that continues from here: the same leased blocks
    /// (new leases) and the same tail until one of them writes.
    pub fn fork(&self) -> Sequence {
        self.clone()
    }

    /// Moves every full block of the tail into the store, as long as it
    /// has room.
    fn seal(&mut self) -> Result<(), KvError> {
        let block_tokens = self.store.config().block_tokens as usize;
        let per_token = self.store.config().kv_bytes_per_token as usize;
        while self.tail.tokens.len() >= block_tokens {
            let tokens = &self.tail.tokens[..block_tokens];
            let parent = self.prefix.last();
            let key = block_key(
                parent.map(BlockLease::key).as_ref(),
                &self.identity,
                &self.tenant_salt,
                tokens,
            );
            let kv = &self.tail.kv[..block_tokens * per_token];
            let lease = match self.store.insert(parent, key, block_tokens as u32, kv) {
                Ok(lease) => lease,
                // No room: the tokens stay private; tried again later.
                Err(KvError::Full { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            self.prefix.push(lease);
            let tail = Arc::make_mut(&mut self.tail);
            tail.tokens.drain(..block_tokens);
            tail.kv.drain(..block_tokens * per_token);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}

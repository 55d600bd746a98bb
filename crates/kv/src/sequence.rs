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
mod tests;

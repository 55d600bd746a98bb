//! The block store (design §8 "Store", "Persistence"): immutable KV blocks
//! in host RAM and, below it, on disk; leases; longest-prefix lookup.
//!
//! - A block is inserted under its parent's lease (a cached parent), with
//!   `tokens x kv_bytes_per_token` bytes; inserting a key that is cached
//!   leases the cached block (the bytes of equal keys are equal).
//! - [`BlockStore::lookup`] walks a request's keys from the first and
//!   leases the longest cached prefix: RAM blocks directly, disk blocks
//!   after reading and verifying them (promoted into RAM). It stops at the
//!   first block it does not have.
//! - A lease ([`BlockLease`], RAII) pins its block in RAM: never evicted
//!   while leased. Releasing it is its latest use. A [`Prefix`] releases
//!   its leases from last to first, so a request's first block ends most
//!   recent (the `lru` semantics of docs/kv.md).
//! - RAM evicts with the configured policy; a victim goes to the disk tier
//!   if it is not there yet (the disk tier keeps what it has: promotion
//!   does not remove the file). The disk tier evicts with the same policy
//!   and deletes the victim's file.
//!
//! One mutex guards both tiers, disk reads and writes included: simple and
//! correct, and a disk-tier miss costs a read anyway. A block only in RAM
//! is lost in a crash (it is a cache); blocks on disk survive, verified.

use super::disk::{DiskBlock, DiskDir, OpenReport};
use super::index::{EvictionPolicy, IndexConfig, NodeId, PrefixIndex};
use super::key::BlockKey;
use super::KvError;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How a store is laid out.
#[derive(Debug, Clone)]
pub struct KvStoreConfig {
    /// Tokens of a full block (64 in engines is typical).
    pub block_tokens: u32,
    /// KV bytes of one token: a block of `t` tokens holds `t x` this.
    pub kv_bytes_per_token: u64,
    /// Blocks host RAM holds.
    pub ram_blocks: usize,
    pub disk: Option<DiskConfig>,
    pub policy: EvictionPolicy,
    /// The prefill model `utility` prices a block with.
    pub prefill_tokens_per_second: f64,
}

/// The disk tier: a directory of block files and how many it may hold.
#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub dir: PathBuf,
    pub blocks: usize,
}

/// What the store has done since it was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvCounters {
    pub lookups: u64,
    /// Blocks a lookup leased from RAM, and read back from disk.
    pub ram_hit_blocks: u64,
    pub disk_hit_blocks: u64,
    pub inserted_blocks: u64,
    /// Inserts of a key that was cached already (no copy made).
    pub deduplicated_inserts: u64,
    pub ram_evicted_blocks: u64,
    /// RAM victims written to the disk tier.
    pub demoted_blocks: u64,
    pub disk_evicted_blocks: u64,
    /// Disk blocks that failed verification at a read: deleted, not served.
    pub discarded_blocks: u64,
    pub disk_errors: u64,
    /// The last disk error, one line.
    pub last_disk_error: Option<String>,
}

/// A block in RAM: its bytes and what its disk copy would need.
struct RamBlock {
    bytes: Arc<[u8]>,
    parent: Option<BlockKey>,
    tokens: u32,
}

/// A block on disk. `valid == false`: its file failed a read and was
/// deleted, but it is still some block's parent in the disk index, so its
/// entry stays until its children go (it is never served meanwhile).
struct DiskEntry {
    valid: bool,
}

struct DiskTier {
    dir: DiskDir,
    index: PrefixIndex<BlockKey, DiskEntry>,
}

struct State {
    ram: PrefixIndex<BlockKey, RamBlock>,
    disk: Option<DiskTier>,
    counters: KvCounters,
}

struct Shared {
    config: KvStoreConfig,
    state: Mutex<State>,
}

impl Shared {
    /// The state, even after a panic elsewhere: every mutation completes
    /// its index bookkeeping before anything can panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A KV block store; clones share it.
#[derive(Clone)]
pub struct BlockStore {
    shared: Arc<Shared>,
}

/// A lease on one RAM block: its bytes stay put until it is dropped.
pub struct BlockLease {
    shared: Arc<Shared>,
    node: NodeId,
    key: BlockKey,
    tokens: u32,
    bytes: Arc<[u8]>,
}

impl BlockLease {
    pub fn key(&self) -> BlockKey {
        self.key
    }

    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Clone for BlockLease {
    /// Another lease on the same block.
    fn clone(&self) -> Self {
        self.shared.lock().ram.acquire(self.node);
        BlockLease {
            shared: Arc::clone(&self.shared),
            node: self.node,
            key: self.key,
            tokens: self.tokens,
            bytes: Arc::clone(&self.bytes),
        }
    }
}

impl Drop for BlockLease {
    fn drop(&mut self) {
        self.shared.lock().ram.release(self.node);
    }
}

impl std::fmt::Debug for BlockLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockLease")
            .field("key", &self.key)
            .field("tokens", &self.tokens)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Leases on a chain of blocks from a request's first; released from the
/// last to the first when dropped.
#[derive(Debug, Clone, Default)]
pub struct Prefix {
    leases: Vec<BlockLease>,
}

impl Prefix {
    pub fn blocks(&self) -> &[BlockLease] {
        &self.leases
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    pub fn last(&self) -> Option<&BlockLease> {
        self.leases.last()
    }

    /// Tokens the prefix covers.
    pub fn tokens(&self) -> u64 {
        self.leases.iter().map(|l| u64::from(l.tokens)).sum()
    }

    /// Appends the lease of the next block of the chain.
    pub fn push(&mut self, lease: BlockLease) {
        self.leases.push(lease);
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        while let Some(lease) = self.leases.pop() {
            drop(lease);
        }
    }
}

impl BlockStore {
    /// Opens a store; with a disk tier, its directory is created or
    /// reopened: temporary files removed, every block verified (the report
    /// says what was discarded), the good ones indexed.
    pub fn open(config: KvStoreConfig) -> Result<(BlockStore, Option<OpenReport>), KvError> {
        if config.block_tokens == 0 {
            return Err(KvError::Argument(
                "KV store: block_tokens is 0; give the tokens per block (e.g. 64)".into(),
            ));
        }
        if !(config.prefill_tokens_per_second.is_finite() && config.prefill_tokens_per_second > 0.0)
        {
            return Err(KvError::Argument(format!(
                "KV store: prefill_tokens_per_second is {}; give a positive rate",
                config.prefill_tokens_per_second
            )));
        }
        let index_config = |capacity_blocks| IndexConfig {
            capacity_blocks,
            policy: config.policy,
            block_tokens: config.block_tokens,
            prefill_tokens_per_second: config.prefill_tokens_per_second,
        };
        let mut counters = KvCounters::default();
        let (disk, report) = match &config.disk {
            None => (None, None),
            Some(d) => {
                let (dir, blocks, report) = DiskDir::open(&d.dir)?;
                let mut tier = DiskTier {
                    dir,
                    index: PrefixIndex::new(index_config(d.blocks)),
                };
                tier.index_found(&blocks, &mut counters);
                (Some(tier), Some(report))
            }
        };
        let state = State {
            ram: PrefixIndex::new(index_config(config.ram_blocks)),
            disk,
            counters,
        };
        let store = BlockStore {
            shared: Arc::new(Shared {
                config,
                state: Mutex::new(state),
            }),
        };
        Ok((store, report))
    }

    pub fn config(&self) -> &KvStoreConfig {
        &self.shared.config
    }

    pub fn counters(&self) -> KvCounters {
        self.shared.lock().counters.clone()
    }

    /// Blocks in RAM and on disk now.
    pub fn blocks(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (
            state.ram.len(),
            state.disk.as_ref().map_or(0, |d| d.index.len()),
        )
    }

    fn lease(&self, node: NodeId, key: BlockKey, block: &RamBlock) -> BlockLease {
        BlockLease {
            shared: Arc::clone(&self.shared),
            node,
            key,
            tokens: block.tokens,
            bytes: Arc::clone(&block.bytes),
        }
    }

    /// Leases the longest cached prefix of `keys` (a request's block keys,
    /// first to last), reading disk blocks back into RAM on the way.
    pub fn lookup(&self, keys: &[BlockKey]) -> Prefix {
        let mut prefix = Prefix::default();
        let mut state = self.shared.lock();
        state.counters.lookups += 1;
        for key in keys {
            if let Some(node) = state.ram.get(key) {
                state.ram.acquire(node);
                state.ram.record_hit(node);
                state.counters.ram_hit_blocks += 1;
                prefix.push(self.lease(node, *key, state.ram.value(node)));
                continue;
            }
            let parent = prefix.last().map(|l| (l.node, l.key));
            match state.promote(key, parent) {
                Some(node) => prefix.push(self.lease(node, *key, state.ram.value(node))),
                None => break,
            }
        }
        prefix
    }

    /// Inserts the block `key` of `tokens` tokens after `parent` (`None`:
    /// a request's first block) and leases it. A key cached already is
    /// leased as it is. Fails when `bytes` is not `tokens x
    /// kv_bytes_per_token` long, `parent` is another store's, or every RAM
    /// block is leased.
    pub fn insert(
        &self,
        parent: Option<&BlockLease>,
        key: BlockKey,
        tokens: u32,
        bytes: impl Into<Arc<[u8]>>,
    ) -> Result<BlockLease, KvError> {
        let config = &self.shared.config;
        let bytes: Arc<[u8]> = bytes.into();
        let expected = u64::from(tokens) * config.kv_bytes_per_token;
        if bytes.len() as u64 != expected || tokens == 0 || tokens > config.block_tokens {
            return Err(KvError::Argument(format!(
                "KV insert of block {key}: {} bytes for {tokens} tokens; a block holds 1 to {} tokens of {} bytes each",
                bytes.len(),
                config.block_tokens,
                config.kv_bytes_per_token
            )));
        }
        if let Some(p) = parent {
            if !Arc::ptr_eq(&p.shared, &self.shared) {
                return Err(KvError::Argument(format!(
                    "KV insert of block {key}: the parent lease is from another store; pass a lease of this store"
                )));
            }
        }
        let mut state = self.shared.lock();
        if let Some(node) = state.ram.get(&key) {
            state.ram.acquire(node);
            state.counters.deduplicated_inserts += 1;
            return Ok(self.lease(node, key, state.ram.value(node)));
        }
        state.make_ram_room(config.ram_blocks)?;
        let block = RamBlock {
            bytes,
            parent: parent.map(|p| p.key),
            tokens,
        };
        let node = state
            .ram
            .insert(key, block, parent.map(|p| p.node), tokens, expected);
        state.counters.inserted_blocks += 1;
        Ok(self.lease(node, key, state.ram.value(node)))
    }
}

impl State {
    /// Evicts a RAM block if RAM is full, sending it to the disk tier.
    fn make_ram_room(&mut self, capacity_blocks: usize) -> Result<(), KvError> {
        let victim = self.ram.make_room().map_err(|_| KvError::Full {
            tier: "RAM",
            capacity_blocks,
        })?;
        if let Some((key, block)) = victim {
            self.counters.ram_evicted_blocks += 1;
            if let Some(disk) = &mut self.disk {
                disk.demote(key, &block, &mut self.counters);
            }
        }
        Ok(())
    }

    /// Reads `key` from the disk tier into RAM under `parent` and leases
    /// it; `None` when the disk tier lacks it, RAM has no room, or its file
    /// fails verification (then it is discarded).
    fn promote(&mut self, key: &BlockKey, parent: Option<(NodeId, BlockKey)>) -> Option<NodeId> {
        let disk = self.disk.as_mut()?;
        let id = disk
            .index
            .get(key)
            .filter(|&id| disk.index.value(id).valid)?;
        // Leased while RAM makes room: the demotion of a RAM victim may make
        // the disk tier evict, and never this block.
        disk.index.acquire(id);
        let capacity = self.ram.config().capacity_blocks;
        let room = self.make_ram_room(capacity);
        let disk = self.disk.as_mut().expect("the disk tier found the key");
        let read = room.ok().map(|()| disk.dir.read(key));
        if let Some(Ok(_)) = &read {
            disk.index.record_hit(id);
        }
        disk.index.release(id);
        let (header, bytes) = match read? {
            Ok(read) => read,
            Err(problem) => {
                disk.discard(id, &mut self.counters);
                self.counters.discarded_blocks += 1;
                self.counters.last_disk_error = Some(problem);
                return None;
            }
        };
        let block = RamBlock {
            bytes: bytes.into(),
            parent: parent.map(|p| p.1),
            tokens: header.tokens,
        };
        let node = self
            .ram
            .insert(*key, block, parent.map(|p| p.0), header.tokens, header.len);
        self.counters.disk_hit_blocks += 1;
        Some(node)
    }
}

impl DiskTier {
    /// Indexes the blocks an open found, parents before children so the
    /// tree is rebuilt; beyond the capacity, the policy's victims go.
    fn index_found(&mut self, blocks: &[DiskBlock], counters: &mut KvCounters) {
        let by_key: HashMap<BlockKey, &DiskBlock> = blocks.iter().map(|b| (b.key, b)).collect();
        let mut done: HashSet<BlockKey> = HashSet::new();
        let mut chain = Vec::new();
        for block in blocks {
            // The block and its ancestors on disk not indexed yet, deepest
            // first; a cycle cannot occur (keys hash their parents).
            let mut at = Some(block);
            while let Some(b) = at.filter(|b| !done.contains(&b.key)) {
                chain.push(b);
                at = b.parent.and_then(|p| by_key.get(&p).copied());
            }
            while let Some(b) = chain.pop() {
                done.insert(b.key);
                self.add(b, counters);
            }
        }
    }

    /// Indexes a block whose file is written, evicting a victim first when
    /// full (with capacity 0 the file itself goes: nothing may stay).
    fn add(&mut self, block: &DiskBlock, counters: &mut KvCounters) {
        let victim = match self.index.make_room() {
            Err(_) => Some(block.key),
            Ok(victim) => victim.map(|(key, _)| key),
        };
        if let Some(victim) = victim {
            counters.disk_evicted_blocks += 1;
            if let Err(e) = self.dir.remove(&victim) {
                counters.disk_errors += 1;
                counters.last_disk_error = Some(e.to_string());
            }
            if victim == block.key {
                return;
            }
        }
        let parent = block.parent.and_then(|p| self.index.get(&p));
        let id = self.index.insert(
            block.key,
            DiskEntry { valid: true },
            parent,
            block.tokens,
            block.len,
        );
        self.index.release(id);
    }

    /// Writes a RAM victim to disk unless its file is there already.
    fn demote(&mut self, key: BlockKey, block: &RamBlock, counters: &mut KvCounters) {
        let header = DiskBlock {
            key,
            parent: block.parent,
            tokens: block.tokens,
            len: block.bytes.len() as u64,
        };
        let existing = self.index.get(&key);
        if existing.is_some_and(|id| self.index.value(id).valid) {
            return;
        }
        if existing.is_none() && self.index.config().capacity_blocks == 0 {
            return;
        }
        if let Err(e) = self.dir.write(&header, &block.bytes) {
            counters.disk_errors += 1;
            counters.last_disk_error = Some(e.to_string());
            return;
        }
        counters.demoted_blocks += 1;
        match existing {
            // A discarded entry that stayed as a parent: its file is back.
            Some(id) => self.index.value_mut(id).valid = true,
            None => self.add(&header, counters),
        }
    }

    /// Deletes a block whose file failed a read: out of the index, or
    /// marked invalid while it is still a parent there.
    fn discard(&mut self, id: NodeId, counters: &mut KvCounters) {
        let key = *self.index.key(id);
        if self.index.remove(id).is_none() {
            self.index.value_mut(id).valid = false;
        }
        if let Err(e) = self.dir.remove(&key) {
            counters.disk_errors += 1;
            counters.last_disk_error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests;

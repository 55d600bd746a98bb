//! KV-prefix residency (design §8): blocks of attention KV keyed by
//! their whole prefix and identity, kept in host RAM and on disk, shared
//! between requests and evicted by a policy. Replaying real traces through
//! the index, and grouping their reused blocks for the planner, is
//! `residency-lab`'s (`kv`).
//!
//! - `key`: block keys, a chained SHA-256 of (parent key, tokens, identity)
//!   with the tenant salt in the first block.
//! - `index`: the prefix index every user shares: the tree, leases, the
//!   `lru`, `lru-leaf` and `utility` eviction orders.
//! - `utility`: the online estimate of `P(reuse)` behind `utility`.
//! - `store`: the block store: RAM and disk tiers, RAII leases, longest
//!   prefix lookup, insert, demotion and promotion.
//! - `disk`: the disk tier's files: key, length and checksum in a header,
//!   written atomically; corrupt or partial blocks discarded on open.
//! - `sequence`: one request's blocks: a shared immutable prefix and a
//!   private copy-on-write tail, sealed into blocks as it fills.
//! - `route`: which of N engine slots a request goes to (the one owning
//!   its longest prefix), copying only as a fallback.

pub mod disk;
pub mod index;
pub mod key;
pub mod route;
pub mod sequence;
pub mod store;
pub mod utility;

pub use index::{EvictionPolicy, IndexConfig, PrefixIndex};
pub use key::{block_key, block_keys, BlockKey, IdentityDigest, KvIdentity};
pub use route::{CopySource, Route, SlotRouter};
pub use sequence::Sequence;
pub use store::{BlockLease, BlockStore, DiskConfig, KvCounters, KvStoreConfig, Prefix};

use std::path::{Path, PathBuf};

/// Why a KV operation failed: one line naming the file or the argument,
/// the place and the fix.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error("{}: {problem}; {fix}", file.display())]
    File {
        file: PathBuf,
        problem: String,
        fix: String,
    },
    /// Every block of a tier is leased (or, under the tree policies, an
    /// ancestor of a leased block): nothing can make room.
    #[error("the {tier} tier's {capacity_blocks} blocks are all leased or ancestors of leased blocks; release leases (drop Prefix, BlockLease or Sequence values) or give the store more {tier} blocks")]
    Full {
        tier: &'static str,
        capacity_blocks: usize,
    },
    #[error("{0}")]
    Argument(String),
}

impl KvError {
    pub fn file(path: &Path, problem: impl Into<String>, fix: impl Into<String>) -> KvError {
        KvError::File {
            file: path.to_path_buf(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

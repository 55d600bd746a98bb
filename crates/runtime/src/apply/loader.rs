//! The store's loader over a real checkpoint: an object's extents (whole
//! tensors, or an expert's slices of fused expert tensors) are read with the
//! chosen storage backend straight into one aligned slab of its home's host
//! pool (its NUMA node's memory, recycled) when they lie back to back in one
//! shard (the generator and real exporters write an expert's projections
//! together), else extent by extent into one buffer (a fused layout such as
//! Llama-4's: an expert's slice of `gate_up_proj`, then of `down_proj`).

use crate::checkpoint::{Checkpoint, Extent};
use crate::identity::ObjectKey;
use crate::storage::drives::DriveSet;
use crate::storage::{AlignedSlab, HostPool, ReadBackend, StorageError};
use crate::store::{Loader, ObjectBytes};
use residency_cache::policy::ObjectIndex;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// A slab holding one object's bytes at `range`.
struct SlabBytes {
    slab: AlignedSlab,
    range: Range<usize>,
}

impl ObjectBytes for SlabBytes {
    fn len(&self) -> usize {
        self.range.len()
    }

    fn host(&self) -> Option<&[u8]> {
        Some(&self.slab[self.range.clone()])
    }
}

pub struct CheckpointLoader {
    /// Dense object index -> key.
    pub keys: Vec<ObjectKey>,
    extents: Vec<Vec<Extent>>,
    /// Each shard, on one drive or mirrored on several.
    shards: HashMap<PathBuf, DriveSet>,
    /// Host memory each object is read into (its home's node).
    pools: Vec<Arc<HostPool>>,
    pool_of: Vec<u32>,
}

/// Freed slabs a pool keeps for the next loads.
pub const RETAINED_BYTES: usize = 256 << 20;

impl CheckpointLoader {
    /// Numbers `keys` densely (the order given) and opens every shard once,
    /// in the checkpoint's directory and in each of `mirrors` (identical
    /// copies on other drives: each read goes to the least busy copy).
    pub fn new(
        checkpoint: &Checkpoint,
        keys: Vec<ObjectKey>,
        backend: Box<dyn ReadBackend>,
        mirrors: &[PathBuf],
    ) -> Result<CheckpointLoader, StorageError> {
        let extents: Vec<Vec<Extent>> = keys
            .iter()
            .map(|k| checkpoint.extents(k).to_vec())
            .collect();
        let backend: Arc<dyn ReadBackend> = Arc::from(backend);
        let mut shards = HashMap::new();
        for shard in &checkpoint.shards {
            let mut copies = vec![shard.clone()];
            copies.extend(
                mirrors
                    .iter()
                    .map(|dir| dir.join(shard.file_name().unwrap_or_default())),
            );
            shards.insert(shard.clone(), DriveSet::mirror(&copies, backend.clone())?);
        }
        Ok(CheckpointLoader {
            pool_of: vec![0; keys.len()],
            keys,
            extents,
            shards,
            pools: vec![HostPool::new(None, RETAINED_BYTES)],
        })
    }

    /// Reads object `o` into memory of `pools[pool_of[o]]` (by default one
    /// pool, bound to no node).
    pub fn with_pools(mut self, pools: Vec<Arc<HostPool>>, pool_of: Vec<u32>) -> CheckpointLoader {
        debug_assert_eq!(pool_of.len(), self.keys.len());
        debug_assert!(pool_of.iter().all(|&p| (p as usize) < pools.len()));
        self.pools = pools;
        self.pool_of = pool_of;
        self
    }

    pub fn extents(&self, o: ObjectIndex) -> &[Extent] {
        &self.extents[o as usize]
    }

    /// Reads `e` into a new slab from `o`'s pool.
    fn read(
        &self,
        o: ObjectIndex,
        e: &Extent,
    ) -> Result<(AlignedSlab, Range<usize>), StorageError> {
        let pool = &self.pools[self.pool_of[o as usize] as usize];
        let mut slab = AlignedSlab::for_read_in(Some(pool), e.offset, e.len as usize);
        let range = self.shards[&e.shard].read_into(e.offset, e.len as usize, &mut slab)?;
        Ok((slab, range))
    }
}

/// Whether the extents follow each other without a gap in one shard.
fn contiguous(extents: &[Extent]) -> bool {
    extents
        .windows(2)
        .all(|w| w[0].shard == w[1].shard && w[0].offset + w[0].len == w[1].offset)
}

impl Loader for CheckpointLoader {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.extents[o as usize].iter().map(|e| e.len).sum()
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        let extents = &self.extents[o as usize];
        let (Some(first), Some(last)) = (extents.first(), extents.last()) else {
            return Err(format!(
                "{} is not in the checkpoint",
                self.keys[o as usize]
            ));
        };
        let describe = |e: StorageError| format!("{}: {e}", self.keys[o as usize]);
        if contiguous(extents) {
            let whole = Extent {
                shard: first.shard.clone(),
                offset: first.offset,
                len: last.offset + last.len - first.offset,
                tensor: first.tensor.clone(),
            };
            let (slab, range) = self.read(o, &whole).map_err(describe)?;
            return Ok(Box::new(SlabBytes { slab, range }));
        }
        let mut bytes = Vec::with_capacity(self.size_bytes(o) as usize);
        for e in extents {
            let (slab, range) = self.read(o, e).map_err(describe)?;
            bytes.extend_from_slice(&slab[range]);
        }
        Ok(Box::new(bytes))
    }
}

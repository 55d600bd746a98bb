//! The store's loader over a real checkpoint: an object's extents (whole
//! tensors, or an expert's slices of fused expert tensors) are read with the
//! chosen storage backend, one read per run of them back to back in a
//! shard, straight into one aligned slab of its home's host pool (its NUMA
//! node's memory, recycled) when they are one run; else the largest run in
//! place in one such slab and the others copied before and after it (an
//! int4 expert whose scales the writer put apart from its weights, as
//! safetensors groups tensors by dtype; a fused layout such as Llama-4's:
//! an expert's slice of `gate_up_proj`, then of `down_proj`).

use crate::checkpoint::{Checkpoint, Extent};
use crate::identity::ObjectKey;
use crate::storage::drives::DriveSet;
use crate::storage::{span, AlignedSlab, HostPool, ReadBackend, StorageError, ALIGN_BYTES};
use crate::store::{Loader, ObjectBytes};
use residency_policy::ObjectIndex;
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

/// `extents` (in file order) cut where one does not follow the last: the
/// index ranges of the runs that lie back to back in one shard.
fn runs(extents: &[Extent]) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for i in 0..extents.len() {
        match runs.last_mut() {
            Some(run) if follows(&extents[i - 1], &extents[i]) => run.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// Whether `b` starts where `a` ends, in the same shard.
fn follows(a: &Extent, b: &Extent) -> bool {
    a.shard == b.shard && a.offset + a.len == b.offset
}

impl Loader for CheckpointLoader {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.extents[o as usize].iter().map(|e| e.len).sum()
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        let extents = &self.extents[o as usize];
        if extents.is_empty() {
            return Err(format!(
                "{} is not in the checkpoint",
                self.keys[o as usize]
            ));
        }
        let describe = |e: StorageError| format!("{}: {e}", self.keys[o as usize]);
        // One read per run of extents back to back in a shard (the
        // checkpoint keeps an object's extents in file order).
        let run_extent = |run: &Range<usize>| Extent {
            shard: extents[run.start].shard.clone(),
            offset: extents[run.start].offset,
            len: extents[run.clone()].iter().map(|e| e.len).sum(),
            tensor: extents[run.start].tensor.clone(),
        };
        let pieces: Vec<Extent> = runs(extents).iter().map(run_extent).collect();
        if let [whole] = pieces.as_slice() {
            let (slab, range) = self.read(o, whole).map_err(describe)?;
            return Ok(Box::new(SlabBytes { slab, range }));
        }
        // Several runs (an int4 expert's weights and its scales, where the
        // writer groups tensors by dtype as safetensors does; a fused
        // layout's slices): the largest read in place into one slab of the
        // pool, the others read apart and copied before and after it, so
        // that the object's bytes are one range in extents order. Copying
        // all of them into a fresh buffer cost a streamed expert more than
        // its read's latency.
        let lens: Vec<usize> = pieces.iter().map(|e| e.len as usize).collect();
        let largest = (0..pieces.len())
            .max_by_key(|&i| lens[i])
            .expect("two runs or more");
        let before: usize = lens[..largest].iter().sum();
        let after: usize = lens[largest + 1..].iter().sum();
        let big = &pieces[largest];
        let read = span(big.offset, big.len as usize);
        // The largest run's read window starts on a page at `window`, its
        // payload `skew` bytes in; the runs before it end there.
        let skew = read.payload_start;
        let window = (before.saturating_sub(skew)).div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
        let start = window + skew - before;
        let total = before + big.len as usize + after;
        let pool = &self.pools[self.pool_of[o as usize] as usize];
        let mut slab = AlignedSlab::in_pool(pool, (window + read.aligned_len).max(start + total));
        let (_, dest) = slab.window().split_at(window);
        let payload = self.shards[&big.shard]
            .read_window(big.offset, big.len as usize, dest)
            .map_err(describe)?;
        debug_assert_eq!(window + payload.start, start + before);
        let mut at = start;
        for (i, piece) in pieces.iter().enumerate() {
            if i != largest {
                let (piece, range) = self.read(o, piece).map_err(describe)?;
                slab[at..at + range.len()].copy_from_slice(&piece[range]);
            }
            at += lens[i];
        }
        Ok(Box::new(SlabBytes {
            slab,
            range: start..start + total,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(shard: &str, offset: u64, len: u64) -> Extent {
        Extent {
            shard: PathBuf::from(shard),
            offset,
            len,
            tensor: String::new(),
        }
    }

    #[test]
    fn extents_back_to_back_in_a_shard_are_one_run() {
        // 0..10 and 10..20 touch; 50..60 leaves a gap; 60..70 of another
        // shard starts where the last ended but elsewhere; 70..75 follows it.
        let extents = [
            extent("a", 0, 10),
            extent("a", 10, 10),
            extent("a", 50, 10),
            extent("b", 60, 10),
            extent("b", 70, 5),
        ];
        assert_eq!(runs(&extents), [0..2, 2..3, 3..5]);
        assert_eq!(runs(&extents[..1]), vec![Range { start: 0, end: 1 }]);
        assert!(runs(&[]).is_empty());
    }
}

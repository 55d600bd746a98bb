//! The store's loader over a real checkpoint: an object's tensors are read
//! with the chosen storage backend straight into one aligned slab when they
//! lie back to back in one shard (the generator and real exporters write an
//! expert's projections together), else tensor by tensor into one buffer.

use crate::checkpoint::{Checkpoint, Extent};
use crate::identity::ObjectKey;
use crate::policy::ObjectIndex;
use crate::storage::{AlignedSlab, DataFile, ReadBackend, StorageError};
use crate::store::{Loader, ObjectBytes};
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;

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
    files: HashMap<PathBuf, DataFile>,
    backend: Box<dyn ReadBackend>,
}

impl CheckpointLoader {
    /// Numbers `keys` densely (the order given) and opens every shard once.
    pub fn new(
        checkpoint: &Checkpoint,
        keys: Vec<ObjectKey>,
        backend: Box<dyn ReadBackend>,
    ) -> Result<CheckpointLoader, StorageError> {
        let extents: Vec<Vec<Extent>> = keys
            .iter()
            .map(|k| checkpoint.extents(k).to_vec())
            .collect();
        let mut files = HashMap::new();
        for shard in &checkpoint.shards {
            files.insert(shard.clone(), DataFile::open(shard)?);
        }
        Ok(CheckpointLoader {
            keys,
            extents,
            files,
            backend,
        })
    }

    pub fn extents(&self, o: ObjectIndex) -> &[Extent] {
        &self.extents[o as usize]
    }

    fn read(&self, e: &Extent, slab: &mut AlignedSlab) -> Result<Range<usize>, StorageError> {
        self.backend
            .read_into(&self.files[&e.shard], e.offset, e.len as usize, slab)
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
            let mut slab = AlignedSlab::for_read(whole.offset, whole.len as usize);
            let range = self.read(&whole, &mut slab).map_err(describe)?;
            return Ok(Box::new(SlabBytes { slab, range }));
        }
        let mut bytes = Vec::with_capacity(self.size_bytes(o) as usize);
        for e in extents {
            let mut slab = AlignedSlab::for_read(e.offset, e.len as usize);
            let range = self.read(e, &mut slab).map_err(describe)?;
            bytes.extend_from_slice(&slab[range]);
        }
        Ok(Box::new(bytes))
    }
}

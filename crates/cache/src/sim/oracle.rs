//! libCacheSim's `oracleGeneral` binary traces: packed little-endian
//! records `u32 time, u64 obj_id, u32 size, i64 next_access` (24 bytes, no
//! header). Ids are mapped to dense objects in order of first appearance;
//! the file's own `next_access` is not trusted (we recompute it).

use super::stream::Stream;
use residency_core::error::{read_file, PlannerError, Result};
use std::collections::HashMap;
use std::path::Path;

const RECORD_BYTES: usize = 24;

/// Reads a trace; a length that is not a whole number of records, a size-0
/// record or an object whose size changes is an error naming the record.
pub fn read_oracle_general(path: &Path) -> Result<Stream> {
    let bytes = read_file(path)?;
    if bytes.is_empty() || bytes.len() % RECORD_BYTES != 0 {
        return Err(PlannerError::input(
            path,
            format!("byte {}", bytes.len() - bytes.len() % RECORD_BYTES),
            format!(
                "{} bytes is not a whole number of 24-byte oracleGeneral records",
                bytes.len()
            ),
            "give an uncompressed libCacheSim oracleGeneral file (decompress .zst first)",
        ));
    }
    let mut dense: HashMap<u64, u32> = HashMap::new();
    let mut sizes_bytes = Vec::new();
    let mut requests = Vec::with_capacity(bytes.len() / RECORD_BYTES);
    for (i, record) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
        let id = u64::from_le_bytes(record[4..12].try_into().unwrap());
        let size = u32::from_le_bytes(record[12..16].try_into().unwrap()) as u64;
        let bad = |problem: String| {
            PlannerError::input(
                path,
                format!("record {i} (byte {})", i * RECORD_BYTES),
                problem,
                "objects must have one non-zero size; check the trace was written as oracleGeneral",
            )
        };
        if size == 0 {
            return Err(bad(format!("object {id} has size 0")));
        }
        let next = dense.len() as u32;
        let o = *dense.entry(id).or_insert(next);
        if o == next {
            sizes_bytes.push(size);
        } else if sizes_bytes[o as usize] != size {
            return Err(bad(format!(
                "object {id} changes size from {} to {size} bytes",
                sizes_bytes[o as usize]
            )));
        }
        requests.push(o);
    }
    let objects = sizes_bytes.len() as u32;
    let tokens = requests.len() as u64;
    Ok(Stream::new(sizes_bytes, vec![0, objects], requests, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64, size: u32) -> Vec<u8> {
        let mut r = 7u32.to_le_bytes().to_vec();
        r.extend(id.to_le_bytes());
        r.extend(size.to_le_bytes());
        r.extend((-1i64).to_le_bytes());
        r
    }

    #[test]
    fn ids_become_dense_in_order_of_first_appearance() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let bytes: Vec<u8> = [(900, 5), (17, 8), (900, 5)]
            .iter()
            .flat_map(|&(id, s)| record(id, s))
            .collect();
        std::fs::write(&path, bytes).unwrap();
        let s = read_oracle_general(&path).unwrap();
        assert_eq!(s.requests, vec![0, 1, 0]);
        assert_eq!(s.sizes_bytes, vec![5, 8]);
        assert_eq!(s.next_access[0], 2);
    }

    #[test]
    fn truncated_or_inconsistent_files_are_one_line_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let mut bytes = record(1, 5);
        bytes.extend(&record(2, 5)[..10]);
        std::fs::write(&path, &bytes).unwrap();
        let e = read_oracle_general(&path).unwrap_err().to_string();
        assert!(e.contains("byte 24") && e.contains("34 bytes"), "{e}");
        let bytes: Vec<u8> = [(1, 5), (1, 6)]
            .iter()
            .flat_map(|&(id, s)| record(id, s))
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let e = read_oracle_general(&path).unwrap_err().to_string();
        assert!(e.contains("record 1") && e.contains("from 5 to 6"), "{e}");
        assert!(!e.contains('\n'));
    }
}

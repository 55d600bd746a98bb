//! libCacheSim's `oracleGeneral` binary traces: packed little-endian
//! records `u32 time, u64 obj_id, u32 size, i64 next_access` (24 bytes, no
//! header). Ids are mapped to dense objects in order of first appearance;
//! the file's own `next_access` is not trusted (we recompute it, and only
//! for the policies that read it: see [`Stream::next_access`]).

use super::stream::Stream;
use rayon::prelude::*;
use residency_core::error::{write_atomic, PlannerError, Result};
use residency_policy::{ObjectIndex, NEVER};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

const RECORD_BYTES: usize = 24;

/// Records of a window (24 MiB): the file is split into parts at windows.
/// Records of a chunk (384 KiB), what a part reads into its buffer at a
/// time.
const WINDOW_RECORDS: usize = 1 << 20;
const WINDOW_BYTES: usize = RECORD_BYTES * WINDOW_RECORDS;
const CHUNK_RECORDS: usize = 1 << 14;

/// Reads a trace; a length that is not a whole number of records, a size-0
/// record or an object whose size changes is an error naming the record.
///
/// The file is read a chunk at a time into one buffer of 384 KiB that
/// stays in L2 while it is parsed: a 10-million-request trace is 240 MB,
/// and parsing it in place from a memory map waited on every record's
/// first touch of its line (most of the parse's time, `perf`), while the
/// kernel's copy streams it; a whole-file buffer would cost its page
/// faults and weigh six times the requests kept (docs/simulator.md).
///
/// A trace of several windows is cut into one run of windows per rayon
/// thread, parsed side by side (the parse is a hash lookup a record, about
/// a third of a whole `simulate` of one policy), then merged in file order:
/// each part's objects, in its own order of first appearance, either are
/// an earlier part's or are new, so they get the numbers one pass would
/// have given them. Any problem is named by reading the file again in one
/// pass, so the error is the first bad record's whatever the split.
pub fn read_oracle_general(path: &Path) -> Result<Stream> {
    let file = std::fs::File::open(path).map_err(|e| PlannerError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| PlannerError::io(path, e))?
        .len() as usize;
    if len == 0 || !len.is_multiple_of(RECORD_BYTES) {
        return Err(PlannerError::input(
            path,
            format!("byte {}", len - len % RECORD_BYTES),
            format!("{len} bytes is not a whole number of 24-byte oracleGeneral records"),
            "give an uncompressed libCacheSim oracleGeneral file (decompress .zst first)",
        ));
    }
    let parts = rayon::current_num_threads().clamp(1, len.div_ceil(WINDOW_BYTES));
    if parts > 1 {
        if let Ok(Some(stream)) = read_parts(&file, path, len, parts) {
            return Ok(stream);
        }
    }
    read_parts(&file, path, len, 1).map(|read| read.expect("one part has nothing to merge"))
}

/// The trace of `len` bytes read in `parts` runs of whole windows, merged;
/// `None` where an object's size differs between parts. With more than one
/// part, an error is some part's first bad record, not the file's.
fn read_parts(
    file: &std::fs::File,
    path: &Path,
    len: usize,
    parts: usize,
) -> Result<Option<Stream>> {
    let records = len / RECORD_BYTES;
    let windows = records.div_ceil(WINDOW_RECORDS);
    let bounds: Vec<usize> = (0..=parts)
        .map(|k| (k * windows / parts * WINDOW_RECORDS).min(records))
        .collect();
    let mut requests: Vec<ObjectIndex> = vec![0; records];
    advise_huge_pages(&mut requests);
    let mut slices = split_at_bounds(&mut requests, &bounds);
    let mut read: Vec<Part> = slices
        .par_iter_mut()
        .zip(bounds.par_windows(2))
        .map(|(out, range)| Part::read(file, path, range[0], out))
        .collect::<Result<_>>()?;
    let (all, later) = read.split_first_mut().expect("at least one part");
    let Some(renumbered) = later
        .iter()
        .map(|part| all.absorb(part))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    // A later part's object `k` is `global[k]` in the merged numbering.
    for (part, global) in later.iter().zip(&renumbered) {
        for (&o, &count) in global.iter().zip(&part.counts) {
            all.counts[o as usize] += count;
        }
    }
    // In runs of a window, so that every thread renumbers, not one a part.
    let runs: Vec<(&mut [ObjectIndex], &[ObjectIndex])> = slices[1..]
        .iter_mut()
        .zip(&renumbered)
        .flat_map(|(out, global)| {
            out.chunks_mut(WINDOW_RECORDS)
                .map(move |run| (run, &global[..]))
        })
        .collect();
    runs.into_par_iter()
        .for_each(|(run, global)| run.iter_mut().for_each(|o| *o = global[*o as usize]));
    let objects = all.sizes.len() as u32;
    let stream = Stream::new(
        all.sizes.iter().copied().map(u64::from).collect(),
        vec![0, objects],
        requests,
        records as u64,
    );
    Ok(Some(stream.with_counts(std::mem::take(&mut all.counts))))
}

/// Asks for huge pages under `buffer` before its first write: the parse
/// writes every page of a buffer the allocator has mapped but not touched,
/// and one fault a 4 KiB page was a tenth of a 10 M request read (`perf`).
/// Advice only: where it is refused the buffer has small pages.
fn advise_huge_pages<T>(buffer: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = buffer.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(buffer);
        let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if last > first {
            // SAFETY: advice on whole pages inside `buffer`'s own
            // allocation; it changes no contents, so nothing is lost.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
    }
}

/// `all` cut into consecutive slices at `bounds` (from 0 to `all.len()`).
fn split_at_bounds<'a, T>(mut all: &'a mut [T], bounds: &[usize]) -> Vec<&'a mut [T]> {
    bounds
        .windows(2)
        .map(|w| {
            let (head, tail) = std::mem::take(&mut all).split_at_mut(w[1] - w[0]);
            all = tail;
            head
        })
        .collect()
}

/// What one run of records made: dense objects by id (numbered from 0 in
/// the run's order of first appearance), their ids and sizes; the run's
/// requests are written in place, as these numbers.
struct Part {
    /// Each id's dense object and size. Looked up once per request, so
    /// hashed with [`IdHasher`] rather than SipHash (std's default, tens of
    /// cycles a lookup); ids come from the file, but a hostile trace can
    /// only make its own replay slow. The size is kept beside the object,
    /// not only in `sizes`, so that checking a request's size reads the
    /// bucket the lookup already brought in: with thousands of objects
    /// both tables outgrow L1, and the second read was a wait per request.
    dense: HashMap<u64, (u32, u32), BuildHasherDefault<IdHasher>>,
    /// The same for ids below `SMALL_IDS`, indexed by id (`NOT_SEEN` where
    /// new), grown as they come: a trace that numbers its objects densely
    /// (an MoE trace's `layer * experts + expert`) skips the hash.
    small: Vec<(u32, u32)>,
    ids: Vec<u64>,
    sizes: Vec<u32>,
    /// Each object's requests in the run (absorbed ones: none yet), taken
    /// while parsing so that the stream's counts need no pass of their own.
    counts: Vec<u64>,
}

/// Ids looked up by index rather than hashed: 8 bytes each, so at most
/// 512 KiB a part, within L2.
const SMALL_IDS: u64 = 1 << 16;
const NOT_SEEN: u32 = u32::MAX;

impl Part {
    /// Parses the records from record `first` that fill `out`, read a
    /// chunk at a time into one buffer that stays in the CPU's cache.
    fn read(
        file: &std::fs::File,
        path: &Path,
        first: usize,
        out: &mut [ObjectIndex],
    ) -> Result<Part> {
        use std::os::unix::fs::FileExt;
        let mut part = Part {
            dense: HashMap::default(),
            small: Vec::new(),
            ids: Vec::new(),
            sizes: Vec::new(),
            counts: Vec::new(),
        };
        let mut buffer = vec![0u8; CHUNK_RECORDS * RECORD_BYTES];
        for (c, out) in out.chunks_mut(CHUNK_RECORDS).enumerate() {
            let at = first + c * CHUNK_RECORDS;
            let bytes = &mut buffer[..out.len() * RECORD_BYTES];
            file.read_exact_at(bytes, (at * RECORD_BYTES) as u64)
                .map_err(|e| PlannerError::io(path, e))?;
            part.records(path, at, bytes, out)?;
        }
        Ok(part)
    }

    /// Parses whole records into `out`, the first of which is record
    /// `first` of the file.
    fn records(
        &mut self,
        path: &Path,
        first: usize,
        bytes: &[u8],
        out: &mut [ObjectIndex],
    ) -> Result<()> {
        for ((k, record), slot) in bytes.chunks_exact(RECORD_BYTES).enumerate().zip(out) {
            let i = first + k;
            let id = u64::from_le_bytes(record[4..12].try_into().unwrap());
            let size = u32::from_le_bytes(record[12..16].try_into().unwrap());
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
            let o = self.intern(id, size).map_err(|first_size| {
                bad(format!(
                    "object {id} changes size from {first_size} to {size} bytes"
                ))
            })?;
            self.counts[o as usize] += 1;
            *slot = o;
        }
        Ok(())
    }

    /// Object `id`'s number, the next one where it is new; `Err` with its
    /// first size where it had another.
    #[inline]
    fn intern(&mut self, id: u64, size: u32) -> std::result::Result<ObjectIndex, u32> {
        let next = self.ids.len() as u32;
        let (o, first_size) = if id < SMALL_IDS {
            let at = id as usize;
            if at >= self.small.len() {
                self.small.resize(at + 1, (NOT_SEEN, 0));
            }
            let slot = &mut self.small[at];
            if slot.0 == NOT_SEEN {
                *slot = (next, size);
            }
            *slot
        } else {
            *self.dense.entry(id).or_insert((next, size))
        };
        if o == next {
            self.ids.push(id);
            self.sizes.push(size);
            self.counts.push(0);
        } else if first_size != size {
            return Err(first_size);
        }
        Ok(o)
    }

    /// Takes in the objects of `later`, a part read after every part taken
    /// in so far: its objects that are new, in their order of first
    /// appearance, get the next numbers. Returns each of its objects'
    /// number here; `None` where one has another size here.
    fn absorb(&mut self, later: &Part) -> Option<Vec<ObjectIndex>> {
        later
            .ids
            .iter()
            .zip(&later.sizes)
            .map(|(&id, &size)| self.intern(id, size).ok())
            .collect()
    }
}

/// Writes `stream` as an oracleGeneral file that [`read_oracle_general`]
/// reads back as the same stream: object `o` is id `o`, the time is the
/// request's index and `next_access` the index of the object's next request
/// (-1: none), as libCacheSim's oracle policies expect. For generated
/// traces (`examples/oracle_trace.rs`).
pub fn write_oracle_general(path: &Path, stream: &Stream) -> Result<()> {
    let mut bytes = Vec::with_capacity(stream.requests.len() * RECORD_BYTES);
    for (i, (&o, &next)) in stream.requests.iter().zip(stream.next_access()).enumerate() {
        let size = u32::try_from(stream.sizes_bytes[o as usize]).map_err(|_| {
            PlannerError::input(
                path,
                format!("request {i}"),
                format!(
                    "object {o} has {} bytes, more than an oracleGeneral record holds",
                    stream.sizes_bytes[o as usize]
                ),
                "give objects below 4 GiB",
            )
        })?;
        let next = if next == NEVER { -1 } else { next as i64 };
        bytes.extend((i as u32).to_le_bytes());
        bytes.extend(u64::from(o).to_le_bytes());
        bytes.extend(size.to_le_bytes());
        bytes.extend(next.to_le_bytes());
    }
    write_atomic(path, &bytes)
}

/// A folded multiply (the full 128-bit product of the id and an odd
/// constant, its halves xored): ids are hashed once per request, so the hash
/// must cost a cycle or two, and folding the high half in makes the low
/// bits hashbrown indexes by depend on every bit of the id (a plain
/// multiply would put ids that are multiples of a power of two, such as
/// block addresses, in a few buckets).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, id: u64) {
        let product = u128::from(self.0 ^ id) * 0x9e37_79b9_7f4a_7c15;
        self.0 = product as u64 ^ (product >> 64) as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
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
        assert_eq!(s.next_access()[0], 2);
    }

    #[test]
    fn large_and_small_ids_share_one_numbering() {
        // Ids below 2^16 are looked up by index, the others hashed: in
        // order of first appearance 1<<40, 3, 70000, 3, 1<<40 are objects
        // 0 1 2 1 0, and a size change is caught on both paths.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let big = 1u64 << 40;
        let trace = [(big, 5), (3, 8), (70_000, 2), (3, 8), (big, 5)];
        let bytes: Vec<u8> = trace.iter().flat_map(|&(id, s)| record(id, s)).collect();
        std::fs::write(&path, bytes).unwrap();
        let s = read_oracle_general(&path).unwrap();
        assert_eq!(s.requests, vec![0, 1, 2, 1, 0]);
        assert_eq!(s.sizes_bytes, vec![5, 8, 2]);
        // The second request of id 3 (record 3), then of 1<<40 (record 4).
        for (at, id) in [(3, 3u64), (4, big)] {
            let mut trace = trace;
            trace[at].1 = 9;
            let bytes: Vec<u8> = trace.iter().flat_map(|&(id, s)| record(id, s)).collect();
            std::fs::write(&path, bytes).unwrap();
            let e = read_oracle_general(&path).unwrap_err().to_string();
            assert!(e.contains(&format!("object {id} changes size")), "{e}");
        }
    }

    #[test]
    fn written_traces_read_back_with_libcachesim_next_accesses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let stream = Stream::new(vec![5, 8, 3], vec![0, 3], vec![1, 0, 1, 2], 4);
        write_oracle_general(&path, &stream).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let next: Vec<i64> = bytes
            .chunks_exact(RECORD_BYTES)
            .map(|r| i64::from_le_bytes(r[16..24].try_into().unwrap()))
            .collect();
        assert_eq!(next, vec![2, -1, -1, -1]);
        let back = read_oracle_general(&path).unwrap();
        // Ids 1 0 1 2 become dense in order of first appearance: 0 1 0 2.
        assert_eq!(back.requests, vec![0, 1, 0, 2]);
        assert_eq!(back.sizes_bytes, vec![8, 5, 3]);
    }

    #[test]
    fn records_past_the_first_window_are_read_and_named() {
        // One record more than a window (24 MiB): the last one lies in the
        // second window and changes its object's size.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let n = WINDOW_RECORDS + 1;
        let requests: Vec<u32> = (0..n as u32).map(|i| i % 7).collect();
        let stream = Stream::new(vec![5; 7], vec![0, 7], requests.clone(), n as u64);
        write_oracle_general(&path, &stream).unwrap();
        assert_eq!(read_oracle_general(&path).unwrap().requests, requests);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(n - 1) * RECORD_BYTES + 12] = 6;
        std::fs::write(&path, &bytes).unwrap();
        let e = read_oracle_general(&path).unwrap_err().to_string();
        assert!(
            e.contains(&format!("record {}", n - 1)) && e.contains("from 5 to 6"),
            "{e}"
        );
    }

    /// A trace of one window of ids 0 10 20 30 40 over and over (4 bytes
    /// each), then `tail` in a second window.
    fn two_windows(path: &Path, tail: &[(u64, u32)]) -> usize {
        let mut bytes: Vec<u8> = (0..WINDOW_RECORDS as u64)
            .flat_map(|i| record(i % 5 * 10, 4))
            .collect();
        bytes.extend(tail.iter().flat_map(|&(id, size)| record(id, size)));
        std::fs::write(path, &bytes).unwrap();
        bytes.len()
    }

    #[test]
    fn parts_read_side_by_side_get_the_numbers_of_one_pass() {
        // By hand: the first window numbers 0 10 20 30 40 as 0..5; the
        // second window's new ids, in order of first appearance, 99 77 55,
        // go on as 5 6 7, and its old ones keep theirs.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let tail = [(99, 4), (20, 4), (77, 4), (99, 4), (0, 4), (55, 4)];
        let len = two_windows(&path, &tail);
        let file = std::fs::File::open(&path).unwrap();
        for parts in [1, 2] {
            let s = read_parts(&file, &path, len, parts).unwrap().unwrap();
            assert_eq!(s.requests.len(), WINDOW_RECORDS + tail.len());
            assert_eq!(s.requests[..7], [0, 1, 2, 3, 4, 0, 1]);
            assert_eq!(s.requests[WINDOW_RECORDS..], [5, 2, 6, 5, 0, 7]);
            assert_eq!(s.sizes_bytes, vec![4; 8]);
            // The counts the parts took while parsing: 2^20 = 5 x 209,715
            // + 1 records cycle the first window's five ids (id 0 once
            // more), then the tail's.
            let first = 209_715;
            let want = [first + 2, first, first + 1, first, first, 2, 1, 1];
            assert_eq!(s.counts(), want, "{parts} parts");
        }
    }

    #[test]
    fn a_problem_in_a_later_part_is_named_as_one_pass_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        // Object 10 has 4 bytes in the first window and 5 in the second:
        // the second part alone cannot see it, the merge declines, and one
        // pass names the record.
        let len = two_windows(&path, &[(7, 4), (10, 5)]);
        let file = std::fs::File::open(&path).unwrap();
        assert!(read_parts(&file, &path, len, 2).unwrap().is_none());
        let e = read_oracle_general(&path).unwrap_err().to_string();
        let at = format!("record {}", WINDOW_RECORDS + 1);
        assert!(e.contains(&at) && e.contains("from 4 to 5"), "{e}");
        // A size-0 record after an object that changes size: one pass
        // names the first of the two, whichever part found which.
        let len = two_windows(&path, &[(10, 5), (8, 0)]);
        let file = std::fs::File::open(&path).unwrap();
        let e = read_parts(&file, &path, len, 2).unwrap_err().to_string();
        assert!(e.contains("size 0"), "{e}");
        let e = read_oracle_general(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("record {WINDOW_RECORDS} ")), "{e}");
        assert!(e.contains("from 4 to 5"), "{e}");
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

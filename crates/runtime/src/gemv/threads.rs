//! The CPU kernel's threads: one pool a NUMA node, each thread pinned to
//! one of its cores, and the rows cut into pieces of about equal bytes.

use super::{Layout, PackedView, QuantizedInput};
use rayon::prelude::*;

/// The CPU kernel on the cores of one NUMA node: one thread per CPU
/// given, each pinned to it, kept for a whole run so that a stage pays one
/// fork-join, not thread starts.
pub struct NodeThreads {
    pool: rayon::ThreadPool,
}

impl NodeThreads {
    pub fn new(cpus: &[u32]) -> Result<NodeThreads, rayon::ThreadPoolBuildError> {
        let pinned = cpus.to_vec();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cpus.len().max(1))
            .start_handler(move |t| {
                if let Some(&cpu) = pinned.get(t) {
                    // Unpinned where refused: still a thread of the node.
                    pin_to_cpu(cpu);
                }
            })
            .build()?;
        Ok(NodeThreads { pool })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// `y = W x` for every `(W, x)` of `work`, the outputs one after
    /// another in `y` (as long as all their rows): one synchronisation for
    /// the whole list, as an engine runs a stage. Each output is one row's
    /// dot product, so `y` does not depend on the split (`row_pieces`).
    pub fn gemv(&self, work: &[(PackedView, &QuantizedInput)], y: &mut [f32]) {
        let mut pieces = Vec::new();
        let mut rest = y;
        for ((m, x), rows) in work.iter().zip(row_pieces(work, self.threads())) {
            let (mut mine, tail) = std::mem::take(&mut rest).split_at_mut(m.rows);
            rest = tail;
            let mut first = 0;
            for len in rows {
                let (out, left) = std::mem::take(&mut mine).split_at_mut(len);
                mine = left;
                pieces.push((m, *x, first, out));
                first += len;
            }
        }
        // One job a piece: rayon would otherwise fold runs of consecutive
        // pieces on one thread, and a stage whose first matrix is large
        // (a shared expert before the routed ones) then waits on the one
        // thread that holds all of it.
        self.pool.install(|| {
            pieces
                .into_par_iter()
                .with_max_len(1)
                .for_each(|(m, x, first, out)| m.rows_into(x, first, out))
        });
    }
}

/// Pins the calling thread to `cpu`; false where the kernel refuses.
fn pin_to_cpu(cpu: u32) -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set, and `cpu` is
    // checked against the set's size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu as usize >= 8 * std::mem::size_of_val(&set) {
        return false;
    }
    unsafe {
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
    }
}

/// The most bytes of one piece of a GEMV: small enough that the pieces of
/// a large matrix spread over every thread and a slow core holds up a
/// stage by at most one piece, large enough that a piece's job costs
/// little beside its streaming (256 KiB at ~2 GB/s a core is ~130 us).
const PIECE_BYTES: usize = 256 << 10;

/// Outputs an input-major piece is a multiple of: 64 bytes of each packed
/// input row, a cache line, so that no two threads read the same line.
const INPUT_MAJOR_OUTPUTS: usize = 64;

/// The most outputs of an input-major piece. Its kernel reads each packed
/// input row's bytes for the piece's outputs in one run, one run a row at a
/// stride of all outputs; runs shorter than this cost the memory system
/// more than the `PIECE_BYTES` balance gains (Maverick's int4 gate_up,
/// 16,384 x 5,120, on the 2-core development VM, one core, best of 5: 3.5
/// GB/s in runs of 128 bytes, 5.0 in runs of 1,024; the row-major kernel
/// on the same bytes 6.9).
const INPUT_MAJOR_PIECE_OUTPUTS: usize = 1024;

/// Each matrix of `work` cut into pieces of consecutive rows, their row
/// counts in order: at least `threads` pieces where it has the rows, none
/// over `PIECE_BYTES` unless one row is; input-major, none over
/// `INPUT_MAJOR_PIECE_OUTPUTS` outputs, each a multiple of
/// `INPUT_MAJOR_OUTPUTS` but the last.
pub(super) fn row_pieces(
    work: &[(PackedView, &QuantizedInput)],
    threads: usize,
) -> Vec<Vec<usize>> {
    work.iter()
        .map(|(m, _)| {
            let row_bytes = (m.bytes() as usize / m.rows.max(1)).max(1);
            let share = m.rows.div_ceil(threads.max(1));
            let per_piece = match m.layout {
                Layout::RowMajor => share.min(PIECE_BYTES / row_bytes).max(1),
                Layout::InputMajor => share
                    .min(INPUT_MAJOR_PIECE_OUTPUTS)
                    .next_multiple_of(INPUT_MAJOR_OUTPUTS),
            };
            let mut rows = vec![per_piece; m.rows / per_piece];
            rows.extend((m.rows % per_piece > 0).then_some(m.rows % per_piece));
            rows
        })
        .collect()
}

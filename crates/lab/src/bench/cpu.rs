//! The CPU side of `bench`: a stage's GEMVs on each NUMA node's pinned
//! threads (`gemv::NodeThreads`), one fork-join per node, timed.
//!
//! A stage's residents are gathered into node shares before the token's
//! clock starts (`Kernel::shares`), so that the clock holds the kernel
//! calls and not bench's lists; streamed experts are gathered as they land.
//! Each share writes its own outputs, summed for the checksum after the
//! token (`Outputs::add_to`): summing rows the node's threads just wrote
//! would pull them into the main thread's cache inside the clock. The
//! outputs' buffers are kept from token to token (`Buffers`).

use super::{Tally, Work};
use residency_runtime::gemv::{NodeThreads, PackedView, Packing, QuantizedInput};
use std::collections::BTreeMap;
use std::time::Instant;

/// An object's GEMVs on `node`: its matrices' outputs go to checksum
/// slots from `slot` on; `bytes` are an expert's, in host memory.
pub(super) struct Gemv<'a> {
    pub(super) slot: usize,
    pub(super) node: usize,
    pub(super) work: &'a Work,
    pub(super) bytes: Option<&'a [u8]>,
}

/// One node's share of a stage: its matrices with their inputs, and where
/// their outputs go.
pub(super) struct NodeShare<'a> {
    node: usize,
    matrices: Vec<(PackedView<'a>, &'a QuantizedInput)>,
    /// The bytes its matrices stream.
    bytes: u64,
    pub(super) out: Outputs,
}

/// A share's outputs: per matrix, its checksum slot and rows, one after
/// another in `y`.
pub(super) struct Outputs {
    slots: Vec<usize>,
    rows: Vec<usize>,
    y: Vec<f32>,
}

impl Outputs {
    /// Each matrix's output sum, into its slot of `sums`.
    pub(super) fn add_to(&self, sums: &mut [f64]) {
        let mut at = 0;
        for (&slot, &rows) in self.slots.iter().zip(&self.rows) {
            sums[slot] = self.y[at..at + rows].iter().map(|&v| v as f64).sum();
            at += rows;
        }
    }
}

/// Output buffers kept from token to token. A token's shares take them
/// and give them back after its checksum, so their pages are written in
/// the first tokens only, as an engine's activations are: freed, a token's
/// megabytes of outputs went back to the kernel and came back as fresh
/// pages, faulted in by the GEMV threads inside the clock (about 800 faults
/// a token for a 4-layer DeepSeek-V2-Lite on this VM).
#[derive(Default)]
pub(super) struct Buffers(Vec<Vec<f32>>);

impl Buffers {
    /// `len` zeros in the smallest kept buffer that holds them, else in
    /// the largest, grown.
    fn take(&mut self, len: usize) -> Vec<f32> {
        let fits = (0..self.0.len())
            .filter(|&i| self.0[i].capacity() >= len)
            .min_by_key(|&i| self.0[i].capacity());
        let largest = (0..self.0.len()).max_by_key(|&i| self.0[i].capacity());
        let mut y = fits
            .or(largest)
            .map(|i| self.0.swap_remove(i))
            .unwrap_or_default();
        y.clear();
        y.resize(len, 0.0);
        y
    }

    pub(super) fn give(&mut self, out: Outputs) {
        self.0.push(out.y);
    }
}

/// The CPU kernel of the run: each node's threads, the experts' packing,
/// an input vector per input width.
pub(super) struct Kernel<'a> {
    pub(super) threads: &'a [(NodeThreads, u32)],
    pub(super) packing: Packing,
    pub(super) inputs: &'a BTreeMap<usize, QuantizedInput>,
}

impl<'a> Kernel<'a> {
    /// `list` gathered by node, nodes in order, each with room for its
    /// outputs; nodes with nothing to compute are left out.
    pub(super) fn shares(&self, list: &[Gemv<'a>], buffers: &mut Buffers) -> Vec<NodeShare<'a>> {
        let (packing, inputs) = (self.packing, self.inputs);
        let mut shares = Vec::new();
        for node in 0..self.threads.len() {
            let mut matrices = Vec::new();
            let mut slots = Vec::new();
            for g in list.iter().filter(|g| g.node == node) {
                match (g.work, g.bytes) {
                    (Work::Generated(m), _) => matrices.push((m.view(), &inputs[&m.cols])),
                    (Work::Expert { at, .. }, Some(bytes)) => matrices.extend(
                        at.iter()
                            .map(|p| (p.view(packing, bytes), &inputs[&p.cols])),
                    ),
                    _ => continue,
                }
                slots.extend(g.slot..g.slot + g.work.outputs());
            }
            if matrices.is_empty() {
                continue;
            }
            let rows: Vec<usize> = matrices.iter().map(|(m, _)| m.rows).collect();
            let y = buffers.take(rows.iter().sum());
            shares.push(NodeShare {
                node,
                bytes: matrices.iter().map(|(m, _)| m.bytes()).sum(),
                matrices,
                out: Outputs { slots, rows, y },
            });
        }
        shares
    }

    /// Runs each share as one `NodeThreads::gemv` on its node, timing it
    /// and tallying its bytes. Returns the seconds spent inside the kernel
    /// calls.
    pub(super) fn run(&self, shares: &mut [NodeShare], total: &mut Tally, kind: usize) -> f64 {
        let mut inside = 0.0;
        for share in shares {
            let n = share.node;
            let t = Instant::now();
            self.threads[n].0.gemv(&share.matrices, &mut share.out.y);
            let seconds = t.elapsed().as_secs_f64();
            total.cpu_seconds[n] += seconds;
            inside += seconds;
            total.cpu_bytes[n] += share.bytes as f64;
            total.stage_bytes[kind] += share.bytes as f64;
        }
        inside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(y: Vec<f32>) -> Outputs {
        Outputs {
            slots: vec![],
            rows: vec![],
            y,
        }
    }

    #[test]
    fn a_token_s_outputs_reuse_the_kept_buffers() {
        let mut buffers = Buffers::default();
        let (small, large) = (vec![1f32; 100], vec![2f32; 1000]);
        let small_at = small.as_ptr();
        buffers.give(outputs(large));
        buffers.give(outputs(small));
        // 80 fit both: the smaller is taken, zeroed, its memory the same.
        let y = buffers.take(80);
        assert_eq!((y.as_ptr(), y.len()), (small_at, 80));
        assert!(y.iter().all(|&v| v == 0.0));
        // 2000 fit neither: the largest is grown; nothing is left.
        let y = buffers.take(2000);
        assert_eq!(y.len(), 2000);
        assert!(y.iter().all(|&v| v == 0.0));
        assert!(buffers.0.is_empty());
        // None kept: a new one.
        assert_eq!(buffers.take(5), vec![0f32; 5]);
    }
}

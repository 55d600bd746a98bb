//! The CPU side of `bench`: a stage's GEMVs on each NUMA node's pinned
//! threads (`gemv::NodeThreads`), one fork-join per node, timed.
//!
//! A stage's residents are gathered into node shares before the token's
//! clock starts (`Kernel::shares`), so that the clock holds the kernel
//! calls and not bench's lists; streamed experts are gathered as they land.

use super::{Tally, Work};
use crate::gemv::{NodeThreads, PackedView, Packing, QuantizedInput};
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

/// One node's share of a stage: its matrices with their inputs, and the
/// checksum slot of each matrix.
pub(super) struct NodeShare<'a> {
    node: usize,
    matrices: Vec<(PackedView<'a>, &'a QuantizedInput)>,
    slots: Vec<usize>,
}

/// The CPU kernel of the run: each node's threads, the experts' packing,
/// an input vector per input width.
pub(super) struct Kernel<'a> {
    pub(super) threads: &'a [(NodeThreads, u32)],
    pub(super) packing: Packing,
    pub(super) inputs: &'a BTreeMap<usize, QuantizedInput>,
}

impl<'a> Kernel<'a> {
    /// `list` gathered by node, nodes in order; nodes with nothing to
    /// compute are left out.
    pub(super) fn shares(&self, list: &[Gemv<'a>]) -> Vec<NodeShare<'a>> {
        let (packing, inputs) = (self.packing, self.inputs);
        let mut shares = Vec::new();
        for node in 0..self.threads.len() {
            let mut share = NodeShare {
                node,
                matrices: Vec::new(),
                slots: Vec::new(),
            };
            for g in list.iter().filter(|g| g.node == node) {
                match (g.work, g.bytes) {
                    (Work::Generated(m), _) => share.matrices.push((m.view(), &inputs[&m.cols])),
                    (Work::Expert { at, .. }, Some(bytes)) => share.matrices.extend(
                        at.iter()
                            .map(|p| (p.view(packing, bytes), &inputs[&p.cols])),
                    ),
                    _ => continue,
                }
                share.slots.extend(g.slot..g.slot + g.work.outputs());
            }
            if !share.matrices.is_empty() {
                shares.push(share);
            }
        }
        shares
    }

    /// Runs each share as one `NodeThreads::gemv` on its node, timing it;
    /// each matrix's output sum goes to its slot of `sums`. Returns the
    /// seconds spent inside the kernel calls.
    pub(super) fn run(
        &self,
        shares: &[NodeShare],
        sums: &mut [f64],
        total: &mut Tally,
        kind: usize,
        y: &mut Vec<f32>,
    ) -> f64 {
        let mut inside = 0.0;
        for share in shares {
            let n = share.node;
            y.resize(share.matrices.iter().map(|(m, _)| m.rows).sum(), 0f32);
            let t = Instant::now();
            self.threads[n].0.gemv(&share.matrices, y);
            let seconds = t.elapsed().as_secs_f64();
            total.cpu_seconds[n] += seconds;
            inside += seconds;
            let mut at = 0;
            for (&slot, (m, _)) in share.slots.iter().zip(&share.matrices) {
                sums[slot] = y[at..at + m.rows].iter().map(|&v| v as f64).sum();
                at += m.rows;
                total.cpu_bytes[n] += m.bytes() as f64;
                total.stage_bytes[kind] += m.bytes() as f64;
            }
        }
        inside
    }
}

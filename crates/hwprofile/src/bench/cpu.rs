//! The CPU side of `bench`: a stage's GEMVs on each NUMA node's pinned
//! threads (`gemv::NodeThreads`), one fork-join per node, timed.

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

/// The CPU kernel of the run: each node's threads, the experts' packing,
/// an input vector per input width.
pub(super) struct Kernel<'a> {
    pub(super) threads: &'a [(NodeThreads, u32)],
    pub(super) packing: Packing,
    pub(super) inputs: &'a BTreeMap<usize, QuantizedInput>,
}

impl Kernel<'_> {
    /// Runs `list` node by node, each node's share as one
    /// `NodeThreads::gemv`, timing it; each matrix's output sum goes to its
    /// slot of `sums`.
    pub(super) fn run(
        &self,
        list: &[Gemv],
        sums: &mut [f64],
        total: &mut Tally,
        kind: usize,
        y: &mut Vec<f32>,
    ) {
        let (packing, inputs) = (self.packing, self.inputs);
        for (n, (node_threads, _)) in self.threads.iter().enumerate() {
            let mut slots = Vec::new();
            let mut matrices: Vec<(PackedView, &QuantizedInput)> = Vec::new();
            for g in list.iter().filter(|g| g.node == n) {
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
            y.resize(matrices.iter().map(|(m, _)| m.rows).sum(), 0f32);
            let t = Instant::now();
            node_threads.gemv(&matrices, y);
            total.cpu_seconds[n] += t.elapsed().as_secs_f64();
            let mut at = 0;
            for (slot, (m, _)) in slots.into_iter().zip(&matrices) {
                sums[slot] = y[at..at + m.rows].iter().map(|&v| v as f64).sum();
                at += m.rows;
                total.cpu_bytes[n] += m.bytes() as f64;
                total.stage_bytes[kind] += m.bytes() as f64;
            }
        }
    }
}

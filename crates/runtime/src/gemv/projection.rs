//! Where a checkpoint's expert projections are: their tensors' specs,
//! and each projection's rows as packed bytes in a file or a host pool.

use super::{Layout, PackedView, Packing};
use crate::checkpoint::format::FUSED_SCALES_SUFFIX;
use crate::checkpoint::{family, Checkpoint, Extent, TensorSpec};
use std::collections::BTreeMap;
use std::ops::Range;

// An expert object's projections, as a checkpoint lays them out: what
// `calibrate` reads from the shards, and what `bench` and `replay` find
// in the bytes the store holds.

/// One projection of an expert in a checkpoint: its weights and scales.
pub struct Projection {
    pub weights: Extent,
    pub scales: Extent,
    /// Outputs.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    pub layout: Layout,
}

/// Every tensor of the checkpoint's family and geometry, by name.
pub fn tensor_specs(checkpoint: &Checkpoint) -> BTreeMap<String, TensorSpec> {
    family::tensors(&checkpoint.config)
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect()
}

/// The packed projections among one object's extents, their shapes from
/// the family's `specs`: each `<module>.weight` with its `<module>.scales`
/// (`[rows, packed cols]`, row-major), and each slice of a fused parameter
/// `<param>` with its `<param>_scales` (`[experts, packed cols, rows]`:
/// the expert's slice is input-major).
pub fn projections(
    extents: &[Extent],
    specs: &BTreeMap<String, TensorSpec>,
    packing: Packing,
) -> Vec<Projection> {
    let packed = |features: usize| features * 8 / packing.bits as usize;
    extents
        .iter()
        .filter_map(|w| {
            let shape = &specs.get(&w.tensor)?.shape;
            let (scales, rows, cols, layout) = match w.tensor.strip_suffix(".weight") {
                Some(module) => (
                    format!("{module}.scales"),
                    shape[0],
                    packed(shape[1]),
                    Layout::RowMajor,
                ),
                None if shape.len() == 3 => (
                    format!("{}{FUSED_SCALES_SUFFIX}", w.tensor),
                    shape[2],
                    packed(shape[1]),
                    Layout::InputMajor,
                ),
                None => return None,
            };
            let scales = extents.iter().find(|s| s.tensor == scales)?;
            Some(Projection {
                weights: w.clone(),
                scales: scales.clone(),
                rows,
                cols,
                layout,
            })
        })
        .collect()
}

/// Where one projection lies in an expert object's bytes (its extents one
/// after another, as the store's loader reads them), and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionAt {
    pub weights: Range<usize>,
    pub scales: Range<usize>,
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

impl ProjectionAt {
    /// The projection in `bytes`, the object's.
    pub fn view<'a>(&self, packing: Packing, bytes: &'a [u8]) -> PackedView<'a> {
        PackedView {
            packing,
            layout: self.layout,
            cols: self.cols,
            rows: self.rows,
            weights: &bytes[self.weights.clone()],
            scales: &bytes[self.scales.clone()],
        }
    }
}

/// The packed projections of an object whose bytes are `extents`, placed
/// in those bytes.
pub fn projections_at(
    extents: &[Extent],
    specs: &BTreeMap<String, TensorSpec>,
    packing: Packing,
) -> Vec<ProjectionAt> {
    let offset = |tensor: &str| {
        let i = extents.iter().position(|e| e.tensor == tensor).unwrap_or(0);
        extents[..i].iter().map(|e| e.len as usize).sum::<usize>()
    };
    projections(extents, specs, packing)
        .into_iter()
        .map(|p| {
            let (w, s) = (offset(&p.weights.tensor), offset(&p.scales.tensor));
            ProjectionAt {
                weights: w..w + p.weights.len as usize,
                scales: s..s + p.scales.len as usize,
                rows: p.rows,
                cols: p.cols,
                layout: p.layout,
            }
        })
        .collect()
}

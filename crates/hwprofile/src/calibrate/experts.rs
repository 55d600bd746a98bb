//! The expert bytes the GEMV measurements stream: a checkpoint's packed
//! experts (read from its shards), else experts generated in the model's
//! tier formats (int4 where a format is neither int4 nor int8), and a
//! seeded input vector for each matrix.

use super::{CalibrateOptions, FALLBACK_INT4_GROUP};
use crate::gemv::{
    projections, tensor_specs, Layout, PackedRows, PackedView, Packing, Projection, QuantizedInput,
};
use crate::ProfileError;
use residency_core::model::{FormatSize, Model};
use residency_formats::inputs::defaults;
use residency_runtime::checkpoint::{Checkpoint, Extent};
use residency_runtime::storage::{AlignedSlab, HostPool};
use std::collections::BTreeMap;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A seeded input vector for each matrix.
pub(super) fn inputs_for(rows: &[PackedRows]) -> Vec<QuantizedInput> {
    rows.iter()
        .enumerate()
        .map(|(i, m)| QuantizedInput::seeded(m.cols, m.packing, 11 + i as u64))
        .collect()
}

/// Where the expert bytes timed come from: a checkpoint's experts, or
/// generated ones of a model's geometry.
pub(super) struct ExpertSource {
    /// For comments: `generated experts of DeepSeek-V2-Lite`.
    pub(super) label: String,
    /// (rows, cols) of each projection of one expert.
    pub(super) shapes: Vec<(usize, usize)>,
    /// Experts a token routes to in each layer: the experts a stage runs.
    pub(super) top_k: usize,
    pub(super) cpu: Packing,
    pub(super) gpu: Packing,
    /// The checkpoint's experts, each a list of projections, and the
    /// checkpoint (its shards, and its objects for the store's loader).
    pub(super) checkpoint: Option<(Vec<Vec<Projection>>, Checkpoint)>,
}

impl ExpertSource {
    pub(super) fn new(options: &CalibrateOptions) -> Result<ExpertSource, ProfileError> {
        if let Some(dir) = &options.checkpoint {
            let checkpoint = Checkpoint::open(dir)?;
            if let Some(packing) = Packing::of(checkpoint.config.format) {
                return ExpertSource::of_checkpoint(checkpoint, packing);
            }
            // BF16 experts: the kernels run packed formats, so generate
            // int4 experts of the checkpoint's geometry.
            let int4 = Packing {
                bits: 4,
                group: FALLBACK_INT4_GROUP,
            };
            let c = &checkpoint.config;
            return Ok(ExpertSource {
                label: format!(
                    "generated experts of {}'s geometry (its experts are BF16)",
                    dir.display()
                ),
                shapes: expert_shapes(c.hidden, c.expert_intermediate),
                top_k: c.top_k,
                cpu: int4,
                gpu: int4,
                checkpoint: None,
            });
        }
        let default_model;
        let model = match &options.model {
            Some(m) => m,
            None => {
                default_model =
                    Model::from_yaml_str(defaults::MODEL, Path::new(defaults::MODEL_NAME))?;
                &default_model
            }
        };
        let d = &model.description;
        let tier = |name: &str| match d.formats.get(name) {
            Some(&FormatSize::Packed { bits, group }) if bits == 4 || bits == 8 => Packing {
                bits,
                group: group as usize,
            },
            _ => Packing {
                bits: 4,
                group: FALLBACK_INT4_GROUP,
            },
        };
        Ok(ExpertSource {
            label: format!("generated experts of {}", model.name()),
            shapes: expert_shapes(d.hidden as usize, d.expert_intermediate as usize),
            top_k: d.top_k,
            cpu: tier(&d.tiers.ram),
            gpu: tier(&d.tiers.gpu),
            checkpoint: None,
        })
    }

    fn of_checkpoint(
        checkpoint: Checkpoint,
        packing: Packing,
    ) -> Result<ExpertSource, ProfileError> {
        let specs = tensor_specs(&checkpoint);
        let experts: Vec<Vec<Projection>> = checkpoint
            .objects
            .iter()
            .filter(|(key, _)| matches!(key, residency_runtime::identity::ObjectKey::Expert { .. }))
            .map(|(_, extents)| {
                // Calibration stacks experts' rows into one matrix a width,
                // which only row-major projections are: Llama-4's fused
                // (input-major) slices are not timed here.
                let mut ps = projections(extents, &specs, packing);
                ps.retain(|p| p.layout == Layout::RowMajor);
                ps
            })
            .collect();
        let shapes: Vec<(usize, usize)> = experts
            .first()
            .map(|e| e.iter().map(|p| (p.rows, p.cols)).collect())
            .unwrap_or_default();
        if shapes.is_empty() {
            return Err(ProfileError::input(
                &checkpoint.dir,
                "has no packed row-major expert weights with their scales (a Llama-4 expert's fused slices are input-major, which calibration does not stack)",
                "give a checkpoint with int8 or int4 experts of their own tensors (gen-checkpoint --dtype int4), or calibrate without a checkpoint (`--model`: generated experts of its geometry)",
            ));
        }
        Ok(ExpertSource {
            label: format!("experts of {}", checkpoint.dir.display()),
            shapes,
            top_k: checkpoint.config.top_k,
            cpu: packing,
            gpu: packing,
            checkpoint: Some((experts, checkpoint)),
        })
    }

    /// Rows of one expert's projections that take `cols` inputs (stacked in
    /// one matrix by `expert_rows`).
    pub(super) fn rows_of_width(&self, cols: usize) -> usize {
        self.shapes
            .iter()
            .filter(|s| s.1 == cols)
            .map(|s| s.0)
            .sum()
    }

    /// Bytes of one expert in `packing`: weights and F16 scales.
    pub(super) fn expert_bytes(&self, packing: Packing) -> u64 {
        self.shapes
            .iter()
            .map(|&(rows, cols)| {
                (rows * (packing.row_bytes(cols) + cols / packing.group * 2)) as u64
            })
            .sum()
    }

    /// The GEMVs of experts `experts` of the stacks `expert_rows` made
    /// (`widths`: each stack's input width), one per projection as `bench`
    /// runs a stage: (stack, its rows) each. Expert `e`'s projection lies
    /// at `e` x (its width's rows an expert) + the rows of the projections
    /// of its width before it.
    pub(super) fn stage_parts(
        &self,
        widths: &[usize],
        experts: Range<usize>,
    ) -> Vec<(usize, Range<usize>)> {
        let mut parts = Vec::new();
        for e in experts {
            let mut before = vec![0usize; widths.len()];
            for &(r, c) in &self.shapes {
                let m = widths.iter().position(|&w| w == c).expect("every width");
                let first = e * self.rows_of_width(c) + before[m];
                parts.push((m, first..first + r));
                before[m] += r;
            }
        }
        parts
    }

    /// Experts `experts` of the stacks `rows` (made by `expert_rows`), each
    /// copied into a slab of its own from `pool`, its projections' weights
    /// and scales one after another: the memory `apply` loads a resident
    /// expert into and `bench` computes it from. A slab of an expert's
    /// size is mapped apart from the others and mostly backed by 4 KiB
    /// pages, unlike the stacks, whose gigabyte gets huge pages.
    pub(super) fn expert_slabs(
        &self,
        rows: &[PackedRows],
        experts: Range<usize>,
        pool: &Arc<HostPool>,
    ) -> Vec<ExpertSlab> {
        let widths: Vec<usize> = rows.iter().map(|m| m.cols).collect();
        experts
            .map(|e| {
                let views: Vec<(usize, PackedView)> = self
                    .stage_parts(&widths, e..e + 1)
                    .into_iter()
                    .map(|(m, range)| (m, rows[m].view().rows_range(range)))
                    .collect();
                let bytes = views.iter().map(|(_, v)| v.bytes() as usize).sum();
                let mut slab = AlignedSlab::in_pool(pool, bytes);
                let mut at = 0;
                let mut parts = Vec::new();
                for (m, v) in views {
                    let mut copy = |from: &[u8]| {
                        slab[at..at + from.len()].copy_from_slice(from);
                        at += from.len();
                        at - from.len()..at
                    };
                    let weights = copy(v.weights);
                    let scales = copy(v.scales);
                    parts.push(SlabPart {
                        input: m,
                        rows: v.rows,
                        cols: v.cols,
                        weights,
                        scales,
                    });
                }
                ExpertSlab { slab, parts }
            })
            .collect()
    }

    pub(super) fn shards(&self) -> &[PathBuf] {
        self.checkpoint
            .as_ref()
            .map_or(&[], |(_, c)| c.shards.as_slice())
    }

    /// Whole experts in `packing`, about `target_bytes` of them, as one
    /// matrix per input width: the checkpoint's experts (repeated when it
    /// has fewer), else generated bytes. In `pool`'s memory where given.
    pub(super) fn expert_rows(
        &self,
        packing: Packing,
        target_bytes: u64,
        pool: Option<&Arc<HostPool>>,
    ) -> Result<Vec<PackedRows>, ProfileError> {
        let mut rows_per_expert: BTreeMap<usize, usize> = BTreeMap::new();
        for &(rows, cols) in &self.shapes {
            *rows_per_expert.entry(cols).or_default() += rows;
        }
        let experts = (target_bytes / self.expert_bytes(packing)).max(1) as usize;
        let mut matrices: Vec<PackedRows> = rows_per_expert
            .iter()
            .map(|(&cols, &rows)| PackedRows::zeroed(packing, cols, rows * experts, pool))
            .collect();
        match &self.checkpoint {
            Some((all, _)) => {
                let mut at = vec![0usize; matrices.len()];
                for projection in all.iter().cycle().take(experts).flatten() {
                    let m = rows_per_expert
                        .keys()
                        .position(|&c| c == projection.cols)
                        .expect("shapes of every expert");
                    let weights = read_extent(&projection.weights)?;
                    let scales = read_extent(&projection.scales)?;
                    at[m] += matrices[m].copy_rows(at[m], &weights, &scales);
                }
            }
            None => {
                for (i, m) in matrices.iter_mut().enumerate() {
                    m.fill_generated(0x9e37 + i as u64);
                }
            }
        }
        Ok(matrices)
    }
}

/// One expert in its own slab (`ExpertSource::expert_slabs`).
pub(super) struct ExpertSlab {
    slab: AlignedSlab,
    parts: Vec<SlabPart>,
}

/// A projection in an expert's slab; `input` is its stack's index, whose
/// input vector it takes.
struct SlabPart {
    input: usize,
    rows: usize,
    cols: usize,
    weights: Range<usize>,
    scales: Range<usize>,
}

impl ExpertSlab {
    /// Its projections as GEMVs, each with its stack's input of `inputs`.
    pub(super) fn gemvs<'a>(
        &'a self,
        packing: Packing,
        inputs: &'a [QuantizedInput],
    ) -> impl Iterator<Item = (PackedView<'a>, &'a QuantizedInput)> {
        self.parts.iter().map(move |p| {
            let view = PackedView {
                packing,
                layout: Layout::RowMajor,
                cols: p.cols,
                rows: p.rows,
                weights: &self.slab[p.weights.clone()],
                scales: &self.slab[p.scales.clone()],
            };
            (view, &inputs[p.input])
        })
    }

    pub(super) fn bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| (p.weights.len() + p.scales.len()) as u64)
            .sum()
    }
}

/// One expert's projections: gate and up (`intermediate` rows of `hidden`
/// features each), down (`hidden` rows of `intermediate` features).
fn expert_shapes(hidden: usize, intermediate: usize) -> Vec<(usize, usize)> {
    vec![
        (intermediate, hidden),
        (intermediate, hidden),
        (hidden, intermediate),
    ]
}

pub(super) fn read_extent(e: &Extent) -> Result<Vec<u8>, ProfileError> {
    let mut bytes = vec![0u8; e.len as usize];
    std::fs::File::open(&e.shard)
        .and_then(|f| f.read_exact_at(&mut bytes, e.offset))
        .map_err(|err| {
            ProfileError::input(
                &e.shard,
                format!("reading tensor {} ({err})", e.tensor),
                "check the checkpoint's shards",
            )
        })?;
    Ok(bytes)
}

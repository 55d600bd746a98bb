//! What the serving loop computes for a routed expert, on the bytes the
//! store holds.
//!
//! A packed checkpoint (int4 or int8) is computed as a decoder computes
//! it. Each projection (gate, up, down; Llama-4's fused gate_up and down,
//! input-major slices) goes through the GEMV kernel of `crate::gemv` for
//! its layout, whose PTX twin a GPU tier runs, with the layer's
//! activation quantised once for each width (tiled to the width where it
//! is not `hidden`). BF16 experts are run by no kernel here, so every byte
//! is read and multiplied as rows of `hidden` signed bytes. That is what
//! matters for the data path: every byte is read and multiplied. Either
//! way the outputs depend only on the expert's bytes and the activation,
//! so every placement policy gets the same checksum. A packed expert's
//! rows are cut over the compute threads as `bench` cuts a stage's (one
//! fork-join an expert), since an engine multiplies on every core; each
//! output is one row's product, so the split changes no output.

use crate::checkpoint::Checkpoint;
use crate::gemv::{
    projections_at, tensor_specs, Layout, NodeThreads, PackedView, Packing, ProjectionAt,
    QuantizedInput,
};
use crate::identity::ObjectKey;
use std::collections::BTreeMap;
use std::time::Instant;

/// How the experts of one checkpoint are multiplied.
pub enum ExpertKernel {
    /// Per object, its projections in its bytes; the rows cut over
    /// `threads` where there are some.
    Packed {
        packing: Packing,
        projections: Vec<Vec<ProjectionAt>>,
        threads: Option<NodeThreads>,
    },
    /// Rows of `hidden` signed bytes; `why` the packed kernel cannot run
    /// these experts.
    Bytes { why: String },
}

/// A layer's activation, with its quantised forms for the packed kernel.
pub struct LayerInput<'a> {
    pub x: &'a [f32],
    /// By width: the activation tiled to it and quantised.
    quantized: BTreeMap<usize, QuantizedInput>,
}

impl LayerInput<'_> {
    /// The quantised forms, by width.
    pub fn quantized(&self) -> impl Iterator<Item = (usize, &QuantizedInput)> {
        self.quantized.iter().map(|(&cols, x)| (cols, x))
    }
}

impl ExpertKernel {
    /// The kernel of `checkpoint`'s experts `keys` (the store's objects in
    /// order): packed where its format is packed and the kernel runs every
    /// projection's rows, else bytes. A packed expert is multiplied by
    /// `threads` where given, else on the calling thread alone.
    pub fn of(
        checkpoint: &Checkpoint,
        keys: &[ObjectKey],
        threads: Option<NodeThreads>,
    ) -> ExpertKernel {
        let Some(packing) = Packing::of(checkpoint.config.format) else {
            return ExpertKernel::Bytes {
                why: "the checkpoint's experts are BF16, and the GEMV kernels run int4 and int8; generate it with `--dtype int4`".into(),
            };
        };
        let specs = tensor_specs(checkpoint);
        let projections: Vec<Vec<ProjectionAt>> = keys
            .iter()
            .map(|k| projections_at(checkpoint.extents(k), &specs, packing))
            .collect();
        if projections.iter().any(Vec::is_empty) {
            return ExpertKernel::Bytes {
                why: "an expert holds no packed projection (weights with their scales) the GEMV kernels know".into(),
            };
        }
        if let Some(why) = projections
            .iter()
            .flatten()
            .find_map(|p| packing.unfit_for(p.cols))
        {
            return ExpertKernel::Bytes {
                why: format!("the GEMV kernels cannot run the experts' projections: {why}"),
            };
        }
        ExpertKernel::Packed {
            packing,
            projections,
            threads,
        }
    }

    /// What the replay's notes say it computes with.
    pub fn describe(&self) -> String {
        match self {
            ExpertKernel::Packed {
                packing,
                projections,
                threads,
            } => {
                // Said, since the two layouts' kernels read memory in
                // different orders and so run at different speeds.
                let layout = if projections
                    .iter()
                    .flatten()
                    .any(|p| p.layout == Layout::InputMajor)
                {
                    " (input-major: slices of fused tensors)"
                } else {
                    ""
                };
                format!(
                    "experts computed by the {} GEMV kernel{layout} on {} CPU thread(s), one fork-join an expert",
                    packing.name(),
                    threads.as_ref().map_or(1, NodeThreads::threads)
                )
            }
            ExpertKernel::Bytes { why } => {
                format!("experts computed as rows of signed bytes: {why}")
            }
        }
    }

    /// `x` prepared for every width the experts' projections take.
    pub fn input<'a>(&self, x: &'a [f32]) -> LayerInput<'a> {
        let mut quantized = BTreeMap::new();
        if let ExpertKernel::Packed {
            packing,
            projections,
            ..
        } = self
        {
            for p in projections.iter().flatten() {
                quantized.entry(p.cols).or_insert_with(|| {
                    let tiled: Vec<f32> = (0..p.cols).map(|j| x[j % x.len()]).collect();
                    QuantizedInput::new(&tiled, *packing)
                });
            }
        }
        LayerInput { x, quantized }
    }

    /// Expert `o`'s outputs over its `bytes`: every projection's rows in
    /// turn (packed), or one output a row of bytes.
    pub fn compute(&self, o: usize, bytes: &[u8], input: &LayerInput) -> Vec<f32> {
        match self {
            ExpertKernel::Packed {
                packing,
                projections,
                threads,
            } => {
                let work: Vec<(PackedView, &QuantizedInput)> = projections[o]
                    .iter()
                    .map(|p| (p.view(*packing, bytes), &input.quantized[&p.cols]))
                    .collect();
                let mut y = vec![0f32; work.iter().map(|(m, _)| m.rows).sum()];
                match threads {
                    Some(threads) => threads.gemv(&work, &mut y),
                    None => {
                        let mut rest = y.as_mut_slice();
                        for (m, x) in &work {
                            let (out, tail) = std::mem::take(&mut rest).split_at_mut(m.rows);
                            m.rows_into(x, 0, out);
                            rest = tail;
                        }
                    }
                }
                y
            }
            ExpertKernel::Bytes { .. } => matvec(bytes, input.x),
        }
    }

    /// Bytes a second of [`ExpertKernel::compute`] over `expert_bytes`
    /// bytes laid out as expert 0's, as the compute thread runs a hit:
    /// from RAM. Each trial computes every copy of a span of copies
    /// (`COLD_SPAN_BYTES`, at least `MIN_COPIES`) larger than a last-level
    /// cache, so that each is read from memory, as a resident expert is;
    /// the median of 5 trials after one to warm up. The bytes are written
    /// first (untouched pages would all map the zero page and be read from
    /// cache). One expert computed again and again ran from the cache: on
    /// the H200 machine that read 5.2 GB/s where the run's hits computed
    /// at 2.7-2.9 GB/s, and the simulator hid too little of each read.
    pub fn bytes_per_s(&self, expert_bytes: u64, hidden: usize) -> f64 {
        let copies = (COLD_SPAN_BYTES / expert_bytes.max(1)).clamp(MIN_COPIES, MAX_COPIES) as usize;
        let span = vec![1u8; expert_bytes as usize * copies];
        let x = start_activation(hidden);
        let input = self.input(&x);
        let mut seconds: Vec<f64> = (0..6)
            .map(|_| {
                let started = Instant::now();
                for bytes in span.chunks_exact(expert_bytes as usize) {
                    std::hint::black_box(self.compute(0, std::hint::black_box(bytes), &input));
                }
                started.elapsed().as_secs_f64() / copies as f64
            })
            .skip(1)
            .collect();
        seconds.sort_by(f64::total_cmp);
        expert_bytes as f64 / seconds[seconds.len() / 2].max(1e-9)
    }
}

/// Bytes [`ExpertKernel::bytes_per_s`] spreads its copies over: several
/// times a server's last-level cache (105 MB on a Sapphire Rapids socket).
const COLD_SPAN_BYTES: u64 = 512 << 20;
/// Copies it computes a trial, at least (small experts) and at most.
const MIN_COPIES: u64 = 4;
const MAX_COPIES: u64 = 4096;

/// A deterministic start vector in [-0.5, 0.5).
pub fn start_activation(hidden: usize) -> Vec<f32> {
    (0..hidden)
        .map(|j| ((j * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// `W x` with the expert's bytes read as rows of `x.len()` signed bytes
/// (the packed weights and scales alike: what matters is that every byte
/// is read and multiplied, as a dequantising kernel does).
pub fn matvec(bytes: &[u8], x: &[f32]) -> Vec<f32> {
    const LANES: usize = 16;
    bytes
        .chunks_exact(x.len())
        .map(|row| {
            // Independent partial sums per lane, so the compiler can keep
            // them in vector registers (a single f32 sum is a serial chain).
            let mut acc = [0f32; LANES];
            let (row_body, row_tail) = row.split_at(row.len() / LANES * LANES);
            let (x_body, x_tail) = x.split_at(row_body.len());
            for (w, v) in row_body.chunks_exact(LANES).zip(x_body.chunks_exact(LANES)) {
                for k in 0..LANES {
                    acc[k] += (w[k] as i8) as f32 * v[k];
                }
            }
            let tail: f32 = row_tail
                .iter()
                .zip(x_tail)
                .map(|(&w, &v)| (w as i8) as f32 * v)
                .sum();
            acc.iter().sum::<f32>() + tail
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_by_hand() {
        // Rows [1, -1] and [2, 3] (bytes 1, 255, 2, 3) times x = [0.5, 2]:
        // 0.5 - 2 = -1.5 and 1 + 6 = 7; a trailing partial row is ignored.
        assert_eq!(matvec(&[1, 255, 2, 3, 9], &[0.5, 2.0]), vec![-1.5, 7.0]);
    }

    #[test]
    fn a_packed_expert_is_each_projection_s_rows_on_the_input_of_its_width() {
        // Two int8 projections of group 32 in one object: 2 rows of 32
        // features (weights at 0..64, scales at 64..68), then 1 row of 64
        // features (weights at 68..132, scales at 132..136). Every weight
        // is 1 and every scale the F16 1.0 (0x3c00), and the activation is
        // 1 everywhere, quantised to 127 with a scale of 1/127 a group. A
        // row's output is then its features times 127 x 1/127: 32, 32
        // and 64.
        let packing = Packing { bits: 8, group: 32 };
        let at = |w: std::ops::Range<usize>, s: std::ops::Range<usize>, rows, cols| ProjectionAt {
            weights: w,
            scales: s,
            rows,
            cols,
            layout: crate::gemv::Layout::RowMajor,
        };
        let mut bytes = vec![1u8; 136];
        for s in [64, 66, 132, 134] {
            bytes[s..s + 2].copy_from_slice(&0x3c00u16.to_le_bytes());
        }
        let x = vec![1.0f32; 32];
        // The same by hand on the calling thread and cut over two threads.
        for threads in [None, Some(NodeThreads::new(&[0, 1]).unwrap())] {
            let kernel = ExpertKernel::Packed {
                packing,
                projections: vec![vec![at(0..64, 64..68, 2, 32), at(68..132, 132..136, 1, 64)]],
                threads,
            };
            let y = kernel.compute(0, &bytes, &kernel.input(&x));
            assert_eq!(y.len(), 3);
            for (got, want) in y.iter().zip([32.0, 32.0, 64.0]) {
                assert!((got - want).abs() < 1e-3, "{y:?}");
            }
        }
    }
}

//! Expert GEMV over real packed expert bytes: the kernels `calibrate`
//! times, `bench` runs, and a GPU tier computes with.
//!
//! Weights are in the container layout of `checkpoint::format`: int8 (one
//! signed value a byte) or int4 (input features `2j` and `2j + 1` in the
//! low and high nibbles of one byte, each `q + 8`), with one F16 scale per
//! `group` input features of an output. A projection is laid out one of
//! two ways ([`Layout`]):
//! - row-major, as `nn.Linear.weight`: one output's packed inputs after
//!   another (`[rows, cols / 2]` int4), scales `[rows, cols / group]`;
//! - input-major, as Llama-4's fused `x @ W` tensors (an expert's slice of
//!   `gate_up_proj` or `down_proj`): one packed input row after another,
//!   each across every output (`[cols / 2, rows]` int4, byte `[j][o]`
//!   holding features `2j` and `2j + 1` of output `o`), scales
//!   `[cols / group, rows]`.
//!
//! The input vector is quantised to int8 with one scale per weight group,
//! as engines do (llama.cpp's Q8 activations, Colibri's int8 dots), so
//! each group is an integer dot product scaled once. Both layouts do the
//! same arithmetic (per group an exact integer dot, then `+= (scale_w x
//! scale_x) x dot` in group order), so on the CPU an output is the same
//! float whichever layout holds the matrix.
//!
//! The CPU kernels are portable Rust, compiled a second time for AVX2
//! where the CPU has it (the default x86-64 target has only SSE2, which
//! would time the arithmetic instead of the memory). The row-major one
//! walks a row; the input-major one walks packed input rows across a strip
//! of consecutive outputs, so both read their bytes in the order they lie.
//! The GPU kernels are PTX text (`ptx`: row-major one warp a row;
//! input-major one lane an output, consecutive lanes on consecutive
//! outputs; `dp4a` dot products) that the CUDA driver compiles for the
//! card it runs on: no nvcc, no libnvrtc.

mod cpu;
mod projection;
mod ptx;
mod threads;

use crate::checkpoint::ExpertFormat;
use crate::storage::{AlignedSlab, HostPool};
use cpu::{avx2, columns_portable, row_dot_portable};
pub use projection::{projections, projections_at, tensor_specs, Projection, ProjectionAt};
pub use ptx::{
    kernel_name, outputs_per_block, ptx, GPU_BATCH, GPU_BLOCK_THREADS, GPU_DESCRIPTOR_BYTES,
};
use rayon::prelude::*;
use residency_core::rng::Rng;
use std::ops::Range;
use std::sync::Arc;
pub use threads::NodeThreads;

/// How a projection's packed bytes are laid out (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One output's packed inputs after another (`nn.Linear.weight`).
    #[default]
    RowMajor,
    /// One packed input row after another, across every output (the
    /// `x @ W` slices of Llama-4's fused expert tensors).
    InputMajor,
}

/// A packed format the kernels run: `bits` 8 or 4, one scale per `group`
/// input features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    pub bits: u32,
    pub group: usize,
}

/// Bytes of a row the GPU kernel loads at once, one lane a chunk.
pub const CHUNK_BYTES: usize = 16;

impl Packing {
    /// The packing of a packed format; `None` for BF16.
    pub fn of(format: ExpertFormat) -> Option<Packing> {
        match format {
            ExpertFormat::Packed { bits, group } => Some(Packing {
                bits,
                group: group as usize,
            }),
            ExpertFormat::Bf16 => None,
        }
    }

    pub fn name(self) -> &'static str {
        if self.bits == 8 {
            "int8"
        } else {
            "int4"
        }
    }

    pub fn row_bytes(self, cols: usize) -> usize {
        cols * self.bits as usize / 8
    }

    /// Input features per chunk: 16 for int8, 32 for int4.
    pub fn chunk_features(self) -> usize {
        CHUNK_BYTES * 8 / self.bits as usize
    }

    /// Why the kernels cannot run rows of `cols` features, if they cannot:
    /// groups divide a row and hold a power-of-two number of whole chunks.
    pub fn unfit_for(self, cols: usize) -> Option<String> {
        let chunk = self.chunk_features();
        if !cols.is_multiple_of(self.group) {
            return Some(format!(
                "group {} does not divide {cols} features",
                self.group
            ));
        }
        let chunks = self.group / chunk;
        if !self.group.is_multiple_of(chunk) || !chunks.is_power_of_two() {
            return Some(format!(
                "group {} is not a power-of-two multiple of the kernel's {chunk}-feature chunks",
                self.group
            ));
        }
        None
    }
}

/// Rows of packed linear weights with one input width: several experts'
/// projections stacked, in host memory (a NUMA pool's, where given).
pub struct PackedRows {
    pub packing: Packing,
    pub cols: usize,
    pub rows: usize,
    weights: AlignedSlab,
    scales: AlignedSlab,
}

impl PackedRows {
    /// Zeroed rows, in `pool`'s memory where given.
    pub fn zeroed(
        packing: Packing,
        cols: usize,
        rows: usize,
        pool: Option<&Arc<HostPool>>,
    ) -> PackedRows {
        let slab = |bytes: usize| match pool {
            Some(pool) => AlignedSlab::in_pool(pool, bytes),
            None => AlignedSlab::new(bytes),
        };
        PackedRows {
            weights: slab(rows * packing.row_bytes(cols)),
            scales: slab(rows * cols / packing.group * 2),
            packing,
            cols,
            rows,
        }
    }

    pub fn groups(&self) -> usize {
        self.cols / self.packing.group
    }

    /// The container's bytes: weights and scales.
    pub fn bytes(&self) -> u64 {
        (self.weights().len() + self.scales().len()) as u64
    }

    pub fn weights(&self) -> &[u8] {
        &self.weights[..self.rows * self.packing.row_bytes(self.cols)]
    }

    /// F16 scales, little-endian, `groups()` a row.
    pub fn scales(&self) -> &[u8] {
        &self.scales[..self.rows * self.groups() * 2]
    }

    /// Copies whole rows (a checkpoint tensor's weights and scales) in at
    /// row `at`; returns the rows copied.
    pub fn copy_rows(&mut self, at: usize, weights: &[u8], scales: &[u8]) -> usize {
        let row_bytes = self.packing.row_bytes(self.cols);
        let rows = (weights.len() / row_bytes).min(self.rows - at);
        let scale_bytes = self.groups() * 2;
        self.weights[at * row_bytes..(at + rows) * row_bytes]
            .copy_from_slice(&weights[..rows * row_bytes]);
        self.scales[at * scale_bytes..(at + rows) * scale_bytes]
            .copy_from_slice(&scales[..rows * scale_bytes]);
        rows
    }

    /// Seeded bytes as `gen-checkpoint` writes them: any byte is a valid
    /// packed value; scales are positive F16 between 2^-7 and 2^-4.
    pub fn fill_generated(&mut self, seed: u64) {
        let weight_bytes = self.weights().len();
        let scale_bytes = self.scales().len();
        fill_random(&mut self.weights[..weight_bytes], seed);
        fill_random(&mut self.scales[..scale_bytes], seed ^ 0x5ca1e5);
        for s in self.scales[..scale_bytes].chunks_exact_mut(2) {
            let r = u16::from_le_bytes([s[0], s[1]]);
            let exponent = 8 + ((r >> 10) & 3);
            s.copy_from_slice(&((r & 0x03ff) | (exponent << 10)).to_le_bytes());
        }
    }

    /// The rows as the kernels read them.
    pub fn view(&self) -> PackedView<'_> {
        PackedView {
            packing: self.packing,
            layout: Layout::RowMajor,
            cols: self.cols,
            rows: self.rows,
            weights: self.weights(),
            scales: self.scales(),
        }
    }

    /// `W[row] . x` (`PackedView::row_dot`).
    pub fn row_dot(&self, x: &QuantizedInput, row: usize) -> f32 {
        self.view().row_dot(x, row)
    }

    /// `sum_r W[r] . x` over `rows`: the work of one thread of a GEMV.
    pub fn sum_rows(&self, x: &QuantizedInput, rows: Range<usize>) -> f64 {
        self.view().sum_rows(x, rows)
    }
}

/// Packed rows borrowed from wherever they live (a `PackedRows`, or an
/// expert's projection inside the bytes the executor's store holds), so
/// the kernel runs on resident bytes without copying them.
#[derive(Debug, Clone, Copy)]
pub struct PackedView<'a> {
    pub packing: Packing,
    pub layout: Layout,
    /// Input features.
    pub cols: usize,
    /// Outputs.
    pub rows: usize,
    /// `rows x row_bytes(cols)` bytes, laid out as `layout` says.
    pub weights: &'a [u8],
    /// F16 scales, little-endian, `cols / group` an output, laid out as
    /// `layout` says.
    pub scales: &'a [u8],
}

impl<'a> PackedView<'a> {
    pub fn groups(&self) -> usize {
        self.cols / self.packing.group
    }

    /// The container's bytes: weights and scales.
    pub fn bytes(&self) -> u64 {
        (self.weights.len() + self.scales.len()) as u64
    }

    /// `W[row] . x`: with AVX2 where the CPU has it and a group fills
    /// whole 32-byte vectors, else portably. Input-major, one output's
    /// weights are strided across the matrix: `rows_into` runs many.
    pub fn row_dot(&self, x: &QuantizedInput, row: usize) -> f32 {
        if self.layout == Layout::InputMajor {
            let mut y = [0f32];
            self.rows_into(x, row, &mut y);
            return y[0];
        }
        #[cfg(target_arch = "x86_64")]
        if avx2::fits(self.packing) && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { avx2::row_dot(self, x, row) };
        }
        row_dot_portable(self, x, row)
    }

    /// `sum_r W[r] . x` over `rows`: the work of one thread of a GEMV.
    pub fn sum_rows(&self, x: &QuantizedInput, rows: Range<usize>) -> f64 {
        rows.map(|r| self.row_dot(x, r) as f64).sum()
    }

    /// Rows `range` of a row-major matrix, as a matrix of their own (an
    /// input-major one's outputs are not contiguous: its pieces are cut
    /// by `rows_into`'s `first`).
    pub fn rows_range(&self, range: Range<usize>) -> PackedView<'a> {
        assert_eq!(self.layout, Layout::RowMajor, "rows of a row-major matrix");
        let row_bytes = self.packing.row_bytes(self.cols);
        let scale_bytes = self.groups() * 2;
        PackedView {
            rows: range.len(),
            weights: &self.weights[range.start * row_bytes..range.end * row_bytes],
            scales: &self.scales[range.start * scale_bytes..range.end * scale_bytes],
            ..*self
        }
    }

    /// `y[i] = W[first + i] . x` for every `i` of `y`: one thread's share
    /// of a GEMV's output. Each output is computed on its own, so how the
    /// outputs are cut into calls changes none of them.
    pub fn rows_into(&self, x: &QuantizedInput, first: usize, y: &mut [f32]) {
        match self.layout {
            Layout::RowMajor => {
                for (i, out) in y.iter_mut().enumerate() {
                    *out = self.row_dot(x, first + i);
                }
            }
            Layout::InputMajor => {
                #[cfg(target_arch = "x86_64")]
                if avx2::fits_columns(self.packing)
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
                {
                    // SAFETY: the CPU has AVX2 and F16C (checked just above).
                    return unsafe { avx2::columns(self, x, first, y) };
                }
                columns_portable(self, x, first, y)
            }
        }
    }
}

/// Fills `bytes` with the output of `residency_core::rng::Rng` seeded per
/// 1 MiB piece, in parallel (a calibration buffer is up to a GiB).
pub fn fill_random(bytes: &mut [u8], seed: u64) {
    bytes
        .par_chunks_mut(1 << 20)
        .enumerate()
        .for_each(|(i, piece)| {
            Rng((seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1).fill_bytes(piece);
        });
}

/// An input vector quantised to int8, one scale per weight group.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedInput {
    pub packing: Packing,
    /// The int8 values as two's-complement bytes (as the kernels load
    /// them): for int8 weights the features in order; for int4 the even
    /// features, then the odd ones, so that byte `j`'s nibbles meet
    /// `values[j]` and `values[cols / 2 + j]`.
    pub values: Vec<u8>,
    /// One per weight group.
    pub scales: Vec<f32>,
    /// Per weight group, the sum of its int8 values: the int4 kernels
    /// multiply the stored nibbles (`q + 8`) and subtract 8 times this.
    pub sums: Vec<i32>,
}

impl QuantizedInput {
    pub fn new(x: &[f32], packing: Packing) -> QuantizedInput {
        let cols = x.len();
        let mut q = vec![0i8; cols];
        let mut scales = Vec::with_capacity(cols / packing.group);
        for (g, xs) in x.chunks(packing.group).enumerate() {
            let max = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
            scales.push(scale);
            for (k, v) in xs.iter().enumerate() {
                q[g * packing.group + k] = (v / scale).round() as i8;
            }
        }
        let sums = q
            .chunks(packing.group)
            .map(|g| g.iter().map(|&v| v as i32).sum())
            .collect();
        let values = if packing.bits == 8 {
            q.iter().map(|&v| v as u8).collect()
        } else {
            let even = q.iter().step_by(2);
            let odd = q.iter().skip(1).step_by(2);
            even.chain(odd).map(|&v| v as u8).collect()
        };
        QuantizedInput {
            packing,
            values,
            scales,
            sums,
        }
    }

    /// A seeded input of `cols` features in [-1, 1].
    pub fn seeded(cols: usize, packing: Packing, seed: u64) -> QuantizedInput {
        let mut bytes = vec![0u8; cols * 2];
        fill_random(&mut bytes, seed);
        let x: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as f32 / 32767.5 - 1.0)
            .collect();
        QuantizedInput::new(&x, packing)
    }

    /// Feature `k` as the kernels see it: its int8 value and its scale.
    pub fn feature(&self, k: usize) -> (i8, f32) {
        let cols = self.values.len();
        let at = match self.packing.bits {
            8 => k,
            _ => (k % 2) * cols / 2 + k / 2,
        };
        (self.values[at] as i8, self.scales[k / self.packing.group])
    }

    /// Per chunk of a weight row, what the GPU kernel scales its integer
    /// dot product with: the group's input scale, and the int4 offset
    /// `8 x sum of the chunk's inputs x scale` (the nibbles hold `q + 8`;
    /// 0 for int8).
    pub fn chunk_terms(&self) -> Vec<[f32; 2]> {
        let cols = self.values.len();
        let chunk = self.packing.chunk_features();
        (0..cols / chunk)
            .map(|c| {
                let scale = self.scales[c * chunk / self.packing.group];
                let offset = if self.packing.bits == 8 {
                    0.0
                } else {
                    let bytes = c * CHUNK_BYTES..(c + 1) * CHUNK_BYTES;
                    let sum = |values: &[u8]| values.iter().map(|&v| v as i8 as i32).sum::<i32>();
                    let even = sum(&self.values[bytes.clone()]);
                    let odd = sum(&self.values[cols / 2..][bytes]);
                    8.0 * (even + odd) as f32 * scale
                };
                [scale, offset]
            })
            .collect()
    }
}

/// An IEEE half-precision number as f32 (bit by bit: it runs once a group
/// in the kernel's inner loop).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits & 0x8000) as u32) << 16;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    match exponent {
        0 => {
            let magnitude = mantissa as f32 * (1.0 / 16_777_216.0);
            if sign != 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        e => f32::from_bits(sign | ((e + 112) << 23) | (mantissa << 13)),
    }
}

#[cfg(test)]
pub(crate) mod tests;

//! Expert GEMV over real packed expert bytes: the kernels `calibrate`
//! times, `bench` runs, and a GPU tier computes with.
//!
//! Weights are in the container layout of `checkpoint::format`: int8 (one
//! signed value a byte) or int4 (input feature `2j` in the low nibble of
//! byte `j`, `2j + 1` in the high one, each `q + 8`), rows of one
//! projection after another, and one F16 scale per `group` input features
//! of a row. The input vector is quantised to int8 with one scale per
//! weight group, as engines do (llama.cpp's Q8 activations, Colibri's int8
//! dots), so each group is an integer dot product scaled once.
//!
//! The CPU kernel is portable Rust, compiled a second time for AVX2 where
//! the CPU has it (the default x86-64 target has only SSE2, which would
//! time the arithmetic instead of the memory). The GPU kernel is PTX text
//! (`ptx`, one warp a row, `dp4a` dot products) that the CUDA driver
//! compiles for the card it runs on: no nvcc, no libnvrtc.

use crate::checkpoint::{family, Checkpoint, ExpertFormat, Extent, TensorSpec};
use crate::storage::{AlignedSlab, HostPool};
use rayon::prelude::*;
use residency_core::rng::Rng;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

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
    pub cols: usize,
    pub rows: usize,
    /// `rows x row_bytes(cols)` bytes.
    pub weights: &'a [u8],
    /// F16 scales, little-endian, `cols / group` a row.
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
    /// whole 32-byte vectors, else portably.
    pub fn row_dot(&self, x: &QuantizedInput, row: usize) -> f32 {
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

    /// `y[i] = W[first + i] . x` for every `i` of `y`: one thread's share
    /// of a GEMV's output.
    /// Rows `range` of the matrix, as a matrix of their own.
    pub fn rows_range(&self, range: Range<usize>) -> PackedView<'a> {
        let row_bytes = self.packing.row_bytes(self.cols);
        let scale_bytes = self.groups() * 2;
        PackedView {
            rows: range.len(),
            weights: &self.weights[range.start * row_bytes..range.end * row_bytes],
            scales: &self.scales[range.start * scale_bytes..range.end * scale_bytes],
            ..*self
        }
    }

    pub fn rows_into(&self, x: &QuantizedInput, first: usize, y: &mut [f32]) {
        for (i, out) in y.iter_mut().enumerate() {
            *out = self.row_dot(x, first + i);
        }
    }
}

// An expert object's projections, as a checkpoint lays them out: what
// `calibrate` reads from the shards, and what `bench` and `replay` find
// in the bytes the store holds.

/// One projection of an expert in a checkpoint: its weights and scales.
pub struct Projection {
    pub weights: Extent,
    pub scales: Extent,
    pub rows: usize,
    pub cols: usize,
}

/// Every tensor of the checkpoint's family and geometry, by name.
pub fn tensor_specs(checkpoint: &Checkpoint) -> BTreeMap<String, TensorSpec> {
    family::tensors(&checkpoint.config)
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect()
}

/// The packed projections among one object's extents: each `.weight` with
/// its `.scales`, its shape from the family's `specs`.
pub fn projections(
    extents: &[Extent],
    specs: &BTreeMap<String, TensorSpec>,
    packing: Packing,
) -> Vec<Projection> {
    extents
        .iter()
        .filter_map(|w| {
            let module = w.tensor.strip_suffix(".weight")?;
            let scales = extents
                .iter()
                .find(|s| s.tensor == format!("{module}.scales"))?;
            let shape = &specs.get(&w.tensor)?.shape;
            Some(Projection {
                weights: w.clone(),
                scales: scales.clone(),
                rows: shape[0],
                cols: shape[1] * 8 / packing.bits as usize,
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
}

impl ProjectionAt {
    /// The projection in `bytes`, the object's.
    pub fn view<'a>(&self, packing: Packing, bytes: &'a [u8]) -> PackedView<'a> {
        PackedView {
            packing,
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
            }
        })
        .collect()
}

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

/// Each matrix of `work` cut into pieces of consecutive rows, their row
/// counts in order: at least `threads` pieces where it has the rows, none
/// over `PIECE_BYTES` unless one row is.
fn row_pieces(work: &[(PackedView, &QuantizedInput)], threads: usize) -> Vec<Vec<usize>> {
    work.iter()
        .map(|(m, _)| {
            let row_bytes = (m.bytes() as usize / m.rows.max(1)).max(1);
            let per_piece = m
                .rows
                .div_ceil(threads.max(1))
                .min(PIECE_BYTES / row_bytes)
                .max(1);
            let mut rows = vec![per_piece; m.rows / per_piece];
            rows.extend((m.rows % per_piece > 0).then_some(m.rows % per_piece));
            rows
        })
        .collect()
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

/// `W[row] . x`: per group an integer dot product of the packed values
/// with the int8 inputs, times the group's weight and input scales.
fn row_dot_portable(m: &PackedView, x: &QuantizedInput, row: usize) -> f32 {
    let group = m.packing.group;
    let row_bytes = m.packing.row_bytes(m.cols);
    let weights = &m.weights[row * row_bytes..(row + 1) * row_bytes];
    let scales = &m.scales[row * m.groups() * 2..(row + 1) * m.groups() * 2];
    let mut acc = 0f32;
    for (g, s) in scales.chunks_exact(2).enumerate() {
        let dot: i32 = if m.packing.bits == 8 {
            let w = &weights[g * group..(g + 1) * group];
            let v = &x.values[g * group..(g + 1) * group];
            w.iter()
                .zip(v)
                .map(|(&w, &v)| (w as i8 as i16 * v as i8 as i16) as i32)
                .sum()
        } else {
            let bytes = g * group / 2..(g + 1) * group / 2;
            let w = &weights[bytes.clone()];
            let even = &x.values[bytes.clone()];
            let odd = &x.values[m.cols / 2..][bytes];
            // The nibbles as stored (q + 8), less 8 x the inputs' sum: one
            // subtraction a group instead of two a byte.
            let dot: i32 = w
                .iter()
                .zip(even.iter().zip(odd))
                .map(|(&w, (&e, &o))| {
                    (w & 15) as i32 * e as i8 as i32 + (w >> 4) as i32 * o as i8 as i32
                })
                .sum();
            dot - 8 * x.sums[g]
        };
        acc += f16_to_f32(u16::from_le_bytes([s[0], s[1]])) * x.scales[g] * dot as f32;
    }
    acc
}

/// The kernel with AVX2, as engines write it (llama.cpp's Q4/Q8 dots):
/// `maddubs` multiplies unsigned by signed bytes and adds pairs, `madd`
/// adds pairs again into 32-bit lanes, and each group's lanes are scaled
/// into a float accumulator that is summed once a row. Portable Rust gets
/// a half to a third of this: its dot products are summed across the
/// vector once a group (on the H200 machine's Xeon, one core: 2.4-3.5
/// against 5.9 GB/s, which is what the core's memory stream gives).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{f16_to_f32, PackedView, Packing, QuantizedInput};
    use std::arch::x86_64::*;

    /// Whether a group is whole 32-byte vectors (int4 groups of 64, int8
    /// of 32, 64, 128 ...).
    pub fn fits(packing: Packing) -> bool {
        (packing.group * packing.bits as usize / 8).is_multiple_of(32)
    }

    /// 32 bytes as a vector.
    #[target_feature(enable = "avx2")]
    fn load(bytes: &[u8; 32]) -> __m256i {
        // SAFETY: the reference covers 32 readable bytes; the load has no
        // alignment requirement.
        unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
    }

    fn chunks(bytes: &[u8]) -> impl Iterator<Item = &[u8; 32]> {
        bytes
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32-byte chunks"))
    }

    /// `super::row_dot_portable`, eight lanes at a time.
    #[target_feature(enable = "avx2")]
    pub fn row_dot(m: &PackedView, x: &QuantizedInput, row: usize) -> f32 {
        let group = m.packing.group;
        let group_bytes = group * m.packing.bits as usize / 8;
        let row_bytes = m.packing.row_bytes(m.cols);
        let weights = &m.weights[row * row_bytes..(row + 1) * row_bytes];
        let scales = &m.scales[row * m.groups() * 2..(row + 1) * m.groups() * 2];
        let ones = _mm256_set1_epi16(1);
        let nibble = _mm256_set1_epi8(15);
        let mut acc = _mm256_setzero_ps();
        for (g, s) in scales.chunks_exact(2).enumerate() {
            let w = &weights[g * group_bytes..(g + 1) * group_bytes];
            let mut lanes = _mm256_setzero_si256();
            if m.packing.bits == 8 {
                // Signed by signed: the weights' signs move onto the inputs.
                let v = &x.values[g * group..(g + 1) * group];
                for (w, v) in chunks(w).zip(chunks(v)) {
                    let (w, v) = (load(w), load(v));
                    let pairs =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w));
                    lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, ones));
                }
            } else {
                // The nibbles as stored (q + 8) are unsigned; 8 x the
                // inputs' sum comes off once the group is done.
                let even = &x.values[g * group_bytes..(g + 1) * group_bytes];
                let odd = &x.values[m.cols / 2..][g * group_bytes..(g + 1) * group_bytes];
                for (w, (e, o)) in chunks(w).zip(chunks(even).zip(chunks(odd))) {
                    let w = load(w);
                    let low = _mm256_and_si256(w, nibble);
                    let high = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
                    let pairs = _mm256_add_epi16(
                        _mm256_maddubs_epi16(low, load(e)),
                        _mm256_maddubs_epi16(high, load(o)),
                    );
                    lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, ones));
                }
                lanes =
                    _mm256_sub_epi32(lanes, _mm256_setr_epi32(8 * x.sums[g], 0, 0, 0, 0, 0, 0, 0));
            }
            let scale = f16_to_f32(u16::from_le_bytes([s[0], s[1]])) * x.scales[g];
            acc = _mm256_add_ps(
                acc,
                _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(scale)),
            );
        }
        let mut out = [0f32; 8];
        // SAFETY: `out` is 8 writable floats; the store needs no alignment.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        out.iter().sum()
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

/// The GPU kernels, `gemv_int8` and `gemv_int4`, as PTX text.
///
/// One launch runs the GEMVs of up to `GPU_BATCH` matrices of one packing,
/// as a fused engine runs a layer's experts at once: the parameters are an
/// array of `GPU_DESCRIPTOR_BYTES`-byte descriptors (`GemvLaunch` in
/// `cuda_bench` writes them) and their count. Descriptor `i` takes the
/// blocks from its `first_block` to the next one's; a block finds its
/// descriptor by a scan of the array in parameter space.
///
/// One warp a row (blocks of `GPU_BLOCK_THREADS`); lane `l` takes chunks
/// `l, l + 32, ...` of the row: 16 bytes of weights, the inputs they meet
/// (16 int8 values, or the even and the odd 16 for int4), four `dp4a` (int4:
/// eight, on the low and high nibbles), then `acc += scale_w * (scale_x *
/// dot - offset)` with the chunk's terms (`QuantizedInput::chunk_terms`).
/// A butterfly of shuffles sums the lanes; lane 0 writes `y[row]`.
/// A descriptor: weights, scales, inputs, chunk terms, y (device pointers),
/// rows, chunks a row, groups a row, log2(chunks a group), the byte
/// offset of the odd inputs (int4; 0 for int8), and its first block.
pub fn ptx() -> String {
    const INT8_DOT: &str = "
    dp4a.s32.s32 %r21, %r13, %r17, %r21;
    dp4a.s32.s32 %r21, %r14, %r18, %r21;
    dp4a.s32.s32 %r21, %r15, %r19, %r21;
    dp4a.s32.s32 %r21, %r16, %r20, %r21;";
    let mut int4_dot = String::from(
        "
    add.s64 %rd18, %rd13, %rd10;
    ld.global.nc.v4.u32 {%r22, %r23, %r24, %r25}, [%rd18];",
    );
    for (w, even, odd) in [(13, 17, 22), (14, 18, 23), (15, 19, 24), (16, 20, 25)] {
        int4_dot.push_str(&format!(
            "
    and.b32 %r30, %r{w}, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r30, %r{even}, %r21;
    shr.u32 %r31, %r{w}, 4;
    and.b32 %r31, %r31, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r31, %r{odd}, %r21;"
        ));
    }
    // The butterfly: each step adds the lane `lanes` away, halving the
    // distance until lane 0 holds the warp's sum.
    let sum_lanes: String = [16, 8, 4, 2, 1]
        .iter()
        .map(|lanes| {
            format!(
                "
    mov.b32 %r27, %f1;
    shfl.sync.bfly.b32 %r28, %r27, {lanes}, 31, 0xffffffff;
    mov.b32 %f7, %r28;
    add.f32 %f1, %f1, %f7;"
            )
        })
        .collect();
    let mut text = String::from(".version 6.0\n.target sm_61\n.address_size 64\n");
    for (name, dot) in [("gemv_int8", INT8_DOT), ("gemv_int4", int4_dot.as_str())] {
        let kernel = KERNEL
            .replace("SUM_LANES", &sum_lanes)
            .replace(
                "DESCRIPTORS",
                &(GPU_BATCH * GPU_DESCRIPTOR_BYTES).to_string(),
            )
            .replace("DESCRIPTOR_BYTES", &GPU_DESCRIPTOR_BYTES.to_string());
        text.push_str(&kernel.replace("NAME", name).replace("DOT", dot));
    }
    text
}

/// Threads a block of the GPU kernels (eight warps, eight rows).
pub const GPU_BLOCK_THREADS: u32 = 256;

/// Matrices one launch of the GPU kernels takes at most.
pub const GPU_BATCH: usize = 32;

/// Bytes of one descriptor in the kernels' parameters: five device
/// pointers, six `u32`s, and padding to a multiple of 8.
pub const GPU_DESCRIPTOR_BYTES: usize = 64;

const KERNEL: &str = "
.visible .entry NAME(.param .align 8 .b8 p_desc[DESCRIPTORS], .param .u32 p_count)
{
    .reg .pred %p<3>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<24>;
    .reg .f32 %f<12>;
    .reg .b16 %h<2>;
    mov.u32 %r6, %ctaid.x;
    ld.param.u32 %r32, [p_count];
    mov.u64 %rd20, p_desc;
    mov.u32 %r33, 0;
NAME_find:
    add.u32 %r34, %r33, 1;
    setp.ge.u32 %p1, %r34, %r32;
    @%p1 bra NAME_found;
    mul.wide.u32 %rd21, %r34, DESCRIPTOR_BYTES;
    add.s64 %rd22, %rd20, %rd21;
    ld.param.u32 %r35, [%rd22+60];
    setp.gt.u32 %p1, %r35, %r6;
    @%p1 bra NAME_found;
    mov.u32 %r33, %r34;
    bra NAME_find;
NAME_found:
    mul.wide.u32 %rd21, %r33, DESCRIPTOR_BYTES;
    add.s64 %rd22, %rd20, %rd21;
    ld.param.u64 %rd1, [%rd22];
    ld.param.u64 %rd2, [%rd22+8];
    ld.param.u64 %rd3, [%rd22+16];
    ld.param.u64 %rd4, [%rd22+24];
    ld.param.u64 %rd5, [%rd22+32];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    ld.param.u32 %r1, [%rd22+40];
    ld.param.u32 %r2, [%rd22+44];
    ld.param.u32 %r3, [%rd22+48];
    ld.param.u32 %r4, [%rd22+52];
    ld.param.u32 %r5, [%rd22+56];
    ld.param.u32 %r35, [%rd22+60];
    sub.u32 %r6, %r6, %r35;
    mov.u32 %r7, %ntid.x;
    mov.u32 %r8, %tid.x;
    mad.lo.u32 %r9, %r6, %r7, %r8;
    shr.u32 %r10, %r9, 5;
    and.b32 %r11, %r8, 31;
    setp.ge.u32 %p1, %r10, %r1;
    @%p1 bra NAME_done;
    mul.wide.u32 %rd6, %r10, %r2;
    shl.b64 %rd6, %rd6, 4;
    add.s64 %rd7, %rd1, %rd6;
    mul.wide.u32 %rd8, %r10, %r3;
    shl.b64 %rd8, %rd8, 1;
    add.s64 %rd9, %rd2, %rd8;
    cvt.u64.u32 %rd10, %r5;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r12, %r11;
NAME_loop:
    setp.ge.u32 %p2, %r12, %r2;
    @%p2 bra NAME_reduce;
    mul.wide.u32 %rd11, %r12, 16;
    add.s64 %rd12, %rd7, %rd11;
    ld.global.nc.v4.u32 {%r13, %r14, %r15, %r16}, [%rd12];
    add.s64 %rd13, %rd3, %rd11;
    ld.global.nc.v4.u32 {%r17, %r18, %r19, %r20}, [%rd13];
    mov.u32 %r21, 0;DOT
    shr.u32 %r26, %r12, %r4;
    mul.wide.u32 %rd14, %r26, 2;
    add.s64 %rd15, %rd9, %rd14;
    ld.global.nc.b16 %h1, [%rd15];
    cvt.f32.f16 %f2, %h1;
    mul.wide.u32 %rd16, %r12, 8;
    add.s64 %rd17, %rd4, %rd16;
    ld.global.nc.v2.f32 {%f3, %f4}, [%rd17];
    cvt.rn.f32.s32 %f5, %r21;
    mul.f32 %f6, %f3, %f5;
    sub.f32 %f6, %f6, %f4;
    fma.rn.f32 %f1, %f2, %f6, %f1;
    add.u32 %r12, %r12, 32;
    bra NAME_loop;
NAME_reduce:SUM_LANES
    setp.ne.u32 %p2, %r11, 0;
    @%p2 bra NAME_done;
    mul.wide.u32 %rd18, %r10, 4;
    add.s64 %rd19, %rd5, %rd18;
    st.global.f32 [%rd19], %f1;
NAME_done:
    ret;
}
";

#[cfg(test)]
mod tests;

//! The CPU kernels: one row's dot product with the quantised input
//! (row-major), or a strip of consecutive outputs' (input-major), in
//! portable Rust and compiled a second time for AVX2.

use super::{f16_to_f32, PackedView, QuantizedInput};

/// `W[row] . x`: per group an integer dot product of the packed values
/// with the int8 inputs, times the group's weight and input scales.
pub(super) fn row_dot_portable(m: &PackedView, x: &QuantizedInput, row: usize) -> f32 {
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

/// Outputs an input-major kernel takes at once: a group's packed input
/// rows are read in runs of this many bytes (one a row), long enough for
/// the prefetchers, and the strip's integer dots stay in a stack buffer of
/// 4 KiB (the AVX2 kernel's, with its 16-bit sums, 6 KiB), in L1.
pub(super) const STRIP: usize = 1024;

/// `y[i] = W[first + i] . x` for an input-major matrix: per group, the
/// integer dots of a strip of outputs built one packed input row at a time
/// (that row's bytes for the strip lie one after another), then scaled as
/// `row_dot_portable` scales a group, in the same order, so each output is
/// the float the row-major kernel gives for the same matrix.
pub(super) fn columns_portable(m: &PackedView, x: &QuantizedInput, first: usize, y: &mut [f32]) {
    let outputs = m.rows;
    let packed_rows = m.packing.row_bytes(m.packing.group);
    let mut dots = [0i32; STRIP];
    for (t, y) in y.chunks_mut(STRIP).enumerate() {
        let first = first + t * STRIP;
        let dots = &mut dots[..y.len()];
        y.fill(0.0);
        for g in 0..m.groups() {
            dots.fill(0);
            for j in g * packed_rows..(g + 1) * packed_rows {
                let w = &m.weights[j * outputs + first..][..y.len()];
                if m.packing.bits == 8 {
                    let v = x.values[j] as i8 as i32;
                    for (d, &w) in dots.iter_mut().zip(w) {
                        *d += w as i8 as i32 * v;
                    }
                } else {
                    let e = x.values[j] as i8 as i32;
                    let o = x.values[m.cols / 2 + j] as i8 as i32;
                    for (d, &w) in dots.iter_mut().zip(w) {
                        *d += (w & 15) as i32 * e + (w >> 4) as i32 * o;
                    }
                }
            }
            let offset = if m.packing.bits == 8 {
                0
            } else {
                8 * x.sums[g]
            };
            let scales = &m.scales[(g * outputs + first) * 2..][..y.len() * 2];
            for ((out, &d), s) in y.iter_mut().zip(dots.iter()).zip(scales.chunks_exact(2)) {
                let scale = f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
                *out += scale * x.scales[g] * (d - offset) as f32;
            }
        }
    }
}

/// The kernel with AVX2, as engines write it (llama.cpp's Q4/Q8 dots):
/// `maddubs` multiplies unsigned by signed bytes and adds pairs, `madd`
/// adds pairs again into 32-bit lanes, and each group's lanes are scaled
/// into a float accumulator that is summed once a row. Portable Rust gets
/// a half to a third of this: its dot products are summed across the
/// vector once a group (on the H200 machine's Xeon, one core: 2.4-3.5
/// against 5.9 GB/s, which is what the core's memory stream gives).
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use crate::gemv::{f16_to_f32, PackedView, Packing, QuantizedInput};
    use std::arch::x86_64::*;

    /// Whether a group is whole 32-byte vectors (int4 groups of 64, int8
    /// of 32, 64, 128 ...).
    pub fn fits(packing: Packing) -> bool {
        (packing.group * packing.bits as usize / 8).is_multiple_of(32)
    }

    /// Whether the input-major kernel runs this packing: a group is whole
    /// pairs of packed input rows (int8 takes two rows at once).
    pub fn fits_columns(packing: Packing) -> bool {
        packing.row_bytes(packing.group).is_multiple_of(2)
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

    /// `super::columns_portable`, 32 outputs a vector. Per packed input
    /// row (int4) or pair of rows (int8), each output's two weights are
    /// put beside the two inputs they meet (`unpack`), and `maddubs`
    /// gives each output's two products summed in 16 bits. These add up
    /// in 16 bits for as many rows as cannot overflow (int4: 8 x 2 x 15
    /// x 127 < 2^15; int8: one pair, 2 x 128 x 127), then widen into
    /// 32-bit lanes. A group's dots are scaled as the portable kernel
    /// scales them, so an output is the same float either way; the
    /// outputs past the last whole vector go to the portable kernel.
    #[target_feature(enable = "avx2,f16c")]
    pub fn columns(m: &PackedView, x: &QuantizedInput, first: usize, y: &mut [f32]) {
        let whole = y.len() / 32 * 32;
        let (body, tail) = y.split_at_mut(whole);
        super::columns_portable(m, x, first + whole, tail);
        let outputs = m.rows;
        let int8 = m.packing.bits == 8;
        let packed_rows = m.packing.row_bytes(m.packing.group);
        // Rows a step (int8 pairs them), and steps summed in 16 bits.
        let (step, run) = if int8 { (2, 1) } else { (1, 8) };
        let nibble = _mm256_set1_epi8(15);
        let zero = _mm256_setzero_si256();
        let load_at = |at: usize| load(m.weights[at..at + 32].try_into().expect("32 bytes"));
        // Per 32 outputs: 32-bit dots of outputs 0-7, 8-15, 16-23, 24-31,
        // and 16-bit sums of 0-7 and 16-23, then 8-15 and 24-31.
        let mut dots = [zero; super::STRIP / 8];
        let mut sums = [zero; super::STRIP / 16];
        for (t, y) in body.chunks_mut(super::STRIP).enumerate() {
            let first = first + t * super::STRIP;
            let blocks = y.len() / 32;
            y.fill(0.0);
            for g in 0..m.groups() {
                dots[..4 * blocks].fill(zero);
                sums[..2 * blocks].fill(zero);
                let rows = (g * packed_rows..(g + 1) * packed_rows).step_by(step);
                for (n, j) in rows.enumerate() {
                    // One packed input row (two for int8) across the strip:
                    // bytes one after another.
                    let at = j * outputs + first;
                    // The two inputs the rows meet: features j and j + 1
                    // (int8), 2j and 2j + 1 (int4).
                    let (first_input, second_input) = if int8 {
                        (x.values[j], x.values[j + 1])
                    } else {
                        (x.values[j], x.values[m.cols / 2 + j])
                    };
                    let pair = (second_input as u16) << 8 | first_input as u16;
                    let inputs = _mm256_set1_epi16(pair as i16);
                    let widening = (n + 1) % run == 0 || j + step >= (g + 1) * packed_rows;
                    let strip = dots.chunks_exact_mut(4).zip(sums.chunks_exact_mut(2));
                    for (b, (dots, sums)) in strip.take(blocks).enumerate() {
                        let (a, c) = if int8 {
                            (load_at(at + 32 * b), load_at(at + outputs + 32 * b))
                        } else {
                            let w = load_at(at + 32 * b);
                            let even = _mm256_and_si256(w, nibble);
                            (even, _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble))
                        };
                        // Each output's two weights side by side, beside the
                        // two inputs they meet.
                        let (lo, hi) = (_mm256_unpacklo_epi8(a, c), _mm256_unpackhi_epi8(a, c));
                        let (lo, hi) = if int8 {
                            // Signed by signed: the weights' signs move onto
                            // the inputs.
                            (
                                _mm256_maddubs_epi16(
                                    _mm256_sign_epi8(lo, lo),
                                    _mm256_sign_epi8(inputs, lo),
                                ),
                                _mm256_maddubs_epi16(
                                    _mm256_sign_epi8(hi, hi),
                                    _mm256_sign_epi8(inputs, hi),
                                ),
                            )
                        } else {
                            (
                                _mm256_maddubs_epi16(lo, inputs),
                                _mm256_maddubs_epi16(hi, inputs),
                            )
                        };
                        let (lo, hi) =
                            (_mm256_add_epi16(sums[0], lo), _mm256_add_epi16(sums[1], hi));
                        if widening {
                            widen(dots, lo, hi);
                            sums.fill(zero);
                        } else {
                            sums.copy_from_slice(&[lo, hi]);
                        }
                    }
                }
                let offset = _mm256_set1_epi32(if int8 { 0 } else { 8 * x.sums[g] });
                let x_scale = _mm256_set1_ps(x.scales[g]);
                let scales = &m.scales[(g * outputs + first) * 2..][..y.len() * 2];
                for ((dot, y), halves) in dots
                    .iter()
                    .zip(y.chunks_exact_mut(8))
                    .zip(scales.chunks_exact(16))
                {
                    // SAFETY: 16 readable bytes; the load needs no alignment.
                    let halves = unsafe { _mm_loadu_si128(halves.as_ptr().cast()) };
                    let scale = _mm256_mul_ps(_mm256_cvtph_ps(halves), x_scale);
                    let dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(*dot, offset));
                    // SAFETY: `y` is 8 floats; neither access needs alignment.
                    unsafe {
                        let sum =
                            _mm256_add_ps(_mm256_loadu_ps(y.as_ptr()), _mm256_mul_ps(scale, dot));
                        _mm256_storeu_ps(y.as_mut_ptr(), sum);
                    }
                }
            }
        }
    }

    /// 16-bit sums of outputs 0-7 and 16-23 (`low`) and 8-15 and 24-31
    /// (`high`) added into 32-bit lanes of outputs 0-7 ... 24-31.
    #[target_feature(enable = "avx2")]
    fn widen(dots: &mut [__m256i], low: __m256i, high: __m256i) {
        let halves = [
            _mm256_castsi256_si128(low),
            _mm256_castsi256_si128(high),
            _mm256_extracti128_si256(low, 1),
            _mm256_extracti128_si256(high, 1),
        ];
        for (dot, half) in dots.iter_mut().zip(halves) {
            *dot = _mm256_add_epi32(*dot, _mm256_cvtepi16_epi32(half));
        }
    }
}

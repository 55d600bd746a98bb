//! The CPU kernel: one row's dot product with the quantised input, in
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

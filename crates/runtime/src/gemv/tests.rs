//! Tests of `gemv`.

use super::cpu::columns_portable;
use super::threads::row_pieces;
use super::*;

/// `W[row] . x` straight from the definition of the container, in f64:
/// each weight dequantised on its own.
fn reference(m: &PackedRows, x: &QuantizedInput, row: usize) -> f64 {
    let row_bytes = m.packing.row_bytes(m.cols);
    let w = &m.weights()[row * row_bytes..];
    let s = &m.scales()[row * m.groups() * 2..];
    (0..m.cols)
        .map(|k| {
            let q = if m.packing.bits == 8 {
                w[k] as i8 as f64
            } else {
                let byte = w[k / 2];
                let nibble = if k % 2 == 0 { byte & 15 } else { byte >> 4 };
                nibble as f64 - 8.0
            };
            let g = k / m.packing.group;
            let scale = f16_to_f32(u16::from_le_bytes([s[2 * g], s[2 * g + 1]])) as f64;
            let (v, xs) = x.feature(k);
            q * scale * v as f64 * xs as f64
        })
        .sum()
}

#[test]
fn the_kernel_computes_the_container_s_dot_products() {
    for packing in [
        Packing {
            bits: 8,
            group: 128,
        },
        Packing { bits: 4, group: 64 },
    ] {
        let cols = 1408;
        let mut m = PackedRows::zeroed(packing, cols, 5, None);
        m.fill_generated(7);
        let x = QuantizedInput::seeded(cols, packing, 3);
        for row in 0..5 {
            let want = reference(&m, &x, row);
            // Dispatched (AVX2 here) and portable.
            for got in [m.row_dot(&x, row), row_dot_portable(&m.view(), &x, row)] {
                let got = got as f64;
                assert!(
                    (got - want).abs() <= 1e-4 * want.abs().max(1e-3),
                    "{packing:?} row {row}: {got} vs {want}"
                );
            }
        }
        assert_eq!(
            m.bytes(),
            (5 * packing.row_bytes(cols) + 5 * cols / packing.group * 2) as u64
        );
    }
}

#[test]
fn chunk_terms_are_what_the_gpu_kernel_subtracts() {
    // int4: dp4a over the stored nibbles (q + 8) gives dot(q, x) + 8 sum(x);
    // the offset removes 8 sum(x) x scale, chunk by chunk.
    let packing = Packing { bits: 4, group: 64 };
    let x = QuantizedInput::seeded(128, packing, 1);
    let terms = x.chunk_terms();
    assert_eq!(terms.len(), 4);
    let sum: i32 = (0..32).map(|k| x.feature(k).0 as i32).sum();
    assert_eq!(terms[0], [x.scales[0], 8.0 * sum as f32 * x.scales[0]]);
    assert_eq!(terms[2][0], x.scales[1]);
    let int8 = QuantizedInput::seeded(
        128,
        Packing {
            bits: 8,
            group: 128,
        },
        1,
    );
    assert!(int8.chunk_terms().iter().all(|t| t[1] == 0.0));
}

#[test]
fn halves_and_fits() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    assert_eq!(f16_to_f32(0x2000), 2f32.powi(-7));
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    let int4 = Packing { bits: 4, group: 64 };
    assert!(int4.unfit_for(2048).is_none());
    assert!(int4.unfit_for(1000).is_some());
    assert!(Packing { bits: 4, group: 96 }.unfit_for(192).is_some());
    assert!(Packing {
        bits: 8,
        group: 128
    }
    .unfit_for(1408)
    .is_none());
    let text = ptx();
    for layout in [Layout::RowMajor, Layout::InputMajor] {
        for bits in [8, 4] {
            let name = kernel_name(bits, layout);
            assert!(text.contains(&format!(".visible .entry {name}(")), "{name}");
        }
    }
    assert!(
        !text.contains("NAME")
            && !text.contains("DOT")
            && !text.contains("SUM_LANES")
            && !text.contains("DESCRIPTOR")
            && !text.contains("FIND")
    );
}

#[test]
fn a_stage_is_cut_into_pieces_that_spread_a_large_matrix() {
    let packing = Packing { bits: 4, group: 64 };
    // An int4 row of 2048 features: 1024 bytes of nibbles and 32 F16
    // scales, 1088 bytes; a 256 KiB piece holds 262144 / 1088 = 240 rows.
    let mut large = PackedRows::zeroed(packing, 2048, 1000, None);
    large.fill_generated(1);
    let mut small = PackedRows::zeroed(packing, 2048, 10, None);
    small.fill_generated(2);
    let x = QuantizedInput::seeded(2048, packing, 5);
    let work = [(large.view(), &x), (small.view(), &x)];
    // 1000 rows over 4 threads would be 250 a piece, over the 240 cap: four
    // of 240 and the 40 left; 10 rows over 4 threads: 3, 3, 3 and 1.
    assert_eq!(
        row_pieces(&work, 4),
        vec![vec![240, 240, 240, 240, 40], vec![3, 3, 3, 1]]
    );
    // However cut, each output is its row's dot product, in order.
    let threads = NodeThreads::new(&[]).unwrap();
    let mut y = vec![0f32; 1010];
    threads.gemv(&work, &mut y);
    for (i, &v) in y.iter().enumerate() {
        let (m, row) = if i < 1000 {
            (&large, i)
        } else {
            (&small, i - 1000)
        };
        let want = reference(m, &x, row);
        assert!(
            (v as f64 - want).abs() <= 1e-3 * want.abs().max(1.0),
            "row {i}: {v} against {want}"
        );
    }
}

/// `m`'s bytes laid out input-major: packed input byte `j` of output `o`
/// at `j x rows + o`, scale `g` of output `o` at `g x rows + o`.
pub(crate) fn input_major(m: &PackedRows) -> (Vec<u8>, Vec<u8>) {
    let row_bytes = m.packing.row_bytes(m.cols);
    let mut weights = vec![0u8; m.weights().len()];
    for o in 0..m.rows {
        for j in 0..row_bytes {
            weights[j * m.rows + o] = m.weights()[o * row_bytes + j];
        }
    }
    let mut scales = vec![0u8; m.scales().len()];
    for o in 0..m.rows {
        for g in 0..m.groups() {
            let at = (g * m.rows + o) * 2;
            scales[at..at + 2].copy_from_slice(&m.scales()[(o * m.groups() + g) * 2..][..2]);
        }
    }
    (weights, scales)
}

#[test]
fn the_input_major_kernel_by_hand() {
    // int4 in groups of 16, 32 features, 2 outputs. Output 0 has q = 1
    // everywhere (nibble 9), output 1 q = -2 on even features and 3 on odd
    // ones (nibbles 6 and 11: byte 0xb6); so each of the 16 packed input
    // rows is the bytes [0x99, 0xb6]. Scales (input-major: group 0's of
    // both outputs, then group 1's): output 0 0.5 and 0.5, output 1 0.25
    // and 1.0. The input is 1.0 on features 0-15 (quantised to 127, scale
    // 1/127) and -0.5 on 16-31 (-127, scale 0.5/127). So:
    // y0 = 0.5 x 1/127 x 16 x 127 + 0.5 x 0.5/127 x 16 x -127 = 8 - 4 = 4;
    // y1 = 0.25 x 1/127 x 127 x (8 x -2 + 8 x 3)
    //    + 1.0 x 0.5/127 x -127 x (8 x -2 + 8 x 3) = 2 - 4 = -2.
    let packing = Packing { bits: 4, group: 16 };
    let weights: Vec<u8> = [0x99u8, 0xb6].repeat(16);
    let scales: Vec<u8> = [0x3800u16, 0x3400, 0x3800, 0x3c00]
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect();
    let m = PackedView {
        packing,
        layout: Layout::InputMajor,
        cols: 32,
        rows: 2,
        weights: &weights,
        scales: &scales,
    };
    let x: Vec<f32> = (0..32).map(|k| if k < 16 { 1.0 } else { -0.5 }).collect();
    let x = QuantizedInput::new(&x, packing);
    let mut y = [0f32; 2];
    m.rows_into(&x, 0, &mut y);
    for (got, want) in y.iter().zip([4.0, -2.0]) {
        assert!((got - want).abs() < 1e-5, "{y:?}");
    }
    // One output at a time, as a piece of one.
    assert_eq!([m.row_dot(&x, 0), m.row_dot(&x, 1)], y);
}

#[test]
fn input_major_outputs_are_the_row_major_kernel_s_floats() {
    // Same matrix in both layouts: the input-major kernels (AVX2 on 64 of
    // the 77 outputs here, portable on the 13 left; and portable on all)
    // give each output bit for bit the portable row-major kernel's float,
    // whatever piece of the outputs a call takes.
    for packing in [
        Packing { bits: 8, group: 64 },
        Packing { bits: 4, group: 64 },
        Packing { bits: 4, group: 32 },
    ] {
        let (cols, rows) = (512, 77);
        let mut m = PackedRows::zeroed(packing, cols, rows, None);
        m.fill_generated(11);
        let (weights, scales) = input_major(&m);
        let im = PackedView {
            layout: Layout::InputMajor,
            weights: &weights,
            scales: &scales,
            ..m.view()
        };
        let x = QuantizedInput::seeded(cols, packing, 4);
        let want: Vec<f32> = (0..rows)
            .map(|r| row_dot_portable(&m.view(), &x, r))
            .collect();
        let mut y = vec![0f32; rows];
        im.rows_into(&x, 0, &mut y);
        assert_eq!(y, want, "{packing:?} dispatched");
        columns_portable(&im, &x, 0, &mut y);
        assert_eq!(y, want, "{packing:?} portable");
        for (first, len) in [(5, 40), (40, 37), (76, 1)] {
            let mut piece = vec![0f32; len];
            im.rows_into(&x, first, &mut piece);
            assert_eq!(piece, want[first..first + len], "{packing:?} {first}+{len}");
        }
        // Cut over threads: the same outputs.
        let threads = NodeThreads::new(&[0, 1]).unwrap();
        let mut y = vec![0f32; 2 * rows];
        threads.gemv(&[(im, &x), (im, &x)], &mut y);
        assert_eq!(y[..rows], want);
        assert_eq!(y[rows..], want);
    }
}

#[test]
fn input_major_pieces_are_whole_cache_lines_of_a_packed_row() {
    // 1000 outputs over 4 threads: 250 a piece, rounded up to 256 outputs
    // (64-byte lines of each packed row): three of 256 and the 232 left;
    // over 1 thread, the most a piece takes, 1024 outputs: one piece. 10
    // outputs: one piece. 3000 outputs over 1 thread: 1024, 1024, 952.
    let packing = Packing { bits: 4, group: 64 };
    let m = PackedRows::zeroed(packing, 2048, 1000, None);
    let small = PackedRows::zeroed(packing, 2048, 10, None);
    let x = QuantizedInput::seeded(2048, packing, 5);
    fn im(m: &PackedRows) -> PackedView<'_> {
        PackedView {
            layout: Layout::InputMajor,
            ..m.view()
        }
    }
    let large = PackedRows::zeroed(packing, 2048, 3000, None);
    let work = [(im(&m), &x), (im(&small), &x), (im(&large), &x)];
    // 3000 over 4 threads: 750, rounded up to 768.
    assert_eq!(
        row_pieces(&work, 4),
        vec![vec![256, 256, 256, 232], vec![10], vec![768, 768, 768, 696]]
    );
    assert_eq!(
        row_pieces(&work, 1),
        vec![vec![1000], vec![10], vec![1024, 1024, 952]]
    );
}

//! Tests of `slab`.

use super::*;

#[test]
fn span_covers_unaligned_ranges() {
    // Bytes 5000..5100 lie in block 1 (4096..8192).
    assert_eq!(
        span(5000, 100),
        Span {
            aligned_offset: 4096,
            aligned_len: 4096,
            payload_start: 904
        }
    );
    // 4000..4200 straddles blocks 0 and 1.
    assert_eq!(
        span(4000, 200),
        Span {
            aligned_offset: 0,
            aligned_len: 8192,
            payload_start: 4000
        }
    );
    // Aligned ranges map onto themselves.
    assert_eq!(
        span(8192, 4096),
        Span {
            aligned_offset: 8192,
            aligned_len: 4096,
            payload_start: 0
        }
    );
    assert_eq!(span(8192, 0).aligned_len, 0);
    assert_eq!(span(8193, 0).aligned_len, 4096);
}

#[test]
fn slabs_are_aligned_zeroed_and_rounded_up() {
    for len in [0, 1, 4096, 4097, 3 * 4096 + 5] {
        let slab = AlignedSlab::new(len);
        assert_eq!(slab.as_ptr() as usize % ALIGN_BYTES, 0);
        assert_eq!(slab.len(), round_up(len));
        assert!(slab.iter().all(|&b| b == 0));
    }
    assert_eq!(AlignedSlab::for_read(4000, 200).len(), 8192);
}

#[test]
fn windows_split_on_block_boundaries() {
    let mut slab = AlignedSlab::new(3 * ALIGN_BYTES);
    let (mut head, mut tail) = slab.window().split_at(ALIGN_BYTES);
    assert_eq!((head.len(), tail.len()), (ALIGN_BYTES, 2 * ALIGN_BYTES));
    assert_eq!(tail.as_ptr() as usize % ALIGN_BYTES, 0);
    head[0] = 1;
    tail[0] = 2;
    assert_eq!((slab[0], slab[ALIGN_BYTES]), (1, 2));
}

#[test]
#[should_panic(expected = "4096-byte boundaries")]
fn windows_refuse_unaligned_splits() {
    let mut slab = AlignedSlab::new(2 * ALIGN_BYTES);
    let _ = slab.window().split_at(100);
}

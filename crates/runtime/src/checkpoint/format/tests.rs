//! Tests of `format`.

use super::*;

#[test]
fn packed_expert_bytes_match_the_description_formula() {
    // One Qwen3-30B-A3B expert: gate and up [768, 2048], down [2048, 768].
    for (format, expected) in [
        (ExpertFormat::Bf16, 9_437_184u64),
        (
            ExpertFormat::Packed {
                bits: 8,
                group: 128,
            },
            4_792_320,
        ),
        (ExpertFormat::Packed { bits: 4, group: 64 }, 2_506_752),
    ] {
        let total: u64 = [(768, 2048), (768, 2048), (2048, 768)]
            .into_iter()
            .flat_map(|(r, c)| format.linear(r, c))
            .map(|(_, dtype, shape)| tensor_bytes(dtype, &shape))
            .sum();
        assert_eq!(total, expected, "{}", format.name());
    }
}

#[test]
fn fused_experts_take_the_bytes_of_separate_ones() {
    // One Llama-4-Maverick expert: gate_up [5120, 16384], down [8192, 5120].
    for format in [
        ExpertFormat::Bf16,
        ExpertFormat::Packed {
            bits: 8,
            group: 128,
        },
        ExpertFormat::Packed { bits: 4, group: 64 },
    ] {
        let fused: u64 = [(5120, 16384), (8192, 5120)]
            .into_iter()
            .flat_map(|(i, o)| format.fused(1, i, o))
            .map(|(_, dtype, shape)| tensor_bytes(dtype, &shape))
            .sum();
        let separate: u64 = [(8192, 5120), (8192, 5120), (5120, 8192)]
            .into_iter()
            .flat_map(|(r, c)| format.linear(r, c))
            .map(|(_, dtype, shape)| tensor_bytes(dtype, &shape))
            .sum();
        assert_eq!(fused, separate, "{}", format.name());
    }
    // 128 experts: the first dimension.
    let int4 = ExpertFormat::Packed { bits: 4, group: 64 };
    let down = int4.fused(128, 8192, 5120);
    assert_eq!(down[0].2, vec![128, 4096, 5120]);
    assert_eq!(
        (down[1].0, down[1].2.clone()),
        ("_scales", vec![128, 128, 5120])
    );
}

#[test]
fn a_group_must_divide_the_input_features() {
    let int4 = ExpertFormat::Packed { bits: 4, group: 64 };
    assert!(int4.unfit_for(1408).is_none());
    assert!(int4.unfit_for(1000).unwrap().contains("1000"));
    assert!(ExpertFormat::Bf16.unfit_for(1000).is_none());
}

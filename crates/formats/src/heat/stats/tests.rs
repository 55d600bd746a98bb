//! Tests of `stats`.

use super::*;
use crate::heat::common::test_util::shared_data;
use crate::heat::{read_heat, HeatContext};

fn table(rows: Vec<Vec<f64>>) -> HeatTable {
    HeatTable {
        counts: rows,
        tokens: None,
    }
}

#[test]
fn hand_computed() {
    // Layer 0: 4 experts [8, 4, 2, 2], total 16.
    //   top 10 % = ceil(0.4) = 1 expert -> 8/16 = 0.5;
    //   p = [1/2, 1/4, 1/8, 1/8]: H = 0.5*1 + 0.25*2 + 2*0.125*3 = 1.75 bits;
    //   50 %: 8 >= 8 -> 1 expert; 90 % (14.4): 8, 12, 14, 16 -> 4 experts.
    // Layer 1: 20 experts, uniform 1 each: top 10 % = 2 experts -> 2/20 = 0.1;
    //   H = log2(20); 50 %: 10 experts; 90 %: 18 experts.
    // Layer 2: no selections.
    let stats = concentration(&table(vec![
        vec![8.0, 4.0, 2.0, 2.0],
        vec![1.0; 20],
        vec![0.0; 3],
    ]));
    let a = &stats[0];
    assert_eq!(
        (a.top10_experts, a.top10_share, a.entropy_bits),
        (1, 0.5, 1.75)
    );
    assert_eq!(
        (a.experts_for_50, a.experts_for_90, a.max_entropy_bits),
        (1, 4, 2.0)
    );
    let b = &stats[1];
    assert_eq!(
        (b.top10_experts, b.experts_for_50, b.experts_for_90),
        (2, 10, 18)
    );
    assert!((b.top10_share - 0.1).abs() < 1e-12);
    assert!((b.entropy_bits - 20f64.log2()).abs() < 1e-12);
    let c = &stats[2];
    assert_eq!(
        (
            c.selections,
            c.top10_share,
            c.entropy_bits,
            c.experts_for_90
        ),
        (0.0, 0.0, 0.0, 0)
    );
    // One expert takes everything: entropy 0, one expert covers 90 %.
    let d = &concentration(&table(vec![vec![0.0, 5.0, 0.0]]))[0];
    assert_eq!(
        (d.entropy_bits, d.experts_for_90, d.top10_share),
        (0.0, 1, 1.0)
    );
}

#[test]
fn real_glm_snapshot_is_skewed() {
    let Some(dir) = shared_data("colibri/glm52_m1ultra_fmt2_2026-08-04") else {
        return;
    };
    let ctx = HeatContext {
        moe_layers: Some((3..=77).collect()),
        experts: Some(vec![256; 75]),
        model_name: Some("glm-5.2".into()),
        ..Default::default()
    };
    let heat = read_heat(&dir.join("colibri_usage.snapshot"), None, &ctx, &mut vec![]).unwrap();
    for s in concentration(&heat.total) {
        // 256 experts: 26 are the top 10 %; uniform routing would give them 26/256 = 10.2 %.
        assert_eq!(s.top10_experts, 26);
        assert!(s.top10_share > 26.0 / 256.0 && s.top10_share < 1.0, "{s:?}");
        assert!(s.entropy_bits < s.max_entropy_bits && s.experts_for_50 < s.experts_for_90);
    }
}

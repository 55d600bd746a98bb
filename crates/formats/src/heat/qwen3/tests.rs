//! Tests of `qwen3`.

use super::*;
use crate::heat::common::test_util::{one_line, shared_data};

const HEADER: &str = "Layer,Language,Expert_0,Expert_1,Expert_2,Expert_3\n";

#[test]
fn small_file_and_directory() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir
        .path()
        .join("moe_all_layers_analysis_arc_en_he_500_1_avg_activation.csv");
    std::fs::write(
        &a,
        format!("{HEADER}0,English,1,1,0,0\n0,Hebrew,0.5,0.5,0.5,0.5\n"),
    )
    .unwrap();
    let b = dir
        .path()
        .join("moe_all_layers_analysis_gsm_en_he_500_2_avg_activation.csv");
    std::fs::write(&b, format!("{HEADER}0,English,0,2,0,0\n")).unwrap();
    std::fs::write(
        dir.path()
            .join("moe_all_layers_analysis_gsm_en_he_500_2_avg_dist.csv"),
        "junk",
    )
    .unwrap();
    let h = read(dir.path(), &HeatContext::default(), &mut vec![]).unwrap();
    let names: Vec<&str> = h.categories.keys().map(String::as_str).collect();
    assert_eq!(names, ["arc/English", "arc/Hebrew", "gsm/English"]);
    // Total = sum of the three rows: [1+0.5+0, 1+0.5+2, 0.5, 0.5].
    assert_eq!(h.total.counts, vec![vec![1.5, 3.5, 0.5, 0.5]]);
    assert_eq!(h.total.tokens, None);
    let h = read(&b, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(h.categories.len(), 1);
}

#[test]
fn refuses_avg_dist_and_other_headers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir
        .path()
        .join("moe_all_layers_analysis_arc_x_avg_dist.csv");
    std::fs::write(&d, HEADER).unwrap();
    let msg = one_line(
        read(&d, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "avg_dist.csv",
        "file name",
    );
    assert!(
        msg.contains("moe_all_layers_analysis_arc_x_avg_activation.csv"),
        "{msg}"
    );
    let w = dir.path().join("w_avg_activation.csv");
    std::fs::write(&w, "Layer,Lang,Expert_0\n0,en,1\n").unwrap();
    one_line(
        read(&w, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "w_avg_activation.csv",
        "line 1",
    );
    std::fs::write(&w, format!("{HEADER}0,English,1,1,0,zero\n")).unwrap();
    one_line(
        read(&w, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "w_avg_activation.csv",
        "line 2, field 6",
    );
    let empty = tempfile::tempdir().unwrap();
    std::fs::copy(&d, empty.path().join("x_avg_dist.csv")).unwrap();
    one_line(
        read(empty.path(), &HeatContext::default(), &mut vec![]).unwrap_err(),
        "",
        "directory",
    );
}

#[test]
fn real_data() {
    let Some(dir) = shared_data("traces/qwen3_30b_a3b_cross_lang") else {
        return;
    };
    let h = read(&dir, &HeatContext::default(), &mut vec![]).unwrap();
    // 6 tasks x 2 languages; 48 MoE layers x 128 experts (SOURCES.md 4).
    assert_eq!(h.categories.len(), 12);
    assert!(h.categories.contains_key("ted/Hebrew") && h.categories.contains_key("nli/English"));
    assert_eq!(h.total.counts.len(), 48);
    assert!(h.total.counts.iter().all(|r| r.len() == 128));
    // avg_activation rows sum to ~8 = top_k (bf16 rounding).
    let mean = mean_row_sum(&h);
    assert!((mean - 8.0).abs() < 0.05, "mean row sum {mean}");
    for t in h.categories.values() {
        for row in &t.counts {
            let s: f64 = row.iter().sum();
            assert!((s - 8.0).abs() < 0.2, "row sum {s}");
        }
    }
}

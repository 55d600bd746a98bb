//! Tests of `llama4`.

use super::*;
use crate::heat::common::test_util::{
    each_refused_naming_its_place, model_m, one_line, shared_data,
};

/// Layers "0".."3", MoE on 1 and 3; a prefill of 2 tokens and one decode step.
const QUERY: &str =
    r#"[{"0":null,"1":[[5],[6]],"2":null,"3":[[7],[5]]},{"0":null,"1":[[1]],"2":null,"3":[[2]]}]"#;

#[test]
fn small_data_set() {
    let root = tempfile::tempdir().unwrap();
    for subject in ["anatomy", "algebra"] {
        std::fs::create_dir(root.path().join(subject)).unwrap();
        for n in [10, 9] {
            std::fs::write(root.path().join(format!("{subject}/{n}.json")), QUERY).unwrap();
        }
    }
    let trace = read_trace(root.path(), &HeatContext::default(), &mut vec![]).unwrap();
    // 2 subjects x 2 files x (2 prefill + 1 decode) = 12 tokens; 2 MoE layers.
    assert_eq!(trace.tokens.len(), 12);
    assert_eq!(trace.layers(), 2);
    assert_eq!(trace.tokens[0].seq, "algebra/9");
    assert_eq!(trace.tokens[2].pos, 2);
    assert_eq!(trace.tokens[1].routes, vec![vec![6], vec![5]]);
    let h = trace.heat();
    // Layer 1 per file: 5, 6, 1; x4 files -> e5 = 4, e6 = 4, e1 = 4; N = 12.
    assert_eq!(h.total.counts[0][5], 4.0);
    assert_eq!(h.total.counts[1][5], 4.0);
    assert_eq!(h.total.tokens, Some(vec![12, 12]));
    // One file: category = its folder.
    let t = read_trace(
        &root.path().join("anatomy/9.json"),
        &HeatContext::default(),
        &mut vec![],
    )
    .unwrap();
    assert_eq!(t.categories(), ["anatomy"]);
}

#[test]
fn bad_inputs_name_the_place() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("bad.json");
    // The model's expert counts are not given.
    let ctx = HeatContext {
        experts: None,
        ..model_m(&[1, 2], &[])
    };
    let small = model_m(&[1, 3], &[6, 6]);
    let none = HeatContext::default();
    let cases: &[(&str, &str, &HeatContext)] = &[
        ("[]", "top level: has no steps", &none),
        ("{}", "line 1 column", &none),
        (r#"[{"x":null}]"#, "step 0, key `x`", &none),
        (r#"[{"0":null,"1":[["a"]]}]"#, "line 1 column", &none),
        (r#"[{"0":null}]"#, "step 0: every layer is null", &none),
        (
            r#"[{"1":[[1],[2]],"3":[[1]]}]"#,
            "step 0, layer \"3\": has 1 rows",
            &none,
        ),
        (
            r#"[{"1":[[1]],"3":[[1]]},{"1":[[1]],"3":null}]"#,
            "step 1: MoE layers (non-null keys) are [1]",
            &none,
        ),
        (
            QUERY,
            "step 0: MoE layers (non-null keys) are [1, 3], model `m` has [1, 2]",
            &ctx,
        ),
        (
            QUERY,
            "step 0, layer \"1\", row 1: expert 6 does not exist",
            &small,
        ),
    ];
    each_refused_naming_its_place(&path, cases, read_trace);
    let empty = tempfile::tempdir().unwrap();
    one_line(
        read_trace(empty.path(), &none, &mut vec![]).unwrap_err(),
        "",
        "directory",
    );
}

#[test]
fn real_data() {
    let Some(dir) = shared_data("traces/llama4_maverick_mmlu") else {
        return;
    };
    let trace = read_trace(&dir, &HeatContext::default(), &mut vec![]).unwrap();
    // MoE on the odd layers 1..47 (24), 128 experts, top-1.
    assert_eq!(trace.layers(), 24);
    assert_eq!(trace.experts, vec![128; 24]);
    let h = trace.heat();
    // SOURCES.md 2 / MANIFEST.tsv: 811 prefill + 36 x 128 = 4,608 decode tokens.
    assert_eq!(h.total.tokens, Some(vec![811 + 4608; 24]));
    for row in &h.total.counts {
        assert_eq!(
            row.iter().sum::<f64>(),
            5419.0,
            "top-1: one selection per token"
        );
    }
    assert_eq!(
        trace.categories(),
        ["abstract_algebra", "anatomy", "astronomy"]
    );
    // Per subject, with the model's layers: prefill sums from MANIFEST.tsv
    // (awk -F'\t' 'NR>1{p[$1]+=$5} END{for(s in p) print s, p[s]}'):
    // abstract_algebra 416, anatomy 168, astronomy 227; plus 12 x 128 decode tokens each.
    let odd: Vec<usize> = (1..48).step_by(2).collect();
    let ctx = HeatContext {
        moe_layers: Some(odd),
        experts: Some(vec![128; 24]),
        ..Default::default()
    };
    for (subject, prefill) in [
        ("abstract_algebra", 416),
        ("anatomy", 168),
        ("astronomy", 227),
    ] {
        let one = read_trace(&dir.join(subject), &ctx, &mut vec![]).unwrap();
        assert_eq!(one.tokens.len(), prefill + 12 * 128, "{subject}");
        assert_eq!(one.heat().total, h.categories[subject]);
    }
}

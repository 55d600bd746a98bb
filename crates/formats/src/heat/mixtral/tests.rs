//! Tests of `mixtral`.

use super::*;
use crate::heat::common::test_util::{
    each_refused_naming_its_place, model_m, one_line, shared_data,
};

fn row(dataset: &str, problem: u64, layer: u64, experts: [u32; 2], token: u64) -> String {
    format!(
            "{{\"dataset\": \"{dataset}\", \"problem_id\": {problem}, \"layer\": {layer}, \"experts\": [{}, {}], \"gating_probs\": [0.6, 0.4], \"token_idx\": {token}}}\n",
            experts[0], experts[1]
        )
}

#[test]
fn joins_rows_into_tokens() {
    let dir = tempfile::tempdir().unwrap();
    // Problem 0: tokens 0, 1 in layers 0, 1, but layer 1 of token 1 missing.
    let text = [
        row("gsm8k", 0, 0, [7, 0], 0),
        row("gsm8k", 0, 0, [5, 6], 1),
        row("gsm8k", 0, 1, [7, 1], 0),
    ]
    .concat();
    std::fs::write(dir.path().join("gsm8k_2_routing.jsonl"), text).unwrap();
    std::fs::write(
        dir.path().join("code_routing.jsonl"),
        row("humaneval", 3, 0, [1, 2], 0),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("gsm8k_2_outputs.jsonl"),
        "{\"problem_id\": 0}\n",
    )
    .unwrap();
    let trace = read_trace(dir.path(), &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(trace.tokens.len(), 3);
    assert_eq!(trace.tokens[0].seq, "gsm8k/0");
    assert_eq!(trace.tokens[1].routes, vec![vec![5, 6], vec![]]);
    assert_eq!(trace.experts, vec![8, 8]);
    let h = trace.heat();
    // N = rows per layer: layer 0 has 3 rows, layer 1 has 1.
    assert_eq!(h.total.tokens, Some(vec![3, 1]));
    assert_eq!(
        h.total.counts[0],
        vec![1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    );
    assert_eq!(h.categories["humaneval"].tokens, Some(vec![1, 0]));
}

#[test]
fn bad_inputs_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad_routing.jsonl");
    let ctx = model_m(&[0, 1], &[8, 8]);
    let good = row("gsm8k", 0, 0, [1, 2], 0);
    let none = HeatContext::default();
    let cases: Vec<(String, &str, &HeatContext)> = vec![
        ("{\"dataset\": \"x\"}".into(), "line 2, column", &none),
        (
            "{\"dataset\": \"x\", \"problem_id\": \"zero\"".into(),
            "line 2, column",
            &none,
        ),
        (
            row("gsm8k", 0, 0, [3, 4], 0),
            "line 2: problem 0 token 0 layer 0 is given twice",
            &none,
        ),
        (
            row("gsm8k", 0, 5, [3, 4], 0),
            "line 2: layer 5 is not an MoE layer of `m`",
            &ctx,
        ),
        (
            row("gsm8k", 0, 1, [3, 9], 0),
            "line 2: expert 9 does not exist in MoE layer 1",
            &ctx,
        ),
    ];
    // Each bad line follows a good one.
    let cases: Vec<_> = cases
        .into_iter()
        .map(|(line, place, ctx)| (format!("{good}{line}\n"), place, ctx))
        .collect();
    each_refused_naming_its_place(&path, &cases, read_trace);
    let out = dir.path().join("x_outputs.jsonl");
    std::fs::write(&out, "{}").unwrap();
    let msg = one_line(
        read_trace(&out, &none, &mut vec![]).unwrap_err(),
        "x_outputs.jsonl",
        "file name",
    );
    assert!(msg.contains("x_routing.jsonl"), "{msg}");
}

#[test]
fn real_data() {
    let Some(dir) = shared_data("traces/mixtral_8x7b_speculative_moe") else {
        return;
    };
    let trace = read_trace(&dir, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(trace.experts, vec![8; 32]);
    let h = trace.heat();
    // Row counts from `wc -l` (SOURCES.md 3): 7,889 gsm8k + 10,779 humaneval.
    let rows = |t: &crate::heat::HeatTable| t.tokens.as_ref().unwrap().iter().sum::<u64>();
    assert_eq!(rows(&h.categories["gsm8k"]), 7889);
    assert_eq!(rows(&h.categories["humaneval"]), 10779);
    // Top-2: two selections per row; layer 0 has 246 gsm8k + 337 humaneval rows
    // (counted per layer with a short Python script over the files).
    assert_eq!(h.total.tokens.as_ref().unwrap()[0], 246 + 337);
    for (row, &n) in h.total.counts.iter().zip(h.total.tokens.as_ref().unwrap()) {
        assert_eq!(row.iter().sum::<f64>(), 2.0 * n as f64);
    }
}

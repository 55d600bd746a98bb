//! Tests of `jsonl`.

use super::*;
use crate::heat::common::test_util::{each_refused_naming_its_place, model_m};

#[test]
fn round_trip_and_heat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tokens = vec![
        TokenRoutes {
            seq: "r 1".into(),
            pos: 0,
            category: Some("code".into()),
            routes: vec![vec![1, 0], vec![2, 3]],
        },
        TokenRoutes {
            seq: "r 1".into(),
            pos: 1,
            category: None,
            routes: vec![vec![1, 3], vec![]],
        },
    ];
    let trace = Trace::build(HeatFormat::Jsonl, &HeatContext::default(), 2, 0, tokens);
    write_trace(&trace, &path).unwrap();
    let back = read_trace(&path, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(back, trace);
    // Hand count: L0 picks 1,0 then 1,3 -> [1,2,0,1], N0 = 2; L1 picks 2,3 (second token unobserved), N1 = 1.
    let heat = back.heat();
    assert_eq!(
        heat.total.counts,
        vec![vec![1.0, 2.0, 0.0, 1.0], vec![0.0, 0.0, 1.0, 1.0]]
    );
    assert_eq!(heat.total.tokens, Some(vec![2, 1]));
    assert_eq!(heat.categories["code"].tokens, Some(vec![1, 1]));
}

#[test]
fn null_short_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "{\"routes\":[[0],null]}\n\n{\"routes\":[[1]]}\n").unwrap();
    let trace = read_trace(&path, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(trace.layers(), 2);
    assert_eq!(trace.tokens[1].pos, 1);
    assert_eq!(trace.heat().total.tokens, Some(vec![2, 0]));
}

#[test]
fn bad_inputs_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    let ctx = model_m(&[1, 2], &[4, 4]);
    let good = "{\"routes\":[[0],[1]]}\n";
    let cases: &[(&str, &str, &HeatContext)] = &[
        (
            "{\"routes\":[[0],[\"x\"]]}",
            "line 2, column",
            &HeatContext::default(),
        ),
        (
            "{\"route\":[[0]]}",
            "line 2, column",
            &HeatContext::default(),
        ),
        (
            "{\"routes\":[[0],[-1]]}",
            "line 2, column",
            &HeatContext::default(),
        ),
        (
            "{\"routes\":[[0],[1],[2]]}",
            "line 2: routes lists 3 layers",
            &ctx,
        ),
        (
            "{\"routes\":[[0],[4]]}",
            "line 2: routes[1]: expert 4 does not exist",
            &ctx,
        ),
        (
            "{\"routes\":[[0]",
            "line 2, column",
            &HeatContext::default(),
        ),
    ];
    // Each bad line follows a good one.
    let cases: Vec<_> = cases
        .iter()
        .map(|&(line, place, ctx)| (format!("{good}{line}\n"), place, ctx))
        .collect();
    each_refused_naming_its_place(&path, &cases, read_trace);
}

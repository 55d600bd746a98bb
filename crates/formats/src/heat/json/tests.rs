//! Tests of `json`.

use super::*;
use crate::heat::common::test_util::{each_refused_naming_its_place, model_m};

fn sample() -> Heat {
    let mut categories = BTreeMap::new();
    categories.insert(
        "law".to_string(),
        HeatTable {
            counts: vec![vec![1.0, 0.0, 2.0], vec![0.5, 0.25, 0.0]],
            tokens: Some(vec![3, 2]),
        },
    );
    Heat {
        model: Some("tiny \"moe\"".into()),
        format: HeatFormat::Json,
        source_layers: 2,
        total: HeatTable {
            counts: vec![vec![4.0, 1e-7, 2.0], vec![0.1, 3.0, 1e20]],
            tokens: Some(vec![5, 5]),
        },
        categories,
    }
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.json");
    let heat = sample();
    write(&heat, &path).unwrap();
    let back = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(back, heat);
    let mut plain = heat.clone();
    plain.categories.clear();
    plain.model = None;
    plain.total.tokens = None;
    write(&plain, &path).unwrap();
    assert_eq!(
        read(&path, &HeatContext::default(), &mut vec![]).unwrap(),
        plain
    );
}

#[test]
fn tokens_number_array_or_null() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.json");
    for (tokens, want) in [
        ("7", Some(vec![7, 7])),
        ("[1, 2]", Some(vec![1, 2])),
        ("null", None),
    ] {
        std::fs::write(
            &path,
            format!("{{\"tokens\": {tokens}, \"layers\": [[1, 2], [3, 4]]}}"),
        )
        .unwrap();
        let heat = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(heat.total.tokens, want);
        assert_eq!(heat.total.counts, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
    }
}

#[test]
fn bad_inputs_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    let ctx = model_m(&[1, 2], &[2, 2]);
    let cases: &[(&str, &str, &HeatContext)] = &[
        (
            "{\"layers\": [[1, 2], [3, \"x\"]]}",
            "line 1 column",
            &HeatContext::default(),
        ),
        (
            "{\"layer\": [[1]]}",
            "unknown field `layer`",
            &HeatContext::default(),
        ),
        (
            "{\"layers\": [[1, -2]]}",
            "layers[0][1]",
            &HeatContext::default(),
        ),
        (
            "{\"tokens\": [1], \"layers\": [[1], [2]]}",
            "tokens: lists 1 layers",
            &HeatContext::default(),
        ),
        (
            "{\"layers\": [[1, 2]], \"categories\": {\"law\": {\"layers\": [[1, 2, 3]]}}}",
            "categories.law.layers",
            &HeatContext::default(),
        ),
        (
            "{\"layers\": [[1, 2], [1, 2], [1, 2]]}",
            "MoE layer 2 does not exist",
            &ctx,
        ),
        ("{\"layers\": [[1, 2], [1, 2, 3]]}", "layers[1]", &ctx),
        ("{\"layers\": [[1, 2]", "EOF", &HeatContext::default()),
    ];
    each_refused_naming_its_place(&path, cases, read);
}

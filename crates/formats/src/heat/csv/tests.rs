//! Tests of `csv`.

use super::*;
use crate::heat::common::test_util::{each_refused_naming_its_place, model_m};
use crate::heat::HeatTable;
use residency_testkit::file_in;

fn heat(counts: Vec<Vec<f64>>, tokens: Option<Vec<u64>>) -> Heat {
    Heat {
        model: Some("tiny".into()),
        format: HeatFormat::Csv,
        source_layers: counts.len(),
        total: HeatTable { counts, tokens },
        categories: BTreeMap::new(),
    }
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.csv");
    for tokens in [None, Some(vec![4, 4]), Some(vec![4, 3])] {
        let h = heat(vec![vec![0.0, 2.5, 1.0], vec![3.0, 0.0, 0.0]], tokens);
        let mut warnings = vec![];
        write(&h, &path, &mut warnings).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(
            read(&path, &HeatContext::default(), &mut vec![]).unwrap(),
            h
        );
    }
}

#[test]
fn sparse_long_form_pads_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.csv");
    std::fs::write(&path, "# tokens=10\nLayer,Expert,Count\n0,1,7\n1,0,2.5\n").unwrap();
    let ctx = HeatContext {
        moe_layers: Some(vec![1, 2, 3]),
        experts: Some(vec![4, 4, 4]),
        ..Default::default()
    };
    let h = read(&path, &ctx, &mut vec![]).unwrap();
    // Three model MoE layers of 4 experts; only (0,1) and (1,0) given.
    assert_eq!(
        h.total.counts,
        vec![
            vec![0.0, 7.0, 0.0, 0.0],
            vec![2.5, 0.0, 0.0, 0.0],
            vec![0.0; 4]
        ]
    );
    assert_eq!(h.total.tokens, Some(vec![10, 10, 10]));
    // Without a model: the largest layer and expert seen.
    let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(h.total.counts, vec![vec![0.0, 7.0], vec![2.5, 0.0]]);
}

#[test]
fn wide_form_with_categories() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_in(
        dir.path(),
        "w.csv",
        "Layer,Split,Expert_0,Expert_1\n0,a,1,2\n0,b,3,4\n1,a,0,1\n",
    );
    let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
    // Total = a + b per layer: L0 = [1+3, 2+4], L1 = [0, 1] (b has no layer-1 row).
    assert_eq!(h.total.counts, vec![vec![4.0, 6.0], vec![0.0, 1.0]]);
    assert_eq!(
        h.categories["b"].counts,
        vec![vec![3.0, 4.0], vec![0.0, 0.0]]
    );
    std::fs::write(&path, "Layer,Expert_0,Expert_1\n0,1,2\n1,3,4\n").unwrap();
    let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
    assert!(h.categories.is_empty());
    assert_eq!(h.total.counts, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
}

#[test]
fn bad_inputs_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    let ctx = model_m(&[0, 1], &[2, 2]);
    let none = HeatContext::default();
    let cases: &[(&str, &str, &HeatContext)] = &[
        ("", "line 1: no header", &none),
        ("a,b,c\n", "line 1: header `a,b,c`", &none),
        (
            "layer,expert,count\n0,1,x\n",
            "line 2, field 3 (count): `x` is not a finite number",
            &none,
        ),
        (
            "layer,expert,count\n0,-1,1\n",
            "line 2, field 2 (expert)",
            &none,
        ),
        (
            "layer,expert,count\n0,1,-1\n",
            "line 2, field 3 (count): `-1` is negative",
            &none,
        ),
        ("layer,expert,count\n0,1\n", "line 2: has 2 fields", &none),
        (
            "layer,expert,count\n0,1,1\n0,1,2\n",
            "line 3: layer 0 expert 1 is already given on line 2",
            &none,
        ),
        (
            "layer,expert,count\n2,1,1\n",
            "line 2, field 1 (layer): MoE layer 2 does not exist",
            &ctx,
        ),
        (
            "layer,expert,count\n1,2,1\n",
            "line 2, field 2 (expert): expert 2 does not exist",
            &ctx,
        ),
        (
            "# tokens=1,2,3\nlayer,expert,count\n1,1,1\n",
            "line 1: `# tokens=` lists 3 layers",
            &ctx,
        ),
        (
            "# tokens=x\nlayer,expert,count\n",
            "line 1, field 1 (tokens)",
            &none,
        ),
        ("Layer,Expert_0,Expert_2\n", "line 1, column 3", &none),
        ("Layer,Expert_0\n0,1,2\n", "line 2: has 3 fields", &none),
        (
            "Layer,Expert_0\n0,1\n0,2\n",
            "line 3: layer 0 is already given on line 2",
            &none,
        ),
        (
            "Layer,Expert_0,Expert_1,Expert_2\n0,1,2,3\n",
            "line 1: 3 expert columns",
            &ctx,
        ),
    ];
    each_refused_naming_its_place(&path, cases, read);
}

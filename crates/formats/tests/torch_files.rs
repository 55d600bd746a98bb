//! `.pt` files torch itself wrote (`tests/data/pt/make.py`, torch 2.x), read
//! by the reader that runs without Python, and the heat they give. Every
//! count in them is v[b, l, e] = 100 b + 10 l + e (recorder step b, layer l,
//! expert e), so each expected value below is that formula, by hand.

use residency_formats::heat::{read_heat, HeatContext, HeatFormat};
use residency_formats::torch::{self, DType, Value};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pt")
        .join(name)
}

fn read(name: &str) -> Value {
    torch::read(&std::fs::read(fixture(name)).unwrap()).unwrap()
}

/// v[b, l, e] over the given steps, layers and experts, row-major.
fn formula(steps: usize, layers: &[usize], experts: &[usize]) -> Vec<f64> {
    let mut out = Vec::new();
    for b in 0..steps {
        for &l in layers {
            for &e in experts {
                out.push((100 * b + 10 * l + e) as f64);
            }
        }
    }
    out
}

fn entry<'a>(value: &'a Value, key: &str) -> &'a Value {
    let Value::Dict(items) = value else {
        panic!("not a dict: {value:?}")
    };
    items
        .iter()
        .find(|(k, _)| *k == Value::Str(key.into()))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no `{key}` in {items:?}"))
}

#[test]
fn bare_tensors_of_every_dtype_read_as_torch_wrote_them() {
    for (name, dtype) in [
        ("bare_int32.pt", DType::Int32),
        ("bare_float32.pt", DType::Float32),
        ("bare_float64.pt", DType::Float64),
    ] {
        let Value::Tensor(t) = read(name) else {
            panic!("{name}: not a tensor")
        };
        assert_eq!(t.dtype, dtype, "{name}");
        assert_eq!(t.shape, vec![2, 3, 4], "{name}");
        assert_eq!(t.values, formula(2, &[0, 1, 2], &[0, 1, 2, 3]), "{name}");
    }
}

#[test]
fn the_recorder_dict_keeps_its_plain_values_and_counts() {
    let value = read("recorder_int64.pt");
    assert_eq!(*entry(&value, "rank"), Value::Int(0));
    assert_eq!(
        *entry(&value, "average_utilization_rate_over_window"),
        Value::Float(0.75)
    );
    let Value::Tensor(t) = entry(&value, "logical_count") else {
        panic!("logical_count is not a tensor")
    };
    assert_eq!((t.dtype, t.shape.clone()), (DType::Int64, vec![2, 3, 4]));
    assert_eq!(t.values, formula(2, &[0, 1, 2], &[0, 1, 2, 3]));
}

#[test]
fn a_view_reads_its_own_elements_from_the_whole_storage() {
    // wide[:, 1:, ::2] of a [2, 3, 8] tensor: layers 1 and 2, experts 0, 2,
    // 4, 6; torch stored all 48 elements with an offset of 8 and strides
    // (24, 8, 2).
    let Value::Tensor(t) = entry(&read("view_int64.pt"), "logical_count").clone() else {
        panic!("logical_count is not a tensor")
    };
    assert_eq!(t.shape, vec![2, 2, 4]);
    assert_eq!(t.values, formula(2, &[1, 2], &[0, 2, 4, 6]));
}

#[test]
fn heat_sums_the_recorder_steps_per_layer_and_expert() {
    let ctx = HeatContext::default();
    let heat = read_heat(&fixture("recorder_int64.pt"), None, &ctx, &mut Vec::new()).unwrap();
    assert_eq!(heat.format, HeatFormat::SglangPt);
    // Steps 0 and 1: (10 l + e) + (100 + 10 l + e) = 100 + 20 l + 2 e.
    let want: Vec<Vec<f64>> = (0..3)
        .map(|l| (0..4).map(|e| (100 + 20 * l + 2 * e) as f64).collect())
        .collect();
    assert_eq!(heat.total.counts, want);
    // [layers, experts] without steps: v[0, l, e] = 10 l + e.
    let two_d = read_heat(&fixture("init_2d.pt"), None, &ctx, &mut Vec::new()).unwrap();
    let want: Vec<Vec<f64>> = (0..3)
        .map(|l| (0..4).map(|e| (10 * l + e) as f64).collect())
        .collect();
    assert_eq!(two_d.total.counts, want);
}

#[test]
fn what_is_not_counts_is_refused_in_one_line() {
    for (name, says) in [
        ("bare_float16.pt", "HalfStorage"),
        ("location.pt", "physical_to_logical_map"),
        ("legacy_int64.pt", "legacy format"),
    ] {
        let e = read_heat(
            &fixture(name),
            Some(HeatFormat::SglangPt),
            &HeatContext::default(),
            &mut Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(name) && e.contains(says), "{name}: {e}");
        assert_eq!(e.lines().count(), 1, "{name}: {e}");
    }
}

#[test]
fn what_residency_writes_reads_back_as_torch_s_own_file() {
    // The writer's file of the recorder's counts gives the same values as
    // the file torch wrote; torch loading the writer's files is checked on
    // a machine with torch (`tests/data/pt/check_ours.py`, docs/heat.md).
    let Value::Tensor(theirs) = entry(&read("recorder_int64.pt"), "logical_count").clone() else {
        panic!("logical_count is not a tensor")
    };
    let ours = torch::read(&torch::write(&[("logical_count", &theirs)])).unwrap();
    assert_eq!(*entry(&ours, "logical_count"), Value::Tensor(theirs));
}

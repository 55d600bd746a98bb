//! Colibri's formats read and written: layouts, round trips, the model
//! layer mapping, and every bad input named by its byte, line or field.

use super::*;
use crate::heat::common::test_util::{one_line, shared_data, small};
use crate::heat::{Heat, HeatFormat, HeatTable};
use residency_testkit::file_in;

/// GLM-5.2: 78 layers, 0..=2 dense, MoE 3..=77, 256 experts (the MTP
/// head is row 78 in usage files and not an MoE layer of the model).
fn glm() -> HeatContext {
    HeatContext {
        moe_layers: Some((3..=77).collect()),
        model_name: Some("glm-5.2".into()),
        experts: Some(vec![256; 75]),
        model_layers: Some(78),
        engine: None,
        allow_partial_heat: false,
    }
}

fn heat(counts: Vec<Vec<f64>>) -> Heat {
    Heat {
        model: None,
        format: HeatFormat::ColiHeat,
        source_layers: counts.len(),
        total: HeatTable {
            counts,
            tokens: None,
        },
        categories: Default::default(),
    }
}

#[test]
fn fnv1a32_known_values() {
    // FNV-1a-32 reference values: "" -> offset basis 0x811C9DC5, "a" -> 0xE40C292C.
    assert_eq!(engine_id(""), 0x811C_9DC5);
    assert_eq!(engine_id("a"), 0xE40C_292C);
    assert_ne!(engine_id("glm_moe_dsa"), engine_id("inkling"));
}

#[test]
fn heat_file_round_trip_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.bin");
    let h = heat(vec![vec![1.0, 2.0, 3.0], vec![4.0, 0.0, 4294967295.0]]);
    write_heat_file(&h, &path, &mut vec![]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // 12-byte header + 6 counts; bytes on disk start "1HTQ", nl = 2, ne = 3.
    assert_eq!(bytes.len(), 12 + 4 * 6);
    assert_eq!(
        &bytes[..12],
        &[0x31, 0x48, 0x54, 0x51, 2, 0, 0, 0, 3, 0, 0, 0]
    );
    assert_eq!(
        read_heat_file(&path, &HeatContext::default(), &mut vec![]).unwrap(),
        h
    );
}

#[test]
fn heat_file_extra_row_is_dropped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.bin");
    write_heat_file(
        &heat(vec![vec![1.0; 3], vec![2.0; 3], vec![9.0; 3]]),
        &path,
        &mut vec![],
    )
    .unwrap();
    let mut warnings = vec![];
    let h = read_heat_file(&path, &small(), &mut warnings).unwrap();
    assert_eq!(h.total.counts, vec![vec![1.0; 3], vec![2.0; 3]]);
    assert_eq!(warnings.len(), 1);
}

#[test]
fn heat_file_bad_inputs_name_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.bin");
    let mut good = Vec::new();
    for w in [HEAT_MAGIC, 2, 3, 1, 2, 3, 4, 5, 6] {
        good.extend_from_slice(&u32::to_le_bytes(w));
    }
    let mut bad_magic = good.clone();
    bad_magic[0] = 0;
    let mut zero_ne = good.clone();
    zero_ne[8] = 0;
    let mut long = good.clone();
    long.push(0);
    let one_layer = {
        let mut v = good[..12].to_vec();
        v[4] = 1;
        v.extend_from_slice(&good[12..24]);
        v
    };
    let none = HeatContext::default();
    let small = small();
    let cases: Vec<(Vec<u8>, &str, &HeatContext)> = vec![
        (
            good[..2].to_vec(),
            "byte 2: file ends inside the 12-byte",
            &none,
        ),
        (good[..10].to_vec(), "byte 10", &none),
        (bad_magic, "byte 0: magic is 0x51544800", &none),
        (zero_ne, "byte 8: ne (experts) is 0", &none),
        (
            good[..30].to_vec(),
            "byte 30: file ends after 4 of the 6 counts",
            &none,
        ),
        (long, "byte 36: 1 bytes follow", &none),
        // One row of the model's two reads (read_heat judges partial heat).
        (one_layer, "", &small),
        (good.clone(), "", &small),
    ];
    for (bytes, place, ctx) in cases {
        std::fs::write(&path, &bytes).unwrap();
        match read_heat_file(&path, ctx, &mut vec![]) {
            Err(e) => {
                one_line(e, "bad.bin", place);
            }
            Ok(_) => assert_eq!(place, "", "should have failed: {place}"),
        }
    }
    // 3 experts per layer in the file, the model has 2.
    let ctx = HeatContext {
        experts: Some(vec![2, 2]),
        ..small
    };
    std::fs::write(&path, &good).unwrap();
    one_line(
        read_heat_file(&path, &ctx, &mut vec![]).unwrap_err(),
        "bad.bin",
        "byte 8",
    );
}

#[test]
fn heat_file_refuses_fractions_and_ragged_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let e = write_heat_file(&heat(vec![vec![1.5, 2.0]]), &path, &mut vec![]).unwrap_err();
    one_line(e, "out.bin", "MoE layer 0, expert 0");
    let e =
        write_heat_file(&heat(vec![vec![1.0, 2.0], vec![1.0]]), &path, &mut vec![]).unwrap_err();
    one_line(e, "out.bin", "MoE layer 1");
    assert!(!path.exists());
}

#[test]
fn usage_round_trip_with_v1_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".coli_usage");
    let h = Heat {
        format: HeatFormat::ColiUsage,
        ..heat(vec![vec![0.0, 5.0, 1.0], vec![7.0, 0.0, 0.0]])
    };
    write_usage(&h, &path, &small(), &mut vec![]).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    // Model layers 1 and 2 (MoE ordinals 0 and 1), zero counts omitted.
    let want = format!(
        "-1 3 3\n-2 1 {}\n1 1 5\n1 2 1\n2 0 7\n",
        engine_id("glm_moe_dsa")
    );
    assert_eq!(text, want);
    assert_eq!(read_usage(&path, &small(), &mut vec![]).unwrap(), h);
}

#[test]
fn usage_legacy_and_iku1_map_model_layers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u");
    // Legacy: layer 0 is dense and layer 3 (MTP) is not an MoE layer of
    // `small`: both dropped, one warning naming [0, 3] and 2 + 4 selections.
    std::fs::write(&path, "1 0 2\n0 1 2\n2 2 3\n3 0 4\n").unwrap();
    let mut warnings = vec![];
    let h = read_usage(&path, &small(), &mut warnings).unwrap();
    assert_eq!(
        h.total.counts,
        vec![vec![2.0, 0.0, 0.0], vec![0.0, 0.0, 3.0]]
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("[0, 3]") && warnings[0].contains("(6 selections)"),
        "{}",
        warnings[0]
    );
    // IKU1: 3 dense rows of 3 (model layers 0, 1, 2); row 0 all zero.
    let mut bytes = Vec::new();
    for w in [USAGE_MAGIC, 3, 3, 0, 0, 0, 1, 2, 3, 4, 5, 6] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    assert_eq!(&bytes[..4], b"IKU1");
    std::fs::write(&path, &bytes).unwrap();
    let mut warnings = vec![];
    let h = read_usage(&path, &small(), &mut warnings).unwrap();
    assert_eq!(
        h.total.counts,
        vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]
    );
    assert!(warnings.is_empty());
    // Zero-byte file = all-zero history.
    std::fs::write(&path, "").unwrap();
    assert_eq!(
        read_usage(&path, &small(), &mut vec![])
            .unwrap()
            .total
            .counts,
        vec![vec![0.0; 3]; 2]
    );
}

#[test]
fn usage_engine_mismatch_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_in(
        dir.path(),
        "u",
        format!("-1 3 3\n-2 1 {}\n1 0 1\n", engine_id("olmoe")),
    );
    let ctx = HeatContext {
        engine: Some("glm_moe_dsa".into()),
        ..small()
    };
    let mut warnings = vec![];
    read_usage(&path, &ctx, &mut warnings).unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].contains("`olmoe`"),
        "{warnings:?}"
    );
}

#[test]
fn usage_bad_inputs_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad_usage");
    let cases: &[(&str, &str)] = &[
        (
            "1 0 x\n",
            "line 1, field 3 (count): `x` is not a non-negative whole number",
        ),
        ("1 0\n", "line 1: has 2 fields"),
        ("1 0 -4\n", "line 1, field 3 (count)"),
        (
            "1 7 1\n",
            "line 1, field 2 (expert): expert 7 does not exist in MoE layer 0 of `small`",
        ),
        (
            "-1 4 3\n",
            "line 1, field 2 (n_layers): 4 layers, `small` has 3",
        ),
        ("-1 3 8\n", "line 1, field 3 (n_experts): 8 experts"),
        ("-2 2 5\n", "line 1, field 2 (format_version): version 2"),
        ("-3 1 1\n", "line 1, field 1 (layer)"),
        (
            "1 0 1\n-1 3 3\n",
            "line 2: header record -1 comes after data",
        ),
        (
            "-1 3 3\n5 0 1\n",
            "line 2, field 1 (layer): 5 is past the header's layers 0..=3",
        ),
        (
            "1 0 1\n1 0 2\n",
            "line 2: layer 1 expert 0 is already given on line 1",
        ),
        (
            "0 0 1\n9 1 1\n",
            "layers: no row is in an MoE layer of `small`",
        ),
    ];
    for (text, place) in cases {
        std::fs::write(&path, text).unwrap();
        one_line(
            read_usage(&path, &small(), &mut vec![]).unwrap_err(),
            "bad_usage",
            place,
        );
    }
    std::fs::write(&path, b"1 0 1\n\x00\xff").unwrap();
    one_line(
        read_usage(&path, &small(), &mut vec![]).unwrap_err(),
        "bad_usage",
        "byte 7",
    );
    let mut bytes = USAGE_MAGIC.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[3, 0, 0, 0, 3, 0, 0, 0, 1]);
    std::fs::write(&path, &bytes).unwrap();
    one_line(
        read_usage(&path, &small(), &mut vec![]).unwrap_err(),
        "bad_usage",
        "byte 13",
    );
    // Without a model the model layers cannot be mapped.
    let msg = one_line(
        read_usage(&path, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "bad_usage",
        "layers",
    );
    assert!(msg.contains("--model"), "{msg}");
    let h = heat(vec![vec![1.0; 3]]);
    let msg = one_line(
        write_usage(&h, &path, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "bad_usage",
        "layers",
    );
    assert!(msg.contains("--model"), "{msg}");
    one_line(
        write_usage(&h, &path, &small(), &mut vec![]).unwrap_err(),
        "bad_usage",
        "heat has 1 MoE layers",
    );
}

#[test]
fn route_trace_groups_forwards_and_maps_layers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("route.txt");
    // A prefill forward of 2 rows (calls 0, 1 = layers 1, 2; layer 3 is
    // MTP and dropped), then a decode forward of 1 row (calls 2, 3).
    let text =
        "0 0 1 0:0.5000 1:0.5000\n0 1 1 2:1.0000 0:0.1\n1 0 2 1:0.7 2:0.3\n1 1 2 1:0.6 0:0.4\n\
                    1 0 3 2:1.0 1:0.0\n2 0 1 2:0.9 1:0.1\n3 0 2 0:0.5 2:0.5\n";
    std::fs::write(&path, text).unwrap();
    let mut warnings = vec![];
    let trace = read_route_trace(&path, &small(), &mut warnings).unwrap();
    assert_eq!(warnings.len(), 1);
    let seqs: Vec<(&str, u64)> = trace
        .tokens
        .iter()
        .map(|t| (t.seq.as_str(), t.pos))
        .collect();
    assert_eq!(seqs, [("0", 0), ("0", 1), ("1", 0)]);
    assert_eq!(trace.tokens[1].routes, vec![vec![2, 0], vec![1, 0]]);
    // Layer 1 (ordinal 0): ids 0,1 | 2,0 | 2,1 -> [2, 2, 2]; layer 2: 1,2 | 1,0 | 0,2 -> [2, 2, 2].
    let h = trace.heat();
    assert_eq!(
        h.total.counts,
        vec![vec![2.0, 2.0, 2.0], vec![2.0, 2.0, 2.0]]
    );
    assert_eq!(h.total.tokens, Some(vec![3, 3]));
}

#[test]
fn route_trace_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad_route");
    let cases: &[(&str, &str)] = &[
        ("0 0 1\n", "line 1: has 3 fields"),
        (
            "0 0 1 2\n",
            "line 1, field 4 (id:gate): `2` is not `<id>:<gate>`",
        ),
        ("0 0 1 x:0.5\n", "line 1, field 4 (id)"),
        ("0 0 1 1:abc\n", "line 1, field 4 (gate)"),
        ("0 z 1 1:0.5\n", "line 1, field 2 (row)"),
        ("0 0 1 5:0.5\n", "line 1: expert 5 does not exist"),
    ];
    for (text, place) in cases {
        std::fs::write(&path, text).unwrap();
        one_line(
            read_route_trace(&path, &small(), &mut vec![]).unwrap_err(),
            "bad_route",
            place,
        );
    }
    std::fs::write(&path, "0 0 1 1:0.5\n").unwrap();
    let msg = one_line(
        read_route_trace(&path, &HeatContext::default(), &mut vec![]).unwrap_err(),
        "bad_route",
        "layers",
    );
    assert!(msg.contains("--model"));
}

#[test]
fn real_glm_snapshot() {
    let Some(dir) = shared_data("colibri/glm52_m1ultra_fmt2_2026-08-04") else {
        return;
    };
    let path = dir.join("colibri_usage.snapshot");
    let mut warnings = vec![];
    let h = read_usage(&path, &glm(), &mut warnings).unwrap();
    // Independent sums, computed with awk on the file:
    //   awk '{s+=$3} END{print s}'          -> 6373208 (all rows, SOURCES.md)
    //   awk '$1==78{s+=$3} END{print s}'    -> 41408 (MTP row, dropped)
    //   awk '$1==3{s+=$3} END{print s}'     -> 84424 (= 8 x 10553 tokens; every MoE layer has this sum)
    let total: f64 = h.total.counts.iter().flatten().sum();
    assert_eq!(total + 41408.0, 6_373_208.0);
    assert_eq!(h.total.counts.len(), 75);
    assert!(h
        .total
        .counts
        .iter()
        .all(|r| r.len() == 256 && r.iter().sum::<f64>() == 84424.0));
    assert_eq!(h.total.counts[0][0], 429.0); // first line `3 0 429`
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("[78]") && warnings[0].contains("41408 selections"),
        "{}",
        warnings[0]
    );
    // Written back as v1 and read again: the same table.
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join(".coli_usage");
    write_usage(&h, &copy, &glm(), &mut vec![]).unwrap();
    assert_eq!(
        read_usage(&copy, &glm(), &mut vec![]).unwrap().total,
        h.total
    );
}

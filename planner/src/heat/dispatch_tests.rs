//! Tests of the public entry points of `heat`: detection plus dispatch in
//! `read_heat` / `read_trace` / `write_heat`, across formats and on the real
//! data sets.

use super::common::test_util::{one_line, shared_data};
use super::*;

fn sample() -> Heat {
    Heat {
        model: Some("small".into()),
        format: HeatFormat::Json,
        total: HeatTable {
            counts: vec![vec![3.0, 0.0, 1.0], vec![2.0, 2.0, 0.0]],
            tokens: Some(vec![2, 2]),
        },
        categories: BTreeMap::new(),
    }
}

fn small() -> HeatContext {
    HeatContext {
        moe_layers: Some(vec![1, 2]),
        model_name: Some("small".into()),
        experts: Some(vec![3, 3]),
        model_layers: Some(3),
        engine: None,
    }
}

#[test]
fn every_writable_format_round_trips_through_detection() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format) in [
        ("h.json", HeatFormat::Json),
        ("h.csv", HeatFormat::Csv),
        ("h.qth", HeatFormat::ColiHeat),
        (".coli_usage", HeatFormat::ColiUsage),
    ] {
        let path = dir.path().join(name);
        let mut warnings = vec![];
        write_heat(&sample(), &path, format, &small(), &mut warnings).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(detect_format(&path).unwrap(), format, "{name}");
        let back = read_heat(&path, None, &small(), &mut warnings).unwrap();
        // The Colibri formats hold counts only (no tokens, no model name).
        let lossy = matches!(format, HeatFormat::ColiHeat | HeatFormat::ColiUsage);
        assert_eq!(back.total.counts, sample().total.counts, "{name}");
        assert_eq!(back.total.tokens.is_none(), lossy, "{name}");
        assert_eq!(back.format, format);
    }
}

#[test]
fn writer_refusals_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    for format in [
        HeatFormat::Esft,
        HeatFormat::Qwen3Csv,
        HeatFormat::ColiRoute,
        HeatFormat::Jsonl,
    ] {
        one_line(
            write_heat(&sample(), &path, format, &small(), &mut vec![]).unwrap_err(),
            "out",
            "format",
        );
    }
    assert!(!path.exists());
    let mut with_categories = sample();
    with_categories
        .categories
        .insert("law".into(), sample().total);
    let mut warnings = vec![];
    write_heat(
        &with_categories,
        &path,
        HeatFormat::Csv,
        &small(),
        &mut warnings,
    )
    .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[test]
fn reader_refusals_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("h.json");
    write_heat(&sample(), &json, HeatFormat::Json, &small(), &mut vec![]).unwrap();
    // A model-name mismatch is a warning, not an error.
    let ctx = HeatContext {
        model_name: Some("other".into()),
        ..small()
    };
    let mut warnings = vec![];
    read_heat(&json, None, &ctx, &mut warnings).unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].contains("`other`"),
        "{warnings:?}"
    );
    // Counts are not a trace; a directory is not a json file.
    one_line(
        read_trace(&json, None, &small(), &mut vec![]).unwrap_err(),
        "h.json",
        "format",
    );
    one_line(
        read_heat(dir.path(), Some(HeatFormat::Json), &small(), &mut vec![]).unwrap_err(),
        "",
        "path",
    );
    one_line(
        read_heat(
            &dir.path().join("nope"),
            Some(HeatFormat::Json),
            &small(),
            &mut vec![],
        )
        .unwrap_err(),
        "nope",
        "path",
    );
}

#[test]
fn trace_round_trips_through_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tokens = vec![TokenRoutes {
        seq: "a".into(),
        pos: 3,
        category: Some("law".into()),
        routes: vec![vec![0, 2], vec![1]],
    }];
    let trace = Trace::build(HeatFormat::Jsonl, &small(), 2, 0, tokens);
    write_trace(&trace, &path).unwrap();
    assert_eq!(
        read_trace(&path, None, &small(), &mut vec![]).unwrap(),
        trace
    );
    let heat = read_heat(&path, None, &small(), &mut vec![]).unwrap();
    assert_eq!(heat.total.tokens, Some(vec![1, 1]));
    assert_eq!(
        heat.categories["law"].counts,
        vec![vec![1.0, 0.0, 1.0], vec![0.0, 1.0, 0.0]]
    );
}

#[test]
fn real_data_sets_read_through_detection() {
    let Some(traces) = shared_data("traces") else {
        return;
    };
    // (data set, MoE layers, experts, categories)
    for (sub, layers, experts, categories) in [
        ("esft_deepseek_v2_lite", 26, 64, 4),
        ("llama4_maverick_mmlu", 24, 128, 3),
        ("mixtral_8x7b_speculative_moe", 32, 8, 2),
        ("qwen3_30b_a3b_cross_lang", 48, 128, 12),
    ] {
        let mut warnings = vec![];
        let heat = read_heat(
            &traces.join(sub),
            None,
            &HeatContext::default(),
            &mut warnings,
        )
        .unwrap();
        assert!(warnings.is_empty(), "{sub}: {warnings:?}");
        assert_eq!(heat.total.counts.len(), layers, "{sub}");
        assert!(
            heat.total.counts.iter().all(|r| r.len() == experts),
            "{sub}"
        );
        assert_eq!(heat.categories.len(), categories, "{sub}");
        // The per-token sets: every category's tokens add up to the total's.
        if let Some(total) = &heat.total.tokens {
            let mut sum = vec![0; layers];
            for t in heat.categories.values() {
                for (s, n) in sum.iter_mut().zip(t.tokens.as_ref().unwrap()) {
                    *s += n;
                }
            }
            assert_eq!(&sum, total, "{sub}");
        }
    }
}

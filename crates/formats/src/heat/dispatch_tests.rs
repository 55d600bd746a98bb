//! Tests of the public entry points of `heat`: detection plus dispatch in
//! `read_heat` / `read_trace` / `write_heat`, across formats and on the real
//! data sets.

use super::common::test_util::{one_line, shared_data, small};
use super::*;

fn sample() -> Heat {
    Heat {
        model: Some("small".into()),
        format: HeatFormat::Json,
        source_layers: 2,
        total: HeatTable {
            counts: vec![vec![3.0, 0.0, 1.0], vec![2.0, 2.0, 0.0]],
            tokens: Some(vec![2, 2]),
        },
        categories: BTreeMap::new(),
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

/// A model of three MoE layers (model layers 1..=3) of 3 experts, top-2.
fn three_layers() -> Model {
    Model::from_yaml_str(
        "name: three\nlayers: 4\nmoe_layers: \"1..=3\"\nexperts: 3\ntop_k: 2\nhidden: 4\n\
         expert_intermediate: 4\nformats: { bf16: 96 }\ntiers: { gpu: bf16, ram: bf16, disk: bf16 }\n",
        Path::new("three.yaml"),
    )
    .unwrap()
}

fn coli_heat_bytes(nl: u32, ne: u32, counts: &[u32]) -> Vec<u8> {
    [colibri::HEAT_MAGIC, nl, ne]
        .iter()
        .chain(counts)
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[test]
fn heat_giving_fewer_moe_layers_than_the_model_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let model = three_layers();
    let refuse = HeatContext::for_model(&model);
    let allow = HeatContext {
        allow_partial_heat: true,
        ..HeatContext::for_model(&model)
    };
    // Each source gives MoE layers 0 and 1 of three: dense formats by their
    // rows, sparse ones by their highest layer, a trace by the last layer a
    // token was observed in (token 2 lists layer 2, empty: not observed).
    let cases: Vec<(&str, HeatFormat, Vec<u8>)> = vec![
        (
            "h.json",
            HeatFormat::Json,
            br#"{"layers": [[1, 2, 1], [0, 2, 2]]}"#.to_vec(),
        ),
        (
            "h.csv",
            HeatFormat::Csv,
            b"layer,expert,count\n0,0,1\n0,1,2\n1,2,2\n".to_vec(),
        ),
        (
            "h.qth",
            HeatFormat::ColiHeat,
            coli_heat_bytes(2, 3, &[1, 2, 1, 0, 2, 2]),
        ),
        (
            "t.jsonl",
            HeatFormat::Jsonl,
            b"{\"routes\":[[0,1],[1,2]]}\n{\"routes\":[[0,2],[0,1],[]]}\n".to_vec(),
        ),
        // Headerless: model layers 1 and 2 (MoE layers 0 and 1) only.
        (
            "legacy.coli_usage",
            HeatFormat::ColiUsage,
            b"1 0 3\n2 1 4\n".to_vec(),
        ),
    ];
    for (name, format, bytes) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let e = read_heat(&path, Some(format), &refuse, &mut vec![]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: shape: heat gives 2 MoE layers, model `three` has 3; use heat recorded \
                 on every MoE layer of this model, or pass --allow-partial-heat to give the \
                 missing layers uniform heat",
                path.display()
            )
        );
        let heat = read_heat(&path, Some(format), &allow, &mut vec![]).unwrap();
        assert_eq!(heat.source_layers, 2, "{name}");
        let mut notes = vec![];
        let rates = heat.total.use_rates(&model, &path, &mut notes).unwrap();
        // The missing layer: top_k / experts = 2 / 3 for each expert.
        assert_eq!(rates[2], vec![2.0 / 3.0; 3], "{name}");
        assert_eq!(
            notes,
            vec![format!(
                "{}: MoE layers [2] have no routed selections; they get uniform heat (top_k / experts)",
                path.display()
            )],
            "{name}"
        );
    }
}

#[test]
fn a_layer_without_selections_inside_the_source_is_not_partial_heat() {
    let dir = tempfile::tempdir().unwrap();
    let model = three_layers();
    let ctx = HeatContext::for_model(&model);
    // (file, format, bytes, the MoE layer without selections)
    let cases: Vec<(&str, HeatFormat, Vec<u8>, usize)> = vec![
        // Our csv writes zeros, so the last layer is there.
        (
            "h.csv",
            HeatFormat::Csv,
            b"layer,expert,count\n0,0,1\n1,1,1\n2,0,0\n2,1,0\n2,2,0\n".to_vec(),
            2,
        ),
        // No token observed in layer 1, but the trace goes on to layer 2.
        (
            "t.jsonl",
            HeatFormat::Jsonl,
            b"{\"routes\":[[0,1],null,[1,2]]}\n".to_vec(),
            1,
        ),
        // The v1 header names all 4 model layers; zero counts are not written.
        (
            "v1.coli_usage",
            HeatFormat::ColiUsage,
            b"-1 4 3\n1 0 3\n2 1 4\n".to_vec(),
            2,
        ),
    ];
    for (name, format, bytes, empty) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let heat = read_heat(&path, Some(format), &ctx, &mut vec![]).unwrap();
        assert_eq!(heat.source_layers, 3, "{name}");
        let mut notes = vec![];
        let rates = heat.total.use_rates(&model, &path, &mut notes).unwrap();
        assert_eq!(rates[empty], vec![2.0 / 3.0; 3], "{name}");
        assert_eq!(
            notes,
            vec![format!(
                "{}: MoE layers [{empty}] have no routed selections; they get uniform heat (top_k / experts)",
                path.display()
            )],
            "{name}"
        );
    }
}

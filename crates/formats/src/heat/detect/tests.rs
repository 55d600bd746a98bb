//! Tests of `detect`.

use super::*;
use crate::heat::common::test_util::{one_line, shared_data};

#[test]
fn files_by_magic_extension_and_content() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[u8], HeatFormat)] = &[
        (
            "a.bin",
            &[0x31, 0x48, 0x54, 0x51, 1, 0, 0, 0],
            HeatFormat::ColiHeat,
        ),
        ("a.json", b"IKU1\x01\x00", HeatFormat::ColiUsage),
        ("h.json", b"  {\"layers\": []}", HeatFormat::Json),
        ("q.json", b"[{\"0\": null}]", HeatFormat::Llama4Json),
        (
            "t.jsonl",
            b"{\"seq\":\"a\",\"routes\":[[1]]}\n",
            HeatFormat::Jsonl,
        ),
        (
            "m.jsonl",
            b"{\"dataset\": \"g\", \"problem_id\": 0}\n",
            HeatFormat::MixtralJsonl,
        ),
        (
            "h.csv",
            b"# tokens=3\nlayer,expert,count\n",
            HeatFormat::Csv,
        ),
        ("w.csv", b"Layer,Expert_0\n", HeatFormat::Csv),
        ("x.csv", b"Layer,Language,Expert_0\n", HeatFormat::Qwen3Csv),
        (
            "colibri_usage.snapshot",
            b"3 0 429\n3 1 78\n",
            HeatFormat::ColiUsage,
        ),
        (".coli_usage", b"-1 78 256\n-2 1 5\n", HeatFormat::ColiUsage),
        (".coli_usage2", b"", HeatFormat::ColiUsage),
        (
            "route.txt",
            b"0 0 3 12:0.5000 7:0.2500\n",
            HeatFormat::ColiRoute,
        ),
        ("trace", b"{\"routes\":[[1]]}\n", HeatFormat::Jsonl),
        ("heat", b"layer,expert,count\n", HeatFormat::Csv),
        ("expert_weights_3.txt", b"1\t2", HeatFormat::Esft),
    ];
    for (name, bytes, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(detect_format(&path).unwrap(), *want, "{name}");
    }
    for (name, bytes) in [
        ("x.json", &b"hello"[..]),
        ("y.jsonl", b"{\"a\":1}"),
        ("z", b"hello world"),
        ("e", b""),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let msg = one_line(detect_format(&path).unwrap_err(), name, "format");
        assert!(msg.contains("--heat-format"), "{msg}");
    }
    one_line(
        detect_format(&dir.path().join("absent")).unwrap_err(),
        "absent",
        "path",
    );
}

#[test]
fn directories() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("law")).unwrap();
    std::fs::write(dir.path().join("law/expert_weights_1.txt"), "").unwrap();
    assert_eq!(detect_format(dir.path()).unwrap(), HeatFormat::Esft);
    assert_eq!(
        detect_format(&dir.path().join("law")).unwrap(),
        HeatFormat::Esft
    );
    std::fs::create_dir(dir.path().join("anatomy")).unwrap();
    std::fs::write(dir.path().join("anatomy/1.json"), "[]").unwrap();
    let msg = one_line(detect_format(dir.path()).unwrap_err(), "", "directory");
    assert!(msg.contains("esft, llama4-json"), "{msg}");
    let empty = tempfile::tempdir().unwrap();
    one_line(detect_format(empty.path()).unwrap_err(), "", "directory");
}

#[test]
fn real_data_sets() {
    let Some(traces) = shared_data("traces") else {
        return;
    };
    for (sub, want) in [
        ("esft_deepseek_v2_lite", HeatFormat::Esft),
        ("esft_deepseek_v2_lite/law", HeatFormat::Esft),
        ("llama4_maverick_mmlu", HeatFormat::Llama4Json),
        (
            "llama4_maverick_mmlu/anatomy/100.json",
            HeatFormat::Llama4Json,
        ),
        ("mixtral_8x7b_speculative_moe", HeatFormat::MixtralJsonl),
        (
            "mixtral_8x7b_speculative_moe/gsm8k_2_routing.jsonl",
            HeatFormat::MixtralJsonl,
        ),
        ("qwen3_30b_a3b_cross_lang", HeatFormat::Qwen3Csv),
    ] {
        assert_eq!(detect_format(&traces.join(sub)).unwrap(), want, "{sub}");
    }
    let Some(glm) = shared_data("colibri/glm52_m1ultra_fmt2_2026-08-04/colibri_usage.snapshot")
    else {
        return;
    };
    assert_eq!(detect_format(&glm).unwrap(), HeatFormat::ColiUsage);
}

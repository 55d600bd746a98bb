//! End-to-end tests of `residency profile`: detection on this machine gives
//! a profile the planner reads; calibration measures it within a stated
//! spread and `plan` accepts the result with no hand edits; `--from-log` on Colibri's real logs gives the values
//! computed by hand below; bad inputs give one line naming the file, exit 1
//! and no output file.

mod common;

use common::*;
use residency_core::profile::HardwareProfile;
use std::path::Path;

/// The `[a..b]` ranges of the `measured: median ... [a..b]` comments.
fn measured_ranges(yaml: &str) -> Vec<(String, f64, f64)> {
    yaml.lines()
        .filter_map(|line| {
            let (key, comment) = line.split_once("# measured: median ")?;
            let range = comment.split_once('[')?.1.split_once(']')?.0;
            let (a, b) = range.split_once("..")?;
            Some((key.trim().to_string(), a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

#[test]
fn detect_calibrate_plan_with_no_hand_edits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let profile = d.join("box.yaml");
    let o = run(&[
        "profile",
        "detect",
        "--model-dir",
        s(d),
        "--out",
        s(&profile),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("NUMA node(s)"), "{}", stdout(&o));
    let v = run(&["validate", s(&profile)]);
    assert!(v.status.success(), "{}", stderr(&v));
    // Detection only: every rate is a documented default.
    let detected = std::fs::read_to_string(&profile).unwrap();
    assert!(
        detected.contains("gemv_bandwidth") && detected.contains("# default: "),
        "{detected}"
    );
    assert!(!detected.contains("# measured: "));

    // `--seconds 2` spent on one node and the drive (no GPU here).
    let o = run(&[
        "profile",
        "calibrate",
        s(&profile),
        "--model-dir",
        s(d),
        "--seconds",
        "2",
        "--out",
        s(&profile),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let calibrated = std::fs::read_to_string(&profile).unwrap();
    let p = HardwareProfile::from_yaml_str(&calibrated, &profile).unwrap();
    assert!(p.numa.iter().all(|n| n.gemv_bandwidth.0 > 0.0));
    let ranges = measured_ranges(&calibrated);
    assert!(
        ranges
            .iter()
            .any(|(k, _, _)| k.starts_with("gemv_bandwidth")),
        "{calibrated}"
    );
    // The stated spread, as a guard against nonsense rather than a speed
    // claim (speed belongs to benchmarks): the slowest trial within 20x of
    // the fastest. Idle, this 2-core machine gives 1.1-1.8x; under a
    // concurrent benchmark it went past 3x, so a tighter bound would flake.
    // Latencies are exempt from the ratio: a shared virtual disk's single
    // 4 KiB reads have real tail outliers (one at 1.3 ms among 43 us ones
    // was seen), which the reported range shows and the median ignores.
    // An overhead is a difference of two timings: a trial can fall below
    // zero on a noisy machine (the profile keeps max(median, 0)), so only
    // the value written is checked.
    for (key, low, high) in &ranges {
        assert!(
            key.contains("_overhead")
                || (*low > 0.0 && (key.contains("latency") || high / low <= 20.0)),
            "{key}: [{low}..{high}]\n{calibrated}"
        );
    }
    assert!(p.numa.iter().all(|n| n.stage_overhead.0 >= 0.0));
    // Nothing left behind but the profile.
    assert_eq!(std::fs::read_dir(d).unwrap().count(), 1);

    let o = run(&["plan", "--profile", s(&profile), "--time-limit", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("predicted:"), "{}", stdout(&o));
}

#[test]
fn detect_without_out_prints_the_profile() {
    let o = run(&["profile", "detect"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let yaml = stdout(&o);
    HardwareProfile::from_yaml_str(&yaml, Path::new("<stdout>")).unwrap();
    assert!(yaml.starts_with("# Hardware profile of "), "{yaml}");
}

/// Calibrates `base` from `log` (with `model` when given) and returns the
/// profile written.
fn from_log(base: &str, log: &Path, model: Option<&str>) -> (HardwareProfile, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("box.yaml");
    let mut args = vec![
        "profile",
        "calibrate",
        base,
        "--from-log",
        s(log),
        "--out",
        s(&out),
    ];
    if let Some(m) = model {
        args.extend(["--model", m]);
    }
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    (HardwareProfile::from_yaml_str(&text, &out).unwrap(), text)
}

#[test]
fn from_log_on_colibri_s_real_logs() {
    let Some(raw) = shared_data("colibri/qwen36_raw") else {
        return;
    };
    let desktop = profile("desktop-1gpu-8gb");
    let qwen = model("qwen3.6-35b-a3b");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();

    // The 7950X + 4070 Ti SUPER log (the desktop profile's CPU box): two
    // runs, `take` 1.37 and 1.63 ms/token over Qwen3.6's 40 MoE layers =
    // 34.25 and 40.75 us, median 37.5 us; outside the phases 1.5 and 1.3
    // ms, median 1.4 ms. No `expert kernel` line: the CPU rate stays.
    let (p, text) = from_log(
        &desktop,
        &raw.join("qwen36-vs-llamacpp-2026-09-18-raw.txt"),
        Some(&qwen),
    );
    assert!(close(p.gpus[0].sync_overhead.0, 37.5e-6), "{text}");
    assert!(close(p.fixed_token_seconds.0, 1.4e-3), "{text}");
    assert!(close(p.numa[0].gemv_bandwidth.0, 39e9), "{text}");
    assert!(text.contains("lines 45 and 61 of"), "{text}");

    // The CPU-only laptop runs: `expert kernel: compute` 38.04, 41.06 and
    // 41.03 ms/token for top-8 x 40 layers x 1,671,168 B (int4 gs64) =
    // 534,773,760 B a token: 14.06, 13.02 and 13.03 GB/s, median 13.03
    // GB/s; outside the phases 0.3 ms each time.
    let (p, text) = from_log(
        &desktop,
        &raw.join("qwen36-streaming-tier-2026-09-22-cpu-raw.txt"),
        Some(&qwen),
    );
    assert!(close(p.numa[0].gemv_bandwidth.0, 13.03e9), "{text}");
    assert!(close(p.fixed_token_seconds.0, 0.3e-3), "{text}");

    // The CUDA streaming-tier runs: `take` 6.45, 0.31 and 5.90 ms/token / 40
    // = 161.25, 7.75 and 147.5 us, median 147.5 us; outside 0.3, 0.4, 0.4 ms.
    let (p, _) = from_log(
        &desktop,
        &raw.join("qwen36-streaming-tier-2026-09-22-gpu-raw.txt"),
        Some(&qwen),
    );
    assert!(close(p.gpus[0].sync_overhead.0, 147.5e-6));
    assert!(close(p.fixed_token_seconds.0, 0.4e-3));

    // GLM-5.2 on the M1 Ultra: the decode profile (line 217) says 1340.818 s
    // read service and 431.739 s wait: 0.32200 of the read time is felt; the
    // prefill profile (line 37, 9.057 / 295.811 = 0.031) is left out.
    let Some(glm) = shared_data("colibri/glm52_m1ultra_fmt2_2026-08-04/01_Abaseline.log") else {
        return;
    };
    let (p, text) = from_log(&desktop, &glm, None);
    assert_eq!(p.felt_fraction, Some(0.322), "{text}");
    assert!(text.contains("line 217 of"), "{text}");
}

#[test]
fn bad_inputs_are_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.yaml");
    let desktop = profile("desktop-1gpu-8gb");

    let absent = d.join("absent.yaml");
    assert_bad_input(
        &[
            "profile",
            "calibrate",
            s(&absent),
            "--seconds",
            "1",
            "--out",
            s(&out),
        ],
        &absent,
        "give a profile written by `residency profile detect",
        &out,
    );
    let no_log = d.join("absent.log");
    assert_bad_input(
        &[
            "profile",
            "calibrate",
            &desktop,
            "--from-log",
            s(&no_log),
            "--out",
            s(&out),
        ],
        &no_log,
        "give the path of a Colibri log",
        &out,
    );
    // PowerShell's `>` writes UTF-16.
    let utf16 = d.join("utf16.log");
    let bytes: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(
            "[timers] decode: 63 tokens"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    std::fs::write(&utf16, bytes).unwrap();
    assert_bad_input(
        &[
            "profile",
            "calibrate",
            &desktop,
            "--from-log",
            s(&utf16),
            "--out",
            s(&out),
        ],
        &utf16,
        "saved as UTF-8",
        &out,
    );
    let plain = d.join("plain.log");
    std::fs::write(&plain, "loaded in 1.23s\nprompt: 13 tokens\n").unwrap();
    assert_bad_input(
        &[
            "profile",
            "calibrate",
            &desktop,
            "--from-log",
            s(&plain),
            "--out",
            s(&out),
        ],
        &plain,
        "COLI_TIMERS=1",
        &out,
    );
    assert_bad_input(
        &[
            "profile",
            "calibrate",
            &desktop,
            "--seconds",
            "0",
            "--out",
            s(&out),
        ],
        Path::new("--seconds"),
        "give a positive number of seconds",
        &out,
    );
    let not_a_dir = d.join("nowhere");
    assert_bad_input(
        &[
            "profile",
            "detect",
            "--model-dir",
            s(&not_a_dir),
            "--out",
            s(&out),
        ],
        &not_a_dir,
        "is not a directory",
        &out,
    );
}

#[test]
fn from_llama_bench_fits_a_timing_that_plan_prices_llama_cpp_with() {
    // The repository's H200 runs of the Qwen3-30B-A3B-geometry file
    // (docs/device/llama-bench-h200/), against the header of that file.
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("q.gguf");
    residency_testkit::gguf::Qwen3MoeGeometry::QWEN3_30B_A3B
        .gguf()
        .write(&gguf);
    let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/device/llama-bench-h200");
    let json = |name: &str| runs.join(format!("{name}.json")).display().to_string();
    let out = dir.path().join("box.yaml");
    let fit = [
        json("gpuall_a"),
        json("expscpu_a"),
        json("downcpu_a"),
        json("ngl0_a"),
    ];
    let mut args = vec!["profile", "calibrate", "profiles/hardware/h200-node.yaml"];
    args.extend(["--model", s(&gguf), "--from-llama-bench"]);
    args.extend(fit.iter().map(String::as_str));
    let check = json("ncmoe24_a");
    args.extend(["--check", &check, "--out", s(&out)]);
    let o = run_ok(&args);
    let text = stdout(&o);
    // Four placements that differ in GPU layers, CPU bytes, crossings and
    // CPU layers determine those four terms; runs of one file cannot tell
    // the per-matrix and per-token costs apart.
    assert!(
        text.contains("kept from the profile: cpu_matrix_overhead, token_overhead"),
        "{text}"
    );
    assert!(
        text.contains("-ngl 99 -ncmoe 24") && !text.contains("-ncmoe 24 (fit)"),
        "{text}"
    );
    let profile = HardwareProfile::from_yaml_file(&out).unwrap();
    let timing = profile.llama_cpp.expect("a llama_cpp section");
    assert!(timing.gpu_layer_overhead.0 > 0.0 && timing.cpu_layer_overhead.0 > 0.0);

    let o = run_ok(&[
        "plan",
        "--model",
        s(&gguf),
        "--profile",
        s(&out),
        "--time-limit",
        "2",
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("llama.cpp at the same VRAM, by the profile's llama.cpp timing"),
        "{text}"
    );

    // A run whose layers llama.cpp fitted itself (`-fitt`): its JSON says
    // n_gpu_layers -1 and not where the layers went, so it is refused.
    let mut fitted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fit[0]).unwrap()).unwrap();
    fitted[0]["n_gpu_layers"] = (-1).into();
    fitted[0]["fit_target"] = 75097.into();
    let fitted_path = dir.path().join("fitted.json");
    std::fs::write(&fitted_path, fitted.to_string()).unwrap();
    let o = run(&[
        "profile",
        "calibrate",
        "profiles/hardware/h200-node.yaml",
        "--model",
        s(&gguf),
        "--from-llama-bench",
        &fit[1],
        s(&fitted_path),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("fitted.json: [0].n_gpu_layers: is -1")
            && e.contains("75097 MiB")
            && e.contains("llama-fit-params"),
        "{e}"
    );

    // The runs name the file's tensors: a model description is refused.
    let o = run(&[
        "profile",
        "calibrate",
        "profiles/hardware/h200-node.yaml",
        "--model",
        "profiles/models/qwen3-30b-a3b.yaml",
        "--from-llama-bench",
        &fit[0],
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--model profiles/models/qwen3-30b-a3b.yaml"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn from_llama_bench_fits_runs_of_two_files_and_refuses_a_run_of_neither() {
    // The H200 runs of `q` (Qwen3-30B-A3B geometry) and `g2` (24 layers,
    // top-4 of 64), against the headers of both files: each run is matched
    // to its file by `model_size`, and two geometries fit every term.
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q.gguf");
    let g2 = dir.path().join("g2.gguf");
    residency_testkit::gguf::Qwen3MoeGeometry::QWEN3_30B_A3B
        .gguf()
        .write(&q);
    residency_testkit::gguf::Qwen3MoeGeometry::G2
        .gguf()
        .write(&g2);
    let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/device/llama-bench-h200");
    let json = |name: &str| runs.join(format!("{name}.json")).display().to_string();
    // Every round of each placement (one round of g2 leaves the per-matrix
    // cost to noise: it fits below zero and keeps the prior).
    let mut fit = Vec::new();
    for (placement, rounds) in [
        ("gpuall", "acdef"),
        ("expscpu", "acdef"),
        ("downcpu", "acdef"),
        ("ngl0", "acdef"),
        ("g2_gpuall", "cd"),
        ("g2_expscpu", "cd"),
    ] {
        fit.extend(rounds.chars().map(|r| json(&format!("{placement}_{r}"))));
    }
    let check = json("g2_ncmoe12_c");
    let out = dir.path().join("box.yaml");
    let mut args = vec!["profile", "calibrate", "profiles/hardware/h200-node.yaml"];
    args.extend(["--model", s(&q), "--model", s(&g2), "--from-llama-bench"]);
    args.extend(fit.iter().map(String::as_str));
    args.extend(["--check", &check, "--out", s(&out)]);
    let o = run_ok(&args);
    let text = stdout(&o);
    assert!(text.contains("kept from the profile: none"), "{text}");
    assert!(text.contains("g2.gguf: -ngl 99 -ncmoe 12"), "{text}");
    let profile = HardwareProfile::from_yaml_file(&out).unwrap();
    let timing = profile.llama_cpp.expect("a llama_cpp section");
    assert!(timing.cpu_matrix_overhead.0 > 0.0, "{timing:?}");

    // A run of neither file: one line naming it, no profile written.
    let out = dir.path().join("none.yaml");
    let mut args = vec!["profile", "calibrate", "profiles/hardware/h200-node.yaml"];
    let g2_run = json("g2_gpuall_c");
    args.extend(["--model", s(&q), "--from-llama-bench", &fit[0], &g2_run]);
    args.extend(["--out", s(&out)]);
    let line = one_error_line(&args, &out);
    assert!(
        line.contains("g2_gpuall_c.json") && line.contains("model_size"),
        "{line}"
    );
    // Several models without llama-bench runs: refused, not guessed.
    let args = [
        "profile",
        "calibrate",
        "profiles/hardware/h200-node.yaml",
        "--model",
        s(&q),
        "--model",
        s(&g2),
        "--from-log",
        "none.log",
        "--out",
        s(&out),
    ];
    let line = one_error_line(&args, &out);
    assert!(line.contains("give one --model"), "{line}");
}

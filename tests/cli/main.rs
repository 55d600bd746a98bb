//! End-to-end tests of the `residency` command: the main job on embedded
//! defaults, plan files that validate, and every bad-input case giving one
//! line that names the file, a non-zero exit and no output file.

#[path = "../common/mod.rs"]
mod common;
mod constraints;

use common::*;
use std::path::{Path, PathBuf};

#[test]
fn plan_on_embedded_defaults_prints_a_summary() {
    let o = run(&["plan", "--time-limit", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "DeepSeek-V2-Lite",
        "gpu:0",
        "gpu:1",
        "ram:0",
        "predicted:",
        "tok/s",
        "greedy baseline",
        "gap",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
}

#[test]
fn a_reader_that_stops_early_ends_the_plan_without_a_panic() {
    use std::process::{Command, Stdio};
    // `residency plan | head -0`: the pipe is closed before the summary's
    // first line, so every write to it fails.
    let mut child = Command::new(BIN)
        .args(["plan", "--time-limit", "2"])
        .current_dir(ROOT)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!o.status.success());
}

#[test]
fn plan_files_validate_and_match_the_cost_model() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["plan.json", "plan.yaml"] {
        let path = dir.path().join(name);
        let o = run(&["plan", "--time-limit", "2", "--out", path.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v = run(&["validate", path.to_str().unwrap()]);
        assert!(v.status.success(), "{}", stderr(&v));
        assert!(stdout(&v).contains("matches the cost model"));
    }
    // The JSON plan has the fields of design §5, and no place is over capacity.
    let text = std::fs::read_to_string(dir.path().join("plan.json")).unwrap();
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["format"], "residency-plan");
    assert_eq!(
        plan["places"],
        serde_json::json!(["gpu:0", "gpu:1", "ram:0", "disk:0"])
    );
    assert_eq!(plan["experts"].as_array().unwrap().len(), 26);
    for usage in plan["usage"].as_array().unwrap() {
        assert!(
            usage["used_bytes"].as_u64() <= usage["capacity_bytes"].as_u64(),
            "{usage}"
        );
    }
    let o = &plan["objective"];
    let (t, lb) = (
        o["token_seconds"].as_f64().unwrap(),
        o["lower_bound"].as_f64().unwrap(),
    );
    assert!(lb <= t && (o["gap"].as_f64().unwrap() - (t / lb - 1.0)).abs() < 1e-12);
    assert!((o["tok_per_s"].as_f64().unwrap() * t - 1.0).abs() < 1e-12);
    // A stage's time is the largest of its resources' times (f = 0 here).
    for stage in plan["stages"].as_array().unwrap() {
        let max = stage["resources"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!(
            (stage["seconds"].as_f64().unwrap() - max).abs() <= 1e-15,
            "{stage}"
        );
    }
}

#[test]
fn explain_and_diff_read_plans() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    assert!(
        run(&["plan", "--time-limit", "2", "--out", a.to_str().unwrap()])
            .status
            .success()
    );
    // A plan of the same inputs with less time, then moved against the first.
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    // Move the first expert that is not in RAM there (which one depends on
    // how far the 2 s solve got, so it is looked up, not assumed).
    let ram = 2;
    let e = plan["experts"][0]
        .as_array()
        .unwrap()
        .iter()
        .position(|p| p.as_u64() != Some(ram))
        .expect("some expert of layer 0 sits on a GPU");
    let moved = plan["experts"][0][e].as_u64().unwrap();
    plan["experts"][0][e] = serde_json::json!(ram);
    std::fs::write(&b, serde_json::to_string(&plan).unwrap()).unwrap();
    let e = run(&["explain", a.to_str().unwrap(), "--time-limit", "1"]);
    assert!(e.status.success(), "{}", stderr(&e));
    for needle in [
        "one more GiB",
        "coldest resident",
        "hottest outside",
        "lm_head on",
    ] {
        assert!(stdout(&e).contains(needle), "{needle}");
    }
    // b's objective no longer matches its placement, but diff only needs placements.
    let d = run(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(d.status.success(), "{}", stderr(&d));
    let out = stdout(&d);
    assert!(
        out.contains("moved: 1 experts, 0 trunk components"),
        "{out}"
    );
    assert!(
        out.contains(&format!("gpu:{moved} -> ram:0: 1 objects")),
        "{out}"
    );
}

#[test]
fn bad_profiles_give_one_line_and_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let good = std::fs::read_to_string(profile("threadripper-3945wx-rtx3070-quadro4000")).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace("    cores: 12", "    cores: 12\n    colour: red"),
            "unknown field `colour`",
        ),
        (good.replacen("vram: 8 GiB", "vram: 8 GB/s", 1), "rate"),
        (good.replacen("ram: 64 GiB", "ram: 0", 1), "numa[0]"),
        (
            good.replacen(
                "numa: 0\n    gemv_bandwidth: 314",
                "numa: 5\n    gemv_bandwidth: 314",
                1,
            ),
            "gpus[0].numa",
        ),
        (
            good.replace("felt_fraction: 0.0", "felt_fraction: .nan"),
            "felt_fraction",
        ),
        (
            good.replacen("read_latency: 80 us", "read_latency: 80", 1),
            "time",
        ),
        (
            good.replacen("gemv_bandwidth: 16.8 GB/s", "gemv_bandwidth: -16.8 GB/s", 1),
            "negative",
        ),
    ];
    for (i, (text, place)) in cases.into_iter().enumerate() {
        assert_ne!(text, good, "case {i} changed nothing");
        let file = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let args = [
            "plan",
            "--profile",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        assert_bad_input(&args, &file, place, &out);
        assert_bad_input(
            &["validate", file.to_str().unwrap(), "--kind", "profile"],
            &file,
            place,
            &out,
        );
    }
}

#[test]
fn bad_models_and_heat_give_one_line_and_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let good = std::fs::read_to_string(model("deepseek-v2-lite")).unwrap();
    for (i, (text, place)) in [
        (
            good.replace("moe_layers: \"1..=26\"", "moe_layers: \"1..=30\""),
            "moe_layers",
        ),
        (good.replace("top_k: 6", "top_k: 0"), "top_k"),
        (
            good.replace("tiers: { gpu: int4", "tiers: { gpu: fp8"),
            "tiers.gpu",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.path().join(format!("model{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        assert_bad_input(
            &[
                "plan",
                "--model",
                file.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &file,
            place,
            &out,
        );
    }

    // Heat with 2 layers of 2 experts for a model with 26 of 64: the error
    // names both shapes.
    let json = dir.path().join("heat.json");
    std::fs::write(&json, r#"{"tokens": 10, "layers": [[1, 2], [3, 4]]}"#).unwrap();
    let m = model("deepseek-v2-lite");
    assert_bad_input(&plan_with_heat(&m, &json, &[], &out), &json, "26", &out);

    // A Colibri HEAT_FILE cut short, and one with a wrong magic number.
    let mut bytes = Vec::new();
    for v in [0x5154_4831u32, 26, 64] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes.extend_from_slice(&[1, 0, 0, 0, 2, 0]);
    let truncated = dir.path().join("truncated.heat");
    std::fs::write(&truncated, &bytes).unwrap();
    let coli_heat = ["--heat-format", "coli-heat"];
    assert_bad_input(
        &plan_with_heat(&m, &truncated, &coli_heat, &out),
        &truncated,
        "byte",
        &out,
    );
    bytes[0] = 0;
    let magic = dir.path().join("magic.heat");
    std::fs::write(&magic, &bytes).unwrap();
    assert_bad_input(
        &plan_with_heat(&m, &magic, &coli_heat, &out),
        &magic,
        "magic",
        &out,
    );
}

#[test]
fn a_model_with_top_k_above_its_experts_gives_one_line_and_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let good = std::fs::read_to_string(model("deepseek-v2-lite")).unwrap();
    let file = dir.path().join("top_k.yaml");
    std::fs::write(&file, good.replace("top_k: 6", "top_k: 65")).unwrap();
    let want = format!(
        "error: {}: top_k: 65 is larger than experts 64: a token cannot pick more experts \
         than the layer has; lower top_k or raise experts\n",
        file.display()
    );
    for args in [
        vec![
            "plan",
            "--model",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        vec!["validate", file.to_str().unwrap()],
    ] {
        assert_bad_input(&args, &file, "top_k: 65", &out);
        assert_eq!(stderr(&run(&args)), want, "{args:?}");
    }
}

/// DeepSeek-V2-Lite has 26 MoE layers; a long-form csv giving 25 (layers
/// 0..=24, every expert once) leaves the last one out. The directory
/// holding it, the csv, and a plan path beside it.
fn heat_of_25_layers() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("layer,expert,count\n");
    for layer in 0..25 {
        for expert in 0..64 {
            csv.push_str(&format!("{layer},{expert},1\n"));
        }
    }
    let path = dir.path().join("partial.csv");
    std::fs::write(&path, csv).unwrap();
    let out = dir.path().join("plan.json");
    (dir, path, out)
}

#[test]
fn heat_with_fewer_moe_layers_than_the_model_gives_one_line_and_no_plan() {
    let (_dir, heat, out) = heat_of_25_layers();
    let (h, m) = (s(&heat), model("deepseek-v2-lite"));
    let want = format!(
        "error: {h}: shape: heat gives 25 MoE layers, model `DeepSeek-V2-Lite` has 26; use \
         heat recorded on every MoE layer of this model, or pass --allow-partial-heat to give \
         the missing layers uniform heat\n"
    );
    for args in [
        plan_with_heat(&m, &heat, &[], &out),
        vec!["validate", h, "--kind", "heat", "--model", &m],
        vec!["heat", h, "--model", &m],
    ] {
        assert_bad_input(&args, &heat, "gives 25 MoE layers", &out);
        assert_eq!(stderr(&run(&args)), want, "{args:?}");
    }
}

#[test]
fn allow_partial_heat_plans_the_missing_layers_with_uniform_heat() {
    let (_dir, heat, out) = heat_of_25_layers();
    let (h, m) = (s(&heat), model("deepseek-v2-lite"));
    let note = format!(
        "note: {h}: MoE layers [25] have no routed selections; they get uniform heat \
         (top_k / experts)"
    );
    let o = run_ok(&plan_with_heat(
        &m,
        &heat,
        &["--allow-partial-heat", "--time-limit", "1"],
        &out,
    ));
    assert!(stderr(&o).lines().any(|l| l == note), "{}", stderr(&o));
    let plan = read_json(&out);
    assert_eq!(plan["experts"].as_array().unwrap().len(), 26);
    for args in [
        vec![
            "validate",
            h,
            "--kind",
            "heat",
            "--model",
            &m,
            "--allow-partial-heat",
        ],
        vec!["heat", h, "--model", &m, "--allow-partial-heat"],
    ] {
        let o = run(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).lines().any(|l| l == note), "{}", stderr(&o));
    }
}

#[test]
fn a_model_nothing_can_hold_says_how_many_bytes_are_missing() {
    // No drive and 1 GiB of RAM for DeepSeek-V2-Lite (7.6 GB of int4 experts).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let file = dir.path().join("small.yaml");
    std::fs::write(
        &file,
        "name: small\nnuma:\n  - { id: 0, ram: 2 GiB, reserved: 1 GiB, cores: 4, gemv_bandwidth: 10 GB/s }\n",
    )
    .unwrap();
    let o = run(&[
        "plan",
        "--profile",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bytes are missing"), "{err}");
    assert!(!out.exists());
}

#[test]
fn a_tampered_plan_fails_validation() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("plan.json");
    assert!(
        run(&["plan", "--time-limit", "1", "--out", path.to_str().unwrap()])
            .status
            .success()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let mut plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let t = plan["objective"]["token_seconds"].as_f64().unwrap();
    plan["objective"]["token_seconds"] = serde_json::json!(t * 0.9);
    std::fs::write(&path, serde_json::to_string(&plan).unwrap()).unwrap();
    let o = run(&["validate", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("objective.token_seconds"),
        "{}",
        stderr(&o)
    );
    let bad_limit = run(&["plan", "--time-limit", "0"]);
    assert_eq!(bad_limit.status.code(), Some(1));
    assert!(stderr(&bad_limit).contains("--time-limit"));
}

/// `plan --from`: re-planning a plan for its own inputs where no move can
/// pay (a one-token horizon) moves nothing: the plan is a local optimum of
/// token time and moves only add cost. For new heat the re-plan's token
/// time is no worse than staying.
#[test]
fn replan_from_a_plan_moves_only_what_pays() {
    let dir = tempfile::tempdir().unwrap();
    let p0 = dir.path().join("p0.json");
    let p1 = dir.path().join("p1.json");
    run_ok(&["plan", "--time-limit", "2", "--out", s(&p0)]);
    // `plan --from p0` with `extra` arguments into p1, which must succeed.
    let replan = |extra: &[&str]| {
        let head = ["plan", "--time-limit", "2", "--from", s(&p0)];
        run_ok(&[&head, extra, &["--out", s(&p1)]].concat())
    };
    let o = replan(&["--horizon-tokens", "1"]);
    assert!(
        stdout(&o).contains("moved: 0 experts, 0 trunk components, 0 KV groups"),
        "{}",
        stdout(&o)
    );
    // A flat heat for the default model: the re-plan's token time is no
    // worse than the old placement's under that heat (printed "a -> b").
    let heat = dir.path().join("flat.json");
    let rows: Vec<Vec<u64>> = (0..26).map(|_| vec![1; 64]).collect();
    std::fs::write(&heat, serde_json::json!({ "layers": rows }).to_string()).unwrap();
    let out = stdout(&replan(&["--heat", s(&heat)]));
    let line = out
        .lines()
        .find(|l| l.starts_with("token time "))
        .unwrap_or_else(|| panic!("{out}"));
    let ms: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse::<f64>().ok())
        .collect();
    assert!(ms[1] <= ms[0], "{line}");
    let o = run(&[
        "plan",
        "--from",
        p0.to_str().unwrap(),
        "--horizon-tokens",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--horizon-tokens 0: give a positive number"));
}

/// `--model` and `--profile` are one flag each: every command that takes one gives the same
/// description, then what that command reads of the model (the sentences
/// written in each command's source).
#[test]
fn every_model_and_profile_flag_is_one_definition() {
    let common = "Model description (YAML, docs/design.md §3.2), checkpoint directory \
                  (config.json and safetensors shards) or GGUF file (a split model by its \
                  first shard); ";
    for (command, specific) in [
        (&["plan"][..], "default: DeepSeek-V2-Lite"),
        (&["validate"], "default: DeepSeek-V2-Lite"),
        (&["heat"], "it maps engine layer numbers"),
        (&["simulate"], "it sizes the experts of a MoE trace"),
        (&["replay"], "the model the trace was recorded on"),
        (&["gen-checkpoint"], "its geometry is written"),
        (&["kv-replay"], "its kv_bytes_per_token sizes the blocks"),
        (&["profile", "calibrate"], "its geometry and tier formats"),
    ] {
        let o = run(&[command, &["--help"]].concat());
        assert!(o.status.success(), "{command:?}: {}", stderr(&o));
        // `--help` wraps long lines; compare with the white space folded.
        let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        let want = format!("{common}{specific}")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            help.contains(&want),
            "{command:?} --help lacks `{want}`:\n{help}"
        );
    }
    // `--profile` likewise.
    for command in ["plan", "simulate", "replay"] {
        let help = stdout(&run_ok(&[command, "--help"]));
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("Hardware profile (YAML, docs/design.md §3.1); "),
            "{command}: {help}"
        );
    }
    // gen-checkpoint cannot do without it.
    let o = run(&["gen-checkpoint", "--out", "unused"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--model <MODEL>"), "{}", stderr(&o));
}

#[test]
fn plan_exports_kt_kernel_gpu_experts_that_match_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let o = run_ok(&[
        "plan",
        "--time-limit",
        "2",
        "--out",
        s(&plan),
        "--export",
        "kt-kernel",
    ]);
    let out = stdout(&o);
    for file in [
        "kt_kernel_gpu_experts.json",
        "kt_kernel_gpu_experts.pt",
        "kt_kernel_command.txt",
    ] {
        let line = format!("wrote {} (kt-kernel)", s(&dir.path().join(file)));
        assert!(out.contains(&line), "`{line}` missing:\n{out}");
    }
    // Every MoE layer's mask is the experts the plan puts on gpu:0 or gpu:1
    // (places 0 and 1); DeepSeek-V2-Lite's layer 0 is dense.
    let plan = read_json(&plan);
    let file = read_json(&dir.path().join("kt_kernel_gpu_experts.json"));
    assert_eq!(file["num_hidden_layers"], 27);
    assert_eq!(file["num_experts"], 64);
    let layers = file["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 26);
    let mut total = 0;
    for (l, row) in layers.iter().enumerate() {
        assert_eq!(row["layer"], l + 1);
        let on_gpu: Vec<u64> = plan["experts"][l]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.as_u64().unwrap() < 2)
            .map(|(e, _)| e as u64)
            .collect();
        assert_eq!(
            row["gpu_experts"],
            serde_json::json!(on_gpu),
            "layer {}",
            l + 1
        );
        assert_eq!(row["count"], on_gpu.len());
        total += on_gpu.len();
    }
    assert_eq!(file["total_gpu_experts"], total);
    let command = std::fs::read_to_string(dir.path().join("kt_kernel_command.txt")).unwrap();
    assert!(
        command.contains("python -m sglang.launch_server"),
        "{command}"
    );
    assert!(command.contains("--tensor-parallel-size 2"), "{command}");
    assert!(
        command.contains("--kt-expert-placement-strategy frequency"),
        "{command}"
    );
}

/// `plan --from --move-budget`: the incremental re-plan on a hand-made
/// instance small enough to work out by hand. One MoE layer of four 64-MiB
/// experts (top-1), one card with 160 MiB usable (room for two), RAM at
/// 40 GB/s, the card at 200 GB/s. The plan for heat 50/30/15/5 holds the
/// two hottest on the card; the new heat reverses it. With moves almost
/// free (a 1e9-token horizon) the stage waits for the CPU, so, by hand:
/// - a budget below two experts moves nothing: one expert cannot enter the
///   full card, and one leaving it only adds to the CPU's load;
/// - two experts' worth swaps one pair, the hottest (0.5) in and the
///   coldest (0.05) out, leaving 0.05 + 0.3 of the mass on the CPU;
/// - four experts' worth swaps both, leaving 0.05 + 0.15.
///
/// A token then takes the CPU's mass x 64 MiB / 40 GB/s plus the 4-KiB
/// trunk's 4096 B / 40 GB/s.
#[test]
fn incremental_replan_moves_what_the_budget_allows() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: &str| std::fs::write(path(name), text).unwrap();
    write(
        "tiny.yaml",
        "name: tiny\nsource: by hand\nlayers: 1\nmoe_layers: \"0..=0\"\nexperts: 4\ntop_k: 1\n\
         hidden: 4096\nexpert_intermediate: 2730\nformats: { bf16: 67108864 }\n\
         tiers: { gpu: bf16, ram: bf16, disk: bf16 }\n\
         trunk:\n  - { name: attn, layers: \"0..=0\", bytes: 4096, stage: dense }\n\
         kv_bytes_per_token: 1\n",
    );
    write(
        "box.yaml",
        "name: one-card\nsource: by hand\n\
         numa:\n  - { id: 0, ram: 2 GiB, reserved: 1 GiB, cores: 16, gemv_bandwidth: 40 GB/s }\n\
         gpus:\n  - { id: 0, name: card, vram: 1184 MiB, reserved: 1 GiB, numa: 0, \
         gemv_bandwidth: 200 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 1 us }\n\
         io_overlaps_compute: true\nfelt_fraction: 0.0\nfixed_token_seconds: 0 s\n",
    );
    write("old.json", r#"{"layers": [[50, 30, 15, 5]]}"#);
    write("new.json", r#"{"layers": [[5, 15, 30, 50]]}"#);
    let (model, profile) = (path("tiny.yaml"), path("box.yaml"));
    let (old, new, p0, p1) = (
        path("old.json"),
        path("new.json"),
        path("p0.json"),
        path("p1.json"),
    );
    let old_inputs = inputs(&model, &profile, &old);
    let new_inputs = inputs(&model, &profile, &new);
    run_ok(&[&["plan", "--out", s(&p0)][..], &old_inputs].concat());
    let expert_seconds_per_mass = 67108864.0 / 40e9;
    let trunk_seconds = 4096.0 / 40e9;
    for (budget, moved, cpu_mass) in [
        ("0", 0, 0.8),
        ("127 MiB", 0, 0.8),
        ("128 MiB", 2, 0.35),
        ("1 GiB", 4, 0.2),
    ] {
        let replan = [
            &["plan", "--from", s(&p0), "--move-budget", budget][..],
            &["--horizon-tokens", "1e9", "--out", s(&p1)],
            &new_inputs,
        ]
        .concat();
        let out = stdout(&run_ok(&replan));
        let want = format!("moved: {moved} experts, 0 trunk components, 0 KV groups");
        assert!(
            out.contains(&want),
            "{budget}: `{want}` missing from:\n{out}"
        );
        let carried = format!(
            "re-plan: carries {}",
            residency_core::units::Bytes((moved * 64) << 20)
        );
        assert!(
            out.contains(&carried),
            "{budget}: `{carried}` missing from:\n{out}"
        );
        assert!(out.contains("gap") && out.contains("solved in"), "{out}");
        // Without a budget nothing can move (no drive to drop to), and the
        // bound with move costs proves staying best.
        assert!(
            budget != "0" || out.contains("gap 0.000 %"),
            "{budget}: staying not proven best:\n{out}"
        );
        let token_seconds = read_json(&p1)["objective"]["token_seconds"]
            .as_f64()
            .unwrap();
        let want = cpu_mass * expert_seconds_per_mass + trunk_seconds;
        assert!(
            (token_seconds / want - 1.0).abs() < 1e-9,
            "{budget}: {token_seconds} s per token, by hand {want}"
        );
        std::fs::remove_file(&p1).unwrap();
    }
    // Bad budgets: one line naming the flag and the fix, no plan written.
    let bad = [
        &["plan", "--from", s(&p0), "--move-budget", "2 parsecs"][..],
        &["--out", s(&p1)],
        &new_inputs,
    ]
    .concat();
    let line = one_error_line(&bad, &p1);
    assert!(
        line.contains("--move-budget") && line.contains("use B, KB"),
        "{line}"
    );
    let line = one_error_line(&["plan", "--move-budget", "1 GiB", "--out", s(&p1)], &p1);
    assert!(line.contains("--from"), "{line}");
}

/// `--model`, `--profile` and `--heat` arguments.
fn inputs<'a>(model: &'a Path, profile: &'a Path, heat: &'a Path) -> [&'a str; 6] {
    [
        "--model",
        s(model),
        "--profile",
        s(profile),
        "--heat",
        s(heat),
    ]
}

#[test]
fn completions_and_man_pages_come_from_the_command_definitions() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = stdout(&run_ok(&["completions", shell]));
        for command in ["plan", "heat", "kv-replay", "completions", "man"] {
            assert!(out.contains(command), "{shell}: `{command}` missing");
        }
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let page = stdout(&run_ok(&["man"]));
    assert!(page.contains(".TH residency 1"), "{page}");
    assert!(page.contains("\\-\\-quiet"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    run_ok(&["man", "--out", s(dir.path())]);
    let plan = std::fs::read_to_string(dir.path().join("residency-plan.1")).unwrap();
    assert!(plan.contains(".TH residency-plan 1"), "{plan}");
}

#[test]
fn version_names_the_commit() {
    let out = stdout(&run_ok(&["--version"]));
    // `residency 0.1.0 (abc1234)`, or `(commit unknown)` outside git.
    let re = regex::Regex::new(r"^residency \d+\.\d+\.\d+ \(([0-9a-f]{7,}|commit unknown)\)\n$")
        .unwrap();
    assert!(re.is_match(&out), "{out}");
    if let Ok(git) = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(ROOT)
        .output()
    {
        let head = String::from_utf8_lossy(&git.stdout).trim().to_string();
        if git.status.success() {
            assert!(out.contains(&format!("({head})")), "{out} vs {head}");
        }
    }
}

#[test]
fn quiet_silences_notes_but_not_results_or_errors() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let args = [
        "plan",
        "--time-limit",
        "1",
        "--out",
        s(&plan),
        "--export",
        "kt-kernel",
    ];
    // The kt-kernel export notes what it cannot express.
    let loud = run_ok(&args);
    assert!(stderr(&loud).lines().any(|l| l.starts_with("note: ")));
    // Piped, so no colour codes either.
    assert!(!stderr(&loud).contains('\x1b'), "{}", stderr(&loud));
    for flag in ["-q", "--quiet"] {
        let quiet = run_ok(&[&args[..], &[flag]].concat());
        assert_eq!(stderr(&quiet), "", "{flag}");
        assert!(stdout(&quiet).contains("wrote"), "{}", stdout(&quiet));
    }
    let o = run(&["-q", "plan", "--time-limit=-1"]);
    assert!(
        stderr(&o).starts_with("error: --time-limit -1"),
        "{}",
        stderr(&o)
    );
}

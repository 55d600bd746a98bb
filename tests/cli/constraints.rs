//! User constraints end to end: recorded in the plan and honoured by
//! every command that reads it, infeasible sets refused in one line, and
//! re-plans under new constraints.

use crate::common::*;
use residency_testkit::file_in;
use std::path::PathBuf;

/// Index of `place` in a plan's `places`.
fn place_index(plan: &serde_json::Value, place: &str) -> u64 {
    let places = plan["places"].as_array().unwrap();
    places.iter().position(|p| p == place).unwrap() as u64
}

#[test]
fn constraints_are_recorded_and_honoured_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_in(
        dir.path(),
        "constraints.yaml",
        "pins:\n  L3.experts: gpu:1\n  lm_head: gpu:0\nbudgets:\n  gpu:0: 4 GiB\n",
    );
    let out = dir.path().join("plan.json");
    let o = run_ok(&[
        "plan",
        "--time-limit",
        "2",
        "--constraints",
        s(&file),
        "--keep-whole",
        "all",
        "--pin",
        "L5.experts=ram:0",
        "--out",
        s(&out),
        "--export",
        "llama-cpp",
    ]);
    let plan = read_json(&out);
    let recorded = &plan["inputs"]["constraints"];
    assert_eq!(recorded["pins"]["L3.experts"], "gpu:1", "{recorded}");
    assert_eq!(recorded["keep_whole"], serde_json::json!(["all"]));
    let (gpu1, ram0) = (place_index(&plan, "gpu:1"), place_index(&plan, "ram:0"));
    // DeepSeek-V2-Lite's MoE layers are 1..=26: layer L is MoE ordinal L - 1.
    let experts = plan["experts"].as_array().unwrap();
    assert!(experts[2].as_array().unwrap().iter().all(|q| *q == gpu1));
    assert!(experts[4].as_array().unwrap().iter().all(|q| *q == ram0));
    for row in experts {
        let row = row.as_array().unwrap();
        assert!(row.iter().all(|q| *q == row[0]), "a layer split: {row:?}");
    }
    let head = plan["trunk"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "lm_head");
    assert_eq!(head.unwrap()["place"], "gpu:0");
    // 4 GiB = 4294967296 bytes.
    let gpu0 = &plan["usage"][0];
    assert_eq!(gpu0["capacity_bytes"], 4294967296u64);
    assert!(stdout(&o).contains("without expert pins, keep-whole"));
    // Layers kept whole: llama.cpp needs no per-expert split, and layer 3
    // goes to CUDA1 as pinned.
    assert!(
        !stderr(&o).contains("per-expert decision"),
        "{}",
        stderr(&o)
    );
    let rules = std::fs::read_to_string(dir.path().join("llama_cpp_override_tensor.txt")).unwrap();
    let cuda1 = rules
        .lines()
        .find(|l| l.contains("exps") && l.ends_with("=CUDA1'"));
    let cuda1 = cuda1.unwrap_or_else(|| panic!("no CUDA1 expert rule in:\n{rules}"));
    let layers = cuda1
        .split("blk\\.(")
        .nth(1)
        .and_then(|r| r.split(')').next());
    assert!(layers.unwrap().split('|').any(|l| l == "3"), "{cuda1}");

    for args in [
        vec!["validate", s(&out)],
        vec!["explain", s(&out), "--time-limit", "1"],
        vec!["diff", s(&out), s(&out)],
    ] {
        run_ok(&args);
    }
    // Re-plans keep the plan's constraints: full, and incremental.
    for extra in [vec![], vec!["--move-budget", "1 GiB"]] {
        let again = dir.path().join("again.json");
        let mut args = vec![
            "plan",
            "--time-limit",
            "1",
            "--from",
            s(&out),
            "--out",
            s(&again),
        ];
        args.extend(extra);
        run_ok(&args);
        let replanned = read_json(&again);
        assert_eq!(replanned["inputs"]["constraints"], *recorded);
        let experts = replanned["experts"].as_array().unwrap();
        assert!(experts[2].as_array().unwrap().iter().all(|q| *q == gpu1));
    }
    // A plan edited against its pin fails validation in one line.
    let mut tampered = plan.clone();
    tampered["experts"][2][0] = serde_json::json!(ram0);
    let bad = dir.path().join("tampered.json");
    std::fs::write(&bad, tampered.to_string()).unwrap();
    let line = one_error_line(&["validate", s(&bad)], &dir.path().join("none"));
    assert!(line.contains("against a pin"), "{line}");
}

#[test]
fn infeasible_constraints_are_one_line_naming_the_constraint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let files: Vec<PathBuf> = [
        "pins:\n  L3.experts.0: gpu:0\n  L3.experts.1: ram:0\nkeep_whole: [L3]\n",
        "pins:\n  L3.experts.0: gpu:0\n  L3.experts.1: ram:0\nmax_places_per_layer: 1\n",
        "pin:\n  lm_head: gpu:0\n",
    ]
    .iter()
    .enumerate()
    .map(|(i, text)| {
        let file = dir.path().join(format!("c{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        file
    })
    .collect();
    let with_file = |i: usize| vec!["--constraints", s(&files[i])];
    let named = |i: usize| files[i].display().to_string();
    // Each: the arguments, and what the one line must name. A layer of
    // DeepSeek-V2-Lite is 64 experts of 8.6 MB (int4): 553 MB in all, more
    // than a 100 MB budget; its trunk (about 2 GB) fits in no 1 MB.
    let cases: Vec<(Vec<&str>, Vec<String>)> = vec![
        (
            vec!["--pin", "L3.experts=gpu:1", "--budget", "gpu:1=100MB"],
            vec![
                "`pin L3.experts=gpu:1` (from --pin)".into(),
                "budget gpu:1".into(),
            ],
        ),
        (
            vec![
                "--budget",
                "gpu:0=1MB",
                "--budget",
                "gpu:1=1MB",
                "--budget",
                "ram:0=1MB",
            ],
            vec!["`budget gpu:0=".into(), "(from --budget)".into()],
        ),
        (with_file(0), vec!["keep-whole L3".into(), named(0)]),
        (
            with_file(1),
            vec!["max-places-per-layer 1".into(), named(1)],
        ),
        (with_file(2), vec!["did you mean `pins`?".into(), named(2)]),
        (
            vec!["--pin", "L0.experts=gpu:0"],
            vec!["--pin".into(), "layer 0 has no routed experts".into()],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = vec!["plan", "--time-limit", "1", "--out", s(&out)];
        args.extend(extra.iter().copied());
        let line = one_error_line(&args, &out);
        for needle in needles {
            assert!(
                line.contains(&needle),
                "{args:?}: `{needle}` not in: {line}"
            );
        }
    }
}

#[test]
fn a_replan_with_new_constraints_moves_what_breaks_them() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.json");
    run_ok(&["plan", "--time-limit", "1", "--out", s(&before)]);
    for extra in [vec![], vec!["--move-budget", "4 GiB"]] {
        let after = dir.path().join("after.json");
        let mut args = vec![
            "plan",
            "--time-limit",
            "1",
            "--from",
            s(&before),
            "--pin",
            "L7.experts=ram:0",
            "--keep-whole",
            "L8",
            "--out",
            s(&after),
        ];
        args.extend(extra);
        run_ok(&args);
        let plan = read_json(&after);
        assert_eq!(plan["inputs"]["constraints"]["pins"]["L7.experts"], "ram:0");
        let ram0 = place_index(&plan, "ram:0");
        // Layer L is MoE ordinal L - 1 (MoE layers 1..=26).
        let experts = plan["experts"].as_array().unwrap();
        assert!(experts[6].as_array().unwrap().iter().all(|q| *q == ram0));
        let l8 = experts[7].as_array().unwrap();
        assert!(l8.iter().all(|q| *q == l8[0]), "{l8:?}");
        run_ok(&["validate", s(&after)]);
    }
}

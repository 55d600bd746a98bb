//! `residency replay` end to end on a generated checkpoint and a trace:
//! every placement policy computes the same outputs (equal checksums), the
//! counters add up, and bad input is one line with no output file.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Two MoE layers of 8 experts (64 x 32 bf16: 12 KiB each), top-2.
const TINY: &str = r#"
name: Mixtral-replay
layers: 2
moe_layers: "0..=1"
experts: 8
top_k: 2
hidden: 64
expert_intermediate: 32
formats:
  bf16: 12288
tiers: { gpu: bf16, ram: bf16, disk: bf16 }
trunk:
  - { name: attn, layers: "0..=1", bytes: 40960, stage: dense }
  - { name: lm_head, bytes: 12800, stage: head }
"#;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `residency replay` of `trace` from `ckpt` for the model `yaml`, with `extra` arguments.
fn replay(ckpt: &Path, trace: &Path, yaml: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "replay",
        "--checkpoint",
        s(ckpt),
        "--trace",
        s(trace),
        "--model",
        s(yaml),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// A checkpoint of `TINY` and a jsonl trace of 60 tokens in two categories
/// whose hot experts differ (a: 0-3, b: 4-7), with some reuse.
fn checkpoint_and_trace(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let yaml = dir.join("mixtral-replay.yaml");
    std::fs::write(&yaml, TINY).unwrap();
    let ckpt = dir.join("ckpt");
    let o = run(&[
        "gen-checkpoint",
        "--model",
        s(&yaml),
        "--out",
        s(&ckpt),
        "--family",
        "mixtral",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut lines = String::new();
    for t in 0..60u32 {
        let (category, base) = if t < 30 { ("a", 0) } else { ("b", 4) };
        let e = |k: u32| base + (t * k + k) % 4;
        lines.push_str(&format!(
            "{{\"seq\":\"{category}\",\"pos\":{t},\"category\":\"{category}\",\"routes\":[[{},{}],[{},{}]]}}\n",
            e(1),
            (e(1) + 1 - base) % 4 + base,
            e(3),
            (e(3) + 2 - base) % 4 + base,
        ));
    }
    let trace = dir.join("trace.jsonl");
    std::fs::write(&trace, lines).unwrap();
    (yaml, ckpt, trace)
}

#[test]
fn every_policy_computes_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let json = dir.path().join("replay.json");
    let o = replay(
        &ckpt,
        &trace,
        &yaml,
        &[
            "--policy",
            "lru,lfru,frequency,cost,plan,replan",
            "--ram-budget",
            "25%",
            "--train-categories",
            "a",
            "--rounds",
            "2",
            "--replan-every",
            "4",
            "--json",
            s(&json),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("equal for every policy"),
        "{}",
        stdout(&o)
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    // 6 policies x 2 rounds, the second round in reverse order (A B, B A).
    assert_eq!(runs.len(), 12);
    assert_eq!(runs[0]["policy"], "lru");
    assert_eq!(runs[6]["policy"], "replan");
    let checksum = &runs[0]["output_checksum"];
    for r in runs {
        assert_eq!(&r["output_checksum"], checksum);
        // Category b only (a trained): 30 tokens, 2 layers x 2 experts.
        assert_eq!(r["tokens"], 30);
        let (hits, misses) = (r["hits"].as_u64().unwrap(), r["misses"].as_u64().unwrap());
        assert_eq!(hits + misses, 30 * 2 * 2, "{r}");
        // Every miss reads one 12 KiB expert (bf16 64 x 32 x 3 x 2 bytes).
        assert_eq!(r["bytes_read"].as_u64().unwrap(), misses * 12288, "{r}");
        assert!(r["tok_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap());
    }
    // plan pins category a's experts, trained on a: replaying b, its pins
    // never hit, and it admits nothing: every request misses.
    let plan = runs.iter().find(|r| r["policy"] == "plan").unwrap();
    assert_eq!(plan["hits"], 0);
}

/// The all-resident case of the overhead measurement: with the whole
/// budget warmed, the store's arms read nothing and hit every request, and
/// they compute what `resident` (no store) computes.
#[test]
fn a_warm_full_budget_reads_nothing_and_matches_the_resident_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let json = dir.path().join("replay.json");
    let o = replay(
        &ckpt,
        &trace,
        &yaml,
        &[
            "--policy",
            "resident,lru,cost",
            "--ram-budget",
            "100%",
            "--warm",
            "--json",
            s(&json),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        assert_eq!(r["output_checksum"], runs[0]["output_checksum"]);
        // 60 tokens x 2 layers x 2 experts, all hits; 16 experts of 12 KiB
        // read before the clock.
        assert_eq!(r["hits"], 60 * 2 * 2, "{r}");
        assert_eq!(r["misses"], 0, "{r}");
        assert_eq!(r["bytes_read"], 0, "{r}");
        assert_eq!(r["startup_bytes"], 16 * 12288, "{r}");
        assert_eq!(r["felt_wait_seconds"], 0.0, "{r}");
    }
}

/// `--seed-tokens` serves the training category's tokens before the clock:
/// their experts are read as start-up, and the outputs do not change.
#[test]
fn seeding_is_start_up_and_leaves_the_outputs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let runs_with = |seed: &str| {
        let json = dir.path().join(format!("seed-{seed}.json"));
        let o = replay(
            &ckpt,
            &trace,
            &yaml,
            &[
                "--policy",
                "lru",
                "--ram-budget",
                "100%",
                "--train-categories",
                "a",
                "--seed-tokens",
                seed,
                "--json",
                s(&json),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        doc["runs"][0].clone()
    };
    let (cold, seeded) = (runs_with("0"), runs_with("30"));
    assert_eq!(cold["output_checksum"], seeded["output_checksum"]);
    // Category a routes experts 0-3 in both layers (the generator's
    // (t * k + k) mod 4 visits all four): 8 experts of 12 KiB read before
    // the clock. Category b uses 4-7, so the evaluation still misses 8 of
    // its 30 x 2 x 2 requests at a full budget.
    assert_eq!(cold["startup_bytes"], 0);
    assert_eq!(seeded["startup_bytes"], 8 * 12288);
    for r in [&cold, &seeded] {
        assert_eq!(r["misses"], 8, "{r}");
        assert_eq!(r["hits"], 120 - 8, "{r}");
    }
    // Seeding needs training categories to take the tokens from.
    let o = run(&[
        "replay",
        "--checkpoint",
        s(&ckpt),
        "--trace",
        s(&trace),
        "--seed-tokens",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("give --train-categories too"),
        "{}",
        stderr(&o)
    );
}

/// A budget of one expert while a layer asks for two at once: a finished
/// load must not hold its lease while the computing thread waits for the
/// other (whose load needs those bytes). This deadlocked in route order,
/// and again (on a clean CI run) while the computing thread still acquired
/// hits itself; now it only consumes arrivals. It also stalled in about 1
/// run of 45 when the second expert's load took the bytes before the first
/// one, which the policy had already evicted (a race the store's unit test
/// `a_load_the_policy_evicts_while_it_waits_for_room_runs_from_staging`
/// pins down); a single run here rarely meets it.
#[test]
fn a_budget_of_one_expert_does_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let o = replay(
        &ckpt,
        &trace,
        &yaml,
        &[
            "--policy",
            "lru,cost,replan",
            "--ram-budget",
            "12288",
            "--train-categories",
            "a",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn per_category_runs_are_reported_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let json = dir.path().join("replay.json");
    let o = replay(
        &ckpt,
        &trace,
        &yaml,
        &["--policy", "lru,cost", "--per-category", "--json", s(&json)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    // In-sample, both categories replayed: 2 categories x 2 policies, 30
    // tokens each, equal checksums within a category, not across.
    assert_eq!(runs.len(), 4);
    assert!(runs.iter().all(|r| r["tokens"] == 30));
    let of = |c: &str| {
        runs.iter()
            .filter(|r| r["category"] == c)
            .map(|r| r["output_checksum"].clone())
            .collect::<Vec<_>>()
    };
    let (a, b) = (of("a"), of("b"));
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_eq!(a[0], a[1]);
    assert_eq!(b[0], b[1]);
    assert_ne!(a[0], b[0]);
}

#[test]
fn bad_replay_input_is_one_line_with_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, ckpt, trace) = checkpoint_and_trace(dir.path());
    let json = dir.path().join("replay.json");
    // A trace routing an expert the checkpoint does not have.
    let wide = dir.path().join("wide.jsonl");
    std::fs::write(
        &wide,
        "{\"seq\":\"a\",\"pos\":0,\"routes\":[[9,1],[0,1]]}\n",
    )
    .unwrap();
    assert_bad_input(
        &[
            "replay",
            "--checkpoint",
            s(&ckpt),
            "--trace",
            s(&wide),
            "--json",
            s(&json),
        ],
        &wide,
        "expert",
        &json,
    );
    // Arguments that leave nothing to do or make no sense: one line, no file.
    for (extra, message) in [
        (["--train-categories", "a,b"], "no token left to replay"),
        (
            ["--replan-every-seconds", "0"],
            "--replan-every-seconds 0: give a positive number of seconds",
        ),
    ] {
        let o = replay(
            &ckpt,
            &trace,
            &yaml,
            &[extra[0], extra[1], "--json", s(&json)],
        );
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains(message), "{}", stderr(&o));
        assert!(!json.exists());
    }
}

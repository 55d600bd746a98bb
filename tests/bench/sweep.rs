//! `bench --sweep` end to end: each strategy once on a CPU-only profile,
//! each budget set through the cards' reserve, a sweep stopped early
//! keeping its rounds, and bad flags refused in one line.

use super::{bench_args, close, run_flags, setup, trunk_bytes, Setup, CPU_ONLY, EXPERT_BYTES};
use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// The CPU-only profile with one card of 1 GiB (100 MiB reserved, which a
/// sweep's budget replaces).
fn one_card_profile() -> String {
    CPU_ONLY.replace(
        "gpus: []",
        r#"gpus:
  - id: 0
    name: test card
    vram: 1 GiB
    reserved: 100 MiB
    numa: 0
    gemv_bandwidth: 10 GB/s
    upload_bandwidth: 1 GB/s
    sync_overhead: 10 us"#,
    )
}

/// `bench --sweep` on the setup's checkpoint, 20 tokens, seed 5, then
/// `extra`; `--json` into `json`.
fn sweep_args<'a>(
    su: &'a Setup,
    profile: &'a Path,
    json: &'a Path,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["bench", "--sweep", "--checkpoint", s(&su.ckpt)];
    args.extend(run_flags(profile, json));
    args.extend_from_slice(extra);
    args
}

/// Everything in RAM at 1 GB/s: a token streams the trunk (attn,
/// dense_ffn, shared_expert, lm_head: the plan's bytes) and 4 x 0.5
/// experts of each of the two MoE layers, so 1e9 / those bytes tok/s.
fn all_in_ram_tok_per_s(su: &Setup) -> f64 {
    let plan = read_json(&su.plan);
    let (trunk, _) = trunk_bytes(&plan, &["attn", "dense_ffn", "shared_expert", "lm_head"]);
    1e9 / (trunk + 2.0 * 4.0 * 0.5 * EXPERT_BYTES)
}

pub(super) fn row<'a>(doc: &'a Value, budget: &Value, strategy: &str) -> &'a Value {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["budget_bytes"] == *budget && r["strategy"] == strategy)
        .unwrap_or_else(|| panic!("no row {budget} {strategy}"))
}

/// A row that ran: `rounds` runs in round order, its spread and ratio
/// recomputed from the runs' own tok/s, its prediction `predicted`; the
/// median measured tok/s.
fn assert_ran(r: &Value, rounds: usize, predicted: f64) -> f64 {
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), rounds, "{r}");
    let mut measured = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(run["round"], i, "{r}");
        assert_eq!(run["report"]["tokens"], 20);
        assert_eq!(run["report"]["seed"], 5);
        assert!(close(
            run["report"]["predicted_tok_per_s"].as_f64().unwrap(),
            predicted
        ));
        measured.push(run["report"]["tok_per_s"].as_f64().unwrap());
    }
    measured.sort_by(f64::total_cmp);
    let median = match measured.len() {
        2 => (measured[0] + measured[1]) / 2.0,
        1 => measured[0],
        n => panic!("{n} rounds not worked here"),
    };
    let m = &r["measured_tok_per_s"];
    assert!(close(m["median"].as_f64().unwrap(), median), "{r}");
    assert_eq!(m["min"].as_f64().unwrap(), measured[0]);
    assert_eq!(m["max"].as_f64().unwrap(), *measured.last().unwrap());
    assert!(
        close(r["predicted_tok_per_s"].as_f64().unwrap(), predicted),
        "{r}"
    );
    assert!(close(r["ratio"].as_f64().unwrap(), median / predicted));
    assert!(r["does_not_fit"].is_null());
    median
}

/// Without a card the VRAM budgets change nothing, so a user gets each
/// strategy once: plan, greedy and cpu measured (everything in RAM, the
/// prediction by hand), llama.cpp's three "does not fit" (they put the
/// trunk on a card), a note saying the budgets were dropped.
#[test]
fn sweep_on_a_cpu_only_profile_runs_each_strategy_once_without_cards() {
    let su = setup();
    let json = su.dir.join("sweep.json");
    let plans = su.dir.join("plans");
    let args = sweep_args(
        &su,
        &su.profile,
        &json,
        &[
            "--budgets",
            "4GiB,8GiB",
            "--rounds",
            "2",
            "--plans-dir",
            s(&plans),
        ],
    );
    let o = run_ok(&args);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "note: {} has no GPU: --budgets",
            su.profile.display()
        )),
        "{err}"
    );
    let doc = read_json(&json);
    assert_eq!(doc["rounds"], 2);
    let budgets = doc["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 1);
    assert!(budgets[0]["budget_bytes"].is_null());
    assert_eq!(budgets[0]["gpu_reserved_bytes"], serde_json::json!([]));
    let names = ["plan", "greedy", "n-cpu-moe", "exps-cpu", "fit", "cpu"];
    let strategies: Vec<&str> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, names);
    let predicted = all_in_ram_tok_per_s(&su);
    let none = Value::Null;
    let mut medians = Vec::new();
    for name in ["plan", "greedy", "cpu"] {
        medians.push((name, assert_ran(row(&doc, &none, name), 2, predicted)));
    }
    for name in ["n-cpu-moe", "exps-cpu", "fit"] {
        let r = row(&doc, &none, name);
        assert!(
            r["does_not_fit"].as_str().unwrap().contains("no GPU"),
            "{r}"
        );
        assert_eq!(r["runs"], serde_json::json!([]));
        assert!(r["predicted_tok_per_s"].is_null() && r["measured_tok_per_s"].is_null());
    }
    // The fastest by median, and the plan's lead over greedy; n-cpu-moe
    // did not run, so there is no lead over it.
    let (fastest, top) = medians
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    assert_eq!(budgets[0]["fastest"], fastest);
    assert!(close(
        budgets[0]["fastest_tok_per_s"].as_f64().unwrap(),
        top
    ));
    let lead = 100.0 * (medians[0].1 / medians[1].1 - 1.0);
    assert!(close(
        budgets[0]["plan_lead_over_greedy_percent"]
            .as_f64()
            .unwrap(),
        lead
    ));
    assert!(budgets[0]["plan_lead_over_n_cpu_moe_percent"].is_null());
    // The table: one row per (budget, strategy), then the fastest.
    let out = stdout(&o);
    let table: Vec<&str> = out.lines().filter(|l| l.starts_with("  no GPU ")).collect();
    assert_eq!(table.len(), names.len(), "{out}");
    for (line, name) in table.iter().zip(names) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[2], name, "{line}");
    }
    assert_eq!(
        table.iter().filter(|l| l.contains("does not fit")).count(),
        3
    );
    assert!(
        out.contains(&format!("  no GPU: {fastest} at {top:.2} tok/s")),
        "{out}"
    );
    // The document is what its schema says.
    let schema = read_json(&Path::new(ROOT).join("schemas/bench-sweep-output.schema.json"));
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&doc));
    // --plans-dir kept the three plans that ran; one replays with `bench
    // --plan` at the prediction the sweep gave it.
    let kept: Vec<_> = std::fs::read_dir(&plans).unwrap().collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    let replay = su.dir.join("replay.json");
    let plan = kept[0].as_ref().unwrap().path();
    run_ok(&bench_args(&su, &plan, &replay));
    assert!(close(
        read_json(&replay)["predicted_tok_per_s"].as_f64().unwrap(),
        predicted
    ));
}

/// With a card, each budget sets its reserve to vram - budget: 1 GiB -
/// 1 KiB and 1 GiB - 2 KiB. Neither holds the trunk (attn alone is tens of
/// KB), so llama.cpp's three, which put it on the card, do not fit; cpu
/// runs at both. One row per (budget, strategy), a measurement per round.
#[test]
fn sweep_sets_each_budget_through_the_reserve_one_row_per_budget_and_strategy() {
    let su = setup();
    let profile = su.dir.join("card.yaml");
    std::fs::write(&profile, one_card_profile()).unwrap();
    let json = su.dir.join("sweep.json");
    let strategies = ["cpu", "n-cpu-moe", "exps-cpu", "fit"];
    let list = strategies.join(",");
    run_ok(&sweep_args(
        &su,
        &profile,
        &json,
        &[
            "--budgets",
            "1KiB,2KiB",
            "--strategies",
            &list,
            "--rounds",
            "1",
        ],
    ));
    let doc = read_json(&json);
    let gib = 1u64 << 30;
    let budgets: Vec<(u64, Vec<u64>)> = doc["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let reserved = b["gpu_reserved_bytes"].as_array().unwrap();
            (
                b["budget_bytes"].as_u64().unwrap(),
                reserved.iter().map(|r| r.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(
        budgets,
        [(1024, vec![gib - 1024]), (2048, vec![gib - 2048])]
    );
    assert_eq!(doc["rows"].as_array().unwrap().len(), 2 * strategies.len());
    let (plan_trunk, _) = trunk_bytes(&read_json(&su.plan), &["attn"]);
    assert!(plan_trunk > 2048.0);
    let predicted = all_in_ram_tok_per_s(&su);
    for budget in [1024, 2048] {
        let b = Value::from(budget);
        assert_ran(row(&doc, &b, "cpu"), 1, predicted);
        for name in ["n-cpu-moe", "exps-cpu", "fit"] {
            let r = row(&doc, &b, name);
            assert!(
                r["does_not_fit"].as_str().unwrap().contains("overflow"),
                "{r}"
            );
            assert_eq!(r["runs"], serde_json::json!([]));
        }
        let summary = doc["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["budget_bytes"] == b)
            .unwrap();
        assert_eq!(summary["fastest"], "cpu");
        assert!(summary["plan_lead_over_greedy_percent"].is_null());
    }
}

/// A flag refused: one `error:` line naming `flag` and containing `fix`,
/// exit code 1, no panic, and `out` not created.
/// A sweep stopped by a time limit keeps its finished rounds: stopped
/// once the second round has begun (its first line on stderr), the file
/// holds at least the first round, says how many rounds it holds, and
/// every row that runs has exactly that many runs.
#[test]
fn a_sweep_stopped_early_keeps_its_finished_rounds() {
    use std::io::{BufRead, BufReader};
    let su = setup();
    let json = su.dir.join("sweep.json");
    let args = sweep_args(
        &su,
        &su.profile,
        &json,
        &["--strategies", "plan,cpu", "--rounds", "1000"],
    );
    let mut child = std::process::Command::new(BIN)
        .args(&args)
        .current_dir(ROOT)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in err.lines() {
        let line = line.unwrap();
        let second = line.starts_with("round 2/1000");
        seen.push(line);
        if second {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.last().unwrap().starts_with("round 2/1000"), "{seen:?}");
    let doc = read_json(&json);
    let rounds = doc["rounds"].as_u64().unwrap() as usize;
    assert!((1..1000).contains(&rounds), "{doc}");
    for strategy in ["plan", "cpu"] {
        let r = row(&doc, &Value::Null, strategy);
        assert_eq!(r["runs"].as_array().unwrap().len(), rounds, "{r}");
        assert!(r["measured_tok_per_s"]["median"].as_f64().unwrap() > 0.0);
    }
}

fn assert_bad_flag(args: &[&str], flag: &str, fix: &str, out: &Path) {
    let line = one_error_line(args, out);
    assert!(line.contains(flag), "{args:?}: `{flag}` not in: {line}");
    assert!(line.contains(fix), "{args:?}: `{fix}` not in: {line}");
}

#[test]
fn sweep_refuses_bad_flags_in_one_line() {
    let su = setup();
    let json = su.dir.join("sweep.json");
    let with = |extra: &'static [&'static str]| sweep_args(&su, &su.profile, &json, extra);
    assert_bad_flag(
        &with(&["--budgets", "4GiB,4XB"]),
        "--budgets",
        "use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB",
        &json,
    );
    assert_bad_flag(&with(&["--budgets", "0"]), "--budgets", "above 0", &json);
    assert_bad_flag(
        &with(&["--strategies", "plan,colibri"]),
        "--strategies",
        "one of plan, greedy, n-cpu-moe, exps-cpu, fit, cpu",
        &json,
    );
    assert_bad_flag(&with(&["--rounds", "0"]), "--rounds", "at least one", &json);
    assert_bad_flag(
        &sweep_args(&su, &su.profile, &json, &["--plan", s(&su.plan)]),
        "--plan",
        "give one of them, not both",
        &json,
    );
    // A report that could not be written is refused before the runs.
    let nowhere = su.dir.join("missing").join("sweep.json");
    assert_bad_flag(
        &sweep_args(&su, &su.profile, &nowhere, &[]),
        "--json",
        "is not a directory; create it",
        &nowhere,
    );
    // The sweep's own flags need --sweep: with --plan they are refused.
    let mut single = bench_args(&su, &su.plan, &json);
    single.extend(["--rounds", "2"]);
    assert_bad_flag(&single, "--rounds", "give one of them, not both", &json);
    // A budget above the card's 1 GiB names the profile and its limit.
    let card = su.dir.join("card.yaml");
    std::fs::write(&card, one_card_profile()).unwrap();
    assert_bad_input(
        &sweep_args(&su, &card, &json, &["--budgets", "4GiB", "--rounds", "1"]),
        &card,
        "--budgets 4.00 GiB: above gpus[0] (test card)'s vram 1.00 GiB",
        &json,
    );
}

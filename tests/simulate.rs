//! `residency simulate` end to end: the libCacheSim contract on the real
//! cloudPhysicsIO trace (numbers from `../shared/data/cache-oracle/SOURCES.md`),
//! a MoE trace in-sample and through the held-out gate, determinism, and bad
//! input on one line with no output file.

mod common;

use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

#[test]
fn lru_and_fifo_json_match_libcachesim_at_all_eight_budgets() {
    let Some(sim) = simulate_shared(
        "cache-oracle/cloudPhysicsIO.oracleGeneral.bin",
        &[
            "--trace-format",
            "oracle-general",
            "--policy",
            "lru,fifo,clock,sieve,s3fifo,arc,wtinylfu",
            "--budget",
            "128MiB,256MiB,512MiB,1GiB,2GiB,4GiB,8GiB,16GiB",
        ],
    ) else {
        return;
    };
    let runs = sim.doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 7 * 8);
    // SOURCES.md: (capacity, LRU misses, miss bytes, FIFO misses, miss bytes).
    let expected = [
        (128 * MIB, 93374u64, 4214303232u64, 93403u64, 4213112832u64),
        (256 * MIB, 89783, 4061242368, 89386, 4052646400),
        (512 * MIB, 81722, 3660569600, 84025, 3807412736),
        (1024 * MIB, 71704, 3061662720, 72140, 3077547520),
    ];
    let compulsory = (48974u64, 2029769728u64);
    let find = |policy: &str, budget: u64| {
        runs.iter()
            .find(|r| r["policy"] == policy && r["budget"] == budget)
            .unwrap_or_else(|| panic!("{policy} at {budget} missing"))
    };
    let pair = |r: &Value| {
        (
            r["misses"].as_u64().unwrap(),
            r["miss_bytes"].as_u64().unwrap(),
        )
    };
    for (budget, lru, lru_bytes, fifo, fifo_bytes) in expected {
        assert_eq!(pair(find("lru", budget)), (lru, lru_bytes));
        assert_eq!(pair(find("fifo", budget)), (fifo, fifo_bytes));
    }
    for budget in [2048 * MIB, 4096 * MIB, 8192 * MIB, 16384 * MIB] {
        for policy in ["lru", "fifo", "clock", "sieve", "s3fifo", "arc", "wtinylfu"] {
            let r = find(policy, budget);
            assert_eq!(r["requests"], 113872);
            // The working set fits: only compulsory misses are left, for
            // every policy that admits on a miss.
            assert_eq!(pair(r), compulsory, "{policy} at {budget}");
        }
    }
}

/// The ESFT routing traces of DeepSeek-V2-Lite.
const ESFT: &str = "traces/esft_deepseek_v2_lite";

#[test]
fn moe_trace_runs_are_deterministic_and_cut_as_asked() {
    let model = model("deepseek-v2-lite");
    let args = [
        "--model",
        &model,
        "--policy",
        "lru,frequency,cost,plan",
        "--budget",
        "25%",
        "--allocation",
        "global,dynamic",
        "--tokens",
        "200",
        "--layers",
        "4",
    ];
    let Some(first) = simulate_shared(ESFT, &args) else {
        return;
    };
    let second = simulate_shared(ESFT, &args).unwrap();
    for sim in [&first, &second] {
        let err = stderr(&sim.output);
        assert!(err.contains("--tokens 200 kept 800 of"), "{err}");
        assert!(err.contains("--layers 4 kept 4 of 26"), "{err}");
    }
    assert_eq!(first.text, second.text);
    let doc = first.doc;
    for r in doc["runs"].as_array().unwrap() {
        // 4 categories x 200 tokens x 4 layers x top-6 requests.
        assert_eq!(r["requests"], 800 * 4 * 6);
        let by_layer: u64 = r["misses_by_layer"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().unwrap())
            .sum();
        assert_eq!(by_layer, r["misses"].as_u64().unwrap());
    }
}

#[test]
fn the_gate_reports_every_category_and_the_sensitivity_reruns() {
    let Some(sim) = simulate_esft_gate(&[
        "--allocation",
        "uniform,dynamic",
        "--tokens",
        "300",
        "--layers",
        "5",
    ]) else {
        return;
    };
    let gate = sim.doc["gate"].as_array().unwrap();
    // Candidates: frequency uniform, lru dynamic, frequency dynamic (lru
    // uniform is the baseline itself).
    assert_eq!(gate.len(), 3);
    for g in gate {
        let categories = g["categories"].as_array().unwrap();
        let names: Vec<&str> = categories
            .iter()
            .map(|c| c["category"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["intent", "law", "summary", "translation"]);
        let mean: f64 = categories
            .iter()
            .map(|c| c["gain"].as_f64().unwrap())
            .sum::<f64>()
            / 4.0;
        assert!((mean - g["verdict"]["mean_gain"].as_f64().unwrap()).abs() < 1e-12);
        assert_eq!(g["sensitivity"]["reruns"], 2 * 5);
    }
    assert!(stdout(&sim.output).contains("held-out gate"));
}

#[test]
fn bad_simulate_input_is_one_line_with_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.json");
    let truncated = dir.path().join("t.oracleGeneral.bin");
    std::fs::write(&truncated, [0u8; 30]).unwrap();
    let jsonl = dir.path().join("routes.jsonl");
    std::fs::write(
        &jsonl,
        "{\"seq\":\"a\",\"pos\":0,\"layer\":0,\"experts\":[1]}\n",
    )
    .unwrap();
    // A cut oracleGeneral record; MoE routes without the model they route.
    for (trace, place) in [(&truncated, "byte 24"), (&jsonl, "--model")] {
        assert_bad_input(
            &[
                "simulate",
                "--trace",
                s(trace),
                "--budget",
                "1MiB",
                "--json",
                s(&out),
            ],
            trace,
            place,
            &out,
        );
    }
}

#[test]
fn hits_hiding_reads_never_add_wait_and_change_no_miss() {
    // The same arms with and without --hits-hide-reads: the misses are the
    // policy's, so they are equal; a token's wait in a layer with hits
    // hiding is at most its reads in full (design §6), and at 25 % some
    // tokens hit, so the sum is strictly lower.
    let model = model("deepseek-v2-lite");
    let args = [
        "--model",
        &model,
        "--policy",
        "lru",
        "--budget",
        "25%",
        "--allocation",
        "global,uniform,online",
        "--tokens",
        "50",
        "--layers",
        "4",
    ];
    let Some(full) = simulate_shared(ESFT, &args) else {
        return;
    };
    let hidden = simulate_shared(ESFT, &[&args[..], &["--hits-hide-reads"]].concat()).unwrap();
    let runs = |doc: &Value| doc["runs"].as_array().unwrap().clone();
    let (full, hidden) = (runs(&full.doc), runs(&hidden.doc));
    assert_eq!(full.len(), 3);
    for (f, h) in full.iter().zip(&hidden) {
        assert_eq!(f["misses"], h["misses"]);
        let felt = |r: &Value| r["felt_wait_seconds"].as_f64().unwrap();
        assert!(felt(h) < felt(f), "{} against {}", felt(h), felt(f));
    }
}

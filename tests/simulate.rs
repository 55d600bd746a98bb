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
    let Some(trace) = shared_data("cache-oracle/cloudPhysicsIO.oracleGeneral.bin") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.json");
    let o = run(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-format",
        "oracle-general",
        "--policy",
        "lru,fifo,clock,sieve,s3fifo,arc,wtinylfu",
        "--budget",
        "128MiB,256MiB,512MiB,1GiB,2GiB,4GiB,8GiB,16GiB",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
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

fn esft() -> Option<String> {
    shared_data("traces/esft_deepseek_v2_lite").map(|p| p.to_str().unwrap().to_string())
}

#[test]
fn moe_trace_runs_are_deterministic_and_cut_as_asked() {
    let Some(trace) = esft() else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = model("deepseek-v2-lite");
    let outputs: Vec<String> = (0..2)
        .map(|i| {
            let out = dir.path().join(format!("{i}.json"));
            let o = run(&[
                "simulate",
                "--trace",
                &trace,
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
                "--json",
                out.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("--tokens 200 kept 800 of"),
                "{}",
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("--layers 4 kept 4 of 26"),
                "{}",
                stderr(&o)
            );
            std::fs::read_to_string(out).unwrap()
        })
        .collect();
    assert_eq!(outputs[0], outputs[1]);
    let doc: Value = serde_json::from_str(&outputs[0]).unwrap();
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
    let Some(trace) = esft() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gate.json");
    let o = run(&[
        "simulate",
        "--trace",
        &trace,
        "--model",
        &model("deepseek-v2-lite"),
        "--policy",
        "lru,frequency",
        "--budget",
        "25%",
        "--allocation",
        "uniform,dynamic",
        "--tokens",
        "300",
        "--layers",
        "5",
        "--gate",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let gate = doc["gate"].as_array().unwrap();
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
    assert!(stdout(&o).contains("held-out gate"));
}

#[test]
fn bad_simulate_input_is_one_line_with_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.json");
    let truncated = dir.path().join("t.oracleGeneral.bin");
    std::fs::write(&truncated, [0u8; 30]).unwrap();
    assert_bad_input(
        &[
            "simulate",
            "--trace",
            truncated.to_str().unwrap(),
            "--budget",
            "1MiB",
            "--json",
            out.to_str().unwrap(),
        ],
        &truncated,
        "byte 24",
        &out,
    );
    let jsonl = dir.path().join("routes.jsonl");
    std::fs::write(
        &jsonl,
        "{\"seq\":\"a\",\"pos\":0,\"layer\":0,\"experts\":[1]}\n",
    )
    .unwrap();
    assert_bad_input(
        &[
            "simulate",
            "--trace",
            jsonl.to_str().unwrap(),
            "--budget",
            "1MiB",
            "--json",
            out.to_str().unwrap(),
        ],
        &jsonl,
        "--model",
        &out,
    );
}

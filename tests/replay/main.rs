//! `residency replay` end to end on a generated checkpoint and a trace:
//! every placement policy computes the same outputs (equal checksums), the
//! counters add up, and bad input is one line with no output file.

#[path = "../common/mod.rs"]
mod common;
mod determinism;
mod pin_share;
mod vram;

use common::*;
use residency_testkit::tiny_mixtral;
use serde_json::Value;
use std::path::PathBuf;

/// A generated checkpoint of `tiny_mixtral(8)` (two MoE layers of 8
/// experts, 12 KiB each, top-2) and a jsonl trace of 60 tokens in two
/// categories whose hot experts differ (a: 0-3, b: 4-7), with some reuse,
/// in a temporary directory that lives as long as this.
struct Fixture {
    dir: tempfile::TempDir,
    yaml: PathBuf,
    ckpt: PathBuf,
    trace: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
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
        Fixture::with(8, &[], &lines)
    }

    /// A checkpoint of `tiny_mixtral(experts)`, generated with
    /// `gen_flags`, and `lines` as the trace.
    fn with(experts: usize, gen_flags: &[&str], lines: &str) -> Fixture {
        Fixture::of_model(&tiny_mixtral(experts), gen_flags, lines)
    }

    /// [`Fixture::new`]'s trace on an int4 checkpoint of the same model,
    /// in groups of 32 (its 32 and 64 features are whole groups, which the
    /// GEMV kernel runs).
    fn int4() -> Fixture {
        let int4 =
            tiny_mixtral(8).replace("bf16: 12288", "bf16: 12288\n  int4: { bits: 4, group: 32 }");
        let trace = std::fs::read_to_string(Fixture::new().trace).unwrap();
        Fixture::of_model(&int4, &["--dtype", "int4"], &trace)
    }

    /// A checkpoint of the model `description`, generated with `gen_flags`,
    /// and `lines` as the trace.
    fn of_model(description: &str, gen_flags: &[&str], lines: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("mixtral-replay.yaml");
        std::fs::write(&yaml, description).unwrap();
        let ckpt = dir.path().join("ckpt");
        let mut gen = vec![
            "gen-checkpoint",
            "--model",
            s(&yaml),
            "--out",
            s(&ckpt),
            "--family",
            "mixtral",
        ];
        gen.extend_from_slice(gen_flags);
        run_ok(&gen);
        let trace = dir.path().join("trace.jsonl");
        std::fs::write(&trace, lines).unwrap();
        Fixture {
            dir,
            yaml,
            ckpt,
            trace,
        }
    }

    /// `path` in the fixture's directory.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `residency replay` of the trace from the checkpoint for the model,
    /// with `extra` arguments.
    fn replay(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec![
            "replay",
            "--checkpoint",
            s(&self.ckpt),
            "--trace",
            s(&self.trace),
            "--model",
            s(&self.yaml),
        ];
        args.extend_from_slice(extra);
        run(&args)
    }

    /// `replay` with `extra` and `--json` into `name`, which must succeed:
    /// its stdout and the JSON.
    fn report(&self, name: &str, extra: &[&str]) -> (String, Value) {
        let json = self.path(name);
        let o = self.replay(&[extra, &["--json", s(&json)]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        (stdout(&o), read_json(&json))
    }

    /// `residency simulate` of the trace for the model with `extra`, its
    /// JSON written to `name` and read back.
    fn simulate(&self, name: &str, extra: &[&str]) -> Value {
        let json = self.path(name);
        let args = [
            "simulate",
            "--trace",
            s(&self.trace),
            "--model",
            s(&self.yaml),
        ];
        run_ok(&[&args[..], extra, &["--json", s(&json)]].concat());
        read_json(&json)
    }

    /// `report`'s stdout and the JSON's runs.
    fn runs(&self, name: &str, extra: &[&str]) -> (String, Vec<Value>) {
        let (out, doc) = self.report(name, extra);
        (out, doc["runs"].as_array().unwrap().clone())
    }
}

/// The run of `policy` in a replay's or simulate's JSON.
fn arm(doc: &Value, policy: &str) -> Value {
    let runs = doc["runs"].as_array().unwrap();
    runs.iter().find(|r| r["policy"] == policy).unwrap().clone()
}

#[test]
fn every_policy_computes_the_same_outputs() {
    let (out, runs) = Fixture::new().runs(
        "replay.json",
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
            // One training category: nothing to hold out for `auto`.
            "--pin-share",
            "0.5",
        ],
    );
    assert!(out.contains("equal for every policy"), "{out}");
    // 6 policies x 2 rounds, the second round in reverse order (A B, B A).
    assert_eq!(runs.len(), 12);
    assert_eq!(runs[0]["policy"], "lru");
    assert_eq!(runs[6]["policy"], "replan");
    let checksum = &runs[0]["output_checksum"];
    for r in &runs {
        assert_eq!(&r["output_checksum"], checksum);
        // Category b only (a trained): 30 tokens, 2 layers x 2 experts.
        assert_eq!(r["tokens"], 30);
        let (hits, misses) = (r["hits"].as_u64().unwrap(), r["misses"].as_u64().unwrap());
        assert_eq!(hits + misses, 30 * 2 * 2, "{r}");
        // Every miss reads one 12 KiB expert (bf16 64 x 32 x 3 x 2 bytes).
        assert_eq!(r["bytes_read"].as_u64().unwrap(), misses * 12288, "{r}");
        assert!(r["tok_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap());
        // The bursts count the layers that read: at most 30 tokens x 2
        // layers, of 1 or 2 misses (2 experts a layer); an arm without
        // moves of its own (every one but replan) reads each miss in
        // exactly one burst, so k x layers summed is its misses.
        let bursts = r["read_bursts"].as_array().cloned().unwrap_or_default();
        let field = |b: &Value, k: &str| b[k].as_u64().unwrap();
        let layers: u64 = bursts.iter().map(|b| field(b, "layers")).sum();
        assert!(
            layers <= 60 && bursts.iter().all(|b| field(b, "misses") <= 2),
            "{r}"
        );
        if r["policy"] != "replan" {
            let read: u64 = bursts
                .iter()
                .map(|b| field(b, "misses") * field(b, "layers"))
                .sum();
            assert_eq!(read, misses, "{r}");
        }
    }
    // plan pins category a's experts, trained on a: replaying b, its pins
    // never hit, and it admits nothing: every request misses.
    let plan = runs.iter().find(|r| r["policy"] == "plan").unwrap();
    assert_eq!(plan["hits"], 0);
}

/// On an int4 checkpoint every expert is computed by the int4 GEMV
/// kernel, projection by projection, and every policy, the resident
/// baseline included, still computes the same outputs.
#[test]
fn an_int4_checkpoint_is_computed_by_the_gemv_kernel_with_equal_outputs() {
    let fx = Fixture::int4();
    let o = fx.replay(&[
        "--policy",
        "lru,uniform,resident",
        "--ram-budget",
        "25%",
        "--train-categories",
        "a",
        "--json",
        s(&fx.path("int4.json")),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("experts computed by the int4 GEMV kernel"),
        "{}",
        stderr(&o)
    );
    let doc = read_json(&fx.path("int4.json"));
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        assert_eq!(r["output_checksum"], runs[0]["output_checksum"], "{r}");
    }
    // An int4 expert of 64 x 32 in groups of 32: gate and up are 32 rows
    // of 64 features (32 bytes and two 2-byte scales a row), down 64 rows
    // of 32 (16 bytes and one scale): 1,152 bytes each, 3,456 an expert.
    let lru = &runs[0];
    let misses = lru["misses"].as_u64().unwrap();
    assert!(misses > 0, "{lru}");
    assert_eq!(lru["bytes_read"].as_u64().unwrap(), misses * 3456, "{lru}");
}

/// The per-layer arms: global LRU, uniform per-layer LRU, offline
/// water-filling and the online allocator compute the same outputs, and
/// every request is a hit or a miss of one expert.
#[test]
fn per_layer_arms_compute_the_same_outputs() {
    let (out, runs) = Fixture::new().runs(
        "replay.json",
        &[
            "--policy",
            "lru,uniform,dynamic-offline,dynamic",
            "--ram-budget",
            "25%",
            "--online-every",
            "2",
            "--online-window",
            "16",
        ],
    );
    assert!(out.contains("equal for every policy"), "{out}");
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!(r["output_checksum"], runs[0]["output_checksum"]);
        let (hits, misses) = (r["hits"].as_u64().unwrap(), r["misses"].as_u64().unwrap());
        // All 60 tokens (in-sample), 2 layers x 2 experts.
        assert_eq!(hits + misses, 60 * 2 * 2, "{r}");
        assert_eq!(r["bytes_read"].as_u64().unwrap(), misses * 12288, "{r}");
    }
}

/// The all-resident case of the overhead measurement: with the whole
/// budget warmed, the store's arms read nothing and hit every request, and
/// they compute what `resident` (no store) computes.
#[test]
fn a_warm_full_budget_reads_nothing_and_matches_the_resident_baseline() {
    let (_, runs) = Fixture::new().runs(
        "replay.json",
        &[
            "--policy",
            "resident,lru,cost",
            "--ram-budget",
            "100%",
            "--warm",
        ],
    );
    assert_eq!(runs.len(), 3);
    for r in &runs {
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
    let fixture = Fixture::new();
    let runs_with = |seed: &str| {
        let (_, runs) = fixture.runs(
            &format!("seed-{seed}.json"),
            &[
                "--policy",
                "lru",
                "--ram-budget",
                "100%",
                "--train-categories",
                "a",
                "--seed-tokens",
                seed,
            ],
        );
        runs[0].clone()
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
    // One training category leaves none to hold out, so `auto` (the
    // default) cannot show that a pin pays: replan pins nothing and runs,
    // and the line says what would let it judge.
    let (out, doc) = fixture.report(
        "one-category.json",
        &["--train-categories", "a", "--policy", "lru,replan"],
    );
    assert!(out.contains("replan pins 0% of the budget (--pin-share auto: pins are judged on a training category held out from the others, and the training tokens have 1 (a); name two or more"), "{out}");
    assert_eq!(doc["pin_share"]["chosen_by"], "auto");
    assert_eq!(doc["pin_share"]["share"], 0.0);
    assert!(doc["pin_share"]
        .get("recommendation")
        .is_none_or(|r| r.is_null()));
    let startup: Vec<&Value> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["startup_bytes"])
        .collect();
    assert_eq!(
        startup,
        [&Value::from(0), &Value::from(0)],
        "no pins, nothing read before the clock"
    );
    // Seeding needs training categories to take the tokens from.
    let o = fixture.replay(&["--seed-tokens", "4"]);
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
    let o = Fixture::new().replay(&[
        "--policy",
        "lru,cost,replan",
        "--ram-budget",
        "12288",
        "--train-categories",
        "a",
        "--pin-share",
        "0.5",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn per_category_runs_are_reported_apart() {
    let (_, runs) = Fixture::new().runs("replay.json", &["--policy", "lru,cost", "--per-category"]);
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
    let fixture = Fixture::new();
    let json = fixture.path("replay.json");
    // A trace routing an expert the checkpoint does not have.
    let wide = fixture.path("wide.jsonl");
    std::fs::write(
        &wide,
        "{\"seq\":\"a\",\"pos\":0,\"routes\":[[9,1],[0,1]]}\n",
    )
    .unwrap();
    assert_bad_input(
        &[
            "replay",
            "--checkpoint",
            s(&fixture.ckpt),
            "--trace",
            s(&wide),
            "--json",
            s(&json),
        ],
        &wide,
        "expert",
        &json,
    );
    // The same in a training token only, read with a description of 16
    // experts that lets it through: it is counted and simulated, not
    // served, and must be refused all the same.
    let wide_model = fixture.path("mixtral-16.yaml");
    std::fs::write(&wide_model, tiny_mixtral(16)).unwrap();
    let wide_training = fixture.path("wide-training.jsonl");
    std::fs::write(
        &wide_training,
        "{\"seq\":\"a\",\"pos\":0,\"category\":\"a\",\"routes\":[[0,1],[9,1]]}\n\
         {\"seq\":\"b\",\"pos\":0,\"category\":\"b\",\"routes\":[[0,1],[0,1]]}\n",
    )
    .unwrap();
    assert_bad_input(
        &[
            "replay",
            "--checkpoint",
            s(&fixture.ckpt),
            "--trace",
            s(&wide_training),
            "--model",
            s(&wide_model),
            "--train-categories",
            "a",
            "--policy",
            "lru",
            "--json",
            s(&json),
        ],
        &wide_training,
        "the trace routes 2 MoE layers of 10 experts; the checkpoint has 2 of 8",
        &json,
    );
    // Arguments that leave nothing to do or make no sense: one line, no file.
    let cases: [(&[&str], &str); 6] = [
        (&["--train-categories", "a,b"], "no token left to replay"),
        (
            &["--pin-share", "1.5"],
            "`1.5`: give a share of the budget between 0 and 1 (e.g. `0.5`) or `auto`",
        ),
        (
            &["--pin-share", "foo"],
            "`foo`: give a share of the budget between 0 and 1 (e.g. `0.5`) or `auto`",
        ),
        (
            &["--replan-every-seconds", "0"],
            "--replan-every-seconds 0: give a positive number of seconds",
        ),
        (
            &["--online-every", "0"],
            "online allocation: the period is 0 tokens; give a positive number of tokens",
        ),
        (
            &["--policy", "lru,dynamic", "--layer-policy", "arc"],
            "--layer-policy arc: per-layer budgets that move need lru, fifo, sieve, s3fifo, lfu or lfru",
        ),
    ];
    for (extra, message) in cases {
        let o = fixture.replay(&[extra, &["--json", s(&json)]].concat());
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        // The error is one line of its own (notes may come before it).
        assert!(
            e.lines()
                .any(|l| l.starts_with("error: ") && l.contains(message)),
            "{e}"
        );
        assert!(!json.exists());
    }
}

/// The offline bound: Belady's MIN (the simulator's `belady`, which sees
/// the future) on the tokens the arms serve misses no more than any online
/// arm measured in the store. That they are the same tokens is checked by
/// the simulator's LRU missing exactly what the store's LRU missed. Each
/// run's own bound (`miss_bound`: MIN less what a start can hold) holds
/// for arms that start with pins or a seed too.
#[test]
fn no_online_arm_misses_less_than_the_offline_bound_on_the_same_tokens() {
    let f = Fixture::new();
    for budget in ["25%", "50%"] {
        let arms = [
            "--policy",
            "lru,lfru,frequency,cost,replan,uniform,dynamic",
            "--ram-budget",
            budget,
            "--train-categories",
            "a",
            "--pin-share",
            "0.5",
        ];
        let (_, runs) = f.runs("arms.json", &arms);
        let (_, seeded) = f.runs(
            "seeded.json",
            &[&arms[..], &["--seed-tokens", "8"]].concat(),
        );
        let simulated = f.simulate(
            "bound.json",
            &[
                "--policy",
                "belady,lru",
                "--budget",
                budget,
                "--categories",
                "b",
            ],
        );
        let misses_of = |policy: &str| arm(&simulated, policy)["misses"].as_u64().unwrap();
        let lru = runs.iter().find(|r| r["policy"] == "lru").unwrap();
        assert_eq!(
            lru["misses"].as_u64().unwrap(),
            misses_of("lru"),
            "{budget}"
        );
        let bound = misses_of("belady");
        // 16 experts of equal size: a quarter holds 4, half 8; category
        // b routes 8 (4 a layer), so a start can hold 4 or all 8 of them.
        let (capacity, best_start) = if budget == "25%" {
            (4, bound - 4)
        } else {
            (8, 0)
        };
        for r in runs.iter().chain(&seeded) {
            let misses = r["misses"].as_u64().unwrap();
            assert_eq!(r["miss_bound"]["capacity_experts"], capacity, "{r}");
            assert_eq!(r["miss_bound"]["misses"], best_start, "{r}");
            assert!(
                misses >= best_start,
                "{budget}: {} missed {misses}, the bound {best_start}",
                r["policy"]
            );
        }
        for r in &runs {
            // Unseeded, MIN after the (empty) seed is the simulator's.
            assert_eq!(r["miss_bound"]["misses_after_seed"], bound, "{r}");
            let misses = r["misses"].as_u64().unwrap();
            assert!(
                misses >= bound,
                "{budget}: {} missed {misses}, the bound {bound}",
                r["policy"]
            );
        }
        if budget == "50%" {
            // Half of 16 experts holds category b's 4 a layer: only the 8
            // first uses miss.
            assert_eq!(bound, 8);
        } else {
            // Not vacuous: a quarter holds 2 of the 4, and LRU misses more.
            assert!(bound < misses_of("lru"), "{budget}");
        }
    }
}

/// `--heat` stands for training tokens. Heat on experts 0-3 of each layer
/// (category a's) pins them for `plan`, so serving b (experts 4-7) it hits
/// nothing, as after `--train-categories a`; heat on 4-7 pins b's own, so
/// it hits. Heat of another shape is one line naming the file.
#[test]
fn the_learning_arms_learn_from_a_heat_file() {
    let f = Fixture::new();
    let plan_hits = |hot: [u32; 8]| {
        let heat = f.path("heat.json");
        let layers = serde_json::json!({ "layers": [hot, hot] });
        std::fs::write(&heat, layers.to_string()).unwrap();
        let (_, runs) = f.runs(
            "heat-run.json",
            &[
                "--policy",
                "plan",
                "--ram-budget",
                "25%",
                "--categories",
                "b",
                "--heat",
                s(&heat),
            ],
        );
        runs[0]["hits"].as_u64().unwrap()
    };
    assert_eq!(plan_hits([30, 30, 30, 30, 0, 0, 0, 0]), 0);
    assert!(plan_hits([0, 0, 0, 0, 30, 30, 30, 30]) > 0);
    let heat = f.path("one-layer.json");
    std::fs::write(&heat, r#"{"layers": [[1, 2, 3, 4, 5, 6, 7, 8]]}"#).unwrap();
    let o = f.replay(&["--policy", "plan", "--heat", s(&heat)]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("one-layer.json") && e.contains("MoE layers"),
        "{e}"
    );
}

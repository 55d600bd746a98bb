//! `residency replay` end to end on a generated checkpoint and a trace:
//! every placement policy computes the same outputs (equal checksums), the
//! counters add up, and bad input is one line with no output file.

mod common;

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

    /// `report`'s stdout and the JSON's runs.
    fn runs(&self, name: &str, extra: &[&str]) -> (String, Vec<Value>) {
        let (out, doc) = self.report(name, extra);
        (out, doc["runs"].as_array().unwrap().clone())
    }
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

/// Every `--vram-policy` the help offers runs on the card (or, without
/// one, with the tier off and said so), and one that cannot run there is
/// refused by the argument parser in one line. `--predict-only` simulates
/// the card whether or not one is here. By hand, on a card that holds
/// every expert: category b routes only experts 4-7 of each layer, and
/// the training category a only 0-3, so `plan`'s card (a's knapsack:
/// experts never trained on are not in it) computes none of b's experts,
/// while `lru`'s card, filled by b's own routes, computes some.
#[test]
fn every_vram_policy_runs_on_the_card_or_is_refused_in_one_line() {
    let fx = Fixture::int4();
    let arms = ["--policy", "lru", "--train-categories", "a"];
    let card = ["--vram-budget", "25%", "--vram-allowance", "4KiB"];
    for policy in [
        "lfru",
        "lru",
        "cost",
        "frequency",
        "plan",
        "replan",
        "belady",
    ] {
        let o = fx.replay(&[&arms[..], &card[..], &["--vram-policy", policy]].concat());
        assert!(o.status.success(), "{policy}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let off = stderr(&o).contains("--vram-budget: the VRAM tier is off");
        if !off {
            assert!(out.contains(&format!("under {policy}")), "{out}");
        }
        if policy == "belady" && !off {
            assert!(out.contains("belady (offline: sees the future"), "{out}");
        }
    }
    let o = fx.replay(&[&arms[..], &card[..], &["--vram-policy", "pinned-lru"]].concat());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("pinned-lru") && err.contains("replan"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let predicted = |policy: &str| {
        let whole_card = ["--vram-budget", "100%", "--vram-allowance", "4KiB"];
        let o = fx.replay(
            &[
                &arms[..],
                &whole_card[..],
                &["--vram-policy", policy, "--predict-only"],
            ]
            .concat(),
        );
        assert!(o.status.success(), "{policy}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(!stderr(&o).contains("VRAM tier is off"), "{}", stderr(&o));
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("lru "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string();
        let on_card: u64 = row.split_whitespace().last().unwrap().parse().unwrap();
        on_card
    };
    assert_eq!(predicted("plan"), 0);
    assert!(predicted("lru") > 0);
}

/// `--vram-budget` puts a tier of experts on CUDA device 0 in front of
/// every store arm. Where no card can run it (this build machine, CI), the
/// tier is off and said so, and every expert takes the CPU path: no expert
/// on the card, the checksums equal. Where one can, the card computes some
/// experts, and every arm's outputs agree with the CPU-only run's to
/// rounding. A BF16 checkpoint has no tier anywhere: the kernels run
/// packed formats.
#[test]
fn a_vram_tier_computes_what_the_cpu_does_or_says_why_it_is_off() {
    let fx = Fixture::int4();
    let arms = [
        "--policy",
        "lru,uniform",
        "--ram-budget",
        "25%",
        "--train-categories",
        "a",
    ];
    let (_, cpu_only) = fx.runs("cpu.json", &arms);
    let o = fx.replay(
        &[
            &arms[..],
            &[
                "--vram-budget",
                "25%",
                "--vram-allowance",
                "4KiB",
                "--json",
                s(&fx.path("vram.json")),
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let runs = read_json(&fx.path("vram.json"))["runs"].clone();
    let runs = runs.as_array().unwrap();
    let off = stderr(&o).contains("--vram-budget: the VRAM tier is off");
    let on_card: u64 = runs
        .iter()
        .map(|r| r["gpu_experts"].as_u64().unwrap())
        .sum();
    if off {
        assert_eq!(on_card, 0);
        for r in runs {
            assert_eq!(r["output_checksum"], cpu_only[0]["output_checksum"]);
        }
    } else {
        assert!(on_card > 0, "{runs:?}");
        // To rounding, grown along the chained layers: the H200 measured
        // up to 2.2e-4 of the sum over 192 tokens of 4 layers.
        let want = cpu_only[0]["output_sum"].as_f64().unwrap();
        for r in runs {
            let got = r["output_sum"].as_f64().unwrap();
            assert!((got - want).abs() <= 1e-3 * want, "{got} vs {want}");
        }
    }
    // `dynamic` on the card needs a policy that resizes: one line, before
    // any run, whether or not there is a card.
    let o = fx.replay(
        &[
            &arms[..],
            &[
                "--vram-budget",
                "25%",
                "--vram-allocation",
                "dynamic",
                "--vram-policy",
                "arc",
            ],
        ]
        .concat(),
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("--vram-policy arc") && err.contains("give --vram-policy lfru"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // BF16: off everywhere, and why.
    let bf16 = Fixture::new();
    let o = bf16.replay(&[&arms[..], &["--vram-budget", "25%"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("VRAM tier is off") && stderr(&o).contains("BF16"),
        "{}",
        stderr(&o)
    );
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

/// A checkpoint of one MoE layer of 16 experts (`tiny_mixtral(16)` cut to
/// its first, 12 KiB each) and 20 tokens in each of the categories a, b and
/// c, token `t` of category `k` (0, 1, 2) routing `route(k, t)`.
fn one_layer(route: impl Fn(u32, u32) -> Vec<u32>) -> Fixture {
    let mut lines = String::new();
    for (k, category) in ["a", "b", "c"].into_iter().enumerate() {
        for t in 0..20 {
            lines.push_str(&format!(
                "{{\"seq\":\"{category}\",\"pos\":{t},\"category\":\"{category}\",\"routes\":[{:?}]}}\n",
                route(k as u32, t)
            ));
        }
    }
    Fixture::with(16, &["--layers", "1"], &lines)
}

/// Two experts of 12 KiB, and `replan` never re-planning within the 20
/// tokens, so that its pins are the ones it starts from.
const TWO_EXPERTS: [&str; 6] = [
    "--ram-budget",
    "24576",
    "--replan-every",
    "1000",
    "--train-categories",
    "a,b",
];

/// The simulator's held-out felt wait at the shares 0, 10, 25, 50 and 75 %
/// as ratios to the first, from `replay --json`'s `pin_share`.
fn felt_ratios(pin_share: &Value) -> Vec<f64> {
    let shares = pin_share["recommendation"]["shares"].as_array().unwrap();
    let felt: Vec<f64> = shares
        .iter()
        .map(|s| s["felt_wait_seconds"].as_f64().unwrap())
        .collect();
    felt.iter().map(|f| f / felt[0]).collect()
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-9, "{got:?} against {want:?}");
    }
}

/// Each category routes its own two experts every token (a: 0 1, b: 2 3,
/// c: 4 5): recency wins, and `auto` pins nothing.
#[test]
fn auto_pins_nothing_where_recency_wins() {
    let fixture = one_layer(|k, _| vec![2 * k, 2 * k + 1]);
    let (out, doc) = fixture.report(
        "auto.json",
        &[&TWO_EXPERTS[..], &["--policy", "lru,replan"]].concat(),
    );
    // By hand, training categories a and b held out in turn at 2 slots:
    // with no pin (shares 0, 10 % and 25 % of 2 slots pin nothing) LRU
    // misses each of the category's 2 experts once: 2 misses a category.
    // One pin (50 %, 75 %) holds the other category's expert (2 or 0, by
    // the knapsack's tie to the lowest index), never asked for here, and
    // leaves LRU 1 slot for 2 experts a token: both miss on the first
    // token, then the one not resident misses on each of the other 19
    // (the resident one is served first): 21. Summed over a and b: 4, 4,
    // 4, 42, 42 misses of equal cost.
    let pin_share = &doc["pin_share"];
    assert_eq!(pin_share["chosen_by"], "auto");
    assert_eq!(pin_share["share"], 0.0);
    assert_eq!(
        pin_share["held_out_categories"],
        serde_json::json!(["a", "b"])
    );
    assert_close(&felt_ratios(pin_share), &[1.0, 1.0, 1.0, 10.5, 10.5]);
    assert!(out.contains("replan pins 0% of the budget (--pin-share auto: no pinned share waits less than LRU alone (recency wins)"), "{out}");
    // Replaying c: replan pins nothing, so it is LRU: nothing read before
    // the clock, and its 2 experts each missed once.
    let replan = arm(&doc, "replan");
    assert_eq!(replan["startup_bytes"], 0, "{replan}");
    assert_eq!(replan["misses"], 2, "{replan}");
    assert_eq!(replan["hits"], 20 * 2 - 2, "{replan}");
    // The simulator on the same tokens and budget: LRU misses c's two
    // experts once each, as the store did (by hand, above), both on the
    // first token, which has no hit to hide them: some wait is left, at
    // the profile's drive and at the run's own reads. `replan` has no
    // simulator arm: it re-plans while serving.
    let lru = arm(&doc, "lru");
    assert_eq!(lru["simulated"]["misses"], 2, "{lru}");
    assert!(lru["simulated"]["felt_wait_seconds"].as_f64().unwrap() > 0.0);
    for at_run in ["at_run_reads", "at_run_rates"] {
        let felt = &lru["simulated"][format!("felt_wait_seconds_{at_run}")];
        assert!(felt.as_f64().unwrap() > 0.0, "{lru}");
    }
    // The misses' reads were timed, from their start to the last landing,
    // and the products the compute thread ran.
    assert!(lru["miss_reads_seconds"].as_f64().unwrap() > 0.0, "{lru}");
    assert!(lru["compute_bytes_per_s"].as_f64().unwrap() > 0.0, "{lru}");
    assert!(replan.get("simulated").is_none(), "{replan}");
    assert!(
        out.contains("the simulator on the same tokens and budget"),
        "{out}"
    );
    // A number still pins what it says: half of 2 slots, one expert read
    // before the clock.
    let (out, doc) = fixture.report(
        "fixed.json",
        &[
            &TWO_EXPERTS[..],
            &["--policy", "replan", "--pin-share", "0.5"],
        ]
        .concat(),
    );
    assert_eq!(
        doc["pin_share"],
        serde_json::json!({"share": 0.5, "chosen_by": "flag", "seeded": false})
    );
    assert_eq!(doc["runs"][0]["startup_bytes"], 12288);
    assert!(
        out.contains("replan pins 50% of the budget (--pin-share 0.5)"),
        "{out}"
    );
}

/// A seeded arm is simulated after its seed tokens, as the store serves
/// it. Categories a and b route experts 0 and 1 every token, c routes 4
/// and 5; two slots of RAM. By hand, LRU replaying b then c: cold, it
/// misses 0 and 1 on b's first token and 4 and 5 on c's (4 misses); seeded
/// with a's last 5 tokens, 0 and 1 are resident and only c's two miss (2).
/// The seeded felt wait is c's first token's; the cold one adds b's
/// first token's, which waits as long, less what the compute before c's
/// hides: about half (each process measures its own compute rate, which
/// prices that small part).
#[test]
fn a_seeded_arm_is_simulated_after_its_seed() {
    let fixture = one_layer(|k, _| if k == 2 { vec![4, 5] } else { vec![0, 1] });
    let lru_with = |seed: &str| {
        let (_, doc) = fixture.report(
            &format!("seed-{seed}.json"),
            &[
                &TWO_EXPERTS[..2],
                &["--train-categories", "a", "--policy", "lru"],
                &["--seed-tokens", seed],
            ]
            .concat(),
        );
        arm(&doc, "lru")
    };
    let (cold, seeded) = (lru_with("0"), lru_with("5"));
    assert_eq!(cold["misses"], 4, "{cold}");
    assert_eq!(cold["simulated"]["misses"], 4, "{cold}");
    assert_eq!(seeded["misses"], 2, "{seeded}");
    assert_eq!(seeded["simulated"]["misses"], 2, "{seeded}");
    let felt = |r: &Value| r["simulated"]["felt_wait_seconds"].as_f64().unwrap();
    assert!(felt(&seeded) > 0.0, "{seeded}");
    let half = felt(&seeded) / felt(&cold);
    assert!((0.45..0.55).contains(&half), "{seeded} {cold}");
}

/// Every category routes expert 0 and two cold experts of its own a token
/// (a: 1-5, b: 6-10, c: 11-15, cycling): a hot expert all share, which the
/// cold ones evict from an LRU, so pinning it pays.
fn hot_and_scans(k: u32, t: u32) -> Vec<u32> {
    let first = 1 + 5 * k;
    vec![0, first + (2 * t) % 5, first + (2 * t + 1) % 5]
}

#[test]
fn auto_pins_a_stable_hot_set() {
    let (out, doc) = one_layer(hot_and_scans).report(
        "auto.json",
        &[&TWO_EXPERTS[..], &["--policy", "lru,replan"]].concat(),
    );
    // By hand, a and b held out in turn at 2 slots. No pin: a token's two
    // cold experts are new (the 5 of a cycle, 2 a token) and evict expert 0
    // each time, so all 3 miss: 60 a category. One pin (50 %, 75 %) is
    // expert 0 (20 requests in the other category against 8 for each cold
    // one), which hits; the cold ones still miss: 40. Summed: 120, 120,
    // 120, 80, 80; the least is 50 %, the smaller of the tie.
    let pin_share = &doc["pin_share"];
    assert_eq!(pin_share["chosen_by"], "auto");
    assert_eq!(pin_share["share"], 0.5);
    assert_close(
        &felt_ratios(pin_share),
        &[1.0, 1.0, 1.0, 80.0 / 120.0, 80.0 / 120.0],
    );
    assert!(
        out.contains(
            "replan pins 50% of the budget (--pin-share auto: the least held-out felt wait"
        ),
        "{out}"
    );
    // Replaying c: replan pins expert 0 (trained on a and b) before the
    // clock, which hits on all 20 tokens; its LRU slot holds one cold
    // expert of the token before, never one asked for next: 40 misses.
    let replan = arm(&doc, "replan");
    assert_eq!(replan["startup_bytes"], 12288, "{replan}");
    assert_eq!(replan["hits"], 20, "{replan}");
    assert_eq!(replan["misses"], 40, "{replan}");
}

/// The run of `policy` in a replay's JSON.
fn arm(doc: &Value, policy: &str) -> Value {
    let runs = doc["runs"].as_array().unwrap();
    runs.iter().find(|r| r["policy"] == policy).unwrap().clone()
}

/// `auto` is `simulate --gate`'s recommendation for the training
/// categories alone, at the same budget, cold for a cold replay and seeded
/// for a seeded one: the held-out category c is not in what it simulates.
#[test]
fn auto_is_what_simulate_recommends_on_the_training_categories() {
    let routes = [hot_and_scans as fn(u32, u32) -> Vec<u32>, |k, _| {
        vec![2 * k, 2 * k + 1]
    }];
    for route in routes {
        let fixture = one_layer(route);
        let starts: [(&[&str], &[&str]); 2] =
            [(&[], &[]), (&["--seed-tokens", "5"], &["--seeded"])];
        for (replay_start, simulate_start) in starts {
            let (_, doc) = fixture.report(
                "auto.json",
                &[&TWO_EXPERTS[..], &["--policy", "replan"], replay_start].concat(),
            );
            assert_eq!(doc["pin_share"]["seeded"], !replay_start.is_empty());
            let sim = fixture.path("sim.json");
            let mut simulate = vec![
                "simulate",
                "--trace",
                s(&fixture.trace),
                "--model",
                s(&fixture.yaml),
                "--layers",
                "1",
                "--categories",
                "a,b",
                "--policy",
                "lru,pinned-lru",
                "--allocation",
                "global",
                "--budget",
                "24576",
                "--gate",
                "--no-sensitivity",
                "--json",
                s(&sim),
            ];
            simulate.extend_from_slice(simulate_start);
            run_ok(&simulate);
            assert_eq!(
                doc["pin_share"]["recommendation"],
                read_json(&sim)["pin_shares"][0]
            );
        }
    }
}

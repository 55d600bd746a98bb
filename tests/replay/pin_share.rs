//! `replan`'s pin share chosen with `--pin-share auto`: nothing where
//! recency wins, a stable hot set pinned, seeded arms simulated after
//! their seed, and the share `simulate` recommends.

use super::{arm, Fixture};
use serde_json::Value;

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
            let gate = [
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
            ];
            let simulated = fixture.simulate("sim.json", &[&gate[..], simulate_start].concat());
            assert_eq!(
                doc["pin_share"]["recommendation"],
                simulated["pin_shares"][0]
            );
        }
    }
}

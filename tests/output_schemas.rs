//! The `--json` outputs have schemas: `residency schema` writes every file
//! of `schemas/` and nothing else (a drift test of the output types), and
//! a real `simulate --json` document, gate included, validates against
//! its schema.

mod common;

use common::*;
use residency_testkit::listing;
use std::path::Path;

#[test]
fn schema_writes_exactly_the_committed_schemas() {
    let dir = tempfile::tempdir().unwrap();
    run_ok(&["schema", "--out", s(dir.path())]);
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    assert_eq!(listing(dir.path()), listing(&committed));
    for name in listing(&committed) {
        assert!(
            std::fs::read(dir.path().join(&name)).unwrap()
                == std::fs::read(committed.join(&name)).unwrap(),
            "schemas/{name} differs from the Rust types: run `cargo run --release -- schema` and commit schemas/"
        );
    }
}

#[test]
fn simulate_json_with_the_gate_validates_against_its_schema() {
    let Some(sim) = simulate_esft_gate(&["--tokens", "200", "--layers", "2"]) else {
        return;
    };
    let doc = sim.doc;
    let schema_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/simulate-output.schema.json");
    let schema = read_json(&schema_path);
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    // The gate ran, so the document has one (the schema allows none).
    assert!(doc["gate"].as_array().is_some_and(|g| !g.is_empty()));
    // A document missing a required field fails: the schema is not vacuous.
    let mut broken = doc.clone();
    broken["runs"][0].as_object_mut().unwrap().remove("misses");
    assert!(!validator.is_valid(&broken));
}

#[test]
fn simulate_recommends_the_pinned_share_with_the_least_held_out_felt_wait() {
    let model = model("deepseek-v2-lite");
    let Some(sim) = simulate_shared(
        "traces/esft_deepseek_v2_lite",
        &[
            "--model",
            &model,
            "--policy",
            "lru,pinned-lru",
            "--budget",
            "10%,50%",
            "--allocation",
            "global,uniform,dynamic",
            "--gate",
            "--no-sensitivity",
            "--tokens",
            "200",
            "--layers",
            "2",
        ],
    ) else {
        return;
    };
    let schema = read_json(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/simulate-output.schema.json"),
    );
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&sim.doc));
    // Global and uniform (not dynamic) at both budgets, each at the five
    // shares from none to three quarters; the one recommended has the
    // least felt wait, the smaller share on a tie.
    let rows = sim.doc["pin_shares"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        assert_ne!(row["allocation"], "dynamic");
        let shares: Vec<(f64, f64)> = row["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["share"].as_f64().unwrap(),
                    s["felt_wait_seconds"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shares.iter().map(|s| s.0).collect::<Vec<_>>(),
            [0.0, 0.1, 0.25, 0.5, 0.75]
        );
        let least = shares.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
        let first = shares.iter().find(|s| s.1 == least).unwrap().0;
        assert_eq!(row["recommended_share"].as_f64().unwrap(), first, "{row}");
    }
}

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

//! The JSON Schemas in `schemas/` (design §2): the committed files are exactly
//! what the Rust types generate (the drift test), and the shipped profiles,
//! model descriptions and a plan made by the planner validate against them,
//! while values the readers reject (a bare rate, a size with a rate unit)
//! fail them too.

use residency_core::plan::Plan;
use residency_core::schema::schemas;
use residency_formats::inputs::{InputPaths, Inputs};
use residency_solver::{self as solve, SolveOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `*.yaml` files of `profiles/<sub>`, sorted.
fn yaml_files(sub: &str) -> Vec<PathBuf> {
    let dir = repo_dir().join("profiles").join(sub);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML files in {}", dir.display());
    files
}

fn schema(name: &str) -> Value {
    let (_, text) = schemas()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no schema named {name}"));
    serde_json::from_str(&text).unwrap()
}

fn validator(name: &str) -> jsonschema::Validator {
    jsonschema::validator_for(&schema(name))
        .unwrap_or_else(|e| panic!("{name} is not a valid JSON Schema: {e}"))
}

/// Every validation error of `instance`, one line each.
fn errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("at `{}`: {e}", e.instance_path()))
        .collect()
}

fn yaml_as_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn committed_schemas_match_the_rust_types() {
    let dir = repo_dir().join("schemas");
    let mut stale = Vec::new();
    for (name, generated) in schemas() {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(committed) if committed == generated.as_bytes() => {}
            Ok(_) => stale.push(format!("schemas/{name} differs from the Rust types")),
            Err(e) => stale.push(format!("schemas/{name} cannot be read: {e}")),
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nthe JSON Schemas are out of date: run `cargo run --release -- schema` and commit schemas/",
        stale.join("\n")
    );
}

#[test]
fn schemas_are_pretty_json_with_a_trailing_newline() {
    let all = schemas();
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "hardware-profile.schema.json",
            "model-description.schema.json",
            "kv-groups.schema.json",
            "plan.schema.json",
            "constraints.schema.json"
        ]
    );
    for (name, text) in &all {
        assert!(text.ends_with("}\n"), "{name} does not end in a newline");
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            value["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
    }
}

#[test]
fn unit_types_have_described_schemas() {
    let profile = schema("hardware-profile.schema.json");
    let defs = &profile["$defs"];
    for (unit, words) in [
        ("Bytes", ["KiB", "powers of 1024"]),
        ("BytesPerSecond", ["/s", "GB/s"]),
        ("Seconds", ["ms", "us"]),
    ] {
        let description = defs[unit]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("$defs/{unit} has no description"));
        for word in words {
            assert!(description.contains(word), "$defs/{unit}: {description}");
        }
    }
    // A GPU's rates and times point at the unit definitions.
    let gpu = &defs["Gpu"]["properties"];
    assert_eq!(gpu["vram"]["$ref"], "#/$defs/Bytes");
    assert_eq!(gpu["upload_bandwidth"]["$ref"], "#/$defs/BytesPerSecond");
    assert_eq!(gpu["sync_overhead"]["$ref"], "#/$defs/Seconds");
}

/// Every shipped YAML file of `profiles/<sub>` validates against `schema`.
fn shipped_files_validate(schema: &str, sub: &str) {
    let v = validator(schema);
    let mut failures = Vec::new();
    for path in yaml_files(sub) {
        for e in errors(&v, &yaml_as_json(&path)) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn shipped_hardware_profiles_validate() {
    shipped_files_validate("hardware-profile.schema.json", "hardware");
}

#[test]
fn shipped_model_descriptions_validate() {
    shipped_files_validate("model-description.schema.json", "models");
}

#[test]
fn shipped_kv_groups_validate() {
    shipped_files_validate("kv-groups.schema.json", "kv");
}

#[test]
fn a_plan_made_by_the_planner_validates() {
    // With the shipped KV groups, so the `kv` entries are checked too.
    let paths = InputPaths {
        kv: Some(repo_dir().join("profiles/kv/mooncake-conversation.yaml")),
        ..InputPaths::default()
    };
    let mut inputs = Inputs::load(&paths).unwrap();
    let inst = inputs.instance().unwrap();
    let solution = solve::solve(
        &inst,
        SolveOptions {
            time_limit_seconds: 2.0,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    let plan = Plan::new(&inst, &solution, inputs.refs.clone(), 2.0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plan.json");
    plan.write(&file).unwrap();
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["kv"].as_array().unwrap().len(), inst.kv_ids.len());
    assert!(!inst.kv_ids.is_empty());
    let v = validator("plan.schema.json");
    let failures = errors(&v, &written);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Not everything passes: a plan without its objective does not.
    let mut broken = written.clone();
    broken.as_object_mut().unwrap().remove("objective");
    assert!(!v.is_valid(&broken));
}

#[test]
fn values_the_readers_reject_fail_the_schemas() {
    let v = validator("hardware-profile.schema.json");
    let profile = |vram: &str, upload: &str, sync: &str| -> Value {
        serde_norway::from_str(&format!(
            "name: t\nnuma:\n  - {{id: 0, ram: 64 GiB, cores: 8, gemv_bandwidth: 40 GB/s}}\n\
             gpus:\n  - {{id: 0, name: g, vram: {vram}, numa: 0, gemv_bandwidth: 300 GB/s,\n\
             \x20     upload_bandwidth: {upload}, sync_overhead: {sync}}}\n"
        ))
        .unwrap()
    };
    let ok = profile("8 GiB", "12 GB/s", "120 us");
    assert_eq!(errors(&v, &ok), Vec::<String>::new());
    for (vram, upload, sync) in [
        ("8589934592", "12.5GB/s", "0.5 ms"),
        ("1.2 GiB", "1 GiB/s", "0 s"),
        ("128MiB", "3e9 B/s", "5ns"),
    ] {
        let good = profile(vram, upload, sync);
        assert_eq!(
            errors(&v, &good),
            Vec::<String>::new(),
            "{vram} {upload} {sync}"
        );
    }
    for (vram, upload, sync) in [
        ("8 GB/s", "12 GB/s", "120 us"), // a rate where a size is wanted
        ("-1 GiB", "12 GB/s", "120 us"), // negative
        ("8 furlongs", "12 GB/s", "120 us"),
        ("8 GiB", "12", "120 us"),    // a bare rate
        ("8 GiB", "12 GB", "120 us"), // a size where a rate is wanted
        ("8 GiB", "12 GB/s", "120"),  // a bare time
        ("8 GiB", "12 GB/s", "120 GiB"),
    ] {
        let bad = profile(vram, upload, sync);
        assert!(
            !v.is_valid(&bad),
            "vram {vram}, upload {upload}, sync {sync} should fail the schema"
        );
    }
    // Unknown keys are rejected, as the reader's deny_unknown_fields does.
    let mut extra = ok.clone();
    extra["numa"][0]["colour"] = Value::from("blue");
    assert!(!v.is_valid(&extra));
}

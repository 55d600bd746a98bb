//! `residency schema`: the JSON Schemas of the input files, the plan and
//! every `--json` output.

use anyhow::{Context, Result};
use std::path::Path;

/// `residency schema`: every schema written into `dir`.
pub fn write_schemas(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "{}: cannot create the directory; give --out a writable directory",
            dir.display()
        )
    })?;
    for (name, text) in all_schemas() {
        let path = dir.join(name);
        residency_core::error::write_atomic(&path, text.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The schemas of the files users write and the plan (`residency-core`),
/// then of every `--json` output.
fn all_schemas() -> Vec<(&'static str, String)> {
    use residency_core::schema::render;
    use schemars::schema_for;
    let mut all = residency_core::schema::schemas();
    all.extend([
        (
            "simulate-output.schema.json",
            render(schema_for!(residency_sim::job::SimulateReport)),
        ),
        (
            "replay-output.schema.json",
            render(schema_for!(residency_lab::replay::ReplayReport)),
        ),
        (
            "kv-replay-output.schema.json",
            render(schema_for!(residency_lab::kv::replay::KvReplayReport)),
        ),
        (
            "apply-output.schema.json",
            render(schema_for!(residency_runtime::apply::ApplyReport)),
        ),
        (
            "bench-output.schema.json",
            render(schema_for!(residency_lab::bench::BenchReport)),
        ),
        (
            "bench-sweep-output.schema.json",
            render(schema_for!(crate::bench_cmd::sweep::SweepReport)),
        ),
    ]);
    all
}

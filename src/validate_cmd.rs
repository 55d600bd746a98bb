//! `residency validate`: a profile, model, heat, KV groups or plan file
//! checked, its kind detected from its name and first bytes.

use crate::heat_cmd::heat_context;
use crate::inputs::{load_plan, model_from_path, LoadedPlan};
use crate::InputArgs;
use anyhow::{bail, Result};
use residency_core::kv::KvGroupsFile;
use residency_core::profile::HardwareProfile;
use residency_formats::gguf;
use residency_formats::heat;
use std::path::Path;

/// What kind of input a file is, from its extension and first bytes (a
/// checkpoint directory and a GGUF file are models, but for an imatrix).
fn detect_kind(file: &Path) -> &'static str {
    if heat::is_imatrix(file) {
        return "heat";
    }
    if file.is_dir() || gguf::is_gguf(file) {
        return "model";
    }
    let mut head = Vec::new();
    if let Ok(f) = std::fs::File::open(file) {
        use std::io::Read;
        let _ = f.take(4096).read_to_end(&mut head);
    }
    let head = String::from_utf8_lossy(&head);
    let yaml = matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    if head.contains("\"residency-plan\"") || head.contains("format: residency-plan") {
        "plan"
    } else if head.contains("residency-kv-groups") {
        "kv"
    } else if yaml && head.lines().any(|l| l.starts_with("numa:")) {
        "profile"
    } else if yaml && head.lines().any(|l| l.starts_with("moe_layers:")) {
        "model"
    } else {
        "heat"
    }
}

/// `residency validate`: the file read as its kind (given, or detected),
/// and one line on what it holds or what is wrong.
pub fn validate(file: &Path, kind: Option<&str>, args: &InputArgs) -> Result<()> {
    let kind = kind.unwrap_or_else(|| detect_kind(file));
    match kind {
        "profile" => {
            let p = HardwareProfile::from_yaml_file(file)?;
            println!(
                "ok: {} is a valid hardware profile `{}`: {} NUMA node(s), {} GPU(s), {} drive(s)",
                file.display(),
                p.name,
                p.numa.len(),
                p.gpus.len(),
                p.drives.len()
            );
        }
        "model" => {
            let m = model_from_path(file)?;
            println!(
                "ok: {} is a valid model description `{}`: {} MoE layers, {} experts, {} trunk components",
                file.display(),
                m.name(),
                m.moe.len(),
                m.expert_count(),
                m.trunk.len()
            );
        }
        "heat" => {
            let (model, ctx) = heat_context(&args.model, args.partial_heat)?;
            let mut warnings = Vec::new();
            let heat = heat::read_heat(file, args.heat_format, &ctx, &mut warnings)?;
            if let Some(model) = &model {
                heat.total.use_rates(model, file, &mut warnings)?;
            }
            crate::term::notes(&warnings);
            println!(
                "ok: {} is valid {} heat: {} MoE layers, {} categories",
                file.display(),
                heat.format,
                heat.total.counts.len(),
                heat.categories.len()
            );
        }
        "plan" => {
            let LoadedPlan {
                plan,
                inst,
                placement,
                ..
            } = load_plan(file, &args.paths())?;
            let recomputed = inst.evaluate(&placement).token_seconds;
            let reported = plan.objective.token_seconds;
            if (recomputed - reported).abs() > 1e-9 * reported.abs() {
                bail!(
                    "{}: objective.token_seconds: is {reported} but the cost model gives {recomputed} for this placement with these inputs; re-plan, or pass the profile, model and heat it was made with",
                    file.display()
                );
            }
            println!(
                "ok: {} is a feasible plan; its token_seconds {reported} matches the cost model",
                file.display()
            );
        }
        "kv" => {
            let groups = KvGroupsFile::read(file)?.groups;
            let bytes: u64 = groups.iter().map(|g| g.bytes.get()).sum();
            println!(
                "ok: {} holds {} valid KV prefix groups, {} in all",
                file.display(),
                groups.len(),
                residency_core::units::Bytes(bytes)
            );
        }
        other => bail!("--kind {other}: give profile, model, heat, kv or plan"),
    }
    Ok(())
}

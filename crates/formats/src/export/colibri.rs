//! The `coli-place` export: Colibri's qwen36 CUDA tier
//! (docs/formats.md sections 1, 4, 7, 8). `coli_place.env` sets
//! `COLI_CUDA`, `COLI_GPUS`, `COLI_PLACE`, `CUDA_EXPERT_GB` and `HEAT_FILE`;
//! `coli_heat.bin` is a HEAT_FILE whose order makes the warm-start fill
//! (hottest first until each card's allowance is full, expert `e` homed on
//! expert card `e % n`, no duplicates) load exactly the plan's GPU experts.
//! Behaviour taken from `c/qwen36_tier.{h,c}` [I] beyond those sections:
//! `experts=<dev>` pins the expert tier to one card; a card that COLI_PLACE
//! gives `lmhead`, `dnproj`, `dnout` or `attnproj` leaves the expert cards
//! while another card is left (the "R4 role split" of qwen36_tier.h); the
//! allowance is read as GiB; a hand list holds at most 8 items of at most 8
//! split segments; a split counts model layers and a layer past its last
//! segment stays on the CPU.
//!
//! This module owns the export and its env file; `place` owns COLI_PLACE
//! and COLI_GPUS, `warm_start` CUDA_EXPERT_GB, the HEAT_FILE and what
//! Colibri's warm start loads with them.

mod place;
#[cfg(test)]
mod tests;
mod warm_start;

pub use place::{coli_place_string, ColiItem, ColiSegment, ColiTarget, COLI_COMPONENTS};
pub use warm_start::{coli_allowance_bytes, HEAT_STEP};

use super::{create_dir, join, numa_nodes_used, placement, Export};
use crate::heat::{write_heat, Heat, HeatContext, HeatFormat, HeatTable};
use place::ColiList;
use residency_core::cost::{Instance, Place};
use residency_core::error::{write_atomic, PlannerError, Result};
use residency_core::plan::Plan;
use residency_core::units::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use warm_start::{Allowance, WarmStart};

pub const COLI_ENV_FILE: &str = "coli_place.env";
pub const COLI_HEAT_FILE: &str = "coli_heat.bin";

/// Writes `coli_place.env` and `coli_heat.bin` for Colibri's qwen36 CUDA tier.
pub fn coli_place(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let at = Placed {
        inst,
        placement: &placement,
    };
    let heat_path = dir.join(COLI_HEAT_FILE);
    check_one_expert_count(inst, &heat_path)?;
    let mut warnings = Vec::new();
    let list = ColiList::new(&at, &mut warnings);
    list.grammar_warnings(&mut warnings);
    let allowance = Allowance::new(&at, &list);
    let warm = WarmStart::new(&at, &list, &allowance)?;
    warm.warnings(&at, &list, &allowance, &mut warnings);
    memory_warnings(&at, &mut warnings);

    create_dir(dir)?;
    let heat_abs = write_coli_heat(&warm.heat, &heat_path, &mut warnings)?;
    let env = env_lines(plan, &at, &list, &allowance, &warm, &heat_abs);
    let env_path = dir.join(COLI_ENV_FILE);
    write_atomic(&env_path, (env.join("\n") + "\n").as_bytes())?;
    Ok(Export {
        files: vec![env_path, heat_path],
        warnings,
    })
}

/// The plan's placement, as the steps of [`coli_place`] read it.
struct Placed<'a> {
    inst: &'a Instance,
    placement: &'a [usize],
}

impl Placed<'_> {
    fn place(&self, o: usize) -> Place {
        self.inst.places[self.placement[o]]
    }

    /// Where COLI_PLACE puts object `o`: its GPU, else the CPU.
    fn target(&self, o: usize) -> ColiTarget {
        match self.place(o) {
            Place::Gpu(g) => ColiTarget::Dev(g),
            Place::Ram(_) | Place::Disk(_) => ColiTarget::Cpu,
            Place::Recompute => unreachable!("only KV groups are recomputed"),
        }
    }
}

/// A HEAT_FILE holds the same number of experts in every layer: a model
/// with several expert counts is refused.
fn check_one_expert_count(inst: &Instance, heat_path: &Path) -> Result<()> {
    let widths: BTreeSet<usize> = inst.expert_ids.iter().map(Vec::len).collect();
    if widths.len() != 1 {
        return Err(PlannerError::input(
            heat_path,
            "shape",
            format!(
                "the model's MoE layers have {} experts; a HEAT_FILE holds the same number in every layer",
                join(&widths, " or ")
            ),
            "Colibri's qwen36 tier takes models with one expert count per layer; export llama-cpp instead",
        ));
    }
    Ok(())
}

/// RAM and NUMA: the qwen36 tier keeps every expert in RAM, and has no NUMA
/// placement.
fn memory_warnings(at: &Placed, warnings: &mut Vec<String>) {
    let inst = at.inst;
    let on_disk = inst
        .expert_ids
        .iter()
        .flatten()
        .filter(|&&o| matches!(at.place(o), Place::Disk(_)))
        .count();
    let expert_ram: u64 = inst
        .expert_ids
        .iter()
        .flatten()
        .map(|&o| inst.objects[o].ram_bytes)
        .sum();
    let ram_capacity: u64 = inst.resources.ram_capacity_bytes.iter().sum();
    if on_disk > 0 || expert_ram > ram_capacity {
        let fit = if expert_ram > ram_capacity {
            format!(
                ", more than the profile's RAM capacity {} ({ram_capacity} bytes)",
                Bytes(ram_capacity)
            )
        } else {
            String::new()
        };
        warnings.push(format!(
            "RAM: {on_disk} experts are on disk in the plan, but Colibri's qwen36 tier is VRAM-over-RAM (argv `cap` must equal n_experts): every expert stays RAM-resident, {} ({expert_ram} bytes) of experts{fit}",
            Bytes(expert_ram)
        ));
    }
    let numa = numa_nodes_used(inst, at.placement);
    if !numa.is_empty() {
        warnings.push(format!(
            "COLI_PLACE has no NUMA placement: the plan's choices between {} are not expressed",
            join(&numa, ", ")
        ));
    }
}

/// Writes the HEAT_FILE and returns its absolute path, for the env file.
fn write_coli_heat(
    heat: &[Vec<u32>],
    heat_path: &Path,
    warnings: &mut Vec<String>,
) -> Result<PathBuf> {
    let counts = heat
        .iter()
        .map(|row| row.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let heat_table = Heat {
        model: None,
        format: HeatFormat::ColiHeat,
        source_layers: heat.len(),
        total: HeatTable {
            counts,
            tokens: None,
        },
        categories: BTreeMap::new(),
    };
    write_heat(
        &heat_table,
        heat_path,
        HeatFormat::ColiHeat,
        &HeatContext::default(),
        warnings,
    )?;
    Ok(std::fs::canonicalize(heat_path).unwrap_or_else(|_| heat_path.to_path_buf()))
}

/// The lines of `coli_place.env`.
fn env_lines(
    plan: &Plan,
    at: &Placed,
    list: &ColiList,
    allowance: &Allowance,
    warm: &WarmStart,
    heat_abs: &Path,
) -> Vec<String> {
    let mut env = vec![
        format!(
            "# Colibri qwen36 CUDA tier settings for `{}` on `{}`, from {} (residency plan --export coli-place).",
            plan.inputs.model.name, plan.inputs.profile.name, plan.created_by
        ),
        "# Load before starting the engine: set -a; . ./coli_place.env; set +a".into(),
        "# CUDA ordinals are the profile's GPU ids. Start the engine with argv `cap` = n_experts (every".into(),
        "# expert RAM-resident; this file places the VRAM tier) and leave QT_NO_WARMSTART unset.".into(),
        format!("COLI_CUDA={}", u8::from(allowance.tier_on)),
    ];
    if !list.coli_gpus.is_empty() {
        env.push(format!("COLI_GPUS={}", join(&list.coli_gpus, ",")));
    }
    env.push(format!(
        "COLI_PLACE={}",
        env_value(&coli_place_string(&list.items))
    ));
    if let (Some(text), Some(g)) = (&allowance.text, allowance.heaviest) {
        env.extend(allowance_lines(at, list, allowance, warm, g));
        env.push(format!("CUDA_EXPERT_GB={text}"));
    }
    env.push(
        "# HEAT_FILE ranks the plan's GPU experts above all others, each class by heat, so the warm start loads them.".into(),
    );
    env.push(format!(
        "HEAT_FILE={}",
        env_value(&heat_abs.to_string_lossy())
    ));
    env.push(
        "# Colibri overwrites HEAT_FILE with its learned heat at shutdown; to keep this warm start, also set".into(),
    );
    env.push("# QTIER_HEAT_READONLY=1".into());
    env
}

/// A value for an env file: bare when the shell and `--env-file` agree on
/// it, else single-quoted.
fn env_value(value: &str) -> String {
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c));
    if plain && !value.is_empty() {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// The comment lines before CUDA_EXPERT_GB: each card's need, the choice
/// (the need of `heaviest`) and how to check it in Colibri's log.
fn allowance_lines(
    at: &Placed,
    list: &ColiList,
    allowance: &Allowance,
    warm: &WarmStart,
    heaviest: usize,
) -> Vec<String> {
    let (need, charged) = (&allowance.need, &list.charged);
    let per_card = join(
        list.coli_gpus.iter().map(|&c| {
            format!(
                "gpu:{c} {} experts {} + trunk {} = {}",
                allowance.planned[c],
                Bytes(need[c] - charged[c]),
                Bytes(charged[c]),
                Bytes(need[c])
            )
        }),
        "; ",
    );
    let mut env: Vec<String> = vec![
        "# CUDA_EXPERT_GB: one allowance in GiB for every card, for its experts plus the trunk COLI_PLACE puts there.".into(),
    ];
    env.push(format!("# Needs: {per_card}."));
    env.push(format!(
        "# Chosen: the largest need, gpu:{heaviest}, {} bytes, rounded up: its warm start stops at the plan's experts,",
        need[heaviest]
    ));
    env.push(
        "# and a card that needs less fills its spare allowance with the hottest experts homed there.".into(),
    );
    env.push(
        "# Colibri charges an expert its CUDA allocation footprint, which can exceed the model's size:".into(),
    );
    let inst = at.inst;
    let expert_bytes = inst
        .expert_ids
        .iter()
        .flatten()
        .map(|&o| inst.objects[o].gpu_bytes)
        .max()
        .unwrap_or(1)
        .max(1);
    let fits = join(
        warm.cards
            .iter()
            .zip(&warm.budget)
            .map(|(c, b)| format!("~{} experts on dev {c}", b / expert_bytes)),
        ", ",
    );
    env.push(format!(
        "# check that the log lines `[qtier] dev N: budget ... (~K experts)` show {fits}; if lower, raise CUDA_EXPERT_GB by the difference times its MB/expert."
    ));
    env
}

//! Exports of a plan for engines users already run. Each exporter is a pure
//! function of a plan and its instance that writes its files into a
//! directory (atomically) and says, one line per finding, what the engine
//! cannot express and what it will do instead.
//!
//! - `coli-place`: Colibri's qwen36 CUDA tier (`shared/colibri-formats.md`
//!   sections 1, 4, 7, 8). `coli_place.env` sets `COLI_CUDA`, `COLI_GPUS`,
//!   `COLI_PLACE`, `CUDA_EXPERT_GB` and `HEAT_FILE`; `coli_heat.bin` is a
//!   HEAT_FILE whose order makes the warm-start fill (hottest first until each
//!   card's allowance is full, expert `e` homed on expert card `e % n`, no
//!   duplicates) load exactly the plan's GPU experts. Behaviour taken from
//!   `c/qwen36_tier.{h,c}` [I] beyond those sections: `experts=<dev>` pins the
//!   expert tier to one card; a card that COLI_PLACE gives `lmhead`, `dnproj`,
//!   `dnout` or `attnproj` leaves the expert cards while another card is left
//!   (the "R4 role split" of qwen36_tier.h); the allowance is read as GiB; a
//!   hand list holds at most 8 items of at most 8 split segments; a split
//!   counts model layers and a layer past its last segment stays on the CPU.
//! - `llama-cpp`: `--override-tensor` (`-ot <regex>=<buffer>`) rules over GGUF
//!   tensor names. All routed experts of a layer are one tensor per
//!   projection (`blk.N.ffn_gate_exps.weight`, ...), so each MoE layer goes to
//!   the buffer holding the largest share of its use-rate mass; where whole
//!   layers overflow a card, its layers with the least planned mass there
//!   move to their next buffer with room (else the CPU). The warning on lost
//!   per-expert decisions gives the cost model's token time of what
//!   llama.cpp will run beside the plan's.
//!
//! - `ktransformers`: optimize-rule YAML (`--optimize_config_path`): one
//!   `match`/`replace` rule per (device, layers) of routed experts
//!   (`model.layers.N.mlp.experts`, `KTransformersExperts` with
//!   `generate_device` `cuda:G` or `cpu`) and `class: default` rules moving
//!   trunk modules; a layer has one device, chosen as for llama.cpp.
//! - `sglang`: `--init-expert-location` JSON (`physical_to_logical_map`, one
//!   row per layer) and the `--ep-size`/`--ep-num-redundant-experts` it needs.
//! - `vllm`: the EPLB map (`physical_to_logical_map` over MoE layers) and
//!   per-rank expert lists, ranks grouped by the profile's hosts.
//!   Expert-parallel engines hold every expert on some GPU in equal slots
//!   per rank: experts the plan leaves off the GPUs, and the padding
//!   replicas, are the warnings' business.
//!
//! GPU `g` of the profile is CUDA ordinal `g` in every engine (reorder
//! `CUDA_VISIBLE_DEVICES` if the machine numbers its cards otherwise).

use crate::cost::{Instance, Place};
use crate::error::{write_atomic, PlannerError, Result};
use crate::heat::{write_heat, Heat, HeatContext, HeatFormat, HeatTable};
use crate::model::StageKind;
use crate::plan::Plan;
use crate::units::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// What an export wrote and what it could not express.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Export {
    pub files: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

/// An engine we export to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    ColiPlace,
    LlamaCpp,
    Ktransformers,
    Sglang,
    Vllm,
}

impl Engine {
    pub const ALL: [Engine; 5] = [
        Engine::ColiPlace,
        Engine::LlamaCpp,
        Engine::Ktransformers,
        Engine::Sglang,
        Engine::Vllm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Engine::ColiPlace => "coli-place",
            Engine::LlamaCpp => "llama-cpp",
            Engine::Ktransformers => "ktransformers",
            Engine::Sglang => "sglang",
            Engine::Vllm => "vllm",
        }
    }

    pub fn from_name(name: &str) -> Option<Engine> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs one exporter.
pub fn export(engine: Engine, plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    match engine {
        Engine::ColiPlace => coli_place(plan, inst, dir),
        Engine::LlamaCpp => llama_cpp(plan, inst, dir),
        Engine::Ktransformers => ktransformers(plan, inst, dir),
        Engine::Sglang => sglang(plan, inst, dir),
        Engine::Vllm => vllm(plan, inst, dir),
    }
}

pub const COLI_ENV_FILE: &str = "coli_place.env";
pub const COLI_HEAT_FILE: &str = "coli_heat.bin";
pub const LLAMA_OT_FILE: &str = "llama_cpp_override_tensor.txt";
pub const LLAMA_ARGS_FILE: &str = "llama_cpp_args.txt";
pub const KT_RULES_FILE: &str = "ktransformers_optimize_rules.yaml";
pub const SGLANG_FILE: &str = "sglang_expert_location.json";
pub const SGLANG_ARGS_FILE: &str = "sglang_args.txt";
pub const VLLM_FILE: &str = "vllm_expert_placement.json";
pub const VLLM_ARGS_FILE: &str = "vllm_args.txt";

/// The placement the plan encodes, checked against the instance.
fn placement(plan: &Plan, inst: &Instance) -> Result<Vec<usize>> {
    plan.placement(inst, Path::new("plan"))
}

/// Transformer layer of each MoE ordinal, from the stage names `L<layer>.experts`.
fn moe_layers(inst: &Instance) -> Result<Vec<usize>> {
    inst.expert_ids
        .iter()
        .map(|ids| {
            let stage = ids
                .first()
                .map(|&o| &inst.stages[inst.objects[o].stage].name);
            stage
                .and_then(|s| s.strip_prefix('L')?.strip_suffix(".experts")?.parse().ok())
                .ok_or_else(|| {
                    PlannerError::Solver(format!(
                        "experts stage {stage:?} is not named `L<layer>.experts`"
                    ))
                })
        })
        .collect()
}

/// A trunk component's name and its (layer, object) members.
type TrunkGroup = (String, Vec<(Option<usize>, usize)>);

/// Trunk objects grouped by name, in model order.
fn trunk_groups(inst: &Instance) -> Vec<TrunkGroup> {
    let mut groups: Vec<TrunkGroup> = Vec::new();
    for (o, name, layer) in inst.trunk() {
        match groups.iter_mut().find(|(n, _)| n == name) {
            Some((_, members)) => members.push((layer, o)),
            None => groups.push((name.to_string(), vec![(layer, o)])),
        }
    }
    groups
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| PlannerError::io(dir, e))
}

fn join<T: fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    items
        .into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// RAM nodes the placement uses, when it uses more than one.
fn numa_nodes_used(inst: &Instance, placement: &[usize]) -> Vec<Place> {
    let used: BTreeSet<Place> = placement
        .iter()
        .map(|&q| inst.places[q])
        .filter(|p| matches!(p, Place::Ram(_)))
        .collect();
    if used.len() > 1 {
        used.into_iter().collect()
    } else {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------
// Colibri: COLI_PLACE + HEAT_FILE
// ---------------------------------------------------------------------------

/// Components Colibri's qwen36 tier knows (colibri-formats.md 7).
pub const COLI_COMPONENTS: [&str; 6] = [
    "experts", "lmhead", "dnproj", "dnout", "attnout", "attnproj",
];
/// Components whose card leaves the expert cards (qwen36_tier.h "R4 role split").
const COLI_ROLE_SPLIT: [&str; 4] = ["lmhead", "dnproj", "dnout", "attnproj"];
/// Items of a COLI_PLACE list and segments of one split that Colibri reads.
const COLI_MAX_ITEMS: usize = 8;
const COLI_MAX_SEGMENTS: usize = 8;
/// Longest component name and spec Colibri keeps (16- and 64-byte buffers).
const COLI_MAX_NAME: usize = 15;
const COLI_MAX_SPEC: usize = 63;
/// HEAT_FILE values are multiples of this: their order survives `>> 4`
/// (Colibri ages loaded heat by `>> 1`, or a decay or shift of a few bits).
pub const HEAT_STEP: u32 = 16;
/// Bytes added to the largest card's need before rounding CUDA_EXPERT_GB up,
/// so that the engine's `atof(x) * 2^30` truncation never lands one byte short.
const ALLOWANCE_SLACK: u64 = 1024;
const GIB: u128 = 1 << 30;

/// Where COLI_PLACE puts a component: `cpu` or a CUDA ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ColiTarget {
    Dev(usize),
    Cpu,
}

impl fmt::Display for ColiTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColiTarget::Dev(d) => write!(f, "{d}"),
            ColiTarget::Cpu => f.write_str("cpu"),
        }
    }
}

/// One segment of a split: `layers` model layers on `target`; `None` is
/// every layer (a plain `component=target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColiSegment {
    pub target: ColiTarget,
    pub layers: Option<usize>,
}

/// One `component=spec` item of COLI_PLACE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColiItem {
    pub name: String,
    pub segments: Vec<ColiSegment>,
}

impl ColiItem {
    /// The spec after `=`: `0`, `cpu`, or `0:15+1:15`.
    pub fn spec(&self) -> String {
        match self.segments.as_slice() {
            [ColiSegment {
                target,
                layers: None,
            }] => target.to_string(),
            segments => join(
                segments
                    .iter()
                    .map(|s| format!("{}:{}", s.target, s.layers.unwrap_or(0))),
                "+",
            ),
        }
    }

    /// Colibri's lookup: the segment whose run of model layers holds
    /// `layer`; past the last segment, the CPU.
    pub fn target_of(&self, layer: usize) -> ColiTarget {
        let mut seen = 0;
        for s in &self.segments {
            match s.layers {
                None => return s.target,
                Some(n) if layer < seen + n => return s.target,
                Some(n) => seen += n,
            }
        }
        ColiTarget::Cpu
    }

    /// The item for per-layer targets (whole-model components use layer 0):
    /// one target when all agree, else a split in model layers whose first
    /// segment starts at layer 0 and whose gaps (layers without the
    /// component) join the segment before them. A trailing CPU run is left
    /// out (past the last segment is the CPU); a leading or inner one is
    /// written `cpu:n`, which Colibri's split parser accepts.
    pub fn from_layers(name: &str, per_layer: &[(usize, ColiTarget)]) -> ColiItem {
        let mut layers = per_layer.to_vec();
        layers.sort();
        let first = layers.first().map_or(ColiTarget::Cpu, |&(_, t)| t);
        if layers.iter().all(|&(_, t)| t == first) {
            return ColiItem {
                name: name.into(),
                segments: vec![ColiSegment {
                    target: first,
                    layers: None,
                }],
            };
        }
        // Runs of one target: (target, first layer of the run, last layer).
        let mut runs: Vec<(ColiTarget, usize, usize)> = Vec::new();
        for &(layer, target) in &layers {
            match runs.last_mut() {
                Some(run) if run.0 == target => run.2 = layer,
                Some(_) => runs.push((target, layer, layer)),
                None => runs.push((target, 0, layer)),
            }
        }
        if runs.last().is_some_and(|r| r.0 == ColiTarget::Cpu) {
            runs.pop();
        }
        let segments = (0..runs.len())
            .map(|i| {
                let end = runs.get(i + 1).map_or(runs[i].2 + 1, |next| next.1);
                ColiSegment {
                    target: runs[i].0,
                    layers: Some(end - runs[i].1),
                }
            })
            .collect();
        ColiItem {
            name: name.into(),
            segments,
        }
    }
}

/// The COLI_PLACE value of a list of items.
pub fn coli_place_string(items: &[ColiItem]) -> String {
    join(
        items.iter().map(|i| format!("{}={}", i.name, i.spec())),
        ",",
    )
}

/// Colibri's expert cards for a COLI_GPUS list and COLI_PLACE items
/// (`qt_init` of qwen36_tier.c): `experts=<dev>` pins one listed card,
/// `experts=cpu` turns the tier off (None); otherwise cards holding a
/// role-split component leave the list while another card is left.
fn coli_expert_cards(gpus: &[usize], items: &[ColiItem], layers: usize) -> Option<Vec<usize>> {
    if let Some(experts) = items.iter().find(|i| i.name == "experts") {
        return match experts.target_of(0) {
            ColiTarget::Dev(d) if gpus.contains(&d) => Some(vec![d]),
            ColiTarget::Dev(_) => Some(gpus.to_vec()),
            ColiTarget::Cpu => None,
        };
    }
    let reserved: BTreeSet<usize> = items
        .iter()
        .filter(|i| COLI_ROLE_SPLIT.contains(&i.name.as_str()))
        .flat_map(|i| (0..layers.max(1)).map(move |l| i.target_of(l)))
        .filter_map(|t| match t {
            ColiTarget::Dev(d) => Some(d),
            ColiTarget::Cpu => None,
        })
        .collect();
    let kept: Vec<usize> = gpus
        .iter()
        .copied()
        .filter(|d| !reserved.contains(d))
        .collect();
    if !kept.is_empty() && kept.len() < gpus.len() {
        Some(kept)
    } else {
        Some(gpus.to_vec())
    }
}

/// `bytes` as CUDA_EXPERT_GB text: GiB with six decimals, rounded up.
fn gib_text(bytes: u64) -> String {
    let micro = (bytes as u128 * 1_000_000).div_ceil(GIB);
    format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

/// The bytes Colibri makes of a CUDA_EXPERT_GB text: `atof(x) * 2^30`, truncated.
pub fn coli_allowance_bytes(text: &str) -> u64 {
    (text.parse::<f64>().unwrap_or(0.0) * 1_073_741_824.0) as u64
}

/// HEAT_FILE values: every expert the plan puts on a GPU above every other,
/// each class in the order of its use rates (ties: the lower expert slot
/// first), as multiples of [`HEAT_STEP`] so the order survives aging.
/// `resident[o]` says whether object `o` is on a GPU.
fn coli_heat_values(inst: &Instance, resident: &[bool]) -> Result<Vec<Vec<u32>>> {
    let mut slots: Vec<(bool, f64, usize, usize, usize)> = Vec::new();
    for (l, ids) in inst.expert_ids.iter().enumerate() {
        for (e, &o) in ids.iter().enumerate() {
            slots.push((resident[o], inst.objects[o].use_rate, slots.len(), l, e));
        }
    }
    // Ascending: coldest first; among equal rates the higher slot is colder.
    slots.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(b.2.cmp(&a.2)));
    let mut values: Vec<Vec<u32>> = inst
        .expert_ids
        .iter()
        .map(|ids| vec![0; ids.len()])
        .collect();
    for (rank, &(_, _, _, l, e)) in slots.iter().enumerate() {
        values[l][e] = u32::try_from(rank + 1)
            .ok()
            .and_then(|r| r.checked_mul(HEAT_STEP))
            .ok_or_else(|| {
                PlannerError::Infeasible(format!(
                    "{} experts are too many for HEAT_FILE's u32 counters at a step of {HEAT_STEP}",
                    slots.len()
                ))
            })?;
    }
    Ok(values)
}

/// Colibri's warm start (`qt_plan_fill`): slots in descending heat; each
/// goes to its home card `cards[e % n]` while that card's budget holds it;
/// stops when every card is full. Returns the card of each slot, by
/// `(l, e)`.
fn coli_fill(
    inst: &Instance,
    heat: &[Vec<u32>],
    cards: &[usize],
    budget: &[u64],
) -> Vec<Vec<Option<usize>>> {
    let mut loaded: Vec<Vec<Option<usize>>> =
        heat.iter().map(|row| vec![None; row.len()]).collect();
    if cards.is_empty() {
        return loaded;
    }
    let mut order: Vec<(u32, usize, usize, usize)> = Vec::new();
    for (l, row) in heat.iter().enumerate() {
        for (e, &h) in row.iter().enumerate() {
            order.push((h, order.len(), l, e));
        }
    }
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut used = vec![0u64; cards.len()];
    let smallest = inst
        .expert_ids
        .iter()
        .flatten()
        .map(|&o| inst.objects[o].gpu_bytes)
        .min()
        .unwrap_or(0);
    for (_, _, l, e) in order {
        if (0..cards.len()).all(|i| used[i] + smallest > budget[i]) {
            break;
        }
        let home = e % cards.len();
        let bytes = inst.objects[inst.expert_ids[l][e]].gpu_bytes;
        if used[home] + bytes <= budget[home] {
            used[home] += bytes;
            loaded[l][e] = Some(cards[home]);
        }
    }
    loaded
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

fn valid_coli_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= COLI_MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes `coli_place.env` and `coli_heat.bin` for Colibri's qwen36 CUDA tier.
pub fn coli_place(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let place = |o: usize| inst.places[placement[o]];
    let target = |o: usize| match place(o) {
        Place::Gpu(g) => ColiTarget::Dev(g),
        Place::Ram(_) | Place::Disk(_) => ColiTarget::Cpu,
        Place::Recompute => unreachable!("only KV groups are recomputed"),
    };
    let gpus = inst.resources.gpus();
    let heat_path = dir.join(COLI_HEAT_FILE);
    let widths: BTreeSet<usize> = inst.expert_ids.iter().map(Vec::len).collect();
    if widths.len() != 1 {
        return Err(PlannerError::input(
            &heat_path,
            "shape",
            format!(
                "the model's MoE layers have {} experts; a HEAT_FILE holds the same number in every layer",
                join(&widths, " or ")
            ),
            "Colibri's qwen36 tier takes models with one expert count per layer; export llama-cpp instead",
        ));
    }
    let mut warnings = Vec::new();

    // Trunk: Colibri's names (lm_head -> lmhead), others passed through.
    let mut known = Vec::new();
    let mut passed = Vec::new();
    let mut charged = vec![0u64; gpus];
    for (name, members) in trunk_groups(inst) {
        let per_layer: Vec<(usize, ColiTarget)> = members
            .iter()
            .map(|&(layer, o)| (layer.unwrap_or(0), target(o)))
            .collect();
        let coli_name = if name == "lm_head" {
            Some("lmhead")
        } else {
            COLI_COMPONENTS[1..].iter().copied().find(|&c| c == name)
        };
        match coli_name {
            Some(coli_name) => {
                for &(_, o) in &members {
                    if let Place::Gpu(g) = place(o) {
                        charged[g] += inst.objects[o].gpu_bytes;
                    }
                }
                known.push(ColiItem::from_layers(coli_name, &per_layer));
            }
            None if valid_coli_name(&name) => passed.push(ColiItem::from_layers(&name, &per_layer)),
            None => warnings.push(format!(
                "COLI_PLACE: trunk component `{name}` is left out: a component name is 1 to {COLI_MAX_NAME} letters, digits or `_`; Colibri keeps it at its default, the CPU"
            )),
        }
    }
    if !passed.is_empty() {
        warnings.push(format!(
            "COLI_PLACE: Colibri's qwen36 tier knows the components {}; {} passed through as written: Colibri ignores a name it does not know and keeps that part at its default, the CPU (name the part after a known component in the model description if it is one)",
            COLI_COMPONENTS.join(", "),
            join(passed.iter().map(|i| format!("`{}`", i.name)), ", ")
        ));
    }

    // Experts: one card pins them (`experts=<dev>`), none turns the tier off
    // unless a trunk piece needs a card, several follow COLI_GPUS.
    let expert_cards: BTreeSet<usize> = inst
        .expert_ids
        .iter()
        .flatten()
        .filter_map(|&o| match place(o) {
            Place::Gpu(g) => Some(g),
            _ => None,
        })
        .collect();
    let trunk_cards: BTreeSet<usize> = known
        .iter()
        .flat_map(|i| i.segments.iter())
        .filter_map(|s| match s.target {
            ColiTarget::Dev(d) => Some(d),
            ColiTarget::Cpu => None,
        })
        .collect();
    let experts_item = match (expert_cards.len(), trunk_cards.is_empty()) {
        (0, true) => Some(ColiTarget::Cpu),
        (1, _) => expert_cards.first().map(|&g| ColiTarget::Dev(g)),
        _ => None,
    };
    let mut items: Vec<ColiItem> = experts_item
        .map(|t| ColiItem {
            name: "experts".into(),
            segments: vec![ColiSegment {
                target: t,
                layers: None,
            }],
        })
        .into_iter()
        .collect();
    items.extend(known);
    items.extend(passed);
    let coli_gpus: Vec<usize> = expert_cards
        .iter()
        .chain(trunk_cards.difference(&expert_cards))
        .copied()
        .collect();
    if items.len() > COLI_MAX_ITEMS {
        warnings.push(format!(
            "COLI_PLACE has {} items; Colibri reads the first {COLI_MAX_ITEMS} and keeps {} at the default (the CPU)",
            items.len(),
            join(items[COLI_MAX_ITEMS..].iter().map(|i| format!("`{}`", i.name)), ", ")
        ));
    }
    for item in &items {
        let spec = item.spec();
        if item.segments.len() > COLI_MAX_SEGMENTS || spec.len() > COLI_MAX_SPEC {
            let kept: Vec<ColiSegment> = item
                .segments
                .iter()
                .copied()
                .take(COLI_MAX_SEGMENTS)
                .collect();
            let covered: usize = kept.iter().filter_map(|s| s.layers).sum();
            warnings.push(format!(
                "COLI_PLACE `{}` changes place {} times over the layers, which is not expressible as a split Colibri reads ({COLI_MAX_SEGMENTS} segments, {COLI_MAX_SPEC} characters): it keeps at most the first {} segments, and layers from {covered} on may stay on the CPU",
                item.name,
                item.segments.len() - 1,
                kept.len()
            ));
        }
    }

    // CUDA_EXPERT_GB: one allowance for every card, experts plus charged trunk.
    let mut need = charged.clone();
    let mut planned = vec![0usize; gpus];
    for &o in inst.expert_ids.iter().flatten() {
        if let Place::Gpu(g) = place(o) {
            need[g] += inst.objects[o].gpu_bytes;
            planned[g] += 1;
        }
    }
    let tier_on = experts_item != Some(ColiTarget::Cpu) && !coli_gpus.is_empty();
    let heaviest = coli_gpus
        .iter()
        .copied()
        .max_by_key(|&g| (need[g], usize::MAX - g));
    let allowance_text = match heaviest {
        Some(g) if tier_on => Some(gib_text(need[g] + ALLOWANCE_SLACK)),
        _ => None,
    };
    let allowance = allowance_text.as_deref().map_or(0, coli_allowance_bytes);

    // HEAT_FILE and what Colibri's warm start will load with it.
    let resident: Vec<bool> = (0..inst.objects.len())
        .map(|o| matches!(place(o), Place::Gpu(_)))
        .collect();
    let heat = coli_heat_values(inst, &resident)?;
    let dense_layers = inst
        .stages
        .iter()
        .filter(|s| s.kind == StageKind::Dense)
        .count();
    let cards = if tier_on {
        coli_expert_cards(&coli_gpus, &items, dense_layers).unwrap_or_default()
    } else {
        Vec::new()
    };
    let budget: Vec<u64> = cards
        .iter()
        .map(|&d| allowance.saturating_sub(charged[d]))
        .collect();
    let loaded = coli_fill(inst, &heat, &cards, &budget);
    let (mut off_home, mut same, mut moved, mut in_ram, mut extra) = (0, 0, 0, 0, 0);
    let mut total_planned = 0;
    for (l, ids) in inst.expert_ids.iter().enumerate() {
        for (e, &o) in ids.iter().enumerate() {
            let got = loaded[l][e];
            match place(o) {
                Place::Gpu(g) => {
                    total_planned += 1;
                    if cards.is_empty() || cards[e % cards.len()] != g {
                        off_home += 1;
                    }
                    match got {
                        Some(c) if c == g => same += 1,
                        Some(_) => moved += 1,
                        None => in_ram += 1,
                    }
                }
                _ => extra += usize::from(got.is_some()),
            }
        }
    }
    if off_home > 0 {
        let dropped: Vec<usize> = expert_cards
            .iter()
            .copied()
            .filter(|g| !cards.contains(g))
            .collect();
        let why = if dropped.is_empty() {
            String::new()
        } else {
            format!(
                "; Colibri takes card(s) {} out of expert placement because COLI_PLACE gives them {} and another card is left",
                join(&dropped, ", "),
                COLI_ROLE_SPLIT.join("/")
            )
        };
        let homes = match cards.as_slice() {
            [card] => format!("puts every expert on card {card}"),
            _ => format!(
                "gives expert e the home card [{}][e % {}]",
                join(&cards, ", "),
                cards.len()
            ),
        };
        warnings.push(format!(
            "COLI_GPUS: Colibri {homes} and cannot choose a card per expert: {off_home} of the plan's {total_planned} GPU experts are planned on another card than their home{why}"
        ));
    }
    if tier_on && (same < total_planned || extra > 0) {
        let why = if extra > 0 {
            " where a card's allowance has room left (CUDA_EXPERT_GB is one value for every card)"
        } else {
            ""
        };
        warnings.push(format!(
            "warm start: Colibri will load {same} of the plan's {total_planned} GPU experts on the planned card, {moved} on another card, leave {in_ram} in RAM, and add {extra} experts the plan keeps off the GPU{why}"
        ));
    }

    // RAM: the qwen36 tier keeps every expert in RAM.
    let on_disk = inst
        .expert_ids
        .iter()
        .flatten()
        .filter(|&&o| matches!(place(o), Place::Disk(_)))
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
    let numa = numa_nodes_used(inst, &placement);
    if !numa.is_empty() {
        warnings.push(format!(
            "COLI_PLACE has no NUMA placement: the plan's choices between {} are not expressed",
            join(&numa, ", ")
        ));
    }

    // Files.
    create_dir(dir)?;
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
        &heat_path,
        HeatFormat::ColiHeat,
        &HeatContext::default(),
        &mut warnings,
    )?;
    let heat_abs = std::fs::canonicalize(&heat_path).unwrap_or_else(|_| heat_path.clone());

    let mut env = vec![
        format!(
            "# Colibri qwen36 CUDA tier settings for `{}` on `{}`, from {} (residency plan --export coli-place).",
            plan.inputs.model.name, plan.inputs.profile.name, plan.created_by
        ),
        "# Load before starting the engine: set -a; . ./coli_place.env; set +a".into(),
        "# CUDA ordinals are the profile's GPU ids. Start the engine with argv `cap` = n_experts (every".into(),
        "# expert RAM-resident; this file places the VRAM tier) and leave QT_NO_WARMSTART unset.".into(),
        format!("COLI_CUDA={}", u8::from(tier_on)),
    ];
    if !coli_gpus.is_empty() {
        env.push(format!("COLI_GPUS={}", join(&coli_gpus, ",")));
    }
    env.push(format!(
        "COLI_PLACE={}",
        env_value(&coli_place_string(&items))
    ));
    if let (Some(text), Some(g)) = (&allowance_text, heaviest) {
        let per_card = join(
            coli_gpus.iter().map(|&c| {
                format!(
                    "gpu:{c} {} experts {} + trunk {} = {}",
                    planned[c],
                    Bytes(need[c] - charged[c]),
                    Bytes(charged[c]),
                    Bytes(need[c])
                )
            }),
            "; ",
        );
        env.push(
            "# CUDA_EXPERT_GB: one allowance in GiB for every card, for its experts plus the trunk COLI_PLACE puts there.".into(),
        );
        env.push(format!("# Needs: {per_card}."));
        env.push(format!(
            "# Chosen: the largest need, gpu:{g}, {} bytes, rounded up: its warm start stops at the plan's experts,",
            need[g]
        ));
        env.push(
            "# and a card that needs less fills its spare allowance with the hottest experts homed there.".into(),
        );
        env.push(
            "# Colibri charges an expert its CUDA allocation footprint, which can exceed the model's size:".into(),
        );
        let expert_bytes = inst
            .expert_ids
            .iter()
            .flatten()
            .map(|&o| inst.objects[o].gpu_bytes)
            .max()
            .unwrap_or(1)
            .max(1);
        let fits = join(
            cards
                .iter()
                .zip(&budget)
                .map(|(c, b)| format!("~{} experts on dev {c}", b / expert_bytes)),
            ", ",
        );
        env.push(format!(
            "# check that the log lines `[qtier] dev N: budget ... (~K experts)` show {fits}; if lower, raise CUDA_EXPERT_GB by the difference times its MB/expert."
        ));
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
    let env_path = dir.join(COLI_ENV_FILE);
    write_atomic(&env_path, (env.join("\n") + "\n").as_bytes())?;
    Ok(Export {
        files: vec![env_path, heat_path],
        warnings,
    })
}

// ---------------------------------------------------------------------------
// llama.cpp: --override-tensor
// ---------------------------------------------------------------------------

/// A llama.cpp buffer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Buffer {
    Cuda(usize),
    Cpu,
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffer::Cuda(g) => write!(f, "CUDA{g}"),
            Buffer::Cpu => f.write_str("CPU"),
        }
    }
}

impl Buffer {
    /// GPUs become `CUDA<g>`; RAM and disk the CPU buffer (llama.cpp mmaps the GGUF).
    fn of(place: Place) -> Buffer {
        match place {
            Place::Gpu(g) => Buffer::Cuda(g),
            Place::Ram(_) | Place::Disk(_) => Buffer::Cpu,
            Place::Recompute => unreachable!("only KV groups are recomputed"),
        }
    }
}

/// A family of GGUF tensors one rule moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Tensors {
    RoutedExperts,
    Attention,
    DenseFfn,
    SharedExperts,
    Output,
}

/// Trunk names of our model descriptions with a GGUF tensor family.
pub const LLAMA_TRUNK_NAMES: [&str; 4] = ["attn", "dense_ffn", "shared_expert", "lm_head"];

impl Tensors {
    fn for_trunk(name: &str) -> Option<Tensors> {
        match name {
            "attn" => Some(Tensors::Attention),
            "dense_ffn" => Some(Tensors::DenseFfn),
            "shared_expert" => Some(Tensors::SharedExperts),
            "lm_head" => Some(Tensors::Output),
            _ => None,
        }
    }

    /// The regex (llama.cpp `std::regex_search`, anchored at the start; no
    /// `,` or `=`, which separate rules and buffers; no shell glob characters).
    fn pattern(self, layers: &BTreeSet<usize>) -> String {
        let alt = join(layers, "|");
        match self {
            Tensors::RoutedExperts => {
                format!(r"^blk\.({alt})\.ffn_(gate|up|down|gate_up)_exps\.")
            }
            Tensors::Attention => format!(r"^blk\.({alt})\.attn_"),
            Tensors::DenseFfn => format!(r"^blk\.({alt})\.ffn_(gate|up|down)\."),
            Tensors::SharedExperts => format!(r"^blk\.({alt})\.ffn_(gate|up|down)_shexp\."),
            Tensors::Output => r"^output\.".into(),
        }
    }
}

/// The rules of a placement, as `(regex, buffer)` in output order.
fn llama_rules(rules: &BTreeMap<(Tensors, Buffer), BTreeSet<usize>>) -> Vec<(String, Buffer)> {
    rules
        .iter()
        .map(|(&(t, b), layers)| (t.pattern(layers), b))
        .collect()
}

/// The placement llama.cpp runs with these rules, for the cost model:
/// routed experts on their layer's buffer (an expert the plan keeps in RAM
/// or on disk stays there when its layer is on the CPU; one the plan puts on
/// a GPU goes to the first RAM node), trunk as planned.
fn llama_placement(inst: &Instance, placement: &[usize], chosen: &[Buffer]) -> Vec<usize> {
    let mut out = placement.to_vec();
    let first_ram = inst.places.iter().position(|p| matches!(p, Place::Ram(_)));
    for (ids, &buffer) in inst.expert_ids.iter().zip(chosen) {
        for &o in ids {
            let planned = inst.places[placement[o]];
            out[o] = match (buffer, planned) {
                (Buffer::Cuda(g), _) => inst.place_index(Place::Gpu(g)),
                (Buffer::Cpu, Place::Gpu(_)) => first_ram.unwrap_or(placement[o]),
                (Buffer::Cpu, _) => placement[o],
            };
        }
    }
    out
}

/// One buffer per MoE layer, for engines that place a layer's routed
/// experts as one module or tensor (llama.cpp, ktransformers): the buffer
/// with the most of the layer's use-rate mass in the plan (then the most
/// experts, then the lower buffer). Where whole layers then overflow a card
/// beside `trunk_gpu`, the layers with the least of the plan's mass on that
/// card go to their next buffer by mass with room, else the CPU. Returns the
/// buffers and the warnings, the lost per-expert decisions priced with the
/// cost model; `layers_of` gives each MoE ordinal's transformer layer and
/// `layout` says why the engine cannot hold per-expert decisions.
fn layer_buffers(
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    layers_of: &[usize],
    trunk_gpu: &[u64],
    layout: &str,
) -> (Vec<Buffer>, Vec<String>) {
    let place = |o: usize| inst.places[placement[o]];
    let gpus = inst.resources.gpus();
    let mut warnings = Vec::new();
    let shares: Vec<BTreeMap<Buffer, (f64, usize)>> = inst
        .expert_ids
        .iter()
        .map(|ids| {
            let mut share: BTreeMap<Buffer, (f64, usize)> = BTreeMap::new();
            for &o in ids {
                let entry = share.entry(Buffer::of(place(o))).or_default();
                entry.0 += inst.objects[o].use_rate;
                entry.1 += 1;
            }
            share
        })
        .collect();
    let mut chosen: Vec<Buffer> = shares
        .iter()
        .map(|share| {
            share
                .iter()
                .max_by(|a, b| {
                    a.1 .0
                        .total_cmp(&b.1 .0)
                        .then(a.1 .1.cmp(&b.1 .1))
                        .then(b.0.cmp(a.0))
                })
                .map_or(Buffer::Cpu, |(&b, _)| b)
        })
        .collect();
    let layer_bytes: Vec<u64> = inst
        .expert_ids
        .iter()
        .map(|ids| ids.iter().map(|&o| inst.objects[o].gpu_bytes).sum())
        .collect();
    let capacity = &inst.resources.gpu_capacity_bytes;
    let mut load = trunk_gpu.to_vec();
    for (l, &b) in chosen.iter().enumerate() {
        if let Buffer::Cuda(g) = b {
            load[g] += layer_bytes[l];
        }
    }
    for g in 0..gpus {
        let whole = load[g];
        let mut on_card: Vec<usize> = (0..chosen.len())
            .filter(|&l| chosen[l] == Buffer::Cuda(g))
            .collect();
        // Least planned mass on this card last, so it is popped first.
        let planned_mass = |l: usize| shares[l].get(&Buffer::Cuda(g)).map_or(0.0, |s| s.0);
        on_card.sort_by(|&a, &b| planned_mass(b).total_cmp(&planned_mass(a)).then(a.cmp(&b)));
        let mut demoted: BTreeMap<Buffer, BTreeSet<usize>> = BTreeMap::new();
        while load[g] > capacity[g] {
            let Some(l) = on_card.pop() else { break };
            // The layer's next buffer by planned mass that has room, else the CPU.
            let mut next: Vec<(&Buffer, &(f64, usize))> = shares[l]
                .iter()
                .filter(|(b, _)| match b {
                    Buffer::Cuda(h) => *h != g && load[*h] + layer_bytes[l] <= capacity[*h],
                    Buffer::Cpu => true,
                })
                .collect();
            next.sort_by(|a, b| {
                b.1 .0
                    .total_cmp(&a.1 .0)
                    .then(b.1 .1.cmp(&a.1 .1))
                    .then(a.0.cmp(b.0))
            });
            let to = next.first().map_or(Buffer::Cpu, |(&b, _)| b);
            chosen[l] = to;
            load[g] -= layer_bytes[l];
            if let Buffer::Cuda(h) = to {
                load[h] += layer_bytes[l];
            }
            demoted.entry(to).or_default().insert(layers_of[l]);
        }
        if !demoted.is_empty() {
            warnings.push(format!(
                "CUDA{g} cannot hold the whole layers of its majority: {} ({whole} bytes) with its trunk, more than gpu:{g}'s capacity {} ({capacity} bytes); the routed experts of the layers with the least of the plan's gpu:{g} mass go to the next buffer of their mass with room instead: {}",
                Bytes(whole),
                Bytes(capacity[g]),
                join(
                    demoted
                        .iter()
                        .map(|(b, layers)| format!("layer(s) {} to {b}", join(layers, ", "))),
                    "; "
                ),
                capacity = capacity[g]
            ));
        }
        if load[g] > capacity[g] {
            warnings.push(format!(
                "CUDA{g} gets {} ({} bytes), more than gpu:{g}'s capacity {} ({} bytes): expect an out-of-memory error at load",
                Bytes(load[g]),
                load[g],
                Bytes(capacity[g]),
                capacity[g]
            ));
        }
    }

    let (mut mixed, mut moved, mut moved_mass, mut total_mass) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut moves: BTreeMap<(Place, Buffer), (usize, f64)> = BTreeMap::new();
    for (l, ids) in inst.expert_ids.iter().enumerate() {
        if shares[l].len() > 1 {
            mixed += 1;
        }
        for &o in ids {
            let p = inst.objects[o].use_rate;
            total_mass += p;
            if Buffer::of(place(o)) != chosen[l] {
                moved += 1;
                moved_mass += p;
                let m = moves.entry((place(o), chosen[l])).or_default();
                m.0 += 1;
                m.1 += p;
            }
        }
    }
    if moved > 0 {
        let exported = inst
            .evaluate(&llama_placement(inst, placement, &chosen))
            .token_seconds;
        let percent = if total_mass > 0.0 {
            100.0 * moved_mass / total_mass
        } else {
            0.0
        };
        warnings.push(format!(
            "{layout}, so a layer has one buffer: {mixed} of {} MoE layers mix places in the plan, and {moved} experts whose per-expert decision cannot be expressed move (use-rate mass {moved_mass:.3} of {total_mass:.3} per token, {percent:.1}%; the cost model gives {:.3} ms per token as exported, the plan {:.3} ms): {}",
            inst.expert_ids.len(),
            exported * 1e3,
            plan.objective.token_seconds * 1e3,
            join(
                moves
                    .iter()
                    .map(|((from, to), (n, mass))| format!("{n} {from} -> {to} (mass {mass:.3})")),
                ", "
            )
        ));
    }
    (chosen, warnings)
}

/// Writes `llama_cpp_override_tensor.txt` (one `-ot REGEX=BUFFER` line per
/// rule) and `llama_cpp_args.txt` (one command-line fragment).
///
/// Each MoE layer's routed experts go to the buffer with the most of the
/// layer's use-rate mass in the plan (then the most experts, then the lower
/// buffer). Where whole layers then overflow a card's capacity, the layers
/// with the least of the plan's mass on that card go to the CPU until the
/// card fits. Trunk components go where the plan puts them.
pub fn llama_cpp(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let place = |o: usize| inst.places[placement[o]];
    let layers_of = moe_layers(inst)?;
    let gpus = inst.resources.gpus();
    let mut warnings = Vec::new();
    let mut rules: BTreeMap<(Tensors, Buffer), BTreeSet<usize>> = BTreeMap::new();

    // Trunk.
    let mut trunk_gpu = vec![0u64; gpus];
    let mut unknown: Vec<String> = Vec::new();
    for (o, name, layer) in inst.trunk() {
        let buffer = Buffer::of(place(o));
        match (Tensors::for_trunk(name), layer) {
            (Some(Tensors::Output), _) => {
                rules.entry((Tensors::Output, buffer)).or_default();
            }
            (Some(t), Some(layer)) => {
                rules.entry((t, buffer)).or_default().insert(layer);
            }
            _ => {
                if !unknown.iter().any(|u| u == name) {
                    unknown.push(name.to_string());
                }
                continue;
            }
        }
        if let Buffer::Cuda(g) = buffer {
            trunk_gpu[g] += inst.objects[o].gpu_bytes;
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!(
            "llama.cpp: no GGUF tensor name is known for trunk component(s) {} (known: {}); no rule is written, so llama.cpp places them by -ngl",
            join(unknown.iter().map(|n| format!("`{n}`")), ", "),
            LLAMA_TRUNK_NAMES.join(", ")
        ));
    }

    let (chosen, buffer_warnings) = layer_buffers(
        plan,
        inst,
        &placement,
        &layers_of,
        &trunk_gpu,
        "llama.cpp holds all routed experts of a layer in one tensor per projection (blk.N.ffn_*_exps)",
    );
    warnings.extend(buffer_warnings);
    for (l, &b) in chosen.iter().enumerate() {
        rules
            .entry((Tensors::RoutedExperts, b))
            .or_default()
            .insert(layers_of[l]);
    }

    let on_disk = inst
        .expert_ids
        .iter()
        .flatten()
        .filter(|&&o| matches!(place(o), Place::Disk(_)))
        .count();
    if on_disk > 0 {
        warnings.push(format!(
            "llama.cpp has no disk tier: the {on_disk} experts the plan streams from disk go with their layer (CPU unless the layer is on a GPU); a CPU buffer maps the GGUF (mmap), so the OS reads them from the drive on first use and keeps what the page cache holds (--no-mmap would load them into RAM)"
        ));
    }
    let numa = numa_nodes_used(inst, &placement);
    if !numa.is_empty() {
        warnings.push(format!(
            "llama.cpp has one CPU buffer: the plan's choices between {} are not expressed (--numa distribute spreads pages over the nodes instead)",
            join(&numa, ", ")
        ));
    }

    let rules = llama_rules(&rules);
    let lines: Vec<String> = rules.iter().map(|(r, b)| format!("-ot {r}={b}")).collect();
    let any_gpu = rules.iter().any(|(_, b)| matches!(b, Buffer::Cuda(_)));
    let fragment = format!(
        "-ngl {} -ot '{}'",
        if any_gpu { 999 } else { 0 },
        join(rules.iter().map(|(r, b)| format!("{r}={b}")), ",")
    );
    create_dir(dir)?;
    let ot_path = dir.join(LLAMA_OT_FILE);
    let args_path = dir.join(LLAMA_ARGS_FILE);
    write_atomic(&ot_path, (lines.join("\n") + "\n").as_bytes())?;
    write_atomic(&args_path, (fragment + "\n").as_bytes())?;
    Ok(Export {
        files: vec![ot_path, args_path],
        warnings,
    })
}

// ---------------------------------------------------------------------------
// ktransformers: optimize-rule YAML
// ---------------------------------------------------------------------------

/// One rule of a ktransformers optimize-rule file: modules whose name
/// matches `match.name` (Python `re.match`) are replaced by `replace`; the
/// first matching rule wins, so specific rules come first.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtRule {
    #[serde(rename = "match")]
    pub matches: KtMatch,
    pub replace: KtReplace,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtMatch {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KtReplace {
    pub class: String,
    pub kwargs: BTreeMap<String, String>,
}

/// The ktransformers experts operator (CPU or GPU kernels by `generate_op`).
pub const KT_EXPERTS_CLASS: &str = "ktransformers.operators.experts.KTransformersExperts";

/// ktransformers' device name of a buffer.
fn kt_device(buffer: Buffer) -> String {
    match buffer {
        Buffer::Cuda(g) => format!("cuda:{g}"),
        Buffer::Cpu => "cpu".into(),
    }
}

/// Module-name pattern of a trunk component in ktransformers' (Hugging
/// Face) models, over the given layers.
fn kt_trunk_pattern(name: &str, layers: &BTreeSet<usize>) -> Option<String> {
    let alt = join(layers, "|");
    match name {
        "attn" => Some(format!(r"^model\.layers\.({alt})\.self_attn$")),
        "dense_ffn" => Some(format!(r"^model\.layers\.({alt})\.mlp$")),
        "shared_expert" => Some(format!(r"^model\.layers\.({alt})\.mlp\.shared_experts$")),
        "lm_head" => Some(r"^lm_head$".into()),
        _ => None,
    }
}

/// Writes `ktransformers_optimize_rules.yaml` (`--optimize_config_path`).
///
/// ktransformers replaces `model.layers.N.mlp.experts` as one module, so
/// each MoE layer gets one device, chosen like llama.cpp's buffer
/// ([`layer_buffers`]): GPU layers run `KExpertsMarlin` there, CPU layers
/// `KExpertsCPU` with their output sent to the layer's attention card.
/// Trunk components go where the plan puts them (`class: default`).
pub fn ktransformers(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let place = |o: usize| inst.places[placement[o]];
    let layers_of = moe_layers(inst)?;
    let mut warnings = Vec::new();

    // Trunk: (component, buffer) -> layers, in model order of components.
    let mut trunk_gpu = vec![0u64; inst.resources.gpus()];
    let mut trunk_rules: Vec<((String, Buffer), BTreeSet<usize>)> = Vec::new();
    let mut attn_buffer: BTreeMap<usize, Buffer> = BTreeMap::new();
    let mut unknown: Vec<String> = Vec::new();
    for (name, members) in trunk_groups(inst) {
        if kt_trunk_pattern(&name, &BTreeSet::new()).is_none() {
            unknown.push(format!("`{name}`"));
            continue;
        }
        for (layer, o) in members {
            let buffer = Buffer::of(place(o));
            if let Buffer::Cuda(g) = buffer {
                trunk_gpu[g] += inst.objects[o].gpu_bytes;
            }
            if let (Some(layer), "attn") = (layer, name.as_str()) {
                attn_buffer.insert(layer, buffer);
            }
            let key = (name.clone(), buffer);
            match trunk_rules.iter_mut().find(|(k, _)| *k == key) {
                Some((_, layers)) => layers.extend(layer),
                None => trunk_rules.push((key, layer.into_iter().collect())),
            }
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!(
            "ktransformers: no module name is known for trunk component(s) {} (known: {}); no rule is written, so they stay where ktransformers' defaults put them",
            unknown.join(", "),
            LLAMA_TRUNK_NAMES.join(", ")
        ));
    }

    let (chosen, buffer_warnings) = layer_buffers(
        plan,
        inst,
        &placement,
        &layers_of,
        &trunk_gpu,
        "ktransformers replaces the routed experts of a layer as one module (model.layers.N.mlp.experts)",
    );
    warnings.extend(buffer_warnings);
    let first_gpu = (inst.resources.gpus() > 0).then_some(Buffer::Cuda(0));
    let mut expert_rules: BTreeMap<(Buffer, Buffer), BTreeSet<usize>> = BTreeMap::new();
    for (&layer, &buffer) in layers_of.iter().zip(&chosen) {
        // CPU experts hand their output to the card that runs the layer's
        // attention (else the first card, else the CPU).
        let out = match buffer {
            Buffer::Cuda(_) => buffer,
            Buffer::Cpu => match attn_buffer.get(&layer) {
                Some(&b @ Buffer::Cuda(_)) => b,
                _ => first_gpu.unwrap_or(Buffer::Cpu),
            },
        };
        expert_rules.entry((buffer, out)).or_default().insert(layer);
    }
    let on_disk = inst
        .expert_ids
        .iter()
        .flatten()
        .filter(|&&o| matches!(place(o), Place::Disk(_)))
        .count();
    if on_disk > 0 {
        warnings.push(format!(
            "ktransformers has no disk tier: the {on_disk} experts the plan streams from disk are loaded with their layer (into RAM when the layer is on the CPU)"
        ));
    }
    let numa = numa_nodes_used(inst, &placement);
    if !numa.is_empty() {
        warnings.push(format!(
            "ktransformers' CPU experts use one memory pool: the plan's choices between {} are not expressed",
            join(&numa, ", ")
        ));
    }

    let kwargs = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    let mut rules: Vec<KtRule> = expert_rules
        .iter()
        .map(|(&(buffer, out), layers)| {
            let (op, device) = match buffer {
                Buffer::Cuda(_) => ("KExpertsMarlin", kt_device(buffer)),
                Buffer::Cpu => ("KExpertsCPU", "cpu".into()),
            };
            KtRule {
                matches: KtMatch {
                    name: format!(r"^model\.layers\.({})\.mlp\.experts$", join(layers, "|")),
                },
                replace: KtReplace {
                    class: KT_EXPERTS_CLASS.into(),
                    kwargs: kwargs(&[
                        ("prefill_device", kt_device(out)),
                        ("prefill_op", "KExpertsTorch".into()),
                        ("generate_device", device),
                        ("generate_op", op.into()),
                        ("out_device", kt_device(out)),
                    ]),
                },
                // The experts' own submodules are the operator's business.
                recursive: Some(false),
            }
        })
        .collect();
    for ((name, buffer), layers) in &trunk_rules {
        let Some(pattern) = kt_trunk_pattern(name, layers) else {
            continue;
        };
        rules.push(KtRule {
            matches: KtMatch { name: pattern },
            replace: KtReplace {
                class: "default".into(),
                kwargs: kwargs(&[
                    ("generate_device", kt_device(*buffer)),
                    ("prefill_device", kt_device(*buffer)),
                ]),
            },
            recursive: None,
        });
    }
    let yaml = serde_norway::to_string(&rules).expect("rules of strings serialise");
    create_dir(dir)?;
    let path = dir.join(KT_RULES_FILE);
    write_atomic(&path, yaml.as_bytes())?;
    Ok(Export {
        files: vec![path],
        warnings,
    })
}

// ---------------------------------------------------------------------------
// Expert parallelism: SGLang --init-expert-location, vLLM EPLB map
// ---------------------------------------------------------------------------

/// Physical expert slots of an expert-parallel engine: every rank (one GPU)
/// holds `slots` experts of each MoE layer; physical expert `r * slots + i`
/// is slot `i` of rank `r`.
#[derive(Debug, Clone, PartialEq)]
pub struct EpLayout {
    /// GPU of each rank, grouped by host (hosts in order of their first GPU).
    pub rank_gpus: Vec<usize>,
    pub slots: usize,
    /// `map[l][p]`: logical expert of physical expert `p` of MoE ordinal `l`.
    pub map: Vec<Vec<usize>>,
    /// Physical experts beyond one per logical expert.
    pub redundant: usize,
    /// Experts the plan keeps off the GPUs, placed on one:
    /// `(ordinal, expert, gpu)`.
    pub moved: Vec<(usize, usize, usize)>,
}

/// The plan's GPU experts as EP slots. Engines with expert parallelism keep
/// every expert on some GPU, so experts the plan leaves in RAM or on disk
/// go, hottest first, to the rank with the fewest experts of their layer
/// (lower rank on ties); ranks short of `slots` (the fullest rank of any
/// layer) fill up with replicas of the layer's hottest experts they lack.
fn ep_layout(inst: &Instance, placement: &[usize]) -> Result<EpLayout> {
    let gpus = inst.resources.gpus();
    if gpus == 0 {
        return Err(PlannerError::Infeasible(
            "the sglang and vllm exports need at least one GPU in the profile; use coli-place, llama-cpp or ktransformers for a CPU-only plan".into(),
        ));
    }
    let hosts = &inst.resources.gpu_hosts;
    let mut host_order: Vec<&Option<String>> = Vec::new();
    for h in hosts {
        if !host_order.contains(&h) {
            host_order.push(h);
        }
    }
    let rank_gpus: Vec<usize> = host_order
        .iter()
        .flat_map(|&h| (0..gpus).filter(move |&g| &hosts[g] == h))
        .collect();
    let rate = |l: usize, e: usize| inst.objects[inst.expert_ids[l][e]].use_rate;
    let mut moved = Vec::new();
    let per_rank: Vec<Vec<Vec<usize>>> = inst
        .expert_ids
        .iter()
        .enumerate()
        .map(|(l, ids)| {
            let mut ranks: Vec<Vec<usize>> = rank_gpus
                .iter()
                .map(|&g| {
                    let at = inst.place_index(Place::Gpu(g));
                    (0..ids.len())
                        .filter(|&e| placement[ids[e]] == at)
                        .collect()
                })
                .collect();
            let mut off: Vec<usize> = (0..ids.len())
                .filter(|&e| !matches!(inst.places[placement[ids[e]]], Place::Gpu(_)))
                .collect();
            off.sort_by(|&a, &b| rate(l, b).total_cmp(&rate(l, a)).then(a.cmp(&b)));
            for e in off {
                let r = (0..ranks.len())
                    .min_by_key(|&r| ranks[r].len())
                    .unwrap_or(0);
                ranks[r].push(e);
                moved.push((l, e, rank_gpus[r]));
            }
            ranks
        })
        .collect();
    let slots = per_rank.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let map = per_rank
        .into_iter()
        .enumerate()
        .map(|(l, ranks)| {
            let mut hottest: Vec<usize> = (0..inst.expert_ids[l].len()).collect();
            hottest.sort_by(|&a, &b| rate(l, b).total_cmp(&rate(l, a)).then(a.cmp(&b)));
            ranks
                .into_iter()
                .flat_map(|mut experts| {
                    let replicas: Vec<usize> = hottest
                        .iter()
                        .copied()
                        .filter(|e| !experts.contains(e))
                        .take(slots - experts.len())
                        .collect();
                    experts.extend(replicas);
                    experts
                })
                .collect()
        })
        .collect();
    let experts = inst.expert_ids.first().map_or(0, Vec::len);
    Ok(EpLayout {
        redundant: rank_gpus.len() * slots - experts,
        rank_gpus,
        slots,
        map,
        moved,
    })
}

/// Warnings shared by the expert-parallel exports: experts moved onto GPUs
/// (priced with the cost model, replicas left out: it has one place per
/// object), cards past their capacity, and the trunk the engine replicates.
fn ep_warnings(
    engine: &str,
    plan: &Plan,
    inst: &Instance,
    placement: &[usize],
    layout: &EpLayout,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let moved = &layout.moved;
    if !moved.is_empty() {
        let mut exported = placement.to_vec();
        let mut mass = 0.0;
        for &(l, e, g) in moved.iter() {
            let o = inst.expert_ids[l][e];
            exported[o] = inst.place_index(Place::Gpu(g));
            mass += inst.objects[o].use_rate;
        }
        warnings.push(format!(
            "{engine} keeps every expert on a GPU: the {} experts the plan leaves in RAM or on disk (use-rate mass {mass:.3} per token) go to the rank with the fewest experts of their layer; the cost model gives {:.3} ms per token as exported (replicas not counted), the plan {:.3} ms",
            moved.len(),
            inst.evaluate(&exported).token_seconds * 1e3,
            plan.objective.token_seconds * 1e3
        ));
    }
    for (r, &g) in layout.rank_gpus.iter().enumerate() {
        let bytes: u64 = layout
            .map
            .iter()
            .enumerate()
            .flat_map(|(l, row)| {
                row[r * layout.slots..(r + 1) * layout.slots]
                    .iter()
                    .map(move |&e| inst.objects[inst.expert_ids[l][e]].gpu_bytes)
            })
            .sum();
        let capacity = inst.resources.gpu_capacity_bytes[g];
        if bytes > capacity {
            warnings.push(format!(
                "rank {r} (gpu:{g}) gets {} ({bytes} bytes) of experts, more than gpu:{g}'s capacity {} ({capacity} bytes): expect an out-of-memory error at load; give the plan more GPUs or a smaller expert format",
                Bytes(bytes),
                Bytes(capacity)
            ));
        }
    }
    if inst.trunk().next().is_some() {
        warnings.push(format!(
            "{engine} runs the trunk (attention, dense and shared layers, lm_head) on every rank by its own parallelism: the plan's trunk placement is not expressed"
        ));
    }
    warnings
}

/// The `--init-expert-location` file of SGLang: `physical_to_logical_map`,
/// one row per transformer layer (SGLang indexes by layer id; rows of dense
/// layers are the trivial map `p % experts` and unused).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangExpertLocation {
    pub physical_to_logical_map: Vec<Vec<usize>>,
}

/// Writes `sglang_expert_location.json` and `sglang_args.txt`
/// (`--ep-size`, `--ep-num-redundant-experts`, `--init-expert-location`).
/// Only the map is written: SGLang passes every key of the file to
/// `init_by_mapping`, so a `logical_count` beside it would be an error.
pub fn sglang(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let layers_of = moe_layers(inst)?;
    let layout = ep_layout(inst, &placement)?;
    let warnings = ep_warnings("SGLang", plan, inst, &placement, &layout);
    let layers = model_layers(inst).max(layers_of.iter().max().map_or(0, |&l| l + 1));
    let experts = inst.expert_ids.first().map_or(0, Vec::len);
    let physical = layout.rank_gpus.len() * layout.slots;
    let mut rows: Vec<Vec<usize>> = (0..layers)
        .map(|_| (0..physical).map(|p| p % experts.max(1)).collect())
        .collect();
    for (l, &layer) in layers_of.iter().enumerate() {
        rows[layer] = layout.map[l].clone();
    }
    let file = SglangExpertLocation {
        physical_to_logical_map: rows,
    };
    let json = serde_json::to_string(&file).expect("a map of integers serialises");
    create_dir(dir)?;
    let path = dir.join(SGLANG_FILE);
    let args_path = dir.join(SGLANG_ARGS_FILE);
    write_atomic(&path, (json + "\n").as_bytes())?;
    let args = format!(
        "--ep-size {} --ep-num-redundant-experts {} --init-expert-location {}\n",
        layout.rank_gpus.len(),
        layout.redundant,
        path.display()
    );
    write_atomic(&args_path, args.as_bytes())?;
    Ok(Export {
        files: vec![path, args_path],
        warnings,
    })
}

/// One EP rank of the vLLM export.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmRank {
    pub rank: usize,
    /// The profile's host of the GPU, null when it names none.
    pub host: Option<String>,
    pub gpu: usize,
    /// `experts[l]`: logical experts of MoE ordinal `l` in this rank's slots.
    pub experts: Vec<Vec<usize>>,
}

/// vLLM's EPLB state as a file: `physical_to_logical_map` over MoE layers
/// (EPLB's `(moe_layers, physical)` shape) and the same map rank by rank.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmPlacement {
    pub num_redundant_experts: usize,
    pub moe_layers: Vec<usize>,
    pub physical_to_logical_map: Vec<Vec<usize>>,
    pub ranks: Vec<VllmRank>,
}

/// Writes `vllm_expert_placement.json` and `vllm_args.txt`. Ranks are GPUs
/// grouped by host (vLLM numbers EP ranks node by node); the arguments give
/// the data-parallel sizes per host and EPLB's redundant experts.
pub fn vllm(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let moe = moe_layers(inst)?;
    let layout = ep_layout(inst, &placement)?;
    let mut warnings = ep_warnings("vLLM", plan, inst, &placement, &layout);
    warnings.push(
        "vLLM has no option to load an expert map at start: it begins from the trivial map and EPLB rebalances from its load windows; load physical_to_logical_map into EplbState (or compare it with EPLB's) to serve the plan's placement".into(),
    );
    let hosts = &inst.resources.gpu_hosts;
    let ranks: Vec<VllmRank> = layout
        .rank_gpus
        .iter()
        .enumerate()
        .map(|(r, &g)| VllmRank {
            rank: r,
            host: hosts[g].clone(),
            gpu: g,
            experts: layout
                .map
                .iter()
                .map(|row| row[r * layout.slots..(r + 1) * layout.slots].to_vec())
                .collect(),
        })
        .collect();
    let mut per_host: Vec<(Option<String>, usize)> = Vec::new();
    for rank in &ranks {
        match per_host.iter_mut().find(|(h, _)| *h == rank.host) {
            Some((_, n)) => *n += 1,
            None => per_host.push((rank.host.clone(), 1)),
        }
    }
    let file = VllmPlacement {
        num_redundant_experts: layout.redundant,
        moe_layers: moe,
        physical_to_logical_map: layout.map.clone(),
        ranks,
    };
    let json = serde_json::to_string_pretty(&file).expect("a map of integers serialises");
    let eplb = format!(
        "--enable-expert-parallel --data-parallel-size {} --enable-eplb --eplb-config '{{\"num_redundant_experts\":{}}}'",
        layout.rank_gpus.len(),
        layout.redundant
    );
    let args = if per_host.len() > 1 {
        join(
            per_host.iter().enumerate().map(|(i, (h, n))| {
                format!(
                    "# host {}: {eplb} --data-parallel-size-local {n} --data-parallel-start-rank {}",
                    h.as_deref().unwrap_or("(unnamed)"),
                    per_host[..i].iter().map(|(_, n)| n).sum::<usize>()
                )
            }),
            "\n",
        )
    } else {
        eplb
    };
    create_dir(dir)?;
    let path = dir.join(VLLM_FILE);
    let args_path = dir.join(VLLM_ARGS_FILE);
    write_atomic(&path, (json + "\n").as_bytes())?;
    write_atomic(&args_path, (args + "\n").as_bytes())?;
    Ok(Export {
        files: vec![path, args_path],
        warnings,
    })
}

/// Transformer layers of the model, from the stage names `L<layer>.<kind>`.
fn model_layers(inst: &Instance) -> usize {
    inst.stages
        .iter()
        .filter_map(|s| {
            s.name
                .strip_prefix('L')?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |l| l + 1)
}

#[cfg(test)]
mod tests {
    //! Expected values are worked out by hand in the comments.

    use super::*;
    use crate::heat::read_heat;
    use crate::model::Model;
    use crate::plan::{HeatRef, InputRef, PlanInputs};
    use crate::profile::HardwareProfile;
    use crate::solve::Solution;

    const PROFILE: &str = r#"
name: two-cards
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s }
gpus:
  - { id: 0, name: a, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }
  - { id: 1, name: b, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;

    const MODEL: &str = r#"
name: tiny
layers: 4
moe_layers: [1, 2, 3]
experts: 4
top_k: 2
hidden: 8
expert_intermediate: 8
formats: { q: 1 MB }
tiers: { gpu: q, ram: q, disk: q }
trunk:
  - { name: attn, layers: "0..=3", bytes: 2 MB, stage: dense }
  - { name: dense_ffn, layers: [0], bytes: 3 MB, stage: dense }
  - { name: shared_expert, layers: "1..=3", bytes: 1 MB, stage: experts }
  - { name: lm_head, bytes: 4 MB, stage: head }
  - { name: router_bias, bytes: 1 MB, stage: head }
"#;

    /// Places: 0 = gpu:0, 1 = gpu:1, 2 = ram:0, 3 = disk:0.
    const G0: usize = 0;
    const G1: usize = 1;
    const RAM: usize = 2;
    const DISK: usize = 3;

    /// Use rates `p[l][e]`; MoE ordinals 0, 1, 2 are transformer layers 1, 2, 3.
    /// Each layer sums to 2.0 (top_k), 6.0 in all.
    const RATES: [[f64; 4]; 3] = [
        [0.9, 0.5, 0.4, 0.2],
        [0.8, 0.6, 0.3, 0.3],
        [0.7, 0.1, 0.6, 0.6],
    ];

    fn instance() -> Instance {
        let profile = HardwareProfile::from_yaml_str(PROFILE, Path::new("p")).unwrap();
        let model = Model::from_yaml_str(MODEL, Path::new("m")).unwrap();
        let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
        let inst = Instance::new(&profile, &model, &rates);
        assert_eq!(inst.resources.gpu_capacity_bytes, vec![10_000_000; 2]);
        inst
    }

    /// Objects: experts `4 * l + e` (0..=11), then attn L0..L3 (12..=15),
    /// dense_ffn L0 (16), shared_expert L1..L3 (17..=19), lm_head (20),
    /// router_bias (21).
    fn placement(experts: [[usize; 4]; 3], attn: [usize; 4], lm_head: usize) -> Vec<usize> {
        let mut p: Vec<usize> = experts.iter().flatten().copied().collect();
        p.extend(attn);
        p.extend([RAM, RAM, RAM, RAM, lm_head, RAM]);
        p
    }

    fn plan_of(inst: &Instance, placement: Vec<usize>) -> Plan {
        inst.check_feasible(&placement).unwrap();
        let t = inst.evaluate(&placement).token_seconds;
        let solution = Solution {
            placement: placement.clone(),
            token_seconds: t,
            lower_bound_seconds: t,
            bound_method: "by hand",
            greedy_placement: placement,
            greedy_token_seconds: t,
            method: "by hand".into(),
            solve_seconds: 0.0,
            proven_optimal: true,
        };
        let input = |name: &str| InputRef {
            name: name.into(),
            sha256: String::new(),
        };
        let inputs = PlanInputs {
            profile: input("two-cards"),
            model: input("tiny"),
            heat: HeatRef {
                source: "by hand".into(),
                format: "json".into(),
                sha256: String::new(),
                tokens: None,
            },
            kv: None,
        };
        Plan::new(inst, &solution, inputs, 1.0)
    }

    /// Scenario A: experts on gpu:0 only (one disk expert), attn L0-L1 on
    /// gpu:0, lm_head on gpu:1, the rest in RAM. gpu:0 holds 5 x 1 MB +
    /// 2 x 2 MB = 9 MB of its 10 MB; gpu:1 4 MB.
    fn scenario_a() -> Vec<usize> {
        placement(
            [[G0, G0, RAM, RAM], [G0, RAM, RAM, RAM], [G0, DISK, G0, RAM]],
            [G0, G0, RAM, RAM],
            G1,
        )
    }

    /// Scenario B: experts on both cards, two of them off their Colibri
    /// home (e % 2): l1e0 on gpu:1 (home 0), l1e1 on gpu:0 (home 1).
    fn scenario_b(lm_head: usize) -> Vec<usize> {
        placement(
            [[G0, G1, RAM, RAM], [G1, G0, RAM, RAM], [G0, RAM, RAM, RAM]],
            [RAM; 4],
            lm_head,
        )
    }

    fn env_vars(path: &Path) -> BTreeMap<String, String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    type Parsed = Vec<(String, Vec<(ColiTarget, Option<usize>)>)>;

    /// A small COLI_PLACE parser, written from colibri-formats.md 7:
    /// `item ("," item)*`, `item := component "=" (target | split)`,
    /// `split := dev ":" n ("+" dev ":" n)*`.
    fn parse_coli_place(value: &str) -> Parsed {
        value
            .split(',')
            .map(|item| {
                let (name, spec) = item.split_once('=').expect("component=spec");
                let segments = spec
                    .split('+')
                    .map(|seg| {
                        let (t, n) = match seg.split_once(':') {
                            Some((t, n)) => (t, Some(n.parse::<usize>().unwrap())),
                            None => (seg, None),
                        };
                        let t = match t {
                            "cpu" => ColiTarget::Cpu,
                            d => ColiTarget::Dev(d.parse().unwrap()),
                        };
                        (t, n)
                    })
                    .collect();
                (name.to_string(), segments)
            })
            .collect()
    }

    /// Where the parsed list puts `component` in model layer `layer`: the
    /// first n layers on the first device, the next on the second, ...; past
    /// the last segment or unnamed, the CPU.
    fn lookup(parsed: &Parsed, component: &str, layer: usize) -> ColiTarget {
        let Some((_, segments)) = parsed.iter().find(|(n, _)| n == component) else {
            return ColiTarget::Cpu;
        };
        let mut start = 0;
        for &(t, n) in segments {
            let Some(n) = n else { return t };
            if (start..start + n).contains(&layer) {
                return t;
            }
            start += n;
        }
        ColiTarget::Cpu
    }

    /// Checks that COLI_PLACE puts every trunk component where the plan does.
    fn assert_round_trip(inst: &Instance, placement: &[usize], value: &str) {
        let parsed = parse_coli_place(value);
        for (o, name, layer) in inst.trunk() {
            let coli = if name == "lm_head" { "lmhead" } else { name };
            let want = match inst.places[placement[o]] {
                Place::Gpu(g) => ColiTarget::Dev(g),
                _ => ColiTarget::Cpu,
            };
            assert_eq!(
                lookup(&parsed, coli, layer.unwrap_or(0)),
                want,
                "{name} layer {layer:?} in {value}"
            );
        }
    }

    #[test]
    fn export_splits_encode_runs_of_model_layers() {
        use ColiTarget::{Cpu, Dev};
        // attn L0-L1 on 0, L2-L3 on the CPU: "0:2" (past the split is the CPU).
        // A leading CPU run is written cpu:n: L0 cpu, L1 on 1, L2-L3 on 0.
        // Gaps join the run before them: layers 1 (0), 2 and 5 (1): the first
        // segment starts at layer 0 and ends before 2 (2 layers), the second
        // covers 2..=5 (4 layers).
        let cases: [(&[(usize, ColiTarget)], &str); 4] = [
            (&[(0, Dev(0)), (1, Dev(0)), (2, Cpu), (3, Cpu)], "0:2"),
            (
                &[(0, Cpu), (1, Dev(1)), (2, Dev(0)), (3, Dev(0))],
                "cpu:1+1:1+0:2",
            ),
            (&[(1, Dev(0)), (2, Dev(1)), (5, Dev(1))], "0:2+1:4"),
            (&[(3, Dev(1)), (4, Dev(1))], "1"),
        ];
        for (layers, want) in cases {
            let item = ColiItem::from_layers("dnproj", layers);
            assert_eq!(item.spec(), want);
            let parsed = parse_coli_place(&coli_place_string(std::slice::from_ref(&item)));
            for &(l, t) in layers {
                assert_eq!(lookup(&parsed, "dnproj", l), t, "{want} layer {l}");
                assert_eq!(item.target_of(l), t, "{want} layer {l}");
            }
        }
    }

    #[test]
    fn export_allowance_text_never_lands_short() {
        // gib_text rounds (bytes + slack) up to a millionth of a GiB (1074
        // bytes), so Colibri's atof * 2^30 gives at least the bytes and at most
        // slack + 1074 + 1 more. 6 GiB - 1024 + 1024 is exactly "6.000000".
        for b in [
            0,
            1,
            999_999,
            5_000_000,
            6 * (1 << 30) - 1024,
            123_456_789_012,
        ] {
            let text = gib_text(b + ALLOWANCE_SLACK);
            let got = coli_allowance_bytes(&text);
            assert!(
                got >= b && got <= b + ALLOWANCE_SLACK + 1075,
                "{b}: {text} -> {got}"
            );
        }
        assert_eq!(gib_text(6 * (1 << 30)), "6.000000");
        // 5,001,024 * 1e6 / 2^30 = 4657.56 -> 4658.
        assert_eq!(gib_text(5_000_000 + ALLOWANCE_SLACK), "0.004658");
    }

    #[test]
    fn export_coli_place_pins_experts_and_ranks_gpu_experts_first() {
        let inst = instance();
        let placement = scenario_a();
        let plan = plan_of(&inst, placement.clone());
        let dir = tempfile::tempdir().unwrap();
        let out = coli_place(&plan, &inst, dir.path()).unwrap();
        let env_path = dir.path().join(COLI_ENV_FILE);
        let heat_path = dir.path().join(COLI_HEAT_FILE);
        assert_eq!(out.files, vec![env_path.clone(), heat_path.clone()]);

        let env = env_vars(&env_path);
        assert_eq!(env["COLI_CUDA"], "1");
        // Experts on gpu:0 only -> experts=0; lm_head -> lmhead=1; attn L0-L1
        // on 0 -> attn=0:2; the others in RAM -> cpu, in model order.
        assert_eq!(
            env["COLI_PLACE"],
            "experts=0,lmhead=1,attn=0:2,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
        );
        assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
        assert_eq!(
            lookup(&parse_coli_place(&env["COLI_PLACE"]), "experts", 0),
            ColiTarget::Dev(0)
        );
        // The expert card first, then the trunk card.
        assert_eq!(env["COLI_GPUS"], "0,1");
        // gpu:0 needs 5 experts x 1 MB = 5,000,000 bytes (attn is not a
        // Colibri component, so nothing is charged); gpu:1 needs lm_head's
        // 4,000,000. (5,000,000 + 1024) / 2^30 = 0.0046575.. -> 0.004658 GiB
        // = 5,001,489 bytes: room for 5 experts, not 6.
        assert_eq!(env["CUDA_EXPERT_GB"], "0.004658");
        let allowance = coli_allowance_bytes(&env["CUDA_EXPERT_GB"]);
        assert!((5_000_000..6_000_000).contains(&allowance), "{allowance}");
        assert_eq!(
            Path::new(&env["HEAT_FILE"]),
            std::fs::canonicalize(&heat_path).unwrap()
        );

        // Heat by hand: the 7 experts off the GPU rank 1..=7 by p (ties: the
        // higher slot is colder): l2e1 .1, l0e3 .2, l1e3 .3, l1e2 .3, l0e2 .4,
        // l2e3 .6, l1e1 .6; the 5 GPU experts 8..=12: l0e1 .5, l2e2 .6,
        // l2e0 .7, l1e0 .8, l0e0 .9. Values are ranks x 16.
        let mut w = Vec::new();
        let heat = read_heat(
            &heat_path,
            Some(HeatFormat::ColiHeat),
            &HeatContext::default(),
            &mut w,
        )
        .unwrap();
        let want = vec![
            vec![192.0, 128.0, 80.0, 32.0],
            vec![176.0, 112.0, 64.0, 48.0],
            vec![160.0, 16.0, 144.0, 96.0],
        ];
        assert_eq!(heat.total.counts, want);
        // After Colibri's `>> 1` (and even `>> 4`) the five hottest are
        // exactly the plan's GPU experts, and every GPU expert is strictly
        // above every other.
        for shift in [0, 1, 4] {
            let mut slots: Vec<(u32, usize)> = heat
                .total
                .counts
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, &c)| ((c as u32) >> shift, i))
                .collect();
            slots.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let top: BTreeSet<usize> = slots[..5].iter().map(|s| s.1).collect();
            assert_eq!(top, BTreeSet::from([0, 1, 4, 8, 10]), ">> {shift}");
            assert!(slots[4].0 > slots[5].0, ">> {shift}");
        }

        // Colibri's fill with these settings loads exactly the plan's experts.
        let resident: Vec<bool> = placement.iter().map(|&q| q <= G1).collect();
        let values = coli_heat_values(&inst, &resident).unwrap();
        let loaded = coli_fill(&inst, &values, &[0], &[allowance]);
        for (l, row) in loaded.iter().enumerate() {
            for (e, &card) in row.iter().enumerate() {
                let planned = (placement[4 * l + e] == G0).then_some(0);
                assert_eq!(card, planned, "l{l} e{e}");
            }
        }

        let all = out.warnings.join("\n");
        assert!(!all.contains("COLI_GPUS:"), "{all}");
        assert!(!all.contains("warm start"), "{all}");
        assert!(
            all.contains("`attn`, `dense_ffn`, `shared_expert`, `router_bias` passed through"),
            "{all}"
        );
        assert!(all.contains("RAM: 1 experts are on disk"), "{all}");
        assert_eq!(out.warnings.len(), 2, "{all}");
    }

    #[test]
    fn export_coli_place_says_what_colibri_does_with_experts_off_their_home() {
        let inst = instance();
        let placement = scenario_b(RAM);
        let plan = plan_of(&inst, placement.clone());
        let dir = tempfile::tempdir().unwrap();
        let out = coli_place(&plan, &inst, dir.path()).unwrap();
        let env = env_vars(&dir.path().join(COLI_ENV_FILE));
        // Two expert cards: no experts item, they follow COLI_GPUS.
        assert_eq!(env["COLI_GPUS"], "0,1");
        assert_eq!(
            env["COLI_PLACE"],
            "lmhead=cpu,attn=cpu,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
        );
        assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
        // gpu:0 needs 3 experts = 3,000,000 bytes, gpu:1 2,000,000:
        // (3,000,000 + 1024) / 2^30 = 0.00279494.. -> 0.002795 GiB =
        // 3,001,108 bytes, three experts on each card.
        assert_eq!(env["CUDA_EXPERT_GB"], "0.002795");
        // Fill, hottest first, home e % 2: l0e0 .9 -> 0, l1e0 .8 -> 0,
        // l2e0 .7 -> 0 (card 0 full), l1e1 .6 -> 1, l0e1 .5 -> 1; then the
        // hottest others: l2e2 .6 (home 0, full), l2e3 .6 -> 1 (full).
        // Planned card kept: l0e0, l2e0, l0e1 (3); moved: l1e0 to 0, l1e1 to
        // 1 (2); none left in RAM; 1 added (l2e3).
        let all = out.warnings.join("\n");
        assert!(
            all.contains("gives expert e the home card [0, 1][e % 2] and cannot choose a card per expert: 2 of the plan's 5 GPU experts are planned on another card than their home"),
            "{all}"
        );
        assert!(
            all.contains("load 3 of the plan's 5 GPU experts on the planned card, 2 on another card, leave 0 in RAM, and add 1 experts"),
            "{all}"
        );
        assert!(!all.contains("out of expert placement"), "{all}");
        let resident: Vec<bool> = placement.iter().map(|&q| q <= G1).collect();
        let values = coli_heat_values(&inst, &resident).unwrap();
        let allowance = coli_allowance_bytes(&env["CUDA_EXPERT_GB"]);
        let loaded = coli_fill(&inst, &values, &[0, 1], &[allowance; 2]);
        assert_eq!(loaded[1][0], Some(0));
        assert_eq!(loaded[1][1], Some(1));
        assert_eq!(loaded[2][2], None);
        assert_eq!(loaded[2][3], Some(1));
    }

    #[test]
    fn export_coli_place_models_the_role_split_of_a_trunk_card() {
        let inst = instance();
        // As B, with lm_head on gpu:1: Colibri takes card 1 out of expert
        // placement (card 0 is left), so all experts home on card 0.
        let placement = scenario_b(G1);
        let plan = plan_of(&inst, placement.clone());
        let dir = tempfile::tempdir().unwrap();
        let out = coli_place(&plan, &inst, dir.path()).unwrap();
        let env = env_vars(&dir.path().join(COLI_ENV_FILE));
        assert_eq!(
            env["COLI_PLACE"],
            "lmhead=1,attn=cpu,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
        );
        assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
        // gpu:1 needs 2 experts + lm_head = 6,000,000 bytes, the most:
        // (6,000,000 + 1024) / 2^30 = 0.0055890.. -> 0.005589 GiB. Card 0's
        // budget (nothing charged) holds 6 experts: the 5 GPU experts and the
        // hottest other, l2e2 (.6, the lower slot of the two .6 ties).
        // Planned card kept: l0e0, l1e1, l2e0 (3); moved to card 0: l0e1,
        // l1e0 (2); added: 1.
        assert_eq!(env["CUDA_EXPERT_GB"], "0.005589");
        let all = out.warnings.join("\n");
        assert!(
            all.contains("puts every expert on card 0 and cannot choose a card per expert: 2 of the plan's 5 GPU experts"),
            "{all}"
        );
        assert!(
            all.contains("takes card(s) 1 out of expert placement because COLI_PLACE gives them lmhead/dnproj/dnout/attnproj"),
            "{all}"
        );
        assert!(
            all.contains("load 3 of the plan's 5 GPU experts on the planned card, 2 on another card, leave 0 in RAM, and add 1 experts"),
            "{all}"
        );
    }

    /// The literal prefixes a pattern of ours matches under `regex_search`
    /// with a leading `^`: `\x` is a literal, `(a|b)` an alternation of
    /// literals; any other regex syntax fails the test.
    fn expand(pattern: &str) -> Vec<String> {
        let body = pattern.strip_prefix('^').expect("anchored with ^");
        let mut prefixes = vec![String::new()];
        let mut chars = body.chars();
        while let Some(c) = chars.next() {
            let options: Vec<String> = match c {
                '\\' => vec![chars.next().unwrap().to_string()],
                '(' => {
                    let mut group = String::new();
                    for c in chars.by_ref() {
                        if c == ')' {
                            break;
                        }
                        group.push(c);
                    }
                    group.split('|').map(|a| a.replace('\\', "")).collect()
                }
                '.' | '*' | '+' | '?' | '[' | ']' | '{' | '}' | '$' | '|' | ')' => {
                    panic!("unescaped `{c}` in {pattern}")
                }
                c => vec![c.to_string()],
            };
            prefixes = prefixes
                .iter()
                .flat_map(|p| options.iter().map(move |o| format!("{p}{o}")))
                .collect();
        }
        prefixes
    }

    #[test]
    fn export_llama_cpp_puts_each_layer_where_most_of_its_mass_is() {
        let inst = instance();
        let plan = plan_of(&inst, scenario_a());
        let dir = tempfile::tempdir().unwrap();
        let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
        let ot = dir.path().join(LLAMA_OT_FILE);
        let args = dir.path().join(LLAMA_ARGS_FILE);
        assert_eq!(out.files, vec![ot.clone(), args.clone()]);
        // Mass per layer: L1 (l0) CUDA0 .9+.5 = 1.4 vs CPU .6 -> CUDA0;
        // L2 (l1) CUDA0 .8 vs CPU 1.2 -> CPU; L3 (l2) CUDA0 .7+.6 = 1.3 vs
        // CPU (disk .1 + ram .6) .7 -> CUDA0. But CUDA0 would then hold
        // layers 1 and 3 (8 x 1 MB) + attn L0-L1 (2 x 2 MB) = 12,000,000
        // bytes > 10,000,000: L3, with less planned gpu:0 mass (1.3 < 1.4),
        // goes to CPU, leaving 8,000,000. Trunk: attn L0-L1 CUDA0, L2-L3
        // CPU; dense_ffn L0, shared L1-L3 CPU; lm_head CUDA1.
        let want = [
            r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0",
            r"-ot ^blk\.(2|3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU",
            r"-ot ^blk\.(0|1)\.attn_=CUDA0",
            r"-ot ^blk\.(2|3)\.attn_=CPU",
            r"-ot ^blk\.(0)\.ffn_(gate|up|down)\.=CPU",
            r"-ot ^blk\.(1|2|3)\.ffn_(gate|up|down)_shexp\.=CPU",
            r"-ot ^output\.=CUDA1",
        ];
        let text = std::fs::read_to_string(&ot).unwrap();
        assert_eq!(text, want.join("\n") + "\n");
        let rules: Vec<(&str, &str)> = want
            .iter()
            .map(|l| l.strip_prefix("-ot ").unwrap().rsplit_once('=').unwrap())
            .collect();
        let fragment = std::fs::read_to_string(&args).unwrap();
        let joined = join(rules.iter().map(|(r, b)| format!("{r}={b}")), ",");
        assert_eq!(fragment, format!("-ngl 999 -ot '{joined}'\n"));
        assert!(!rules
            .iter()
            .any(|(r, _)| r.contains(',') || r.contains('=')));

        // Every GGUF name of layers 0-3 (and 11, 13, 21, 31, which must not
        // match `blk.1.` or `blk.3.`) goes to exactly the intended buffer.
        let suffixes = [
            "attn_norm.weight",
            "attn_q.weight",
            "attn_kv_a_mqa.weight",
            "attn_kv_b.weight",
            "attn_output.weight",
            "ffn_norm.weight",
            "ffn_gate.weight",
            "ffn_up.weight",
            "ffn_down.weight",
            "ffn_gate_inp.weight",
            "exp_probs_b.bias",
            "ffn_gate_exps.weight",
            "ffn_up_exps.weight",
            "ffn_down_exps.weight",
            "ffn_gate_shexp.weight",
            "ffn_up_shexp.weight",
            "ffn_down_shexp.weight",
        ];
        let mut names = vec![
            "token_embd.weight".to_string(),
            "output_norm.weight".into(),
            "output.weight".into(),
        ];
        for n in [0, 1, 2, 3, 11, 13, 21, 31] {
            names.extend(suffixes.iter().map(|s| format!("blk.{n}.{s}")));
        }
        let expected = |name: &str| -> Option<&str> {
            if name == "output.weight" {
                return Some("CUDA1");
            }
            let rest = name.strip_prefix("blk.")?;
            let (n, t) = rest.split_once('.')?;
            let n: usize = n.parse().ok()?;
            let exps = [
                "ffn_gate_exps.weight",
                "ffn_up_exps.weight",
                "ffn_down_exps.weight",
            ];
            let dense = ["ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"];
            let shexp = [
                "ffn_gate_shexp.weight",
                "ffn_up_shexp.weight",
                "ffn_down_shexp.weight",
            ];
            match n {
                0 | 1 if t.starts_with("attn_") => Some("CUDA0"),
                2 | 3 if t.starts_with("attn_") => Some("CPU"),
                1 if exps.contains(&t) => Some("CUDA0"),
                2 | 3 if exps.contains(&t) => Some("CPU"),
                0 if dense.contains(&t) => Some("CPU"),
                1..=3 if shexp.contains(&t) => Some("CPU"),
                _ => None,
            }
        };
        for name in &names {
            let hits: Vec<&str> = rules
                .iter()
                .filter(|(r, _)| expand(r).iter().any(|p| name.starts_with(p.as_str())))
                .map(|(_, b)| *b)
                .collect();
            assert!(hits.len() <= 1, "{name} matches {hits:?}");
            assert_eq!(hits.first().copied(), expected(name), "{name}");
        }

        // Moved by hand: l0e2 .4, l0e3 .2 (ram -> CUDA0), l1e0 .8, l2e0 .7,
        // l2e2 .6 (gpu:0 -> CPU): 5 experts, mass 2.7 of 6.0 = 45%. The disk
        // expert l2e1 stays with its layer on the CPU.
        let all = out.warnings.join("\n");
        assert!(
            all.contains("3 of 3 MoE layers mix places in the plan, and 5 experts whose per-expert decision cannot be expressed move (use-rate mass 2.700 of 6.000 per token, 45.0%; "),
            "{all}"
        );
        assert!(
            all.contains(" ms): 3 gpu:0 -> CPU (mass 2.100), 2 ram:0 -> CUDA0 (mass 0.600)"),
            "{all}"
        );
        assert!(
            all.contains("CUDA0 cannot hold the whole layers of its majority: 11.44 MiB (12000000 bytes) with its trunk, more than gpu:0's capacity 9.54 MiB (10000000 bytes); the routed experts of the layers with the least of the plan's gpu:0 mass go to the next buffer of their mass with room instead: layer(s) 3 to CPU"),
            "{all}"
        );
        // What llama.cpp runs, by hand: L1 all on gpu:0, L2 and L3 on the
        // CPU (their gpu:0 experts in RAM, the disk one still streamed).
        let exported = placement(
            [
                [G0, G0, G0, G0],
                [RAM, RAM, RAM, RAM],
                [RAM, DISK, RAM, RAM],
            ],
            [G0, G0, RAM, RAM],
            G1,
        );
        let ms = |t: f64| format!("{:.3}", t * 1e3);
        assert!(
            all.contains(&format!(
                "the cost model gives {} ms per token as exported, the plan {} ms",
                ms(inst.evaluate(&exported).token_seconds),
                ms(plan.objective.token_seconds)
            )),
            "{all}"
        );
        assert!(all.contains("trunk component(s) `router_bias`"), "{all}");
        assert!(all.contains("no disk tier: the 1 experts"), "{all}");
        assert!(all.contains("mmap"), "{all}");
        assert!(!all.contains("CUDA1"), "{all}");
        assert_eq!(out.warnings.len(), 4, "{all}");
    }

    #[test]
    fn export_llama_cpp_is_silent_when_layers_are_whole() {
        let inst = instance();
        // Every layer's experts in one buffer: L1 on gpu:0, L2 in RAM, L3 on
        // gpu:1; nothing on disk, nothing unknown placed (router_bias is
        // still unknown: one warning).
        let placement = placement([[G0; 4], [RAM; 4], [G1; 4]], [G0, G1, RAM, RAM], G1);
        let plan = plan_of(&inst, placement);
        let dir = tempfile::tempdir().unwrap();
        let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(out.warnings[0].contains("`router_bias`"));
        let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
        assert!(text.contains(r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0"));
        assert!(text.contains(r"-ot ^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1"));
        assert!(text.contains(r"-ot ^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CPU"));
        assert!(text.contains(r"-ot ^blk\.(1)\.attn_=CUDA1"));
    }

    #[test]
    fn export_coli_place_flags_what_its_grammar_cannot_hold() {
        let profile = HardwareProfile::from_yaml_str(PROFILE, Path::new("p")).unwrap();
        let model = Model::from_yaml_str(
            r#"
name: wide
layers: 10
moe_layers: [1, 2]
experts: 4
top_k: 2
hidden: 8
expert_intermediate: 8
formats: { q: 1 MB }
tiers: { gpu: q, ram: q, disk: q }
trunk:
  - { name: attn, layers: "0..=9", bytes: 1 MB, stage: dense }
  - { name: lm_head, bytes: 1 MB, stage: head }
  - { name: a1, bytes: 1 MB, stage: head }
  - { name: a2, bytes: 1 MB, stage: head }
  - { name: a3, bytes: 1 MB, stage: head }
  - { name: a4, bytes: 1 MB, stage: head }
  - { name: a5, bytes: 1 MB, stage: head }
  - { name: a6, bytes: 1 MB, stage: head }
  - { name: a7, bytes: 1 MB, stage: head }
"#,
            Path::new("m"),
        )
        .unwrap();
        let inst = Instance::new(&profile, &model, &[vec![0.5; 4], vec![0.5; 4]]);
        // Experts 0..=7 and lm_head, a1..a7 in RAM; attn alternates gpu:0
        // (even layers) and RAM (odd): 10 runs, the trailing CPU one dropped,
        // 9 segments. No expert and no Colibri component on a GPU: experts=cpu,
        // the tier is off. Items: experts, lmhead, attn, a1..a7 = 10 > 8.
        let mut p = vec![RAM; 8];
        p.extend((0..10).map(|l| if l % 2 == 0 { G0 } else { RAM }));
        p.extend([RAM; 8]);
        let plan = plan_of(&inst, p.clone());
        let dir = tempfile::tempdir().unwrap();
        let out = coli_place(&plan, &inst, dir.path()).unwrap();
        let env = env_vars(&dir.path().join(COLI_ENV_FILE));
        assert_eq!(env["COLI_CUDA"], "0");
        assert!(!env.contains_key("COLI_GPUS") && !env.contains_key("CUDA_EXPERT_GB"));
        assert_eq!(
            env["COLI_PLACE"],
            "experts=cpu,lmhead=cpu,attn=0:1+cpu:1+0:1+cpu:1+0:1+cpu:1+0:1+cpu:1+0:1,a1=cpu,a2=cpu,a3=cpu,a4=cpu,a5=cpu,a6=cpu,a7=cpu"
        );
        assert_round_trip(&inst, &p, &env["COLI_PLACE"]);
        let all = out.warnings.join("\n");
        assert!(
            all.contains("COLI_PLACE has 10 items; Colibri reads the first 8 and keeps `a6`, `a7` at the default"),
            "{all}"
        );
        // The first 8 segments cover layers 0..8; layer 8's gpu:0 is lost.
        assert!(
            all.contains("`attn` changes place 8 times over the layers, which is not expressible as a split Colibri reads (8 segments, 63 characters): it keeps at most the first 8 segments, and layers from 8 on may stay on the CPU"),
            "{all}"
        );

        // Different expert counts per layer cannot be a HEAT_FILE.
        let uneven = Model::from_yaml_str(
            &format!("{MODEL}per_layer:\n  - {{ layer: 2, experts: 2 }}\n"),
            Path::new("m"),
        )
        .unwrap();
        let inst = Instance::new(
            &profile,
            &uneven,
            &[vec![0.5; 4], vec![1.0; 2], vec![0.5; 4]],
        );
        let mut p = vec![RAM; 10];
        p.extend([RAM; 10]);
        let plan = plan_of(&inst, p);
        let err = coli_place(&plan, &inst, dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("2 or 4 experts; a HEAT_FILE holds the same number in every layer"),
            "{err}"
        );
    }

    #[test]
    fn export_llama_cpp_moves_an_overflowing_layer_to_a_card_with_room() {
        let inst = instance();
        // L1 (l0): gpu:0 .9 + .2 = 1.1, gpu:1 .5 + .4 = .9 -> CUDA0.
        // L2 (l1): gpu:0 .8 + .6 = 1.4, CPU .6 -> CUDA0. L3 all RAM -> CPU.
        // CUDA0 would hold 2 layers (8 MB) + attn L0-L1 (4 MB) = 12 MB > 10 MB:
        // L1 has less planned gpu:0 mass (1.1 < 1.4) and goes to its next
        // buffer by mass, CUDA1 (.9), which has room (0 + 4 MB <= 10 MB).
        let placement = placement(
            [[G0, G1, G1, G0], [G0, G0, RAM, RAM], [RAM; 4]],
            [G0, G0, RAM, RAM],
            RAM,
        );
        let plan = plan_of(&inst, placement);
        let dir = tempfile::tempdir().unwrap();
        let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
        assert!(
            text.contains(r"-ot ^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0"),
            "{text}"
        );
        assert!(
            text.contains(r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1"),
            "{text}"
        );
        assert!(
            text.contains(r"-ot ^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU"),
            "{text}"
        );
        let all = out.warnings.join("\n");
        assert!(
            all.contains("with room instead: layer(s) 1 to CUDA1"),
            "{all}"
        );
        // Moved: l0e0 .9, l0e3 .2 (gpu:0 -> CUDA1), l1e2 .3, l1e3 .3 (ram -> CUDA0).
        assert!(
            all.contains("2 gpu:0 -> CUDA1 (mass 1.100), 2 ram:0 -> CUDA0 (mass 0.600)"),
            "{all}"
        );
        assert!(!all.contains("out-of-memory"), "{all}");
    }

    /// The layer of each MoE ordinal's experts rule in a ktransformers file,
    /// read back: `(generate_device, out_device)` of the first rule whose
    /// pattern names the layer (ktransformers applies the first match).
    fn kt_devices(rules: &[KtRule], layer: usize) -> (String, String) {
        let name = format!("model.layers.{layer}.mlp.experts");
        let rule = rules
            .iter()
            .find(|r| {
                let p = &r.matches.name;
                let alt = p
                    .strip_prefix(r"^model\.layers\.(")
                    .and_then(|p| p.strip_suffix(r")\.mlp\.experts$"));
                alt.is_some_and(|alt| {
                    alt.split('|')
                        .any(|l| format!("model.layers.{l}.mlp.experts") == name)
                })
            })
            .unwrap_or_else(|| panic!("no rule for {name}"));
        assert_eq!(rule.replace.class, KT_EXPERTS_CLASS);
        assert_eq!(rule.recursive, Some(false));
        let kw = &rule.replace.kwargs;
        (kw["generate_device"].clone(), kw["out_device"].clone())
    }

    #[test]
    fn export_ktransformers_rules_parse_back_to_one_device_per_layer() {
        let inst = instance();
        // Scenario A: as for llama.cpp, L1 -> cuda:0, L2 -> CPU (more mass
        // in RAM), L3 -> CPU (demoted: gpu:0 would hold 12 MB > 10 MB). CPU
        // layers send their output to the first card (their attention is in
        // RAM).
        let plan = plan_of(&inst, scenario_a());
        let dir = tempfile::tempdir().unwrap();
        let out = ktransformers(&plan, &inst, dir.path()).unwrap();
        let path = dir.path().join(KT_RULES_FILE);
        assert_eq!(out.files, vec![path.clone()]);
        let rules: Vec<KtRule> =
            serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cuda0 = ("cuda:0".to_string(), "cuda:0".to_string());
        let cpu = ("cpu".to_string(), "cuda:0".to_string());
        assert_eq!(kt_devices(&rules, 1), cuda0);
        assert_eq!(kt_devices(&rules, 2), cpu);
        assert_eq!(kt_devices(&rules, 3), cpu);
        let ops: Vec<&str> = rules[..2]
            .iter()
            .map(|r| r.replace.kwargs["generate_op"].as_str())
            .collect();
        assert_eq!(ops, ["KExpertsMarlin", "KExpertsCPU"]);
        // Trunk rules after the experts, in model order; router_bias has no
        // module name.
        let trunk: Vec<(&str, &str)> = rules[2..]
            .iter()
            .map(|r| {
                assert_eq!(r.replace.class, "default");
                (
                    r.matches.name.as_str(),
                    r.replace.kwargs["generate_device"].as_str(),
                )
            })
            .collect();
        assert_eq!(
            trunk,
            [
                (r"^model\.layers\.(0|1)\.self_attn$", "cuda:0"),
                (r"^model\.layers\.(2|3)\.self_attn$", "cpu"),
                (r"^model\.layers\.(0)\.mlp$", "cpu"),
                (r"^model\.layers\.(1|2|3)\.mlp\.shared_experts$", "cpu"),
                (r"^lm_head$", "cuda:1"),
            ]
        );
        // The same lost decisions as llama.cpp: 5 experts, mass 2.7 of 6.0.
        let all = out.warnings.join("\n");
        assert!(all.contains("ktransformers replaces the routed experts of a layer as one module (model.layers.N.mlp.experts), so a layer has one buffer: 3 of 3 MoE layers mix places in the plan, and 5 experts whose per-expert decision cannot be expressed move (use-rate mass 2.700 of 6.000 per token, 45.0%; "), "{all}");
        assert!(all.contains("layer(s) 3 to CPU"), "{all}");
        assert!(all.contains("`router_bias`"), "{all}");
        assert!(all.contains("no disk tier: the 1 experts"), "{all}");
        assert_eq!(out.warnings.len(), 4, "{all}");
    }

    #[test]
    fn export_ktransformers_round_trips_whole_layers_silently() {
        let inst = instance();
        let placement = placement([[G0; 4], [RAM; 4], [G1; 4]], [G0, G1, RAM, RAM], G1);
        let plan = plan_of(&inst, placement);
        let dir = tempfile::tempdir().unwrap();
        let out = ktransformers(&plan, &inst, dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(KT_RULES_FILE)).unwrap();
        let rules: Vec<KtRule> = serde_norway::from_str(&text).unwrap();
        // Every expert of the plan is where its layer's rule puts it; L2's
        // CPU experts hand their output to attn L2's place: RAM, so cuda:0.
        let device = |p: usize| match inst.places[p] {
            Place::Gpu(g) => format!("cuda:{g}"),
            _ => "cpu".into(),
        };
        for (l, layer) in [1, 2, 3].into_iter().enumerate() {
            for e in 0..4 {
                assert_eq!(
                    kt_devices(&rules, layer).0,
                    device(plan.experts[l][e]),
                    "L{layer} e{e}"
                );
            }
        }
        assert_eq!(kt_devices(&rules, 2).1, "cuda:0");
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(out.warnings[0].contains("`router_bias`"));
    }

    /// Experts of MoE ordinal `l` rank by rank, from a physical-to-logical row.
    fn ranks_of(row: &[usize], slots: usize) -> Vec<Vec<usize>> {
        row.chunks(slots).map(<[usize]>::to_vec).collect()
    }

    #[test]
    fn export_sglang_maps_each_card_to_its_planned_experts() {
        let inst = instance();
        // Scenario B: l0 gpu:0 {0}, gpu:1 {1}; l1 gpu:1 {0}, gpu:0 {1};
        // l2 gpu:0 {0}. Off the GPUs, hottest first, to the emptier rank
        // (rank 0 on ties): l0 e2 (.4) -> 0, e3 (.2) -> 1; l1 e2 (.3) -> 0,
        // e3 (.3) -> 1; l2 e2 (.6) -> 1, e3 (.6) -> 0 (tie 1:1), e1 (.1) -> 1.
        // Two slots per rank, no replicas.
        let plan = plan_of(&inst, scenario_b(G1));
        let dir = tempfile::tempdir().unwrap();
        let out = sglang(&plan, &inst, dir.path()).unwrap();
        let path = dir.path().join(SGLANG_FILE);
        assert_eq!(
            out.files,
            vec![path.clone(), dir.path().join(SGLANG_ARGS_FILE)]
        );
        let file: SglangExpertLocation =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // One row per transformer layer; dense layer 0 is the trivial map.
        assert_eq!(
            file.physical_to_logical_map,
            vec![
                vec![0, 1, 2, 3],
                vec![0, 2, 1, 3],
                vec![1, 2, 0, 3],
                vec![0, 3, 2, 1],
            ]
        );
        // Round trip: every expert the plan puts on gpu:g is in rank g's slots.
        for (l, layer) in [1, 2, 3].into_iter().enumerate() {
            let ranks = ranks_of(&file.physical_to_logical_map[layer], 2);
            for (e, &q) in plan.experts[l].iter().enumerate() {
                if let Place::Gpu(g) = inst.places[q] {
                    assert!(ranks[g].contains(&e), "L{layer} e{e} gpu:{g}");
                }
            }
        }
        let args = std::fs::read_to_string(dir.path().join(SGLANG_ARGS_FILE)).unwrap();
        assert_eq!(
            args,
            format!(
                "--ep-size 2 --ep-num-redundant-experts 0 --init-expert-location {}\n",
                path.display()
            )
        );
        // Moved: 7 experts, mass .4 + .2 + .3 + .3 + .6 + .6 + .1 = 2.5.
        let all = out.warnings.join("\n");
        assert!(all.contains("SGLang keeps every expert on a GPU: the 7 experts the plan leaves in RAM or on disk (use-rate mass 2.500 per token)"), "{all}");
        assert!(all.contains("trunk placement is not expressed"), "{all}");
        assert_eq!(out.warnings.len(), 2, "{all}");
    }

    #[test]
    fn export_vllm_groups_ranks_by_host_and_pads_with_replicas() {
        // Three cards: gpu:0 and gpu:2 on host b, gpu:1 on host a. Ranks go
        // host by host in order of first GPU: b (gpu:0, gpu:2), then a (gpu:1).
        let profile = r#"
name: two-hosts
hosts:
  - { name: a, network_bandwidth: 10 GB/s, network_latency: 10 us }
  - { name: b, network_bandwidth: 10 GB/s, network_latency: 10 us }
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s, host: b }
  - { id: 1, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s, host: a }
gpus:
  - { id: 0, name: a, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: b }
  - { id: 1, name: b, vram: 10 MB, numa: 1, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: a }
  - { id: 2, name: c, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, host: b }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;
        let profile = HardwareProfile::from_yaml_str(profile, Path::new("p")).unwrap();
        let model = Model::from_yaml_str(MODEL, Path::new("m")).unwrap();
        let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
        let inst = Instance::new(&profile, &model, &rates);
        // Places: gpu:0, gpu:1, gpu:2, ram:0, ram:1, disk:0.
        let (g0, g1, g2, ram) = (0, 1, 2, 3);
        assert_eq!(inst.places[ram], Place::Ram(0));
        let mut p: Vec<usize> = [[g0, g0, g0, ram], [g1, g2, ram, ram], [ram; 4]]
            .iter()
            .flatten()
            .copied()
            .collect();
        p.extend([ram; 10]);
        let plan = plan_of(&inst, p);
        let dir = tempfile::tempdir().unwrap();
        let out = vllm(&plan, &inst, dir.path()).unwrap();
        let file: VllmPlacement =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(VLLM_FILE)).unwrap())
                .unwrap();
        // By hand (ranks 0 = gpu:0, 1 = gpu:2, 2 = gpu:1):
        // l0: r0 {0,1,2}; e3 -> r1. l1: r1 {1}, r2 {0}; e2 -> r0, e3 -> r0
        // (tie). l2: e0 -> r0, e2 -> r1, e3 -> r2, e1 -> r0. Slots: 3 (l0 r0);
        // replicas fill each rank with the hottest experts it lacks:
        // l0 hottest 0,1,2,3: r1 [3] + [0,1], r2 [] + [0,1,2];
        // l1 hottest 0,1,2,3: r0 [2,3] + [0], r1 [1] + [0,2], r2 [0] + [1,2];
        // l2 hottest 0,2,3,1: r0 [0,1] + [2], r1 [2] + [0,3], r2 [3] + [0,2].
        assert_eq!(file.moe_layers, vec![1, 2, 3]);
        assert_eq!(file.num_redundant_experts, 9 - 4);
        assert_eq!(
            file.physical_to_logical_map,
            vec![
                vec![0, 1, 2, 3, 0, 1, 0, 1, 2],
                vec![2, 3, 0, 1, 0, 2, 0, 1, 2],
                vec![0, 1, 2, 2, 0, 3, 3, 0, 2],
            ]
        );
        let who: Vec<(usize, Option<&str>, usize)> = file
            .ranks
            .iter()
            .map(|r| (r.rank, r.host.as_deref(), r.gpu))
            .collect();
        assert_eq!(
            who,
            [(0, Some("b"), 0), (1, Some("b"), 2), (2, Some("a"), 1)]
        );
        // Round trip: rank lists agree with the map, and hold the plan's
        // GPU experts of their card.
        for rank in &file.ranks {
            for (l, experts) in rank.experts.iter().enumerate() {
                assert_eq!(
                    experts,
                    &ranks_of(&file.physical_to_logical_map[l], 3)[rank.rank]
                );
                for (e, &q) in plan.experts[l].iter().enumerate() {
                    if inst.places[q] == Place::Gpu(rank.gpu) {
                        assert!(experts.contains(&e), "l{l} e{e} rank {}", rank.rank);
                    }
                }
            }
        }
        let args = std::fs::read_to_string(dir.path().join(VLLM_ARGS_FILE)).unwrap();
        let eplb = r#"--enable-expert-parallel --data-parallel-size 3 --enable-eplb --eplb-config '{"num_redundant_experts":5}'"#;
        assert_eq!(
            args,
            format!("# host b: {eplb} --data-parallel-size-local 2 --data-parallel-start-rank 0\n# host a: {eplb} --data-parallel-size-local 1 --data-parallel-start-rank 2\n")
        );
        let all = out.warnings.join("\n");
        assert!(
            all.contains("vLLM keeps every expert on a GPU: the 7 experts"),
            "{all}"
        );
        assert!(all.contains("no option to load an expert map"), "{all}");
        assert_eq!(out.warnings.len(), 3, "{all}");
    }

    #[test]
    fn export_expert_parallel_needs_a_gpu() {
        let profile = PROFILE.replace("gpus:", "gpus: []\nunused:");
        let profile = profile
            .lines()
            .filter(|l| {
                !l.contains("name: a,") && !l.contains("name: b,") && !l.starts_with("unused")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let profile = HardwareProfile::from_yaml_str(&profile, Path::new("p")).unwrap();
        let model = Model::from_yaml_str(MODEL, Path::new("m")).unwrap();
        let rates: Vec<Vec<f64>> = RATES.iter().map(|r| r.to_vec()).collect();
        let inst = Instance::new(&profile, &model, &rates);
        // Places: ram:0 (0), disk:0 (1); everything in RAM.
        let plan = plan_of(&inst, vec![0; inst.objects.len()]);
        let dir = tempfile::tempdir().unwrap();
        let err = sglang(&plan, &inst, dir.path()).unwrap_err().to_string();
        assert!(err.contains("exports need at least one GPU"), "{err}");
    }

    #[test]
    fn export_engine_names_round_trip() {
        for e in Engine::ALL {
            assert_eq!(Engine::from_name(e.name()), Some(e));
        }
        assert_eq!(Engine::from_name("tgi"), None);
    }
}

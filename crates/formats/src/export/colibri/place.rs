//! COLI_PLACE and COLI_GPUS: the `component=spec` items of the trunk and
//! the experts, the grammar Colibri reads them with (what it drops is
//! warned about), and the expert cards Colibri makes of them.

use super::super::{join, trunk_groups};
use super::Placed;
use residency_core::cost::Place;
use std::collections::BTreeSet;
use std::fmt;

/// Components Colibri's qwen36 tier knows (docs/formats.md section 7).
pub const COLI_COMPONENTS: [&str; 6] = [
    "experts", "lmhead", "dnproj", "dnout", "attnout", "attnproj",
];
/// Components whose card leaves the expert cards (qwen36_tier.h "R4 role split").
pub(super) const COLI_ROLE_SPLIT: [&str; 4] = ["lmhead", "dnproj", "dnout", "attnproj"];
/// Items of a COLI_PLACE list and segments of one split that Colibri reads.
const COLI_MAX_ITEMS: usize = 8;
const COLI_MAX_SEGMENTS: usize = 8;
/// Longest component name and spec Colibri keeps (16- and 64-byte buffers).
const COLI_MAX_NAME: usize = 15;
const COLI_MAX_SPEC: usize = 63;

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
pub(super) fn coli_expert_cards(
    gpus: &[usize],
    items: &[ColiItem],
    layers: usize,
) -> Option<Vec<usize>> {
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

fn valid_coli_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= COLI_MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The trunk as COLI_PLACE items: Colibri's components (`lm_head` as
/// `lmhead`) and the others, passed through as written.
struct TrunkItems {
    known: Vec<ColiItem>,
    passed: Vec<ColiItem>,
    /// Bytes of the known components on each card: Colibri charges them
    /// to the card's allowance.
    charged: Vec<u64>,
}

/// The trunk's items; a name Colibri cannot hold is left out, and the
/// components it does not know are said once.
fn trunk_items(at: &Placed, warnings: &mut Vec<String>) -> TrunkItems {
    let inst = at.inst;
    let mut known = Vec::new();
    let mut passed = Vec::new();
    let mut charged = vec![0u64; inst.resources.gpus()];
    for (name, members) in trunk_groups(inst) {
        let per_layer: Vec<(usize, ColiTarget)> = members
            .iter()
            .map(|&(layer, o)| (layer.unwrap_or(0), at.target(o)))
            .collect();
        let coli_name = if name == "lm_head" {
            Some("lmhead")
        } else {
            COLI_COMPONENTS[1..].iter().copied().find(|&c| c == name)
        };
        match coli_name {
            Some(coli_name) => {
                for &(_, o) in &members {
                    if let Place::Gpu(g) = at.place(o) {
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
    TrunkItems {
        known,
        passed,
        charged,
    }
}

/// What COLI_PLACE and COLI_GPUS say.
pub(super) struct ColiList {
    /// `experts=<target>`: the one card holding the plan's GPU experts, or
    /// the CPU when none (and no trunk piece) needs a card; `None` when the
    /// experts follow COLI_GPUS.
    pub(super) experts_item: Option<ColiTarget>,
    /// COLI_PLACE: the experts item, the known trunk, the passed trunk.
    pub(super) items: Vec<ColiItem>,
    /// Cards the plan puts experts on.
    pub(super) expert_cards: BTreeSet<usize>,
    /// COLI_GPUS: the expert cards, then the other trunk cards.
    pub(super) coli_gpus: Vec<usize>,
    /// Trunk bytes of Colibri's components on each card ([`TrunkItems`]).
    pub(super) charged: Vec<u64>,
}

impl ColiList {
    /// The list of the plan; warnings for the trunk it cannot name.
    pub(super) fn new(at: &Placed, warnings: &mut Vec<String>) -> ColiList {
        let TrunkItems {
            known,
            passed,
            charged,
        } = trunk_items(at, warnings);
        // Experts: one card pins them (`experts=<dev>`), none turns the tier off
        // unless a trunk piece needs a card, several follow COLI_GPUS.
        let expert_cards: BTreeSet<usize> = at
            .inst
            .expert_ids
            .iter()
            .flatten()
            .filter_map(|&o| match at.place(o) {
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
        ColiList {
            experts_item,
            items,
            expert_cards,
            coli_gpus,
            charged,
        }
    }

    /// What Colibri's parser drops: items past the first
    /// [`COLI_MAX_ITEMS`], segments past [`COLI_MAX_SEGMENTS`] or a spec
    /// longer than [`COLI_MAX_SPEC`].
    pub(super) fn grammar_warnings(&self, warnings: &mut Vec<String>) {
        let items = &self.items;
        if items.len() > COLI_MAX_ITEMS {
            warnings.push(format!(
                "COLI_PLACE has {} items; Colibri reads the first {COLI_MAX_ITEMS} and keeps {} at the default (the CPU)",
                items.len(),
                join(items[COLI_MAX_ITEMS..].iter().map(|i| format!("`{}`", i.name)), ", ")
            ));
        }
        for item in items {
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
    }
}

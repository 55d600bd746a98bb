//! User constraints on a placement, as first-class inputs: pins (an expert,
//! a layer's routed experts or a trunk component on a given place),
//! absolute per-place budgets, layers whose routed experts stay whole on
//! one place, and at most K places per layer's experts. They come from the
//! command line, a constraints file (YAML) or a plan that recorded them;
//! each keeps where it came from, so that an infeasible set is refused in
//! one line naming the constraint and its file.
//!
//! `Instance::constrain` compiles them: pins restrict `Instance::allowed`,
//! budgets lower the capacities, and keep-whole and at-most-K become
//! groups of objects whose distinct places are counted
//! (`Instance::check_feasible` refuses a placement that breaks any).

use crate::cost::{Instance, Place};
use crate::error::{from_yaml, read_document, PlannerError, Result};
use crate::units::{parse_size, Bytes};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// What a pin places: `L3.experts.17` (expert 17 of transformer layer 3),
/// `L3.experts` (all routed experts of layer 3), `L3.attn` (the trunk
/// component `attn` of layer 3) or `lm_head` (a trunk component of no layer).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Expert { layer: usize, expert: usize },
    LayerExperts { layer: usize },
    Trunk { name: String, layer: Option<usize> },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Expert { layer, expert } => write!(f, "L{layer}.experts.{expert}"),
            Target::LayerExperts { layer } => write!(f, "L{layer}.experts"),
            Target::Trunk {
                name,
                layer: Some(l),
            } => write!(f, "L{l}.{name}"),
            Target::Trunk { name, layer: None } => f.write_str(name),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let form = "name L<layer>.experts.<expert>, L<layer>.experts, L<layer>.<trunk name> or a trunk name";
        let layered = s
            .strip_prefix('L')
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(layer, rest)| Some((layer.parse::<usize>().ok()?, rest)));
        match layered {
            Some((layer, "experts")) => Ok(Target::LayerExperts { layer }),
            Some((layer, rest)) => match rest.strip_prefix("experts.") {
                Some(e) => e
                    .parse()
                    .map(|expert| Target::Expert { layer, expert })
                    .map_err(|_| format!("`{s}`: `{e}` is not an expert number; {form}")),
                None if !rest.is_empty() => Ok(Target::Trunk {
                    name: rest.to_string(),
                    layer: Some(layer),
                }),
                None => Err(format!("`{s}` names nothing; {form}")),
            },
            None if !s.is_empty() && !s.contains(['=', ' ']) => Ok(Target::Trunk {
                name: s.to_string(),
                layer: None,
            }),
            None => Err(format!("`{s}` names nothing; {form}")),
        }
    }
}

/// One constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// `target` lives at `place`.
    Pin { target: Target, place: Place },
    /// At most `bytes` at a GPU or RAM place (the lesser of this and the
    /// profile's capacity counts).
    Budget { place: Place, bytes: Bytes },
    /// The routed experts of transformer layer `layer` (every MoE layer when
    /// `None`) all on one place.
    KeepWhole { layer: Option<usize> },
    /// The routed experts of every MoE layer on at most `places` places.
    MaxPlacesPerLayer { places: usize },
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constraint::Pin { target, place } => write!(f, "pin {target}={place}"),
            Constraint::Budget { place, bytes } => write!(f, "budget {place}={bytes}"),
            Constraint::KeepWhole { layer: Some(l) } => write!(f, "keep-whole L{l}"),
            Constraint::KeepWhole { layer: None } => write!(f, "keep-whole all"),
            Constraint::MaxPlacesPerLayer { places } => {
                write!(f, "max-places-per-layer {places}")
            }
        }
    }
}

/// A constraint and where it came from: a flag (`--pin`), a constraints
/// file or the plan that recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced {
    pub constraint: Constraint,
    pub source: String,
}

impl fmt::Display for Sourced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` (from {})", self.constraint, self.source)
    }
}

/// Parses `TARGET=PLACE` (`--pin`).
pub fn parse_pin(text: &str) -> std::result::Result<Constraint, String> {
    let (target, place) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not TARGET=PLACE, such as L3.experts=gpu:0"))?;
    Ok(Constraint::Pin {
        target: target.trim().parse()?,
        place: place.trim().parse()?,
    })
}

/// Parses `PLACE=SIZE` (`--budget gpu:0=20GiB`).
pub fn parse_budget(text: &str) -> std::result::Result<Constraint, String> {
    let (place, size) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not PLACE=SIZE, such as gpu:0=20GiB"))?;
    Ok(Constraint::Budget {
        place: place.trim().parse()?,
        bytes: parse_size(size.trim())?,
    })
}

/// Parses `all` or `L<layer>` (`--keep-whole`).
pub fn parse_keep_whole(text: &str) -> std::result::Result<Constraint, String> {
    if text == "all" {
        return Ok(Constraint::KeepWhole { layer: None });
    }
    text.strip_prefix('L')
        .and_then(|l| l.parse().ok())
        .map(|l| Constraint::KeepWhole { layer: Some(l) })
        .ok_or_else(|| format!("`{text}` is not `all` or a layer such as L3"))
}

/// Parses a positive count of places (`--max-places-per-layer`).
pub fn parse_max_places(text: &str) -> std::result::Result<Constraint, String> {
    match text.trim().parse::<usize>() {
        Ok(places) if places > 0 => Ok(Constraint::MaxPlacesPerLayer { places }),
        _ => Err(format!("`{text}` is not a positive number of places")),
    }
}

/// The constraints file (YAML), and how a plan records its constraints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsFile {
    /// Target (`L3.experts.17`, `L3.experts`, `L3.attn`, `lm_head`) to
    /// place (`gpu:0`, `ram:1`, `disk:0`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<String, String>,
    /// GPU or RAM place (`gpu:0`) to the most bytes it may hold (`20 GiB`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budgets: BTreeMap<String, Bytes>,
    /// Layers (`L3`, or `all`) whose routed experts stay on one place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_whole: Vec<String>,
    /// The most places the routed experts of any one layer may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_places_per_layer: Option<usize>,
}

/// The keys a constraints file may have.
const KEYS: [&str; 4] = ["pins", "budgets", "keep_whole", "max_places_per_layer"];
const FILE_FIX: &str = "see `residency plan --help` and docs/zero-to-plan.md (Constraints)";

impl ConstraintsFile {
    /// Reads a constraints file, refusing an unknown key with the known one
    /// nearest to it.
    pub fn read(path: &Path) -> Result<Vec<Sourced>> {
        let text = read_document(path)?;
        let raw: serde_norway::Value = from_yaml(&text, path, FILE_FIX)?;
        if let serde_norway::Value::Mapping(map) = &raw {
            for key in map.keys() {
                let key = key.as_str().unwrap_or_default();
                if !KEYS.contains(&key) {
                    return Err(PlannerError::input(
                        path,
                        format!("key `{key}`"),
                        format!(
                            "is not a constraint, did you mean `{}`?",
                            crate::names::nearest(key, &KEYS)
                        ),
                        FILE_FIX,
                    ));
                }
            }
        }
        let file: ConstraintsFile = if raw.is_null() {
            ConstraintsFile::default()
        } else {
            from_yaml(&text, path, FILE_FIX)?
        };
        file.parse(path)
    }

    /// The constraints this file gives, each with `path` as its source.
    pub fn parse(&self, path: &Path) -> Result<Vec<Sourced>> {
        let source = path.display().to_string();
        let mut out = Vec::new();
        let mut push = |key: String, parsed: std::result::Result<Constraint, String>| {
            let constraint = parsed
                .map_err(|problem| PlannerError::input(path, key.as_str(), problem, FILE_FIX))?;
            out.push(Sourced {
                constraint,
                source: source.clone(),
            });
            Ok::<(), PlannerError>(())
        };
        for (target, place) in &self.pins {
            push(
                format!("pins.{target}"),
                parse_pin(&format!("{target}={place}")),
            )?;
        }
        for (place, bytes) in &self.budgets {
            let parsed = place.parse().map(|place| Constraint::Budget {
                place,
                bytes: *bytes,
            });
            push(format!("budgets.{place}"), parsed)?;
        }
        for (i, layer) in self.keep_whole.iter().enumerate() {
            push(format!("keep_whole[{i}]"), parse_keep_whole(layer))?;
        }
        if let Some(places) = self.max_places_per_layer {
            push(
                "max_places_per_layer".into(),
                parse_max_places(&places.to_string()),
            )?;
        }
        Ok(out)
    }

    /// The file form of `constraints` (what a plan records).
    pub fn of(constraints: &[Sourced]) -> ConstraintsFile {
        let mut file = ConstraintsFile::default();
        for c in constraints {
            match &c.constraint {
                Constraint::Pin { target, place } => {
                    file.pins.insert(target.to_string(), place.to_string());
                }
                Constraint::Budget { place, bytes } => {
                    file.budgets.insert(place.to_string(), *bytes);
                }
                Constraint::KeepWhole { layer } => file.keep_whole.push(match layer {
                    Some(l) => format!("L{l}"),
                    None => "all".into(),
                }),
                Constraint::MaxPlacesPerLayer { places } => {
                    file.max_places_per_layer = Some(*places)
                }
            }
        }
        file
    }

    pub fn is_empty(&self) -> bool {
        *self == ConstraintsFile::default()
    }
}

/// Objects of one MoE layer whose distinct places are counted.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub objects: Vec<usize>,
    pub max_places: usize,
    /// The constraint that made it, for messages.
    pub reason: String,
}

/// The constraints compiled onto an instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compiled {
    /// The constraints as given, in order.
    pub given: Vec<Sourced>,
    /// Per object, the place it is pinned to (empty without pins).
    pub pins: Vec<Option<Place>>,
    pub groups: Vec<Group>,
}

impl Compiled {
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    /// Whether some routed expert is pinned, or some layer's places are
    /// counted: what the priced relaxation does not carry.
    pub fn beyond_relaxation(&self, inst: &Instance) -> bool {
        !self.groups.is_empty()
            || (self.pins.iter().enumerate())
                .any(|(o, p)| p.is_some() && inst.objects[o].is_expert())
    }

    /// The first group `placement` spreads over more places than allowed,
    /// with its count.
    pub fn broken_group(&self, placement: &[usize]) -> Option<(&Group, usize)> {
        self.groups.iter().find_map(|g| {
            let n = distinct(g.objects.iter().map(|&o| placement[o]));
            (n > g.max_places).then_some((g, n))
        })
    }
}

/// Number of distinct values.
fn distinct(values: impl Iterator<Item = usize>) -> usize {
    let mut seen: Vec<usize> = values.collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// What the constraints say before they are compiled: each object's pin,
/// the MoE ordinals kept whole and the tightest K, each with the
/// constraint that set it, for messages.
struct Gathered<'a> {
    pinned_by: Vec<Option<&'a Sourced>>,
    keep_whole: BTreeMap<usize, &'a Sourced>,
    max_places: Option<(usize, &'a Sourced)>,
}

impl Instance {
    /// Compiles `constraints` onto this instance (replacing any before):
    /// checks each against the model and profile, lowers capacities to the
    /// budgets, and refuses a set no placement can meet, in one line naming
    /// the constraint that breaks and its source. Call after the context is
    /// reserved.
    pub fn constrain(&mut self, constraints: &[Sourced]) -> Result<()> {
        let moe_layers = self.moe_layers()?;
        let mut gathered = Gathered {
            pinned_by: vec![None; self.objects.len()],
            keep_whole: BTreeMap::new(),
            max_places: None,
        };
        for c in constraints {
            self.gather(c, &moe_layers, &mut gathered)?;
        }
        let mut compiled = Compiled {
            given: constraints.to_vec(),
            groups: self.layer_groups(&gathered, &moe_layers),
            ..Compiled::default()
        };
        if gathered.pinned_by.iter().any(Option::is_some) {
            compiled.pins = gathered
                .pinned_by
                .iter()
                .map(|c| match c.map(|c| &c.constraint) {
                    Some(Constraint::Pin { place, .. }) => Some(*place),
                    _ => None,
                })
                .collect();
        }
        self.constraints = compiled;
        self.check_constraints_holdable(&gathered.pinned_by)
    }

    /// Checks one constraint against the model and profile and adds it to
    /// `gathered`; a budget lowers its place's capacity at once.
    fn gather<'a>(
        &mut self,
        c: &'a Sourced,
        moe_layers: &[usize],
        gathered: &mut Gathered<'a>,
    ) -> Result<()> {
        let refuse = |problem: String, fix: &str| {
            Err(PlannerError::input(
                Path::new(&c.source),
                c.constraint.to_string(),
                problem,
                fix,
            ))
        };
        match &c.constraint {
            Constraint::Pin { target, place } => {
                if !self.places.contains(place) {
                    return refuse(
                        format!("the profile has no place {place}"),
                        "pin to a place of the profile (plans list them as gpu:0, ram:0, disk:0)",
                    );
                }
                let objects = match self.target_objects(target, moe_layers) {
                    Ok(objects) => objects,
                    Err(problem) => {
                        return refuse(
                            problem,
                            "name a layer, expert or trunk component of the model",
                        )
                    }
                };
                for o in objects {
                    if !self.allowed_kind(o, *place) {
                        return refuse(
                            format!(
                                "{} cannot live at {place}",
                                crate::solution::describe(self, o)
                            ),
                            "pin trunk components to a GPU or RAM place",
                        );
                    }
                    if let Some(other) = gathered.pinned_by[o].filter(|other| {
                        !matches!(other.constraint, Constraint::Pin { place: p, .. } if p == *place)
                    }) {
                        return Err(PlannerError::Infeasible(format!(
                            "{c} and {other} pin {} to two places; drop one",
                            crate::solution::describe(self, o)
                        )));
                    }
                    gathered.pinned_by[o] = Some(c);
                }
            }
            Constraint::Budget { place, bytes } => {
                let capacity = match place {
                    Place::Gpu(g) if *g < self.resources.gpus() => {
                        &mut self.resources.gpu_capacity_bytes[*g]
                    }
                    Place::Ram(n) if *n < self.resources.numa_nodes() => {
                        &mut self.resources.ram_capacity_bytes[*n]
                    }
                    _ => {
                        return refuse(
                            format!("{place} is not a GPU or RAM place of the profile (drives hold anything)"),
                            "give budgets to gpu:N or ram:N places of the profile",
                        )
                    }
                };
                *capacity = (*capacity).min(bytes.0);
            }
            Constraint::KeepWhole { layer } => {
                let ordinals: Vec<usize> = match layer {
                    None => (0..moe_layers.len()).collect(),
                    Some(l) => match moe_layers.iter().position(|m| m == l) {
                        Some(ordinal) => vec![ordinal],
                        None => {
                            return refuse(
                                format!(
                                    "layer {l} has no routed experts (MoE layers: {})",
                                    layer_list(moe_layers)
                                ),
                                "name a MoE layer of the model",
                            )
                        }
                    },
                };
                for m in ordinals {
                    gathered.keep_whole.entry(m).or_insert(c);
                }
            }
            Constraint::MaxPlacesPerLayer { places } => {
                if *places == 0 {
                    return refuse("is zero".into(), "give at least one place");
                }
                if gathered.max_places.is_none_or(|(k, _)| *places < k) {
                    gathered.max_places = Some((*places, c));
                }
            }
        }
        Ok(())
    }

    /// One group a MoE layer kept whole (at most 1 place) or held to the
    /// tightest K, where K is fewer than its experts.
    fn layer_groups(&self, gathered: &Gathered<'_>, moe_layers: &[usize]) -> Vec<Group> {
        let mut groups = Vec::new();
        for (m, ids) in self.expert_ids.iter().enumerate() {
            let (limit, by) = match (gathered.keep_whole.get(&m), gathered.max_places) {
                (Some(c), _) => (1, *c),
                (None, Some((k, c))) => (k, c),
                (None, None) => continue,
            };
            if limit >= ids.len() {
                continue;
            }
            groups.push(Group {
                objects: ids.clone(),
                max_places: limit,
                reason: format!("{by} on L{}", moe_layers[m]),
            });
        }
        groups
    }

    /// The objects `target` names, or why it names none.
    fn target_objects(
        &self,
        target: &Target,
        moe_layers: &[usize],
    ) -> std::result::Result<Vec<usize>, String> {
        let ordinal = |layer: usize| {
            moe_layers.iter().position(|&m| m == layer).ok_or_else(|| {
                format!(
                    "layer {layer} has no routed experts (MoE layers: {})",
                    layer_list(moe_layers)
                )
            })
        };
        match target {
            Target::LayerExperts { layer } => Ok(self.expert_ids[ordinal(*layer)?].clone()),
            Target::Expert { layer, expert } => {
                let ids = &self.expert_ids[ordinal(*layer)?];
                ids.get(*expert)
                    .map(|&o| vec![o])
                    .ok_or_else(|| format!("layer {layer} has experts 0..{}", ids.len()))
            }
            Target::Trunk { name, layer } => {
                let found: Vec<usize> = self
                    .trunk()
                    .filter(|(_, n, l)| n == name && l == layer)
                    .map(|(o, ..)| o)
                    .collect();
                if found.is_empty() {
                    let mut names: Vec<&str> = self.trunk().map(|(_, n, _)| n).collect();
                    names.dedup();
                    let known = match layer {
                        Some(l) => format!("layer {l}'s trunk components"),
                        None => "the trunk components of no layer".into(),
                    };
                    return Err(format!(
                        "is not one of {known} (the model's trunk names: {})",
                        names.join(", ")
                    ));
                }
                Ok(found)
            }
        }
    }

    /// Refuses what no placement can meet: pins beyond a place's capacity
    /// (its budget), a group pinned to more places than it may use, a layer
    /// kept whole that fits no place it may use, or a trunk that no longer
    /// fits under the budgets.
    fn check_constraints_holdable(&self, pinned_by: &[Option<&Sourced>]) -> Result<()> {
        let budget_of = |place: Place| {
            self.constraints
                .given
                .iter()
                .find(|c| matches!(c.constraint, Constraint::Budget { place: p, .. } if p == place))
        };
        let capacity_note = |place: Place| match budget_of(place) {
            Some(b) => format!("its budget {b}"),
            None => "its capacity".into(),
        };
        for &place in &self.places {
            let Some(capacity) = self.resources.capacity_bytes(place) else {
                continue;
            };
            let pinned: Vec<usize> = (0..self.objects.len())
                .filter(|&o| self.constraints.pins.get(o).copied().flatten() == Some(place))
                .collect();
            let bytes: u64 = pinned
                .iter()
                .map(|&o| self.objects[o].bytes_at(place))
                .sum();
            if bytes > capacity {
                let by = pinned_by[pinned[0]].expect("pinned objects have a pin");
                return Err(PlannerError::Infeasible(format!(
                    "{by}: pins put {} at {place}, more than {} ({}); pin less there or raise the budget",
                    Bytes(bytes),
                    capacity_note(place),
                    Bytes(capacity)
                )));
            }
        }
        for g in &self.constraints.groups {
            let pinned_places: Vec<usize> = g
                .objects
                .iter()
                .filter_map(|&o| self.constraints.pins.get(o).copied().flatten())
                .map(|q| self.place_index(q))
                .collect();
            if distinct(pinned_places.iter().copied()) > g.max_places {
                return Err(PlannerError::Infeasible(format!(
                    "{}: its pins alone use {} places; pin the layer's experts to at most {}",
                    g.reason,
                    distinct(pinned_places.into_iter()),
                    g.max_places
                )));
            }
            if g.max_places == 1 {
                let fits = self.places.iter().any(|&q| {
                    g.objects.iter().all(|&o| self.allowed(o, q))
                        && self.resources.capacity_bytes(q).is_none_or(|c| {
                            g.objects
                                .iter()
                                .map(|&o| self.objects[o].bytes_at(q))
                                .sum::<u64>()
                                <= c
                        })
                });
                if !fits {
                    return Err(PlannerError::Infeasible(format!(
                        "{}: the layer's experts fit whole on no place they may use (no drive to stream them from, or pinned to a place too small); drop it or add room",
                        g.reason
                    )));
                }
            }
        }
        let budgets: Vec<&Sourced> = (self.constraints.given.iter())
            .filter(|c| matches!(c.constraint, Constraint::Budget { .. }))
            .collect();
        if let (Some(first), Err(e)) = (budgets.first(), self.check_holdable(Path::new(""))) {
            return Err(PlannerError::Infeasible(format!(
                "{first}: under the budgets, {}",
                e.to_string()
                    .trim_start_matches("infeasible: ")
                    .trim_start_matches(": ")
            )));
        }
        Ok(())
    }
}

/// `1..=26`-style list of layers, for messages.
fn layer_list(layers: &[usize]) -> String {
    match (layers.first(), layers.last()) {
        (Some(a), Some(b)) if b - a + 1 == layers.len() => format!("{a}..={b}"),
        _ => layers
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests;

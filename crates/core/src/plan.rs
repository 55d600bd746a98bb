//! The plan file (docs/design.md §5): what the planner writes and `explain`, `diff`,
//! `validate` and the executor read. JSON or YAML with the same structure,
//! chosen by the file's extension; written atomically.

use crate::constraints::{ConstraintsFile, Sourced};
use crate::cost::{Instance, ObjectKind, Place};
use crate::error::{from_yaml, read_document, write_atomic, PlannerError, Result};
use crate::kv::KvGroup;
use crate::solution::Solution;
use crate::units::{Bytes, Seconds};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

pub const FORMAT: &str = "residency-plan";
pub const VERSION: u32 = 1;

/// Name and content hash of an input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputRef {
    pub name: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeatRef {
    pub source: String,
    pub format: String,
    pub sha256: String,
    /// Tokens observed (the largest per-layer count), null when unknown.
    pub tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanInputs {
    pub profile: InputRef,
    pub model: InputRef,
    pub heat: HeatRef,
    /// The KV groups file, when the plan places KV prefix groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<InputRef>,
    /// Tokens of KV cache kept free on the cards before solving (`plan
    /// --context-tokens`); engines are started with this context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The user's constraints the plan honours (`plan --pin`, `--budget`,
    /// `--keep-whole`, `--max-places-per-layer`, `--constraints`), in the
    /// constraints file's form; `validate`, `explain`, `diff` and `plan
    /// --from` hold the placement to them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<ConstraintsFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrunkPlacement {
    pub name: String,
    pub layer: Option<usize>,
    pub bytes: u64,
    pub place: String,
}

/// A KV prefix group (docs/design.md §4.6) as given, and where it is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvPlacement {
    pub name: String,
    pub bytes: Bytes,
    pub reuses_per_token: f64,
    pub prefill_seconds: Seconds,
    /// `gpu:g` or `ram:n`; null when not kept (recomputed on reuse).
    pub place: Option<String>,
    /// Prefill seconds per generated token the group still costs where it
    /// is (its share of `token_seconds`).
    pub token_seconds: f64,
}

impl KvPlacement {
    pub fn group(&self) -> KvGroup {
        KvGroup {
            name: self.name.clone(),
            bytes: self.bytes,
            reuses_per_token: self.reuses_per_token,
            prefill_seconds: self.prefill_seconds,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub place: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub experts: usize,
    pub trunk: usize,
    /// KV groups kept here.
    #[serde(default)]
    pub kv: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    pub token_seconds: f64,
    pub tok_per_s: f64,
    pub lower_bound: f64,
    pub gap: f64,
    pub bound_method: String,
    pub greedy_token_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageReport {
    pub stage: String,
    pub seconds: f64,
    pub bottleneck: String,
    /// Each resource's own work in the stage: `G` (with sync), `C` (without felt I/O), `D`.
    pub resources: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SolverReport {
    pub method: String,
    pub seconds: f64,
    pub time_limit_seconds: f64,
    pub proven_optimal: bool,
}

/// The plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub format: String,
    pub version: u32,
    pub created_by: String,
    pub inputs: PlanInputs,
    pub places: Vec<String>,
    /// `experts[l][e]`: index into `places` of expert `e` of MoE ordinal `l`.
    pub experts: Vec<Vec<usize>>,
    pub trunk: Vec<TrunkPlacement>,
    /// KV prefix groups (docs/design.md §4.6), in input order; empty without `--kv`.
    #[serde(default)]
    pub kv: Vec<KvPlacement>,
    pub usage: Vec<Usage>,
    pub objective: Objective,
    pub stages: Vec<StageReport>,
    pub solver: SolverReport,
}

/// sha256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, or of a directory as the sha256 of its sorted
/// `relative-path sha256` lines (docs/design.md §5).
pub fn sha256_of_path(path: &Path) -> Result<String> {
    if !path.is_dir() {
        return Ok(sha256_hex(&crate::error::read_file(path)?));
    }
    let mut files = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| PlannerError::io(&dir, e))? {
            let entry = entry.map_err(|e| PlannerError::io(&dir, e))?;
            let p = entry.path();
            if p.is_dir() {
                pending.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let mut lines: Vec<String> = files
        .iter()
        .map(|f| {
            let relative = f
                .strip_prefix(path)
                .unwrap_or(f)
                .to_string_lossy()
                .into_owned();
            Ok(format!(
                "{relative} {}",
                sha256_hex(&crate::error::read_file(f)?)
            ))
        })
        .collect::<Result<_>>()?;
    lines.sort();
    Ok(sha256_hex(lines.join("\n").as_bytes()))
}

impl Plan {
    /// The plan of a solved instance; `token_seconds` is the cost model's
    /// value of exactly this placement.
    pub fn new(
        inst: &Instance,
        solution: &Solution,
        inputs: PlanInputs,
        time_limit_seconds: f64,
    ) -> Plan {
        let r = &inst.resources;
        let evaluation = inst.evaluate(&solution.placement);
        let places: Vec<String> = inst.profile_places().map(|q| q.to_string()).collect();
        let experts = inst
            .expert_ids
            .iter()
            .map(|ids| ids.iter().map(|&o| solution.placement[o]).collect())
            .collect();
        let trunk = inst
            .trunk()
            .map(|(o, name, layer)| TrunkPlacement {
                name: name.to_string(),
                layer,
                bytes: inst.objects[o].gpu_bytes,
                place: places[solution.placement[o]].clone(),
            })
            .collect();
        let usage = inst
            .places
            .iter()
            .enumerate()
            .filter_map(|(q, &place)| {
                let capacity_bytes = r.capacity_bytes(place)?;
                let here = || (0..inst.objects.len()).filter(move |&o| solution.placement[o] == q);
                Some(Usage {
                    place: place.to_string(),
                    capacity_bytes,
                    used_bytes: here().map(|o| inst.objects[o].bytes_at(place)).sum(),
                    experts: here().filter(|&o| inst.objects[o].is_expert()).count(),
                    trunk: here().filter(|&o| inst.objects[o].is_trunk()).count(),
                    kv: here().filter(|&o| inst.objects[o].is_kv()).count(),
                })
            })
            .collect();
        let kv = inst
            .kv_groups()
            .map(|(o, group)| {
                let place = inst.places[solution.placement[o]];
                KvPlacement {
                    name: group.name,
                    bytes: group.bytes,
                    reuses_per_token: group.reuses_per_token,
                    prefill_seconds: group.prefill_seconds,
                    place: (place != Place::Recompute).then(|| place.to_string()),
                    token_seconds: r.kv_seconds(&inst.objects[o], place),
                }
            })
            .collect();
        let stages = inst
            .stages
            .iter()
            .enumerate()
            .map(|(s, stage)| {
                let loads = &evaluation.loads[s];
                let mut resources = serde_json::Map::new();
                for place in inst.places.iter().copied() {
                    let work = match place {
                        Place::Gpu(g) => loads.gpu_seconds(r, g),
                        Place::Ram(n) => loads.cpu_seconds(r, n),
                        Place::Disk(d) => loads.drive[d],
                        Place::Recompute => loads.prefill,
                    };
                    resources.insert(place.to_string(), serde_json::Value::from(work));
                }
                StageReport {
                    stage: stage.name.clone(),
                    seconds: evaluation.stage_seconds[s],
                    bottleneck: evaluation.bottlenecks[s].to_string(),
                    resources,
                }
            })
            .collect();
        let token_seconds = evaluation.token_seconds;
        Plan {
            format: FORMAT.into(),
            version: VERSION,
            created_by: format!("residency {}", env!("CARGO_PKG_VERSION")),
            inputs,
            places,
            experts,
            trunk,
            kv,
            usage,
            objective: Objective {
                token_seconds,
                tok_per_s: 1.0 / token_seconds,
                lower_bound: solution.lower_bound_seconds,
                gap: token_seconds / solution.lower_bound_seconds - 1.0,
                bound_method: solution.bound_method.to_string(),
                greedy_token_seconds: solution.greedy_token_seconds,
            },
            stages,
            solver: SolverReport {
                method: solution.method.clone(),
                seconds: solution.solve_seconds,
                time_limit_seconds,
                proven_optimal: solution.proven_optimal,
            },
        }
    }

    /// Writes JSON, or YAML when the extension is `.yaml`/`.yml`; atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = if is_yaml(path) {
            serde_norway::to_string(self).expect("a plan serialises")
        } else {
            serde_json::to_string_pretty(self).expect("a plan serialises") + "\n"
        };
        write_atomic(path, text.as_bytes())
    }

    pub fn read(path: &Path) -> Result<Plan> {
        let text = read_document(path)?;
        let fix = "give a plan written by `residency plan`";
        let plan: Plan = if is_yaml(path) {
            from_yaml(&text, path, fix)?
        } else {
            serde_json::from_str(&text).map_err(|e| {
                PlannerError::input(
                    path,
                    format!("line {} column {}", e.line(), e.column()),
                    strip_json_location(&e),
                    fix,
                )
            })?
        };
        if plan.format != FORMAT || plan.version != VERSION {
            return Err(PlannerError::input(
                path,
                "format",
                format!(
                    "is `{}` version {}, expected `{FORMAT}` version {VERSION}",
                    plan.format, plan.version
                ),
                fix,
            ));
        }
        plan.check(path)?;
        Ok(plan)
    }

    /// Checks what a plan says of itself, before any command uses it: its
    /// places are distinct places of a profile (`gpu:0`, `ram:0`,
    /// `disk:0`) with one usage row per GPU and RAM place, every MoE layer places at least
    /// one expert and every place index is in `places`, each trunk
    /// component is listed once, on a GPU or in RAM, and each KV group is
    /// one the planner could price, kept in a place of the plan.
    fn check(&self, path: &Path) -> Result<()> {
        let err = |place: String, problem: String| {
            Err(PlannerError::input(
                path,
                place,
                problem,
                "give a plan written by `residency plan`, unedited",
            ))
        };
        for (i, name) in self.places.iter().enumerate() {
            match name.parse::<Place>() {
                Ok(q) if q.to_string() == *name => {}
                Ok(q) => return err(format!("places[{i}]"), format!("`{name}` is spelled `{q}`")),
                Err(problem) => return err(format!("places[{i}]"), problem),
            }
            if let Some(j) = self.places[..i].iter().position(|p| p == name) {
                return err(
                    format!("places[{i}]"),
                    format!("`{name}` is also places[{j}]"),
                );
            }
        }
        let used: Vec<&str> = self.usage.iter().map(|u| u.place.as_str()).collect();
        let memory: Vec<&str> = (self.places.iter().map(String::as_str))
            .filter(|p| !p.starts_with("disk"))
            .collect();
        if used != memory {
            return err(
                "usage".into(),
                format!("lists places {used:?}, `places` the GPU and RAM places {memory:?}"),
            );
        }
        for (l, row) in self.experts.iter().enumerate() {
            if row.is_empty() {
                return err(format!("experts[{l}]"), "places no expert".into());
            }
            if let Some(e) = row.iter().position(|&q| q >= self.places.len()) {
                return err(
                    format!("experts[{l}][{e}]"),
                    format!(
                        "is place index {}, but `places` has {}",
                        row[e],
                        self.places.len()
                    ),
                );
            }
        }
        for (i, t) in self.trunk.iter().enumerate() {
            if let Some(j) = self.trunk[..i]
                .iter()
                .position(|u| u.name == t.name && u.layer == t.layer)
            {
                return err(
                    format!("trunk[{i}]"),
                    format!("`{}` layer {:?} is also trunk[{j}]", t.name, t.layer),
                );
            }
            if !self.places.contains(&t.place) || t.place.starts_with("disk") {
                return err(
                    format!("trunk[{i}].place"),
                    format!("`{}` is not a GPU or RAM place of `places`", t.place),
                );
            }
        }
        self.constraints(path)?;
        if let Some((i, field, problem)) = crate::kv::check_groups(&self.kv_groups()) {
            return err(format!("kv[{i}].{field}"), problem);
        }
        for (i, k) in self.kv.iter().enumerate() {
            if let Some(place) = k.place.as_ref().filter(|p| !self.places.contains(p)) {
                return err(
                    format!("kv[{i}].place"),
                    format!("`{place}` is not a place of `places`"),
                );
            }
        }
        Ok(())
    }

    /// The constraints this plan recorded, each sourced to `path` (the
    /// plan file), for the instance its placement is read on.
    pub fn constraints(&self, path: &Path) -> Result<Vec<Sourced>> {
        self.inputs
            .constraints
            .as_ref()
            .map_or(Ok(Vec::new()), |c| c.parse(path))
    }

    /// The KV groups this plan placed, to add to an instance built from the
    /// same inputs before reading its placement.
    pub fn kv_groups(&self) -> Vec<KvGroup> {
        self.kv.iter().map(KvPlacement::group).collect()
    }

    /// The placement this plan encodes for `inst` (object -> place index),
    /// checking that it matches the instance's shape, places, trunk and KV
    /// groups (add them with `Instance::add_kv_groups(&plan.kv_groups())`).
    pub fn placement(&self, inst: &Instance, path: &Path) -> Result<Vec<usize>> {
        let err = |place: String, problem: String| {
            Err(PlannerError::input(
                path,
                place,
                problem,
                "plan with the same profile and model, or pass the ones this plan was made with",
            ))
        };
        let places: Vec<String> = inst.profile_places().map(|q| q.to_string()).collect();
        if self.places != places {
            return err(
                "places".into(),
                format!("are {:?}, the profile has {:?}", self.places, places),
            );
        }
        let mut placement = vec![usize::MAX; inst.objects.len()];
        if self.experts.len() != inst.expert_ids.len() {
            return err(
                "experts".into(),
                format!(
                    "has {} MoE layers, the model {}",
                    self.experts.len(),
                    inst.expert_ids.len()
                ),
            );
        }
        for (l, (row, ids)) in self.experts.iter().zip(&inst.expert_ids).enumerate() {
            if row.len() != ids.len() {
                return err(
                    format!("experts[{l}]"),
                    format!("has {} experts, the model {}", row.len(), ids.len()),
                );
            }
            for (e, (&q, &o)) in row.iter().zip(ids).enumerate() {
                if q >= places.len() {
                    return err(
                        format!("experts[{l}][{e}]"),
                        format!("place index {q} is out of range"),
                    );
                }
                placement[o] = q;
            }
        }
        for (i, t) in self.trunk.iter().enumerate() {
            let found = inst.trunk_ids.iter().copied().find(|&o| {
                matches!(&inst.objects[o].kind, ObjectKind::Trunk { name, layer } if *name == t.name && *layer == t.layer)
            });
            let Some(o) = found else {
                return err(
                    format!("trunk[{i}]"),
                    format!(
                        "`{}` layer {:?} is not a trunk component of the model",
                        t.name, t.layer
                    ),
                );
            };
            if t.bytes != inst.objects[o].gpu_bytes {
                return err(
                    format!("trunk[{i}].bytes"),
                    format!(
                        "is {}, the model's `{}` has {}",
                        t.bytes, t.name, inst.objects[o].gpu_bytes
                    ),
                );
            }
            let Some(q) = places.iter().position(|p| *p == t.place) else {
                return err(
                    format!("trunk[{i}].place"),
                    format!("`{}` is not a place of the profile", t.place),
                );
            };
            placement[o] = q;
        }
        let kv: Vec<(usize, KvGroup)> = inst.kv_groups().collect();
        if kv.len() != self.kv.len() {
            return err(
                "kv".into(),
                format!("has {} groups, the instance {}", self.kv.len(), kv.len()),
            );
        }
        for (i, (k, (o, group))) in self.kv.iter().zip(kv).enumerate() {
            if k.group() != group {
                return err(
                    format!("kv[{i}]"),
                    format!(
                        "`{}` differs from the instance's group `{}`",
                        k.name, group.name
                    ),
                );
            }
            placement[o] = match &k.place {
                None => inst.place_index(Place::Recompute),
                Some(name) => match places.iter().position(|p| p == name) {
                    Some(q) => q,
                    None => {
                        return err(
                            format!("kv[{i}].place"),
                            format!("`{name}` is not a place of the profile"),
                        )
                    }
                },
            };
        }
        if let Some(o) = placement.iter().position(|&q| q == usize::MAX) {
            return err(
                "trunk".into(),
                format!("does not place {}", crate::solution::describe(inst, o)),
            );
        }
        if let Err(problem) = inst.check_feasible(&placement) {
            return err("placement".into(), problem);
        }
        Ok(placement)
    }
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// serde_json appends ` at line L column C`; the place is reported separately.
fn strip_json_location(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

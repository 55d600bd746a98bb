//! An instance compiled from a profile, a model and use rates: its stages,
//! objects, places and capacities, KV groups added, expert rates set.

use super::{Instance, Object, ObjectKind, Place, Resources, Stage, KV_STAGE};
use crate::constraints::Compiled;
use crate::heat::HeatTable;
use crate::kv::KvGroup;
use crate::model::{Model, StageKind};
use crate::profile::HardwareProfile;
use crate::units::{Bytes, Seconds};
use crate::{PlannerError, Result};
use std::path::Path;

impl Instance {
    /// Compiles profile, model and use rates (`rates[l][e]`, from heat) into an instance.
    pub fn new(profile: &HardwareProfile, model: &Model, rates: &[Vec<f64>]) -> Instance {
        let resources = Resources::from_profile(profile);
        let places = resources.places();
        let mut stages = Vec::new();
        let mut dense_stage = vec![usize::MAX; model.description.layers];
        let mut experts_stage = vec![usize::MAX; model.description.layers];
        let moe_layers = model.moe_layer_numbers();
        for layer in 0..model.description.layers {
            dense_stage[layer] = stages.len();
            stages.push(Stage {
                name: format!("L{layer}.dense"),
                kind: StageKind::Dense,
                objects: vec![],
            });
            if moe_layers.contains(&layer) {
                experts_stage[layer] = stages.len();
                stages.push(Stage {
                    name: format!("L{layer}.experts"),
                    kind: StageKind::Experts,
                    objects: vec![],
                });
            }
        }
        let head_stage = stages.len();
        stages.push(Stage {
            name: "head".into(),
            kind: StageKind::Head,
            objects: vec![],
        });

        let mut objects = Vec::new();
        let mut expert_ids = Vec::new();
        for (l, moe) in model.moe.iter().enumerate() {
            let stage = experts_stage[moe.layer];
            let mut ids = Vec::with_capacity(moe.experts);
            for (e, &use_rate) in rates[l].iter().enumerate() {
                ids.push(objects.len());
                stages[stage].objects.push(objects.len());
                objects.push(Object {
                    kind: ObjectKind::Expert { moe: l, expert: e },
                    stage,
                    use_rate,
                    gpu_bytes: moe.gpu_bytes,
                    ram_bytes: moe.ram_bytes,
                    disk_bytes: moe.disk_bytes,
                });
            }
            expert_ids.push(ids);
        }
        let mut trunk_ids = Vec::new();
        for t in &model.trunk {
            let stage = match (t.stage, t.layer) {
                (StageKind::Dense, Some(layer)) => dense_stage[layer],
                (StageKind::Experts, Some(layer)) => experts_stage[layer],
                _ => head_stage,
            };
            trunk_ids.push(objects.len());
            stages[stage].objects.push(objects.len());
            objects.push(Object {
                kind: ObjectKind::Trunk {
                    name: t.name.clone(),
                    layer: t.layer,
                },
                stage,
                use_rate: 1.0,
                gpu_bytes: t.bytes,
                ram_bytes: t.bytes,
                disk_bytes: t.bytes,
            });
        }
        Instance {
            resources,
            places,
            stages,
            objects,
            expert_ids,
            trunk_ids,
            kv_ids: Vec::new(),
            constraints: Compiled::default(),
        }
    }

    /// Adds KV prefix groups: a `kv` stage after the head holding them, and
    /// the `recompute` place for groups not kept. Call at most once.
    pub fn add_kv_groups(&mut self, groups: &[KvGroup]) {
        if groups.is_empty() {
            return;
        }
        debug_assert!(self.kv_ids.is_empty(), "KV groups are added once");
        let stage = self.stages.len();
        self.stages.push(Stage {
            name: KV_STAGE.into(),
            kind: StageKind::Head,
            objects: vec![],
        });
        self.places.push(Place::Recompute);
        for g in groups {
            let o = self.objects.len();
            self.kv_ids.push(o);
            self.stages[stage].objects.push(o);
            self.objects.push(Object {
                kind: ObjectKind::KvGroup {
                    name: g.name.clone(),
                    prefill_seconds: g.prefill_seconds.0,
                },
                stage,
                use_rate: g.reuses_per_token,
                gpu_bytes: g.bytes.0,
                ram_bytes: g.bytes.0,
                disk_bytes: 0,
            });
        }
    }

    /// The KV groups in input order: object id and the group.
    pub fn kv_groups(&self) -> impl Iterator<Item = (usize, KvGroup)> + '_ {
        self.kv_ids.iter().map(|&o| {
            let object = &self.objects[o];
            match &object.kind {
                ObjectKind::KvGroup {
                    name,
                    prefill_seconds,
                } => (
                    o,
                    KvGroup {
                        name: name.clone(),
                        bytes: Bytes(object.gpu_bytes),
                        reuses_per_token: object.use_rate,
                        prefill_seconds: Seconds(*prefill_seconds),
                    },
                ),
                _ => unreachable!("kv ids name KV groups"),
            }
        })
    }

    /// Compiles from heat, checking its shape against the model.
    pub fn from_heat(
        profile: &HardwareProfile,
        model: &Model,
        heat: &HeatTable,
        heat_file: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<Instance> {
        let rates = heat.use_rates(model, heat_file, warnings)?;
        Ok(Instance::new(profile, model, &rates))
    }

    /// The trunk components in model order: object id, name, transformer layer.
    pub fn trunk(&self) -> impl Iterator<Item = (usize, &str, Option<usize>)> + '_ {
        self.trunk_ids.iter().map(|&o| match &self.objects[o].kind {
            ObjectKind::Trunk { name, layer } => (o, name.as_str(), *layer),
            _ => unreachable!("trunk ids name trunk components"),
        })
    }

    /// Transformer layers of the model: `Instance::new` gives each one
    /// dense stage.
    pub fn layers(&self) -> usize {
        self.stages
            .iter()
            .filter(|s| s.kind == StageKind::Dense)
            .count()
    }

    /// Transformer layer of each MoE ordinal, from the stage names
    /// `L<layer>.experts` that `Instance::new` gives them.
    pub fn moe_layers(&self) -> Result<Vec<usize>> {
        self.expert_ids
            .iter()
            .map(|ids| {
                let stage = ids
                    .first()
                    .map(|&o| &self.stages[self.objects[o].stage].name);
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

    /// Replaces every expert's use rate with `rates[l][e]` (MoE ordinal
    /// `l`, expert `e`): new heat for the same model and machine, without
    /// building the instance again.
    pub fn set_expert_rates(&mut self, rates: &[Vec<f64>]) {
        for (ids, layer) in self.expert_ids.iter().zip(rates) {
            for (&o, &rate) in ids.iter().zip(layer) {
                self.objects[o].use_rate = rate;
            }
        }
    }
}

//! Loading the inputs of a plan (profile, model, heat, and optional KV
//! prefix groups) from files or from the embedded defaults, with the
//! references a plan records (name, sha256) and the notes a user should see
//! once.

use crate::heat::{read_heat, HeatContext, HeatFormat, HeatTable};
use residency_core::constraints::{ConstraintsFile, Sourced};
use residency_core::cost::Instance;
use residency_core::kv::{KvGroup, KvGroupsFile};
use residency_core::model::Model;
use residency_core::plan::{sha256_hex, sha256_of_path, HeatRef, InputRef, PlanInputs};
use residency_core::profile::HardwareProfile;
use residency_core::Result;
use std::path::{Path, PathBuf};

/// The embedded defaults: Colibri's published two-card box, DeepSeek-V2-Lite,
/// and its routing heat from the DeepSeek ESFT expert logs (MIT).
pub mod defaults {
    pub const PROFILE_NAME: &str = "profiles/hardware/threadripper-3945wx-rtx3070-quadro4000.yaml";
    pub const PROFILE: &str =
        include_str!("../../../profiles/hardware/threadripper-3945wx-rtx3070-quadro4000.yaml");
    pub const MODEL_NAME: &str = "profiles/models/deepseek-v2-lite.yaml";
    pub const MODEL: &str = include_str!("../../../profiles/models/deepseek-v2-lite.yaml");
    pub const HEAT_NAME: &str = "profiles/heat/deepseek-v2-lite-esft.json";
    pub const HEAT: &str = include_str!("../../../profiles/heat/deepseek-v2-lite-esft.json");
}

/// Where each input comes from; `None` takes the default.
#[derive(Debug, Clone, Default)]
pub struct InputPaths {
    pub profile: Option<PathBuf>,
    pub model: Option<PathBuf>,
    pub heat: Option<PathBuf>,
    pub heat_format: Option<HeatFormat>,
    /// See [`HeatContext::allow_partial_heat`].
    pub allow_partial_heat: bool,
    /// KV prefix groups to place beside the weights (none by default).
    pub kv: Option<PathBuf>,
    /// Tokens of KV cache to keep room for on the cards (`plan
    /// --context-tokens`; none by default).
    pub context_tokens: Option<u64>,
    /// The user's constraints (`plan --pin`, `--constraints`, ...): `None`
    /// when none were given (a re-plan then keeps its plan's).
    pub constraints: Option<Vec<Sourced>>,
}

#[derive(Debug, Clone)]
pub struct Inputs {
    pub profile: HardwareProfile,
    pub model: Model,
    pub heat: HeatTable,
    pub kv_groups: Vec<KvGroup>,
    /// The file heat was read from (for messages); the default's name when embedded.
    pub heat_file: PathBuf,
    /// The model's file, likewise.
    pub model_file: PathBuf,
    /// The profile's file, likewise: what an infeasible instance names.
    pub profile_file: PathBuf,
    pub refs: PlanInputs,
    /// The constraints `instance` compiles (`refs.constraints` records them).
    pub constraints: Vec<Sourced>,
    /// Things the user should be told once (uniform heat, dropped rows, ...).
    pub notes: Vec<String>,
}

/// A model the caller has already loaded (a checkpoint directory, which
/// only the executor can read), with the sha256 the plan records for it.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub model: Model,
    pub sha256: String,
}

impl Inputs {
    pub fn load(paths: &InputPaths) -> Result<Inputs> {
        Self::load_with_model(paths, None)
    }

    /// Like `load`, with the model given instead of read from `paths.model`
    /// (which then only names it in messages).
    pub fn load_with_model(paths: &InputPaths, loaded: Option<LoadedModel>) -> Result<Inputs> {
        let mut notes = Vec::new();
        let (profile, profile_sha) = match &paths.profile {
            Some(p) => (HardwareProfile::from_yaml_file(p)?, sha256_of_path(p)?),
            None => (
                HardwareProfile::from_yaml_str(
                    defaults::PROFILE,
                    Path::new(defaults::PROFILE_NAME),
                )?,
                sha256_hex(defaults::PROFILE.as_bytes()),
            ),
        };
        let model_given = loaded.is_some() || paths.model.is_some();
        let (model, model_sha) = match (loaded, &paths.model) {
            (Some(l), _) => (l.model, l.sha256),
            (None, Some(p)) => (Model::from_yaml_file(p)?, sha256_of_path(p)?),
            (None, None) => (
                Model::from_yaml_str(defaults::MODEL, Path::new(defaults::MODEL_NAME))?,
                sha256_hex(defaults::MODEL.as_bytes()),
            ),
        };
        let ctx = HeatContext {
            allow_partial_heat: paths.allow_partial_heat,
            ..HeatContext::for_model(&model)
        };
        let (heat, heat_ref, heat_file) = match (&paths.heat, model_given) {
            (Some(p), _) => {
                let heat = read_heat(p, paths.heat_format, &ctx, &mut notes)?;
                let r = HeatRef {
                    source: p.display().to_string(),
                    format: heat.format.to_string(),
                    sha256: crate::heat::content_sha256(p, heat.format)?,
                    tokens: observed_tokens(&heat.total),
                };
                (heat.total, r, p.clone())
            }
            (None, true) => {
                notes.push(uniform_heat_note(&model));
                let r = HeatRef {
                    source: "uniform".into(),
                    format: "uniform".into(),
                    sha256: String::new(),
                    tokens: None,
                };
                (HeatTable::uniform(&model), r, PathBuf::from("uniform"))
            }
            (None, false) => {
                let path = Path::new(defaults::HEAT_NAME);
                let heat = crate::heat::read_json_str(defaults::HEAT, path, &ctx)?;
                let r = HeatRef {
                    source: defaults::HEAT_NAME.into(),
                    format: HeatFormat::Json.to_string(),
                    sha256: sha256_hex(defaults::HEAT.as_bytes()),
                    tokens: observed_tokens(&heat.total),
                };
                (heat.total, r, path.to_path_buf())
            }
        };
        let (kv_groups, kv_ref) = match &paths.kv {
            Some(p) => (
                KvGroupsFile::read(p)?.groups,
                Some(InputRef {
                    name: p.display().to_string(),
                    sha256: sha256_of_path(p)?,
                }),
            ),
            None => (Vec::new(), None),
        };
        let refs = PlanInputs {
            profile: InputRef {
                name: profile.name.clone(),
                sha256: profile_sha,
            },
            model: InputRef {
                name: model.name().to_string(),
                sha256: model_sha,
            },
            heat: heat_ref,
            kv: kv_ref,
            context_tokens: paths.context_tokens,
            constraints: None,
        };
        let model_file = paths
            .model
            .clone()
            .unwrap_or_else(|| PathBuf::from(defaults::MODEL_NAME));
        let profile_file = paths
            .profile
            .clone()
            .unwrap_or_else(|| PathBuf::from(defaults::PROFILE_NAME));
        Ok(Inputs {
            profile,
            model,
            heat,
            kv_groups,
            heat_file,
            model_file,
            profile_file,
            refs,
            constraints: Vec::new(),
            notes,
        }
        .with_constraints(paths.constraints.clone().unwrap_or_default()))
    }

    /// These inputs with `constraints` in place of any before, recorded in
    /// `refs` (not at all when empty).
    pub fn with_constraints(mut self, constraints: Vec<Sourced>) -> Inputs {
        let file = ConstraintsFile::of(&constraints);
        self.refs.constraints = (!file.is_empty()).then_some(file);
        self.constraints = constraints;
        self
    }

    /// The planning instance, with the cards' room for the KV cache of
    /// `refs.context_tokens` taken off their capacities (the one place a
    /// reservation is made), then the constraints compiled (budgets lower
    /// what is left); fails when the heat does not fit the model, the
    /// context cannot be reserved, nothing can hold the trunk or the
    /// constraints cannot be met.
    pub fn instance(&mut self) -> Result<Instance> {
        let mut inst = Instance::from_heat(
            &self.profile,
            &self.model,
            &self.heat,
            &self.heat_file,
            &mut self.notes,
        )?;
        match self.refs.context_tokens {
            Some(tokens) => self.reserve_context(&mut inst, tokens)?,
            None => inst.check_holdable(&self.profile_file)?,
        }
        inst.add_kv_groups(&self.kv_groups);
        if !self.constraints.is_empty() {
            inst.constrain(&self.constraints)?;
        }
        Ok(inst)
    }

    /// Heat counted from tokens of a routing trace (`bench --trace`):
    /// `table`, over the model's MoE layers, from `source` in `format`, in
    /// place of the heat `load` read (and of its note, if that was the
    /// uniform default).
    pub fn set_trace_heat(
        &mut self,
        table: HeatTable,
        source: &Path,
        format: HeatFormat,
    ) -> Result<()> {
        let uniform = uniform_heat_note(&self.model);
        self.notes.retain(|n| *n != uniform);
        self.refs.heat = HeatRef {
            source: source.display().to_string(),
            format: format.to_string(),
            sha256: crate::heat::content_sha256(source, format)?,
            tokens: observed_tokens(&table),
        };
        self.heat = table;
        self.heat_file = source.to_path_buf();
        Ok(())
    }

    /// Keeps room on `inst`'s cards for the KV cache of `tokens` tokens of
    /// the model, in place of what they kept before (re-planning for
    /// another context), records it in `refs`, and checks the trunk still
    /// fits.
    pub fn reserve_context(&mut self, inst: &mut Instance, tokens: u64) -> Result<()> {
        inst.resources
            .reserve_context(tokens, &self.model.description, &self.model_file)
            .map_err(|e| e.in_file(&self.profile_file))?;
        self.refs.context_tokens = Some(tokens);
        inst.check_holdable(&self.profile_file)
    }
}

/// What a user is told when no heat was given for a model.
fn uniform_heat_note(model: &Model) -> String {
    format!(
        "no --heat given: every expert of `{}` gets uniform heat (top_k / experts)",
        model.name()
    )
}

/// The largest per-layer token count, when the source recorded tokens.
fn observed_tokens(table: &HeatTable) -> Option<u64> {
    table.tokens.as_ref().and_then(|t| t.iter().copied().max())
}

//! Flags that several commands share, defined once, and the one parser of
//! every closed set of names (policies, formats, backends, ...): it lists
//! the names in `--help` and in the error for a name it does not know.

use crate::inputs::model_from_path;
use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use residency_core::model::Model;
use residency_core::names::Named;
use residency_core::profile::HardwareProfile;
use residency_core::units::{parse_size, Bytes};
use residency_formats::inputs::defaults;
use residency_policy::online::OnlineParams;
use residency_runtime::storage::BackendKind;
use std::ffi::OsStr;
use std::marker::PhantomData;
use std::path::PathBuf;

/// The value parser of a closed set of names: `value_parser = named::<T>()`.
pub fn named<T: Named>() -> NamedParser<T> {
    NamedParser(PhantomData)
}

#[derive(Clone)]
pub struct NamedParser<T>(PhantomData<T>);

impl<T: Named + Clone> TypedValueParser for NamedParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        T::parse(&text).map_err(|message| {
            let flag = arg.map(|a| format!(" for '{a}'")).unwrap_or_default();
            cmd.clone().error(
                ErrorKind::InvalidValue,
                format!("invalid value '{text}'{flag}: {message}"),
            )
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            T::all().iter().map(|v| PossibleValue::new(v.name())),
        ))
    }
}

/// `--backend`, for the commands that read a checkpoint.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArg {
    /// Read path: direct (O_DIRECT into aligned memory), io-uring (O_DIRECT
    /// reads submitted together; falls back to direct), pread (through the
    /// page cache), mmap. Direct is the default: it tied io_uring on a
    /// 2-core VM and beat it on an H200 machine (docs/executor.md).
    #[arg(long, default_value = "direct", value_parser = named::<BackendKind>())]
    pub backend: BackendKind,
}

/// `--model`, read the same way by every command that takes one. A
/// command says in its own help what it reads of the model and what it
/// does without one (`mut_arg("model", more_help(...))`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ModelArg {
    /// Model description (YAML, docs/design.md §3.2), checkpoint directory
    /// (config.json and safetensors shards) or GGUF file (a split model by
    /// its first shard).
    #[arg(long = "model", id = "model", value_name = "MODEL")]
    pub path: Option<PathBuf>,
}

impl ModelArg {
    /// The model, when `--model` was given.
    pub fn load(&self) -> anyhow::Result<Option<Model>> {
        self.path.as_deref().map(model_from_path).transpose()
    }
}

/// A shared flag's help with what one command does with it, or without it,
/// after the common part (clap has dropped its full stop).
pub fn more_help(specific: &'static str) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| {
        let common = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        arg.help(format!("{common}; {specific}"))
    }
}

/// What `simulate` and `replay` take of `--profile`.
pub const MISS_PRICE: &str = "its fastest drive prices a miss; default: the embedded two-card box";

/// `--profile`: a hardware profile, else the embedded two-card box.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProfileArg {
    /// Hardware profile (YAML, docs/design.md §3.1).
    #[arg(long = "profile", id = "profile", value_name = "PROFILE")]
    pub path: Option<PathBuf>,
}

impl ProfileArg {
    /// The profile given, else the embedded default.
    pub fn load_or_default(&self) -> anyhow::Result<HardwareProfile> {
        Ok(match &self.path {
            Some(p) => HardwareProfile::from_yaml_file(p)?,
            None => HardwareProfile::from_yaml_str(
                defaults::PROFILE,
                std::path::Path::new(defaults::PROFILE_NAME),
            )?,
        })
    }
}

/// The online per-layer allocator's tunables (`simulate --allocation
/// online`, `replay --policy dynamic`), defaults from
/// `residency_policy::online::OnlineParams`.
#[derive(clap::Args, Debug, Clone)]
pub struct OnlineArgs {
    /// Online allocation: requests (all layers) the live LRU curves are
    /// built from.
    #[arg(long, default_value_t = OnlineParams::default().window_accesses)]
    online_window: usize,
    /// Online allocation: tokens between re-allocation passes.
    #[arg(long, default_value_t = OnlineParams::default().every_tokens)]
    online_every: u64,
    /// Online allocation: tokens over which a move must pay for itself.
    #[arg(long, default_value_t = OnlineParams::default().horizon_tokens)]
    online_horizon: f64,
    /// Online allocation: a move's saving must exceed its cost times this.
    #[arg(long, default_value_t = OnlineParams::default().hysteresis)]
    online_hysteresis: f64,
    /// Online allocation: bytes of new slots allowed per token (`64MiB`).
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    online_allowance: Bytes,
}

impl OnlineArgs {
    /// The parameters, or one line naming the flag to fix.
    pub fn params(&self) -> anyhow::Result<OnlineParams> {
        let params = OnlineParams {
            window_accesses: self.online_window,
            every_tokens: self.online_every,
            horizon_tokens: self.online_horizon,
            hysteresis: self.online_hysteresis,
            bytes_per_token: self.online_allowance.0,
        };
        params.check().map_err(|e| {
            anyhow::anyhow!(
                "{e} (--online-window, --online-every, --online-horizon, --online-hysteresis)"
            )
        })?;
        Ok(params)
    }
}

//! Flags that several commands share, defined once, and the one parser of
//! every closed set of names (policies, formats, backends, ...): it lists
//! the names in `--help` and in the error for a name it does not know.

use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use residency_core::names::Named;
use residency_runtime::storage::BackendKind;
use std::ffi::OsStr;
use std::marker::PhantomData;

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

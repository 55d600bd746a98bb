//! Hardware profiles without hand-writing: detection reads the
//! machine, calibration times what detection can only assume, and engine
//! logs give the rest. Every value of the profile written keeps its origin
//! (`detected`, `measured` or `default`) as a YAML comment, and every file
//! written reads back through the planner's strict profile reader.
//!
//! - `doc`: the profile with its comments: reading them back, writing YAML
//!   whose values say where they came from, lossless unit text.
//! - `system`: sysfs and procfs: NUMA nodes, CPUs, memory, the block device
//!   behind a directory, PCI devices and their links.
//! - `gpus`: GPUs through the CUDA driver, else Vulkan.
//! - `detect`: those facts as a profile, with the documented defaults.
//! - `gemv`: the runtime's kernels (`residency_runtime::gemv`), re-exported
//!   for the modules here that time and run them.
//! - `cuda_bench`: GEMV, upload and sync timings on a CUDA device.
//! - `calibrate`: the measurements, their trials and the time budget.
//! - `logs`: Colibri's `[PROF] expert I/O:`, `PROFILE: expert-disk` and
//!   `[timers]` lines as profile values.
//! - `spread`: median and range of repeated trials.

pub mod calibrate;
pub mod cuda_bench;
pub mod detect;
pub mod doc;
pub use residency_runtime::gemv;
pub mod gpus;
pub mod logs;
pub mod spread;
pub mod system;

pub use calibrate::{calibrate, CalibrateOptions, Calibration};
pub use detect::{detect, DetectOptions};
pub use doc::{Origin, ProfileDoc};
pub use logs::{calibrate_from_log, LogCalibration};
pub use spread::Spread;

use residency_core::error::PlannerError;
use std::fmt;
use std::path::{Path, PathBuf};

/// A value calibration set: where, the value as written, its comment, and
/// the spread of its trials (or runs of a log) where there were several.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// `numa[0].gemv_bandwidth`.
    pub path: String,
    /// `31.2 GB/s`.
    pub value: String,
    pub comment: String,
    pub spread: Option<Spread>,
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}, {}", self.path, self.value, self.comment)
    }
}

impl ProfileDoc {
    /// Marks the value at `m.path` measured, with `m`'s comment.
    fn measured(&mut self, m: &Measurement) {
        self.set(&m.path, Origin::Measured(m.comment.clone()));
    }
}

/// Why detection or calibration could not produce a profile: one line
/// naming the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{}: {problem}; {fix}", file.display())]
    Input {
        file: PathBuf,
        problem: String,
        fix: String,
    },
    /// The profile or model reader's own one-line error.
    #[error(transparent)]
    Planner(#[from] PlannerError),
}

impl ProfileError {
    pub fn input(file: &Path, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        ProfileError::Input {
            file: file.to_path_buf(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// Reads a text file given on the command line, with `fix` in the message
/// when it is missing or unreadable (the planner's readers say no fix for
/// plain I/O errors).
pub(crate) fn read_input(path: &Path, fix: &str) -> Result<String, ProfileError> {
    residency_core::error::read_text(path).map_err(|e| match e {
        PlannerError::Io { error, .. } => {
            ProfileError::input(path, format!("cannot read it ({error})"), fix)
        }
        e => e.into(),
    })
}

//! Errors of the planner library. Every input error names the file, the
//! place in it and what to do, on one line (the project's rule for bad input).

use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PlannerError {
    /// A file that is wrong: `file: place: problem; fix`.
    #[error("{}: {place}: {problem}; {fix}", file.display())]
    Input {
        file: PathBuf,
        place: String,
        problem: String,
        fix: String,
    },
    /// A file that could not be read or written at all. The I/O error is
    /// part of the message, not a `source`, so an error chain says it once.
    #[error("{}: {error}", file.display())]
    Io {
        file: PathBuf,
        error: std::io::Error,
    },
    /// The inputs are valid but no placement satisfies the capacities.
    #[error("infeasible: {0}")]
    Infeasible(String),
    /// An instance we built broke one of its own invariants (a bug, not
    /// bad input), e.g. an experts stage not named `L<layer>.experts`.
    #[error("solver: {0}")]
    Solver(String),
}

pub type Result<T, E = PlannerError> = std::result::Result<T, E>;

impl PlannerError {
    pub fn input(
        file: &Path,
        place: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        PlannerError::Input {
            file: file.to_path_buf(),
            place: place.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    pub fn io(file: &Path, source: std::io::Error) -> Self {
        PlannerError::Io {
            file: file.to_path_buf(),
            error: source,
        }
    }
}

/// Reads a whole file, mapping the failure to an error naming it.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| PlannerError::io(path, e))
}

/// Reads a whole UTF-8 text file.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = read_file(path)?;
    String::from_utf8(bytes).map_err(|e| {
        PlannerError::input(
            path,
            format!("byte {}", e.utf8_error().valid_up_to()),
            "not valid UTF-8 text",
            "save the file as UTF-8",
        )
    })
}

/// Writes a file atomically: a temporary file beside it, then a rename, so a
/// failed run never leaves a partial output behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(PlannerError::io(path, e));
    }
    Ok(())
}

/// Turns a serde YAML/JSON message into (place, problem): serde puts the
/// location at the end as `at line L column C`.
pub fn split_serde_location(message: &str) -> (String, String) {
    if let Some(at) = message.rfind(" at line ") {
        let place = message[at + 4..].trim().to_string();
        let problem = message[..at].trim_end_matches(',').to_string();
        return (place, problem);
    }
    ("top level".to_string(), message.to_string())
}

//! Errors of the planner library. Every input error names the file, the
//! place in it and what to do, on one line (the project's rule for bad input).

use crate::limits;
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
            place: shown(&place.into()),
            problem: shown(&problem.into()),
            fix: fix.into(),
        }
    }

    /// An infeasible instance's error naming `file` (the profile whose
    /// capacities do not hold the model), when it does not already.
    pub fn in_file(self, file: &Path) -> Self {
        let name = file.display().to_string();
        match self {
            PlannerError::Infeasible(m) if !m.starts_with(&name) => {
                PlannerError::Infeasible(format!("{name}: {m}"))
            }
            e => e,
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

/// Reads a whole UTF-8 text file of at most `limits::MAX_TEXT_BYTES`.
pub fn read_text(path: &Path) -> Result<String> {
    read_text_at_most(path, limits::MAX_TEXT_BYTES)
}

/// Reads a whole YAML or JSON document (a profile, a model description, a
/// KV groups file, a plan) of at most `limits::MAX_DOCUMENT_BYTES`.
pub fn read_document(path: &Path) -> Result<String> {
    read_text_at_most(path, limits::MAX_DOCUMENT_BYTES)
}

/// Reads a text file of at most `max` bytes. Its size and its first KiB
/// are looked at before the rest is read: a binary file (a GGUF, a NUL
/// byte, bytes that are not UTF-8) or one too large is refused without
/// reading it whole.
fn read_text_at_most(path: &Path, max: u64) -> Result<String> {
    use std::io::Read;
    let refuse = |place: String, problem: String, fix: &str| {
        Err(PlannerError::input(path, place, problem, fix))
    };
    let mut file = std::fs::File::open(path).map_err(|e| PlannerError::io(path, e))?;
    let size = file
        .metadata()
        .map_err(|e| PlannerError::io(path, e))?
        .len();
    if size > max {
        return refuse(
            "size".into(),
            format!("is {size} bytes, more than the {max} a text input may have"),
            "give the text file this option expects, not a model or a dump",
        );
    }
    let mut bytes = Vec::with_capacity(size.min(1024) as usize);
    file.by_ref()
        .take(1024)
        .read_to_end(&mut bytes)
        .map_err(|e| PlannerError::io(path, e))?;
    if let Some(problem) = binary_start(&bytes) {
        return refuse(
            "start".into(),
            problem,
            "give the text file this option expects, saved as UTF-8",
        );
    }
    file.take(max + 1 - bytes.len() as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| PlannerError::io(path, e))?;
    if bytes.len() as u64 > max {
        return refuse(
            "size".into(),
            format!("is more than the {max} bytes a text input may have"),
            "give the text file this option expects, not a model or a dump",
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        PlannerError::input(
            path,
            format!("byte {}", e.utf8_error().valid_up_to()),
            "not valid UTF-8 text",
            "save the file as UTF-8",
        )
    })
}

/// What makes `start` (a file's first KiB) binary rather than text: a
/// known binary magic, a NUL byte or bytes that are not UTF-8 (a
/// character cut by the end of `start` is not counted).
fn binary_start(start: &[u8]) -> Option<String> {
    for (magic, what) in [
        (&b"GGUF"[..], "a GGUF model file, not text"),
        (b"\x7fELF", "an executable, not text"),
        (b"PK\x03\x04", "a zip archive, not text"),
        (b"\x1f\x8b", "a gzip archive, not text"),
        (
            b"\xff\xfe",
            "UTF-16 text (as PowerShell's `>` writes), not UTF-8",
        ),
        (b"\xfe\xff", "UTF-16 text, not UTF-8"),
    ] {
        if start.starts_with(magic) {
            return Some(format!("is {what}"));
        }
    }
    if let Some(at) = start.iter().position(|&b| b == 0) {
        return Some(format!("is binary, not text (a NUL byte at byte {at})"));
    }
    match std::str::from_utf8(start) {
        Err(e) if e.error_len().is_some() => Some(format!(
            "is binary, not UTF-8 text (at byte {})",
            e.valid_up_to()
        )),
        _ => None,
    }
}

/// Parses a YAML document read from `path`, refusing one nested deeper
/// than `limits::MAX_YAML_DEPTH` before the parser sees it (its time grows
/// with the square of the depth). Errors name the place serde gives and
/// `fix`.
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str, path: &Path, fix: &str) -> Result<T> {
    if let Some((line, problem)) = yaml_too_deep(text) {
        return Err(PlannerError::input(
            path,
            format!("line {line}"),
            problem,
            fix,
        ));
    }
    serde_norway::from_str(text).map_err(|e| {
        let (place, problem) = split_serde_location(&e.to_string());
        PlannerError::input(path, place, problem, fix)
    })
}

/// The first line (1-based) of `text` that nests flow collections deeper
/// than `MAX_YAML_DEPTH` or indents wider than `MAX_YAML_INDENT`, with the
/// problem; one pass. Brackets in quoted strings and comments do not count.
fn yaml_too_deep(text: &str) -> Option<(usize, String)> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line
            .bytes()
            .scan(b' ', |before, b| {
                let indicator = matches!(b, b'-' | b'?') && *before == b' ';
                *before = b;
                (b == b' ' || indicator).then_some(())
            })
            .count();
        if indent > limits::MAX_YAML_INDENT {
            return Some((
                i + 1,
                format!(
                    "is indented {indent} columns, more than {}",
                    limits::MAX_YAML_INDENT
                ),
            ));
        }
        let mut before = b' ';
        for b in line.bytes() {
            match quote {
                // A backslash escapes the next byte in a double-quoted string.
                Some(b'"') if before == b'\\' => {
                    before = 0;
                    continue;
                }
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None => match b {
                    b'#' if before == b' ' || before == b'\t' => break,
                    b'"' | b'\'' if matches!(before, b' ' | b'\t' | b'[' | b'{' | b',' | b':') => {
                        quote = Some(b)
                    }
                    b'[' | b'{' => {
                        depth += 1;
                        if depth > limits::MAX_YAML_DEPTH {
                            return Some((
                                i + 1,
                                format!("nests deeper than {} levels", limits::MAX_YAML_DEPTH),
                            ));
                        }
                    }
                    b']' | b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
            before = b;
        }
    }
    None
}

/// `text` as an error line may echo it: control characters (ESC, NUL, a
/// newline) escaped, every run of more than `limits::MAX_ECHOED_CHARS`
/// characters without a space cut there with `…`, and the whole to eight
/// times that.
pub fn shown(text: &str) -> String {
    let max = limits::MAX_ECHOED_CHARS;
    let mut out = String::with_capacity(text.len().min(8 * max + 8));
    let (mut run, mut total) = (0usize, 0usize);
    for c in text.chars() {
        if total >= 8 * max {
            out.push('…');
            break;
        }
        run = if c.is_whitespace() { 0 } else { run + 1 };
        if run > max {
            if run == max + 1 {
                out.push('…');
            }
            continue;
        }
        total += 1;
        push_escaped(&mut out, c);
    }
    out
}

/// `text` with its control characters (ESC, NUL, newlines) escaped: what
/// an error line prints of any message, so that it stays one line and
/// sends nothing to the terminal.
pub fn without_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| push_escaped(&mut out, c));
    out
}

fn push_escaped(out: &mut String, c: char) {
    if c.is_control() {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
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
/// location at the end as `at line L column C`. An unknown name is given
/// with the nearest known one.
pub fn split_serde_location(message: &str) -> (String, String) {
    let (place, problem) = match message.rfind(" at line ") {
        Some(at) => (
            message[at + 4..].trim().to_string(),
            message[..at].trim_end_matches(','),
        ),
        None => ("top level".to_string(), message),
    };
    (place, with_nearest_name(problem))
}

/// serde lists the names it knows after an unknown one (`unknown field
/// `bitz`, expected one of `bits`, `group``); a misspelling is found faster
/// when the message leads with the nearest of them.
fn with_nearest_name(problem: &str) -> String {
    for what in ["unknown field `", "unknown variant `"] {
        let Some(start) = problem.find(what) else {
            continue;
        };
        let rest = &problem[start + what.len()..];
        let Some((word, known)) = rest.split_once("`, expected ") else {
            break;
        };
        let names: Vec<&str> = known.split('`').skip(1).step_by(2).collect();
        if names.is_empty() {
            break;
        }
        let near = crate::names::nearest(word, &names);
        return format!(
            "{}{what}{word}`, did you mean `{near}`? (expected {known})",
            &problem[..start]
        );
    }
    problem.to_string()
}

#[cfg(test)]
mod tests {
    use super::split_serde_location;

    #[test]
    fn an_unknown_name_is_given_with_the_nearest_known_one() {
        // `bitz` is one edit from `bits` and five from `group`; the place is
        // serde's trailing `at line L column C`.
        let (place, problem) = split_serde_location(
            "formats: unknown field `bitz`, expected one of `bits`, `group` at line 3 column 5",
        );
        assert_eq!(place, "line 3 column 5");
        assert_eq!(
            problem,
            "formats: unknown field `bitz`, did you mean `bits`? (expected one of `bits`, `group`)"
        );
        // Two names (`a` or `b`) and variants too; `plam` is one edit from `plan`.
        let (_, problem) =
            split_serde_location("unknown variant `plam`, expected `plan` or `greedy`");
        assert_eq!(
            problem,
            "unknown variant `plam`, did you mean `plan`? (expected `plan` or `greedy`)"
        );
        // Nothing known to suggest: the message is serde's.
        let (place, problem) = split_serde_location("unknown field `x`, there are no fields");
        assert_eq!(
            (place.as_str(), problem.as_str()),
            ("top level", "unknown field `x`, there are no fields")
        );
    }
}

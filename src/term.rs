//! What the command says besides its results: notes, which `-q/--quiet`
//! silences, and the one `error:` line; their labels are coloured only on
//! a terminal, and never under `NO_COLOR` (no-color.org).

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `-q/--quiet`: notes are not printed.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// One `note:` line on standard error, unless quiet.
pub fn note(text: impl std::fmt::Display) {
    if !QUIET.load(Ordering::Relaxed) {
        eprintln!("{} {text}", label("note:", "1;33"));
    }
}

/// Each of `notes` as a `note:` line, unless quiet.
pub fn notes(notes: &[String]) {
    for text in notes {
        note(text);
    }
}

/// The `error:` line on standard error; errors are never silenced.
pub fn error(text: impl std::fmt::Display) {
    eprintln!("{} {text}", label("error:", "1;31"));
}

/// `text` in the ANSI style `sgr` where standard error is coloured.
fn label(text: &str, sgr: &str) -> String {
    let on = colour_on(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    if on {
        format!("\x1b[{sgr}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// Colour on a terminal, unless `NO_COLOR` is set to a non-empty value.
fn colour_on(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::colour_on;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_on(true, None));
        // no-color.org: set and not empty turns colour off.
        assert!(colour_on(true, Some(OsStr::new(""))));
        assert!(!colour_on(true, Some(OsStr::new("1"))));
        assert!(!colour_on(false, None));
    }
}

//! Helpers shared by the end-to-end tests: run the binary, read its
//! output, find profiles, and check the one-line bad-input contract.
#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_residency");
pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(ROOT)
        .output()
        .expect("the binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn profile(name: &str) -> String {
    format!("{ROOT}/profiles/hardware/{name}.yaml")
}

pub fn model(name: &str) -> String {
    format!("{ROOT}/profiles/models/{name}.yaml")
}

/// Runs a command that must fail on a bad input: one line on stderr that
/// names `file` and contains `place`, exit code 1, no panic, and `out` not created.
pub fn assert_bad_input(args: &[&str], file: &Path, place: &str, out: &Path) {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(
        lines[0].contains(&file.display().to_string()),
        "{args:?}: file not named: {err}"
    );
    assert!(
        lines[0].contains(place),
        "{args:?}: `{place}` not in: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(!out.exists(), "{args:?} left {}", out.display());
}

/// A data set under `../shared/data/`, or `None` with the reason printed.
pub fn shared_data(sub: &str) -> Option<PathBuf> {
    let path = Path::new(ROOT).join("../shared/data").join(sub);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipped: {} is absent (../shared/data is not beside the checkout)",
            path.display()
        );
        None
    }
}

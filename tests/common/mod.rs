//! Helpers shared by the end-to-end tests: run the binary (a plan with heat
//! among its commands), read its
//! output, find profiles, and check the one-line bad-input contract.
#![allow(dead_code)] // each test file uses a different subset

use std::path::Path;
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

/// Runs the binary on arguments it must accept: a failure panics with its
/// stderr.
pub fn run_ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    o
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `plan` of the model `model` with `heat`, then `extra` arguments, into
/// `out`.
pub fn plan_with_heat<'a>(
    model: &'a str,
    heat: &'a Path,
    extra: &[&'a str],
    out: &'a Path,
) -> Vec<&'a str> {
    [
        &["plan", "--model", model, "--heat", s(heat)],
        extra,
        &["--out", s(out)],
    ]
    .concat()
}

/// A JSON file the binary wrote.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A `residency simulate` run that wrote `--json`.
pub struct Simulated {
    pub output: Output,
    /// The JSON file's text, and the document it holds.
    pub text: String,
    pub doc: serde_json::Value,
}

/// `residency simulate` of the shared data set `data` (see `shared_data`)
/// with `extra` arguments and `--json` into a temporary file, which must
/// succeed; `None` where the data set is absent.
pub fn simulate_shared(data: &str, extra: &[&str]) -> Option<Simulated> {
    let trace = shared_data(data)?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim.json");
    let head = ["simulate", "--trace", s(&trace)];
    let output = run_ok(&[&head, extra, &["--json", s(&out)]].concat());
    let text = std::fs::read_to_string(&out).unwrap();
    let doc = serde_json::from_str(&text).unwrap();
    Some(Simulated { output, text, doc })
}

/// `simulate_shared` on ESFT's DeepSeek-V2-Lite routing traces: lru against
/// frequency at a 25 % budget through the held-out gate, then `extra`
/// arguments.
pub fn simulate_esft_gate(extra: &[&str]) -> Option<Simulated> {
    let model = model("deepseek-v2-lite");
    let head = [
        "--model",
        &model,
        "--policy",
        "lru,frequency",
        "--budget",
        "25%",
        "--gate",
    ];
    simulate_shared("traces/esft_deepseek_v2_lite", &[&head, extra].concat())
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
    let line = one_error_line(args, out);
    assert!(
        line.contains(&file.display().to_string()),
        "{args:?}: file not named: {line}"
    );
    assert!(line.contains(place), "{args:?}: `{place}` not in: {line}");
}

/// Runs a command that must fail: exit code 1, no panic, `out` not
/// created, and stderr (notes aside) one `error:` line, which it returns.
pub fn one_error_line(args: &[&str], out: &Path) -> String {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(!out.exists(), "{args:?} left {}", out.display());
    lines[0].to_string()
}

pub use residency_testkit::shared_data;

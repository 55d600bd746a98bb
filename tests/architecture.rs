//! ARCHITECTURE.md held to the repository: every path it names in
//! backticks (`crates/x/src/y.rs`, `crates/x/src/y/`, `src/z.rs`,
//! `tests/t.rs`, ...) exists; every workspace crate has a section of the
//! code map (a `### ` heading naming `crates/x`); every top-level module of
//! every crate (`mod m;` in `src/main.rs` or `crates/x/src/lib.rs`) is
//! named, as `<src>/m.rs` or a path under `<src>/m/`.

use std::path::Path;

const MAP: &str = "ARCHITECTURE.md";

/// Where a named path must start to be checked: the repository's own folders.
const ROOTS: &[&str] = &[
    "src/",
    "crates/",
    "tests/",
    "benches/",
    "examples/",
    "schemas/",
    "profiles/",
    "docs/",
    ".ci/",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The backticked spans of a text that look like repository paths.
fn named_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || span.contains(char::is_whitespace) {
            continue;
        }
        if ROOTS.iter().any(|r| span.starts_with(r)) || span == "src" {
            paths.push(span.to_string());
        }
    }
    paths
}

/// The named paths that do not exist under `root`.
fn missing_paths(text: &str, root: &Path) -> Vec<String> {
    named_paths(text)
        .into_iter()
        .filter(|p| !root.join(p.trim_end_matches('/')).exists())
        .collect()
}

/// The workspace members of the root manifest, less the root package.
fn workspace_crates(manifest: &str) -> Vec<String> {
    let start = manifest
        .find("members")
        .expect("Cargo.toml has no workspace members");
    let list = &manifest[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty() && m != ".")
        .collect()
}

/// The crates (`crates/x`) with no `### ` heading naming them.
fn crates_without_section(text: &str, crates: &[String]) -> Vec<String> {
    crates
        .iter()
        .filter(|c| {
            !text
                .lines()
                .filter(|l| l.starts_with("### "))
                .any(|l| l.contains(&format!("`{c}`")) || l.contains(&format!("`{c}/`")))
        })
        .cloned()
        .collect()
}

/// The modules a crate root declares from files (`mod m;`), less test
/// modules and those whose file lies elsewhere (`#[path = ...]`).
fn top_level_modules(source: &str) -> Vec<String> {
    let mut modules = Vec::new();
    let mut previous = "";
    for line in source.lines().map(str::trim) {
        let declared = line
            .strip_prefix("pub(crate) mod ")
            .or_else(|| line.strip_prefix("pub mod "))
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = declared {
            let elsewhere = previous.starts_with("#[path") || previous == "#[cfg(test)]";
            if !elsewhere && name != "tests" {
                modules.push(name.to_string());
            }
        }
        previous = line;
    }
    modules
}

/// The modules of the crate rooted at `src_dir` (its `src/` as the map
/// writes it) that the map names neither as a file nor as a folder.
fn unnamed_modules(text: &str, src_dir: &str, modules: &[String]) -> Vec<String> {
    let named = named_paths(text);
    modules
        .iter()
        .filter(|m| {
            let file = format!("{src_dir}/{m}.rs");
            let folder = format!("{src_dir}/{m}/");
            !named.iter().any(|p| *p == file || p.starts_with(&folder))
        })
        .map(|m| format!("{src_dir}/{m}"))
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_path_the_map_names_exists() {
    let text = read(&root().join(MAP));
    assert!(
        named_paths(&text).len() > 50,
        "{MAP} names too few paths to be a code map"
    );
    let missing = missing_paths(&text, root());
    assert!(
        missing.is_empty(),
        "{MAP} names paths that do not exist: {missing:?}; fix the map"
    );
}

#[test]
fn every_workspace_crate_has_a_section() {
    let text = read(&root().join(MAP));
    let crates = workspace_crates(&read(&root().join("Cargo.toml")));
    assert!(crates.len() >= 10, "workspace members: {crates:?}");
    let absent = crates_without_section(&text, &crates);
    assert!(
        absent.is_empty(),
        "{MAP} has no `### ` section for the workspace crates {absent:?}"
    );
}

#[test]
fn every_top_level_module_is_named() {
    let text = read(&root().join(MAP));
    let mut roots = vec![("src".to_string(), root().join("src/main.rs"))];
    for c in workspace_crates(&read(&root().join("Cargo.toml"))) {
        let lib = root().join(&c).join("src/lib.rs");
        if lib.exists() {
            roots.push((format!("{c}/src"), lib));
        }
    }
    let mut unnamed = Vec::new();
    for (src_dir, file) in &roots {
        let modules = top_level_modules(&read(file));
        unnamed.extend(unnamed_modules(&text, src_dir, &modules));
    }
    assert!(
        unnamed.is_empty(),
        "{MAP} does not name these top-level modules: {unnamed:?}"
    );
}

/// The checks fail where they should: on a map with a path that is not
/// there, a crate without a section and a module left out.
#[test]
fn the_checks_can_fail() {
    let map = "### `crates/core`: data\n- `crates/core/src/cost.rs`, `crates/core/src/nope.rs`, `crate::cost`\n";
    assert_eq!(
        missing_paths(map, root()),
        vec!["crates/core/src/nope.rs".to_string()]
    );
    let crates = vec!["crates/core".to_string(), "crates/kv".to_string()];
    assert_eq!(
        crates_without_section(map, &crates),
        vec!["crates/kv".to_string()]
    );
    let lib = "pub mod cost;\n#[cfg(test)]\nmod tests;\n#[path = \"x.rs\"]\nmod x;\nmod diff;\n";
    let modules = top_level_modules(lib);
    assert_eq!(modules, vec!["cost".to_string(), "diff".to_string()]);
    assert_eq!(
        unnamed_modules(map, "crates/core/src", &modules),
        vec!["crates/core/src/diff".to_string()]
    );
}

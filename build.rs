//! Names the commit the binary is built from, for `--version`: `git
//! rev-parse --short HEAD` where the source is a git checkout with git
//! installed, else "commit unknown" (a source archive builds all the same).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "commit unknown".into());
    println!("cargo:rustc-env=RESIDENCY_COMMIT={commit}");
    // Rebuilt when HEAD moves: HEAD itself (a branch switch), the branch's
    // ref and packed refs (a commit); only paths that exist, since a
    // missing one would rerun this on every build.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

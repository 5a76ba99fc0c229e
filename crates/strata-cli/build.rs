//! Records the commit the binary is built from as `STRATA_COMMIT` (for
//! `strata --version`): `git rev-parse --short HEAD`, or "unknown" where git
//! or the repository is absent (a `cargo package` or crates.io build).

use std::path::Path;
use std::process::Command;

/// `git ARGS` run in this crate's directory: its trimmed stdout, or `None`.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    (out.status.success() && !s.is_empty()).then(|| s.to_string())
}

/// Asks cargo to rerun this script when `path` changes (only for files that
/// exist: a missing one would rerun it on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=STRATA_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself, the branch it names and the
    // packed refs (a worktree keeps HEAD apart from the shared refs).
    let dir = |arg: &str| {
        git(&["rev-parse", "--path-format=absolute", arg])
            // git before 2.31: a path relative to this crate's directory
            .or_else(|| git(&["rev-parse", arg]))
            .map(|p| Path::new(env!("CARGO_MANIFEST_DIR")).join(p))
    };
    if let (Some(git_dir), Some(common)) = (dir("--git-dir"), dir("--git-common-dir")) {
        let head = git_dir.join("HEAD");
        watch(&head);
        if let Ok(text) = std::fs::read_to_string(&head) {
            if let Some(r) = text.trim().strip_prefix("ref: ") {
                watch(&common.join(r));
            }
        }
        watch(&common.join("packed-refs"));
    }
}

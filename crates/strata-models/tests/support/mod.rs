//! Test-only helpers: where the real model is, and the skip-or-fail rule.

#![allow(dead_code)]

use std::path::PathBuf;

/// `$STRATA_MODEL`, else `~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("STRATA_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The model path when it exists. Otherwise prints SKIPPED naming `what`
/// did not run, or panics when `STRATA_REQUIRE_MODEL=1` (CI).
pub fn require_model(what: &str) -> Option<PathBuf> {
    let path = model_path();
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "SKIPPED: model {} not found (set STRATA_MODEL, run .ci/fetch-models.sh, or \
         `strata run` once to fetch it); {what} did not run",
        path.display()
    );
    if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_MODEL=1)");
    }
    eprintln!("{msg}");
    None
}

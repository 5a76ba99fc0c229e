//! Helpers shared by the CLI tests that run the real model.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The shipped SmolLM2-135M-Instruct Q4_1 model (`STRATA_MODEL` overrides),
/// or `None` with a printed reason when it is missing; under
/// `STRATA_REQUIRE_MODEL=1` a missing model fails the test instead.
/// `what` names the comparison that did not run.
pub fn q4_1_model(what: &str) -> Option<PathBuf> {
    let path = match std::env::var_os("STRATA_MODEL") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "SKIPPED: model {} not found (run .ci/fetch-models.sh); {what} did not run",
        path.display()
    );
    if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_MODEL=1)");
    }
    eprintln!("{msg}");
    None
}

/// `strata perplexity` of `model` on the CI text (`-c 512 -b 512 -t 2`, 3
/// chunks) with `extra` arguments: its final estimate.
pub fn strata_ppl(model: &Path, extra: &[&str]) -> f64 {
    let text = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gpl3_first_8000_bytes.txt"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["perplexity", "-m"])
        .arg(model)
        .args(["-f", text, "-c", "512", "-b", "512", "-t", "2"])
        .args(extra)
        .output()
        .expect("strata runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "strata perplexity {extra:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no final estimate in:\n{stdout}"));
    let chunks = stdout.lines().find(|l| l.starts_with("[1]")).unwrap_or("");
    assert_eq!(chunks.matches(',').count(), 3, "3 chunks scored: {chunks}");
    line["Final estimate: PPL = ".len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("unparsable estimate: {line}"))
}

//! Helpers shared by the CLI tests: the real model, running `strata`.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(["perplexity", "-m"])
        .arg(model)
        .args(["-f", text, "-c", "512", "-b", "512", "-t", "2"])
        .args(extra);
    let stdout = stdout_of(&mut cmd, &format!("perplexity {extra:?}"));
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

/// Runs `cmd` (a `strata` command line; `what` names it in the failure),
/// asserts that it succeeded and returns its stdout.
pub fn stdout_of(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().expect("strata runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "strata {what} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Prints (to stderr) the instruction-set level and the CPU the test runs on.
pub fn print_isa() {
    eprintln!(
        "strata at ISA level {} on {}",
        strata::isa::active(),
        strata::cpu::cpu_model()
    );
}

/// A child process, killed and reaped when this drops.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `strata test-ops --device DEVICE`, asserted successful: its stdout.
pub fn test_ops(device: &str) -> String {
    stdout_of(
        Command::new(env!("CARGO_BIN_EXE_strata")).args(["test-ops", "--device", device]),
        &format!("test-ops --device {device}"),
    )
}

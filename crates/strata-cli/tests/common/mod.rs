//! Helpers shared by the CLI tests: the real model, a tiny writer-made
//! one, running `strata`.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use strata::gguf::{GgufWriter, Value};
use strata::DType;

/// The shipped SmolLM2-135M-Instruct Q4_1 model (`STRATA_MODEL` overrides),
/// or `None` with a printed reason when it is missing; under
/// `STRATA_REQUIRE_MODEL=1` a missing model fails the test instead.
/// `what` names the comparison that did not run.
#[allow(unused_imports)] // each test file uses its own subset
pub use strata::testkit::require_model as q4_1_model;

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

/// A tiny random llama saved as `dir/file`: 2 layers, 32 wide (4 heads of
/// 8, 2 KV heads), a 48-wide feed-forward, f32 weights from a fixed seed, a
/// GPT-2 tokenizer over `tokens` (all normal), a 64-token context; the
/// metadata `set` replaces keys (in place) or adds them (at the end).
pub fn tiny_llama(dir: &Path, file: &str, tokens: Vec<String>, set: &[(&str, Value)]) -> PathBuf {
    const E: usize = 32;
    const FF: usize = 48;
    let v = tokens.len();
    let mut g = GgufWriter::new();
    let mut md: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("llama.block_count", Value::U32(2)),
        ("llama.embedding_length", Value::U32(E as u32)),
        ("llama.feed_forward_length", Value::U32(FF as u32)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("llama.context_length", Value::U32(64)),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.pre", "default".into()),
    ];
    for (k, val) in set {
        match md.iter_mut().find(|(m, _)| m == k) {
            Some(slot) => slot.1 = val.clone(),
            None => md.push((k, val.clone())),
        }
    }
    for (k, val) in md {
        g.add_metadata(k, val).unwrap();
    }
    strata::testkit::add_normal_tokens(&mut g, tokens).unwrap();
    // (xorshift(1) starts from 0x9e37_79b9_7f4a_7c15, this model's first seed)
    let mut seed = strata::testkit::xorshift(1);
    let mut rnd = |n: usize, scale: f32, base: f32| -> Vec<u8> {
        (&mut seed)
            .take(n)
            .flat_map(|s| {
                let x = ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32;
                (base + x * scale).to_le_bytes()
            })
            .collect()
    };
    g.add_tensor(
        "token_embd.weight",
        DType::F32,
        &[E, v],
        rnd(E * v, 1.0, 0.0),
    )
    .unwrap();
    g.add_tensor("output_norm.weight", DType::F32, &[E], rnd(E, 0.2, 1.0))
        .unwrap();
    for il in 0..2 {
        for (name, a, b) in [
            ("attn_norm", E, 1),
            ("attn_q", E, E),
            ("attn_k", E, 16),
            ("attn_v", E, 16),
            ("attn_output", E, E),
            ("ffn_norm", E, 1),
            ("ffn_gate", E, FF),
            ("ffn_up", E, FF),
            ("ffn_down", FF, E),
        ] {
            let (dims, data) = if b == 1 {
                (vec![a], rnd(a, 0.2, 1.0))
            } else {
                (vec![a, b], rnd(a * b, 1.0 / (a as f32).sqrt(), 0.0))
            };
            g.add_tensor(format!("blk.{il}.{name}.weight"), DType::F32, &dims, data)
                .unwrap();
        }
    }
    let path = dir.join(file);
    g.write_to_path(&path).unwrap();
    path
}

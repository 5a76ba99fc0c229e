//! Test-only helpers: where the real model is, the skip-or-fail rule,
//! comparing logits, and reading the goldens' JSON.

#![allow(dead_code)]

use std::path::PathBuf;

use strata_models::chat::Message;
use strata_models::{Attention, ContextOptions, Model};

/// Where the real model is, and the skip-or-fail rule when it is missing.
#[allow(unused_imports)] // each test file uses its own subset
pub use strata::testkit::{default_model_path, require_model};

/// The real model requantized to `file_type` ("Q4_K_M", "Q6_K") by
/// `strata_models::quantize` (llama-quantize's bytes, see
/// `crates/strata-cli/tests/quantize_llamacpp.rs`), made once per test
/// process under the target's temporary directory (never committed).
/// `None`, under [`require_model`]'s rule, when the real model is missing.
pub fn quantized_model(file_type: &str, what: &str) -> Option<PathBuf> {
    use std::sync::Mutex;
    use strata_models::quantize::{quantize_file, FileType, QuantizeOptions};
    static MADE: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let src = require_model(what)?;
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = made.iter().find(|(t, _)| t == file_type) {
        return Some(p.clone());
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("quantized");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("SmolLM2-135M-Instruct.{file_type}.gguf"));
    let mut opts = QuantizeOptions::new(FileType::parse(file_type).unwrap());
    opts.allow_requantize = true;
    opts.threads = 2;
    let t0 = std::time::Instant::now();
    quantize_file(&src, &out, &opts, &mut |_| {}).unwrap();
    eprintln!(
        "quantized {} to {file_type} in {:.1} s: {}",
        src.display(),
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    made.push((file_type.to_string(), out.clone()));
    Some(out)
}

/// Natural log of softmax(x), in f64.
pub fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
    x.iter().map(|&v| v as f64 - m - s.ln()).collect()
}

/// KL(softmax(p) ‖ softmax(q)).
pub fn kl(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum()
}

/// Index of the largest value (the first one on ties).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// The token ids of a JSON array of numbers (the golden manifests).
pub fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The ids `model` gives a golden manifest prompt's text (`p["prompt"]`),
/// with BOS added and special tokens parsed, as llama.cpp tokenized it.
pub fn prompt_ids(model: &Model, p: &serde_json::Value) -> Vec<u32> {
    model
        .tokenizer
        .encode(p["prompt"].as_str().unwrap(), true, true)
        .unwrap()
}

/// The messages of a JSON array of `{"role", "content"}` objects (the chat
/// goldens' conversations).
pub fn messages(conv: &serde_json::Value) -> Vec<Message> {
    conv.as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

/// max_i |a_i - b_i|.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Options of a one-sequence context: `n_ctx` cells, batches and
/// micro-batches of `n_batch` tokens, two threads, `attention`, only the
/// last position's logits, not batch-invariant. Tests change the rest with
/// `ContextOptions { .., ..one_seq(..) }`.
pub fn one_seq(n_ctx: usize, n_batch: usize, attention: Attention) -> ContextOptions {
    ContextOptions {
        n_ctx,
        n_batch,
        n_ubatch: n_batch,
        n_threads: 2,
        attention,
        logits_all: false,
        n_seq_max: 1,
        batch_invariant: false,
    }
}

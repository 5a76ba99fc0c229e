//! Test-only helpers: where the real model is, the skip-or-fail rule,
//! comparing logits, and reading the goldens' JSON.

#![allow(dead_code)]

use std::path::PathBuf;

use strata_models::chat::Message;

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

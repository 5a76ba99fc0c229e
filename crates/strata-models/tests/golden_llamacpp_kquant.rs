//! The K-quant models (SmolLM2-135M-Instruct requantized to Q4_K_M and Q6_K
//! by `strata quantize`, which writes llama-quantize's bytes) against
//! llama.cpp's own outputs on them (`tests/data/kquant/`, see its NOTES.md):
//! token ids, KL(softmax(llama.cpp) ‖ softmax(strata)) of the last prompt
//! position, the argmax where llama.cpp's top-2 margin is ≥ 0.5, and the
//! greedy continuation up to the first step whose margin in llama.cpp's run
//! is under 0.5 (`*.gen.tsv`, the AVX-512 run). Flash attention, as
//! llama.cpp ran.
//!
//! Per instruction-set level, as `golden_llamacpp_model.rs` does for Q4_1
//! (see [`golden_dir`]):
//!
//! | strata level | llama.cpp reference | KL bound, mapped / repacked weights |
//! |---|---|---|
//! | `vnni`, `avx512` | `tests/data/kquant/` (native build, AVX-512 VNNI host) | 1e-2 / 3e-2 |
//! | `avx2` | `tests/data/kquant/avx2/` (native build, AMD Zen 3) | 1e-2 / 3e-2 |
//! | `scalar`, `neon` | the AVX2 one, bound + llama.cpp's own AVX2 / AVX-512 spread (Q4_K_M 7.8e-3, Q6_K 8.6e-3) | 1.78e-2 (Q4_K_M), 1.86e-2 (Q6_K) / + 3e-2 |
//!
//! Two weight layouts are checked. *Mapped* weights (`--no-repack`) run the
//! row-by-column kernels, the configuration that matches llama.cpp (ggml
//! does not repack these Q5_0 / Q8_0 / K-quant weights on its hosts): that
//! is the fidelity bar, KL ≤ 1e-2 per prompt. *Repacked* weights (the
//! default at `vnni` / `avx512`) run the packed tile kernels, whose f32 sums
//! are ordered differently; every matmul re-quantizes its activations to 8
//! bits, so that moves single activations by a quantization step, and a
//! last-position KL lands anywhere in llama.cpp's own per-position noise
//! (FA on vs off: 99th percentile 1.55e-2, max 7.1e-2). The repacked layout
//! is held to the 3e-2 that `repacked_weights_match_mapped_weights` allows
//! between the two layouts. Measured (this tree, last-position KL per
//! prompt capital / story / code / chat):
//!
//! | model | level | mapped | repacked (default) |
//! |---|---|---|---|
//! | Q4_K_M | vnni | 6.7e-3 / 5.8e-3 / 1.0e-3 / 7.8e-3 | 9.5e-3 / 5.6e-3 / 3.2e-4 / 6.7e-3 |
//! | Q6_K | vnni | 2.0e-3 / 2.2e-3 / 5.4e-3 / 6.4e-3 | **1.8e-2** / 2.9e-3 / 7.8e-3 / **1.03e-2** |
//! | Q4_K_M | avx512 | 6.7e-3 / 3.3e-3 / 1.0e-3 / 7.8e-3 | 9.5e-3 / 7.5e-3 / 1.3e-3 / 6.7e-3 |
//! | Q6_K | avx512 | 2.9e-3 / 3.7e-3 / 5.2e-3 / 7.8e-3 | (nothing repacked) |
//! | Q4_K_M | avx2 | 9.0e-3 / 6.6e-3 / 5.9e-4 / 7.6e-3 | (nothing repacked) |
//! | Q6_K | avx2 | 2.5e-3 / 7.1e-3 / 1.5e-3 / 5.2e-3 | (nothing repacked) |
//! | Q4_K_M | scalar (vs avx2) | 5.6e-3 / 4.7e-3 / 4.7e-4 / 5.6e-3 | (nothing repacked) |
//! | Q6_K | scalar (vs avx2) | 1.7e-3 / 7.2e-3 / 2.3e-3 / 4.0e-3 | (nothing repacked) |
//!
//! So the 1e-2 bar holds with mapped weights at every level, and the
//! default layout misses it at `vnni` on Q6_K's capital and chat prompts
//! (in bold). The argmax matches on every prompt and the greedy
//! continuation up to llama.cpp's first unclear step, in both layouts.
//!
//! Needs the Q4_1 model (see support::require_model): skipped without it
//! unless STRATA_REQUIRE_MODEL=1.

mod support;

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use strata_models::{Attention, Context, LoadOptions, Logits, Model, PlacementSpec};
use support::{argmax, kl, max_abs_diff, one_seq, prompt_ids};

/// The mapped-weights bound (the task's bar) and the repacked one.
const MAX_KL_MAPPED: f64 = 1e-2;
const MAX_KL_REPACKED: f64 = 3e-2;

/// llama.cpp's largest KL between its AVX2 and AVX-512 builds on these
/// prompts, per model (`tests/data/kquant/NOTES.md`).
fn spread(model: &str) -> f64 {
    match model {
        "Q4_K_M" => 7.8e-3,
        "Q6_K" => 8.6e-3,
        _ => unreachable!("no reference for {model}"),
    }
}

/// The folder of llama.cpp's logits for strata's active level, and whether
/// the bound gets llama.cpp's own spread between levels on top (a level
/// without a llama.cpp build).
fn golden_dir() -> (&'static str, bool) {
    use strata::isa::{active, Isa};
    match active() {
        Isa::Amx | Isa::Vnni | Isa::Avx512 => ("tests/data/kquant", false),
        Isa::Avx2 | Isa::AvxVnni => ("tests/data/kquant/avx2", false),
        Isa::Scalar | Isa::Neon => ("tests/data/kquant/avx2", true),
    }
}

fn data(file: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The gap between the two largest values.
fn margin(x: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in x {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// One greedy step of llama.cpp's run: the token and its top-2 margin.
struct Step {
    id: u32,
    margin: f64,
}

fn gen_steps(model: &str, prompt: &str) -> Vec<Step> {
    let text =
        String::from_utf8(data(&format!("tests/data/kquant/{model}.{prompt}.gen.tsv"))).unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let logit = |s: &str| s.split(':').nth(1).unwrap().parse::<f64>().unwrap();
            Step {
                id: f[0].parse().unwrap(),
                margin: logit(f[3]) - logit(f[4]),
            }
        })
        .collect()
}

fn load(path: &Path, no_repack: bool) -> Arc<Model> {
    let opts = LoadOptions {
        devices: Vec::new(),
        placement: PlacementSpec::default(),
        no_repack,
    };
    Arc::new(Model::load(path, &opts, None).unwrap())
}

/// Checks every prompt of the manifest on `model` (`name` its file type)
/// against llama.cpp at the matching level, with KL bound `max_kl`.
fn check_prompts(name: &str, model: &Arc<Model>, layout: &str, max_kl: f64) {
    let (dir, add_spread) = golden_dir();
    let max_kl = max_kl + if add_spread { spread(name) } else { 0.0 };
    println!(
        "{name}, {layout} weights, strata at {}: llama.cpp reference {dir}, KL bound {max_kl:.3e}",
        strata::isa::active()
    );
    let manifest: Value = serde_json::from_slice(&data("tests/data/kquant/manifest.json")).unwrap();
    let mut ctx = Context::new(model.clone(), one_seq(256, 64, Attention::Flash)).unwrap();
    for p in manifest["prompts"].as_array().unwrap() {
        let prompt = p["name"].as_str().unwrap();
        let ids = prompt_ids(model, p);
        let want: Vec<u32> = String::from_utf8(data(&format!(
            "tests/data/kquant/{name}.{prompt}.tokens.txt"
        )))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
        assert_eq!(ids, want, "{name} {prompt}: token ids");
        ctx.clear().unwrap();
        let logits = ctx.decode(&ids, Logits::Last).unwrap();
        let gold = f32s(&data(&format!("{dir}/{name}.{prompt}.last_logits.f32.bin")));
        assert_eq!(logits.len(), gold.len());
        let k = kl(&gold, &logits);
        let max_abs = max_abs_diff(&gold, &logits);
        let m = margin(&gold);
        println!(
            "{name} {prompt} ({layout}): KL {k:.3e}, max |Δlogit| {max_abs:.3}, argmax strata {} \
             llama.cpp {} (margin {m:.2})",
            argmax(&logits),
            argmax(&gold)
        );
        assert!(
            k <= max_kl,
            "{name} {prompt} ({layout}): KL {k:e} > {max_kl:e}"
        );
        if m >= 0.5 {
            assert_eq!(argmax(&logits), argmax(&gold), "{name} {prompt}: argmax");
        }
        let steps = gen_steps(name, prompt);
        let mut next = argmax(&logits);
        let mut matched = 0;
        for (i, s) in steps.iter().enumerate() {
            if s.margin < 0.5 {
                break;
            }
            assert_eq!(next, s.id, "{name} {prompt} ({layout}): greedy step {i}");
            matched += 1;
            let l = ctx.decode(&[next], Logits::Last).unwrap();
            next = argmax(&l);
        }
        println!(
            "{name} {prompt} ({layout}): greedy continuation identical for {matched} of {} steps \
             (stopped at llama.cpp's first margin < 0.5)",
            steps.len()
        );
    }
}

fn check_model(name: &str) {
    let Some(path) = support::quantized_model(name, &format!("the {name} golden test")) else {
        return;
    };
    check_prompts(name, &load(&path, true), "mapped", MAX_KL_MAPPED);
    let repacked = load(&path, false);
    let layout = if repacked.repacked_bytes() > 0 {
        "repacked"
    } else {
        "default (nothing repacked at this level)"
    };
    check_prompts(name, &repacked, layout, MAX_KL_REPACKED);
}

#[test]
fn golden_llamacpp_q4_k_m() {
    check_model("Q4_K_M");
}

#[test]
fn golden_llamacpp_q6_k() {
    check_model("Q6_K");
}

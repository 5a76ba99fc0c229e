//! The tiny models' configurations (part of `tiny_models.rs`): the models
//! the tests use, the ones llama.cpp's goldens cover, and the benchmarks'
//! realistic-width ones.

use super::{Config, Fam, WType, N_VOCAB};

/// The models the tests use: each family, tied and untied, with its
/// family's optional tensors.
pub fn configs() -> Vec<Config> {
    let base = Config {
        name: "",
        fam: Fam::Llama,
        n_layer: 3,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_ff: 96,
        n_expert: 0,
        n_expert_used: 0,
        tied: false,
        rope_freqs: false,
        qkv_bias: false,
        output_bias: false,
        rope_linear: None,
        fused_qkv: false,
        longrope: None,
        rope_yarn: None,
        n_rot: None,
        rope_base: 10000.0,
        eps: 1e-5,
        n_swa: None,
        swa_pattern: None,
        rope_base_swa: None,
        attn_softcap: None,
        final_softcap: None,
        seed: 1,
        wtype: WType::F32,
        n_pad_vocab: 0,
    };
    vec![
        Config {
            name: "llama3-untied-ropefreqs",
            rope_freqs: true,
            seed: 11,
            ..base.clone()
        },
        Config {
            name: "llama-tied-linear",
            tied: true,
            rope_linear: Some(2.0),
            seed: 12,
            ..base.clone()
        },
        Config {
            name: "qwen2-untied-bias",
            fam: Fam::Qwen2,
            n_layer: 2,
            qkv_bias: true,
            output_bias: true,
            rope_base: 1000000.0,
            eps: 1e-6,
            seed: 21,
            ..base.clone()
        },
        Config {
            name: "qwen2-tied",
            fam: Fam::Qwen2,
            n_layer: 2,
            n_head: 8,
            n_head_kv: 2,
            head_dim: 8,
            tied: true,
            qkv_bias: true,
            rope_base: 1000000.0,
            eps: 1e-6,
            seed: 22,
            ..base.clone()
        },
        Config {
            name: "qwen3-headdim24",
            fam: Fam::Qwen3,
            n_layer: 2,
            head_dim: 24,
            tied: true,
            rope_base: 1000000.0,
            eps: 1e-6,
            seed: 31,
            ..base.clone()
        },
        Config {
            name: "qwen3-untied",
            fam: Fam::Qwen3,
            n_layer: 3,
            n_head: 4,
            n_head_kv: 4,
            tied: false,
            rope_base: 1000000.0,
            eps: 1e-6,
            seed: 32,
            ..base.clone()
        },
        // Gemma 2: layers 0 and 2 attend to a window of 64 (pattern 2, not
        // written), small caps so that soft-capping changes the logits
        Config {
            name: "gemma2-swa-softcap",
            fam: Fam::Gemma2,
            n_layer: 3,
            tied: true,
            n_swa: Some(64),
            attn_softcap: Some(1.5),
            final_softcap: Some(4.0),
            eps: 1e-6,
            seed: 41,
            ..base.clone()
        },
        Config {
            name: "qwen3moe-8x2",
            fam: Fam::Qwen3Moe,
            n_layer: 2,
            n_ff: 32,
            n_expert: 8,
            n_expert_used: 2,
            tied: false,
            rope_base: 1000000.0,
            eps: 1e-6,
            seed: 41,
            ..base.clone()
        },
        // Gemma 3: window layers 0 and 1, global layer 2 (pattern 3) with
        // linear RoPE scaling; the window layers' own RoPE base
        Config {
            name: "gemma3-swa-untied",
            fam: Fam::Gemma3,
            n_layer: 3,
            head_dim: 24,
            n_swa: Some(64),
            swa_pattern: Some(3),
            rope_base: 1000000.0,
            rope_base_swa: Some(10000.0),
            rope_linear: Some(8.0),
            eps: 1e-6,
            seed: 51,
            ..base.clone()
        },
        Config {
            name: "gemma3-tied-finalcap",
            fam: Fam::Gemma3,
            n_layer: 2,
            tied: true,
            n_swa: Some(64),
            swa_pattern: Some(2),
            final_softcap: Some(5.0),
            eps: 1e-6,
            seed: 52,
            ..base.clone()
        },
        Config {
            name: "llama-moe-4x2",
            fam: Fam::Llama,
            n_layer: 2,
            n_ff: 48,
            n_expert: 4,
            n_expert_used: 2,
            tied: true,
            seed: 42,
            ..base.clone()
        },
        Config {
            name: "phi3-fused-longrope",
            fam: Fam::Phi3,
            n_layer: 2,
            fused_qkv: true,
            longrope: Some(64),
            seed: 41,
            ..base.clone()
        },
        Config {
            name: "phi3-separate-shortrope",
            fam: Fam::Phi3,
            n_layer: 2,
            n_head_kv: 4,
            tied: true,
            longrope: Some(8192),
            seed: 42,
            ..base
        },
    ]
}

/// The context length the tiny models declare (`{arch}.context_length`).
pub const N_CTX_TRAIN: usize = 256;

/// `rope.scaling.attn_factor` as llama.cpp's Phi-3 converter computes it
/// for LongRoPE: √(1 + ln(s) / ln(original context)), s = context /
/// original context, 1 when s ≤ 1.
pub fn longrope_attn_factor(orig: usize) -> f32 {
    let s = N_CTX_TRAIN as f64 / orig as f64;
    if s > 1.0 {
        (1.0 + s.ln() / (orig as f64).ln()).sqrt() as f32
    } else {
        1.0
    }
}

/// The models llama.cpp's goldens cover: [`configs`] (F32), each of them
/// again as Q8_0 (`NAME-q8_0`), and per family its first model widened to
/// 256 (the K-quants' row size) as Q4_K_M (`NAME-q4km`).
pub fn golden_configs() -> Vec<Config> {
    let all = configs();
    let mut out = all.clone();
    out.extend(rope_configs());
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    for c in &all {
        out.push(Config {
            name: leak(format!("{}-q8_0", c.name)),
            wtype: WType::Q8_0,
            ..c.clone()
        });
    }
    let mut seen = Vec::new();
    for c in &all {
        if seen.contains(&c.fam) {
            continue;
        }
        seen.push(c.fam);
        out.push(widen(c));
    }
    out
}

/// Models checked against llama.cpp only (the f64 reference of
/// `tests/families.rs` has no YaRN): YaRN scaling with the long prompt past
/// the original context. (Partial rotary dimensions are no case here:
/// llama.cpp b11312 refuses them for llama, qwen2 and qwen3, and so does
/// strata.)
pub fn rope_configs() -> Vec<Config> {
    let base = configs();
    let of = |name: &str| base.iter().find(|c| c.name == name).unwrap().clone();
    vec![Config {
        name: "qwen2-yarn",
        rope_yarn: Some((16.0, 32)),
        seed: 23,
        ..of("qwen2-untied-bias")
    }]
}

/// Per family, a model of realistic width for `strata bench` against
/// `llama-bench` (`examples/write_tiny_models.rs --bench`): 8 layers of
/// 1024 (16 heads of 64, 4 KV heads), FFN 2816, a 32000-token vocabulary,
/// Q4_K_M. Random weights: speed only, the text is noise.
pub fn bench_configs() -> Vec<Config> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for c in configs() {
        if seen.contains(&c.fam) {
            continue;
        }
        seen.push(c.fam);
        out.push(Config {
            name: Box::leak(format!("bench-{}", c.fam.arch()).into_boxed_str()),
            n_layer: 8,
            n_embd: 1024,
            n_head: 16,
            n_head_kv: 4,
            head_dim: 64,
            // experts as Qwen3-30B-A3B has them: 768 wide, 8 of 16 used
            // there; here 16 experts, 4 used
            n_ff: if c.n_expert > 0 { 768 } else { 2816 },
            n_expert: if c.n_expert > 0 { 16 } else { 0 },
            n_expert_used: if c.n_expert > 0 { 4 } else { 0 },
            wtype: WType::Q4KM,
            n_pad_vocab: 32000 - N_VOCAB,
            ..bench_gemma(c)
        });
    }
    out
}

/// A Gemma model's window and caps as the real ones have them (Gemma 2:
/// 4096 on every other layer, caps 50 and 30; Gemma 3: 512 on five layers
/// of six, no cap), not the tests' small ones; other families unchanged.
fn bench_gemma(c: Config) -> Config {
    match c.fam {
        Fam::Gemma2 => Config {
            n_swa: Some(4096),
            swa_pattern: None,
            attn_softcap: None,
            final_softcap: None,
            ..c
        },
        Fam::Gemma3 => Config {
            n_swa: Some(512),
            swa_pattern: None,
            final_softcap: None,
            ..c
        },
        _ => c,
    }
}

/// `c` at width 256 (4 heads of 64, 2 KV heads, FFN 512) as Q4_K_M.
pub fn widen(c: &Config) -> Config {
    Config {
        name: Box::leak(format!("{}-q4km", c.name).into_boxed_str()),
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 512,
        wtype: WType::Q4KM,
        ..c.clone()
    }
}

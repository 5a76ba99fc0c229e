//! Tiny random-weight models of each family (llama, qwen2, qwen3, gemma2,
//! gemma3, phi3, and the mixture-of-experts qwen3moe and Mixtral-style llama),
//! written with strata's GGUF writer: a fixed-seed generator, so the same
//! configuration gives byte-identical files every run (the llama.cpp golden
//! logits depend on it). The weights come back as f64 too, for the tests'
//! reference forward passes.

#![allow(dead_code)]

use std::sync::Arc;

use half::f16;
use strata::backend::Device;
use strata::gguf::{GgufFile, GgufWriter, Value};
use strata::DType;
use strata_models::model::Override;
use strata_models::{LoadOptions, Model, PlacementSpec};

/// The family a tiny model is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fam {
    /// `llama` (normal RoPE).
    Llama,
    /// `qwen2` (NEOX RoPE, Q/K/V biases).
    Qwen2,
    /// `qwen3` (NEOX RoPE, per-head Q/K RMS norms).
    Qwen3,
    /// `qwen3moe` (qwen3's attention, mixture-of-experts FFNs).
    Qwen3Moe,
    /// `gemma2` (NEOX RoPE, post-norms, GeGLU, soft-capping, sliding window
    /// on even layers, tied head).
    Gemma2,
    /// `gemma3` (as gemma2 with per-head Q/K norms, no attention soft-cap).
    Gemma3,
    /// `phi3` (NEOX RoPE, fused gate+up FFN, Q scaled before attention,
    /// `attention.sliding_window` written but off, as llama.cpp has it).
    Phi3,
}

impl Fam {
    /// `general.architecture`.
    pub fn arch(self) -> &'static str {
        match self {
            Fam::Llama => "llama",
            Fam::Qwen2 => "qwen2",
            Fam::Qwen3 => "qwen3",
            Fam::Qwen3Moe => "qwen3moe",
            Fam::Gemma2 => "gemma2",
            Fam::Gemma3 => "gemma3",
            Fam::Phi3 => "phi3",
        }
    }

    /// Gemma 2 or 3.
    pub fn is_gemma(self) -> bool {
        matches!(self, Fam::Gemma2 | Fam::Gemma3)
    }

    /// NEOX RoPE (the two halves of a head pair up).
    pub fn neox(self) -> bool {
        self != Fam::Llama
    }

    /// Per-head Q/K RMS norms.
    pub fn qk_norm(self) -> bool {
        matches!(self, Fam::Qwen3 | Fam::Qwen3Moe | Fam::Gemma3)
    }
}

/// What to write.
#[derive(Clone, Debug)]
pub struct Config {
    /// File name stem (also the golden data's name).
    pub name: &'static str,
    /// The family.
    pub fam: Fam,
    /// Blocks.
    pub n_layer: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Head size (written as `attention.key_length` when it is not n_embd / n_head).
    pub head_dim: usize,
    /// FFN width (of each expert in a mixture-of-experts model).
    pub n_ff: usize,
    /// Experts per FFN (0: dense FFNs).
    pub n_expert: usize,
    /// Experts each token is routed to.
    pub n_expert_used: usize,
    /// `output.weight` absent: the head is the token embedding.
    pub tied: bool,
    /// Write `rope_freqs.weight` (llama).
    pub rope_freqs: bool,
    /// Write Q/K/V biases.
    pub qkv_bias: bool,
    /// Write `output.bias` (qwen2).
    pub output_bias: bool,
    /// Linear RoPE scaling factor (`rope.scaling.type = linear`), when set.
    pub rope_linear: Option<f32>,
    /// Write Q, K and V as one `attn_qkv.weight` (phi3).
    pub fused_qkv: bool,
    /// LongRoPE (phi3): write `rope_factors_{long,short}.weight`,
    /// `rope.scaling.original_context_length` = this and the
    /// `rope.scaling.attn_factor` the converter computes for it. Below 256
    /// every test context is longer (the long factors apply), above 8192
    /// none is (the short ones).
    pub longrope: Option<usize>,
    /// YaRN scaling (`rope.scaling.type = yarn`): the factor and
    /// `rope.scaling.original_context_length`.
    pub rope_yarn: Option<(f32, usize)>,
    /// Rotated dimensions per head (`rope.dimension_count`) when fewer than
    /// the head size (partial rotary).
    pub n_rot: Option<usize>,
    /// RoPE base.
    pub rope_base: f32,
    /// RMS norm epsilon.
    pub eps: f32,
    /// `attention.sliding_window` (gemma), when written.
    pub n_swa: Option<usize>,
    /// `attention.sliding_window_pattern` (gemma), when written.
    pub swa_pattern: Option<usize>,
    /// `rope.freq_base_swa` (gemma), when written.
    pub rope_base_swa: Option<f32>,
    /// `attn_logit_softcapping` (gemma2), when written.
    pub attn_softcap: Option<f32>,
    /// `final_logit_softcapping` (gemma), when written.
    pub final_softcap: Option<f32>,
    /// Generator seed.
    pub seed: u64,
    /// How the matrices are stored.
    pub wtype: WType,
    /// Unused tokens appended to the vocabulary (a realistic head size for
    /// benchmarks; 0 in the tests' models).
    pub n_pad_vocab: usize,
}

/// How a tiny model's matrices (2-D and 3-D `.weight` tensors) are stored;
/// norms, biases and factors stay F32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WType {
    /// As generated.
    F32,
    /// Every matrix Q8_0 (rows must be a multiple of 32).
    Q8_0,
    /// As llama-quantize's Q4_K_M mixes them: Q4_K, with Q6_K for the head
    /// and for `attn_v` / `ffn_down` of every other layer. A matrix whose
    /// rows are not a multiple of 256 falls back to Q8_0, then F32.
    Q4KM,
}

impl WType {
    /// The type a matrix `name` with rows of `n` values is stored as.
    pub fn dtype(self, name: &str, n: usize) -> DType {
        let k = match self {
            WType::F32 => return DType::F32,
            WType::Q8_0 => DType::Q8_0,
            WType::Q4KM => {
                let layer: Option<usize> = name
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|i| i.parse().ok());
                let more_bits = name.contains("attn_v.") || name.contains("ffn_down");
                if name == "output.weight" || (more_bits && layer.is_some_and(|l| l % 2 == 0)) {
                    DType::Q6_K
                } else {
                    DType::Q4_K
                }
            }
        };
        [k, DType::Q8_0]
            .into_iter()
            .find(|d| n.is_multiple_of(d.block_size()))
            .unwrap_or(DType::F32)
    }
}

/// The byte-level vocabulary: the 256 GPT-2 byte symbols, then these.
pub const SPECIAL: [&str; 2] = ["<|bos|>", "<|eos|>"];
/// Vocabulary size.
pub const N_VOCAB: usize = 256 + SPECIAL.len();

// The configuration tables: the tests' models, the goldens', the benchmarks'.
#[path = "tiny_configs.rs"]
mod tiny_configs;
#[allow(unused_imports)]
pub use tiny_configs::{
    bench_configs, configs, golden_configs, longrope_attn_factor, rope_configs, widen, N_CTX_TRAIN,
};

/// A block's weights as f64 (matrices in ggml order: `[out][in]` rows).
#[derive(Clone, Debug, Default)]
pub struct LayerW {
    pub attn_norm: Vec<f64>,
    pub wq: Vec<f64>,
    pub wk: Vec<f64>,
    pub wv: Vec<f64>,
    pub wo: Vec<f64>,
    pub bq: Option<Vec<f64>>,
    pub bk: Option<Vec<f64>>,
    pub bv: Option<Vec<f64>>,
    pub q_norm: Option<Vec<f64>>,
    pub k_norm: Option<Vec<f64>>,
    pub post_attn_norm: Option<Vec<f64>>,
    pub post_ffn_norm: Option<Vec<f64>>,
    pub ffn_norm: Vec<f64>,
    /// The expert router (`[n_expert][n_embd]`) of a mixture-of-experts
    /// block, whose `gate`, `up` and `down` then hold every expert's matrix,
    /// one after the other.
    pub router: Option<Vec<f64>>,
    pub gate: Vec<f64>,
    pub up: Vec<f64>,
    pub down: Vec<f64>,
}

/// A model's weights as f64.
#[derive(Clone, Debug)]
pub struct Weights {
    pub emb: Vec<f64>,
    /// The head (`emb` again when tied).
    pub out: Vec<f64>,
    pub out_b: Option<Vec<f64>>,
    pub out_norm: Vec<f64>,
    /// The frequency factors RoPE divides by: `rope_freqs`, or the LongRoPE
    /// factors a test context picks.
    pub rope_freqs: Option<Vec<f64>>,
    /// What RoPE multiplies its output by (`rope.scaling.attn_factor`).
    pub rope_mscale: f64,
    pub layers: Vec<LayerW>,
}

/// xorshift64: values in [-1, 1).
pub struct Rng(pub u64);
impl Rng {
    /// The next value.
    pub fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
    }
    /// `n` values `offset + f() · scale`.
    pub fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + self.f() * scale).collect()
    }
}

/// GPT-2's byte-to-symbol map (printable bytes stand for themselves, the
/// others are shifted past 255).
pub fn byte_symbol(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// Tensors: name, shape, f32 data.
pub type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// Adds tensor `name` to `ts`; returns its values as f64.
fn keep(ts: &mut Tensors, name: String, shape: Vec<usize>, x: Vec<f32>) -> Vec<f64> {
    let v = x.iter().map(|&a| a as f64).collect();
    ts.push((name, shape, x));
    v
}

/// A random `[n_in, n_out]` matrix scaled by 1/sqrt(n_in).
fn mat(r: &mut Rng, ts: &mut Tensors, name: String, n_in: usize, n_out: usize) -> Vec<f64> {
    let x = r.vec(n_in * n_out, 1.0 / (n_in as f32).sqrt(), 0.0);
    keep(ts, name, vec![n_in, n_out], x)
}

/// `n_expert` random `[n_in, n_out]` matrices stacked along ne2.
fn experts(
    r: &mut Rng,
    ts: &mut Tensors,
    name: String,
    n_in: usize,
    n_out: usize,
    n_expert: usize,
) -> Vec<f64> {
    let x = r.vec(n_in * n_out * n_expert, 1.0 / (n_in as f32).sqrt(), 0.0);
    keep(ts, name, vec![n_in, n_out, n_expert], x)
}

/// Replaces the last `n` matrices of `ts` (same input width) by one named
/// `name` holding their rows in order (a fused projection).
fn fuse(ts: &mut Tensors, name: &str, n: usize) {
    let parts = ts.split_off(ts.len() - n);
    let n_in = parts[0].1[0];
    let rows: usize = parts.iter().map(|p| p.1[1]).sum();
    let data = parts.into_iter().flat_map(|p| p.2).collect();
    ts.push((name.to_string(), vec![n_in, rows], data));
}

/// A random vector around `offset`.
fn vector(
    r: &mut Rng,
    ts: &mut Tensors,
    name: String,
    n: usize,
    scale: f32,
    offset: f32,
) -> Vec<f64> {
    let x = r.vec(n, scale, offset);
    keep(ts, name, vec![n], x)
}

/// Rounds every value through f16 (what an f16 KV cache keeps).
pub fn f16r(v: &mut [f64]) {
    for x in v {
        *x = f16::from_f64(*x).to_f64();
    }
}

/// The reference forward passes' per-position Q, K and V rows, K and V
/// rounded to f16 as the KV cache keeps them.
#[derive(Default)]
pub struct QkvRows {
    qs: Vec<Vec<f64>>,
    ks: Vec<Vec<f64>>,
    vs: Vec<Vec<f64>>,
}

impl QkvRows {
    /// Appends the next position's rows (rounding `k` and `v` to f16).
    pub fn push(&mut self, q: Vec<f64>, mut k: Vec<f64>, mut v: Vec<f64>) {
        f16r(&mut k);
        f16r(&mut v);
        self.qs.push(q);
        self.ks.push(k);
        self.vs.push(v);
    }

    /// [`causal_attention`] of position `p` over these rows.
    pub fn attention(&self, p: usize, dims: (usize, usize, usize)) -> Vec<f64> {
        causal_attention(&self.qs, &self.ks, &self.vs, p, dims)
    }

    /// [`windowed_attention`] of position `p` over these rows.
    pub fn attention_with(
        &self,
        p: usize,
        dims: (usize, usize, usize),
        window: Option<usize>,
        softcap: Option<f64>,
    ) -> Vec<f64> {
        windowed_attention(&self.qs, &self.ks, &self.vs, p, dims, window, softcap)
    }
}

/// The reference forward passes' causal attention at position `p`, in f64:
/// each of `nh` query heads of `hd` values attends with softmax(q·k / √hd)
/// to the rows of positions `0..=p`, reading KV head `h / (nh / nkv)`.
/// `qs`, `ks`, `vs`: one row per position. Returns the `nh · hd` outputs.
pub fn causal_attention(
    qs: &[Vec<f64>],
    ks: &[Vec<f64>],
    vs: &[Vec<f64>],
    p: usize,
    dims: (usize, usize, usize),
) -> Vec<f64> {
    windowed_attention(qs, ks, vs, p, dims, None, None)
}

/// [`causal_attention`] over the last `window` positions only (all when
/// `None`), with the scores soft-capped (`cap · tanh(s / cap)`) when
/// `softcap` is given.
pub fn windowed_attention(
    qs: &[Vec<f64>],
    ks: &[Vec<f64>],
    vs: &[Vec<f64>],
    p: usize,
    (nh, nkv, hd): (usize, usize, usize),
    window: Option<usize>,
    softcap: Option<f64>,
) -> Vec<f64> {
    let first = window.map_or(0, |w| (p + 1).saturating_sub(w));
    let mut att = vec![0.0; nh * hd];
    for h in 0..nh {
        let kh = h / (nh / nkv);
        let q = &qs[p][h * hd..][..hd];
        let sc: Vec<f64> = (first..=p)
            .map(|j| {
                let dot: f64 = q
                    .iter()
                    .zip(&ks[j][kh * hd..][..hd])
                    .map(|(a, b)| a * b)
                    .sum();
                let s = dot / (hd as f64).sqrt();
                softcap.map_or(s, |c| c * (s / c).tanh())
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for (j, ej) in (first..=p).zip(&e) {
            for d in 0..hd {
                att[h * hd + d] += ej / z * vs[j][kh * hd + d];
            }
        }
    }
    att
}

/// Loads a model from GGUF `bytes` with `opts`.
pub fn load(bytes: &[u8], opts: &LoadOptions) -> strata_models::Result<Arc<Model>> {
    Ok(Arc::new(Model::from_gguf(
        GgufFile::from_bytes(bytes.to_vec())?,
        opts,
        None,
    )?))
}

/// Writes `cfg` as a GGUF file; returns its bytes and the weights as f64.
pub fn write(cfg: &Config) -> (Vec<u8>, Weights) {
    write_with(cfg, &mut |_| {})
}

/// The pieces [`write_with`] lets a test change before the file is made.
pub struct Parts {
    /// Metadata, in order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors: name, shape, f32 data.
    pub tensors: Tensors,
}

/// [`write`], letting `edit` change the metadata and tensors first (to make
/// broken files; the weights returned are the unedited ones).
pub fn write_with(cfg: &Config, edit: &mut dyn FnMut(&mut Parts)) -> (Vec<u8>, Weights) {
    let arch = cfg.fam.arch();
    let k = |s: &str| format!("{arch}.{s}");
    let u = |x: usize| Value::U32(x as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), arch.into()),
        // never "phi3": llama.cpp would give that name's SentencePiece
        // tokens attributes, and refuse this byte-level vocabulary
        (
            "general.name".into(),
            cfg.name.replace("phi3", "phi").into(),
        ),
        (k("block_count"), u(cfg.n_layer)),
        (k("context_length"), u(N_CTX_TRAIN)),
        (k("embedding_length"), u(cfg.n_embd)),
        (k("feed_forward_length"), u(cfg.n_ff)),
        (k("attention.head_count"), u(cfg.n_head)),
        (k("attention.head_count_kv"), u(cfg.n_head_kv)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(cfg.eps)),
        (k("rope.freq_base"), Value::F32(cfg.rope_base)),
    ];
    if cfg.head_dim * cfg.n_head != cfg.n_embd {
        md.push((k("attention.key_length"), u(cfg.head_dim)));
        md.push((k("attention.value_length"), u(cfg.head_dim)));
    }
    if let Some(n) = cfg.n_rot {
        md.push((k("rope.dimension_count"), u(n)));
    } else if cfg.fam == Fam::Llama || cfg.fam == Fam::Phi3 {
        md.push((k("rope.dimension_count"), u(cfg.head_dim)));
    }
    if cfg.n_expert > 0 {
        md.push((k("expert_count"), u(cfg.n_expert)));
        md.push((k("expert_used_count"), u(cfg.n_expert_used)));
    }
    if cfg.fam == Fam::Qwen3Moe {
        md.push((k("expert_feed_forward_length"), u(cfg.n_ff)));
    }
    if let Some((f, orig)) = cfg.rope_yarn {
        md.push((k("rope.scaling.type"), "yarn".into()));
        md.push((k("rope.scaling.factor"), Value::F32(f)));
        md.push((k("rope.scaling.original_context_length"), u(orig)));
    }
    if cfg.fam == Fam::Phi3 {
        // shorter than the prompts: applied, it would change the logits
        md.push((k("attention.sliding_window"), u(4)));
    }
    if let Some(orig) = cfg.longrope {
        md.push((k("rope.scaling.original_context_length"), u(orig)));
        md.push((
            k("rope.scaling.attn_factor"),
            Value::F32(longrope_attn_factor(orig)),
        ));
    }
    if let Some(f) = cfg.rope_linear {
        md.push((k("rope.scaling.type"), "linear".into()));
        md.push((k("rope.scaling.factor"), Value::F32(f)));
    }
    if let Some(n) = cfg.n_swa {
        md.push((k("attention.sliding_window"), u(n)));
    }
    if let Some(n) = cfg.swa_pattern {
        md.push((k("attention.sliding_window_pattern"), u(n)));
    }
    if let Some(b) = cfg.rope_base_swa {
        md.push((k("rope.freq_base_swa"), Value::F32(b)));
    }
    if let Some(c) = cfg.attn_softcap {
        md.push((k("attn_logit_softcapping"), Value::F32(c)));
    }
    if let Some(c) = cfg.final_softcap {
        md.push((k("final_logit_softcapping"), Value::F32(c)));
    }
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_symbol(b).to_string()).collect();
    tokens.extend(SPECIAL.iter().map(|s| s.to_string()));
    tokens.extend((0..cfg.n_pad_vocab).map(|i| format!("<unused{i}>")));
    let mut types = vec![1i32; 256];
    types.extend([3, 3]);
    types.extend(std::iter::repeat_n(5, cfg.n_pad_vocab));
    let pre = if cfg.fam == Fam::Llama {
        "llama-bpe"
    } else {
        "qwen2"
    };
    md.extend([
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), pre.into()),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.into())),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Vec::<String>::new().into()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), u(256)),
        ("tokenizer.ggml.eos_token_id".into(), u(257)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]);

    let (e, v, ff, hd) = (
        cfg.n_embd,
        N_VOCAB + cfg.n_pad_vocab,
        cfg.n_ff,
        cfg.head_dim,
    );
    let (qd, kvd) = (cfg.n_head * hd, cfg.n_head_kv * hd);
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ cfg.seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut ts: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let emb = mat(&mut r, &mut ts, "token_embd.weight".into(), e, v);
    let out = if cfg.tied {
        emb.clone()
    } else {
        mat(&mut r, &mut ts, "output.weight".into(), e, v)
    };
    let out_norm = vector(&mut r, &mut ts, "output_norm.weight".into(), e, 0.3, 1.0);
    let out_b = cfg
        .output_bias
        .then(|| vector(&mut r, &mut ts, "output.bias".into(), v, 0.5, 0.0));
    // frequency factors growing from 1 (the highest frequency) as Llama
    // 3.1's do, but from the second pair on, so that they change angles
    // the short test prompts reach
    let n_pairs = cfg.n_rot.unwrap_or(hd) / 2;
    let rope_freqs = cfg.rope_freqs.then(|| {
        let x: Vec<f32> = (0..n_pairs)
            .map(|i| 1.0 + 3.0 * i as f32 / n_pairs as f32 + 0.1 * r.f().abs())
            .collect();
        keep(&mut ts, "rope_freqs.weight".into(), vec![n_pairs], x)
    });
    // LongRoPE: long factors from 1 to ~8, short ones near 1
    let rope_freqs = match cfg.longrope {
        None => rope_freqs,
        Some(orig) => {
            let long: Vec<f32> = (0..hd / 2)
                .map(|i| 1.0 + 7.0 * i as f32 / (hd / 2) as f32 + 0.2 * r.f().abs())
                .collect();
            let short: Vec<f32> = (0..hd / 2).map(|_| 1.0 + 0.5 * r.f().abs()).collect();
            let long = keep(
                &mut ts,
                "rope_factors_long.weight".into(),
                vec![hd / 2],
                long,
            );
            let short = keep(
                &mut ts,
                "rope_factors_short.weight".into(),
                vec![hd / 2],
                short,
            );
            Some(if orig < N_CTX_TRAIN { long } else { short })
        }
    };
    let rope_mscale = cfg.longrope.map_or(1.0, |o| longrope_attn_factor(o) as f64);
    let mut layers = Vec::new();
    for il in 0..cfg.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        let t = &mut ts;
        let mut l = LayerW {
            attn_norm: vector(&mut r, t, n("attn_norm.weight"), e, 0.3, 1.0),
            ..LayerW::default()
        };
        l.wq = mat(&mut r, t, n("attn_q.weight"), e, qd);
        l.wk = mat(&mut r, t, n("attn_k.weight"), e, kvd);
        l.wv = mat(&mut r, t, n("attn_v.weight"), e, kvd);
        if cfg.fused_qkv {
            fuse(t, &n("attn_qkv.weight"), 3);
        }
        l.wo = mat(&mut r, t, n("attn_output.weight"), qd, e);
        if cfg.qkv_bias {
            l.bq = Some(vector(&mut r, t, n("attn_q.bias"), qd, 0.5, 0.0));
            l.bk = Some(vector(&mut r, t, n("attn_k.bias"), kvd, 0.5, 0.0));
            l.bv = Some(vector(&mut r, t, n("attn_v.bias"), kvd, 0.5, 0.0));
        }
        if cfg.fam.qk_norm() {
            l.q_norm = Some(vector(&mut r, t, n("attn_q_norm.weight"), hd, 0.3, 1.0));
            l.k_norm = Some(vector(&mut r, t, n("attn_k_norm.weight"), hd, 0.3, 1.0));
        }
        if cfg.fam.is_gemma() {
            let w = vector(&mut r, t, n("post_attention_norm.weight"), e, 0.3, 1.0);
            l.post_attn_norm = Some(w);
        }
        l.ffn_norm = vector(&mut r, t, n("ffn_norm.weight"), e, 0.3, 1.0);
        if cfg.n_expert > 0 {
            // router logits spread wide (scale 4) so that no two experts'
            // probabilities are near a tie that rounding could flip
            let ne = cfg.n_expert;
            let x = r.vec(e * ne, 4.0 / (e as f32).sqrt(), 0.0);
            l.router = Some(keep(t, n("ffn_gate_inp.weight"), vec![e, ne], x));
            l.gate = experts(&mut r, t, n("ffn_gate_exps.weight"), e, ff, ne);
            l.up = experts(&mut r, t, n("ffn_up_exps.weight"), e, ff, ne);
            l.down = experts(&mut r, t, n("ffn_down_exps.weight"), ff, e, ne);
        } else {
            l.gate = mat(&mut r, t, n("ffn_gate.weight"), e, ff);
            l.up = mat(&mut r, t, n("ffn_up.weight"), e, ff);
            if cfg.fam == Fam::Phi3 {
                fuse(t, &n("ffn_up.weight"), 2);
            }
            l.down = mat(&mut r, t, n("ffn_down.weight"), ff, e);
        }
        if cfg.fam.is_gemma() {
            let w = vector(&mut r, t, n("post_ffw_norm.weight"), e, 0.3, 1.0);
            l.post_ffn_norm = Some(w);
        }
        layers.push(l);
    }
    let mut parts = Parts {
        metadata: md,
        tensors: ts,
    };
    edit(&mut parts);
    let mut g = GgufWriter::new();
    for (key, val) in parts.metadata {
        g.add_metadata(key, val).unwrap();
    }
    for (name, shape, data) in parts.tensors {
        // the expert router stays F32, as llama-quantize leaves it
        let dtype = if shape.len() >= 2 && name.ends_with(".weight") && !name.contains("gate_inp") {
            cfg.wtype.dtype(&name, shape[0])
        } else {
            DType::F32
        };
        let bytes: Vec<u8> = if dtype == DType::F32 {
            data.iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            let row = dtype.row_size(shape[0]);
            let mut q = vec![0u8; row * (data.len() / shape[0])];
            for (src, dst) in data.chunks(shape[0]).zip(q.chunks_mut(row)) {
                strata::quant::quantize_row(dtype, src, dst).unwrap();
            }
            q
        };
        g.add_tensor(name, dtype, &shape, bytes).unwrap();
    }
    let w = Weights {
        emb,
        out,
        out_b,
        out_norm,
        rope_freqs,
        rope_mscale,
        layers,
    };
    (g.to_bytes().unwrap(), w)
}

/// FNV-1a 64 of `bytes`: the golden manifest records it per model, so a
/// test can tell that the generator still writes the files llama.cpp ran on.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Load options putting `n_gpu_layers` layers (llama.cpp's `-ngl` count)
/// on `devices`, with name `overrides` (`-ot`) checked first.
pub fn offload(
    devices: Vec<Arc<dyn Device>>,
    n_gpu_layers: i32,
    overrides: Vec<Override>,
) -> LoadOptions {
    LoadOptions {
        devices,
        placement: PlacementSpec {
            n_gpu_layers,
            overrides,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A change to a tiny model before it is written.
pub type Edit = dyn FnMut(&mut Parts);

/// The load error of `cfg`'s model after `edit`.
pub fn load_err(cfg: &Config, edit: &mut Edit) -> strata_models::ModelError {
    let (bytes, _) = write_with(cfg, edit);
    load(&bytes, &LoadOptions::default()).unwrap_err()
}

/// An edit that sets metadata `key` to `v` (replacing any value it had).
pub fn set_meta(key: &str, v: Value) -> impl FnMut(&mut Parts) + '_ {
    move |p| {
        p.metadata.retain(|(k, _)| k != key);
        p.metadata.push((key.to_string(), v.clone()));
    }
}

/// An edit that leaves tensor `name` out.
pub fn drop_tensor(name: &'static str) -> impl FnMut(&mut Parts) {
    move |p| p.tensors.retain(|(n, _, _)| n != name)
}

/// An edit that adds a tensor `name` of `shape`, all ones.
pub fn add_tensor(name: &'static str, shape: Vec<usize>) -> impl FnMut(&mut Parts) {
    move |p| {
        let n = shape.iter().product();
        p.tensors
            .push((name.to_string(), shape.clone(), vec![1.0; n]));
    }
}

/// An edit that takes one off the last dimension of tensor `name` (its
/// last row; a vector's last element).
pub fn shrink_tensor(name: &'static str) -> impl FnMut(&mut Parts) {
    move |p| {
        for (n, shape, data) in &mut p.tensors {
            if n == name {
                let last = shape.len() - 1;
                let row: usize = shape[..last].iter().product();
                data.truncate(data.len() - row);
                shape[last] -= 1;
            }
        }
    }
}

/// A change to one tensor of a tiny model, which its load error must name.
pub enum TensorEdit {
    /// The tensor left out ([`drop_tensor`]).
    Missing(&'static str),
    /// One off the tensor's last dimension ([`shrink_tensor`]).
    Shrunk(&'static str),
    /// The tensor added, of this shape, all ones ([`add_tensor`]).
    Added(&'static str, Vec<usize>),
}

/// Asserts that each model, after its edit, fails to load with a typed
/// error naming the edited tensor.
pub fn assert_tensor_errors(cases: Vec<(&Config, TensorEdit)>) {
    for (cfg, edit) in cases {
        let (name, mut edit): (&str, Box<Edit>) = match edit {
            TensorEdit::Missing(n) => (n, Box::new(drop_tensor(n))),
            TensorEdit::Shrunk(n) => (n, Box::new(shrink_tensor(n))),
            TensorEdit::Added(n, shape) => (n, Box::new(add_tensor(n, shape))),
        };
        let e = load_err(cfg, &mut *edit);
        assert!(
            matches!(&e, strata_models::ModelError::Tensor { name: n, .. } if n == name),
            "{} {name}: {e}",
            cfg.name
        );
    }
}

/// The key a metadata error names (panics for any other error).
pub fn metadata_key(e: &strata_models::ModelError) -> &str {
    match e {
        strata_models::ModelError::Metadata { key, .. } => key,
        _ => panic!("not a metadata error: {e}"),
    }
}

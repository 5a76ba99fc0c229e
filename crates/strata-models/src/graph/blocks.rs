//! The blocks every decoder family is built from: RMS norm with a weight, a
//! projection with an optional bias, the attention block, the gated FFN
//! (SwiGLU or GeGLU), its mixture of experts, and soft-capping. A family's
//! differences are the optional weights of its [`Layer`] (Q/K/V biases,
//! fused QKV, per-head Q/K norms, RoPE frequency or LongRoPE factors, fused
//! gate+up, post-norms, the expert router) and its [`HParams`] (query
//! scale or Phi-3's Q pre-scaling, attention soft-cap, FFN gate activation).

use strata::ops::{self, RopeParams};
use strata::{Graph, Tensor};

use super::Attention;
use crate::kv::KvCache;
use crate::model::{HParams, Layer};
use crate::{ModelError, Result};

/// Names `t` as llama.cpp's graph callback does (`name-il`).
pub(super) fn named(t: Tensor, name: &str, il: usize) -> Tensor {
    t.with_name(format!("{name}-{il}"))
}

/// The graph inputs the attention block reads, and how it attends.
pub(super) struct AttnInputs<'a> {
    /// Positions, I32 `[n_tokens]`.
    pub positions: &'a Tensor,
    /// Cache cells written, I64 `[n_tokens]`.
    pub kv_idx: &'a Tensor,
    /// The layer's mask `[n_kv, n_tokens]` (causal, or causal and windowed
    /// for a sliding-window layer).
    pub mask: &'a Tensor,
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Cache cells attended to.
    pub n_kv: usize,
    /// FLASH_ATTN_EXT or SOFT_MAX.
    pub kind: Attention,
    /// The layer's RoPE parameters.
    pub rope: RopeParams,
    /// The context is longer than the original training context: LongRoPE
    /// layers use their long factors (llama.cpp's `get_rope_factors`).
    pub long_ctx: bool,
}

/// `cap · tanh(x / cap)` (ggml_scale → ggml_tanh → ggml_scale, as
/// llama.cpp builds attention and final logit soft-capping).
pub(super) fn softcap(x: &Tensor, cap: f32) -> Result<Tensor> {
    let t = ops::unary(&ops::scale(x, 1.0 / cap)?, ops::UnaryOp::Tanh)?;
    Ok(ops::scale(&t, cap)?)
}

/// RMS norm of each row of `x` times `w` (broadcast), named `name-il`.
pub(super) fn norm(x: &Tensor, w: &Tensor, eps: f32, name: &str, il: usize) -> Result<Tensor> {
    let cur = ops::rms_norm(x, eps)?;
    Ok(named(ops::mul(&cur, w)?, name, il))
}

/// `w · x`, plus `b` when the model has that bias.
pub(super) fn linear(w: &Tensor, b: Option<&Tensor>, x: &Tensor) -> Result<Tensor> {
    let y = ops::mul_mat(w, x)?;
    Ok(match b {
        Some(b) => ops::add(&y, b)?,
        None => y,
    })
}

/// RoPE of `x` at the batch's positions, with the layer's frequency factors
/// when it has them (ggml_rope_ext's third source): `rope_freqs`, else the
/// LongRoPE factors the context length picks.
fn rope(x: &Tensor, l: &Layer, inp: &AttnInputs<'_>) -> Result<Tensor> {
    let factors = match (&l.rope_freqs, inp.long_ctx) {
        (Some(f), _) => Some(f),
        (None, true) => l.rope_long.as_ref(),
        (None, false) => l.rope_short.as_ref(),
    };
    Ok(match factors {
        Some(ff) => ops::rope_ext(x, inp.positions, Some(ff), inp.rope)?,
        None => ops::rope(x, inp.positions, inp.rope)?,
    })
}

/// Self-attention of layer `il` on the normed input `x` `[n_embd, n_tokens]`:
/// Q, K, V (with biases when present), per-head RMS norm of Q and K when the
/// layer has their weights (applied before RoPE, as Qwen 3 does), RoPE (with
/// the layer's frequency factors when present), the KV cache write (added
/// to `graph` first), attention over the first `n_kv` cells and the output
/// projection. Returns `[n_embd, n_tokens]`.
pub(super) fn attention(
    hp: &HParams,
    l: &Layer,
    kv: &KvCache,
    il: usize,
    x: &Tensor,
    inp: &AttnInputs<'_>,
    graph: &mut Graph,
) -> Result<Tensor> {
    let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
    let (nh, nkv) = (hp.n_head, hp.n_head_kv);
    let (n_tokens, n_kv) = (inp.n_tokens, inp.n_kv);
    // Gemma scales the queries (after RoPE) by its own factor and attends
    // with a scale of 1; Phi-3 does the same with 1/√head_dim
    let mut kq_scale = match hp.shaping.q_scale {
        Some(_) => 1.0,
        None => 1.0 / (dk as f32).sqrt(),
    };
    let attn_softcap = hp.shaping.attn_softcap;
    let (mut q, mut k, v) = qkv(hp, l, x, n_tokens, il)?;
    // The three projections first, side by side: the CPU backend computes
    // matmuls over one input that are live together as one step (one
    // activation preparation, one barrier).
    for t in [&q, &k, &v] {
        graph.expand(t);
    }
    if let Some(w) = &l.attn_q_norm {
        q = norm(&q, w, hp.rms_eps, "Qcur_normed", il)?;
    }
    if let Some(w) = &l.attn_k_norm {
        k = norm(&k, w, hp.rms_eps, "Kcur_normed", il)?;
    }
    let mut q = named(rope(&q, l, inp)?, "Qrope", il);
    let k = named(rope(&k, l, inp)?, "Krope", il);
    if let Some(s) = hp.shaping.q_scale {
        q = named(ops::scale(&q, s)?, "Qscaled", il);
    } else if hp.family.spec().prescale_q {
        q = named(ops::scale(&q, kq_scale)?, "Qcur_scaled", il);
        kq_scale = 1.0;
    }

    // cache writes: one row (all KV heads of a token) per cell
    let k_rows = ops::reshape(&k, &[dk * nkv, n_tokens])?;
    let v_rows = ops::reshape(&v, &[dv * nkv, n_tokens])?;
    let k_all = named(
        ops::set_rows(&kv.k[il], &k_rows, inp.kv_idx)?,
        "k_cache_store",
        il,
    );
    let v_all = named(
        ops::set_rows(&kv.v[il], &v_rows, inp.kv_idx)?,
        "v_cache_store",
        il,
    );
    graph.expand(&k_all);
    graph.expand(&v_all);
    // [D, H_kv, n_kv] views of the first n_kv cells, read through the writes
    let kb = kv.k[il].nb();
    let vb = kv.v[il].nb();
    let k_view = ops::view_3d(&k_all, [dk, nkv, n_kv], kb[0] * dk, kb[1], 0)?;
    let v_view = ops::view_3d(&v_all, [dv, nkv, n_kv], vb[0] * dv, vb[1], 0)?;
    let k_heads = ops::permute(&k_view, [0, 2, 1, 3])?; // [D, n_kv, H_kv]
    let q_heads = ops::permute(&q, [0, 2, 1, 3])?; // [D, n_tokens, H]

    let attn_out = match inp.kind {
        Attention::Flash => {
            let v_heads = ops::permute(&v_view, [0, 2, 1, 3])?;
            let o = ops::flash_attn_ext(
                &q_heads,
                &k_heads,
                &v_heads,
                Some(inp.mask),
                kq_scale,
                0.0,
                attn_softcap.unwrap_or(0.0),
            )?;
            // [Dv, H, n_tokens]
            ops::reshape(&o, &[dv * nh, n_tokens])?
        }
        Attention::SoftMax => {
            let mut kq = named(ops::mul_mat(&k_heads, &q_heads)?, "kq", il); // [n_kv, n_tokens, H]
            if let Some(cap) = attn_softcap {
                kq = named(softcap(&kq, cap)?, "kq_capped", il);
            }
            let kq = named(
                ops::soft_max_ext(&kq, Some(inp.mask), kq_scale, 0.0)?,
                "kq_soft_max",
                il,
            );
            // V transposed to [n_kv, Dv, H_kv], contiguous
            let v_t = ops::cont(&ops::permute(&v_view, [1, 2, 0, 3])?)?;
            let kqv = ops::mul_mat(&v_t, &kq)?; // [Dv, n_tokens, H]
            let merged = ops::permute(&kqv, [0, 2, 1, 3])?; // [Dv, H, n_tokens]
            ops::reshape(&ops::cont(&merged)?, &[dv * nh, n_tokens])?
        }
    };
    let attn_out = named(attn_out, "kqv_out", il);
    Ok(named(
        linear(&l.wo, l.bo.as_ref(), &attn_out)?,
        "attn_out",
        il,
    ))
}

/// Q `[dk, n_head, n_tokens]`, K `[dk, n_head_kv, n_tokens]` and V
/// `[dv · n_head_kv, n_tokens]` of layer `il` on the normed input `x`: three
/// projections (with their biases), or one fused projection split by views
/// (llama.cpp's `build_qkv`: the fused bias, else the three biases
/// concatenated, which adding each to its view equals).
fn qkv(
    hp: &HParams,
    l: &Layer,
    x: &Tensor,
    n_tokens: usize,
    il: usize,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
    let (nh, nkv) = (hp.n_head, hp.n_head_kv);
    let Some(wqkv) = &l.wqkv else {
        let q = named(linear(&l.wq, l.bq.as_ref(), x)?, "Qcur", il);
        let k = named(linear(&l.wk, l.bk.as_ref(), x)?, "Kcur", il);
        let v = named(linear(&l.wv, l.bv.as_ref(), x)?, "Vcur", il);
        let q = ops::reshape(&q, &[dk, nh, n_tokens])?;
        let k = ops::reshape(&k, &[dk, nkv, n_tokens])?;
        return Ok((q, k, v));
    };
    let qkv = named(linear(wqkv, l.bqkv.as_ref(), x)?, "wqkv", il);
    let es = qkv.nb()[0];
    let row = qkv.nb()[1];
    let (qd, kd) = (dk * nh, dk * nkv);
    let q = ops::view_3d(&qkv, [dk, nh, n_tokens], es * dk, row, 0)?;
    let k = ops::view_3d(&qkv, [dk, nkv, n_tokens], es * dk, row, es * qd)?;
    let v = ops::view_2d(&qkv, dv * nkv, n_tokens, row, es * (qd + kd))?;
    let bias = |t: Tensor, b: &Option<Tensor>, shape: &[usize]| -> Result<Tensor> {
        Ok(match b {
            Some(b) => ops::add(&t, &ops::reshape(b, shape)?)?,
            None => t,
        })
    };
    let q = bias(q, &l.bq, &[dk, nh])?;
    let k = bias(k, &l.bk, &[dk, nkv])?;
    let v = bias(v, &l.bv, &[dv * nkv])?;
    Ok((
        named(q, "Qcur", il),
        named(k, "Kcur", il),
        named(ops::cont(&v)?, "Vcur", il),
    ))
}

/// The gated FFN of layer `il` on the normed input `x`: down(act(gate(x)) ·
/// up(x)) with the family's activation (SiLU, or Gemma's GELU), each
/// projection with its bias when present; with gate and up fused in
/// `ffn_up` (Phi-3), act of the first half of its rows times the second
/// half (ggml_swiglu).
pub(super) fn ffn(hp: &HParams, l: &Layer, x: &Tensor, il: usize) -> Result<Tensor> {
    let up = |x: &Tensor| -> Result<Tensor> {
        Ok(named(
            linear(&l.ffn_up, l.ffn_up_b.as_ref(), x)?,
            "ffn_up",
            il,
        ))
    };
    let glu = hp.family.ffn_glu();
    let name = match glu {
        ops::GluOp::Geglu => "ffn_geglu",
        _ => "ffn_swiglu",
    };
    let act = match &l.ffn_gate {
        Some(g) => {
            let gate = named(linear(g, l.ffn_gate_b.as_ref(), x)?, "ffn_gate", il);
            ops::glu_split(&gate, &up(x)?, glu)?
        }
        None => ops::glu(&up(x)?, glu, false)?,
    };
    let act = named(act, name, il);
    Ok(named(
        linear(&l.ffn_down, l.ffn_down_b.as_ref(), &act)?,
        "ffn_out",
        il,
    ))
}

/// The mixture-of-experts FFN of layer `il` on the normed input `x`
/// `[n_embd, n_tokens]`, in the op order of llama.cpp's `build_moe_ffn` for
/// the softmax-gated, weight-normalising families (llama, qwen3moe): router
/// logits → SOFT_MAX → the `n_expert_used` best (a descending ARGSORT and a
/// view, `argsort_top_k`) → GET_ROWS of their probabilities → divided by
/// their sum (clamped below at 2^-14) → MUL_MAT_ID through the chosen
/// experts' up and gate matrices → SwiGLU → MUL_MAT_ID through their down
/// matrices → times the weights → the experts' rows added in order.
/// The weights are expanded into `graph` first and the expert views before
/// their sum, as llama.cpp does, so the node order matches ggml's.
pub(super) fn moe_ffn(
    hp: &HParams,
    l: &Layer,
    router: &Tensor,
    x: &Tensor,
    il: usize,
    graph: &mut Graph,
) -> Result<Tensor> {
    let (n_embd, n_tokens) = (x.ne()[0], x.ne()[1]);
    let (n_expert, k) = (hp.n_expert, hp.n_expert_used);
    let logits = named(ops::mul_mat(router, x)?, "ffn_moe_logits", il);
    let probs = named(ops::soft_max(&logits)?, "ffn_moe_probs", il);
    let selected = named(ops::argsort_top_k(&probs, k)?, "ffn_moe_topk", il);
    let probs = ops::reshape(&probs, &[1, n_expert, n_tokens])?;
    let weights = named(ops::get_rows(&probs, &selected)?, "ffn_moe_weights", il);
    let weights = ops::reshape(&weights, &[k, n_tokens])?;
    let sum = named(ops::sum_rows(&weights)?, "ffn_moe_weights_sum", il);
    // no division by 0: the smallest normal f16, as llama.cpp
    let sum = named(
        ops::clamp(&sum, 6.103_515_6e-5, f32::INFINITY)?,
        "ffn_moe_weights_sum_clamped",
        il,
    );
    let weights = named(ops::div(&weights, &sum)?, "ffn_moe_weights_norm", il);
    let weights = ops::reshape(&weights, &[1, k, n_tokens])?;
    graph.expand(&weights);

    let cur = ops::reshape(x, &[n_embd, 1, n_tokens])?;
    let up = named(
        ops::mul_mat_id(&l.ffn_up, &cur, &selected)?,
        "ffn_moe_up",
        il,
    );
    let Some(gate_exps) = &l.ffn_gate else {
        return Err(ModelError::MoeWithoutGate { layer: il });
    };
    let gate = named(
        ops::mul_mat_id(gate_exps, &cur, &selected)?,
        "ffn_moe_gate",
        il,
    );
    let act = named(ops::swiglu_split(&gate, &up)?, "ffn_moe_swiglu", il);
    let down = named(
        ops::mul_mat_id(&l.ffn_down, &act, &selected)?,
        "ffn_moe_down",
        il,
    );
    let experts = named(ops::mul(&down, &weights)?, "ffn_moe_weighted", il);
    graph.expand(&experts);
    let nb = experts.nb();
    let mut views = Vec::with_capacity(k);
    for i in 0..k {
        let v = ops::view_2d(&experts, n_embd, n_tokens, nb[2], i * nb[1])?;
        graph.expand(&v);
        views.push(v);
    }
    let mut out = views[0].clone();
    for v in &views[1..] {
        out = ops::add(&out, v)?;
        graph.expand(&out);
    }
    if k == 1 {
        // not a strided view: the residual add wants a plain tensor
        out = ops::cont(&out)?;
    }
    Ok(named(out, "ffn_moe_out", il))
}

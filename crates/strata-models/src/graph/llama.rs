//! The llama-family graph, as llama.cpp's `llm_build_llama` builds it:
//! token embedding → per layer (RMS norm → Q, K, V → RoPE → KV cache write
//! (SET_ROWS, f16) → grouped-query attention (FLASH_ATTN_EXT, or SOFT_MAX
//! with a causal mask) → output projection → residual → RMS norm → SwiGLU
//! FFN → residual) → final norm → output projection. Only the rows whose
//! logits are wanted go through the last layer's FFN and the head (llama.cpp's
//! `inp_out_ids`).

use strata::ops::{self, RopeParams};
use strata::{DType, Graph, Tensor};

use crate::kv::KvCache;
use crate::model::Model;
use crate::{ModelError, Result};

/// How attention is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attention {
    /// FLASH_ATTN_EXT over the f16 cache with an f16 mask (llama.cpp's CPU default).
    #[default]
    Flash,
    /// K·Q, SOFT_MAX ext with an f32 causal mask and scale, then V·softmax.
    SoftMax,
}

/// The sizes a graph is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchShape {
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Cache cells attended to (positions 0..n_kv).
    pub n_kv: usize,
    /// Rows of logits computed: all tokens when equal to `n_tokens`, else the
    /// rows named by the `out_ids` input.
    pub n_outputs: usize,
}

/// A built graph and its inputs (to be written after allocation).
pub struct BatchGraph {
    /// The graph (the KV writes come first, the logits last).
    pub graph: Graph,
    /// Token ids, I32 `[n_tokens]`.
    pub tokens: Tensor,
    /// Positions, I32 `[n_tokens]`.
    pub positions: Tensor,
    /// Cache cells each token is written to, I64 `[n_tokens]`.
    pub kv_idx: Tensor,
    /// Attention mask `[n_kv, n_tokens]` (f16 for flash attention, else f32): 0 or -inf.
    pub mask: Tensor,
    /// Rows whose logits are computed, I32 `[n_outputs]` (absent when all rows are).
    pub out_ids: Option<Tensor>,
    /// Logits, F32 `[n_vocab, n_outputs]`.
    pub logits: Tensor,
    /// The sizes.
    pub shape: BatchShape,
}

fn named(t: Tensor, name: &str, il: usize) -> Tensor {
    t.with_name(format!("{name}-{il}"))
}

/// Builds the graph for one batch. The cache must have room for `n_kv` cells.
pub fn build(
    model: &Model,
    kv: &KvCache,
    shape: BatchShape,
    attn: Attention,
) -> Result<BatchGraph> {
    let hp = &model.hparams;
    let BatchShape {
        n_tokens,
        n_kv,
        n_outputs,
    } = shape;
    if n_tokens == 0
        || n_outputs == 0
        || n_outputs > n_tokens
        || n_kv > kv.n_ctx()
        || n_kv < n_tokens
    {
        return Err(ModelError::Invalid(format!(
            "bad batch shape {shape:?} for a cache of {} cells",
            kv.n_ctx()
        )));
    }
    let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
    let (nh, nkv) = (hp.n_head, hp.n_head_kv);
    let kq_scale = 1.0 / (dk as f32).sqrt();
    let rope: RopeParams = hp.rope_params();

    let tokens = Tensor::new(DType::I32, &[n_tokens])?.with_name("inp_tokens");
    let positions = Tensor::new(DType::I32, &[n_tokens])?.with_name("inp_pos");
    let kv_idx = Tensor::new(DType::I64, &[n_tokens])?.with_name("inp_kv_idxs");
    let mask_type = match attn {
        Attention::Flash => DType::F16,
        Attention::SoftMax => DType::F32,
    };
    let mask = Tensor::new(mask_type, &[n_kv, n_tokens])?.with_name("inp_kq_mask");
    let out_ids = if n_outputs < n_tokens {
        Some(Tensor::new(DType::I32, &[n_outputs])?.with_name("inp_out_ids"))
    } else {
        None
    };
    for t in [&tokens, &positions, &kv_idx, &mask]
        .into_iter()
        .chain(out_ids.as_ref())
    {
        t.set_input();
    }

    let mut graph = Graph::new();
    let mut inp = ops::get_rows(&model.tok_embd, &tokens)?.with_name("inp_embd");
    for (il, l) in model.layers.iter().enumerate() {
        let inp_sa = inp.clone();
        let cur = ops::rms_norm(&inp, hp.rms_eps)?;
        let cur = named(ops::mul(&cur, &l.attn_norm)?, "attn_norm", il);
        let q = named(ops::mul_mat(&l.wq, &cur)?, "Qcur", il);
        let k = named(ops::mul_mat(&l.wk, &cur)?, "Kcur", il);
        let v = named(ops::mul_mat(&l.wv, &cur)?, "Vcur", il);
        let q = ops::reshape(&q, &[dk, nh, n_tokens])?;
        let k = ops::reshape(&k, &[dk, nkv, n_tokens])?;
        let q = named(ops::rope(&q, &positions, rope)?, "Qrope", il);
        let k = named(ops::rope(&k, &positions, rope)?, "Krope", il);

        // cache writes: one row (all KV heads of a token) per cell
        let k_rows = ops::reshape(&k, &[dk * nkv, n_tokens])?;
        let v_rows = ops::reshape(&v, &[dv * nkv, n_tokens])?;
        let k_all = named(
            ops::set_rows(&kv.k[il], &k_rows, &kv_idx)?,
            "k_cache_store",
            il,
        );
        let v_all = named(
            ops::set_rows(&kv.v[il], &v_rows, &kv_idx)?,
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

        let attn_out = match attn {
            Attention::Flash => {
                let v_heads = ops::permute(&v_view, [0, 2, 1, 3])?;
                let o = ops::flash_attn_ext(
                    &q_heads,
                    &k_heads,
                    &v_heads,
                    Some(&mask),
                    kq_scale,
                    0.0,
                    0.0,
                )?;
                // [Dv, H, n_tokens]
                ops::reshape(&o, &[dv * nh, n_tokens])?
            }
            Attention::SoftMax => {
                let kq = named(ops::mul_mat(&k_heads, &q_heads)?, "kq", il); // [n_kv, n_tokens, H]
                let kq = named(
                    ops::soft_max_ext(&kq, Some(&mask), kq_scale, 0.0)?,
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
        let mut cur = named(ops::mul_mat(&l.wo, &attn_out)?, "attn_out", il);
        let mut inp_sa = inp_sa;
        if il + 1 == model.layers.len() {
            if let Some(ids) = &out_ids {
                cur = ops::get_rows(&cur, ids)?;
                inp_sa = ops::get_rows(&inp_sa, ids)?;
            }
        }
        let ffn_inp = named(ops::add(&cur, &inp_sa)?, "ffn_inp", il);
        let cur = ops::rms_norm(&ffn_inp, hp.rms_eps)?;
        let cur = named(ops::mul(&cur, &l.ffn_norm)?, "ffn_norm", il);
        let gate = named(ops::mul_mat(&l.ffn_gate, &cur)?, "ffn_gate", il);
        let up = named(ops::mul_mat(&l.ffn_up, &cur)?, "ffn_up", il);
        let act = named(ops::swiglu_split(&gate, &up)?, "ffn_swiglu", il);
        let down = named(ops::mul_mat(&l.ffn_down, &act)?, "ffn_out", il);
        inp = named(ops::add(&down, &ffn_inp)?, "l_out", il);
    }
    let cur = ops::rms_norm(&inp, hp.rms_eps)?;
    let cur = ops::mul(&cur, &model.output_norm)?.with_name("result_norm");
    let logits = ops::mul_mat(&model.output, &cur)?.with_name("result_output");
    logits.set_output();
    graph.expand(&logits);
    Ok(BatchGraph {
        graph,
        tokens,
        positions,
        kv_idx,
        mask,
        out_ids,
        logits,
        shape,
    })
}

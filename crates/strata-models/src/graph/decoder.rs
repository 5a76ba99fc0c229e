//! The dense decoder graph, as llama.cpp's `llm_build_llama`,
//! `llm_build_qwen2` and `llm_build_qwen3` build it: token embedding → per
//! layer (RMS norm → attention (`blocks::attention`: Q, K, V with optional
//! biases → optional per-head Q/K RMS norm → RoPE with optional frequency
//! factors → KV cache write (SET_ROWS, f16) → grouped-query attention
//! (FLASH_ATTN_EXT, or SOFT_MAX with a causal mask) → output projection) →
//! residual → RMS norm → SwiGLU FFN (`blocks::ffn`) → residual) → final norm
//! → output projection (+ optional bias). Only the rows whose logits are
//! wanted go through the last layer's FFN and the head (llama.cpp's
//! `inp_out_ids`). What a family has is in its weights
//! ([`crate::model::Layer`]'s optional tensors, as [`crate::model::Family`]
//! allows them), so the families share this one builder.

use strata::ops;
use strata::{DType, Graph, Tensor};

use super::blocks::{self, named, AttnInputs};
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
    let inputs = AttnInputs {
        positions: &positions,
        kv_idx: &kv_idx,
        mask: &mask,
        n_tokens,
        n_kv,
        kind: attn,
        rope: hp.rope_params(),
        long_ctx: hp.long_context(kv.n_ctx()),
    };
    let mut inp = ops::get_rows(&model.tok_embd, &tokens)?.with_name("inp_embd");
    for (il, l) in model.layers.iter().enumerate() {
        let cur = blocks::norm(&inp, &l.attn_norm, hp.rms_eps, "attn_norm", il)?;
        let mut cur = blocks::attention(hp, l, kv, il, &cur, &inputs, &mut graph)?;
        let mut inp_sa = inp;
        if il + 1 == model.layers.len() {
            if let Some(ids) = &out_ids {
                cur = ops::get_rows(&cur, ids)?;
                inp_sa = ops::get_rows(&inp_sa, ids)?;
            }
        }
        let ffn_inp = named(ops::add(&cur, &inp_sa)?, "ffn_inp", il);
        let cur = blocks::norm(&ffn_inp, &l.ffn_norm, hp.rms_eps, "ffn_norm", il)?;
        let down = blocks::ffn(l, &cur, il)?;
        inp = named(ops::add(&down, &ffn_inp)?, "l_out", il);
    }
    let cur = ops::rms_norm(&inp, hp.rms_eps)?;
    let cur = ops::mul(&cur, &model.output_norm)?.with_name("result_norm");
    let logits =
        blocks::linear(&model.output, model.output_b.as_ref(), &cur)?.with_name("result_output");
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

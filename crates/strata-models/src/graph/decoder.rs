//! The decoder graph, as llama.cpp's `llm_build_llama`, `qwen2`,
//! `qwen3`, `qwen3moe`, `gemma2`, `gemma3` and `phi3` build it: token
//! embedding (× √n_embd for Gemma) → per layer (RMS norm → attention
//! (`blocks::attention`: Q, K, V, or Phi-3's fused QKV split by views, with
//! optional biases → optional per-head Q/K RMS norm → RoPE with optional
//! frequency or LongRoPE factors, the layer's base → optional query scale → KV
//! cache write (SET_ROWS, f16) → grouped-query attention (FLASH_ATTN_EXT, or
//! SOFT_MAX with a causal mask; optional soft-capping; a windowed mask in
//! sliding-window layers) → output projection) → optional RMS post-norm →
//! residual → RMS norm → gated FFN (`blocks::ffn`: SwiGLU or GeGLU, gate
//! and up fused for Phi-3; `blocks::moe_ffn`'s mixture of experts when the
//! layer has a router) →
//! optional RMS post-norm → residual) → final norm → output projection (+
//! optional bias) → optional final soft-capping. Only the rows whose logits
//! are wanted go through the last layer's FFN and the head (llama.cpp's
//! `inp_out_ids`). What a family has is in its weights
//! ([`crate::model::Layer`]'s optional tensors, as [`crate::model::Family`]
//! allows them) and in its [`crate::model::HParams`], so the families share
//! this one builder.

use std::sync::Mutex;

use half::f16;
use strata::ops;
use strata::{DType, Graph, Tensor};

use super::blocks::{self, named, AttnInputs};
use crate::cells::{Cells, SeqSet};
use crate::kv::KvCache;
use crate::model::{Model, Swa};
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
    /// The sliding-window layers' mask (same type and shape), when the
    /// model has such layers: also -inf outside the window.
    pub mask_swa: Option<Tensor>,
    /// Rows whose logits are computed, I32 `[n_outputs]` (absent when all rows are).
    pub out_ids: Option<Tensor>,
    /// Logits, F32 `[n_vocab, n_outputs]`.
    pub logits: Tensor,
    /// The sizes.
    pub shape: BatchShape,
    /// Memory the mask writes reuse from step to step.
    scratch: Mutex<MaskScratch>,
}

/// What [`write_mask`] builds a mask in, kept by the graph so that a decode
/// step allocates none: one allocation of a kilobyte or more per step, after
/// the device's many small frees, had the allocator consolidate them there
/// (tens of µs a token).
#[derive(Default)]
struct MaskScratch {
    cell: Vec<Option<(i32, SeqSet)>>,
    bytes: Vec<u8>,
}

impl BatchGraph {
    /// Writes this micro-batch's inputs: token ids, positions, the cells
    /// `slots` its tokens go to, the output rows, and the masks from the
    /// cells (which must already hold the micro-batch's tokens `at`). An
    /// input no node of the graph reads (the global mask when every layer
    /// slides, say) has no buffer and is skipped, as llama.cpp skips it.
    #[allow(clippy::too_many_arguments)]
    pub fn write_inputs(
        &self,
        tokens: &[i32],
        positions: &[i32],
        slots: &[usize],
        out_ids: &[i32],
        cells: &Cells,
        at: &[(i32, SeqSet)],
        swa: Option<&Swa>,
    ) -> Result<()> {
        if is_used(&self.tokens) {
            self.tokens.write_i32(tokens)?;
        }
        if is_used(&self.positions) {
            self.positions.write_i32(positions)?;
        }
        if is_used(&self.kv_idx) {
            let idx: Vec<u8> = slots
                .iter()
                .flat_map(|&c| (c as i64).to_le_bytes())
                .collect();
            self.kv_idx.write_bytes(0, &idx)?;
        }
        if let Some(o) = self.out_ids.as_ref().filter(|o| is_used(o)) {
            o.write_i32(out_ids)?;
        }
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if is_used(&self.mask) {
            write_mask(&self.mask, &self.shape, cells, at, &mut scratch, |_, _| {
                false
            })?;
        }
        if let (Some(m), Some(swa)) = (self.mask_swa.as_ref().filter(|m| is_used(m)), swa) {
            write_mask(m, &self.shape, cells, at, &mut scratch, |j, p| {
                swa.is_masked(j, p)
            })?;
        }
        Ok(())
    }
}

/// True when the scheduler gave `t` storage, i.e. some node reads it.
fn is_used(t: &Tensor) -> bool {
    t.is_allocated()
}

/// One mask input `[n_kv, n_tokens]`: 0 where token `i` (at `at[i]`) may see
/// cell `j` (the cell holds the token's lowest sequence at a position not
/// after the token's, and `masked(cell_pos, pos)` is false), -inf elsewhere;
/// f16 or f32 as `t` is.
fn write_mask(
    t: &Tensor,
    shape: &BatchShape,
    cells: &Cells,
    at: &[(i32, SeqSet)],
    scratch: &mut MaskScratch,
    masked: impl Fn(usize, usize) -> bool,
) -> Result<()> {
    let n_kv = shape.n_kv;
    let MaskScratch { cell, bytes: b } = scratch;
    // per cell, once: its position and sequences (None when free)
    cell.clear();
    cell.extend((0..n_kv).map(|j| cells.cell(j)));
    let (cell, masked) = (&*cell, &masked);
    // a token sees a cell of its lowest sequence at a position not after its own
    let row = |&(p, set): &(i32, SeqSet)| {
        let s = set.first();
        cell.iter().map(move |c| match (c, s) {
            (Some((pj, cs)), Some(s)) => {
                cs.contains(s) && *pj <= p && !masked(*pj as usize, p as usize)
            }
            _ => false,
        })
    };
    // a seen cell is 0, an unseen one -inf, in the mask's type
    const F16_INF: [u8; 2] = f16::NEG_INFINITY.to_bits().to_le_bytes();
    const F32_INF: [u8; 4] = f32::NEG_INFINITY.to_le_bytes();
    let bytes: Option<(&[u8], &[u8])> = match t.dtype() {
        DType::F16 => Some((&[0; 2], &F16_INF)),
        DType::F32 => Some((&[0; 4], &F32_INF)),
        _ => None,
    };
    match bytes {
        Some((zero, neg_inf)) => {
            b.clear();
            for tok in at.iter().take(shape.n_tokens) {
                for seen in row(tok) {
                    b.extend_from_slice(if seen { zero } else { neg_inf });
                }
            }
            t.write_bytes(0, b)?;
        }
        None => {
            let mut m = Vec::with_capacity(shape.n_tokens * n_kv);
            for tok in at.iter().take(shape.n_tokens) {
                m.extend(row(tok).map(|seen| if seen { 0.0 } else { f32::NEG_INFINITY }));
            }
            t.write_f32(&m)?;
        }
    }
    Ok(())
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
        return Err(ModelError::BatchShape {
            shape,
            n_ctx: kv.n_ctx(),
        });
    }
    let tokens = Tensor::new(DType::I32, &[n_tokens])?.with_name("inp_tokens");
    let positions = Tensor::new(DType::I32, &[n_tokens])?.with_name("inp_pos");
    let kv_idx = Tensor::new(DType::I64, &[n_tokens])?.with_name("inp_kv_idxs");
    let mask_type = match attn {
        Attention::Flash => DType::F16,
        Attention::SoftMax => DType::F32,
    };
    let mask = Tensor::new(mask_type, &[n_kv, n_tokens])?.with_name("inp_kq_mask");
    let any_swa = hp.swa.as_ref().is_some_and(|s| s.layers.iter().any(|&w| w));
    let mask_swa = if any_swa {
        Some(Tensor::new(mask_type, &[n_kv, n_tokens])?.with_name("inp_kq_mask_swa"))
    } else {
        None
    };
    let out_ids = if n_outputs < n_tokens {
        Some(Tensor::new(DType::I32, &[n_outputs])?.with_name("inp_out_ids"))
    } else {
        None
    };
    for t in [&tokens, &positions, &kv_idx, &mask]
        .into_iter()
        .chain(mask_swa.as_ref())
        .chain(out_ids.as_ref())
    {
        t.set_input();
    }

    let mut graph = Graph::new();
    let long_ctx = hp.long_context(kv.n_ctx());
    let mut inp = ops::get_rows(&model.tok_embd, &tokens)?.with_name("inp_embd");
    if let Some(s) = hp.shaping.embd_scale {
        inp = ops::scale(&inp, s)?.with_name("inp_scaled");
    }
    for (il, l) in model.layers.iter().enumerate() {
        let swa_layer = hp.swa.as_ref().is_some_and(|s| s.is_swa(il));
        let inputs = AttnInputs {
            positions: &positions,
            kv_idx: &kv_idx,
            mask: match &mask_swa {
                Some(m) if swa_layer => m,
                _ => &mask,
            },
            n_tokens,
            n_kv,
            kind: attn,
            rope: hp.rope_params_for(il),
            long_ctx,
        };
        let cur = blocks::norm(&inp, &l.attn_norm, hp.rms_eps, "attn_norm", il)?;
        let mut cur = blocks::attention(hp, l, kv, il, &cur, &inputs, &mut graph)?;
        let mut inp_sa = inp;
        if il + 1 == model.layers.len() {
            if let Some(ids) = &out_ids {
                cur = ops::get_rows(&cur, ids)?;
                inp_sa = ops::get_rows(&inp_sa, ids)?;
            }
        }
        if let Some(w) = &l.attn_post_norm {
            cur = blocks::norm(&cur, w, hp.rms_eps, "attn_post_norm", il)?;
        }
        let ffn_inp = named(ops::add(&cur, &inp_sa)?, "ffn_inp", il);
        let cur = blocks::norm(&ffn_inp, &l.ffn_norm, hp.rms_eps, "ffn_norm", il)?;
        let mut down = match &l.ffn_gate_inp {
            Some(router) => blocks::moe_ffn(hp, l, router, &cur, il, &mut graph)?,
            None => blocks::ffn(hp, l, &cur, il)?,
        };
        if let Some(w) = &l.ffn_post_norm {
            down = blocks::norm(&down, w, hp.rms_eps, "ffn_post_norm", il)?;
        }
        inp = named(ops::add(&down, &ffn_inp)?, "l_out", il);
    }
    let cur = ops::rms_norm(&inp, hp.rms_eps)?;
    let cur = ops::mul(&cur, &model.output_norm)?.with_name("result_norm");
    let mut logits = blocks::linear(&model.output, model.output_b.as_ref(), &cur)?;
    if let Some(cap) = hp.shaping.final_softcap {
        logits = blocks::softcap(&logits, cap)?;
    }
    let logits = logits.with_name("result_output");
    logits.set_output();
    graph.expand(&logits);
    Ok(BatchGraph {
        graph,
        tokens,
        positions,
        kv_idx,
        mask,
        mask_swa,
        out_ids,
        logits,
        shape,
        scratch: Mutex::default(),
    })
}

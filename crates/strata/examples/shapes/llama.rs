//! A llama-architecture forward graph built from unallocated tensors (only
//! shapes matter to the memory planner), laid out as llama.cpp builds it:
//! token embedding, per layer RMS norm → Q/K/V → RoPE → KV-cache store →
//! attention (flash or not) → output projection → residual → RMS norm →
//! SwiGLU FFN → residual; final norm and the (tied) output head.

use std::collections::HashSet;

use strata::ops::{self, RopeMode, RopeParams};
use strata::{DType, Graph, Tensor};

/// Model hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct Hparams {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
}

/// SmolLM2-135M.
pub const SMOLLM2_135M: Hparams = Hparams {
    n_layer: 30,
    n_embd: 576,
    n_head: 9,
    n_head_kv: 3,
    head_dim: 64,
    n_ff: 1536,
    n_vocab: 49152,
};

/// The graph and the tensors that live outside the planner (weights, KV cache).
pub struct LlamaGraph {
    pub graph: Graph,
    pub external: HashSet<strata::TensorId>,
    pub logits: Tensor,
}

fn t(dtype: DType, dims: &[usize], name: String) -> Tensor {
    Tensor::new(dtype, dims).unwrap().with_name(name)
}

fn input(dtype: DType, dims: &[usize], name: &str) -> Tensor {
    let x = t(dtype, dims, name.to_string());
    x.set_input();
    x
}

/// The forward graph for `n_tokens` tokens over a KV cache of `n_ctx` cells
/// (all of them attended to: llama.cpp's worst case for reserving).
pub fn build(
    hp: Hparams,
    n_tokens: usize,
    n_ctx: usize,
    flash: bool,
) -> strata::Result<LlamaGraph> {
    let mut ext = HashSet::new();
    let mut weight = |dtype: DType, dims: &[usize], name: String| {
        let w = t(dtype, dims, name);
        ext.insert(w.id());
        w
    };
    let (e, d, hkv) = (hp.n_embd, hp.head_dim, hp.n_head_kv);
    let ekv = d * hkv;
    let tok_embd = weight(DType::Q8_0, &[e, hp.n_vocab], "token_embd.weight".into());
    let out_norm = weight(DType::F32, &[e], "output_norm.weight".into());
    let tokens = input(DType::I32, &[n_tokens], "inp_tokens");
    let pos = input(DType::I32, &[n_tokens], "inp_pos");
    let out_ids = input(DType::I32, &[n_tokens], "inp_out_ids");
    let pad = n_tokens.div_ceil(64) * 64;
    let mask = input(
        if flash { DType::F16 } else { DType::F32 },
        &[n_ctx, pad],
        "kq_mask",
    );
    let rope = RopeParams::new(d, RopeMode::Neox, 100000.0);
    let kq_scale = 1.0 / (d as f32).sqrt();
    let eps = 1e-5;

    let mut roots = Vec::new();
    let mut inp = ops::get_rows(&tok_embd, &tokens)?;
    for il in 0..hp.n_layer {
        let w = |n: &str| format!("blk.{il}.{n}.weight");
        let attn_norm = weight(DType::F32, &[e], w("attn_norm"));
        let wq = weight(DType::Q4_1, &[e, e], w("attn_q"));
        let wk = weight(DType::Q4_1, &[e, ekv], w("attn_k"));
        let wv = weight(DType::Q4_1, &[e, ekv], w("attn_v"));
        let wo = weight(DType::Q4_1, &[e, e], w("attn_output"));
        let ffn_norm = weight(DType::F32, &[e], w("ffn_norm"));
        let w_gate = weight(DType::Q4_1, &[e, hp.n_ff], w("ffn_gate"));
        let w_up = weight(DType::Q4_1, &[e, hp.n_ff], w("ffn_up"));
        let w_down = weight(DType::Q4_1, &[hp.n_ff, e], w("ffn_down"));
        let k_cache = weight(DType::F16, &[ekv * n_ctx], format!("cache_k_l{il}"));
        let v_cache = weight(DType::F16, &[ekv * n_ctx], format!("cache_v_l{il}"));

        let cur = ops::mul(&ops::rms_norm(&inp, eps)?, &attn_norm)?;
        let q = ops::reshape(&ops::mul_mat(&wq, &cur)?, &[d, hp.n_head, n_tokens])?;
        let k = ops::reshape(&ops::mul_mat(&wk, &cur)?, &[d, hkv, n_tokens])?;
        let v = ops::mul_mat(&wv, &cur)?;
        let q = ops::rope(&q, &pos, rope)?;
        let k = ops::rope(&k, &pos, rope)?;
        // store K and V of the new tokens in the cache
        let k_dst = ops::view_1d(&k_cache, ekv * n_tokens, 0)?;
        roots.push(ops::cpy(&k, &k_dst)?);
        let q = ops::permute(&q, [0, 2, 1, 3])?; // [d, T, H]
        let k_all = ops::view_3d(&k_cache, [d, n_ctx, hkv], ekv * 2, d * 2, 0)?;
        let attn = if flash {
            let v_dst = ops::view_1d(&v_cache, ekv * n_tokens, 0)?;
            roots.push(ops::cpy(&v, &v_dst)?);
            let v_all = ops::view_3d(&v_cache, [d, n_ctx, hkv], ekv * 2, d * 2, 0)?;
            let o = ops::flash_attn_ext(&q, &k_all, &v_all, Some(&mask), kq_scale, 0.0, 0.0)?;
            ops::reshape(&o, &[e, n_tokens])?
        } else {
            // V is stored transposed: [n_ctx, ekv]
            let v_dst = ops::view_2d(&v_cache, n_tokens, ekv, n_ctx * 2, 0)?;
            roots.push(ops::cpy(&ops::transpose(&v)?, &v_dst)?);
            let kq = ops::mul_mat(&k_all, &q)?; // [n_ctx, T, H]
            let kq = ops::soft_max_ext(&kq, Some(&mask), kq_scale, 0.0)?;
            let v_all = ops::view_3d(&v_cache, [n_ctx, d, hkv], n_ctx * 2, n_ctx * 2 * d, 0)?;
            let kqv = ops::mul_mat(&v_all, &kq)?; // [d, T, H]
            let merged = ops::cont(&ops::permute(&kqv, [0, 2, 1, 3])?)?; // [d, H, T]
            ops::reshape(&merged, &[e, n_tokens])?
        };
        let mut cur = ops::mul_mat(&wo, &attn)?;
        let mut inp_sa = inp.clone();
        if il == hp.n_layer - 1 {
            cur = ops::get_rows(&cur, &out_ids)?;
            inp_sa = ops::get_rows(&inp_sa, &out_ids)?;
        }
        let ffn_inp = ops::add(&cur, &inp_sa)?;
        let cur = ops::mul(&ops::rms_norm(&ffn_inp, eps)?, &ffn_norm)?;
        let gate = ops::mul_mat(&w_gate, &cur)?;
        let up = ops::mul_mat(&w_up, &cur)?;
        let cur = ops::mul_mat(&w_down, &ops::swiglu_split(&gate, &up)?)?;
        inp = ops::add(&cur, &ffn_inp)?;
    }
    let cur = ops::mul(&ops::rms_norm(&inp, eps)?, &out_norm)?;
    let logits = ops::mul_mat(&tok_embd, &cur)?.with_name("result_output");
    logits.set_output();
    let mut graph = Graph::new();
    for r in &roots {
        graph.expand(r);
    }
    graph.expand(&logits);
    Ok(LlamaGraph {
        graph,
        external: ext,
        logits,
    })
}

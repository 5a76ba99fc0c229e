//! The model's named weights: every tensor a family's [`Spec`](super::Spec) allows,
//! taken from the placed file by name and checked against the shape the
//! hyperparameters give (fused Q/K/V and gate+up, experts, the tensors every
//! layer reads on each layer's device).

use strata::{ops, Tensor};

use super::{
    tensor_err, HParams, Layer, LayerMap, Need, Placed, ROPE_FREQS, ROPE_LONG, ROPE_SHORT,
};
use crate::Result;

/// The model's named weights.
pub(super) struct Weights {
    pub(super) tok_embd: Tensor,
    pub(super) output_norm: Tensor,
    pub(super) output: Tensor,
    pub(super) output_b: Option<Tensor>,
    pub(super) layers: Vec<Layer>,
}

/// The model's named weights, each checked against the shape `hp` gives,
/// the optional ones as the family's [`Spec`](super::Spec) says. Every tensor of the file
/// must be used (llama.cpp refuses a file with tensors it does not load,
/// "wrong number of tensors"): an unused one is named in the error.
pub(super) fn named_weights(placed: Placed<'_>, hp: &HParams, map: &LayerMap) -> Result<Weights> {
    let tensors = &placed.tensors;
    let used = std::cell::RefCell::new(std::collections::HashSet::new());
    let take = |name: &str, shape: &[usize]| -> Result<Tensor> {
        let t = tensors
            .get(name)
            .cloned()
            .ok_or_else(|| tensor_err(name, "missing"))?;
        let ne = t.ne();
        if ne[..shape.len()] != *shape || ne[shape.len()..].iter().any(|&x| x != 1) {
            return Err(tensor_err(
                name,
                format!("shape {:?}, expected {shape:?}", &ne[..t.n_dims()]),
            ));
        }
        used.borrow_mut().insert(name.to_string());
        Ok(t)
    };
    let maybe = |need: Need, name: &str, shape: &[usize]| -> Result<Option<Tensor>> {
        match need {
            Need::No => Ok(None),
            Need::Optional if !tensors.contains_key(name) => Ok(None),
            Need::Optional | Need::Required => take(name, shape).map(Some),
        }
    };
    let spec = hp.family.spec();
    let (e, v) = (hp.n_embd, hp.n_vocab);
    let tok_embd = take("token_embd.weight", &[e, v])?;
    let output_norm = take("output_norm.weight", &[e])?;
    let output = match placed.output_copy {
        Some(t) => t,
        None if placed.tied => tok_embd.clone(),
        None => take("output.weight", &[e, v])?,
    };
    let output_b = maybe(spec.output_bias, "output.bias", &[v])?;
    let rope_freqs = maybe(spec.rope_freqs, ROPE_FREQS, &[hp.n_rot / 2])?;
    let rope_long = maybe(spec.rope_factors, ROPE_LONG, &[hp.n_rot / 2])?;
    let rope_short = maybe(spec.rope_factors, ROPE_SHORT, &[hp.n_rot / 2])?;
    // layer i's copy of a tensor every layer reads, when its device has one
    let on_layer = |t: &Option<Tensor>, name: &str, i: usize| -> Option<Tensor> {
        let t = t.as_ref()?;
        let copies = placed
            .shared
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.as_slice());
        Some(
            copies
                .unwrap_or_default()
                .iter()
                .find(|(d, _)| *d == map.layers[i])
                .map_or_else(|| t.clone(), |(_, c)| c.clone()),
        )
    };
    let fused_qkv = spec.fused_qkv != Need::No && tensors.contains_key("blk.0.attn_qkv.weight");
    let (qd, kd, vd) = (
        hp.n_head * hp.head_dim_k,
        hp.n_embd_k_gqa(),
        hp.n_embd_v_gqa(),
    );
    // a MoE layer's FFN: the router and the experts' stacks, no biases
    let moe = hp.n_expert > 0;
    let (exps, ffn_bias) = if moe {
        ("_exps", Need::No)
    } else {
        ("", spec.ffn_bias)
    };
    let (ffn_in, ffn_out) = if moe {
        let (f, n) = (hp.n_ff_exp, hp.n_expert);
        (vec![e, f, n], vec![f, e, n])
    } else {
        (vec![e, hp.n_ff], vec![hp.n_ff, e])
    };
    // gate and up fused (Phi-3, never with experts): twice the rows
    let ffn_up = if spec.fused_gate_up && !moe {
        vec![e, 2 * hp.n_ff]
    } else {
        ffn_in.clone()
    };
    let mut layers = Vec::with_capacity(hp.n_layer);
    for i in 0..hp.n_layer {
        let w = |s: &str, shape: &[usize]| take(&format!("blk.{i}.{s}.weight"), shape);
        let opt =
            |need: Need, s: &str, shape: &[usize]| maybe(need, &format!("blk.{i}.{s}"), shape);
        let (wq, wk, wv, wqkv, bqkv) = if fused_qkv {
            let name = format!("blk.{i}.attn_qkv.weight");
            let t = take(&name, &[e, qd + kd + vd])?;
            let rows = |n: usize, at: usize| {
                ops::view_2d(&t, e, n, t.nb()[1], at * t.nb()[1])
                    .map_err(|err| tensor_err(&name, err.to_string()))
            };
            let b = opt(spec.qkv_bias, "attn_qkv.bias", &[qd + kd + vd])?;
            (rows(qd, 0)?, rows(kd, qd)?, rows(vd, qd + kd)?, Some(t), b)
        } else {
            let q = w("attn_q", &[e, qd])?;
            (
                q,
                w("attn_k", &[e, kd])?,
                w("attn_v", &[e, vd])?,
                None,
                None,
            )
        };
        // separate Q/K/V biases: with a fused weight only when there is no fused bias
        let sep_bias = if bqkv.is_some() {
            Need::No
        } else {
            spec.qkv_bias
        };
        layers.push(Layer {
            attn_norm: w("attn_norm", &[e])?,
            wq,
            wk,
            wv,
            wqkv,
            bqkv,
            wo: w("attn_output", &[hp.n_head * hp.head_dim_v, e])?,
            bq: opt(sep_bias, "attn_q.bias", &[qd])?,
            bk: opt(sep_bias, "attn_k.bias", &[kd])?,
            bv: opt(sep_bias, "attn_v.bias", &[vd])?,
            bo: opt(spec.wo_bias, "attn_output.bias", &[e])?,
            attn_q_norm: opt(spec.qk_norm, "attn_q_norm.weight", &[hp.head_dim_k])?,
            attn_k_norm: opt(spec.qk_norm, "attn_k_norm.weight", &[hp.head_dim_k])?,
            rope_freqs: on_layer(&rope_freqs, ROPE_FREQS, i),
            rope_long: on_layer(&rope_long, ROPE_LONG, i),
            rope_short: on_layer(&rope_short, ROPE_SHORT, i),
            ffn_norm: w("ffn_norm", &[e])?,
            ffn_gate_inp: moe
                .then(|| w("ffn_gate_inp", &[e, hp.n_expert]))
                .transpose()?,
            ffn_gate: if spec.fused_gate_up {
                None
            } else {
                Some(w(&format!("ffn_gate{exps}"), &ffn_in)?)
            },
            ffn_up: w(&format!("ffn_up{exps}"), &ffn_up)?,
            ffn_down: w(&format!("ffn_down{exps}"), &ffn_out)?,
            ffn_gate_b: opt(ffn_bias, "ffn_gate.bias", &[hp.n_ff])?,
            ffn_up_b: opt(ffn_bias, "ffn_up.bias", &[hp.n_ff])?,
            ffn_down_b: opt(ffn_bias, "ffn_down.bias", &[e])?,
            attn_post_norm: opt(spec.post_norms, "post_attention_norm.weight", &[e])?,
            ffn_post_norm: opt(spec.post_norms, "post_ffw_norm.weight", &[e])?,
        });
    }
    let used = used.into_inner();
    if let Some(name) = tensors.keys().find(|n| !used.contains(*n)) {
        return Err(tensor_err(
            name,
            format!(
                "is not a tensor of a {} model (llama.cpp refuses the file too: \
                 wrong number of tensors)",
                hp.arch
            ),
        ));
    }
    Ok(Weights {
        tok_embd,
        output_norm,
        output,
        output_b,
        layers,
    })
}

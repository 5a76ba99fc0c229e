//! Hyperparameters beyond the llama core that change the graph: sliding-window
//! attention (shared infrastructure: which layers attend to a window, its
//! size and those layers' RoPE) and the scalings Gemma adds (embedding
//! scale, query scale, attention and final logit soft-capping), read from
//! the `{arch}.*` keys as llama.cpp b11312's loaders read them
//! (`src/models/gemma2.cpp`, `gemma3.cpp`, `load_swa_pattern`).

use strata::gguf::{Array, Metadata, Value};

use super::hparams::get_uint;
use super::Family;
use crate::error::meta;
use crate::Result;

/// Sliding-window attention (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`): in the
/// layers it names, a query at position `p1` sees the keys at positions
/// `p0 <= p1` with `p1 - p0 < n_swa` (llama.cpp's `is_masked_swa`).
///
/// strata keeps one full-size KV cache for every layer and masks the
/// window, where llama.cpp keeps a smaller cache for the window layers; the
/// logits are the same (a masked key has weight zero either way).
#[derive(Clone, Debug, PartialEq)]
pub struct Swa {
    /// Window size in positions (`{arch}.attention.sliding_window`), > 0.
    pub n_swa: usize,
    /// Per layer: attends to the window (true) or to every earlier position.
    pub layers: Vec<bool>,
    /// RoPE base of the window layers (`{arch}.rope.freq_base_swa`).
    pub rope_freq_base: f32,
    /// RoPE frequency scale of the window layers (1 / linear factor).
    pub rope_freq_scale: f32,
}

impl Swa {
    /// True when layer `il` attends to the window only.
    pub fn is_swa(&self, il: usize) -> bool {
        self.layers.get(il).copied().unwrap_or(false)
    }

    /// True when a query at position `p1` may not see the key at `p0`
    /// (outside the window; causality is masked separately).
    pub fn is_masked(&self, p0: usize, p1: usize) -> bool {
        p1 >= p0 && p1 - p0 >= self.n_swa
    }
}

/// Gemma's scalings; all absent (`None`) for the other families.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Shaping {
    /// The token embedding is multiplied by this (Gemma: √n_embd).
    pub embd_scale: Option<f32>,
    /// Queries are multiplied by this after RoPE and attention uses a
    /// K·Q scale of 1 (llama.cpp's `f_attention_scale`); `None`: the scale
    /// is 1/√head_dim inside attention.
    pub q_scale: Option<f32>,
    /// Attention logits become `cap · tanh(logit / cap)` before the softmax.
    pub attn_softcap: Option<f32>,
    /// Output logits become `cap · tanh(logit / cap)`.
    pub final_softcap: Option<f32>,
}

/// `key` as a finite positive f32, when present.
fn positive_f32(m: &Metadata, key: &str) -> Result<Option<f32>> {
    if !m.contains_key(key) {
        return Ok(None);
    }
    let v = m.get_f32(key).map_err(|e| meta(key, e.to_string()))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(meta(
            key,
            format!("{v} is not usable (a finite number > 0 is needed)"),
        ));
    }
    Ok(Some(v))
}

/// The window layers: `{arch}.attention.sliding_window_pattern` as one flag
/// per layer (an array), or as `n`: every `n`th layer is global, the others
/// use the window (0: all use it; 1: none does). `n_default` when absent.
fn swa_layers(m: &Metadata, arch: &str, n_layer: usize, n_default: usize) -> Result<Vec<bool>> {
    let key = format!("{arch}.attention.sliding_window_pattern");
    let flags: Option<Vec<bool>> = match m.get(&key) {
        Some(Value::Array(a)) => Some(match a {
            Array::Bool(v) => v.clone(),
            Array::U32(v) => v.iter().map(|&x| x != 0).collect(),
            Array::I32(v) => v.iter().map(|&x| x != 0).collect(),
            _ => return Err(meta(&key, "expected an array of bool or integers")),
        }),
        _ => None,
    };
    if let Some(flags) = flags {
        if flags.len() != n_layer {
            return Err(meta(
                &key,
                format!("{} flags for {n_layer} layers", flags.len()),
            ));
        }
        return Ok(flags);
    }
    let n = get_uint(m, &key)?.unwrap_or(n_default);
    Ok((0..n_layer).map(|il| n == 0 || il % n < n - 1).collect())
}

/// The RoPE settings of the global layers, which Gemma 2's window layers share.
pub(super) struct GlobalRope {
    pub freq_base: f32,
    pub freq_scale: f32,
}

/// Reads the sliding window and the scalings of `family`.
pub(super) fn read(
    m: &Metadata,
    family: Family,
    n_layer: usize,
    n_embd: usize,
    n_head: usize,
    head_dim_k: usize,
    rope: GlobalRope,
) -> Result<(Option<Swa>, Shaping)> {
    let arch = family.arch();
    let key = |k: &str| format!("{arch}.{k}");
    let (swa, big) = match family {
        // Phi-3: llama.cpp b11312 turns its sliding window off
        // (phi3.attention.sliding_window is read by nobody)
        Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Phi3 => {
            return Ok((None, Shaping::default()))
        }
        // llama.cpp: Gemma 2 always has a window (4096 unless given), on
        // every other layer; its window layers share the global RoPE unless
        // freq_base_swa is given
        Family::Gemma2 => {
            let n_swa = get_uint(m, &key("attention.sliding_window"))?.unwrap_or(4096);
            let layers = swa_layers(m, arch, n_layer, 2)?;
            let base = positive_f32(m, &key("rope.freq_base_swa"))?.unwrap_or(rope.freq_base);
            let swa = Swa {
                n_swa,
                layers,
                rope_freq_base: base,
                rope_freq_scale: rope.freq_scale,
            };
            (Some(swa), n_layer == 46)
        }
        // Gemma 3: a window only when sliding_window is given and > 0, then
        // on five layers of six, with their own RoPE base (10000 unless
        // freq_base_swa is given) and no RoPE scaling
        Family::Gemma3 => {
            let n_swa = get_uint(m, &key("attention.sliding_window"))?.unwrap_or(0);
            let swa = if n_swa > 0 {
                Some(Swa {
                    n_swa,
                    layers: swa_layers(m, arch, n_layer, 6)?,
                    rope_freq_base: positive_f32(m, &key("rope.freq_base_swa"))?.unwrap_or(10000.0),
                    rope_freq_scale: 1.0,
                })
            } else {
                None
            };
            (swa, n_layer == 62)
        }
    };
    if let Some(s) = &swa {
        if s.n_swa == 0 && s.layers.iter().any(|&w| w) {
            return Err(meta(
                &key("attention.sliding_window"),
                "0 with sliding-window layers: every key would be masked \
                 (give the window size, or a pattern without window layers)",
            ));
        }
    }
    // llama.cpp's f_attention_scale: the 27B models (by layer count) scale
    // by n_embd / n_head, the others by the head size
    // (query_pre_attn_scalar is not read)
    let q_scale = if big {
        1.0 / ((n_embd / n_head) as f32).sqrt()
    } else {
        1.0 / (head_dim_k as f32).sqrt()
    };
    let (attn_softcap, final_softcap) = if family == Family::Gemma2 {
        (
            Some(positive_f32(m, &key("attn_logit_softcapping"))?.unwrap_or(50.0)),
            Some(positive_f32(m, &key("final_logit_softcapping"))?.unwrap_or(30.0)),
        )
    } else {
        // Gemma 3: only a final cap, when given and not 0
        let k = key("final_logit_softcapping");
        let cap = match m.get(&k) {
            Some(_) if m.get_f32(&k).ok() == Some(0.0) => None,
            Some(_) => positive_f32(m, &k)?,
            None => None,
        };
        (None, cap)
    };
    let shaping = Shaping {
        embd_scale: Some((n_embd as f32).sqrt()),
        q_scale: Some(q_scale),
        attn_softcap,
        final_softcap,
    };
    Ok((swa, shaping))
}

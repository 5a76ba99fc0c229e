//! Hyperparameters of a decoder model (llama, qwen2, qwen3, qwen3moe,
//! gemma2, gemma3, phi3), read from the `{arch}.*` GGUF metadata keys.

use strata::gguf::{GgufFile, Metadata};
use strata::ops::RopeMode;

use super::extras::{self, GlobalRope, Shaping, Swa};
use super::moe::Experts;
use super::{Family, Need};
use crate::error::meta;
use crate::{ModelError, Result};

/// RoPE scaling from `{arch}.rope.scaling.*`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling.
    None,
    /// Linear position scaling by `1 / factor`.
    Linear {
        /// The factor (positions are divided by it).
        factor: f32,
    },
    /// YaRN with `factor` over the original training context.
    Yarn {
        /// The factor.
        factor: f32,
    },
}

/// What the decoder graph needs to know about a model.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    /// `general.architecture`.
    pub arch: String,
    /// The family `arch` names.
    pub family: Family,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// FFN hidden width (`feed_forward_length`; of a Mixtral-style llama's
    /// experts too; 0 when a qwen3moe file leaves it out).
    pub n_ff: usize,
    /// Experts per MoE FFN (`expert_count`; 0: dense FFNs).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`; 0 when dense).
    pub n_expert_used: usize,
    /// Hidden width of each expert (qwen3moe: `expert_feed_forward_length`,
    /// else `n_ff / n_expert_used` as llama.cpp; llama: `n_ff`; 0 when dense).
    pub n_ff_exp: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Key head size.
    pub head_dim_k: usize,
    /// Value head size.
    pub head_dim_v: usize,
    /// Vocabulary size (rows of `token_embd`).
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// RoPE base frequency.
    pub rope_freq_base: f32,
    /// RoPE pairing (llama: normal, as llama.cpp's LLAMA_ROPE_TYPE_NORM).
    pub rope_mode: RopeMode,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Original context for YaRN (defaults to the training context).
    pub n_ctx_orig: usize,
    /// `{arch}.rope.scaling.attn_factor`: multiplies RoPE's magnitude (1 when absent).
    pub rope_attn_factor: f32,
    /// Sliding-window attention (Gemma), when some layers use it.
    pub swa: Option<Swa>,
    /// Embedding / query scales and soft-capping (Gemma; none otherwise).
    pub shaping: Shaping,
}

/// The `{arch}.rope.scaling.*` keys strata reads (`finetuned` changes
/// nothing in llama.cpp's computation either); any other key under that
/// prefix is refused, since llama.cpp's llama / qwen2 / qwen3 loaders do not
/// read it and a file carrying it expects a computation strata cannot vouch for.
const ROPE_SCALING_KEYS: [&str; 5] = [
    "type",
    "factor",
    "original_context_length",
    "attn_factor",
    "finetuned",
];

/// Refuses `{arch}.rope.scaling.*` keys strata does not read.
fn check_rope_scaling_keys(m: &Metadata, arch: &str) -> Result<()> {
    let prefix = format!("{arch}.rope.scaling.");
    for k in m.keys() {
        if let Some(rest) = k.strip_prefix(&prefix) {
            if !ROPE_SCALING_KEYS.contains(&rest) {
                return Err(meta(
                    k,
                    format!(
                        "is not supported for {arch} (strata reads rope.scaling.{{{}}})",
                        ROPE_SCALING_KEYS.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `{arch}.*` keys of one file's metadata, read as the loader needs
/// them (each error names the key).
struct Keys<'a> {
    m: &'a Metadata,
    arch: &'a str,
}

impl Keys<'_> {
    /// The full key of `k`.
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// Whether the file has `k`.
    fn has(&self, k: &str) -> bool {
        self.m.contains_key(&self.key(k))
    }

    /// The unsigned integer at `k`, which must be there.
    fn uint(&self, k: &str) -> Result<usize> {
        let key = self.key(k);
        get_uint(self.m, &key)?.ok_or_else(|| meta(&key, "missing"))
    }

    /// The unsigned integer at `k`, `d` when absent.
    fn uint_or(&self, k: &str, d: usize) -> Result<usize> {
        if self.has(k) {
            self.uint(k)
        } else {
            Ok(d)
        }
    }

    /// The finite, non-negative float at `k`, `d` when absent.
    fn float_or(&self, k: &str, d: f32) -> Result<f32> {
        let key = self.key(k);
        if !self.m.contains_key(&key) {
            return Ok(d);
        }
        let v = self
            .m
            .get_f32(&key)
            .map_err(|e| meta(&key, e.to_string()))?;
        if !v.is_finite() || v < 0.0 {
            return Err(meta(
                &key,
                format!("{v} is not a usable value (a finite, non-negative number is needed)"),
            ));
        }
        Ok(v)
    }
}

/// The block, embedding and head sizes, which every family reads alike.
struct Sizes {
    n_layer: usize,
    n_embd: usize,
    n_head: usize,
    n_head_kv: usize,
    head_dim_k: usize,
    head_dim_v: usize,
}

impl Sizes {
    fn read(keys: &Keys) -> Result<Sizes> {
        let n_layer = keys.uint("block_count")?;
        let n_embd = keys.uint("embedding_length")?;
        let n_head = keys.uint("attention.head_count")?;
        let n_head_kv = keys.uint_or("attention.head_count_kv", n_head)?;
        if n_layer == 0 || n_embd == 0 || n_head == 0 || n_head_kv == 0 {
            return Err(meta(
                &keys.key("*"),
                "layer, embedding and head counts must be positive",
            ));
        }
        // The head size defaults to n_embd / n_head; with an explicit
        // key_length (Qwen 3) the embedding need not divide into the heads.
        let explicit_head = keys.has("attention.key_length");
        if (!explicit_head && n_embd % n_head != 0) || n_head % n_head_kv != 0 {
            return Err(meta(
                &keys.key("attention.head_count"),
                format!("{n_embd} embedding / {n_head} heads / {n_head_kv} KV heads do not divide"),
            ));
        }
        let head_dim = n_embd / n_head;
        let head_dim_k = keys.uint_or("attention.key_length", head_dim)?;
        let head_dim_v = keys.uint_or("attention.value_length", head_dim)?;
        if head_dim_k == 0 || head_dim_v == 0 {
            return Err(meta(
                &keys.key("attention.key_length"),
                "head sizes must be positive",
            ));
        }
        Ok(Sizes {
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
        })
    }
}

/// RoPE's settings, which every family reads alike.
struct Rope {
    n_rot: usize,
    freq_base: f32,
    scaling: RopeScaling,
    /// `rope.scaling.factor` (or `rope.scale_linear`), 0 when absent.
    factor: f32,
    n_ctx_orig: usize,
    attn_factor: f32,
}

impl Rope {
    /// Reads the `rope.*` keys (`n_ctx_train`: the default original context).
    fn read(keys: &Keys, head_dim_k: usize, n_ctx_train: usize) -> Result<Rope> {
        let n_rot = keys.uint_or("rope.dimension_count", head_dim_k)?;
        if n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(meta(
                &keys.key("rope.dimension_count"),
                "must be even and at most the head size",
            ));
        }
        let freq_base = keys.float_or("rope.freq_base", 10000.0)?;
        if freq_base == 0.0 {
            return Err(meta(&keys.key("rope.freq_base"), "0 is not a RoPE base"));
        }
        check_rope_scaling_keys(keys.m, keys.arch)?;
        // llama.cpp: the factor is rope.scaling.factor, else the older
        // rope.scale_linear; the type defaults to linear.
        let factor = if keys.has("rope.scaling.factor") {
            keys.float_or("rope.scaling.factor", 0.0)?
        } else {
            keys.float_or("rope.scale_linear", 0.0)?
        };
        let scaled = factor > 0.0 && factor != 1.0;
        let type_key = keys.key("rope.scaling.type");
        let rope_type = match keys.m.get(&type_key) {
            None => "linear",
            Some(_) => keys
                .m
                .get_str(&type_key)
                .map_err(|e| meta(&type_key, e.to_string()))?,
        };
        // LongRoPE (Phi-3) needs no type: its converter writes none (so
        // linear, factor 1), the rope_factors tensors and rope.scaling.attn_factor.
        let scaling = match rope_type {
            "yarn" if factor > 0.0 => RopeScaling::Yarn { factor },
            "linear" if scaled => RopeScaling::Linear { factor },
            "none" | "linear" | "yarn" => RopeScaling::None,
            other => {
                return Err(meta(
                    &type_key,
                    format!("'{other}' is not supported (none, linear, yarn)"),
                ))
            }
        };
        Ok(Rope {
            n_rot,
            freq_base,
            scaling,
            factor,
            n_ctx_orig: keys.uint_or("rope.scaling.original_context_length", n_ctx_train)?,
            attn_factor: keys.float_or("rope.scaling.attn_factor", 1.0)?,
        })
    }
}

/// What a family reads of its own: the FFN width and experts, the sliding
/// window and the scalings.
struct Own {
    n_ff: usize,
    experts: Experts,
    swa: Option<Swa>,
    shaping: Shaping,
}

impl Own {
    /// The reader of `family`'s own keys.
    fn read(keys: &Keys, family: Family, sizes: &Sizes, rope: &Rope) -> Result<Own> {
        match family {
            // dense FFNs (a llama file's may be Mixtral's experts)
            Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Phi3 => {
                Own::ffn(keys, family, keys.uint("feed_forward_length")?)
            }
            // llama.cpp's qwen3moe loader does not need feed_forward_length
            Family::Qwen3Moe => Own::ffn(keys, family, keys.uint_or("feed_forward_length", 0)?),
            Family::Gemma2 | Family::Gemma3 => {
                let own = Own::ffn(keys, family, keys.uint("feed_forward_length")?)?;
                let global = GlobalRope {
                    freq_base: rope.freq_base,
                    freq_scale: if rope.factor == 0.0 {
                        1.0
                    } else {
                        1.0 / rope.factor
                    },
                };
                let s = sizes;
                let (swa, shaping) = extras::read(
                    keys.m,
                    family,
                    s.n_layer,
                    s.n_embd,
                    s.n_head,
                    s.head_dim_k,
                    global,
                )?;
                Ok(Own {
                    swa,
                    shaping,
                    ..own
                })
            }
        }
    }

    /// The FFN width `n_ff` and the experts, no window and no scalings.
    fn ffn(keys: &Keys, family: Family, n_ff: usize) -> Result<Own> {
        let experts = Experts::read(keys.m, family, n_ff)?;
        if experts.n_expert == 0 && n_ff == 0 {
            return Err(meta(&keys.key("feed_forward_length"), "must be positive"));
        }
        Ok(Own {
            n_ff,
            experts,
            swa: None,
            shaping: Shaping::default(),
        })
    }
}

/// `general.architecture` and the family it names.
fn architecture(m: &Metadata) -> Result<(String, Family)> {
    let arch = m
        .get_str("general.architecture")
        .map_err(|_| meta("general.architecture", "missing"))?;
    let family = Family::from_arch(arch).ok_or_else(|| {
        meta(
            "general.architecture",
            format!(
                "'{arch}' is not supported (supported: {})",
                Family::supported()
            ),
        )
    })?;
    Ok((arch.to_string(), family))
}

impl HParams {
    /// Reads the hyperparameters of `f` (`{arch}.*` keys): the keys every
    /// family has, then the family's own, then checks them against the
    /// tensors.
    pub fn from_gguf(f: &GgufFile) -> Result<HParams> {
        let m = f.metadata();
        let (arch, family) = architecture(m)?;
        let keys = Keys { m, arch: &arch };
        let sizes = Sizes::read(&keys)?;
        let n_ctx_train = keys.uint_or("context_length", 2048)?;
        let rms_eps = keys.float_or("attention.layer_norm_rms_epsilon", 1e-5)?;
        let rope = Rope::read(&keys, sizes.head_dim_k, n_ctx_train)?;
        let own = Own::read(&keys, family, &sizes, &rope)?;
        let n_vocab = f
            .tensor("token_embd.weight")
            .map(|t| t.shape()[1])
            .ok_or_else(|| ModelError::Tensor {
                name: "token_embd.weight".into(),
                msg: "missing".into(),
            })?;
        let hp = HParams {
            arch: arch.clone(),
            family,
            n_layer: sizes.n_layer,
            n_embd: sizes.n_embd,
            n_ff: own.n_ff,
            n_expert: own.experts.n_expert,
            n_expert_used: own.experts.n_expert_used,
            n_ff_exp: own.experts.n_ff_exp,
            n_head: sizes.n_head,
            n_head_kv: sizes.n_head_kv,
            head_dim_k: sizes.head_dim_k,
            head_dim_v: sizes.head_dim_v,
            n_vocab,
            n_ctx_train,
            rms_eps,
            n_rot: rope.n_rot,
            rope_freq_base: rope.freq_base,
            rope_mode: family.rope_mode(),
            rope_scaling: rope.scaling,
            n_ctx_orig: rope.n_ctx_orig,
            rope_attn_factor: rope.attn_factor,
            swa: own.swa,
            shaping: own.shaping,
        };
        hp.check_against_tensors(f)?;
        // after the tensor checks, which name the tensor a wrong head size
        // contradicts
        if family.full_rotary_only() && hp.n_rot != hp.head_dim_k {
            return Err(meta(
                &keys.key("rope.dimension_count"),
                format!(
                    "{} rotated dimensions of {}: {arch} rotates the whole head \
                     (llama.cpp refuses partial rotary for it too)",
                    hp.n_rot, hp.head_dim_k
                ),
            ));
        }
        Ok(hp)
    }

    /// Checks the counts and widths against the tensors the file has,
    /// before anything is sized by them: a hostile `block_count` of 2^40
    /// would otherwise size the layer map (8 TiB), and a head size the KV
    /// cache. Every block must have tensors, and the first block's
    /// projections must have the widths the heads and FFN size give.
    fn check_against_tensors(&self, f: &GgufFile) -> Result<()> {
        let key = |k: &str| format!("{}.{k}", self.arch);
        let blocks: std::collections::HashSet<usize> = f
            .tensors()
            .iter()
            .filter_map(|t| super::layer_of(t.name()))
            .collect();
        if blocks.len() < self.n_layer {
            return Err(meta(
                &key("block_count"),
                format!(
                    "{} blocks, but the file has tensors (blk.N.*) for {} blocks: \
                     the metadata does not describe this file",
                    self.n_layer,
                    blocks.len()
                ),
            ));
        }
        let width = |name: &str, axis: usize| -> Result<usize> {
            f.tensor(name)
                .map(|t| t.shape()[axis])
                .ok_or_else(|| ModelError::Tensor {
                    name: name.into(),
                    msg: "missing".into(),
                })
        };
        let heads = |n: usize, d: usize| n.saturating_mul(d);
        let spec = self.family.spec();
        let mut checks = vec![(
            "embedding_length",
            "token_embd.weight",
            0,
            self.n_embd,
            format!("{}", self.n_embd),
        )];
        if spec.fused_qkv != Need::No && f.tensor("blk.0.attn_qkv.weight").is_some() {
            let q = heads(self.n_head, self.head_dim_k);
            let k = heads(self.n_head_kv, self.head_dim_k);
            let v = heads(self.n_head_kv, self.head_dim_v);
            checks.push((
                "attention.head_count, attention.head_count_kv, attention.key_length",
                "blk.0.attn_qkv.weight",
                1,
                q.saturating_add(k).saturating_add(v),
                format!(
                    "{} heads x {} + {} KV heads x ({} + {})",
                    self.n_head, self.head_dim_k, self.n_head_kv, self.head_dim_k, self.head_dim_v
                ),
            ));
        } else {
            checks.extend([
                (
                    "attention.head_count, attention.key_length",
                    "blk.0.attn_q.weight",
                    1,
                    heads(self.n_head, self.head_dim_k),
                    format!("{} heads x {}", self.n_head, self.head_dim_k),
                ),
                (
                    "attention.head_count_kv, attention.key_length",
                    "blk.0.attn_k.weight",
                    1,
                    heads(self.n_head_kv, self.head_dim_k),
                    format!("{} KV heads x {}", self.n_head_kv, self.head_dim_k),
                ),
                (
                    "attention.head_count_kv, attention.value_length",
                    "blk.0.attn_v.weight",
                    1,
                    heads(self.n_head_kv, self.head_dim_v),
                    format!("{} KV heads x {}", self.n_head_kv, self.head_dim_v),
                ),
            ]);
        }
        let (up_rows, up_says) = if spec.fused_gate_up {
            (
                self.n_ff.saturating_mul(2),
                format!("2 x {} (gate and up fused)", self.n_ff),
            )
        } else {
            (self.n_ff, format!("{}", self.n_ff))
        };
        if self.n_expert == 0 {
            checks.push((
                "feed_forward_length",
                "blk.0.ffn_up.weight",
                1,
                up_rows,
                up_says,
            ));
        } else {
            checks.push((
                super::moe::ff_exp_key(self.family),
                "blk.0.ffn_up_exps.weight",
                1,
                self.n_ff_exp,
                format!("{}", self.n_ff_exp),
            ));
            checks.push((
                "expert_count",
                "blk.0.ffn_gate_inp.weight",
                1,
                self.n_expert,
                format!("{} experts", self.n_expert),
            ));
        }
        for (keys, tensor, axis, want, says) in checks {
            let got = width(tensor, axis)?;
            if got != want {
                let keys: Vec<String> = keys.split(", ").map(key).collect();
                return Err(meta(
                    &keys.join(", "),
                    format!("the metadata gives {says}, but {tensor} has {got} there"),
                ));
            }
        }
        Ok(())
    }

    /// Whether a context of `n_ctx` cells counts as long for LongRoPE: as
    /// llama.cpp's `get_rope_factors`, its per-sequence context (which
    /// llama.cpp rounds up to a multiple of 256) is longer than
    /// `rope.scaling.original_context_length`.
    pub fn long_context(&self, n_ctx: usize) -> bool {
        n_ctx.div_ceil(256).saturating_mul(256) > self.n_ctx_orig
    }

    /// Width of all K heads of one token (`n_head_kv * head_dim_k`).
    pub fn n_embd_k_gqa(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }

    /// Width of all V heads of one token.
    pub fn n_embd_v_gqa(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// The RoPE parameters for the graph (llama.cpp's defaults: YaRN beta 32/1,
    /// extrapolation mix 1 only with YaRN scaling, and llama_context's YaRN
    /// magnitude: `mscale(factor) / (1 + 0.1 ln factor)`, which cancels the
    /// kernel's own YaRN factor, times `rope.scaling.attn_factor`; in f32 as
    /// llama.cpp computes it).
    pub fn rope_params(&self) -> strata::ops::RopeParams {
        let mut p = strata::ops::RopeParams::new(self.n_rot, self.rope_mode, self.rope_freq_base);
        p.n_ctx_orig = self.n_ctx_orig;
        match self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => p.freq_scale = 1.0 / factor,
            RopeScaling::Yarn { factor } => {
                p.freq_scale = 1.0 / factor;
                p.ext_factor = 1.0;
                let factor = 1.0 / p.freq_scale;
                let mscale = if factor <= 1.0 {
                    1.0
                } else {
                    0.1 * factor.ln() + 1.0
                };
                p.attn_factor = mscale * (1.0 / (1.0 + 0.1 * factor.ln()));
            }
        }
        p.attn_factor *= self.rope_attn_factor;
        p
    }

    /// [`HParams::rope_params`] of layer `il`: a sliding-window layer has
    /// its own base and frequency scale (llama.cpp's `get_rope_freq_base`
    /// / `get_rope_freq_scale`).
    pub fn rope_params_for(&self, il: usize) -> strata::ops::RopeParams {
        let mut p = self.rope_params();
        if let Some(swa) = self.swa.as_ref().filter(|s| s.is_swa(il)) {
            p.freq_base = swa.rope_freq_base;
            p.freq_scale = swa.rope_freq_scale;
        }
        p
    }
}

/// The unsigned integer at `key`, `None` when absent; a typed error naming
/// the key when it holds something else.
pub(super) fn get_uint(m: &Metadata, key: &str) -> Result<Option<usize>> {
    m.get(key)
        .map(|v| {
            v.to_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| meta(key, "expected an unsigned integer"))
        })
        .transpose()
}

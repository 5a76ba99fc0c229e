//! The decoder families strata builds, and what each one's GGUF holds.
//!
//! Llama, Qwen 2/3, Qwen 3 MoE, Gemma 2/3 and Phi-3 share one graph
//! (`crate::graph`): RMS norm → attention → [RMS norm →] residual → RMS norm →
//! gated FFN (or its mixture of experts) → [RMS norm →] residual. They differ
//! in the RoPE pairing, the FFN's gate activation (SwiGLU, Gemma's GeGLU),
//! fused weights (Phi-3's QKV and gate+up) and in optional tensors, which
//! this table records as llama.cpp's loaders
//! (`src/models/{llama,qwen2,qwen3,qwen3moe,gemma2,gemma3,phi3}.cpp`) declare them:
//! a tensor a family does not load is left unused, and an unused tensor is a
//! load error (llama.cpp's "wrong number of tensors").

use strata::ops::{GluOp, RopeMode};

/// A model family (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `llama`: Llama 1/2/3 (and Mistral, SmolLM2 as converted): normal RoPE,
    /// optional `rope_freqs` (Llama 3.1+), optional attention and FFN biases.
    Llama,
    /// `qwen2`: Qwen 2 / 2.5: NEOX RoPE, biases on Q, K and V, optional output bias.
    Qwen2,
    /// `qwen3`: Qwen 3 (dense): NEOX RoPE, per-head RMS norm of Q and K before RoPE.
    Qwen3,
    /// `qwen3moe`: Qwen 3 mixture of experts (Qwen3-30B-A3B): Qwen 3's
    /// attention, every FFN a mixture of experts (softmax routing, top-k
    /// weights normalised to sum 1).
    Qwen3Moe,
    /// `gemma2`: Gemma 2: NEOX RoPE, embedding scaled by √n_embd, norms after
    /// attention and FFN, GeGLU, attention and final logit soft-capping,
    /// sliding-window attention on every other layer; the head is always the
    /// token embedding.
    Gemma2,
    /// `gemma3`: Gemma 3 (text): as Gemma 2 with per-head Q/K RMS norms, no
    /// attention soft-capping, five sliding-window layers to one global
    /// layer, and their own RoPE base for the sliding-window layers.
    Gemma3,
    /// `phi3`: Phi-3 / Phi-3.5 / Phi-4-mini: fused `attn_qkv` (or separate
    /// Q/K/V), fused gate+up `ffn_up`, NEOX RoPE with LongRoPE factors
    /// (`rope_factors_{long,short}`), Q scaled by 1/√head_dim before attention.
    /// `phi3.attention.sliding_window` is read by nobody: llama.cpp b11312
    /// turns Phi's sliding window off, and strata does the same.
    Phi3,
}

/// Whether a family's file holds a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Never loaded (present in a file, it is an unused tensor: an error).
    No,
    /// Loaded when present.
    Optional,
    /// Must be present.
    Required,
}

/// The tensors a family may or must have beyond the llama core (norms,
/// Q/K/V/O, gate/up/down, token embedding, output norm, optional output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `blk.N.attn_{q,k,v}.bias`.
    pub qkv_bias: Need,
    /// `blk.N.attn_output.bias`.
    pub wo_bias: Need,
    /// `blk.N.attn_{q,k}_norm.weight` (per-head RMS norm weights).
    pub qk_norm: Need,
    /// `blk.N.ffn_{gate,up,down}.bias`.
    pub ffn_bias: Need,
    /// `rope_freqs.weight` (per-dimension RoPE frequency factors).
    pub rope_freqs: Need,
    /// `output.bias`.
    pub output_bias: Need,
    /// `output.weight` (absent: the head is the token embedding).
    pub output: Need,
    /// `blk.N.post_attention_norm.weight` and `blk.N.post_ffw_norm.weight`
    /// (RMS norms of the attention and FFN outputs before their residuals).
    pub post_norms: Need,
    /// Mixture-of-experts FFNs (`blk.N.ffn_gate_inp.weight` and
    /// `blk.N.ffn_{gate,up,down}_exps.weight` instead of the dense FFN):
    /// `Optional` means when `{arch}.expert_count` is above 0.
    pub moe: Need,
    /// `blk.N.attn_qkv.weight` (Q, K and V rows fused, in that order) in
    /// place of `attn_{q,k,v}.weight` (with `attn_qkv.bias` or the separate
    /// biases). `No`: separate Q/K/V only.
    pub fused_qkv: Need,
    /// `blk.N.ffn_up.weight` is `[n_embd, 2·n_ff]`, gate rows first, and
    /// there is no `ffn_gate` (llama.cpp's `ggml_swiglu` on the fused rows).
    pub fused_gate_up: bool,
    /// `rope_factors_long.weight` / `rope_factors_short.weight` (LongRoPE:
    /// long when the context is longer than `rope.scaling.original_context_length`).
    pub rope_factors: Need,
    /// Q is scaled by 1/√head_dim before attention, which then scales by 1
    /// (phi3.cpp's order; the same product, rounded differently).
    pub prescale_q: bool,
}

impl Spec {
    /// The answers each family's [`Family::spec`] starts from: no biases,
    /// Q/K norms, RoPE frequency factors or post-norms, no fused weights,
    /// no LongRoPE factors, scaling in attention, an optional head, and
    /// llama's optional experts (Mixtral's GGUF is a `llama` file).
    pub const DENSE: Spec = Spec {
        qkv_bias: Need::No,
        wo_bias: Need::No,
        qk_norm: Need::No,
        ffn_bias: Need::No,
        rope_freqs: Need::No,
        output_bias: Need::No,
        output: Need::Optional,
        post_norms: Need::No,
        moe: Need::Optional,
        fused_qkv: Need::No,
        fused_gate_up: false,
        rope_factors: Need::No,
        prescale_q: false,
    };
}

impl Family {
    /// Every family, in the order error messages list them.
    pub const ALL: [Family; 7] = [
        Family::Llama,
        Family::Qwen2,
        Family::Qwen3,
        Family::Qwen3Moe,
        Family::Gemma2,
        Family::Gemma3,
        Family::Phi3,
    ];

    /// The family of `general.architecture = arch`.
    pub fn from_arch(arch: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.arch() == arch)
    }

    /// The `general.architecture` name (also the metadata key prefix).
    pub fn arch(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3moe",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
            Family::Phi3 => "phi3",
        }
    }

    /// The FFN's gate activation (llama.cpp's `LLM_FFN_SILU` / `LLM_FFN_GELU`
    /// with a parallel gate: ggml's SwiGLU / GeGLU, GELU's tanh form; Phi-3's
    /// fused gate+up is SwiGLU too).
    pub fn ffn_glu(self) -> GluOp {
        match self {
            Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Phi3 => {
                GluOp::Swiglu
            }
            Family::Gemma2 | Family::Gemma3 => GluOp::Geglu,
        }
    }

    /// RoPE pairing (llama.cpp's `llama_model_rope_type`).
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Family::Llama => RopeMode::Normal,
            Family::Qwen2
            | Family::Qwen3
            | Family::Qwen3Moe
            | Family::Gemma2
            | Family::Gemma3
            | Family::Phi3 => RopeMode::Neox,
        }
    }

    /// The family's optional and required tensors: where it differs from
    /// [`Spec::DENSE`].
    pub fn spec(self) -> Spec {
        use Need::*;
        match self {
            Family::Llama => Spec {
                qkv_bias: Optional,
                wo_bias: Optional,
                ffn_bias: Optional,
                rope_freqs: Optional,
                ..Spec::DENSE
            },
            Family::Qwen2 => Spec {
                qkv_bias: Optional,
                output_bias: Optional,
                moe: No,
                ..Spec::DENSE
            },
            Family::Qwen3 => Spec {
                qkv_bias: Optional,
                qk_norm: Required,
                moe: No,
                ..Spec::DENSE
            },
            // Qwen 3's attention, every FFN a mixture of experts
            Family::Qwen3Moe => Spec {
                moe: Required,
                ..Family::Qwen3.spec()
            },
            Family::Gemma2 | Family::Gemma3 => Spec {
                qk_norm: if self == Family::Gemma3 { Required } else { No },
                // gemma2 always ties the head to the embedding
                output: if self == Family::Gemma3 { Optional } else { No },
                post_norms: Required,
                moe: No,
                ..Spec::DENSE
            },
            // phi3.cpp: create_tensor_qkv (fused or separate, biases
            // optional), no output bias, one rope_factors pair for all layers
            Family::Phi3 => Spec {
                qkv_bias: Optional,
                moe: No,
                fused_qkv: Optional,
                fused_gate_up: true,
                rope_factors: Optional,
                prescale_q: true,
                ..Spec::DENSE
            },
        }
    }

    /// Whether RoPE must rotate the whole head (`rope.dimension_count` equal
    /// to the head size): llama.cpp b11312 refuses partial rotary for these
    /// (`invalid n_rot` at load for llama, an assertion in the graph for
    /// qwen2, qwen3 and qwen3moe).
    pub fn full_rotary_only(self) -> bool {
        matches!(
            self,
            Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe
        )
    }

    /// The supported architecture names, comma-separated.
    pub fn supported() -> String {
        Family::ALL.map(Family::arch).join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_round_trip() {
        for f in Family::ALL {
            assert_eq!(Family::from_arch(f.arch()), Some(f));
        }
        assert_eq!(Family::from_arch("gemma"), None);
        assert_eq!(
            Family::supported(),
            "llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3"
        );
    }
}

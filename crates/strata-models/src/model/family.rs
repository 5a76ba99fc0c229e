//! The dense decoder families strata builds, and what each one's GGUF holds.
//!
//! Llama, Qwen 2 and Qwen 3 share one graph (`crate::graph`): RMS norm →
//! attention → residual → RMS norm → SwiGLU FFN → residual. They differ in
//! the RoPE pairing and in optional tensors, which this table records as
//! llama.cpp's loaders (`src/models/{llama,qwen2,qwen3}.cpp`) declare them:
//! a tensor a family does not load is left unused, and an unused tensor is a
//! load error (llama.cpp's "wrong number of tensors").

use strata::ops::RopeMode;

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
    /// The llama layout's answers to the fields that only some families
    /// change (no fused weights, no LongRoPE factors, scaling in attention).
    pub const DENSE: Spec = Spec {
        qkv_bias: Need::No,
        wo_bias: Need::No,
        qk_norm: Need::No,
        ffn_bias: Need::No,
        rope_freqs: Need::No,
        output_bias: Need::No,
        fused_qkv: Need::No,
        fused_gate_up: false,
        rope_factors: Need::No,
        prescale_q: false,
    };
}

impl Family {
    /// Every family, in the order error messages list them.
    pub const ALL: [Family; 4] = [Family::Llama, Family::Qwen2, Family::Qwen3, Family::Phi3];

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
            Family::Phi3 => "phi3",
        }
    }

    /// RoPE pairing (llama.cpp's `llama_model_rope_type`).
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Family::Llama => RopeMode::Normal,
            Family::Qwen2 | Family::Qwen3 | Family::Phi3 => RopeMode::Neox,
        }
    }

    /// The family's optional and required tensors.
    pub fn spec(self) -> Spec {
        use Need::*;
        match self {
            Family::Llama => Spec {
                qkv_bias: Optional,
                wo_bias: Optional,
                qk_norm: No,
                ffn_bias: Optional,
                rope_freqs: Optional,
                output_bias: No,
                ..Spec::DENSE
            },
            Family::Qwen2 => Spec {
                qkv_bias: Optional,
                wo_bias: No,
                qk_norm: No,
                ffn_bias: No,
                rope_freqs: No,
                output_bias: Optional,
                ..Spec::DENSE
            },
            Family::Qwen3 => Spec {
                qkv_bias: Optional,
                wo_bias: No,
                qk_norm: Required,
                ffn_bias: No,
                rope_freqs: No,
                output_bias: No,
                ..Spec::DENSE
            },
            // phi3.cpp: create_tensor_qkv (fused or separate, biases
            // optional), no output bias, one rope_factors pair for all layers
            Family::Phi3 => Spec {
                qkv_bias: Optional,
                wo_bias: No,
                qk_norm: No,
                ffn_bias: No,
                rope_freqs: No,
                output_bias: No,
                fused_qkv: Optional,
                fused_gate_up: true,
                rope_factors: Optional,
                prescale_q: true,
            },
        }
    }

    /// Whether RoPE must rotate the whole head (`rope.dimension_count` equal
    /// to the head size): llama.cpp b11312 refuses partial rotary for these
    /// (`invalid n_rot` at load for llama, an assertion in the graph for
    /// qwen2 and qwen3).
    pub fn full_rotary_only(self) -> bool {
        matches!(self, Family::Llama | Family::Qwen2 | Family::Qwen3)
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
        assert_eq!(Family::from_arch("gemma2"), None);
        assert_eq!(Family::supported(), "llama, qwen2, qwen3, phi3");
    }
}

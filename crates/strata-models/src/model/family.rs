//! The decoder families strata builds, and what each one's GGUF holds.
//!
//! Llama, Qwen 2, Qwen 3 and Qwen 3 MoE share one graph (`crate::graph`):
//! RMS norm → attention → residual → RMS norm → SwiGLU FFN (or its
//! mixture of experts) → residual. They differ in the RoPE pairing and in
//! optional tensors, which this table records as llama.cpp's loaders
//! (`src/models/{llama,qwen2,qwen3,qwen3moe}.cpp`) declare them:
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
    /// `qwen3moe`: Qwen 3 mixture of experts (Qwen3-30B-A3B): Qwen 3's
    /// attention, every FFN a mixture of experts (softmax routing, top-k
    /// weights normalised to sum 1).
    Qwen3Moe,
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
    /// Mixture-of-experts FFNs (`blk.N.ffn_gate_inp.weight` and
    /// `blk.N.ffn_{gate,up,down}_exps.weight` instead of the dense FFN):
    /// `Optional` means when `{arch}.expert_count` is above 0.
    pub moe: Need,
}

impl Family {
    /// Every family, in the order error messages list them.
    pub const ALL: [Family; 4] = [
        Family::Llama,
        Family::Qwen2,
        Family::Qwen3,
        Family::Qwen3Moe,
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
        }
    }

    /// RoPE pairing (llama.cpp's `llama_model_rope_type`).
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Family::Llama => RopeMode::Normal,
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => RopeMode::Neox,
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
                moe: Optional,
            },
            Family::Qwen2 => Spec {
                qkv_bias: Optional,
                wo_bias: No,
                qk_norm: No,
                ffn_bias: No,
                rope_freqs: No,
                output_bias: Optional,
                moe: No,
            },
            Family::Qwen3 => Spec {
                qkv_bias: Optional,
                wo_bias: No,
                qk_norm: Required,
                ffn_bias: No,
                rope_freqs: No,
                output_bias: No,
                moe: No,
            },
            // Qwen 3's attention, every FFN a mixture of experts
            Family::Qwen3Moe => Spec {
                moe: Required,
                ..Family::Qwen3.spec()
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
        assert_eq!(Family::supported(), "llama, qwen2, qwen3, qwen3moe");
    }
}

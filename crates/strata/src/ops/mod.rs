//! Ops: what a tensor is computed from. Ops are data (an enum with typed
//! parameters); graph-building functions in this module validate shapes and
//! types ([`infer`]) and return new tensors.
//!
//! ```
//! use strata::{ops, DType, Tensor};
//! let a = Tensor::new(DType::F32, &[4, 2]).unwrap(); // K=4, M=2
//! let b = Tensor::new(DType::F32, &[4, 3]).unwrap(); // K=4, N=3
//! let c = ops::mul_mat(&a, &b).unwrap();
//! assert_eq!(c.ne(), [2, 3, 1, 1]);
//! // a shape error names the op and the shapes
//! let bad = Tensor::new(DType::F32, &[5, 3]).unwrap();
//! let err = ops::mul_mat(&a, &bad).unwrap_err().to_string();
//! assert!(err.contains("MUL_MAT"), "{err}");
//! ```

mod attn;
mod build;
mod copy;
mod elementwise;
mod infer;
mod layout;
mod matmul;
mod norm;
mod params;
mod reduce;
mod rope;
mod rows;
mod softmax;

pub use attn::*;
pub use build::*;
pub use copy::*;
pub use elementwise::*;
pub(crate) use infer::span;
pub use infer::{infer, Inferred};
pub use layout::*;
pub use matmul::*;
pub use norm::*;
pub use params::{OpParams, GGML_OP_COUNT};
pub use reduce::*;
pub use rope::*;
pub use rows::*;
pub use softmax::*;

/// Element-wise unary functions (ggml's `ggml_unary_op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// |x|
    Abs,
    /// -x
    Neg,
    /// tanh(x)
    Tanh,
    /// max(x, 0)
    Relu,
    /// 1 / (1 + e^-x)
    Sigmoid,
    /// GELU, tanh approximation.
    Gelu,
    /// x * sigmoid(1.702 x)
    GeluQuick,
    /// x * sigmoid(x)
    Silu,
    /// e^x
    Exp,
    /// GELU, exact: x · (1 + erf(x / √2)) / 2 (ggml's `GELU_ERF`).
    GeluErf,
}

impl UnaryOp {
    /// All unary ops strata implements.
    pub const ALL: [UnaryOp; 10] = [
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Tanh,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::GeluQuick,
        UnaryOp::Silu,
        UnaryOp::Exp,
        UnaryOp::GeluErf,
    ];
    /// ggml's id.
    pub fn ggml_id(self) -> i32 {
        match self {
            UnaryOp::Abs => 0,
            UnaryOp::Neg => 2,
            UnaryOp::Tanh => 4,
            UnaryOp::Relu => 6,
            UnaryOp::Sigmoid => 7,
            UnaryOp::Gelu => 8,
            UnaryOp::GeluQuick => 9,
            UnaryOp::Silu => 10,
            UnaryOp::Exp => 13,
            UnaryOp::GeluErf => 16,
        }
    }
    /// From ggml's id.
    pub fn from_ggml_id(id: i32) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|u| u.ggml_id() == id)
    }
}

/// Gated linear units (ggml's `ggml_glu_op`): `f(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluOp {
    /// relu(a) * b
    Reglu,
    /// gelu(a) * b
    Geglu,
    /// silu(a) * b
    Swiglu,
    /// gelu_erf(a) * b (the exact GELU, [`UnaryOp::GeluErf`]).
    GegluErf,
}

impl GluOp {
    /// All gated linear units strata implements.
    pub const ALL: [GluOp; 4] = [GluOp::Reglu, GluOp::Geglu, GluOp::Swiglu, GluOp::GegluErf];
    /// ggml's id.
    pub fn ggml_id(self) -> i32 {
        match self {
            GluOp::Reglu => 0,
            GluOp::Geglu => 1,
            GluOp::Swiglu => 2,
            GluOp::GegluErf => 4,
        }
    }
    /// From ggml's id.
    pub fn from_ggml_id(id: i32) -> Option<GluOp> {
        GluOp::ALL.into_iter().find(|g| g.ggml_id() == id)
    }
}

/// Sort order of ARGSORT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

/// RoPE mode: which element pairs are rotated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs (`x[2i]`, `x[2i+1]`) — ggml mode 0 (llama).
    Normal,
    /// Halves (`x[i]`, `x[i + n_dims/2]`) — ggml mode 2 (GPT-NeoX, Qwen, SmolLM2 as converted).
    Neox,
}

/// Rotary position embedding parameters (ggml's ROPE op_params).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Number of leading dimensions rotated.
    pub n_dims: usize,
    /// Pairing mode.
    pub mode: RopeMode,
    /// Original training context (YaRN).
    pub n_ctx_orig: usize,
    /// Base frequency (10000, 100000, ...).
    pub freq_base: f32,
    /// Position scaling (1 / linear scaling factor).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 = off).
    pub ext_factor: f32,
    /// YaRN magnitude scaling.
    pub attn_factor: f32,
    /// YaRN low correction dim parameter.
    pub beta_fast: f32,
    /// YaRN high correction dim parameter.
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain RoPE over `n_dims` dims with `freq_base`, no scaling.
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> RopeParams {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// The operation that computes a tensor, with its typed parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A leaf: no computation.
    None,
    /// Contiguous copy, same type.
    Dup,
    /// a + b (b broadcast over a).
    Add,
    /// a - b (broadcast).
    Sub,
    /// a * b (broadcast).
    Mul,
    /// a / b (broadcast).
    Div,
    /// x²
    Sqr,
    /// √x
    Sqrt,
    /// ln x
    Log,
    /// sin x
    Sin,
    /// cos x
    Cos,
    /// Sum of all elements.
    Sum,
    /// Sum of each row.
    SumRows,
    /// Mean of each row.
    Mean,
    /// Index of each row's maximum (I32).
    Argmax,
    /// Tile a over b's shape.
    Repeat,
    /// Concatenate along `dim`.
    Concat {
        /// The dimension (0..4).
        dim: usize,
    },
    /// (x - mean) / sqrt(var + eps) per row.
    Norm {
        /// Epsilon.
        eps: f32,
    },
    /// x / sqrt(mean(x²) + eps) per row.
    RmsNorm {
        /// Epsilon.
        eps: f32,
    },
    /// ggml matrix product: a [K, M, ..] · b [K, N, ..] → [M, N, ..].
    MulMat,
    /// Expert-indexed matrix product (mixture of experts): weights
    /// [K, M, n_expert], activations [K, n_used or 1, tokens], I32 expert ids
    /// [n_used, tokens] → [M, n_used, tokens].
    MulMatId,
    /// a [n, n_used, tokens] + the rows of b [n, n_expert] picked by the I32
    /// ids [n_used, tokens] (per-expert biases).
    AddId,
    /// s·x + b.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after scaling.
        bias: f32,
    },
    /// Copy src0 into src1 (type conversion); the result is a view of src1.
    Cpy,
    /// Contiguous copy of a (possibly strided) tensor.
    Cont,
    /// Same data, new shape (contiguous sources only).
    Reshape,
    /// A strided window into a tensor.
    View {
        /// Byte offset inside the viewed tensor.
        offset: usize,
    },
    /// Dimension permutation: source dim i goes to `axes[i]`.
    Permute {
        /// Destination of each source dim.
        axes: [usize; 4],
    },
    /// Swap dims 0 and 1.
    Transpose,
    /// Rows of src0 selected by the I32 indices src1.
    GetRows,
    /// Write rows src0 into the destination src2 at indices src1; view of src2.
    SetRows,
    /// Set elements above the diagonal (shifted by n_past) to -inf.
    DiagMaskInf {
        /// Number of past tokens.
        n_past: usize,
    },
    /// softmax(x·scale + mask·slope) per row.
    SoftMax {
        /// Multiplier of the logits.
        scale: f32,
        /// ALiBi maximum bias (0 = off).
        max_bias: f32,
    },
    /// Rotary position embedding.
    Rope(RopeParams),
    /// min(max(x, min), max).
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// Indices that sort each row (I32).
    Argsort {
        /// Order.
        order: SortOrder,
    },
    /// Indices of each row's k largest values (I32 [k, ..]); k is the
    /// result's ne0 (ggml keeps it in the shape, not in op_params).
    TopK,
    /// Fused attention: softmax(q·kᵀ·scale + mask)·v.
    FlashAttnExt {
        /// Multiplier of q·kᵀ.
        scale: f32,
        /// ALiBi maximum bias (0 = off).
        max_bias: f32,
        /// Logit soft-capping (0 = off): c·tanh(x / c).
        softcap: f32,
    },
    /// An element-wise function.
    Unary(UnaryOp),
    /// Gated linear unit; with one source the gate and up halves are split along dim 0.
    Glu {
        /// Activation.
        op: GluOp,
        /// With one source: gate is the second half instead of the first.
        swapped: bool,
    },
}

impl Op {
    /// ggml's upper-case op name ("MUL_MAT", "UNARY(SILU)" is reported as "UNARY").
    pub fn name(&self) -> &'static str {
        self.ggml_op().1
    }

    /// ggml's op id and upper-case name, one row per op.
    fn ggml_op(&self) -> (u32, &'static str) {
        match self {
            Op::None => (0, "NONE"),
            Op::Dup => (1, "DUP"),
            Op::Add => (2, "ADD"),
            Op::Sub => (6, "SUB"),
            Op::Mul => (7, "MUL"),
            Op::Div => (8, "DIV"),
            Op::Sqr => (9, "SQR"),
            Op::Sqrt => (10, "SQRT"),
            Op::Log => (11, "LOG"),
            Op::Sin => (12, "SIN"),
            Op::Cos => (13, "COS"),
            Op::Sum => (14, "SUM"),
            Op::SumRows => (15, "SUM_ROWS"),
            Op::Mean => (17, "MEAN"),
            Op::Argmax => (18, "ARGMAX"),
            Op::Repeat => (20, "REPEAT"),
            Op::Concat { .. } => (22, "CONCAT"),
            Op::Norm { .. } => (24, "NORM"),
            Op::RmsNorm { .. } => (25, "RMS_NORM"),
            Op::MulMat => (29, "MUL_MAT"),
            Op::MulMatId => (30, "MUL_MAT_ID"),
            Op::AddId => (3, "ADD_ID"),
            Op::Scale { .. } => (32, "SCALE"),
            Op::Cpy => (34, "CPY"),
            Op::Cont => (35, "CONT"),
            Op::Reshape => (36, "RESHAPE"),
            Op::View { .. } => (37, "VIEW"),
            Op::Permute { .. } => (38, "PERMUTE"),
            Op::Transpose => (39, "TRANSPOSE"),
            Op::GetRows => (40, "GET_ROWS"),
            Op::SetRows => (42, "SET_ROWS"),
            Op::DiagMaskInf { .. } => (44, "DIAG_MASK_INF"),
            Op::SoftMax { .. } => (46, "SOFT_MAX"),
            Op::Rope(_) => (48, "ROPE"),
            Op::Clamp { .. } => (50, "CLAMP"),
            Op::Argsort { .. } => (69, "ARGSORT"),
            Op::TopK => (70, "TOP_K"),
            Op::FlashAttnExt { .. } => (74, "FLASH_ATTN_EXT"),
            Op::Unary(_) => (91, "UNARY"),
            Op::Glu { .. } => (100, "GLU"),
        }
    }

    /// True for [`Op::None`] (a leaf).
    pub fn is_none_op(&self) -> bool {
        matches!(self, Op::None)
    }

    /// True for ops whose result shape is not a function of the sources and
    /// the op's parameters, so [`infer`] needs the requested layout: VIEW,
    /// RESHAPE, TOP_K (whose k is the result's ne0).
    pub fn takes_layout(&self) -> bool {
        matches!(self, Op::View { .. } | Op::Reshape | Op::TopK)
    }

    /// True for ops whose result only re-describes memory of its source
    /// (nothing to compute): VIEW, RESHAPE, PERMUTE, TRANSPOSE, NONE.
    pub fn is_view_op(&self) -> bool {
        matches!(
            self,
            Op::None | Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose
        )
    }

    /// True when the result may be written over its first source's memory
    /// (element-wise or row-local ops that read each element before writing
    /// it). The memory planner uses this for in-place reuse.
    pub fn can_run_in_place(&self) -> bool {
        matches!(
            self,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Sqr
                | Op::Sqrt
                | Op::Log
                | Op::Sin
                | Op::Cos
                | Op::Scale { .. }
                | Op::Clamp { .. }
                | Op::Unary(_)
                | Op::Norm { .. }
                | Op::RmsNorm { .. }
                | Op::Rope(_)
                | Op::SoftMax { .. }
                | Op::DiagMaskInf { .. }
        )
    }
}

//! Element-wise ops: broadcast binary arithmetic, unary functions, scale, clamp and gated linear units.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{make, op1, op2, op3};
use super::infer::{can_repeat, contiguous, InferCx, Inferred};
use super::{GluOp, Op, UnaryOp};
use crate::error::{Operand, ShapeProblem};
use crate::tensor::Tensor;
use crate::Result;

/// `a + b`, `b` broadcast over `a` (each dim of b divides a's).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Add, a, b)
}

/// `a - b`, broadcast.
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Sub, a, b)
}

/// `a * b`, broadcast.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Mul, a, b)
}

/// `a / b`, broadcast.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Div, a, b)
}

/// `scale * a`.
pub fn scale(a: &Tensor, scale: f32) -> Result<Tensor> {
    op1(Op::Scale { scale, bias: 0.0 }, a)
}

/// `scale * a + bias`.
pub fn scale_bias(a: &Tensor, scale: f32, bias: f32) -> Result<Tensor> {
    op1(Op::Scale { scale, bias }, a)
}

/// `a²`.
pub fn sqr(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sqr, a)
}

/// `√a`.
pub fn sqrt(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sqrt, a)
}

/// `ln a`.
pub fn log(a: &Tensor) -> Result<Tensor> {
    op1(Op::Log, a)
}

/// `sin a`.
pub fn sin(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sin, a)
}

/// `cos a`.
pub fn cos(a: &Tensor) -> Result<Tensor> {
    op1(Op::Cos, a)
}

/// Clamp to `[min, max]`.
pub fn clamp(a: &Tensor, min: f32, max: f32) -> Result<Tensor> {
    op1(Op::Clamp { min, max }, a)
}

/// An element-wise function.
pub fn unary(a: &Tensor, op: UnaryOp) -> Result<Tensor> {
    op1(Op::Unary(op), a)
}

/// `x * sigmoid(x)`.
pub fn silu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Silu)
}

/// GELU (tanh approximation).
pub fn gelu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Gelu)
}

/// `max(x, 0)`.
pub fn relu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Relu)
}

/// Gated linear unit with separate gate `a` and up `b`: `f(a) * b`.
pub fn glu_split(a: &Tensor, b: &Tensor, op: GluOp) -> Result<Tensor> {
    make(
        Op::Glu { op, swapped: false },
        vec![Some(a.clone()), Some(b.clone())],
        None,
    )
}

/// Gated linear unit on a fused tensor whose rows hold gate and up halves
/// (gate first unless `swapped`).
pub fn glu(a: &Tensor, op: GluOp, swapped: bool) -> Result<Tensor> {
    make(Op::Glu { op, swapped }, vec![Some(a.clone())], None)
}

/// `silu(a) * b` (llama's FFN).
pub fn swiglu_split(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    glu_split(a, b, GluOp::Swiglu)
}

/// Shape and type inference of ADD, SUB, MUL, DIV: `b` broadcast over float `a`.
pub(super) fn infer_binary(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    cx.float(a)?;
    cx.float(b)?;
    if !can_repeat(&b.ne(), &a.ne()) {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "b cannot be broadcast to a: each dim of b must divide a's",
            a: Operand::of("a", a),
            b: Operand::of("b", b),
        }));
    }
    Ok(contiguous(a.dtype(), a.ne()))
}

/// Per-expert bias (ggml_add_id): `a` [n, n_used, tokens, ..] plus the row
/// of `b` [n, n_expert] that the I32 `ids` [n_used, tokens] pick:
/// `out[:, s, t, j] = a[:, s, t, j] + b[:, ids[s, t]]`.
///
/// An id outside `0..n_expert` is refused before compute when `ids` is an
/// input; one computed by the graph leaves that row of `a` unbiased.
pub fn add_id(a: &Tensor, b: &Tensor, ids: &Tensor) -> Result<Tensor> {
    op3(Op::AddId, a, b, ids)
}

/// Shape and type inference of ADD_ID (ggml's rules): a result like `a`.
pub(super) fn infer_add_id(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b, ids) = (cx.get(0)?, cx.get(1)?, cx.get(2)?);
    cx.float(a)?;
    cx.float(b)?;
    cx.expert_ids(ids)?;
    let (na, nb_, ni) = (a.ne(), b.ne(), ids.ne());
    if na[0] != nb_[0] {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "ne0 must match",
            a: Operand::of("a", a),
            b: Operand::of("biases", b),
        }));
    }
    if na[1] != ni[0] || na[2] != ni[1] {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "need a.ne1 == ids.ne0 (n_used) and a.ne2 == ids.ne1 (tokens)",
            a: Operand::of("a", a),
            b: Operand::of("ids", ids),
        }));
    }
    Ok(contiguous(a.dtype(), na))
}

/// Shape and type inference of float-to-float functions of one source (SQR ... COS, SCALE, CLAMP, UNARY).
pub(super) fn infer_unary(cx: &InferCx<'_>) -> Result<Inferred> {
    cx.like_src0(InferCx::float)
}

/// Shape and type inference of GLU: split or fused gate and up halves.
pub(super) fn infer_glu(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    match cx.opt(1) {
        Some(b) => {
            cx.float(b)?;
            if a.ne() != b.ne() || a.dtype() != b.dtype() {
                return Err(cx.shape_err(ShapeProblem::Mismatch {
                    rule: "gate and up must have one shape and type",
                    a: Operand::of("gate", a),
                    b: Operand::of("up", b),
                }));
            }
            Ok(contiguous(a.dtype(), a.ne()))
        }
        None => {
            let mut ne = a.ne();
            if ne[0] % 2 != 0 {
                return Err(cx.shape_err(ShapeProblem::NotMultiple {
                    what: "ne0 of the fused gate/up",
                    value: ne[0],
                    multiple: 2,
                }));
            }
            ne[0] /= 2;
            Ok(contiguous(a.dtype(), ne))
        }
    }
}

//! Copies: DUP, CONT, CPY (type conversion into a destination), REPEAT and CONCAT.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{op1, op2};
use super::infer::{can_repeat, contiguous, view_of, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A contiguous copy of `a` (same type).
pub fn dup(a: &Tensor) -> Result<Tensor> {
    op1(Op::Dup, a)
}

/// A contiguous copy of a possibly strided tensor.
pub fn cont(a: &Tensor) -> Result<Tensor> {
    op1(Op::Cont, a)
}

/// Copies `a` into `b` converting the type; the result is a view of `b`.
pub fn cpy(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Cpy, a, b)
}

/// `a` tiled to the shape of `b`.
pub fn repeat(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Repeat, a, b)
}

/// `a` and `b` concatenated along `dim`.
pub fn concat(a: &Tensor, b: &Tensor, dim: usize) -> Result<Tensor> {
    op2(Op::Concat { dim }, a, b)
}

/// Shape and type inference of DUP and CONT: a contiguous copy of the same type.
pub(super) fn infer_dup(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    Ok(contiguous(a.dtype(), a.ne()))
}

/// Shape and type inference of CPY: a view of the destination, which must take the source's elements.
pub(super) fn infer_cpy(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    if a.nelements() != b.nelements() {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "the element counts must match",
            a: Operand::of("src", a),
            b: Operand::of("dst", b),
        }));
    }
    let ok = a.dtype() == b.dtype() && !a.dtype().is_quantized()
        || (a.dtype().is_float() && (b.dtype().is_float() || b.dtype().is_quantized()))
        || (a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous());
    if !ok {
        return Err(Error::dtype(
            cx.name,
            b.dtype(),
            format!("cannot copy {} into it", a.dtype()),
        ));
    }
    if b.dtype().is_quantized() && !b.is_contiguous_rows() {
        return Err(cx.shape_err(ShapeProblem::RowsNotContiguous { tensor: b.name() }));
    }
    Ok(view_of(b, 0, b.ne(), b.nb()))
}

/// Shape and type inference of REPEAT: `a` tiled to `b`'s shape.
pub(super) fn infer_repeat(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    if !can_repeat(&a.ne(), &b.ne()) {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "a cannot be tiled to b's shape: each dim of a must divide b's",
            a: Operand::of("a", a),
            b: Operand::of("b", b),
        }));
    }
    if a.dtype().is_quantized() {
        return Err(Error::dtype(
            cx.name,
            a.dtype(),
            "quantized tensors cannot be repeated",
        ));
    }
    Ok(contiguous(a.dtype(), b.ne()))
}

/// Shape and type inference of CONCAT along `dim`.
pub(super) fn infer_concat(cx: &InferCx<'_>, dim: &usize) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    if *dim >= 4 {
        return Err(cx.shape_err(ShapeProblem::OutOfRange {
            what: "dim",
            value: *dim,
            min: 0,
            max: 3,
        }));
    }
    if a.dtype() != b.dtype() || a.dtype().is_quantized() {
        return Err(Error::dtype(
            cx.name,
            b.dtype(),
            format!(
                "both sources must have one non-quantized type (a is {})",
                a.dtype()
            ),
        ));
    }
    let (na, nb_) = (a.ne(), b.ne());
    if (0..4).any(|i| i != *dim && na[i] != nb_[i]) {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "the dims other than the one concatenated must match",
            a: Operand::of("a", a),
            b: Operand::of("b", b),
        }));
    }
    let mut ne = na;
    // Tensors hold at most isize::MAX / 16 elements: the sum cannot
    // saturate.
    ne[*dim] = na[*dim].saturating_add(nb_[*dim]);
    Ok(contiguous(a.dtype(), ne))
}

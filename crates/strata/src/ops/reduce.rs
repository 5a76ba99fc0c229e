//! Reductions: SUM, SUM_ROWS, MEAN, ARGMAX, ARGSORT, TOP_K.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{make, op1};
use super::infer::{contiguous, InferCx, Inferred};
use super::{Op, SortOrder};
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{contiguous_strides, DType, Tensor};
use crate::Result;

/// Sum of all elements, shape `[1]`.
pub fn sum(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sum, a)
}

/// Sum of each row, shape [1, ne1, ne2, ne3].
pub fn sum_rows(a: &Tensor) -> Result<Tensor> {
    op1(Op::SumRows, a)
}

/// Mean of each row, shape [1, ne1, ne2, ne3].
pub fn mean(a: &Tensor) -> Result<Tensor> {
    op1(Op::Mean, a)
}

/// Index of each row's maximum (a matrix), I32 `[ne1]`.
pub fn argmax(a: &Tensor) -> Result<Tensor> {
    op1(Op::Argmax, a)
}

/// Indices that sort each row.
pub fn argsort(a: &Tensor, order: SortOrder) -> Result<Tensor> {
    op1(Op::Argsort { order }, a)
}

/// Shape and type inference of SUM: one value.
pub(super) fn infer_sum(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    Ok(contiguous(a.dtype(), [1, 1, 1, 1]))
}

/// Shape and type inference of SUM_ROWS and MEAN (`op` tells which): one value per row.
pub(super) fn infer_sum_rows(cx: &InferCx<'_>, op: &Op) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    let ne = a.ne();
    Ok(contiguous(
        if matches!(op, Op::Mean) {
            DType::F32
        } else {
            a.dtype()
        },
        [1, ne[1], ne[2], ne[3]],
    ))
}

/// Shape and type inference of ARGMAX: one I32 per row of a matrix.
pub(super) fn infer_argmax(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    let ne = a.ne();
    if ne[2] != 1 || ne[3] != 1 {
        return Err(cx.shape_err(ShapeProblem::TooManyDims {
            tensor: Operand::of("a", a),
            max: 2,
        }));
    }
    Ok(contiguous(DType::I32, [ne[1], 1, 1, 1]))
}

/// Shape and type inference of ARGSORT: an I32 permutation per row.
pub(super) fn infer_argsort(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    Ok(contiguous(DType::I32, a.ne()))
}

/// Indices of the `k` largest values of each row (ggml_top_k): I32
/// [k, ne1, ne2, ne3]. strata lists them largest first (ties: lower index
/// first); ggml's CPU leaves the order unspecified.
pub fn top_k(a: &Tensor, k: usize) -> Result<Tensor> {
    let ne = a.ne();
    let ne = [k, ne[1], ne[2], ne[3]];
    make(
        Op::TopK,
        vec![Some(a.clone())],
        Some((ne, contiguous_strides(DType::I32, ne))),
    )
}

/// The `k` largest values' indices as llama.cpp routes experts
/// (ggml_argsort_top_k): a descending ARGSORT, then a view of its first `k`
/// columns (I32 [k, ne1, ne2, ne3], rows `ne0` apart).
pub fn argsort_top_k(a: &Tensor, k: usize) -> Result<Tensor> {
    let sorted = argsort(a, SortOrder::Desc)?;
    let ne = sorted.ne();
    if k > ne[0] {
        return Err(crate::Error::shape(
            "ARGSORT",
            ShapeProblem::OutOfRange {
                what: "k (at most the row length ne0)",
                value: k,
                min: 0,
                max: ne[0],
            },
        ));
    }
    let nb = sorted.nb();
    super::view(&sorted, &[k, ne[1], ne[2], ne[3]], &nb[1..], 0)
}

/// Shape and type inference of TOP_K: k (the requested shape's ne0) at most
/// the row length, the other dims `a`'s.
pub(super) fn infer_top_k(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    let (ne, _) = cx.layout.ok_or_else(|| {
        cx.shape_err(ShapeProblem::MissingParam {
            param: "k (the result's shape)",
        })
    })?;
    let na = a.ne();
    if ne[1..] != na[1..] {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "the result keeps a's ne1, ne2 and ne3",
            a: Operand::of("a", a),
            b: Operand::shape("result", DType::I32, ne),
        }));
    }
    if ne[0] > na[0] {
        return Err(cx.shape_err(ShapeProblem::OutOfRange {
            what: "k (at most the row length ne0)",
            value: ne[0],
            min: 0,
            max: na[0],
        }));
    }
    Ok(contiguous(DType::I32, ne))
}

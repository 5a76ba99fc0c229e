//! Reductions: SUM, SUM_ROWS, MEAN, ARGMAX, ARGSORT.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::op1;
use super::infer::{contiguous, InferCx, Inferred};
use super::{Op, SortOrder};
use crate::tensor::{DType, Tensor};
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
        return Err(cx.shape_err(format!("'{}' {:?} must be a matrix", a.name(), ne)));
    }
    Ok(contiguous(DType::I32, [ne[1], 1, 1, 1]))
}

/// Shape and type inference of ARGSORT: an I32 permutation per row.
pub(super) fn infer_argsort(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.float(a)?;
    Ok(contiguous(DType::I32, a.ne()))
}

//! Row gathers and scatters: GET_ROWS and SET_ROWS.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{op2, op3};
use super::infer::{contiguous, view_of, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Rows of `a` (any type) picked by the I32 indices `b`; F32 result.
pub fn get_rows(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::GetRows, a, b)
}

/// Writes the rows of `rows` into `dst` at `indices` (I32/I64); the result is
/// a view of `dst` (compute it to perform the write).
pub fn set_rows(dst: &Tensor, rows: &Tensor, indices: &Tensor) -> Result<Tensor> {
    op3(Op::SetRows, rows, indices, dst)
}

/// Shape and type inference of GET_ROWS: rows of `a` picked by I32 indices.
pub(super) fn infer_get_rows(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    if b.dtype() != DType::I32 {
        return Err(Error::dtype(cx.name, b.dtype(), "row indices must be i32"));
    }
    let (na, nb_) = (a.ne(), b.ne());
    if nb_[3] != 1 {
        return Err(cx.shape_err(ShapeProblem::TooManyDims {
            tensor: Operand::of("indices", b),
            max: 3,
        }));
    }
    if na[2] != nb_[1] || na[3] != nb_[2] {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "need data.ne2 == indices.ne1 and data.ne3 == indices.ne2",
            a: Operand::of("data", a),
            b: Operand::of("indices", b),
        }));
    }
    let dt = if a.dtype() == DType::I32 {
        DType::I32
    } else {
        DType::F32
    };
    Ok(contiguous(dt, [na[0], nb_[0], nb_[1], nb_[2]]))
}

/// Shape and type inference of SET_ROWS: a view of the destination (source 2).
pub(super) fn infer_set_rows(cx: &InferCx<'_>) -> Result<Inferred> {
    let (b, c, a) = (cx.get(0)?, cx.get(1)?, cx.get(2)?);
    if !matches!(c.dtype(), DType::I32 | DType::I64) {
        return Err(Error::dtype(
            cx.name,
            c.dtype(),
            "row indices must be i32 or i64",
        ));
    }
    cx.float(b)?;
    let (na, nb_, nc) = (a.ne(), b.ne(), c.ne());
    let (dst, rows, idx) = (
        || Operand::of("destination", a),
        || Operand::of("rows", b),
        || Operand::of("indices", c),
    );
    let problem = if na[0] != nb_[0] || na[2] != nb_[2] || na[3] != nb_[3] {
        Some(ShapeProblem::Mismatch {
            rule: "ne0, ne2 and ne3 must match",
            a: rows(),
            b: dst(),
        })
    } else if nc[3] != 1 {
        Some(ShapeProblem::TooManyDims {
            tensor: idx(),
            max: 3,
        })
    } else if nb_[1] != nc[0] {
        Some(ShapeProblem::Mismatch {
            rule: "need one index per row: rows.ne1 == indices.ne0",
            a: rows(),
            b: idx(),
        })
    } else if nc[1] == 0 || nc[2] == 0 || nb_[2] % nc[1] != 0 || nb_[3] % nc[2] != 0 {
        Some(ShapeProblem::Mismatch {
            rule: "indices.ne1 and ne2 must divide rows.ne2 and ne3",
            a: idx(),
            b: rows(),
        })
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(cx.shape_err(problem));
    }
    for t in [a, b] {
        if !t.is_contiguous_rows() {
            return Err(cx.shape_err(ShapeProblem::RowsNotContiguous { tensor: t.name() }));
        }
    }
    Ok(view_of(a, 0, na, a.nb()))
}

//! Rotary position embedding: ROPE.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{make, op2};
use super::infer::{contiguous, InferCx, Inferred};
use super::{Op, RopeParams};
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Rotary position embedding of `a` [head_dim, n_head, n_tokens, ..] at I32 `positions`.
pub fn rope(a: &Tensor, positions: &Tensor, params: RopeParams) -> Result<Tensor> {
    op2(Op::Rope(params), a, positions)
}

/// RoPE with per-dimension frequency factors.
pub fn rope_ext(
    a: &Tensor,
    positions: &Tensor,
    freq_factors: Option<&Tensor>,
    params: RopeParams,
) -> Result<Tensor> {
    make(
        Op::Rope(params),
        vec![
            Some(a.clone()),
            Some(positions.clone()),
            freq_factors.cloned(),
        ],
        None,
    )
}

/// Shape and type inference of ROPE with parameters `p`: positions and optional frequency factors checked.
pub(super) fn infer(cx: &InferCx<'_>, p: &RopeParams) -> Result<Inferred> {
    let (a, pos) = (cx.get(0)?, cx.get(1)?);
    if !matches!(a.dtype(), DType::F32 | DType::F16) {
        return Err(Error::dtype(cx.name, a.dtype(), "x must be f32 or f16"));
    }
    if pos.dtype() != DType::I32 {
        return Err(Error::dtype(
            cx.name,
            pos.dtype(),
            format!("positions '{}' must be i32", pos.name()),
        ));
    }
    if pos.n_dims() != 1 {
        return Err(cx.shape_err(ShapeProblem::TooManyDims {
            tensor: Operand::of("positions", pos),
            max: 1,
        }));
    }
    if pos.ne()[0] != a.ne()[2] {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "positions need one entry per x.ne2",
            a: Operand::of("positions", pos),
            b: Operand::of("x", a),
        }));
    }
    if !p.n_dims.is_multiple_of(2) {
        return Err(cx.shape_err(ShapeProblem::NotMultiple {
            what: "n_dims",
            value: p.n_dims,
            multiple: 2,
        }));
    }
    if p.n_dims == 0 || p.n_dims > a.ne()[0] {
        return Err(cx.shape_err(ShapeProblem::OutOfRange {
            what: "n_dims (at most x.ne0)",
            value: p.n_dims,
            min: 2,
            max: a.ne()[0],
        }));
    }
    if let Some(f) = cx.opt(2) {
        cx.f32_only(f)?;
        if f.nelements() < p.n_dims / 2 {
            return Err(cx.shape_err(ShapeProblem::Count {
                what: "frequency factors (at least n_dims / 2)",
                expected: p.n_dims / 2,
                got: f.nelements(),
            }));
        }
    }
    Ok(contiguous(a.dtype(), a.ne()))
}

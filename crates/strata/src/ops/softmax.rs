//! Masking and softmax: DIAG_MASK_INF and SOFT_MAX.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{make, op1};
use super::infer::{contiguous, mask_fits, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Masks elements above the diagonal (shifted by `n_past`) with -inf.
pub fn diag_mask_inf(a: &Tensor, n_past: usize) -> Result<Tensor> {
    op1(Op::DiagMaskInf { n_past }, a)
}

/// Row softmax.
pub fn soft_max(a: &Tensor) -> Result<Tensor> {
    op1(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        },
        a,
    )
}

/// softmax(a·scale + mask·slope) with an optional F32/F16 mask and ALiBi `max_bias`.
pub fn soft_max_ext(
    a: &Tensor,
    mask: Option<&Tensor>,
    scale: f32,
    max_bias: f32,
) -> Result<Tensor> {
    make(
        Op::SoftMax { scale, max_bias },
        vec![Some(a.clone()), mask.cloned()],
        None,
    )
}

/// Shape and type inference of DIAG_MASK_INF: f32, same shape.
pub(super) fn infer_diag_mask_inf(cx: &InferCx<'_>) -> Result<Inferred> {
    cx.like_src0(InferCx::f32_only)
}

/// Shape and type inference of SOFT_MAX with its optional mask (source 1) and sinks (source 2).
pub(super) fn infer_soft_max(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    cx.f32_only(a)?;
    if let Some(m) = cx.opt(1) {
        if !matches!(m.dtype(), DType::F32 | DType::F16) {
            return Err(Error::dtype(cx.name, m.dtype(), "mask must be f32 or f16"));
        }
        let (na, nm) = (a.ne(), m.ne());
        if !m.is_contiguous_rows() {
            return Err(cx.shape_err(ShapeProblem::RowsNotContiguous { tensor: m.name() }));
        }
        if !mask_fits(nm, na[0], na[1], [na[2], na[3]]) {
            return Err(cx.shape_err(ShapeProblem::Mismatch {
                rule: "the mask needs mask.ne0 == a.ne0, mask.ne1 >= a.ne1 and its ne2, ne3 \
                       dividing a's",
                a: Operand::of("mask", m),
                b: Operand::of("a", a),
            }));
        }
    }
    cx.sinks(2, a.ne()[2])?;
    Ok(contiguous(a.dtype(), a.ne()))
}

//! Fused attention: FLASH_ATTN_EXT.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::make;
use super::infer::{contiguous, mask_fits, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Fused attention: q [D, n_q, H, ..], k [D, n_kv, H_kv, ..], v [Dv, n_kv, H_kv, ..]
/// give F32 [Dv, H, n_q, ..].
pub fn flash_attn_ext(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<Tensor> {
    make(
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        },
        vec![
            Some(q.clone()),
            Some(k.clone()),
            Some(v.clone()),
            mask.cloned(),
        ],
        None,
    )
}

/// Shape and type inference of FLASH_ATTN_EXT: q, k, v, optional mask and sinks.
pub(super) fn infer(cx: &InferCx<'_>) -> Result<Inferred> {
    let (q, k, v) = (cx.get(0)?, cx.get(1)?, cx.get(2)?);
    cx.f32_only(q)?;
    for t in [k, v] {
        if !matches!(t.dtype(), DType::F32 | DType::F16) {
            return Err(Error::dtype(
                cx.name,
                t.dtype(),
                format!("'{}' must be f32 or f16", t.name()),
            ));
        }
    }
    let (nq, nk, nv) = (q.ne(), k.ne(), v.ne());
    let problem = if nq[0] != nk[0] {
        Some(ShapeProblem::Mismatch {
            rule: "ne0 (the head size) must match",
            a: Operand::of("q", q),
            b: Operand::of("k", k),
        })
    } else if nk[1] != nv[1] || nk[2] != nv[2] || nk[3] != nv[3] {
        Some(ShapeProblem::Mismatch {
            rule: "ne1, ne2 and ne3 (kv length, kv heads, sequences) must match",
            a: Operand::of("k", k),
            b: Operand::of("v", v),
        })
    } else if nk[2] == 0 || nq[2] % nk[2] != 0 || nk[3] == 0 || nq[3] % nk[3] != 0 {
        Some(ShapeProblem::Mismatch {
            rule: "k cannot be broadcast over q: k's ne2 (heads) and ne3 must divide q's",
            a: Operand::of("k", k),
            b: Operand::of("q", q),
        })
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(cx.shape_err(problem));
    }
    for t in [k, v] {
        if !t.is_contiguous_rows() {
            return Err(cx.shape_err(ShapeProblem::RowsNotContiguous { tensor: t.name() }));
        }
    }
    if let Some(m) = cx.opt(3) {
        if !matches!(m.dtype(), DType::F32 | DType::F16) {
            return Err(Error::dtype(cx.name, m.dtype(), "mask must be f16 or f32"));
        }
        let nm = m.ne();
        if nm[0] != nk[1] {
            return Err(cx.shape_err(ShapeProblem::Mismatch {
                rule: "the mask needs one column per key: mask.ne0 == k.ne1",
                a: Operand::of("mask", m),
                b: Operand::of("k", k),
            }));
        }
        if !mask_fits(nm, nk[1], nq[1], [nq[2], nq[3]]) {
            return Err(cx.shape_err(ShapeProblem::Mismatch {
                rule: "the mask needs mask.ne1 >= q.ne1 (a row per query) and its ne2, ne3 \
                       dividing q's",
                a: Operand::of("mask", m),
                b: Operand::of("q", q),
            }));
        }
    }
    cx.sinks(4, nq[2])?;
    Ok(contiguous(DType::F32, [nv[0], nq[2], nq[1], nq[3]]))
}

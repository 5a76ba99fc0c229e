//! Fused attention: FLASH_ATTN_EXT.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::make;
use super::infer::{contiguous, mask_fits, InferCx, Inferred};
use super::Op;
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
    if nq[0] != nk[0]
        || nk[1] != nv[1]
        || nk[2] != nv[2]
        || nk[2] == 0
        || nq[2] % nk[2] != 0
        || nk[3] != nv[3]
        || nk[3] == 0
        || nq[3] % nk[3] != 0
    {
        return Err(cx.shape_err(format!("q {nq:?}, k {nk:?}, v {nv:?} do not match")));
    }
    if !k.is_contiguous_rows() || !v.is_contiguous_rows() {
        return Err(cx.shape_err("k and v rows must be contiguous".into()));
    }
    if let Some(m) = cx.opt(3) {
        if !matches!(m.dtype(), DType::F32 | DType::F16) {
            return Err(Error::dtype(cx.name, m.dtype(), "mask must be f16 or f32"));
        }
        let nm = m.ne();
        if !mask_fits(nm, nk[1], nq[1], [nq[2], nq[3]]) {
            return Err(cx.shape_err(format!("mask {nm:?} does not fit q {nq:?} / k {nk:?}")));
        }
    }
    cx.sinks(4, nq[2])?;
    Ok(contiguous(DType::F32, [nv[0], nq[2], nq[1], nq[3]]))
}

//! Row normalizations: NORM and RMS_NORM.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::op1;
use super::infer::{InferCx, Inferred};
use super::Op;
use crate::tensor::Tensor;
use crate::Result;

/// Layer norm without affine parameters.
pub fn norm(a: &Tensor, eps: f32) -> Result<Tensor> {
    op1(Op::Norm { eps }, a)
}

/// RMS norm without weight.
pub fn rms_norm(a: &Tensor, eps: f32) -> Result<Tensor> {
    op1(Op::RmsNorm { eps }, a)
}

/// Shape and type inference of NORM and RMS_NORM: f32 in, same shape out.
pub(super) fn infer(cx: &InferCx<'_>) -> Result<Inferred> {
    cx.like_src0(InferCx::f32_only)
}

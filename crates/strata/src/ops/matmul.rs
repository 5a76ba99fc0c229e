//! The matrix product MUL_MAT.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::op2;
use super::infer::{contiguous, InferCx, Inferred};
use super::Op;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// ggml matrix product: `a` [K, M, ..] and `b` [K, N, ..] give [M, N, ..]
/// (a's dims 2 and 3 broadcast over b's).
pub fn mul_mat(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::MulMat, a, b)
}

/// Shape and type inference of MUL_MAT: `a` [K, M, ..] · `b` [K, N, ..] → F32 [M, N, ..].
pub(super) fn infer(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b) = (cx.get(0)?, cx.get(1)?);
    let (na, nb_) = (a.ne(), b.ne());
    if na[0] != nb_[0] {
        return Err(cx.shape_err(format!(
            "'{}' {:?} and '{}' {:?}: ne0 (K) must match",
            a.name(),
            na,
            b.name(),
            nb_
        )));
    }
    if na[2] == 0 || na[3] == 0 || nb_[2] % na[2] != 0 || nb_[3] % na[3] != 0 {
        return Err(cx.shape_err(format!(
            "'{}' {:?} cannot be broadcast over '{}' {:?} in dims 2, 3",
            a.name(),
            na,
            b.name(),
            nb_
        )));
    }
    if a.is_transposed() {
        return Err(cx.shape_err(format!(
            "'{}' is transposed; make it contiguous first (cont)",
            a.name()
        )));
    }
    if !a.is_contiguous_rows() {
        return Err(cx.shape_err(format!("'{}' rows must be contiguous", a.name())));
    }
    cx.float(b)?;
    if a.dtype().is_int() {
        return Err(Error::dtype(
            cx.name,
            a.dtype(),
            "weights must be float or block-quantized",
        ));
    }
    Ok(contiguous(DType::F32, [na[1], nb_[1], nb_[2], nb_[3]]))
}

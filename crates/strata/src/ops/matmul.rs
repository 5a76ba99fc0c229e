//! The matrix products MUL_MAT and MUL_MAT_ID.
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{op2, op3};
use super::infer::{contiguous, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
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
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "ne0 (K) must match",
            a: Operand::of("a", a),
            b: Operand::of("b", b),
        }));
    }
    if na[2] == 0 || na[3] == 0 || nb_[2] % na[2] != 0 || nb_[3] % na[3] != 0 {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "a cannot be broadcast over b: a's ne2 and ne3 must divide b's",
            a: Operand::of("a", a),
            b: Operand::of("b", b),
        }));
    }
    weight_checks(cx, a, b)?;
    Ok(contiguous(DType::F32, [na[1], nb_[1], nb_[2], nb_[3]]))
}

/// The weight `a` and activation `b` rules MUL_MAT and MUL_MAT_ID share:
/// `a` float or block-quantized, not transposed, rows contiguous; `b` float.
fn weight_checks(cx: &InferCx<'_>, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.is_transposed() {
        return Err(cx.shape_err(ShapeProblem::NotContiguous { tensor: a.name() }));
    }
    if !a.is_contiguous_rows() {
        return Err(cx.shape_err(ShapeProblem::RowsNotContiguous { tensor: a.name() }));
    }
    cx.float(b)?;
    if a.dtype().is_int() {
        return Err(Error::dtype(
            cx.name,
            a.dtype(),
            "weights must be float or block-quantized",
        ));
    }
    Ok(())
}

/// Expert-indexed matrix product (ggml_mul_mat_id, the mixture-of-experts
/// FFN): `experts` [K, M, n_expert] (one weight matrix per expert), `b`
/// [K, n_b, tokens] with `n_b` = n_used or 1 (broadcast over the slots), I32
/// `ids` [n_used, tokens] (any strides, e.g. a view of ARGSORT's result)
/// give F32 [M, n_used, tokens] with
/// `out[:, s, t] = experts[:, :, ids[s, t]] · b[:, s % n_b, t]`.
///
/// An id outside `0..n_expert` is refused before compute when `ids` is an
/// input; one computed by the graph gives a zero output column.
///
/// ```
/// use strata::{ops, DType, Tensor};
/// let w = Tensor::new(DType::F32, &[8, 5, 4]).unwrap(); // K=8, M=5, 4 experts
/// let x = Tensor::new(DType::F32, &[8, 1, 3]).unwrap(); // 3 tokens
/// let ids = Tensor::new(DType::I32, &[2, 3]).unwrap(); // 2 experts per token
/// assert_eq!(ops::mul_mat_id(&w, &x, &ids).unwrap().ne(), [5, 2, 3, 1]);
/// ```
pub fn mul_mat_id(experts: &Tensor, b: &Tensor, ids: &Tensor) -> Result<Tensor> {
    op3(Op::MulMatId, experts, b, ids)
}

/// Shape and type inference of MUL_MAT_ID (ggml's rules, plus strata's
/// weight type and row checks of MUL_MAT).
pub(super) fn infer_id(cx: &InferCx<'_>) -> Result<Inferred> {
    let (a, b, ids) = (cx.get(0)?, cx.get(1)?, cx.get(2)?);
    cx.expert_ids(ids)?;
    let (na, nb_, ni) = (a.ne(), b.ne(), ids.ne());
    let (experts, acts, idso) = (
        || Operand::of("experts", a),
        || Operand::of("activations", b),
        || Operand::of("ids", ids),
    );
    let problem = if na[3] != 1 {
        // [K, M, n_expert]
        Some(ShapeProblem::TooManyDims {
            tensor: experts(),
            max: 3,
        })
    } else if nb_[3] != 1 {
        // [K, n_used or 1, tokens]
        Some(ShapeProblem::TooManyDims {
            tensor: acts(),
            max: 3,
        })
    } else if ni[2] != 1 || ni[3] != 1 {
        // [n_used, tokens]
        Some(ShapeProblem::TooManyDims {
            tensor: idso(),
            max: 2,
        })
    } else if ni[1] != nb_[2] {
        Some(ShapeProblem::Mismatch {
            rule: "ids.ne1 (tokens) must equal activations.ne2",
            a: idso(),
            b: acts(),
        })
    } else if na[0] != nb_[0] {
        Some(ShapeProblem::Mismatch {
            rule: "ne0 (K) must match",
            a: experts(),
            b: acts(),
        })
    } else if nb_[1] == 0 || ni[0] % nb_[1] != 0 {
        Some(ShapeProblem::Mismatch {
            rule: "activations.ne1 must divide ids.ne0 (n_used)",
            a: acts(),
            b: idso(),
        })
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(cx.shape_err(problem));
    }
    weight_checks(cx, a, b)?;
    Ok(contiguous(DType::F32, [na[1], ni[0], nb_[2], 1]))
}

//! Views: RESHAPE, VIEW, PERMUTE, TRANSPOSE (no computation: the result re-describes its source's memory).
//! Graph builders and their shape and type inference ([`super::infer`]).

use super::build::{make, op1};
use super::infer::{base_of, span, view_of, InferCx, Inferred};
use super::Op;
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{contiguous_strides, shape4, Tensor};
use crate::{Error, Result};

/// A view of contiguous `a` with a new shape (1 to 4 dims).
pub fn reshape(a: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let ne = shape4("RESHAPE", dims)?;
    make(Op::Reshape, vec![Some(a.clone())], Some((ne, [0; 4])))
}

/// A view with explicit shape, strides (`nb[0]` is the element size) and byte offset.
pub fn view(a: &Tensor, dims: &[usize], strides: &[usize], offset: usize) -> Result<Tensor> {
    let ne = shape4("VIEW", dims)?;
    let mut nb = [0; 4];
    nb[0] = a.dtype().type_size();
    if strides.len() + 1 != dims.len() {
        return Err(Error::shape(
            "VIEW",
            ShapeProblem::Count {
                what: "strides (nb1.., one per dim after the first)",
                expected: dims.len().saturating_sub(1),
                got: strides.len(),
            },
        ));
    }
    nb[1..dims.len()].copy_from_slice(strides);
    for i in dims.len().max(1)..4 {
        // Saturates instead of overflowing: VIEW's inference refuses a
        // layout whose span overflows.
        nb[i] = if i == 1 {
            a.dtype().row_size(ne[0])
        } else {
            nb[i - 1].saturating_mul(ne[i - 1])
        };
    }
    make(Op::View { offset }, vec![Some(a.clone())], Some((ne, nb)))
}

/// 1-d view of `ne0` elements at byte `offset`.
pub fn view_1d(a: &Tensor, ne0: usize, offset: usize) -> Result<Tensor> {
    view(a, &[ne0], &[], offset)
}

/// 2-d view with row stride `nb1`.
pub fn view_2d(a: &Tensor, ne0: usize, ne1: usize, nb1: usize, offset: usize) -> Result<Tensor> {
    view(a, &[ne0, ne1], &[nb1], offset)
}

/// 3-d view.
pub fn view_3d(
    a: &Tensor,
    ne: [usize; 3],
    nb1: usize,
    nb2: usize,
    offset: usize,
) -> Result<Tensor> {
    view(a, &ne, &[nb1, nb2], offset)
}

/// 4-d view.
pub fn view_4d(
    a: &Tensor,
    ne: [usize; 4],
    nb1: usize,
    nb2: usize,
    nb3: usize,
    offset: usize,
) -> Result<Tensor> {
    view(a, &ne, &[nb1, nb2, nb3], offset)
}

/// Permutes dims: source dim i becomes dim `axes[i]`.
pub fn permute(a: &Tensor, axes: [usize; 4]) -> Result<Tensor> {
    op1(Op::Permute { axes }, a)
}

/// Swaps dims 0 and 1.
pub fn transpose(a: &Tensor) -> Result<Tensor> {
    op1(Op::Transpose, a)
}

/// Shape and type inference of RESHAPE: a contiguous view with the shape in `layout`.
pub(super) fn infer_reshape(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    let (ne, _) = cx.layout.ok_or_else(|| {
        cx.shape_err(ShapeProblem::MissingParam {
            param: "the new shape",
        })
    })?;
    if !a.is_contiguous() {
        return Err(cx.shape_err(ShapeProblem::NotContiguous { tensor: a.name() }));
    }
    let count = ne.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count != Some(a.nelements()) {
        return Err(cx.shape_err(ShapeProblem::Mismatch {
            rule: "a reshape keeps the element count",
            a: Operand::of("a", a),
            b: Operand::shape("new shape", a.dtype(), ne),
        }));
    }
    if !ne[0].is_multiple_of(a.dtype().block_size()) {
        return Err(cx.shape_err(ShapeProblem::NotMultiple {
            what: "ne0 of the new shape (whole blocks)",
            value: ne[0],
            multiple: a.dtype().block_size(),
        }));
    }
    Ok(view_of(a, 0, ne, contiguous_strides(a.dtype(), ne)))
}

/// Shape and type inference of VIEW: the shape and strides in `layout` at byte `offset`, bounds-checked.
pub(super) fn infer_view(cx: &InferCx<'_>, offset: &usize) -> Result<Inferred> {
    let a = cx.get(0)?;
    let (ne, nb) = cx.layout.ok_or_else(|| {
        cx.shape_err(ShapeProblem::MissingParam {
            param: "a shape and strides",
        })
    })?;
    let (base, off) = base_of(a, *offset);
    let block = a.dtype().block_size();
    if !ne.contains(&0) && !ne[0].is_multiple_of(block) {
        return Err(cx.shape_err(ShapeProblem::NotMultiple {
            what: "ne0 of the view (whole blocks)",
            value: ne[0],
            multiple: block,
        }));
    }
    let need = span(a.dtype(), &ne, &nb)
        .and_then(|s| s.checked_add(off))
        .ok_or_else(|| cx.shape_err(ShapeProblem::Overflow { ne, nb: Some(nb) }))?;
    if ne.iter().all(|&n| n > 0) && need > base.nbytes() {
        return Err(cx.shape_err(ShapeProblem::ViewOutOfBounds {
            base: base.name(),
            ne,
            offset: off,
            need,
            size: base.nbytes(),
        }));
    }
    if nb[0] != a.dtype().type_size() && ne[0] > 1 && a.dtype().is_quantized() {
        return Err(cx.shape_err(ShapeProblem::BlockStride {
            nb0: nb[0],
            block_bytes: a.dtype().type_size(),
        }));
    }
    Ok(view_of(a, *offset, ne, nb))
}

/// Shape and type inference of PERMUTE: source dim i becomes dim `axes[i]`.
pub(super) fn infer_permute(cx: &InferCx<'_>, axes: &[usize; 4]) -> Result<Inferred> {
    let a = cx.get(0)?;
    let mut seen = [false; 4];
    for &x in axes {
        if x >= 4 || seen[x] {
            return Err(cx.shape_err(ShapeProblem::NotPermutation { axes: *axes }));
        }
        seen[x] = true;
    }
    let (mut ne, mut nb) = ([0; 4], [0; 4]);
    for i in 0..4 {
        ne[axes[i]] = a.ne()[i];
        nb[axes[i]] = a.nb()[i];
    }
    if a.dtype().is_quantized() && axes[0] != 0 {
        return Err(Error::dtype(
            cx.name,
            a.dtype(),
            "the row dimension of a quantized tensor cannot move",
        ));
    }
    Ok(view_of(a, 0, ne, nb))
}

/// Shape and type inference of TRANSPOSE: dims 0 and 1 swapped.
pub(super) fn infer_transpose(cx: &InferCx<'_>) -> Result<Inferred> {
    let a = cx.get(0)?;
    if a.dtype().is_quantized() {
        return Err(Error::dtype(
            cx.name,
            a.dtype(),
            "quantized tensors cannot be transposed",
        ));
    }
    let (mut ne, mut nb) = (a.ne(), a.nb());
    ne.swap(0, 1);
    nb.swap(0, 1);
    Ok(view_of(a, 0, ne, nb))
}

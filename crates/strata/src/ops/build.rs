//! Graph-building functions: one per op, each validating through [`infer`].

use super::{infer, GluOp, Op, RopeParams, SortOrder, UnaryOp};
use crate::tensor::{shape4, Tensor, ViewOf};
use crate::Result;

/// Creates the tensor `op` produces from `src` (validated by [`infer`]).
pub fn make(
    op: Op,
    src: Vec<Option<Tensor>>,
    layout: Option<([usize; 4], [usize; 4])>,
) -> Result<Tensor> {
    let out = infer(&op, &src, layout)?;
    let view = out.view.map(|(src, offset)| ViewOf { src, offset });
    Ok(Tensor::from_parts(out.dtype, out.ne, out.nb, op, src, view))
}

/// Creates the in-place form of `op` (ggml's `*_inplace`): the result has
/// its first source's layout and is a view of it, so computing it
/// overwrites that source. Only for ops that can run in place and whose
/// result has the first source's type and shape.
pub fn make_inplace(op: Op, src: Vec<Option<Tensor>>) -> Result<Tensor> {
    let name = op.name();
    if !op.can_run_in_place() {
        return Err(crate::Error::shape(name, "this op cannot run in place"));
    }
    let out = infer(&op, &src, None)?;
    let a = src[0]
        .clone()
        .ok_or_else(|| crate::Error::shape(name, "source 0 is missing"))?;
    if out.dtype != a.dtype() || out.ne != a.ne() {
        return Err(crate::Error::shape(
            name,
            format!(
                "in place needs the result ({} {:?}) to match '{}' ({} {:?})",
                out.dtype,
                out.ne,
                a.name(),
                a.dtype(),
                a.ne()
            ),
        ));
    }
    let view = match a.view_of() {
        Some(v) => ViewOf {
            src: v.src.clone(),
            offset: v.offset,
        },
        None => ViewOf {
            src: a.clone(),
            offset: 0,
        },
    };
    Ok(Tensor::from_parts(
        a.dtype(),
        a.ne(),
        a.nb(),
        op,
        src,
        Some(view),
    ))
}

fn op1(op: Op, a: &Tensor) -> Result<Tensor> {
    make(op, vec![Some(a.clone())], None)
}

fn op2(op: Op, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    make(op, vec![Some(a.clone()), Some(b.clone())], None)
}

/// A contiguous copy of `a` (same type).
pub fn dup(a: &Tensor) -> Result<Tensor> {
    op1(Op::Dup, a)
}
/// `a + b`, `b` broadcast over `a` (each dim of b divides a's).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Add, a, b)
}
/// `a - b`, broadcast.
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Sub, a, b)
}
/// `a * b`, broadcast.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Mul, a, b)
}
/// `a / b`, broadcast.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Div, a, b)
}
/// `scale * a`.
pub fn scale(a: &Tensor, scale: f32) -> Result<Tensor> {
    op1(Op::Scale { scale, bias: 0.0 }, a)
}
/// `scale * a + bias`.
pub fn scale_bias(a: &Tensor, scale: f32, bias: f32) -> Result<Tensor> {
    op1(Op::Scale { scale, bias }, a)
}
/// `a²`.
pub fn sqr(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sqr, a)
}
/// `√a`.
pub fn sqrt(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sqrt, a)
}
/// `ln a`.
pub fn log(a: &Tensor) -> Result<Tensor> {
    op1(Op::Log, a)
}
/// `sin a`.
pub fn sin(a: &Tensor) -> Result<Tensor> {
    op1(Op::Sin, a)
}
/// `cos a`.
pub fn cos(a: &Tensor) -> Result<Tensor> {
    op1(Op::Cos, a)
}
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
/// `a` tiled to the shape of `b`.
pub fn repeat(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Repeat, a, b)
}
/// `a` and `b` concatenated along `dim`.
pub fn concat(a: &Tensor, b: &Tensor, dim: usize) -> Result<Tensor> {
    op2(Op::Concat { dim }, a, b)
}
/// Clamp to `[min, max]`.
pub fn clamp(a: &Tensor, min: f32, max: f32) -> Result<Tensor> {
    op1(Op::Clamp { min, max }, a)
}
/// An element-wise function.
pub fn unary(a: &Tensor, op: UnaryOp) -> Result<Tensor> {
    op1(Op::Unary(op), a)
}
/// `x * sigmoid(x)`.
pub fn silu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Silu)
}
/// GELU (tanh approximation).
pub fn gelu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Gelu)
}
/// `max(x, 0)`.
pub fn relu(a: &Tensor) -> Result<Tensor> {
    unary(a, UnaryOp::Relu)
}
/// Gated linear unit with separate gate `a` and up `b`: `f(a) * b`.
pub fn glu_split(a: &Tensor, b: &Tensor, op: GluOp) -> Result<Tensor> {
    make(
        Op::Glu { op, swapped: false },
        vec![Some(a.clone()), Some(b.clone())],
        None,
    )
}
/// Gated linear unit on a fused tensor whose rows hold gate and up halves
/// (gate first unless `swapped`).
pub fn glu(a: &Tensor, op: GluOp, swapped: bool) -> Result<Tensor> {
    make(Op::Glu { op, swapped }, vec![Some(a.clone())], None)
}
/// `silu(a) * b` (llama's FFN).
pub fn swiglu_split(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    glu_split(a, b, GluOp::Swiglu)
}
/// Layer norm without affine parameters.
pub fn norm(a: &Tensor, eps: f32) -> Result<Tensor> {
    op1(Op::Norm { eps }, a)
}
/// RMS norm without weight.
pub fn rms_norm(a: &Tensor, eps: f32) -> Result<Tensor> {
    op1(Op::RmsNorm { eps }, a)
}
/// ggml matrix product: `a` [K, M, ..] and `b` [K, N, ..] give [M, N, ..]
/// (a's dims 2 and 3 broadcast over b's).
pub fn mul_mat(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::MulMat, a, b)
}
/// Rows of `a` (any type) picked by the I32 indices `b`; F32 result.
pub fn get_rows(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::GetRows, a, b)
}
/// Writes the rows of `rows` into `dst` at `indices` (I32/I64); the result is
/// a view of `dst` (compute it to perform the write).
pub fn set_rows(dst: &Tensor, rows: &Tensor, indices: &Tensor) -> Result<Tensor> {
    make(
        Op::SetRows,
        vec![Some(rows.clone()), Some(indices.clone()), Some(dst.clone())],
        None,
    )
}
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
/// Indices that sort each row.
pub fn argsort(a: &Tensor, order: SortOrder) -> Result<Tensor> {
    op1(Op::Argsort { order }, a)
}
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
/// Copies `a` into `b` converting the type; the result is a view of `b`.
pub fn cpy(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op2(Op::Cpy, a, b)
}
/// A contiguous copy of a possibly strided tensor.
pub fn cont(a: &Tensor) -> Result<Tensor> {
    op1(Op::Cont, a)
}
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
        return Err(crate::Error::shape(
            "VIEW",
            format!(
                "{} dims need {} strides (nb1..), got {}",
                dims.len(),
                dims.len() - 1,
                strides.len()
            ),
        ));
    }
    nb[1..dims.len()].copy_from_slice(strides);
    for i in dims.len().max(1)..4 {
        nb[i] = if i == 1 {
            a.dtype().row_size(ne[0])
        } else {
            nb[i - 1] * ne[i - 1]
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

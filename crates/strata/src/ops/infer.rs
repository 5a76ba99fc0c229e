//! Shape and type inference: the one function that says what an op
//! produces from its sources, used by graph building and by anything that
//! must validate a graph it did not build (the RPC server). Each op family's
//! rules live beside its builders (`elementwise.rs`, `matmul.rs`, ...);
//! [`infer`] dispatches to them.

use super::{attn, copy, elementwise, layout, matmul, norm, reduce, rope, rows, softmax, Op};
use crate::error::ShapeProblem;
use crate::tensor::{contiguous_strides, DType, Tensor, MAX_DIMS};
use crate::{Error, Result};

/// What an op produces.
#[derive(Clone, Debug)]
pub struct Inferred {
    /// Result type.
    pub dtype: DType,
    /// Result shape.
    pub ne: [usize; MAX_DIMS],
    /// Result strides.
    pub nb: [usize; MAX_DIMS],
    /// For results that share a source's memory: the base tensor and byte offset.
    pub view: Option<(Tensor, usize)>,
}

/// A contiguous result of `dtype` and shape `ne`.
pub(super) fn contiguous(dtype: DType, ne: [usize; MAX_DIMS]) -> Inferred {
    Inferred {
        dtype,
        ne,
        nb: contiguous_strides(dtype, ne),
        view: None,
    }
}

/// A result sharing `a`'s memory (its base's, for a view) from byte
/// `offset` of `a`, with type `a`'s and layout `ne` / `nb`.
pub(super) fn view_of(a: &Tensor, offset: usize, ne: [usize; 4], nb: [usize; 4]) -> Inferred {
    Inferred {
        dtype: a.dtype(),
        ne,
        nb,
        view: Some(base_of(a, offset)),
    }
}

/// An attention mask of shape `nm` fits `cols` columns and `rows` rows
/// (it may have more), broadcast over the outer dims `outer` (each a
/// multiple of the mask's, which must not be 0).
pub(super) fn mask_fits(nm: [usize; 4], cols: usize, rows: usize, outer: [usize; 2]) -> bool {
    nm[0] == cols
        && nm[1] >= rows
        && nm[2] != 0
        && nm[3] != 0
        && outer[0].is_multiple_of(nm[2])
        && outer[1].is_multiple_of(nm[3])
}

/// ggml_can_repeat: `b` can be tiled to `a`'s shape.
pub(crate) fn can_repeat(b: &[usize; 4], a: &[usize; 4]) -> bool {
    (0..4).all(|i| b[i] != 0 && a[i].is_multiple_of(b[i]))
}

/// The storage base of `t` and the byte offset of `offset` into `t` within it
/// (a view names its base: views of views flatten).
pub(super) fn base_of(t: &Tensor, offset: usize) -> (Tensor, usize) {
    match t.view_of() {
        Some(v) => (v.src.clone(), v.offset + offset),
        None => (t.clone(), offset),
    }
}

/// Highest byte touched by a (ne, nb) layout + 1, relative to its start.
pub(crate) fn span(dtype: DType, ne: &[usize; 4], nb: &[usize; 4]) -> Option<usize> {
    if ne.contains(&0) {
        return Some(0);
    }
    if !ne[0].is_multiple_of(dtype.block_size()) {
        return None;
    }
    // ggml_nbytes: scalar types may have any element stride (permuted views);
    // block types keep their rows contiguous.
    let (mut bytes, first) = if dtype.block_size() == 1 {
        (dtype.type_size(), 0)
    } else {
        (dtype.row_size(ne[0]), 1)
    };
    for i in first..4 {
        bytes = bytes.checked_add((ne[i] - 1).checked_mul(nb[i])?)?;
    }
    Some(bytes)
}

/// What one op's inference reads: the op's name (for errors), its sources
/// and the requested layout, with the checks every family shares.
pub(super) struct InferCx<'a> {
    /// ggml's name of the op.
    pub name: &'static str,
    src: &'a [Option<Tensor>],
    /// Shape and strides requested for VIEW / RESHAPE.
    pub layout: Option<([usize; 4], [usize; 4])>,
}

impl<'a> InferCx<'a> {
    /// Required source `i`.
    pub fn get(&self, i: usize) -> Result<&'a Tensor> {
        self.src
            .get(i)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| self.shape_err(ShapeProblem::MissingSource { index: i }))
    }

    /// Optional source `i`.
    pub fn opt(&self, i: usize) -> Option<&'a Tensor> {
        self.src.get(i).and_then(|s| s.as_ref())
    }

    /// `t` must be f32, f16 or bf16.
    pub fn float(&self, t: &Tensor) -> Result<()> {
        self.dtype_must(t, t.dtype().is_float(), "f32, f16 or bf16")
    }

    /// `t` must be f32.
    pub fn f32_only(&self, t: &Tensor) -> Result<()> {
        self.dtype_must(t, t.dtype() == DType::F32, "f32")
    }

    /// `t` must be I32 expert ids (MUL_MAT_ID, ADD_ID).
    pub fn expert_ids(&self, t: &Tensor) -> Result<()> {
        self.dtype_must(t, t.dtype() == DType::I32, "i32 (expert ids)")
    }

    /// A type error "'t' must be `what`" unless `ok`.
    fn dtype_must(&self, t: &Tensor, ok: bool, what: &str) -> Result<()> {
        if ok {
            return Ok(());
        }
        Err(Error::dtype(
            self.name,
            t.dtype(),
            format!("'{}' must be {what}", t.name()),
        ))
    }

    /// Source 0 checked by `check` (e.g. [`InferCx::float`]); the result
    /// is a contiguous tensor of its type and shape.
    pub fn like_src0(&self, check: fn(&Self, &Tensor) -> Result<()>) -> Result<Inferred> {
        let a = self.get(0)?;
        check(self, a)?;
        Ok(contiguous(a.dtype(), a.ne()))
    }

    /// Optional sinks at source `i`: f32, one value per head (`n_head`).
    pub fn sinks(&self, i: usize, n_head: usize) -> Result<()> {
        if let Some(s) = self.opt(i) {
            self.f32_only(s)?;
            if s.nelements() != n_head {
                return Err(self.shape_err(ShapeProblem::Count {
                    what: "sinks (one per head, q.ne2 / a.ne2)",
                    expected: n_head,
                    got: s.nelements(),
                }));
            }
        }
        Ok(())
    }

    /// A shape error naming the op.
    pub fn shape_err(&self, problem: ShapeProblem) -> Error {
        Error::shape(self.name, problem)
    }
}

/// Infers the result of `op` on `src` (`None` where ggml has a null source).
///
/// `layout` gives the requested shape and strides of VIEW (shape and strides),
/// RESHAPE and TOP_K (shape; strides are contiguous); other ops ignore it
/// ([`Op::takes_layout`]).
/// Returns a typed error naming the op and the offending shapes or types.
pub fn infer(
    op: &Op,
    src: &[Option<Tensor>],
    layout: Option<([usize; 4], [usize; 4])>,
) -> Result<Inferred> {
    let cx = &InferCx {
        name: op.name(),
        src,
        layout,
    };
    match op {
        Op::None => Err(cx.shape_err(ShapeProblem::Leaf)),
        Op::Dup | Op::Cont => copy::infer_dup(cx),
        Op::Cpy => copy::infer_cpy(cx),
        Op::Repeat => copy::infer_repeat(cx),
        Op::Concat { dim } => copy::infer_concat(cx, dim),
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::infer_binary(cx),
        Op::Sqr
        | Op::Sqrt
        | Op::Log
        | Op::Sin
        | Op::Cos
        | Op::Scale { .. }
        | Op::Clamp { .. }
        | Op::Unary(_) => elementwise::infer_unary(cx),
        Op::Glu { .. } => elementwise::infer_glu(cx),
        Op::Sum => reduce::infer_sum(cx),
        Op::SumRows | Op::Mean => reduce::infer_sum_rows(cx, op),
        Op::Argmax => reduce::infer_argmax(cx),
        Op::Argsort { .. } => reduce::infer_argsort(cx),
        Op::TopK => reduce::infer_top_k(cx),
        Op::Norm { .. } | Op::RmsNorm { .. } => norm::infer(cx),
        Op::MulMat => matmul::infer(cx),
        Op::MulMatId => matmul::infer_id(cx),
        Op::AddId => elementwise::infer_add_id(cx),
        Op::GetRows => rows::infer_get_rows(cx),
        Op::SetRows => rows::infer_set_rows(cx),
        Op::Reshape => layout::infer_reshape(cx),
        Op::View { offset } => layout::infer_view(cx, offset),
        Op::Permute { axes } => layout::infer_permute(cx, axes),
        Op::Transpose => layout::infer_transpose(cx),
        Op::DiagMaskInf { .. } => softmax::infer_diag_mask_inf(cx),
        Op::SoftMax { .. } => softmax::infer_soft_max(cx),
        Op::Rope(p) => rope::infer(cx, p),
        Op::FlashAttnExt { .. } => attn::infer(cx),
    }
}

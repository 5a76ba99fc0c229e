//! Shape and type inference: the one function that says what an op
//! produces from its sources, used by graph building and by anything that
//! must validate a graph it did not build (the RPC server).

use super::Op;
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

fn contiguous(dtype: DType, ne: [usize; MAX_DIMS]) -> Inferred {
    Inferred {
        dtype,
        ne,
        nb: contiguous_strides(dtype, ne),
        view: None,
    }
}

/// ggml_can_repeat: `b` can be tiled to `a`'s shape.
pub(crate) fn can_repeat(b: &[usize; 4], a: &[usize; 4]) -> bool {
    (0..4).all(|i| b[i] != 0 && a[i].is_multiple_of(b[i]))
}

fn base_of(t: &Tensor, offset: usize) -> (Tensor, usize) {
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

/// Infers the result of `op` on `src` (`None` where ggml has a null source).
///
/// `layout` gives the requested shape and strides of VIEW (shape and strides)
/// and RESHAPE (shape; strides are contiguous); other ops ignore it.
/// Returns a typed error naming the op and the offending shapes or types.
pub fn infer(
    op: &Op,
    src: &[Option<Tensor>],
    layout: Option<([usize; 4], [usize; 4])>,
) -> Result<Inferred> {
    let name = op.name();
    let get = |i: usize| -> Result<&Tensor> {
        src.get(i)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| Error::shape(name, format!("source {i} is missing")))
    };
    let opt = |i: usize| src.get(i).and_then(|s| s.as_ref());
    let float = |t: &Tensor| -> Result<()> {
        if t.dtype().is_float() {
            Ok(())
        } else {
            Err(Error::dtype(
                name,
                t.dtype(),
                format!("'{}' must be f32, f16 or bf16", t.name()),
            ))
        }
    };
    let f32_only = |t: &Tensor| -> Result<()> {
        if t.dtype() == DType::F32 {
            Ok(())
        } else {
            Err(Error::dtype(
                name,
                t.dtype(),
                format!("'{}' must be f32", t.name()),
            ))
        }
    };
    let shape_err = |msg: String| Error::shape(name, msg);

    match op {
        Op::None => Err(shape_err("a leaf has no op to infer".into())),
        Op::Dup | Op::Cont => {
            let a = get(0)?;
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (get(0)?, get(1)?);
            float(a)?;
            float(b)?;
            if !can_repeat(&b.ne(), &a.ne()) {
                return Err(shape_err(format!(
                    "'{}' {:?} cannot be broadcast to '{}' {:?} (each dim of b must divide a's)",
                    b.name(),
                    b.ne(),
                    a.name(),
                    a.ne()
                )));
            }
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::Sqr
        | Op::Sqrt
        | Op::Log
        | Op::Sin
        | Op::Cos
        | Op::Scale { .. }
        | Op::Clamp { .. }
        | Op::Unary(_) => {
            let a = get(0)?;
            float(a)?;
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::Sum => {
            let a = get(0)?;
            float(a)?;
            Ok(contiguous(a.dtype(), [1, 1, 1, 1]))
        }
        Op::SumRows | Op::Mean => {
            let a = get(0)?;
            float(a)?;
            let ne = a.ne();
            Ok(contiguous(
                if matches!(op, Op::Mean) {
                    DType::F32
                } else {
                    a.dtype()
                },
                [1, ne[1], ne[2], ne[3]],
            ))
        }
        Op::Argmax => {
            let a = get(0)?;
            float(a)?;
            let ne = a.ne();
            if ne[2] != 1 || ne[3] != 1 {
                return Err(shape_err(format!(
                    "'{}' {:?} must be a matrix",
                    a.name(),
                    ne
                )));
            }
            Ok(contiguous(DType::I32, [ne[1], 1, 1, 1]))
        }
        Op::Argsort { .. } => {
            let a = get(0)?;
            float(a)?;
            Ok(contiguous(DType::I32, a.ne()))
        }
        Op::Repeat => {
            let (a, b) = (get(0)?, get(1)?);
            if !can_repeat(&a.ne(), &b.ne()) {
                return Err(shape_err(format!(
                    "'{}' {:?} cannot be tiled to {:?}",
                    a.name(),
                    a.ne(),
                    b.ne()
                )));
            }
            if a.dtype().is_quantized() {
                return Err(Error::dtype(
                    name,
                    a.dtype(),
                    "quantized tensors cannot be repeated",
                ));
            }
            Ok(contiguous(a.dtype(), b.ne()))
        }
        Op::Concat { dim } => {
            let (a, b) = (get(0)?, get(1)?);
            if *dim >= 4 {
                return Err(shape_err(format!("dim {dim} out of range 0..4")));
            }
            if a.dtype() != b.dtype() || a.dtype().is_quantized() {
                return Err(Error::dtype(
                    name,
                    b.dtype(),
                    format!(
                        "both sources must have one non-quantized type (a is {})",
                        a.dtype()
                    ),
                ));
            }
            let (na, nb_) = (a.ne(), b.ne());
            if (0..4).any(|i| i != *dim && na[i] != nb_[i]) {
                return Err(shape_err(format!(
                    "{na:?} and {nb_:?} differ outside dim {dim}"
                )));
            }
            let mut ne = na;
            ne[*dim] += nb_[*dim];
            Ok(contiguous(a.dtype(), ne))
        }
        Op::Norm { .. } | Op::RmsNorm { .. } => {
            let a = get(0)?;
            f32_only(a)?;
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::MulMat => {
            let (a, b) = (get(0)?, get(1)?);
            let (na, nb_) = (a.ne(), b.ne());
            if na[0] != nb_[0] {
                return Err(shape_err(format!(
                    "'{}' {:?} and '{}' {:?}: ne0 (K) must match",
                    a.name(),
                    na,
                    b.name(),
                    nb_
                )));
            }
            if na[2] == 0 || na[3] == 0 || nb_[2] % na[2] != 0 || nb_[3] % na[3] != 0 {
                return Err(shape_err(format!(
                    "'{}' {:?} cannot be broadcast over '{}' {:?} in dims 2, 3",
                    a.name(),
                    na,
                    b.name(),
                    nb_
                )));
            }
            if a.is_transposed() {
                return Err(shape_err(format!(
                    "'{}' is transposed; make it contiguous first (cont)",
                    a.name()
                )));
            }
            if !a.is_contiguous_rows() {
                return Err(shape_err(format!("'{}' rows must be contiguous", a.name())));
            }
            float(b)?;
            if a.dtype().is_int() {
                return Err(Error::dtype(
                    name,
                    a.dtype(),
                    "weights must be float or block-quantized",
                ));
            }
            Ok(contiguous(DType::F32, [na[1], nb_[1], nb_[2], nb_[3]]))
        }
        Op::GetRows => {
            let (a, b) = (get(0)?, get(1)?);
            if b.dtype() != DType::I32 {
                return Err(Error::dtype(name, b.dtype(), "row indices must be i32"));
            }
            let (na, nb_) = (a.ne(), b.ne());
            if na[2] != nb_[1] || nb_[3] != 1 || na[3] != nb_[2] {
                return Err(shape_err(format!("data {na:?} and indices {nb_:?}: need a.ne2 == b.ne1, a.ne3 == b.ne2, b.ne3 == 1")));
            }
            let dt = if a.dtype() == DType::I32 {
                DType::I32
            } else {
                DType::F32
            };
            Ok(contiguous(dt, [na[0], nb_[0], nb_[1], nb_[2]]))
        }
        Op::SetRows => {
            let (b, c, a) = (get(0)?, get(1)?, get(2)?);
            if !matches!(c.dtype(), DType::I32 | DType::I64) {
                return Err(Error::dtype(
                    name,
                    c.dtype(),
                    "row indices must be i32 or i64",
                ));
            }
            float(b)?;
            let (na, nb_, nc) = (a.ne(), b.ne(), c.ne());
            if na[0] != nb_[0]
                || nb_[1] != nc[0]
                || nc[1] == 0
                || nc[2] == 0
                || nb_[2] % nc[1] != 0
                || nb_[3] % nc[2] != 0
                || nc[3] != 1
                || na[2] != nb_[2]
                || na[3] != nb_[3]
            {
                return Err(shape_err(format!(
                    "destination {na:?}, rows {nb_:?}, indices {nc:?} do not match"
                )));
            }
            if !a.is_contiguous_rows() || !b.is_contiguous_rows() {
                return Err(shape_err("rows must be contiguous".into()));
            }
            let (base, off) = base_of(a, 0);
            Ok(Inferred {
                dtype: a.dtype(),
                ne: na,
                nb: a.nb(),
                view: Some((base, off)),
            })
        }
        Op::Cpy => {
            let (a, b) = (get(0)?, get(1)?);
            if a.nelements() != b.nelements() {
                return Err(shape_err(format!(
                    "'{}' {:?} and '{}' {:?} differ in element count",
                    a.name(),
                    a.ne(),
                    b.name(),
                    b.ne()
                )));
            }
            let ok = a.dtype() == b.dtype() && !a.dtype().is_quantized()
                || (a.dtype().is_float() && (b.dtype().is_float() || b.dtype().is_quantized()))
                || (a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous());
            if !ok {
                return Err(Error::dtype(
                    name,
                    b.dtype(),
                    format!("cannot copy {} into it", a.dtype()),
                ));
            }
            if b.dtype().is_quantized() && !b.is_contiguous_rows() {
                return Err(shape_err(format!(
                    "quantized destination '{}' must have contiguous rows",
                    b.name()
                )));
            }
            let (base, off) = base_of(b, 0);
            Ok(Inferred {
                dtype: b.dtype(),
                ne: b.ne(),
                nb: b.nb(),
                view: Some((base, off)),
            })
        }
        Op::Reshape => {
            let a = get(0)?;
            let (ne, _) = layout.ok_or_else(|| shape_err("reshape needs a shape".into()))?;
            if !a.is_contiguous() {
                return Err(shape_err(format!(
                    "'{}' is not contiguous; use cont first",
                    a.name()
                )));
            }
            if ne.iter().product::<usize>() != a.nelements() || ne[0] % a.dtype().block_size() != 0
            {
                return Err(shape_err(format!(
                    "cannot reshape '{}' {:?} to {:?}",
                    a.name(),
                    a.ne(),
                    ne
                )));
            }
            let (base, off) = base_of(a, 0);
            Ok(Inferred {
                dtype: a.dtype(),
                ne,
                nb: contiguous_strides(a.dtype(), ne),
                view: Some((base, off)),
            })
        }
        Op::View { offset } => {
            let a = get(0)?;
            let (ne, nb) =
                layout.ok_or_else(|| shape_err("view needs a shape and strides".into()))?;
            let (base, off) = base_of(a, *offset);
            let need = span(a.dtype(), &ne, &nb)
                .and_then(|s| s.checked_add(off))
                .ok_or_else(|| {
                    shape_err(format!(
                        "view {ne:?} / {nb:?} of '{}' overflows or splits a block",
                        a.name()
                    ))
                })?;
            if ne.iter().all(|&n| n > 0) && need > base.nbytes() {
                return Err(shape_err(format!(
                    "view {ne:?} at offset {off} needs {need} bytes of '{}', which has {}",
                    base.name(),
                    base.nbytes()
                )));
            }
            if nb[0] != a.dtype().type_size() && ne[0] > 1 && a.dtype().is_quantized() {
                return Err(shape_err(
                    "quantized views must keep rows contiguous".into(),
                ));
            }
            Ok(Inferred {
                dtype: a.dtype(),
                ne,
                nb,
                view: Some((base, off)),
            })
        }
        Op::Permute { axes } => {
            let a = get(0)?;
            let mut seen = [false; 4];
            for &x in axes {
                if x >= 4 || seen[x] {
                    return Err(shape_err(format!(
                        "axes {axes:?} are not a permutation of 0..4"
                    )));
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
                    name,
                    a.dtype(),
                    "the row dimension of a quantized tensor cannot move",
                ));
            }
            let (base, off) = base_of(a, 0);
            Ok(Inferred {
                dtype: a.dtype(),
                ne,
                nb,
                view: Some((base, off)),
            })
        }
        Op::Transpose => {
            let a = get(0)?;
            if a.dtype().is_quantized() {
                return Err(Error::dtype(
                    name,
                    a.dtype(),
                    "quantized tensors cannot be transposed",
                ));
            }
            let (mut ne, mut nb) = (a.ne(), a.nb());
            ne.swap(0, 1);
            nb.swap(0, 1);
            let (base, off) = base_of(a, 0);
            Ok(Inferred {
                dtype: a.dtype(),
                ne,
                nb,
                view: Some((base, off)),
            })
        }
        Op::DiagMaskInf { .. } => {
            let a = get(0)?;
            f32_only(a)?;
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::SoftMax { .. } => {
            let a = get(0)?;
            f32_only(a)?;
            if let Some(m) = opt(1) {
                if !matches!(m.dtype(), DType::F32 | DType::F16) {
                    return Err(Error::dtype(name, m.dtype(), "mask must be f32 or f16"));
                }
                let (na, nm) = (a.ne(), m.ne());
                if !m.is_contiguous_rows()
                    || nm[0] != na[0]
                    || nm[1] < na[1]
                    || nm[2] == 0
                    || nm[3] == 0
                    || na[2] % nm[2] != 0
                    || na[3] % nm[3] != 0
                {
                    return Err(shape_err(format!("mask {nm:?} does not fit logits {na:?}")));
                }
            }
            if let Some(s) = opt(2) {
                f32_only(s)?;
                if s.nelements() != a.ne()[2] {
                    return Err(shape_err(format!(
                        "sinks need {} values (one per head)",
                        a.ne()[2]
                    )));
                }
            }
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::Rope(p) => {
            let (a, pos) = (get(0)?, get(1)?);
            if !matches!(a.dtype(), DType::F32 | DType::F16) {
                return Err(Error::dtype(name, a.dtype(), "x must be f32 or f16"));
            }
            if pos.dtype() != DType::I32 || pos.n_dims() != 1 || pos.ne()[0] != a.ne()[2] {
                return Err(shape_err(format!(
                    "positions {:?} ({}) must be i32 with one entry per x.ne2 = {}",
                    pos.ne(),
                    pos.dtype(),
                    a.ne()[2]
                )));
            }
            if p.n_dims == 0 || p.n_dims % 2 != 0 || p.n_dims > a.ne()[0] {
                return Err(shape_err(format!(
                    "n_dims {} must be even and <= ne0 {}",
                    p.n_dims,
                    a.ne()[0]
                )));
            }
            if let Some(f) = opt(2) {
                f32_only(f)?;
                if f.nelements() < p.n_dims / 2 {
                    return Err(shape_err(format!(
                        "frequency factors need {} values",
                        p.n_dims / 2
                    )));
                }
            }
            Ok(contiguous(a.dtype(), a.ne()))
        }
        Op::FlashAttnExt { .. } => {
            let (q, k, v) = (get(0)?, get(1)?, get(2)?);
            f32_only(q)?;
            for t in [k, v] {
                if !matches!(t.dtype(), DType::F32 | DType::F16) {
                    return Err(Error::dtype(
                        name,
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
                return Err(shape_err(format!(
                    "q {nq:?}, k {nk:?}, v {nv:?} do not match"
                )));
            }
            if !k.is_contiguous_rows() || !v.is_contiguous_rows() {
                return Err(shape_err("k and v rows must be contiguous".into()));
            }
            if let Some(m) = opt(3) {
                if !matches!(m.dtype(), DType::F32 | DType::F16) {
                    return Err(Error::dtype(name, m.dtype(), "mask must be f16 or f32"));
                }
                let nm = m.ne();
                if nm[0] != nk[1]
                    || nm[1] < nq[1]
                    || nm[2] == 0
                    || nm[3] == 0
                    || nq[2] % nm[2] != 0
                    || nq[3] % nm[3] != 0
                {
                    return Err(shape_err(format!(
                        "mask {nm:?} does not fit q {nq:?} / k {nk:?}"
                    )));
                }
            }
            if let Some(s) = opt(4) {
                f32_only(s)?;
                if s.nelements() != nq[2] {
                    return Err(shape_err(format!(
                        "sinks need {} values (one per head)",
                        nq[2]
                    )));
                }
            }
            Ok(contiguous(DType::F32, [nv[0], nq[2], nq[1], nq[3]]))
        }
        Op::Glu { .. } => {
            let a = get(0)?;
            float(a)?;
            match opt(1) {
                Some(b) => {
                    float(b)?;
                    if a.ne() != b.ne() || a.dtype() != b.dtype() {
                        return Err(shape_err(format!(
                            "gate {:?} and up {:?} must have one shape and type",
                            a.ne(),
                            b.ne()
                        )));
                    }
                    Ok(contiguous(a.dtype(), a.ne()))
                }
                None => {
                    let mut ne = a.ne();
                    if ne[0] % 2 != 0 {
                        return Err(shape_err(format!(
                            "fused gate/up {:?} needs an even ne0",
                            a.ne()
                        )));
                    }
                    ne[0] /= 2;
                    Ok(contiguous(a.dtype(), ne))
                }
            }
        }
    }
}

//! The two ways every graph-building function makes its tensor ([`make`],
//! [`make_inplace`]), validating through [`infer`]; the builders live with
//! their op family's inference (`elementwise.rs`, `matmul.rs`, ...).

use super::{infer, Op};
use crate::tensor::{Tensor, ViewOf};
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
    let view = ViewOf::alias_of(&a);
    Ok(Tensor::from_parts(
        a.dtype(),
        a.ne(),
        a.nb(),
        op,
        src,
        Some(view),
    ))
}

pub(super) fn op1(op: Op, a: &Tensor) -> Result<Tensor> {
    make(op, vec![Some(a.clone())], None)
}

pub(super) fn op2(op: Op, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    make(op, vec![Some(a.clone()), Some(b.clone())], None)
}

pub(super) fn op3(op: Op, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    make(
        op,
        vec![Some(a.clone()), Some(b.clone()), Some(c.clone())],
        None,
    )
}

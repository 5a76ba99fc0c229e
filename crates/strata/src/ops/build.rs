//! The two ways every graph-building function makes its tensor ([`make`],
//! [`make_inplace`]), validating through [`infer`]; the builders live with
//! their op family's inference (`elementwise.rs`, `matmul.rs`, ...).

use super::{infer, Op};
use crate::error::{Operand, ShapeProblem};
use crate::tensor::{Tensor, ViewOf};
use crate::{Error, Result};

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
        return Err(Error::shape(name, ShapeProblem::NotInPlace));
    }
    let out = infer(&op, &src, None)?;
    let a = src
        .first()
        .cloned()
        .flatten()
        .ok_or_else(|| Error::shape(name, ShapeProblem::MissingSource { index: 0 }))?;
    if out.dtype != a.dtype() || out.ne != a.ne() {
        return Err(Error::shape(
            name,
            ShapeProblem::Mismatch {
                rule: "in place needs the result to have a's type and shape; use the ordinary form",
                a: Operand::of("a", &a),
                b: Operand::shape("result", out.dtype, out.ne),
            },
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

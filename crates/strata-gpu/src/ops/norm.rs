//! RMS_NORM and NORM: one workgroup per row, the row's statistics reduced in
//! shared memory (`shaders/norm.wgsl`), f32 in and out as on the CPU.

use strata::ops::Op;
use strata::{DType, Result, Tensor};

use super::{aligned, grid, slots_of, Dispatch, Kernel, Params};
use crate::context::GpuContext;

/// The shared-memory reductions and row helpers the row shaders include
/// (`shaders/norm_reduce.wgsl`), followed by `body`.
macro_rules! row_shader {
    ($body:literal) => {
        concat!(
            include_str!("../shaders/norm_reduce.wgsl"),
            include_str!($body)
        )
    };
}
pub(crate) use row_shader;

/// F32 source and destination of one shape, element-aligned (any strides).
pub(crate) fn supports(node: &Tensor) -> bool {
    let Some(a) = node.src(0) else { return false };
    node.dtype() == DType::F32
        && a.dtype() == DType::F32
        && a.ne() == node.ne()
        && aligned(a)
        && aligned(node)
}

/// One dispatch of one workgroup per row.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    let (eps, center) = match *node.op() {
        Op::Norm { eps } => (eps, true),
        Op::RmsNorm { eps } => (eps, false),
        _ => return Err(super::unsupported(ctx, node)),
    };
    let kernel =
        Kernel::new("norm", row_shader!("../shaders/norm.wgsl"), node).def("CENTER", center);
    row_dispatch(ctx, kernel, node, Params::of(node).float(0, eps))
}

/// A dispatch of one workgroup per row of `node` (rows beyond the count,
/// from rounding the grid, return at once).
pub(crate) fn row_dispatch(
    ctx: &GpuContext,
    kernel: Kernel,
    node: &Tensor,
    params: Params,
) -> Result<Vec<Dispatch>> {
    let rows = node.nrows() as u32;
    Ok(vec![Dispatch {
        pipeline: kernel.pipeline(ctx)?,
        params: params.items(rows),
        slots: slots_of(node),
        groups: grid(rows, ctx.limits.max_compute_workgroups_per_dimension),
        scratch: None,
    }])
}

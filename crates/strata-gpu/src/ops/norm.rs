//! RMS_NORM, NORM (not yet implemented: every node is refused, so the scheduler runs it on the CPU)

use strata::{Result, Tensor};

use super::Dispatch;
use crate::context::GpuContext;

/// Whether the GPU computes `node`.
pub(crate) fn supports(node: &Tensor) -> bool {
    let _ = node;
    false
}

/// The dispatches computing `node`.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    Err(super::unsupported(ctx, node))
}

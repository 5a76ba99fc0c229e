//! SUM, SUM_ROWS, MEAN, ARGMAX (a workgroup per output, a tree in shared
//! memory), ARGSORT and TOP_K (a bitonic sort of rows up to
//! [`SORT_MAX`] values in shared memory; longer rows are refused),
//! REPEAT, CONCAT (raw moves, any float type or I32) and ADD_ID.

use strata::ops::{Op, SortOrder};
use strata::{DType, Result, Tensor};

use super::rows::{float_name, raw_fns, wgsl};
use super::{aligned, grid, is_float, per_item, slots_of, Dispatch, Kernel, Params};
use crate::context::GpuContext;

/// The longest row ARGSORT / TOP_K sort (the shader's shared arrays).
const SORT_MAX: usize = 1024;

/// Whether the GPU computes `node`.
pub(crate) fn supports(node: &Tensor) -> bool {
    let Some(a) = node.src(0) else { return false };
    if !aligned(a) || !aligned(node) {
        return false;
    }
    let (at, dt) = (a.dtype(), node.dtype());
    match node.op() {
        Op::Sum | Op::SumRows => is_float(a) && dt == at,
        Op::Mean => is_float(a) && dt == DType::F32,
        Op::Argmax => is_float(a) && dt == DType::I32 && a.ne()[2] == 1 && a.ne()[3] == 1,
        Op::Argsort { .. } | Op::TopK => {
            is_float(a) && dt == DType::I32 && a.ne()[0] <= SORT_MAX && node.ne()[0] <= a.ne()[0]
        }
        Op::Repeat => at == dt && raw_fns(dt, 0).is_some(),
        Op::Concat { dim } => {
            *dim < 4
                && raw_fns(dt, 0).is_some()
                && node.srcs().all(|s| s.dtype() == dt && aligned(s))
        }
        Op::AddId => {
            let (Some(b), Some(ids)) = (node.src(1), node.src(2)) else {
                return false;
            };
            at == DType::F32
                && dt == DType::F32
                && b.dtype() == DType::F32
                && ids.dtype() == DType::I32
                && aligned(b)
                && aligned(ids)
        }
        _ => false,
    }
}

/// The dispatches computing `node`.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    let Some(a) = node.src(0) else {
        return Err(super::unsupported(ctx, node));
    };
    let p = Params::of(node);
    let n = node.nelements();
    let ne = a.ne();
    let rows = a.nelements() / ne[0].max(1);
    match node.op() {
        Op::Sum | Op::SumRows | Op::Mean | Op::Argmax => {
            let argmax = node.op() == &Op::Argmax;
            let (groups, len) = match node.op() {
                Op::Sum => (1, a.nelements()),
                _ => (rows, ne[0]),
            };
            let scale = if node.op() == &Op::Mean {
                1.0 / ne[0] as f32
            } else {
                1.0
            };
            let put = if argmax {
                "f32"
            } else {
                float_name(node.dtype())
            };
            let k = Kernel::new("reduce", wgsl!("reduce.wgsl"), node)
                .def("ARGMAX", argmax)
                .def("PUTF(", format!("st_{put}("));
            Ok(vec![per_group(
                ctx,
                k,
                node,
                p.int(0, len as u32).float(0, scale),
                groups,
            )?])
        }
        Op::Argsort { .. } | Op::TopK => {
            let desc = !matches!(
                node.op(),
                Op::Argsort {
                    order: SortOrder::Asc
                }
            );
            let k = Kernel::new("argsort", wgsl!("argsort.wgsl"), node);
            let np = ne[0].next_power_of_two() as u32;
            Ok(vec![per_group(
                ctx,
                k,
                node,
                p.int(0, np).int(1, desc as u32),
                rows,
            )?])
        }
        Op::Repeat | Op::Concat { .. } => {
            let (body, name) = if node.op() == &Op::Repeat {
                (
                    wgsl!("repeat.wgsl", "cpy_main.wgsl", "item_main.wgsl"),
                    "repeat",
                )
            } else {
                (
                    wgsl!("concat.wgsl", "cpy_main.wgsl", "item_main.wgsl"),
                    "concat",
                )
            };
            let dt = node.dtype();
            let (Some((ld0, st)), Some((ld1, _))) = (raw_fns(dt, 0), raw_fns(dt, 1)) else {
                return Err(super::unsupported(ctx, node));
            };
            let k = Kernel::new(name, body, node)
                .def("GET0(", ld0)
                .def("GET1(", ld1)
                .def("PUT(", st);
            let dim = match *node.op() {
                Op::Concat { dim } => dim as u32,
                _ => 0,
            };
            Ok(vec![per_item(ctx, k, node, p.int(0, dim), n)?])
        }
        Op::AddId => {
            let k = Kernel::new(
                "add_id",
                wgsl!("add_id.wgsl", "cpy_main.wgsl", "item_main.wgsl"),
                node,
            );
            Ok(vec![per_item(ctx, k, node, p, n)?])
        }
        _ => Err(super::unsupported(ctx, node)),
    }
}

/// A dispatch of one workgroup per output (`groups` of them).
fn per_group(
    ctx: &GpuContext,
    kernel: Kernel,
    node: &Tensor,
    params: Params,
    groups: usize,
) -> Result<Dispatch> {
    Ok(Dispatch {
        pipeline: kernel.pipeline(ctx)?,
        params: params.items(groups as u32),
        slots: slots_of(node),
        groups: grid(
            groups as u32,
            ctx.limits.max_compute_workgroups_per_dimension,
        ),
        scratch: None,
    })
}

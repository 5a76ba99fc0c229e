//! MUL_MAT, MUL_MAT_ID and GET_ROWS over weights of every type the
//! dequantizers read (F32, F16, BF16, the legacy quants, the K-quants,
//! IQ4_NL, IQ4_XS), activations of any float type and layout.
//!
//! Few columns (and MUL_MAT_ID with few columns per expert) run the
//! matrix-vector kernel: a workgroup per few rows of one column, invocations
//! striding over K, two rows at a time, weights dequantized in registers,
//! the invocations' parts summed by a subgroup reduction where the adapter
//! has subgroups (else in workgroup memory). Batches run 64 × 64 output
//! tiles on the device's [`MatmulPaths`](crate::MatmulPaths): the
//! integer-dot kernel (`matmul/intdot.rs`) for the quantized types it
//! takes, else the tiled kernel with K through f16 (F16 / BF16 weights, f16
//! tiles on) or f32 workgroup memory.
//!
//! # MUL_MAT_ID on tiles
//!
//! A prompt through a mixture of experts gives each expert many of the
//! (slot, token) columns; the matrix-vector kernel would read an expert's
//! weights again for every one. The tiled MUL_MAT_ID (as ggml-vulkan's
//! `mul_mm` for experts) runs the same tiles as MUL_MAT (the shaders' `tile`
//! function, each path's) behind its own entry point,
//! `shaders/matmul_id.wgsl`: a grid of (row tiles of M, column groups,
//! n_expert + 1) workgroups ([`id_grid`]), each of which collects in
//! workgroup memory, in column order, the columns whose id is its expert,
//! takes the groups of 64 of them that are its own (j, j + J, …: one
//! where routing has no repeats, since J covers a token's columns), and
//! multiplies each by the expert's rows, storing column (s, t) at dst[:, s,
//! t]. The last slice takes the ids outside 0..n_expert and stores zeros,
//! as the matrix-vector kernel does. The int-dot path quantizes b's
//! n_b · tokens columns first, as for MUL_MAT. [`id_tiled`] says which
//! kernel runs: tiles from more than 4 columns per expert on average (8 on
//! llvmpipe; [`id_min_per_expert`]).

mod dequant;
mod intdot;

use strata::ops::{GluOp, Op};
use strata::{DType, Error, Result, Tensor};

use super::rows::wgsl;
use super::{aligned, is_float, per_item, slots_of, Dispatch, Kernel, Params};
use crate::context::GpuContext;

/// Invocations per output row of the matrix-vector kernel (a power of two
/// dividing its workgroup of 64): 16 on GPUs, whose invocations share the
/// weight rows' loads; 1 on a CPU device (llvmpipe), where the shared-memory
/// reduction's barriers cost more than a whole row's dot product.
fn tpr(ctx: &GpuContext) -> u32 {
    if ctx.info.device_type == wgpu::DeviceType::Cpu {
        1
    } else {
        16
    }
}
/// Up to this many columns (dst ne1) MUL_MAT runs the matrix-vector kernel.
const MATVEC_MAX_N: usize = 4;
/// Rows and columns of a tile of the tiled kernel.
const TILE: usize = 64;

/// Whether the dequantizers read `a` as weights: a float type, element
/// aligned, or a block type with contiguous blocks along each row.
fn weights_ok(a: &Tensor) -> bool {
    let t = a.dtype();
    if !dequant::has(t) {
        return false;
    }
    if t.is_quantized() {
        a.nb()[0] == t.type_size() && a.ne()[0].is_multiple_of(t.block_size())
    } else {
        aligned(a)
    }
}

/// Whether `t` is a float tensor the loads read.
fn float_ok(t: &Tensor) -> bool {
    is_float(t) && aligned(t)
}

/// Whether the GPU computes `node`.
pub(crate) fn supports(ctx: &GpuContext, node: &Tensor) -> bool {
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return false;
    };
    if !weights_ok(a) || !aligned(node) {
        return false;
    }
    let d = node.ne();
    match node.op() {
        Op::GetRows => {
            b.dtype() == DType::I32
                && aligned(b)
                && node.dtype() == DType::F32
                && d[0].div_ceil(8) * d[1] * d[2] * d[3] <= u32::MAX as usize
        }
        Op::MulMat => {
            if !float_ok(b) || node.dtype() != DType::F32 {
                return false;
            }
            if d[1] <= MATVEC_MAX_N {
                matvec_fits(ctx, a, node, max)
            } else {
                d[0].div_ceil(TILE) <= max && d[1].div_ceil(TILE) <= max && d[2] * d[3] <= max
            }
        }
        Op::MulMatId => {
            let Some(ids) = node.src(2) else { return false };
            float_ok(b)
                && node.dtype() == DType::F32
                && ids.dtype() == DType::I32
                && aligned(ids)
                && (matvec_fits(ctx, a, node, max) || id_grid(ctx, node).is_some())
        }
        _ => false,
    }
}

/// Whether the matrix-vector grid fits the device's workgroup limits.
fn matvec_fits(ctx: &GpuContext, a: &Tensor, node: &Tensor, max: usize) -> bool {
    let d = node.ne();
    let cols = d[1] * d[2] * d[3];
    a.ne()[1].div_ceil(rows_per_group(ctx)) <= max && cols.div_ceil(max) <= max
}

/// The tiled MUL_MAT_ID grid of `node` (`shaders/matmul_id.wgsl`): row
/// tiles of M, column groups (enough for a token's columns in groups of 64,
/// at least one), one slice per expert and one for invalid ids; `None`
/// where a dimension passes the device's limit.
fn id_grid(ctx: &GpuContext, node: &Tensor) -> Option<[u32; 3]> {
    let a = node.src(0)?;
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let tokens = node.ne()[2];
    let g = [
        a.ne()[1].div_ceil(TILE),
        tokens.div_ceil(TILE).max(1),
        a.ne()[2].checked_add(1)?,
    ];
    g.iter().all(|&n| n <= max).then(|| g.map(|n| n as u32))
}

/// Columns per expert (on average, n_used · tokens / n_expert) past which
/// MUL_MAT_ID runs on tiles ([`id_tiled`]).
///
/// On a GPU, [`MATVEC_MAX_N`]: MUL_MAT's rule, per expert. The
/// matrix-vector kernel reads an expert's weights once per column it gets,
/// a tile once per 64 columns (for that, it computes all 64 and scans the
/// ids), and MUL_MAT takes tiles from 5 columns on: with more than 4
/// columns per expert each weight row the matrix-vector kernel would read
/// serves 5 columns or more on tiles. ggml-vulkan takes its tiles for any
/// MUL_MAT_ID of more than one token.
///
/// On a CPU device (llvmpipe), 8: there the tile's arithmetic over all 64
/// columns costs what it is, not the weight reads. Measured on llvmpipe
/// (K 512–1024, M 256–512; tiles / matrix-vector): about 5 columns per
/// expert, 0.6–0.9× (F32, Q4_0 over 128 experts) to 1.1× (Q4_K); 8.5, 1.3×
/// to 1.9×; 16, 2.7× to 5×.
fn id_min_per_expert(ctx: &GpuContext) -> usize {
    if ctx.info.device_type == wgpu::DeviceType::Cpu {
        8
    } else {
        MATVEC_MAX_N
    }
}

/// Whether MUL_MAT_ID `node` runs on 64 × 64 tiles rather than the
/// matrix-vector kernel: where its tiled grid fits and either its columns
/// (n_used · tokens) average more than [`id_min_per_expert`] per expert
/// over more than [`MATVEC_MAX_N`] tokens, or the matrix-vector grid does
/// not fit. A decode step (one token, a few slots) stays on the
/// matrix-vector kernel whatever the expert count.
pub(crate) fn id_tiled(ctx: &GpuContext, node: &Tensor) -> bool {
    let (Some(a), Some(_)) = (node.src(0), id_grid(ctx, node)) else {
        return false;
    };
    let [_, used, tokens, _] = node.ne();
    let experts = a.ne()[2];
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let spread = tokens > MATVEC_MAX_N
        && used.saturating_mul(tokens) > id_min_per_expert(ctx).saturating_mul(experts);
    spread || !matvec_fits(ctx, a, node, max)
}

/// Output rows one matrix-vector workgroup computes.
pub(crate) fn rows_per_group(ctx: &GpuContext) -> usize {
    if ctx.has_subgroups() {
        // two per subgroup at the adapter's smallest subgroup size; larger
        // subgroups take several pairs each
        2 * (64 / ctx.info.subgroup_min_size.max(1)).max(1) as usize
    } else {
        (64 / tpr(ctx) * 2) as usize
    }
}

/// The dispatches computing `node`.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return Err(super::unsupported(ctx, node));
    };
    let dq = || dequant::source(&[(0, a.dtype()), (1, b.dtype())]);
    let p = Params::of(node);
    let d = node.ne();
    match node.op() {
        Op::GetRows => {
            let k = Kernel::new("get_rows", wgsl!("getrows.wgsl", "item_main.wgsl"), node)
                .def("DEQUANT", dequant::source(&[(0, a.dtype())]));
            let items = d[0].div_ceil(8) * d[1] * d[2] * d[3];
            Ok(vec![per_item(ctx, k, node, p, items)?])
        }
        Op::MulMat | Op::MulMatId if tiled(ctx, node) => {
            let id = node.op() == &Op::MulMatId;
            let paths = ctx.matmul_paths();
            if paths.int_dot && intdot::has(a.dtype()) {
                if let Some(d) = intdot::plan(ctx, node)? {
                    return Ok(d);
                }
            }
            let f16 = paths.f16_tiles && matches!(a.dtype(), DType::F16 | DType::BF16);
            let (name, body) = if id {
                (
                    "mul_mat_id_tiled",
                    wgsl!("matmul_tiled.wgsl", "matmul_id.wgsl"),
                )
            } else {
                (
                    "mul_mat_tiled",
                    wgsl!("matmul_tiled.wgsl", "matmul_main.wgsl", "matmul_store.wgsl"),
                )
            };
            let k = Kernel::new(name, body, node)
                .def("ENABLE_F16", if f16 { "enable f16;" } else { "" })
                .def("TILE_T", if f16 { "f16" } else { "f32" })
                .def("DEQUANT", dq());
            Ok(vec![Dispatch {
                pipeline: k.pipeline(ctx)?,
                params: p,
                slots: slots_of(node),
                groups: tile_grid(ctx, node)?,
                scratch: None,
            }])
        }
        Op::MulMat | Op::MulMatId => Ok(vec![plan_matvec(ctx, node, None)?]),
        _ => Err(super::unsupported(ctx, node)),
    }
}

/// Whether [`plan`] computes MUL_MAT or MUL_MAT_ID `node` on tiles.
fn tiled(ctx: &GpuContext, node: &Tensor) -> bool {
    match node.op() {
        Op::MulMat => !matvec_plan(node),
        Op::MulMatId => id_tiled(ctx, node),
        _ => false,
    }
}

/// The grid of the tiled kernels' main dispatch for `node`: MUL_MAT's (row
/// tiles, column tiles, dst's ne2 · ne3) or MUL_MAT_ID's ([`id_grid`]).
fn tile_grid(ctx: &GpuContext, node: &Tensor) -> Result<[u32; 3]> {
    let d = node.ne();
    match node.op() {
        Op::MulMatId => id_grid(ctx, node).ok_or_else(|| super::unsupported(ctx, node)),
        _ => Ok([
            d[0].div_ceil(TILE) as u32,
            d[1].div_ceil(TILE) as u32,
            (d[2] * d[3]) as u32,
        ]),
    }
}

/// Whether [`plan`] computes MUL_MAT `node` on the matrix-vector kernel.
pub(crate) fn matvec_plan(node: &Tensor) -> bool {
    node.op() == &Op::MulMat && node.ne()[1] <= MATVEC_MAX_N
}

/// The matrix-vector dispatch of MUL_MAT or MUL_MAT_ID `node`; with `add`
/// (MUL_MAT only), the kernel also adds the f32 bias the caller binds to
/// slot 3 (broadcast over the product) and stores into the caller's
/// destination.
pub(crate) fn plan_matvec(
    ctx: &GpuContext,
    node: &Tensor,
    add: Option<&Tensor>,
) -> Result<Dispatch> {
    matvec(ctx, node, add, None)
}

/// [`plan_matvec`] of MUL_MAT `node` whose activations are the f32 result
/// of GLU node `glu` (`node`'s source 1), computed as the kernel reads them
/// from the GLU's gate and up operands (bound to slots 1 and 2) instead of
/// read from memory (issue #45). The caller checked the pattern
/// (`fuse.rs`: f32 operands of the GLU's shape and strides).
pub(crate) fn plan_matvec_glu(
    ctx: &GpuContext,
    node: &Tensor,
    add: Option<&Tensor>,
    glu: &Tensor,
) -> Result<Dispatch> {
    let &Op::Glu { op, swapped } = glu.op() else {
        return Err(super::unsupported(ctx, node));
    };
    let Some(a) = glu.src(0) else {
        return Err(super::unsupported(ctx, glu));
    };
    // (operand, bytes past its offset) of the gate and of the up operand:
    // two tensors, or the halves of one (gate first unless `swapped`)
    let ((gate, gate_at), (up, up_at)) = match glu.src(1) {
        Some(b) => ((a, 0), (b, 0)),
        None => {
            let half = glu.ne()[0] * a.nb()[0];
            if swapped {
                ((a, half), (a, 0))
            } else {
                ((a, 0), (a, half))
            }
        }
    };
    let mut d = matvec(ctx, node, add, Some((op, gate.dtype(), up.dtype())))?;
    for (k, t, at) in [(1, gate, gate_at), (2, up, up_at)] {
        d.bind(k, t);
        d.params = d.params.shape(k, glu.ne(), t.nb());
        d.params.w[40 + k] = d.params.w[40 + k].wrapping_add(at as u32);
    }
    Ok(d)
}

/// The WGSL of `y8_s1` (`shaders/matvec.wgsl`): s1's activations, or with
/// a GLU (its op and the gate's and up operand's types) that GLU of the
/// gate in s1 and the up operand in s2, whose column lies as far past s2's
/// offset as the gate's past s1's.
fn activations(glu: Option<(GluOp, DType, DType)>) -> String {
    let Some((op, _, _)) = glu else {
        return "fn y8_s1(yc: u32, g: u32) -> V8 { return dq_s1(yc, g); }".into();
    };
    let lanes = |v: &str| {
        let at = |c: &str| format!("glu_act(a.{v}.{c}, b.{v}.{c})");
        format!(
            "vec4<f32>({}, {}, {}, {})",
            at("x"),
            at("y"),
            at("z"),
            at("w")
        )
    };
    format!(
        "fn glu_act(a: f32, b: f32) -> f32 {{ return {}; }}\n\
         fn y8_s1(yc: u32, g: u32) -> V8 {{\n    \
             let a = dq_s1(yc, g);\n    \
             let b = dq_s2(yc - P.off.y + P.off.z, g);\n    \
             return V8({}, {});\n}}\n",
        super::attn::glu_expr(op),
        lanes("a"),
        lanes("b")
    )
}

/// [`plan_matvec`], with the activations of a fused GLU when `glu` is set.
fn matvec(
    ctx: &GpuContext,
    node: &Tensor,
    add: Option<&Tensor>,
    glu: Option<(GluOp, DType, DType)>,
) -> Result<Dispatch> {
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return Err(super::unsupported(ctx, node));
    };
    let mut dq = vec![(0, a.dtype()), (1, b.dtype())];
    if let Some((_, gate, up)) = glu {
        dq = vec![(0, a.dtype()), (1, gate), (2, up)];
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    let d = node.ne();
    let colmap = if matches!(node.op(), Op::MulMat) {
        "col_mm"
    } else {
        "col_id"
    };
    let cols = (d[1] * d[2] * d[3]) as u32;
    let body = if ctx.has_subgroups() {
        wgsl!("matvec.wgsl", "subgroup_in.wgsl", "matvec_subgroup.wgsl")
    } else {
        wgsl!("matvec.wgsl", "matvec_shared.wgsl")
    };
    let mut k = Kernel::new("mul_mat_vec", body, node)
        .def("COLMAP", colmap)
        .def("TPR", format!("{}u", tpr(ctx)))
        .def("RPW", format!("{}u", rows_per_group(ctx)))
        .def("MAXY", format!("{max}u"))
        .def("DEQUANT", dequant::source(&dq))
        .def("Y8_FN", activations(glu))
        .def(
            "BIAS(",
            if add.is_some() {
                "bias_s3("
            } else {
                "bias_none("
            },
        );
    if add.is_some() {
        k.src_types[3] = Some(DType::F32);
    }
    if let Some((_, gate, up)) = glu {
        k.src_types[1] = Some(gate);
        k.src_types[2] = Some(up);
    }
    let rows = a.ne()[1].div_ceil(rows_per_group(ctx)) as u32;
    let groups = if cols <= max {
        [rows, cols, 1]
    } else {
        [rows, max, cols.div_ceil(max)]
    };
    Ok(Dispatch {
        pipeline: k.pipeline(ctx)?,
        params: Params::of(node).items(cols),
        slots: slots_of(node),
        groups,
        scratch: None,
    })
}

/// The fused dispatch of two or three MUL_MATs of the same activation
/// columns (`products`, in graph order; subgroup adapters only): each
/// product's f32 result at its own offset of the one destination buffer.
/// The caller checked the pattern (`fuse.rs`: same columns, contiguous
/// results in one buffer, nothing broadcast).
pub(crate) fn plan_matvec_products(ctx: &GpuContext, products: &[&Tensor]) -> Result<Dispatch> {
    let (&[first, ..], 2..=3) = (products, products.len()) else {
        return Err(Error::Backend {
            backend: ctx.name().to_string(),
            msg: format!("fused products of 2 or 3 MUL_MATs, not {}", products.len()),
        });
    };
    let (Some(a), Some(b)) = (first.src(0), first.src(1)) else {
        return Err(super::unsupported(ctx, first));
    };
    let weights: Vec<&Tensor> = products.iter().filter_map(|p| p.src(0)).collect();
    if weights.len() != products.len() {
        return Err(super::unsupported(ctx, first));
    }
    let rpw = rows_per_group(ctx);
    let mut slots = vec![(0, a.dtype()), (1, b.dtype()), (2, weights[1].dtype())];
    if let Some(w) = weights.get(2) {
        slots.push((3, w.dtype()));
    }
    let mut k = Kernel::new(
        "mul_mat_vec_products",
        wgsl!("matvec.wgsl", "subgroup_in.wgsl", "matvec_multi.wgsl"),
        first,
    )
    .def("RPW", format!("{rpw}u"))
    .def("DQ3", if weights.len() == 3 { "dq_s3" } else { "dq_s2" })
    .def("DEQUANT", dequant::source(&slots))
    .def("Y8_FN", activations(None));
    k.src_types[2] = Some(weights[1].dtype());
    k.src_types[3] = weights.get(2).map(|w| w.dtype());
    let blocks: usize = products
        .iter()
        .map(|p| Tensor::ne(p)[0].div_ceil(rpw))
        .sum();
    let offset = |p: &Tensor| p.storage().map_or(0, |s| s.offset as u32);
    let mut params = Params::of(first)
        .int(2, offset(products[1]))
        .int(4, products.len() as u32);
    if let Some(p) = products.get(2) {
        params = params.int(3, offset(p));
    }
    let mut d = Dispatch {
        pipeline: k.pipeline(ctx)?,
        params,
        slots: slots_of(first),
        groups: [blocks as u32, first.ne()[1] as u32, 1],
        scratch: None,
    };
    d.bind(2, weights[1]);
    if let Some(w) = weights.get(2) {
        d.bind(3, w);
    }
    Ok(d)
}

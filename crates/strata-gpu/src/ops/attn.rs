//! SOFT_MAX, ROPE, FLASH_ATTN_EXT, DIAG_MASK_INF and GLU.
//!
//! SOFT_MAX is a row kernel (one workgroup per row, like the norms); ROPE
//! one invocation per rotated pair; FLASH_ATTN_EXT one workgroup per
//! (head, query) with an online softmax over tiles of keys; DIAG_MASK_INF
//! and GLU one invocation per element. Every source may be a strided view
//! (the shaders address elements by byte strides).

use strata::ops::{GluOp, Op, RopeMode, RopeParams};
use strata::{DType, Result, Tensor};

use super::elementwise::{BINARY, UNARY};
use super::norm::{row_dispatch, row_shader};
use super::rows::wgsl;
use super::{aligned, grid, is_float, per_item, slots_of, ty_name, Dispatch, Kernel, Params};
use crate::context::GpuContext;

/// Most head dims (D and Dv) FLASH_ATTN_EXT takes: the shader keeps q in 512
/// floats of shared memory and 8 output dims per invocation of 64.
const FA_MAX_D: usize = 512;

/// Whether the GPU computes `node`.
pub(crate) fn supports(node: &Tensor) -> bool {
    let Some(a) = node.src(0) else { return false };
    if !aligned(a) || !aligned(node) || node.srcs().any(|s| !aligned(s)) {
        return false;
    }
    let f32_only = |t: &Tensor| t.dtype() == DType::F32;
    let contiguous_f32 = |t: Option<&Tensor>| t.is_none_or(|t| f32_only(t) && t.is_contiguous());
    let mask_ok =
        |m: Option<&Tensor>| m.is_none_or(|m| matches!(m.dtype(), DType::F32 | DType::F16));
    match node.op() {
        Op::SoftMax { .. } => {
            f32_only(a)
                && f32_only(node)
                && a.ne() == node.ne()
                && mask_ok(node.src(1))
                && contiguous_f32(node.src(2))
                && node.src(3).is_none()
        }
        Op::DiagMaskInf { .. } => f32_only(a) && f32_only(node) && a.ne() == node.ne(),
        Op::Glu { .. } => {
            is_float(a)
                && is_float(node)
                && node.src(1).is_none_or(|b| is_float(b) && b.ne() == a.ne())
        }
        Op::Rope(p) => {
            matches!(a.dtype(), DType::F32 | DType::F16)
                && a.dtype() == node.dtype()
                && a.ne() == node.ne()
                && p.n_dims >= 2
                && p.n_dims <= a.ne()[0]
                && node.src(1).is_some_and(|p| p.dtype() == DType::I32)
                && contiguous_f32(node.src(2))
        }
        Op::FlashAttnExt { .. } => {
            let (Some(k), Some(v)) = (node.src(1), node.src(2)) else {
                return false;
            };
            let kv = |t: &Tensor| matches!(t.dtype(), DType::F32 | DType::F16);
            f32_only(a)
                && f32_only(node)
                && kv(k)
                && kv(v)
                && a.ne()[0] <= FA_MAX_D
                && v.ne()[0] <= FA_MAX_D
                && k.nb()[0] == k.dtype().type_size()
                && mask_ok(node.src(3))
                && node.src(4).is_none()
        }
        _ => false,
    }
}

/// The dispatches computing `node`.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    let p = Params::of(node);
    match node.op() {
        &Op::SoftMax { scale, max_bias } => {
            let heads = node.ne()[2];
            let k = Kernel::new("soft_max", row_shader!("../shaders/softmax.wgsl"), node)
                .def("HAS_MASK", node.src(1).is_some())
                .def("MASK_LD", mask_load(node.src(1), 1))
                .def("HAS_SINKS", node.src(2).is_some());
            row_dispatch(ctx, k, node, alibi(p.float(0, scale), max_bias, heads))
        }
        &Op::DiagMaskInf { n_past } => {
            // the element-wise kernel: -inf (bits in int 5) above the diagonal
            let e = "select(x, bitcast<f32>(P.i.w), c.x > P.dn.z + c.y)";
            let k = Kernel::new("diag_mask_inf", UNARY, node).def("EXPR", e);
            // past ne0 nothing is masked (and n_past + i1 stays in u32)
            let n_past = n_past.min(node.ne()[0]) as u32;
            let p = p.int(0, n_past).int(5, f32::NEG_INFINITY.to_bits());
            Ok(vec![per_item(ctx, k, node, p, node.nelements())?])
        }
        &Op::Glu { op, swapped } => glu(ctx, node, p, op, swapped),
        Op::Rope(rp) => rope(ctx, node, p, rp),
        &Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => flash_attn(ctx, node, p, [scale, max_bias, softcap]),
        _ => Err(super::unsupported(ctx, node)),
    }
}

/// The load function of a mask in slot `k` (f32 when there is none: the
/// shader does not call it then).
fn mask_load(m: Option<&Tensor>, k: usize) -> String {
    format!("ld_{}_s{k}", ty_name(m.map_or(DType::F32, |m| m.dtype())))
}

/// ALiBi's parameters (as the CPU's `alibi_slope`): max_bias in float 1, m0
/// and m1 in floats 2 and 3, the largest power of two `n <= n_head` in int 2.
fn alibi(p: Params, max_bias: f32, n_head: usize) -> Params {
    let n = 1usize << n_head.max(1).ilog2();
    let m0 = 2f32.powf(-max_bias / n as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n as f32);
    p.float(1, max_bias)
        .float(2, m0)
        .float(3, m1)
        .int(2, n as u32)
}

/// The WGSL expression of GLU `op` of the f32s `a` (the gate) and `b` (the
/// up operand); also the matrix-vector kernel's when a GLU is fused into it.
pub(crate) fn glu_expr(op: GluOp) -> &'static str {
    match op {
        GluOp::Reglu => "max(a, 0.0) * b",
        GluOp::Geglu => {
            "0.5 * a * (1.0 + tanh(clamp(0.7978845608 * a * (1.0 + 0.044715 * a * a), -15.0, 15.0))) * b"
        }
        GluOp::Swiglu => "a / (1.0 + exp(-a)) * b",
        GluOp::GegluErf => "0.5 * a * (1.0 + erf_approx(a * 0.70710678118654752)) * b",
    }
}

/// GLU on the binary element-wise kernel: `a` is the gate, `b` the up
/// operand; the fused form binds its one source to both, each slot starting
/// at its half (gate first unless `swapped`).
fn glu(
    ctx: &GpuContext,
    node: &Tensor,
    p: Params,
    op: GluOp,
    swapped: bool,
) -> Result<Vec<Dispatch>> {
    let act = glu_expr(op);
    let a = node.src(0).ok_or_else(|| super::unsupported(ctx, node))?;
    let mut kernel = Kernel::new("glu", BINARY, node).def("OPER", act);
    let mut slots = slots_of(node);
    let mut p = p;
    if node.src(1).is_none() {
        let half = (node.ne()[0] * a.nb()[0]) as u32;
        let (gate, up) = if swapped { (half, 0) } else { (0, half) };
        let base = p.w[40];
        p = p.shape(0, node.ne(), a.nb()).shape(1, node.ne(), a.nb());
        p.w[40] = base + gate;
        p.w[41] = base + up;
        kernel.src_types[1] = Some(a.dtype());
        slots[1] = Some(a.clone());
    }
    let mut d = per_item(ctx, kernel, node, p, node.nelements())?;
    d.slots = slots;
    Ok(vec![d])
}

/// YaRN's constants as the CPU's ROPE computes them, and the split
/// exponent step (see `shaders/rope.wgsl`).
fn rope(ctx: &GpuContext, node: &Tensor, p: Params, rp: &RopeParams) -> Result<Vec<Dispatch>> {
    let half = rp.n_dims / 2;
    let mut mscale = rp.attn_factor as f64;
    if rp.ext_factor != 0.0 {
        mscale *= 1.0 + 0.1 * (1.0 / rp.freq_scale as f64).ln();
    }
    // YaRN's ramp [low, high]: the dims making beta_fast and beta_slow turns
    // over the original context, floored / ceiled and clamped (in f32, as
    // ggml and the CPU compute them)
    let dim_of = |turns: f32| {
        let ctx_turns = rp.n_ctx_orig as f32 / (turns * 2.0 * std::f32::consts::PI);
        rp.n_dims as f32 * ctx_turns.ln() / (2.0 * rp.freq_base.ln())
    };
    let corr = [
        dim_of(rp.beta_fast).floor().max(0.0),
        dim_of(rp.beta_slow).ceil().min(rp.n_dims as f32 - 1.0),
    ];
    let step = -2.0 * (rp.freq_base as f64).log2() / rp.n_dims as f64;
    let hi = f32::from_bits((step as f32).to_bits() & 0xffff_f000);
    let lo = (step - hi as f64) as f32;
    let p = p
        .int(0, half as u32)
        .int(1, u32::from(rp.mode == RopeMode::Neox))
        .int(2, u32::from(node.src(2).is_some()))
        .float(0, rp.freq_scale)
        .float(1, rp.ext_factor)
        .float(2, mscale as f32)
        .float(3, corr[0])
        .float(4, corr[1])
        .float(5, hi)
        .float(6, lo);
    let body = wgsl!("rope.wgsl", "rope_main.wgsl", "item_main.wgsl");
    let k = Kernel::new("rope", body, node);
    let items = node.nrows() * (node.ne()[0] - half);
    Ok(vec![per_item(ctx, k, node, p, items)?])
}

fn flash_attn(
    ctx: &GpuContext,
    node: &Tensor,
    p: Params,
    [scale, max_bias, softcap]: [f32; 3],
) -> Result<Vec<Dispatch>> {
    let q = node.src(0).ok_or_else(|| super::unsupported(ctx, node))?;
    let k = node.src(1).ok_or_else(|| super::unsupported(ctx, node))?;
    let qn = q.ne();
    let kernel = Kernel::new(
        "flash_attn_ext",
        row_shader!("../shaders/flash_attn.wgsl"),
        node,
    )
    .def("HAS_MASK", node.src(3).is_some())
    .def("MASK_LD", mask_load(node.src(3), 3))
    .def("K_ES", format!("{}u", k.dtype().type_size()));
    let groups = (qn[1] * qn[2] * qn[3]) as u32;
    let p = alibi(p.float(0, scale), max_bias, qn[2])
        .float(4, softcap)
        .items(groups);
    Ok(vec![Dispatch {
        pipeline: kernel.pipeline(ctx)?,
        params: p,
        slots: slots_of(node),
        groups: grid(groups, ctx.limits.max_compute_workgroups_per_dimension),
        scratch: None,
    }])
}

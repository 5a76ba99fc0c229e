//! MUL_MAT's (and the tiled MUL_MAT_ID's) integer-dot path for prompts
//! (`matmul_paths.rs` says when it runs): two dispatches over the backend's
//! scratch buffer.
//!
//! 1. `shaders/mmq_quant.wgsl` quantizes every column of `b` once into
//!    blocks of 32 signed bytes with an f16-rounded scale `d` and `s = d Σq`,
//!    as the CPU's Q8_0 / Q8_1 activations (same rounding), into the scratch:
//!    all columns' quants (8 words a block), then their `(d, s)` pairs as f32.
//! 2. `shaders/matmul_int.wgsl` multiplies 64 × 64 tiles: weight blocks
//!    unpacked into signed bytes (`shaders/mmq_weights.wgsl`), exact i32
//!    block sums by `dot4I8Packed`, then `d_w d_a Σ (+ m_w s_a)` in f32.
//!    MUL_MAT_ID's entry point (`shaders/matmul_id.wgsl`) picks each tile's
//!    columns by expert and reads their blocks by b's column (s % n_b, t).
//!
//! For the legacy types the products are the CPU's up to the order of the
//! f32 sums. The K-quants' CPU partner is Q8_K (one scale per 256): here
//! the activations keep one per 32 (as ggml's Vulkan mmq), so the two
//! differ by the two roundings of the activations.

use strata::ops::Op;
use strata::{DType, Result, Tensor};

use super::super::{per_item, slots_of, Dispatch, Kernel, Params, Scratch};
use super::dequant;
use crate::context::GpuContext;

const WEIGHTS: &str = include_str!("../../shaders/mmq_weights.wgsl");

/// The weights' section of `shaders/mmq_weights.wgsl` for `t`, and whether
/// its blocks have a minimum (`m`) and a scale per half.
fn section(t: DType) -> Option<(&'static str, bool, bool)> {
    Some(match t {
        DType::Q4_0 => ("q4_0", false, false),
        DType::Q4_1 => ("q4_1", true, false),
        DType::Q5_0 => ("q5_0", false, false),
        DType::Q5_1 => ("q5_1", true, false),
        DType::Q8_0 => ("q8_0", false, false),
        DType::Q4_K => ("q4_k", true, false),
        DType::Q6_K => ("q6_k", false, true),
        _ => return None,
    })
}

/// Whether the integer-dot path takes weights of type `t`.
pub(crate) fn has(t: DType) -> bool {
    section(t).is_some()
}

/// The text of section `name` of `shaders/mmq_weights.wgsl`.
fn weights_section(name: &str) -> &'static str {
    WEIGHTS
        .split("//@ ")
        .find_map(|p| {
            let (head, body) = p.split_once('\n')?;
            (head.trim() == name).then_some(body)
        })
        .unwrap_or("")
}

/// Bytes of scratch the activations of `node` take: per column of `b`, a
/// block of 8 words and 2 words of scales per 32 elements of K. `None` when
/// that does not fit the device's largest buffer.
pub(crate) fn scratch_bytes(ctx: &GpuContext, node: &Tensor) -> Option<u64> {
    let b = node.src(1)?;
    let [k, n1, n2, n3] = b.ne();
    let cols = (n1 as u64).checked_mul(n2 as u64)?.checked_mul(n3 as u64)?;
    let bytes = cols.checked_mul((k as u64).div_ceil(32) * 40)?;
    (bytes <= ctx.max_buffer_size() as u64).then_some(bytes)
}

/// The two dispatches of MUL_MAT or MUL_MAT_ID `node` (weights of a type
/// [`has`] takes; planned on tiles), or `None` when its activations do not
/// fit a scratch buffer.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Option<Vec<Dispatch>>> {
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return Err(super::super::unsupported(ctx, node));
    };
    let (Some((name, mins, halves)), Some(bytes)) = (section(a.dtype()), scratch_bytes(ctx, node))
    else {
        return Ok(None);
    };
    let kb = b.ne()[0].div_ceil(32);
    let cols = b.ne()[1] * b.ne()[2] * b.ne()[3];
    // words of the quants; the (d, s) pairs follow
    let scales = (cols * kb * 8) as u32;
    let p = Params::of(node).int(0, kb as u32).int(1, scales);

    let quant = Kernel::new(
        "mmq_quant",
        concat!(
            include_str!("../../shaders/mmq_quant.wgsl"),
            include_str!("../../shaders/item_main.wgsl")
        ),
        node,
    )
    .def("DEQUANT", dequant::source(&[(1, b.dtype())]));
    let mut first = per_item(ctx, quant, node, p, cols * kb)?;
    first.scratch = Some(Scratch { slot: 4, bytes });
    // the destination's offset is the scratch's start
    first.params.w[44] = 0;

    // the block types' word loads (`w_s0`, `h_s0`, `k_scale_s0`), then the
    // unpacking
    let mut words = dequant::source(&[(0, a.dtype())]);
    words.push_str(weights_section("common"));
    let (kernel, body) = if node.op() == &Op::MulMatId {
        (
            "mul_mat_id_int",
            concat!(
                include_str!("../../shaders/matmul_int.wgsl"),
                include_str!("../../shaders/matmul_id.wgsl")
            ),
        )
    } else {
        (
            "mul_mat_int",
            concat!(
                include_str!("../../shaders/matmul_int.wgsl"),
                include_str!("../../shaders/matmul_main.wgsl"),
                include_str!("../../shaders/matmul_store.wgsl")
            ),
        )
    };
    let mm = Kernel::new(kernel, body, node)
        .def("DEQUANT", words)
        .def("WEIGHTS", weights_section(name))
        .def("MINS", mins)
        .def("HALVES", halves);
    let mut slots = slots_of(node);
    slots[1] = None;
    let mut second = Dispatch {
        pipeline: mm.pipeline(ctx)?,
        params: p,
        slots,
        groups: super::tile_grid(ctx, node)?,
        scratch: Some(Scratch { slot: 1, bytes }),
    };
    // slot 1 reads the scratch from its start
    second.params.w[41] = 0;
    Ok(Some(vec![first, second]))
}

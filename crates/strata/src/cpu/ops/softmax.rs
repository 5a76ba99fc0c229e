//! SOFT_MAX (with optional mask, scale, ALiBi slopes and attention sinks)
//! and DIAG_MASK_INF.
//!
//! Both run in place in real graphs: each source row is loaded into
//! per-thread scratch before the destination row is written.

use super::reduce::{flat_f32, load_span, sum_f64};
use super::{Ctx, NodePlan, WorkSize};
use crate::ops::Op;
use crate::tensor::{DType, Tensor};

pub(super) fn handles(op: &Op) -> bool {
    matches!(op, Op::SoftMax { .. } | Op::DiagMaskInf { .. })
}

pub(super) fn supports(t: &Tensor) -> bool {
    let f32_src = |i: usize| t.src(i).is_none_or(|s| s.dtype() == DType::F32);
    let ok_a = t.dtype() == DType::F32 && t.src(0).is_some_and(|a| a.dtype() == DType::F32);
    match t.op() {
        Op::DiagMaskInf { .. } => ok_a,
        Op::SoftMax { .. } => {
            let mask_ok = t
                .src(1)
                .is_none_or(|m| matches!(m.dtype(), DType::F32 | DType::F16));
            ok_a && mask_ok && f32_src(2)
        }
        _ => false,
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let n = node.src(0).ne[0];
    let rows = if node.src[1].is_some() { 2 } else { 1 };
    WorkSize {
        shared: 0,
        per_thread: rows * n * 4,
    }
}

/// ALiBi slope of head `h` of `n_head` (1 when `max_bias` is 0), as ggml:
/// heads below the largest power of two `n` get `m0^(h+1)`, the rest
/// `m1^(2(h-n)+1)`, with `m0 = 2^(-max_bias/n)` and `m1 = 2^(-max_bias/2/n)`.
pub(crate) fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    if max_bias <= 0.0 || n_head == 0 {
        return 1.0;
    }
    let n_log2 = 1usize << n_head.ilog2();
    let m0 = 2f32.powf(-max_bias / n_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_log2 as f32);
    if h < n_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_log2) as i32 + 1)
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match node.op {
        Op::SoftMax { scale, max_bias } => soft_max(node, ctx, scale, max_bias),
        Op::DiagMaskInf { n_past } => diag_mask_inf(node, ctx, n_past),
        ref op => unreachable!("{} is not a softmax op", op.name()),
    }
}

fn soft_max(node: &NodePlan, ctx: &Ctx<'_>, scale: f32, max_bias: f32) {
    let (a, dst) = (node.src(0), &node.dst);
    let mask = node.src[1].as_ref();
    let sinks = node.src[2].as_ref();
    let n = a.ne[0];
    let scratch = ctx.scratch_f32(work_size(node).per_thread / 4);
    let (row, mrow) = scratch.split_at_mut(n);
    for r in ctx.rows(a.nrows()) {
        let (i1, i2, i3) = a.row_coords(r);
        a.load_row(i1, i2, i3, row);
        if let Some(m) = mask {
            // load_span converts contiguous F16 rows without per-element dispatch.
            load_span(m, i1, i2 % m.ne[2], i3 % m.ne[3], 0, mrow);
            let slope = alibi_slope(max_bias, i2, a.ne[2]);
            for (x, &mv) in row.iter_mut().zip(mrow.iter()) {
                *x = *x * scale + slope * mv;
            }
        } else {
            row.iter_mut().for_each(|x| *x *= scale);
        }
        let sink = sinks.map(|s| flat_f32(s, i2));
        let mut max = sink.unwrap_or(f32::NEG_INFINITY);
        for &x in row.iter() {
            max = max.max(x);
        }
        if max == f32::NEG_INFINITY {
            // Every logit is masked: no probability mass anywhere.
            row.fill(0.0);
        } else {
            crate::cpu::vector::exp_shifted_row(ctx.isa, row, max);
            let mut sum = sum_f64(row);
            if let Some(s) = sink {
                sum += ((s - max) as f64).exp();
            }
            let inv = (1.0 / sum) as f32;
            row.iter_mut().for_each(|x| *x *= inv);
        }
        dst.store_row(i1, i2, i3, row);
    }
}

fn diag_mask_inf(node: &NodePlan, ctx: &Ctx<'_>, n_past: usize) {
    ctx.map_rows(node, |(i1, _, _), row| {
        // Element i0 is masked when i0 > n_past + i1.
        let keep = n_past.saturating_add(i1).saturating_add(1).min(row.len());
        row[keep..].fill(f32::NEG_INFINITY);
    });
}

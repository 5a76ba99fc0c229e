//! Reductions: SUM (all elements), SUM_ROWS, MEAN, ARGMAX, ARGSORT and
//! TOP_K (ARGSORT's descending order, the first k).
//!
//! Sums accumulate in f64 in a fixed order, so results do not depend on the
//! thread count: SUM splits the tensor into fixed-size items whose f64
//! partials thread 0 adds up in item order after a barrier.

use half::{bf16, f16};

use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::{Op, SortOrder};
use crate::tensor::{DType, Tensor};

/// Elements per SUM work item (one row segment, or several short rows).
const SUM_ITEM: usize = 4096;

pub(super) fn handles(op: &Op) -> bool {
    matches!(
        op,
        Op::Sum | Op::SumRows | Op::Mean | Op::Argmax | Op::Argsort { .. } | Op::TopK
    )
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

pub(super) fn supports(t: &Tensor) -> bool {
    let Some(a) = t.src(0) else { return false };
    if !is_float(a.dtype()) {
        return false;
    }
    match t.op() {
        Op::Sum | Op::SumRows => t.dtype() == a.dtype(),
        Op::Mean => t.dtype() == DType::F32,
        Op::Argmax | Op::Argsort { .. } | Op::TopK => t.dtype() == DType::I32,
        _ => false,
    }
}

/// How SUM cuts its source into items: `rows` rows per item, `seg` elements
/// of each row per item, `nseg` segments per row.
#[derive(Clone, Copy)]
struct SumItems {
    rows: usize,
    seg: usize,
    nseg: usize,
    count: usize,
}

fn sum_items(a: &TView) -> SumItems {
    let ne0 = a.ne[0].max(1);
    let (rows, seg) = if ne0 >= SUM_ITEM {
        (1, SUM_ITEM)
    } else {
        (SUM_ITEM / ne0, ne0)
    };
    let nseg = ne0.div_ceil(seg);
    SumItems {
        rows,
        seg,
        nseg,
        count: a.nrows().div_ceil(rows) * nseg,
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let a = node.src(0);
    match node.op {
        Op::Sum => {
            let it = sum_items(a);
            WorkSize {
                shared: it.count * 8,
                per_thread: it.seg * 4,
            }
        }
        // Values, then one u64 sort key per value (+8 bytes to align them).
        Op::Argsort { .. } | Op::TopK => WorkSize {
            shared: 0,
            per_thread: a.ne[0] * 12 + 8,
        },
        _ => WorkSize {
            shared: 0,
            per_thread: a.ne[0] * 4,
        },
    }
}

/// Loads `out.len()` elements of row (i1, i2, i3) of `v`, from element
/// `start`, as f32 (float types; rows may be strided).
pub(super) fn load_span(v: &TView, i1: usize, i2: usize, i3: usize, start: usize, out: &mut [f32]) {
    let n = out.len();
    assert!(start + n <= v.ne[0], "span outside the row");
    if n == 0 {
        return;
    }
    if v.rows_contiguous() {
        let ts = v.dtype.type_size();
        // SAFETY: sources are only read during this op; the row is in bounds.
        let bytes = unsafe { v.row_bytes(i1, i2, i3) };
        let bytes = &bytes[start * ts..(start + n) * ts];
        match v.dtype {
            DType::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            DType::F16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            DType::BF16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            t => unreachable!("reduction source of type {t} passed supports()"),
        }
    } else {
        for (k, o) in out.iter_mut().enumerate() {
            *o = v.get_f32(start + k, i1, i2, i3);
        }
    }
}

/// Sum in f64 with four interleaved accumulators (fixed order, vectorizable).
#[inline]
pub(super) fn sum_f64(x: &[f32]) -> f64 {
    let mut acc = [0f64; 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..4 {
            acc[k] += c[k] as f64;
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for &v in rest {
        s += v as f64;
    }
    s
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match node.op {
        Op::Sum => sum_all(node, ctx),
        Op::SumRows | Op::Mean => sum_rows(node, ctx),
        Op::Argmax => argmax(node, ctx),
        Op::Argsort { order } => argsort(node, ctx, order),
        Op::TopK => argsort(node, ctx, SortOrder::Desc),
        ref op => unreachable!("{} is not a reduction", op.name()),
    }
}

fn sum_all(node: &NodePlan, ctx: &Ctx<'_>) {
    let a = node.src(0);
    let it = sum_items(a);
    let buf = ctx.scratch_f32(it.seg);
    let partials = ctx.shared_ptr().cast::<f64>();
    let nrows = a.nrows();
    for item in ctx.rows(it.count) {
        let (block, s) = (item / it.nseg, item % it.nseg);
        let start = s * it.seg;
        let len = it.seg.min(a.ne[0] - start);
        let mut acc = 0f64;
        for r in block * it.rows..((block + 1) * it.rows).min(nrows) {
            let (i1, i2, i3) = a.row_coords(r);
            load_span(a, i1, i2, i3, start, &mut buf[..len]);
            acc += sum_f64(&buf[..len]);
        }
        // SAFETY: the shared work area holds `it.count` f64 (work_size), is
        // 8-byte aligned, and each item index is written by one thread only.
        unsafe { partials.add(item).write(acc) };
    }
    ctx.w.barrier();
    if ctx.w.ith == 0 {
        let mut total = 0f64;
        for item in 0..it.count {
            // SAFETY: written above by the owning thread before the barrier.
            total += unsafe { partials.add(item).read() };
        }
        node.dst.set_f32(0, 0, 0, 0, total as f32);
    }
}

fn sum_rows(node: &NodePlan, ctx: &Ctx<'_>) {
    let (a, dst) = (node.src(0), &node.dst);
    let n = a.ne[0];
    let row = ctx.scratch_f32(n);
    let mean = matches!(node.op, Op::Mean);
    for r in ctx.rows(a.nrows()) {
        let (i1, i2, i3) = a.row_coords(r);
        load_span(a, i1, i2, i3, 0, row);
        let mut s = sum_f64(row);
        if mean {
            s /= n as f64;
        }
        dst.set_f32(0, i1, i2, i3, s as f32);
    }
}

fn argmax(node: &NodePlan, ctx: &Ctx<'_>) {
    let a = node.src(0);
    let row = ctx.scratch_f32(a.ne[0]);
    for i1 in ctx.rows(a.ne[1]) {
        load_span(a, i1, 0, 0, 0, row);
        // First maximum; NaN never wins (as ggml: strict `>` from -inf).
        let mut best = f32::NEG_INFINITY;
        let mut idx = 0usize;
        for (i, &v) in row.iter().enumerate() {
            if v > best {
                best = v;
                idx = i;
            }
        }
        node.dst.set_i32(i1, 0, 0, 0, idx as i32);
    }
}

/// A u32 whose unsigned order is the ascending order of `x`: -0 equals +0
/// and every NaN equals every other NaN, after +inf.
#[inline]
fn asc_key(x: f32) -> u32 {
    let x = if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f32::NAN
    } else {
        x
    };
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

fn argsort(node: &NodePlan, ctx: &Ctx<'_>, order: SortOrder) {
    let (a, dst) = (node.src(0), &node.dst);
    let n = a.ne[0];
    let scratch = ctx.scratch_f32(3 * n + 2);
    let (vals, rest) = scratch.split_at_mut(n);
    // SAFETY: every bit pattern is a valid f32 and a valid u64, so viewing
    // the aligned middle of the f32 scratch as u64 is sound.
    let (_, keys, _) = unsafe { rest.align_to_mut::<u64>() };
    assert!(keys.len() >= n, "argsort scratch too small");
    let keys = &mut keys[..n];
    for r in ctx.rows(a.nrows()) {
        let (i1, i2, i3) = a.row_coords(r);
        load_span(a, i1, i2, i3, 0, vals);
        // Key in the high half, index in the low half: sorting the u64s
        // orders by value and breaks ties by index (a stable argsort)
        // without allocating.
        for (i, (k, &v)) in keys.iter_mut().zip(vals.iter()).enumerate() {
            let key = match order {
                SortOrder::Asc => asc_key(v),
                SortOrder::Desc => !asc_key(v),
            };
            *k = (key as u64) << 32 | i as u64;
        }
        keys.sort_unstable();
        // TOP_K: the first dst.ne[0] of the descending order.
        for (i0, &k) in keys.iter().take(dst.ne[0]).enumerate() {
            dst.set_i32(i0, i1, i2, i3, k as u32 as i32);
        }
    }
}

/// Element number `i` of `v` in logical order (ne0 fastest), as f32.
pub(super) fn flat_f32(v: &TView, i: usize) -> f32 {
    let i0 = i % v.ne[0];
    let r = i / v.ne[0];
    let (i1, i2, i3) = v.row_coords(r);
    v.get_f32(i0, i1, i2, i3)
}

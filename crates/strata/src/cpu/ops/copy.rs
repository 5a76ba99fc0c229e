//! Data movement: DUP, CONT, CPY (any layout to any layout with the same
//! element count, with type conversion), REPEAT (tiling) and CONCAT.
//!
//! Copies walk src0's elements in logical order (ne0 fastest) and write them
//! in dst's logical order, as ggml does. The unit of work is a dst row: each
//! thread owns whole dst rows, so block-quantized destinations (whose rows
//! are contiguous) are quantized one row at a time. Same-type copies move raw
//! element bytes (integers stay exact); conversions go through f32.

use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::Op;
use crate::tensor::Tensor;

pub(super) fn handles(op: &Op) -> bool {
    matches!(
        op,
        Op::Dup | Op::Cont | Op::Cpy | Op::Repeat | Op::Concat { .. }
    )
}

pub(super) fn supports(t: &Tensor) -> bool {
    let Some(a) = t.src(0) else { return false };
    let (at, dt) = (a.dtype(), t.dtype());
    match t.op() {
        Op::Dup | Op::Cont => at == dt && (!at.is_quantized() || a.is_contiguous_rows()),
        Op::Cpy => {
            if at == dt {
                !at.is_quantized() || (a.is_contiguous() && t.is_contiguous())
            } else {
                at.is_float() && (dt.is_float() || (dt.is_quantized() && t.is_contiguous_rows()))
            }
        }
        // REPEAT's second source only gives the shape; its type is irrelevant.
        Op::Repeat => !at.is_quantized() && at == dt,
        Op::Concat { .. } => !at.is_quantized() && t.srcs().all(|s| s.dtype() == dt),
        _ => false,
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (a, d) = (node.src(0), &node.dst);
    if a.dtype != d.dtype {
        WorkSize {
            shared: 0,
            per_thread: d.ne[0] * 4,
        }
    } else {
        WorkSize::default()
    }
}

/// Copies one element of `size` bytes (1, 2, 4 or 8) from `src` to `dst`
/// (reads before writing, so `src == dst` is fine).
///
/// # Safety
/// Both pointers must be valid for `size` bytes.
#[inline(always)]
unsafe fn copy_elem(src: *const u8, dst: *mut u8, size: usize) {
    match size {
        1 => dst.write(src.read()),
        2 => dst
            .cast::<u16>()
            .write_unaligned(src.cast::<u16>().read_unaligned()),
        4 => dst
            .cast::<u32>()
            .write_unaligned(src.cast::<u32>().read_unaligned()),
        8 => dst
            .cast::<u64>()
            .write_unaligned(src.cast::<u64>().read_unaligned()),
        _ => std::ptr::copy(src, dst, size),
    }
}

/// A logical-order cursor over a view's elements.
struct Cursor {
    ne: [usize; 4],
    i: [usize; 4],
}

impl Cursor {
    /// The cursor at flat logical index `e`.
    fn at(ne: [usize; 4], mut e: usize) -> Cursor {
        let mut i = [0; 4];
        for d in 0..4 {
            let n = ne[d].max(1);
            i[d] = e % n;
            e /= n;
        }
        Cursor { ne, i }
    }

    #[inline(always)]
    fn advance(&mut self) {
        for d in 0..4 {
            self.i[d] += 1;
            if self.i[d] < self.ne[d] {
                return;
            }
            self.i[d] = 0;
        }
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match node.op {
        Op::Dup | Op::Cont | Op::Cpy => copy(node.src(0), &node.dst, ctx),
        Op::Repeat => repeat(node.src(0), &node.dst, ctx),
        Op::Concat { dim } => concat(node.src(0), node.src(1), dim, &node.dst, ctx),
        ref op => unreachable!("{} is not a copy op", op.name()),
    }
}

fn both_contiguous(a: &TView, d: &TView) -> bool {
    let contiguous = |v: &TView| {
        let mut want = v.dtype.type_size();
        for i in 0..4 {
            if v.ne[i] != 1 && v.nb[i] != want {
                return false;
            }
            want = if i == 0 {
                v.dtype.row_size(v.ne[0])
            } else {
                want * v.ne[i]
            };
        }
        true
    };
    contiguous(a) && contiguous(d)
}

fn copy(a: &TView, d: &TView, ctx: &Ctx<'_>) {
    let nrows = d.nrows();
    if a.dtype == d.dtype && both_contiguous(a, d) {
        // One memcpy per thread over its byte range (block types included).
        let total = a.dtype.row_size(a.ne[0]) * a.nrows();
        if total == 0 {
            return;
        }
        let r = ctx.rows(total);
        if !r.is_empty() {
            // SAFETY: both spans are `total` bytes inside validated tensors;
            // ranges of different threads are disjoint. A graph from outside
            // (RPC) may place dst over src: `ptr::copy` is memmove, so even
            // then the copy is defined.
            unsafe {
                std::ptr::copy(
                    a.row_ptr(0, 0, 0).add(r.start),
                    d.row_ptr(0, 0, 0).add(r.start),
                    r.len(),
                )
            };
        }
        return;
    }
    if a.dtype.is_quantized() {
        // Same block type, same shape (DUP/CONT), contiguous rows: per-row memcpy.
        let bytes = a.dtype.row_size(a.ne[0]);
        for r in ctx.rows(nrows) {
            let (i1, i2, i3) = d.row_coords(r);
            // SAFETY: rows of `bytes` bytes, in bounds in both views. They
            // may overlap (a received graph can place dst over src), hence
            // memmove rather than memcpy.
            unsafe { std::ptr::copy(a.row_ptr(i1, i2, i3), d.row_ptr(i1, i2, i3), bytes) };
        }
        return;
    }
    let n0 = d.ne[0];
    if a.dtype == d.dtype {
        let size = a.dtype.type_size();
        for r in ctx.rows(nrows) {
            let (i1, i2, i3) = d.row_coords(r);
            let mut c = Cursor::at(a.ne, r * n0);
            for i0 in 0..n0 {
                let [s0, s1, s2, s3] = c.i;
                // SAFETY: both element pointers are bounds-checked elements of
                // `size` bytes.
                unsafe { copy_elem(a.elem_ptr(s0, s1, s2, s3), d.elem_ptr(i0, i1, i2, i3), size) };
                c.advance();
            }
        }
        return;
    }
    let buf = ctx.scratch_f32(n0);
    let same_rows = a.ne == d.ne;
    for r in ctx.rows(nrows) {
        let (i1, i2, i3) = d.row_coords(r);
        if same_rows {
            a.load_row(i1, i2, i3, buf);
        } else {
            let mut c = Cursor::at(a.ne, r * n0);
            for v in buf.iter_mut() {
                let [s0, s1, s2, s3] = c.i;
                *v = a.get_f32(s0, s1, s2, s3);
                c.advance();
            }
        }
        d.store_row(i1, i2, i3, buf);
    }
}

fn repeat(a: &TView, d: &TView, ctx: &Ctx<'_>) {
    let size = a.dtype.type_size();
    let n0 = d.ne[0];
    for r in ctx.rows(d.nrows()) {
        let (i1, i2, i3) = d.row_coords(r);
        let (s1, s2, s3) = (i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3]);
        for i0 in 0..n0 {
            // SAFETY: bounds-checked elements of `size` bytes in bounds.
            unsafe {
                copy_elem(
                    a.elem_ptr(i0 % a.ne[0], s1, s2, s3),
                    d.elem_ptr(i0, i1, i2, i3),
                    size,
                )
            };
        }
    }
}

fn concat(a: &TView, b: &TView, dim: usize, d: &TView, ctx: &Ctx<'_>) {
    let size = d.dtype.type_size();
    let split = a.ne[dim];
    for r in ctx.rows(d.nrows()) {
        let (i1, i2, i3) = d.row_coords(r);
        for i0 in 0..d.ne[0] {
            let mut i = [i0, i1, i2, i3];
            let from = if i[dim] < split {
                a
            } else {
                i[dim] -= split;
                b
            };
            // SAFETY: bounds-checked elements of `size` bytes in bounds.
            unsafe {
                copy_elem(
                    from.elem_ptr(i[0], i[1], i[2], i[3]),
                    d.elem_ptr(i0, i1, i2, i3),
                    size,
                )
            };
        }
    }
}

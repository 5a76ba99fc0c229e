//! Row gathers and scatters: GET_ROWS and SET_ROWS.
//!
//! GET_ROWS: `a` [ne0, n_rows, ne2, ne3] (any type), indices `b` I32
//! [n, ne2, ne3]; `dst[:, i, j, k] = a[:, b[i, j, k], j, k]` as F32 (I32 when
//! `a` is I32, copied exactly).
//!
//! SET_ROWS: rows `b` F32 [ne0, n, ne2, ne3], indices `c` I32/I64
//! [n, ne2 / r2, ne3 / r3] (broadcast over `b`'s dims 2, 3), destination `a`
//! of any float or block type: `a[:, c[i, j % c.ne1, k % c.ne2], j, k] = b[:, i, j, k]`.
//! Each destination row belongs to one thread (interleaved by row), which
//! applies the writes to it in index order, so duplicate indices give the
//! last write on any thread count, with no data race.
//!
//! Out-of-range indices are rejected before compute by [`validate`] when the
//! index tensor holds data at plan time; the kernels themselves never touch
//! memory out of range (GET_ROWS writes a zero row, SET_ROWS skips the row).

use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::Op;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

pub(super) fn handles(op: &Op) -> bool {
    matches!(op, Op::GetRows | Op::SetRows)
}

pub(super) fn supports(t: &Tensor) -> bool {
    match t.op() {
        Op::GetRows => {
            let (Some(a), Some(b)) = (t.src(0), t.src(1)) else {
                return false;
            };
            b.dtype() == DType::I32
                && (!a.dtype().is_quantized() || a.is_contiguous_rows())
                && t.dtype()
                    == if a.dtype() == DType::I32 {
                        DType::I32
                    } else {
                        DType::F32
                    }
        }
        Op::SetRows => {
            let (Some(b), Some(c)) = (t.src(0), t.src(1)) else {
                return false;
            };
            b.dtype().is_float()
                && matches!(c.dtype(), DType::I32 | DType::I64)
                && (t.dtype().is_float() || t.dtype().is_quantized())
                && t.is_contiguous_rows()
        }
        _ => false,
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    WorkSize {
        shared: 0,
        per_thread: node.dst.ne[0].max(node.src(0).ne[0]) * 4,
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match node.op {
        Op::GetRows => get_rows(node.src(0), node.src(1), &node.dst, ctx),
        Op::SetRows => set_rows(node.src(0), node.src(1), &node.dst, ctx),
        ref op => unreachable!("{} is not a row op", op.name()),
    }
}

/// Checks every index of a GET_ROWS / SET_ROWS node against the indexed
/// dimension (and every expert id of a MUL_MAT_ID / ADD_ID node against the
/// number of experts). Index tensors computed by the graph itself (their data does not
/// exist yet) are skipped: `computed(t)` says whether `t`'s memory is written
/// by the graph.
pub(super) fn validate(
    t: &Tensor,
    node: &NodePlan,
    computed: &dyn Fn(&Tensor) -> bool,
) -> Result<()> {
    let (idx_tensor, idx, limit, what) = match node.op {
        Op::GetRows => (t.src(1), node.src(1), node.src(0).ne[1], "rows of"),
        Op::SetRows => (t.src(1), node.src(1), node.dst.ne[1], "rows of destination"),
        Op::MulMatId => (t.src(2), node.src(2), node.src(0).ne[2], "experts of"),
        Op::AddId => (t.src(2), node.src(2), node.src(1).ne[1], "biases of"),
        _ => return Ok(()),
    };
    let Some(idx_tensor) = idx_tensor else {
        return Ok(());
    };
    if computed(idx_tensor) {
        return Ok(());
    }
    let target = match node.op {
        Op::GetRows | Op::MulMatId => t.src(0),
        Op::AddId => t.src(1),
        _ => t.src(2),
    }
    .map_or_else(|| t.name(), |s| s.name());
    for i2 in 0..idx.ne[2] {
        for i1 in 0..idx.ne[1] {
            for i0 in 0..idx.ne[0] {
                let v = idx.get_i64(i0, i1, i2, 0);
                if v < 0 || v as u64 >= limit as u64 {
                    return Err(Error::IndexOutOfRange {
                        what: format!(
                            "{}: index tensor '{}' at [{i0}, {i1}, {i2}], selecting {what} \
                             '{target}' (tensor '{}')",
                            node.op.name(),
                            idx_tensor.name(),
                            t.name()
                        ),
                        index: v,
                        len: limit,
                    });
                }
            }
        }
    }
    Ok(())
}

/// The index at (i0, i1, i2) if it is in `0..limit`.
#[inline]
fn index(idx: &TView, i0: usize, i1: usize, i2: usize, limit: usize) -> Option<usize> {
    let v = idx.get_i64(i0, i1, i2, 0);
    usize::try_from(v).ok().filter(|&v| v < limit)
}

fn get_rows(a: &TView, idx: &TView, d: &TView, ctx: &Ctx<'_>) {
    let n0 = d.ne[0];
    let buf = ctx.scratch_f32(n0);
    for r in ctx.rows(d.nrows()) {
        let (i10, i11, i12) = d.row_coords(r);
        let Some(src_row) = index(idx, i10, i11, i12, a.ne[1]) else {
            // Out of range (only possible for indices computed in the graph).
            buf.fill(0.0);
            d.store_row(i10, i11, i12, buf);
            continue;
        };
        if a.dtype == DType::I32 && d.dtype == DType::I32 {
            for i0 in 0..n0 {
                let v = a.get_i64(i0, src_row, i11, i12) as i32;
                d.set_i32(i0, i10, i11, i12, v);
            }
        } else {
            a.load_row(src_row, i11, i12, buf);
            d.store_row(i10, i11, i12, buf);
        }
    }
}

fn set_rows(b: &TView, idx: &TView, d: &TView, ctx: &Ctx<'_>) {
    let buf = ctx.scratch_f32(b.ne[0]);
    let (nth, ith) = (ctx.w.nth.max(1), ctx.w.ith);
    for i03 in 0..b.ne[3] {
        for i02 in 0..b.ne[2] {
            let plane = (i03 * b.ne[2] + i02) * d.ne[1];
            let (i11, i12) = (i02 % idx.ne[1], i03 % idx.ne[2]);
            for i in 0..b.ne[1] {
                let Some(i1) = index(idx, i, i11, i12, d.ne[1]) else {
                    continue;
                };
                if (plane + i1) % nth != ith {
                    continue;
                }
                b.load_row(i, i02, i03, buf);
                d.store_row(i1, i02, i03, buf);
            }
        }
    }
}

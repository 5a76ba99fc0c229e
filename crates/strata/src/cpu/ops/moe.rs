//! The mixture-of-experts ops: MUL_MAT_ID and ADD_ID.
//!
//! MUL_MAT_ID: `a` [K, M, n_expert] (any MUL_MAT weight type, also packed),
//! `b` [K, n_b, tokens] (F32/F16/BF16, any strides; `n_b` = n_used or 1),
//! I32 `ids` [n_used, tokens] (any strides) → F32 `dst` [M, n_used, tokens],
//! `dst[:, s, t] = a[:, :, ids[s, t]] · b[:, s % n_b, t]`.
//!
//! As ggml does, the op works expert by expert so that each expert's rows
//! are read once per batch, not once per token:
//!
//! 1. every row of `b` is converted once to the weight's dot type
//!    ([`DotRows`], as MUL_MAT: threads split the rows), and thread 0
//!    groups the (slot, token) pairs by expert (a counting sort in
//!    token-major order, into the shared work memory); one barrier;
//! 2. work items are (expert, 16-row tile of `a`, chunk of up to
//!    [`CHUNK_N`] of the expert's pairs), ordered so that consecutive items
//!    share the tile; threads take contiguous ranges of items. Each output is
//!    the level's dot product of one weight row and one converted column
//!    ([`crate::quant::simd::vec_dot_fn_for`]; the four-column kernel where
//!    the level has one, bit-identical), so results do not depend on the
//!    thread count (and, for quantized weights in plain memory, equal
//!    MUL_MAT's of the same expert bit for bit; float weights: MUL_MAT
//!    takes the GEMM of [`super::matmul_float`] instead).
//!
//! A packed weight (`CPU_PACKED`) goes through the packed tile kernels
//! ([`super::moe_packed`]) at levels that have them; at the others it is
//! read through the same dot products: each 16-row group is unpacked into
//! thread scratch once per item, bit-identical to the unpacked path.
//!
//! An id outside `0..n_expert` is refused before compute when `ids` is an
//! input ([`super::rows::validate`]); a computed one gives a zero column.
//!
//! ADD_ID: F32 `a` [n, n_used, tokens, ..], `b` [n, n_expert] and I32 `ids`
//! [n_used, tokens]: `dst[:, s, t, j] = a[:, s, t, j] + b[:, ids[s, t]]`; an
//! out-of-range computed id leaves the row of `a` as it is.

use super::matmul::{store_outputs, weight_supported, DotRows};
use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::Op;
use crate::quant::packed::{self, ROWS};
use crate::quant::simd::{vec_dot4_fn_for, vec_dot_fn_for};
use crate::tensor::{DType, Tensor};

/// Rows of `a` per work item: one packed group.
const TILE_M: usize = ROWS;
/// Most (slot, token) pairs of one expert per work item.
const CHUNK_N: usize = 64;

pub(super) fn handles(op: &Op) -> bool {
    matches!(op, Op::MulMatId | Op::AddId)
}

pub(super) fn supports(t: &Tensor) -> bool {
    let (Some(a), Some(b), Some(ids)) = (t.src(0), t.src(1), t.src(2)) else {
        return false;
    };
    let ids_ok = ids.dtype() == DType::I32 && t.dtype() == DType::F32;
    match t.op() {
        Op::MulMatId => ids_ok && b.dtype().is_float() && weight_supported(a),
        Op::AddId => ids_ok && a.dtype() == DType::F32 && b.dtype() == DType::F32,
        _ => false,
    }
}

/// Rounds up to a multiple of 64 bytes (saturating: received graphs may
/// claim absurd sizes, which the backend then refuses).
pub(super) fn up64(x: usize) -> usize {
    x.saturating_add(63) & !63
}

/// Bytes of one unpacked 16-row group of `a` (0 when `a` is not packed),
/// as a count of f32.
fn group_f32(a: &TView) -> usize {
    if a.packed {
        (ROWS * a.dtype.row_size(a.ne[0])).div_ceil(4)
    } else {
        0
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (a, b) = (node.src(0), node.src(1));
    if node.op == Op::AddId {
        return WorkSize {
            shared: 0,
            per_thread: (a.ne[0] + b.ne[0]) * 4,
        };
    }
    let ids = node.src(2);
    let n_pairs = ids.ne[0].saturating_mul(ids.ne[1]);
    let words = (a.ne[2] + 1).saturating_add(n_pairs);
    let unpacked = up64(DotRows::shared_size(a.dtype, b)).saturating_add(words.saturating_mul(8));
    // A packed weight may take the tile kernels' path (at levels that
    // have them), which lays the shared memory out its own way.
    let packed = if a.packed {
        super::moe_packed::shared_size(a, n_pairs)
    } else {
        0
    };
    WorkSize {
        shared: unpacked.max(packed),
        per_thread: (a.ne[0] + group_f32(a)).saturating_mul(4),
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match node.op {
        Op::MulMatId => mul_mat_id(node, ctx),
        Op::AddId => add_id(node, ctx),
        ref op => unreachable!("{} is not a mixture-of-experts op", op.name()),
    }
}

/// The expert at slot `s` of token `t`, if it is in `0..n`.
#[inline]
fn expert(ids: &TView, s: usize, t: usize, n: usize) -> Option<usize> {
    usize::try_from(ids.get_i64(s, t, 0, 0))
        .ok()
        .filter(|&e| e < n)
}

/// Groups the pairs `j = t · n_used + s` by expert: on return, expert `e`'s
/// pairs are `pairs[offsets[e] .. offsets[e + 1]]`, in increasing `j`.
/// Pairs with an out-of-range id get a zero column in `dst` instead.
fn group_by_expert(
    ids: &TView,
    n_exp: usize,
    offsets: &mut [usize],
    pairs: &mut [usize],
    dst: &TView,
) {
    let (n_used, n_tok) = (ids.ne[0], ids.ne[1]);
    offsets.fill(0);
    for t in 0..n_tok {
        for s in 0..n_used {
            if let Some(e) = expert(ids, s, t, n_exp) {
                offsets[e + 1] += 1;
            }
        }
    }
    for e in 0..n_exp {
        offsets[e + 1] += offsets[e];
    }
    // offsets[e] is now where expert e's pairs start; use it as the cursor.
    for t in 0..n_tok {
        for s in 0..n_used {
            match expert(ids, s, t, n_exp) {
                Some(e) => {
                    pairs[offsets[e]] = t * n_used + s;
                    offsets[e] += 1;
                }
                None => {
                    for i in 0..dst.ne[0] {
                        dst.set_f32(i, s, t, 0, 0.0);
                    }
                }
            }
        }
    }
    // Each cursor ended at the next expert's start: shift back.
    for e in (1..=n_exp).rev() {
        offsets[e] = offsets[e - 1];
    }
    offsets[0] = 0;
}

/// Groups the pairs by expert on thread 0 ([`group_by_expert`], into the
/// shared `words`: `n_exp + 1` offsets, then the pairs), then the barrier;
/// every thread gets the groups read-only.
///
/// # Safety
/// `words` points into the node's shared work memory, 8-aligned, with room
/// for `n_exp + 1 + ids.ne[0] · ids.ne[1]` words that nothing else uses
/// during this op.
pub(super) unsafe fn grouped<'a>(
    words: *mut usize,
    ids: &TView,
    n_exp: usize,
    dst: &TView,
    ctx: &Ctx<'_>,
) -> (&'a [usize], &'a [usize]) {
    let n_pairs = ids.ne[0] * ids.ne[1];
    if ctx.w.ith == 0 {
        // SAFETY: only thread 0 touches the words before the barrier; the
        // two regions are disjoint and in bounds (the contract).
        let (offsets, pairs) = unsafe {
            (
                std::slice::from_raw_parts_mut(words, n_exp + 1),
                std::slice::from_raw_parts_mut(words.add(n_exp + 1), n_pairs),
            )
        };
        group_by_expert(ids, n_exp, offsets, pairs, dst);
    }
    ctx.w.barrier();
    // SAFETY: written by thread 0 before the barrier; read-only from now on.
    unsafe {
        (
            std::slice::from_raw_parts(words, n_exp + 1),
            std::slice::from_raw_parts(words.add(n_exp + 1), n_pairs),
        )
    }
}

fn mul_mat_id(node: &NodePlan, ctx: &Ctx<'_>) {
    if super::moe_packed::applies(node, ctx) {
        return super::moe_packed::mul_mat_id(node, ctx);
    }
    let (a, b, ids, dst) = (node.src(0), node.src(1), node.src(2), &node.dst);
    let (k, m, n_exp) = (a.ne[0], a.ne[1], a.ne[2]);
    let (n_used, n_b) = (ids.ne[0], b.ne[1]);
    let scratch = ctx.scratch_f32(k + group_f32(a));
    let (tmp, group) = scratch.split_at_mut(k);
    // SAFETY: `group` is this thread's f32 scratch (exclusively borrowed),
    // reused as bytes; every bit pattern is valid for both.
    let group: &mut [u8] =
        unsafe { std::slice::from_raw_parts_mut(group.as_mut_ptr().cast::<u8>(), group.len() * 4) };

    // Phase 1: the activations in the dot type, and the pairs by expert.
    let b_rows = DotRows::prepare(a.dtype, b, ctx, ctx.shared_ptr(), tmp);
    // SAFETY: the shared work buffer holds the converted rows, then (64-byte
    // aligned) n_exp + 1 offsets and n_used · n_tok pairs (work_size).
    let words =
        unsafe { ctx.shared_ptr().add(up64(DotRows::shared_size(a.dtype, b))) }.cast::<usize>();
    // SAFETY: (as above) the words are in bounds and 8-aligned.
    let (offsets, pairs) = unsafe { grouped(words, ids, n_exp, dst, ctx) };

    // Phase 2: items (expert, row tile, chunk of pairs), chunks fastest.
    let dot = vec_dot_fn_for(ctx.isa, a.dtype).expect("supports() checked the weight type");
    let dot4 = vec_dot4_fn_for(ctx.isa, a.dtype);
    let a_row_bytes = a.dtype.row_size(k);
    let tiles_m = m.div_ceil(TILE_M);
    let chunks = |e: usize| (offsets[e + 1] - offsets[e]).div_ceil(CHUNK_N);
    let total: usize = (0..n_exp).map(|e| chunks(e) * tiles_m).sum();
    let items = ctx.rows(total);
    let (mut e, mut first) = (0, 0);
    let mut loaded = None;
    let mut out = [0f32; TILE_M];
    let mut out4 = [[0f32; 4]; TILE_M];
    for item in items {
        while item >= first + chunks(e) * tiles_m {
            first += chunks(e) * tiles_m;
            e += 1;
        }
        let (tm, ch) = ((item - first) / chunks(e), (item - first) % chunks(e));
        let (m0, m1) = (tm * TILE_M, ((tm + 1) * TILE_M).min(m));
        if a.packed && loaded != Some((e, tm)) {
            loaded = Some((e, tm));
            // SAFETY: packed weights are whole tensors with ne1 a multiple of
            // 16, so group tm of plane e is in bounds; read-only source.
            let g = unsafe { std::slice::from_raw_parts(a.row_ptr(m0, e, 0), ROWS * a_row_bytes) };
            packed::unpack_group(a.dtype, k, g, &mut group[..ROWS * a_row_bytes]);
        }
        let a_rows: [&[u8]; TILE_M] = std::array::from_fn(|i| match m0 + i {
            r if r >= m1 => &[][..],
            _ if a.packed => &group[i * a_row_bytes..(i + 1) * a_row_bytes],
            // SAFETY: a is a read-only source with contiguous rows (supports()).
            r => unsafe { a.row_bytes(r, e, 0) },
        });
        let rows = &a_rows[..m1 - m0];
        let p0 = offsets[e] + ch * CHUNK_N;
        let chunk = &pairs[p0..(p0 + CHUNK_N).min(offsets[e + 1])];
        // (dst column, b row) of pair j.
        let col = |j: usize| {
            let (s, t) = (j % n_used, j / n_used);
            ((s, t, 0), b_rows.row(s % n_b + t * n_b))
        };
        let mut quads = chunk.chunks_exact(4);
        if let Some(dot4) = dot4 {
            for q in quads.by_ref() {
                let cols = [col(q[0]), col(q[1]), col(q[2]), col(q[3])];
                for (o, x) in out4.iter_mut().zip(rows) {
                    dot4(k, x, cols.map(|c| c.1), o);
                }
                for (j, c) in cols.iter().enumerate() {
                    for (o, o4) in out.iter_mut().zip(&out4[..rows.len()]) {
                        *o = o4[j];
                    }
                    store_outputs(dst, m0, c.0, &out[..rows.len()]);
                }
            }
        }
        let rest = if dot4.is_some() {
            quads.remainder()
        } else {
            chunk
        };
        for &j in rest {
            let (at, y) = col(j);
            for (o, x) in out.iter_mut().zip(rows) {
                *o = dot(k, x, y);
            }
            store_outputs(dst, m0, at, &out[..rows.len()]);
        }
    }
}

fn add_id(node: &NodePlan, ctx: &Ctx<'_>) {
    let (a, b, ids, dst) = (node.src(0), node.src(1), node.src(2), &node.dst);
    let scratch = ctx.scratch_f32(a.ne[0] + b.ne[0]);
    let (row, bias) = scratch.split_at_mut(a.ne[0]);
    for r in ctx.rows(dst.nrows()) {
        let (i1, i2, i3) = dst.row_coords(r);
        a.load_row(i1, i2, i3, row);
        if let Some(e) = expert(ids, i1, i2, b.ne[1]) {
            b.load_row(e, 0, 0, bias);
            for (x, &y) in row.iter_mut().zip(bias.iter()) {
                *x += y;
            }
        }
        dst.store_row(i1, i2, i3, row);
    }
}

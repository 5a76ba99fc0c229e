//! MUL_MAT_ID with a packed expert tensor at a level that has packed
//! kernels ([`packed::kernels_for`]): the tile kernels of
//! [`super::matmul_packed`], expert by expert.
//!
//! 1. thread 0 groups the (slot, token) pairs by expert (as
//!    [`super::moe`] does); one barrier;
//! 2. threads prepare the pairs' activation columns in that order (the
//!    kernels' quantizer, one column per pair: a column of `b` used by
//!    several slots is prepared once per slot), so each expert's columns
//!    are consecutive in the shared work memory; one barrier;
//! 3. units of (expert, block of its columns, 16-row group), claimed in
//!    chunks ([`super::claim`]) as MUL_MAT's packed path claims them:
//!    each unit runs the tile kernel over up to [`Kernels::NR`] columns at
//!    a time and scatters the 16 outputs per column to `dst[:, slot, token]`.
//!
//! Every output is the packed MUL_MAT's arithmetic for its column (the same
//! kernels, whatever the tile width), so results do not depend on the
//! thread count and equal a packed MUL_MAT of the same expert bit for bit.

use super::claim::{claim_units, CLAIM_BYTES};
use super::moe::{grouped, up64};
use super::{Ctx, NodePlan};
use crate::cpu::TView;
use crate::quant::packed::{self, Kernels, Tile, ROWS};

/// Most columns of one expert per unit (their prepared activations stay in
/// L1/L2 while the unit's 16 rows are applied to them).
const BLOCK_N: usize = 64;

/// Bytes of shared work memory this path needs for `a` [K, M, n_exp] and
/// `n_pairs` (slot, token) pairs: the grouping words, the prepared columns,
/// the claim state.
pub(super) fn shared_size(a: &TView, n_pairs: usize) -> usize {
    let col = packed::act_bytes(a.dtype, a.ne[0]);
    claim_offset(a, n_pairs, col).saturating_add(CLAIM_BYTES)
}

/// Where the prepared columns start: after the grouping words.
fn cols_offset(n_exp: usize, n_pairs: usize) -> usize {
    up64(
        (n_exp + 1)
            .saturating_add(n_pairs)
            .saturating_mul(std::mem::size_of::<usize>()),
    )
}

/// Where the claim state sits: after the prepared columns.
fn claim_offset(a: &TView, n_pairs: usize, col: usize) -> usize {
    cols_offset(a.ne[2], n_pairs).saturating_add(up64(n_pairs.saturating_mul(col)))
}

/// Whether this path computes `node` at the context's level.
pub(super) fn applies(node: &NodePlan, ctx: &Ctx<'_>) -> bool {
    let a = node.src(0);
    a.packed && packed::kernels_for(ctx.isa, a.dtype).is_some()
}

pub(super) fn mul_mat_id(node: &NodePlan, ctx: &Ctx<'_>) {
    let (a, b, ids, dst) = (node.src(0), node.src(1), node.src(2), &node.dst);
    let kern = packed::kernels_for(ctx.isa, a.dtype).expect("applies() checked the kernels");
    let (k, m, n_exp) = (a.ne[0], a.ne[1], a.ne[2]);
    let (n_used, n_tok, n_b) = (ids.ne[0], ids.ne[1], b.ne[1]);
    let n_pairs = n_used * n_tok;
    let nb = k / a.dtype.block_size();
    let col = packed::act_bytes(a.dtype, k);
    let shared = ctx.shared_ptr();
    let words = shared.cast::<usize>();

    // Phase 1: the pairs by expert.
    // SAFETY: the shared work memory starts with the grouping words
    // (shared_size), 8-aligned (the work memory is u64 words).
    let (offsets, pairs) = unsafe { grouped(words, ids, n_exp, dst, ctx) };

    // Phase 2: every pair's activation column, in expert order.
    // SAFETY: the columns' region follows the words (shared_size).
    let cols = unsafe { shared.add(cols_offset(n_exp, n_pairs)) };
    let row = ctx.scratch_f32(k);
    let in_place = b.dtype == crate::tensor::DType::F32 && b.rows_contiguous();
    let n_grouped = offsets[n_exp];
    for p in ctx.rows(n_grouped) {
        let j = pairs[p];
        let (s, t) = (j % n_used, j / n_used);
        let x = if in_place {
            b.row_ptr(s % n_b, t, 0).cast::<f32>().cast_const()
        } else {
            b.load_row(s % n_b, t, 0, row);
            row.as_ptr()
        };
        // SAFETY: the level's features were checked (kernels_for); x holds
        // the row's k f32 (a contiguous F32 row of b, or the scratch copy);
        // column p's col bytes are in the shared region and written by this
        // thread only, before the barrier.
        unsafe { (kern.quantize)(x, nb, cols.add(p * col)) };
    }

    // Phase 3: units (expert, column block, group), groups fastest.
    let groups = m / ROWS;
    let blocks = |e: usize| (offsets[e + 1] - offsets[e]).div_ceil(BLOCK_N);
    let units: usize = (0..n_exp).map(|e| blocks(e) * groups).sum();
    let mut tmp = [[0f32; ROWS]; Kernels::NR];
    let mut wtmp = [[0f32; ROWS]; BLOCK_N];
    let (mut e, mut first) = (0, 0);
    // SAFETY: the claim state's CLAIM_BYTES are inside the shared work
    // memory (shared_size), 8-aligned, used only as this node's claim
    // state. The call is the barrier after phase 2.
    let claims = unsafe { claim_units(shared.add(claim_offset(a, n_pairs, col)), units, ctx) };
    for u in claims.units() {
        // Units only grow within a thread's chunk, but a later chunk may
        // come before: find the expert from the start when needed.
        if u < first {
            (e, first) = (0, 0);
        }
        while u >= first + blocks(e) * groups {
            first += blocks(e) * groups;
            e += 1;
        }
        let (cb, g) = ((u - first) / groups, (u - first) % groups);
        let p0 = offsets[e] + cb * BLOCK_N;
        let p1 = (p0 + BLOCK_N).min(offsets[e + 1]);
        let w = a.row_ptr(g * ROWS, e, 0);
        let mut p = p0;
        if let Some(wide) = kern.wide {
            // Whole steps of WIDE columns in one call (the weights decoded
            // once for all of them), the rest by the tiles below.
            let nw = (p1 - p) / Kernels::WIDE * Kernels::WIDE;
            if nw > 0 {
                let tile = Tile {
                    w,
                    nb,
                    // SAFETY: columns p .. p + nw were prepared before the barrier.
                    a: unsafe { cols.add(p * col) },
                    a_stride: col,
                    out: wtmp.as_mut_ptr().cast(),
                    out_stride: ROWS * 4,
                };
                // SAFETY: as the tiles' call below, for nw ≤ BLOCK_N columns
                // (wtmp holds BLOCK_N columns of 16 f32).
                unsafe { wide(tile, nw) };
                for (out, &j) in wtmp[..nw].iter().zip(&pairs[p..p + nw]) {
                    store(dst, g * ROWS, j % n_used, j / n_used, out);
                }
                p += nw;
            }
        }
        while p < p1 {
            let nr = (p1 - p).min(Kernels::NR);
            let tile = Tile {
                w,
                nb,
                // SAFETY: columns p .. p + nr were prepared before the barrier.
                a: unsafe { cols.add(p * col) },
                a_stride: col,
                out: tmp.as_mut_ptr().cast(),
                out_stride: ROWS * 4,
            };
            // SAFETY: the level's CPU features were checked (kernels_for);
            // group g of expert e is a whole packed group of nb chunks (a
            // packed tensor's ne1 is a multiple of 16); nr prepared columns
            // follow tile.a; tmp holds NR columns of 16 f32.
            unsafe { (kern.tiles[nr - 1])(tile) };
            for (out, &j) in tmp[..nr].iter().zip(&pairs[p..p + nr]) {
                store(dst, g * ROWS, j % n_used, j / n_used, out);
            }
            p += nr;
        }
    }
}

/// Writes the 16 outputs of rows `r0..r0 + 16` of column (`s`, `t`).
fn store(dst: &TView, r0: usize, s: usize, t: usize, out: &[f32; ROWS]) {
    if dst.nb[0] != 4 {
        for (r, &v) in out.iter().enumerate() {
            dst.set_f32(r0 + r, s, t, 0, v);
        }
        return;
    }
    // Both ends are bounds-checked by elem_ptr.
    dst.elem_ptr(r0 + ROWS - 1, s, t, 0);
    let p = dst.elem_ptr(r0, s, t, 0);
    // SAFETY: dst is F32 (supports()) with consecutive elements along ne0,
    // so the 16 outputs are 64 bytes from p, in bounds (both ends checked);
    // this unit is the only writer of these outputs; byte copy, any alignment.
    unsafe { std::ptr::copy_nonoverlapping(out.as_ptr().cast::<u8>(), p, ROWS * 4) };
}

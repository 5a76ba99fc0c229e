//! MUL_MAT with a packed weight: `src0` stored in the layout of
//! [`crate::quant::packed`] (a weight in a `CPU_PACKED` buffer).
//!
//! Activations (`src1`, any float type and strides) are first quantized
//! once per op to the weight's dot type (Q8_0 / Q8_1 / Q8_K, bit-identical
//! to the unpacked path's quantizer), straight into the kernels' per-block
//! layout ([`packed::prepare_activation`]: i8 quants, f32 scale, the block's
//! `-offset · Σq` or Q8_1 sum term; for the K-quants the Q8_K row as is,
//! IQ4_XS's with bias terms in place of its bsums) in
//! the shared work buffer; threads split the columns, then meet at a
//! barrier.
//!
//! The products are then computed in units of one 16-row group × a block of
//! columns (as wide as keeps the activations of a block in an eighth of L2,
//! from the cache sizes detected at run time, `isa::cache::Blocking`; narrow
//! enough to give every thread work): for each unit the tile kernel runs
//! over 8 columns at a time (the weight chunk decoded once per 8 columns,
//! accumulators in registers across K); for token generation (one column)
//! the one-column kernel streams the weights (the hardware prefetcher keeps
//! up: software prefetching measured slower). Units are ordered by
//! plane, column block and group; threads take contiguous ranges of units,
//! so for few columns they split the rows and for many the columns too.
//! Every output is computed by the same per-column arithmetic whatever the
//! tile width or unit, so results do not depend on the thread count.
//!
//! At levels without packed kernels ([`packed::has_kernels`]: scalar,
//! NEON on a CPU without `dotprod`; IQ4_NL and the K-quants on Arm), each
//! unit's 16 rows are unpacked
//! into thread scratch and go through that level's ordinary dot product,
//! bit-identical to the unpacked path at the same level.

use super::claim::{claim_units, CLAIM_BYTES};
use super::{Ctx, NodePlan, WorkSize};
use crate::backend::TensorLayout;
use crate::quant::packed::{self, Kernels, Tile, ROWS};
use crate::quant::simd::{quantize_row_fn_for, vec_dot_fn_for};
use crate::quant::vec_dot_type;
use crate::tensor::{DType, Tensor};

/// Most MUL_MATs [`forward_many`] runs as one (the CPU backend's steps hold
/// at most this many).
pub(crate) const MAX_NODES: usize = 8;

/// `Some(supported)` when `t`'s weight is packed (this path decides), `None`
/// when it is not (the unpacked path decides).
pub(super) fn supports(t: &Tensor) -> Option<bool> {
    let (a, b) = (t.src(0)?, t.src(1)?);
    if a.buffer()?.tensor_layout(a) != TensorLayout::Packed {
        return None;
    }
    Some(t.dtype() == DType::F32 && b.dtype().is_float() && packed::is_packable(a.dtype()))
}

/// Per-thread scratch: an f32 activation row, then bytes for a quantized
/// row or an unpacked 16-row group.
fn scratch_bytes(a_dtype: DType, k: usize) -> (usize, usize) {
    let q = vec_dot_type(a_dtype).row_size(k);
    (k * 4, q.max(ROWS * a_dtype.row_size(k)))
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (a, b) = (node.src(0), node.src(1));
    let k = a.ne[0];
    let cols = b.nrows();
    let (row, bytes) = scratch_bytes(a.dtype, k);
    WorkSize {
        // Either layout of the activations (kernels or fallback), then the
        // units' claim state.
        shared: claim_offset(a.dtype, k, cols) + CLAIM_BYTES,
        per_thread: row + bytes,
    }
}

/// Where the claim state of phase 2 sits in the shared work memory: after
/// the activations of `cols` columns, 64-byte aligned.
fn claim_offset(a_dtype: DType, k: usize, cols: usize) -> usize {
    (cols * packed::act_bytes(a_dtype, k).max(vec_dot_type(a_dtype).row_size(k)))
        .next_multiple_of(64)
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    forward_many(&[node], ctx)
}

/// Whether two packed weight types prepare identical activation columns
/// (same dot type, same per-block layout and offset term), so packed
/// MUL_MATs of the two over one `src1` can share one preparation
/// ([`forward_many`]).
pub(crate) fn same_activations(a: DType, b: DType) -> bool {
    packed::is_packable(a)
        && packed::is_packable(b)
        && vec_dot_type(a) == vec_dot_type(b)
        && packed::act_offset(a) == packed::act_offset(b)
}

/// Several packed MUL_MATs over the same activations (`src1`, one view; the
/// weights' types [`same_activations`]; none reads another's output): the
/// activations are prepared once, then the units of every node are claimed
/// together ([`super::claim`]), so the nodes share one preparation and one barrier
/// and their units balance across threads together (a decode's Q, K and V,
/// or gate and up). Every output is computed by the same arithmetic as
/// [`forward`] of its node alone, so the results are bit-identical.
///
/// Where the level has kernels for some of the weights and not others (or
/// more than [`MAX_NODES`] come), the nodes run one after another (with a
/// barrier between them), as [`forward`] each.
pub(super) fn forward_many(nodes: &[&NodePlan], ctx: &Ctx<'_>) {
    let Some(first) = nodes.first() else {
        return;
    };
    // Each node's kernels, looked up once (not per unit).
    let mut kerns = [None; MAX_NODES];
    for (k, n) in kerns.iter_mut().zip(nodes) {
        *k = packed::kernels_for(ctx.isa, n.src(0).dtype);
    }
    let mixed = kerns
        .iter()
        .take(nodes.len())
        .any(|k| k.is_some() != kerns[0].is_some());
    if nodes.len() > MAX_NODES || mixed {
        for (i, n) in nodes.iter().enumerate() {
            if i > 0 {
                ctx.w.barrier();
                // The previous node's scratch slice is gone (its call
                // returned): hand the thread's scratch out again.
                ctx.scratch_taken.set(false);
            }
            forward_many(&[n], ctx);
        }
        return;
    }
    let (a, b) = (first.src(0), first.src(1));
    debug_assert!(nodes.iter().all(|n| n.src(0).packed));
    let k = a.ne[0];
    let nb = k / a.dtype.block_size();
    let vdt = vec_dot_type(a.dtype);
    let kernels = kerns[0];
    let col_bytes = if kernels.is_some() {
        packed::act_bytes(a.dtype, k)
    } else {
        vdt.row_size(k)
    };
    let n_cols = b.nrows();

    let (row_len, bytes_len) = nodes
        .iter()
        .map(|n| scratch_bytes(n.src(0).dtype, k))
        .fold((0, 0), |(r, l), (r2, l2)| (r.max(r2), l.max(l2)));
    let scratch = ctx.scratch_f32((row_len + bytes_len) / 4);
    let (row, rest) = scratch.split_at_mut(k);
    // SAFETY: `rest` is this thread's f32 scratch (exclusively borrowed); its
    // bytes are reused as a byte buffer of at least bytes_len bytes (work_size).
    let bytes: &mut [u8] =
        unsafe { std::slice::from_raw_parts_mut(rest.as_mut_ptr().cast::<u8>(), bytes_len) };

    // Phase 1: the activations, once, into the shared work buffer.
    let quantize = quantize_row_fn_for(ctx.isa, vdt).expect("Q8_0 / Q8_1 quantize");
    let shared = ctx.shared_ptr();
    let in_place = b.dtype == DType::F32 && b.rows_contiguous();
    for c in ctx.rows(n_cols) {
        let (i1, i2, i3) = b.row_coords(c);
        // SAFETY: the shared buffer holds n_cols columns of col_bytes (work_size);
        // column c is written by this thread only, before the barrier.
        let out = unsafe { std::slice::from_raw_parts_mut(shared.add(c * col_bytes), col_bytes) };
        if let Some(kern) = kernels {
            let x = if in_place {
                b.row_ptr(i1, i2, i3).cast::<f32>().cast_const()
            } else {
                b.load_row(i1, i2, i3, row);
                row.as_ptr()
            };
            // SAFETY: the level's features were checked (kernels_for); x holds the
            // k f32 of the row (a contiguous F32 row of b, or the scratch copy);
            // out is the column's act_bytes.
            unsafe { (kern.quantize)(x, nb, out.as_mut_ptr()) };
        } else {
            b.load_row(i1, i2, i3, row);
            quantize(&row[..k], out);
        }
    }
    // Phase 2: units of one group × a block of columns of one plane, the
    // nodes' units one after another.
    let n_plane = b.ne[1];
    let planes = b.ne[2] * b.ne[3];
    let groups_of = |n: &NodePlan| n.src(0).ne[1] / ROWS;
    let all_groups: usize = nodes.iter().map(|n| groups_of(n)).sum();
    let align = if kernels.is_some_and(|k| k.wide.is_some()) {
        Kernels::WIDE
    } else {
        Kernels::NR
    };
    let width = column_block(
        n_plane,
        col_bytes,
        ctx.blocking.packed_act_bytes,
        planes * all_groups,
        ctx.w.nth.max(1),
        align,
    );
    let blocks = n_plane.div_ceil(width);
    let per_node = |n: &NodePlan| planes * blocks * groups_of(n);
    let units: usize = nodes.iter().map(|n| per_node(n)).sum();
    // SAFETY: the claim state's CLAIM_BYTES are inside the shared work
    // memory (work_size reserves them), 8-aligned (the work memory is u64
    // words and the offset a multiple of 64), used only as this node's
    // claim state. The call is the barrier after phase 1.
    let claims = unsafe { claim_units(shared.add(claim_offset(a.dtype, k, n_cols)), units, ctx) };
    let mut tmp = [[0f32; ROWS]; Kernels::NR];
    for mut u in claims.units() {
        // The node whose units hold u, and u among them.
        let mut i = 0;
        while u >= per_node(nodes[i]) {
            u -= per_node(nodes[i]);
            i += 1;
        }
        let (node, kernels) = (nodes[i], kerns[i]);
        let (a, dst) = (node.src(0), &node.dst);
        let groups = groups_of(node);
        let direct = dst.nb[0] == 4;
        let g = u % groups;
        let (cb, p) = ((u / groups) % blocks, u / groups / blocks);
        let (i12, i13) = (p % b.ne[2], p / b.ne[2]);
        let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
        let w = a.row_ptr(g * ROWS, i12 / r2, i13 / r3);
        let (n0, n1) = (cb * width, ((cb + 1) * width).min(n_plane));
        // SAFETY (all uses): columns p·n_plane + n0 .. n1 were written before the barrier.
        let act = |c: usize| unsafe { shared.add((p * n_plane + c) * col_bytes) };
        let Some(kern) = kernels else {
            fallback(a, w, act, n0, n1, bytes, ctx, |c, out| {
                store(dst, g, c, i12, i13, out)
            });
            continue;
        };
        let tile = |a, out, out_stride| Tile {
            w,
            nb,
            a,
            a_stride: col_bytes,
            out,
            out_stride,
        };
        let mut c = n0;
        if let (Some(wide), true) = (kern.wide, direct) {
            // Whole steps of WIDE columns in one call (the weights decoded
            // once for all of them), the rest by the tiles below.
            let nw = (n1 - c) / Kernels::WIDE * Kernels::WIDE;
            if nw > 0 {
                dst.elem_ptr(g * ROWS + ROWS - 1, c + nw - 1, i12, i13);
                let out = dst.elem_ptr(g * ROWS, c, i12, i13);
                // SAFETY: as the tiles' call below, for nw columns (both
                // corners checked).
                unsafe { wide(tile(act(c), out, dst.nb[1]), nw) };
                c += nw;
            }
        }
        while c < n1 {
            let nr = (n1 - c).min(Kernels::NR);
            let f = kern.tiles[nr - 1];
            if direct {
                // The tile's 16 outputs per column are consecutive f32 of dst.
                dst.elem_ptr(g * ROWS + ROWS - 1, c + nr - 1, i12, i13);
                let out = dst.elem_ptr(g * ROWS, c, i12, i13);
                // SAFETY: the level's CPU features were checked (kernels_for); the
                // group has nb chunks (a is a whole packed tensor); nr prepared
                // columns follow act(c); dst rows g·16 .. g·16+16 of columns
                // c .. c+nr are in bounds (both corners checked) and owned by
                // this unit.
                unsafe { f(tile(act(c), out, dst.nb[1])) };
            } else {
                // SAFETY: as above, into the local tile.
                unsafe { f(tile(act(c), tmp.as_mut_ptr().cast(), ROWS * 4)) };
                for (j, out) in tmp[..nr].iter().enumerate() {
                    store(dst, g, c + j, i12, i13, out);
                }
            }
            c += nr;
        }
    }
}

/// Width of the column blocks: as many columns as keep `act_bytes` of
/// activations ([`Blocking::packed_act_bytes`], an eighth of L2 up to
/// 256 KiB), fewer when `units` (groups × planes) would leave a thread
/// idle; a multiple of the tile width when there are several blocks.
///
/// [`Blocking::packed_act_bytes`]: crate::isa::cache::Blocking::packed_act_bytes
fn column_block(
    n: usize,
    col_bytes: usize,
    act_bytes: usize,
    units: usize,
    nth: usize,
    align: usize,
) -> usize {
    let cache = (act_bytes / col_bytes.max(1)).max(align);
    let mut blocks = n.div_ceil(cache);
    if units * blocks < 2 * nth {
        blocks = (2 * nth).div_ceil(units).min(n.div_ceil(Kernels::NR));
    }
    if blocks <= 1 {
        return n.max(1);
    }
    n.div_ceil(blocks).next_multiple_of(align)
}

/// Stores the 16 outputs of group `g` for column (`c`, `i12`, `i13`).
fn store(dst: &crate::cpu::TView, g: usize, c: usize, i12: usize, i13: usize, out: &[f32; ROWS]) {
    for (r, &v) in out.iter().enumerate() {
        dst.set_f32(g * ROWS + r, c, i12, i13, v);
    }
}

/// One unit at a level without packed kernels: unpack the group, then the
/// level's dot product per row and column (as the unpacked path computes).
#[allow(clippy::too_many_arguments)]
fn fallback(
    a: &crate::cpu::TView,
    w: *const u8,
    act: impl Fn(usize) -> *mut u8,
    n0: usize,
    n1: usize,
    scratch: &mut [u8],
    ctx: &Ctx<'_>,
    mut store: impl FnMut(usize, &[f32; ROWS]),
) {
    let k = a.ne[0];
    let rs = a.dtype.row_size(k);
    let qs = vec_dot_type(a.dtype).row_size(k);
    let dot = vec_dot_fn_for(ctx.isa, a.dtype).expect("packable types have dot products");
    // SAFETY: w is the start of a whole 16-row group of the read-only packed source.
    let group = unsafe { std::slice::from_raw_parts(w, ROWS * rs) };
    let rows = &mut scratch[..ROWS * rs];
    packed::unpack_group(a.dtype, k, group, rows);
    let mut out = [0f32; ROWS];
    for c in n0..n1 {
        // SAFETY: column c was quantized (qs bytes) before the barrier; read-only now.
        let y = unsafe { std::slice::from_raw_parts(act(c), qs) };
        for (o, x) in out.iter_mut().zip(rows.chunks_exact(rs)) {
            *o = dot(k, x, y);
        }
        store(c, &out);
    }
}

#[cfg(test)]
mod tests {
    use super::column_block;
    use crate::isa::cache::{Blocking, CacheSizes};

    #[test]
    fn column_blocks_follow_the_l2() {
        let act = |l2: usize| {
            Blocking::for_caches(CacheSizes {
                l2,
                ..CacheSizes::DEFAULT
            })
            .packed_act_bytes
        };
        // Q8_0 activations: 40 bytes a block of 32; SmolLM2's shapes, a
        // pp512 batch, 2 threads, the 16-column wide tiles.
        // K = 1536 (ffn_down, 36 groups of 576 rows): 1920 bytes a column.
        assert_eq!(column_block(512, 1920, act(2 << 20), 36, 2, 16), 128);
        assert_eq!(column_block(512, 1920, act(512 << 10), 36, 2, 16), 32);
        // K = 576 (ffn_up / gate, 96 groups): 720 bytes a column.
        assert_eq!(column_block(512, 720, act(2 << 20), 96, 2, 16), 256);
        assert_eq!(column_block(512, 720, act(512 << 10), 96, 2, 16), 96);
        // larger caches keep the 2 MiB block
        assert_eq!(column_block(512, 1920, act(32 << 20), 36, 2, 16), 128);
    }
}

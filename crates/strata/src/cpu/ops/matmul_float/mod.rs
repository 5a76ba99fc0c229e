//! MUL_MAT with a float weight (F16 / BF16 / F32) on x86-64 AVX2 and
//! AVX-512: a packed, register-blocked GEMM when `b` has several columns
//! per plane, a several-rows-at-once GEMV when it has one.
//!
//! `dst[m, n] = Σ_k a[k, m] · b[k, n]` with `a` [K, M, ne02, ne03] (rows
//! contiguous) broadcast over `b` [K, N, ne12, ne13] (any strides, F32 /
//! F16 / BF16) in dims 2 and 3, `dst` F32 with contiguous rows.
//!
//! **Numerics.** As ggml does (and as matmul.rs's dot-product path does),
//! the activations are first rounded to the weight's dot type (f16 for F16
//! weights, bf16 for BF16, unchanged for F32); the weights are widened to
//! f32 exactly; every product and sum is f32 with FMA. So the result is the
//! exact dot product of the stored weights with the rounded activations up
//! to f32 accumulation error:
//!
//! * GEMM: each output is a chain of FMAs along k within a K block of at most
//!   [`KC_MAX`] (the blocks are fixed by K alone), block sums added to the
//!   output in order: `|got - exact| <= (K + K / KC_MAX + 1) · u · Σ_k |a_k b_k|`
//!   with `u = 2^-24` (first order; `K · u` is 9.2e-5 for K = 1536, and
//!   the typical error is ~√K smaller).
//! * GEMV: 16 lanes each sum K / 16 products, then a 4-level tree:
//!   `|got - exact| <= (K / 16 + 5) · u · Σ_k |a_k b_k|` (8 lanes and K / 8
//!   at the AVX2 level).
//!
//! Rounding the activations (a relative 2^-11 per f16 value) dominates
//! both; it is kept because it is what the reference implementation
//! computes, and the golden model tests compare with it. Every output is
//! computed by the same instruction sequence whatever thread computes it,
//! so results are bitwise identical for any thread count.
//!
//! **GEMM.** `b`'s columns are converted once (threads split them, then meet
//! at a barrier) into f32 panels of NR columns, k-major (`[k][NR]`, zero
//! padded), in the shared work buffer. Each thread takes a range of (plane,
//! column chunk, MR-row panel) items, packs blocks of up to [`MC`] rows ×
//! K-block of `a` (widened to f32, k-major per MR-row panel) in its own work
//! memory, and runs an MR × NR micro-kernel that keeps the whole output tile
//! in registers across the K block (AVX-512: 32 × 12, 24 zmm accumulators;
//! AVX2: 16 × 6, 12 ymm) and adds it to `dst` with masked stores at the M
//! edge. Within a K block the columns go in passes whose `b` panels fill at
//! most half of L2 ([`Blocking`](crate::isa::cache::Blocking), from the
//! cache sizes detected at run time: one pass for a 512-column batch with a
//! 2 MiB L2, two or three with Zen 3's 512 KiB), so that every row panel
//! reads them from L2. Threads split over rows of `a` when there are enough
//! row panels to balance, else over columns of `b` as well. Neither the
//! passes nor the split change what a tile computes.
//!
//! **GEMV.** Eight rows of `a` at a time against one f32 activation row,
//! read one row after the other (sequential memory), four accumulator
//! registers per row (lanes along k), and one transposing reduction for the
//! eight rows at the end; threads split the row groups and each converts
//! the activation rows it needs itself (no barrier).

use super::claim::{claim_units, CLAIM_BYTES};
use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::vector;
use crate::cpu::TView;
use crate::isa::Isa;
use crate::tensor::DType;

/// Largest K block of the GEMM (the blocks of a given K are equal-sized).
pub(crate) const KC_MAX: usize = 256;
/// Rows of `a` per packed block: a multiple of every level's MR.
const MC: usize = 256;
/// The largest NR of any level (sizes the shared work buffer).
const NR_MAX: usize = 12;
/// Row panels per unit the GEMM's threads claim ([`super::claim`]).
const CLAIM_PANELS: usize = 4;
/// Rows per GEMV step.
const GEMV_ROWS: usize = 8;

/// Weight type tags of the kernels (const generic tags, and indices of
/// [`Kernels::pack`] and [`Kernels::gemv8`]).
const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// The tag of weight type `dtype` (F32, F16 or BF16).
fn tag(dtype: DType) -> u8 {
    match dtype {
        DType::F16 => F16,
        DType::BF16 => BF16,
        _ => F32,
    }
}

/// The largest MR of any level (sizes a panel's row pointers).
const MR_MAX: usize = 32;

/// The float GEMM's and GEMV's kernels at one level (its `isa::Table`
/// entry, declared in `x86.rs`): the micro-kernel's shape and the kernels,
/// each needing the level's CPU features (a table exists only for a level
/// this CPU runs).
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    /// Rows of `a` per micro-tile and packed panel (a divisor of [`MC`]).
    mr: usize,
    /// Columns of `b` per micro-tile (at most [`NR_MAX`]).
    nr: usize,
    /// The `mr × nr` micro-kernel ([`Tile`]).
    tile: unsafe fn(&Tile),
    /// `(kc, rows, out)`: packs `kc` weights of each of the `mr` rows
    /// (`rows[i]`: row i's first, each covering kc elements) into
    /// `out[kk * mr + i]` as f32 (room for `kc * mr`); per weight [`tag`].
    pack: [unsafe fn(usize, &[*const u8], *mut f32); 3],
    /// `(k, rows, x)`: the dot products of eight rows of `k` weights with
    /// `x` (`k` values of the weight's type); per weight [`tag`].
    gemv8: [GemvFn; 3],
    /// `(nr, nv, k, src, out)`: packs the f32 rows `src[j * k ..][..k]`,
    /// `j < nv <= nr <= 16`, into the `[k][nr]` panel `out`, zeros past
    /// `nv`.
    pack_b: unsafe fn(usize, usize, usize, *const f32, *mut f32),
}

/// A GEMV kernel ([`Kernels::gemv8`]).
type GemvFn = unsafe fn(usize, &[*const u8; GEMV_ROWS], *const u8) -> [f32; GEMV_ROWS];

/// Level `isa`'s own GEMM kernels, without the fallback (its entry in
/// `isa::Table`; none but at the two lane levels of x86).
pub(crate) fn own(isa: Isa) -> Option<Kernels> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(x86::AVX2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(x86::AVX512),
        _ => None,
    }
}

/// The GEMM kernels of level `isa`, if it has them on this CPU.
fn kernels(isa: Isa) -> Option<&'static Kernels> {
    crate::isa::table(isa)?.gemm.as_ref()
}

/// True when the node's types and layout are ones this file computes (at
/// some level): float weights with contiguous rows, float activations, an
/// F32 destination with contiguous rows, K > 0.
pub(super) fn eligible(node: &NodePlan) -> bool {
    let (a, b, d) = (node.src(0), node.src(1), &node.dst);
    let float = |t: DType| matches!(t, DType::F32 | DType::F16 | DType::BF16);
    float(a.dtype)
        && float(b.dtype)
        && d.dtype == DType::F32
        && d.nb[0] == 4
        && a.rows_contiguous()
        && a.ne[0] == b.ne[0]
        && a.ne[0] > 0
}

/// True when this file computes `node` at the context's level.
pub(super) fn handles(node: &NodePlan, ctx: &Ctx<'_>) -> bool {
    eligible(node) && kernels(ctx.isa).is_some()
}

/// Work memory: enough for this file at any level and for matmul.rs's path
/// (which runs the same node when the level has no kernel here).
pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (a, b) = (node.src(0), node.src(1));
    let (k, n) = (a.ne[0], b.ne[1]);
    let planes = b.ne[2] * b.ne[3];
    // the GEMM's: the b panels, then the claim state (CLAIM_BYTES); a
    // batch-invariant backend runs one column through it too
    let gemm = WorkSize {
        shared: (planes * n.div_ceil(NR_MAX) * NR_MAX * k).next_multiple_of(16) * 4 + CLAIM_BYTES,
        per_thread: (MC * KC_MAX + KC_MAX + k) * 4,
    };
    let ours = if n == 1 {
        WorkSize {
            shared: gemm.shared,
            per_thread: gemm.per_thread.max(2 * k * 4),
        }
    } else {
        gemm
    };
    let dots = WorkSize {
        shared: crate::quant::vec_dot_type(a.dtype).row_size(k) * b.nrows(),
        per_thread: k * 4,
    };
    WorkSize {
        shared: ours.shared.max(dots.shared),
        per_thread: ours.per_thread.max(dots.per_thread),
    }
}

/// Computes this thread's share of `node` (call only when [`handles`]).
///
/// One column takes the GEMV unless the backend is batch-invariant: the
/// GEMV sums in lanes along k, the GEMM in one FMA chain per output, so a
/// token's row would change with the number of columns beside it.
pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let g = kernels(ctx.isa).expect("handles() checked the level");
    if node.src(1).ne[1] == 1 && !ctx.batch_invariant {
        gemv(node, ctx, g);
    } else {
        gemm(node, ctx, g);
    }
}

/// Loads column (i11, i12, i13) of `b` as f32 rounded to `a`'s dot type.
fn load_column(
    a_type: DType,
    b: &TView,
    i11: usize,
    i12: usize,
    i13: usize,
    isa: Isa,
    out: &mut [f32],
) {
    b.load_row(i11, i12, i13, out);
    if b.dtype != a_type {
        match a_type {
            DType::F16 => vector::round_to_f16(isa, out),
            DType::BF16 => vector::round_to_bf16(out),
            _ => {}
        }
    }
}

/// Widens `n` weights starting at element `k0` of `row` (a row of `dtype`) to f32.
fn widen(isa: Isa, dtype: DType, row: &[u8], k0: usize, out: &mut [f32]) {
    let n = out.len();
    match dtype {
        DType::F16 => {
            vector::f16_to_f32_row(isa, &row[2 * k0..2 * (k0 + n)], out).expect(vector::SIZED)
        }
        DType::BF16 => {
            vector::bf16_to_f32_row(isa, &row[2 * k0..2 * (k0 + n)], out).expect(vector::SIZED)
        }
        _ => {
            for (o, c) in out
                .iter_mut()
                .zip(row[4 * k0..4 * (k0 + n)].chunks_exact(4))
            {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
}

/// The K blocks: `(start, len)`, equal-sized (the last may be shorter), at most KC_MAX.
fn k_blocks(k: usize) -> impl Iterator<Item = (usize, usize)> {
    let nb = k.div_ceil(KC_MAX).max(1);
    let kc = k.div_ceil(nb);
    (0..nb)
        .map(move |i| (i * kc, kc.min(k - (i * kc).min(k))))
        .filter(|&(_, l)| l > 0)
}

fn gemm(node: &NodePlan, ctx: &Ctx<'_>, g: &Kernels) {
    let (a, b, d) = (node.src(0), node.src(1), &node.dst);
    let (k, m, n) = (a.ne[0], a.ne[1], b.ne[1]);
    let (mr, nr) = (g.mr, g.nr);
    let planes = b.ne[2] * b.ne[3];
    let npan = n.div_ceil(nr);
    let panel_len = k * nr;
    let scratch = ctx.scratch_f32(MC * KC_MAX + KC_MAX + k);
    let (apack, rest) = scratch.split_at_mut(MC * KC_MAX);
    let (tmp, row) = rest.split_at_mut(KC_MAX);
    let bpack = ctx.shared_ptr().cast::<f32>();

    // 1. b → f32 panels [k][nr], threads split the panels.
    for pp in ctx.rows(planes * npan) {
        let (plane, jp) = (pp / npan, pp % npan);
        let (i12, i13) = (plane % b.ne[2], plane / b.ne[2]);
        // SAFETY: the shared buffer holds planes * npan panels of panel_len
        // f32 (work_size, with NR_MAX >= nr) and is 64-byte aligned; panel pp
        // is written by this thread only, before the barrier.
        let pan = unsafe { std::slice::from_raw_parts_mut(bpack.add(pp * panel_len), panel_len) };
        if nr * k <= apack.len() {
            // The columns as f32 rows in the (still unused) a-panel scratch,
            // then transposed into the panel.
            let nv = nr.min(n - jp * nr);
            for (j, col) in apack.chunks_exact_mut(k).take(nv).enumerate() {
                load_column(a.dtype, b, jp * nr + j, i12, i13, ctx.isa, col);
            }
            // SAFETY: the table's kernel runs on this CPU; nv <= nr <= 16;
            // apack holds nv * k values, pan k * nr.
            unsafe { (g.pack_b)(nr, nv, k, apack.as_ptr(), pan.as_mut_ptr()) };
            continue;
        }
        for j in 0..nr {
            let col = jp * nr + j;
            if col < n {
                load_column(a.dtype, b, col, i12, i13, ctx.isa, row);
                for (kk, &v) in row.iter().enumerate() {
                    pan[kk * nr + j] = v;
                }
            } else {
                for kk in 0..k {
                    pan[kk * nr + j] = 0.0;
                }
            }
        }
    }
    // 2. Items (plane, column chunk, row panel), row panels fastest, claimed
    // in units of CLAIM_PANELS ([`super::claim`]: a thread slowed by another
    // process takes fewer); a tile's result does not depend on the thread.
    let nth = ctx.w.nth.max(1);
    let m_panels = m.div_ceil(mr);
    let work_m = planes * m_panels;
    let n_chunks = if work_m >= 4 * nth || work_m.is_multiple_of(nth) {
        1
    } else {
        nth.min(npan)
    };
    let per_plane = n_chunks * m_panels;
    let n_items = planes * per_plane;
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    // SAFETY: the claim state's CLAIM_BYTES follow the panels in the shared
    // buffer (work_size), 8-byte aligned (panel_len is a multiple of 2 f32
    // for every level's nr); only accessed as this node's claim state. The
    // call is the barrier after the panels.
    let claims = unsafe {
        let at = bpack.add((planes * npan * panel_len).next_multiple_of(16));
        claim_units(at.cast::<u8>(), n_items.div_ceil(CLAIM_PANELS), ctx)
    };
    for unit in claims.units() {
        let items = unit * CLAIM_PANELS..(n_items).min((unit + 1) * CLAIM_PANELS);
        let mut it = items.start;
        while it < items.end {
            let (plane, rem) = (it / per_plane, it % per_plane);
            let (chunk, p0) = (rem / m_panels, rem % m_panels);
            let p1 = m_panels.min(p0 + (items.end - it));
            it += p1 - p0;
            let (i12, i13) = (plane % b.ne[2], plane / b.ne[2]);
            let (i02, i03) = (i12 / r2, i13 / r3);
            let (jp0, jp1) = (chunk * npan / n_chunks, (chunk + 1) * npan / n_chunks);
            if jp0 == jp1 {
                continue;
            }
            let mc_panels = MC / mr;
            for ib in (p0..p1).step_by(mc_panels) {
                let ie = (ib + mc_panels).min(p1);
                for (pc, kc) in k_blocks(k) {
                    pack_a(
                        ctx.isa,
                        g,
                        a,
                        (i02, i03),
                        (ib * mr, m.min(ie * mr)),
                        ie - ib,
                        (pc, kc),
                        apack,
                        tmp,
                    );
                    // Column passes: the b panels of one pass (at most
                    // Blocking::gemm_b_bytes, half of L2) are read once per
                    // row panel, so they stay in L2 across the row panels.
                    // One pass when they fit (a 512-column batch with a
                    // 2 MiB L2); equal passes otherwise. A tile's sum over
                    // the K blocks is the same in any pass order.
                    let npass_max = ctx.blocking.gemm_pass_panels(kc, nr);
                    let passes = (jp1 - jp0).div_ceil(npass_max);
                    let per_pass = (jp1 - jp0).div_ceil(passes);
                    for q0 in (jp0..jp1).step_by(per_pass) {
                        let q1 = jp1.min(q0 + per_pass);
                        // Row panel outermost: its a panel (kc · mr f32) stays
                        // in L1 while the pass's b panels, a third of its bytes
                        // per k step, stream past it from L2.
                        for ip in ib..ie {
                            let mv = mr.min(m - ip * mr);
                            let ap = apack[(ip - ib) * kc * mr..].as_ptr();
                            for jp in q0..q1 {
                                let nv = nr.min(n - jp * nr);
                                // SAFETY: panel (plane, jp) lies in the shared buffer
                                // (filled before the barrier, read-only now); pc + kc <= k.
                                let bp =
                                    unsafe { bpack.add((plane * npan + jp) * panel_len + pc * nr) };
                                let c = d.elem_ptr(ip * mr, jp * nr, i12, i13);
                                // The tile's last element is inside dst (bounds-checked).
                                d.elem_ptr(ip * mr + mv - 1, jp * nr + nv - 1, i12, i13);
                                // SAFETY: ap holds kc * mr packed values, bp kc * nr; the
                                // tile (mv rows × nv columns at stride nb[1]) is inside dst
                                // (both corners checked) and owned by this thread; the
                                // table's kernel runs on this CPU.
                                unsafe {
                                    let t = Tile {
                                        kc,
                                        a: ap,
                                        b: bp,
                                        c,
                                        ldc: d.nb[1],
                                        mv,
                                        nv,
                                        add: pc > 0,
                                    };
                                    (g.tile)(&t)
                                };
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Packs rows `rows.0 .. rows.1` of plane `plane` of `a`, columns
/// `kb.0 .. kb.0 + kb.1`, as `panels` panels of `mr` rows, k-major
/// (`out[p][kk][i]`), zero rows past `rows.1`.
#[allow(clippy::too_many_arguments)]
fn pack_a(
    isa: Isa,
    g: &Kernels,
    a: &TView,
    plane: (usize, usize),
    rows: (usize, usize),
    panels: usize,
    kb: (usize, usize),
    out: &mut [f32],
    tmp: &mut [f32],
) {
    let (pc, kc) = kb;
    let mr = g.mr;
    let tmp = &mut tmp[..kc];
    let pack = g.pack[tag(a.dtype) as usize];
    for p in 0..panels {
        let pan = &mut out[p * kc * mr..(p + 1) * kc * mr];
        let r0 = rows.0 + p * mr;
        if r0 + mr <= rows.1 {
            let es = a.dtype.type_size();
            let row: [*const u8; MR_MAX] = std::array::from_fn(|i| {
                if i < mr {
                    // SAFETY: a is a read-only source with contiguous rows;
                    // row r0 + i < rows.1 <= M (i < mr).
                    unsafe { a.row_bytes(r0 + i, plane.0, plane.1).as_ptr().add(es * pc) }
                } else {
                    std::ptr::null()
                }
            });
            // SAFETY: the table's kernel runs on this CPU; each of the mr row
            // pointers has kc elements from pc (pc + kc <= K); pan holds
            // kc * mr values.
            unsafe { pack(kc, &row[..mr], pan.as_mut_ptr()) };
            continue;
        }
        for i in 0..mr {
            let r = r0 + i;
            if r < rows.1 {
                // SAFETY: a is a read-only source with contiguous rows.
                let bytes = unsafe { a.row_bytes(r, plane.0, plane.1) };
                widen(isa, a.dtype, bytes, pc, tmp);
                for (kk, &v) in tmp.iter().enumerate() {
                    pan[kk * mr + i] = v;
                }
            } else {
                for kk in 0..kc {
                    pan[kk * mr + i] = 0.0;
                }
            }
        }
    }
}

/// One micro-kernel call ([`Kernels::tile`]): `c[j][i] (+)= Σ_kk a[kk][i] · b[kk][j]` for
/// i < mv, j < nv over `kc` steps of the packed panels `a` (mr values per
/// step) and `b` (nr per step); `c` is element (0, 0) of the f32 tile, its
/// columns `ldc` bytes apart; `add`: add to `c` instead of storing. The
/// tile is `mr × nr` of the level's kernels (mv <= mr, nv <= nr), and
/// this thread owns it.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Tile {
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut u8,
    ldc: usize,
    mv: usize,
    nv: usize,
    add: bool,
}

fn gemv(node: &NodePlan, ctx: &Ctx<'_>, g: &Kernels) {
    let (a, b, d) = (node.src(0), node.src(1), &node.dst);
    let (k, m) = (a.ne[0], a.ne[1]);
    let planes = b.ne[2] * b.ne[3];
    let direct = b.dtype == DType::F32 && b.rows_contiguous() && a.dtype == DType::F32;
    // Each thread converts the activation rows of its own planes into its
    // scratch (K values: cheaper than the barrier sharing them would cost).
    // The activations are kept in the weight's type (exact: they were
    // rounded to it), so the kernel reads them as it reads the weights:
    // half the bytes per row pass for F16/BF16, measured faster from DRAM.
    let scratch = ctx.scratch_f32(2 * k);
    let (row, xt) = scratch.split_at_mut(k);
    // SAFETY: xt is k f32 = 4k bytes of this thread's scratch, reused as bytes.
    let xt: &mut [u8] =
        unsafe { std::slice::from_raw_parts_mut(xt.as_mut_ptr().cast::<u8>(), 4 * k) };
    let es = a.dtype.type_size();
    let mut converted: Option<usize> = None;
    let groups = m.div_ceil(GEMV_ROWS);
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let gemv8 = g.gemv8[tag(a.dtype) as usize];
    for it in ctx.rows(planes * groups) {
        let (plane, g0) = (it / groups, (it % groups) * GEMV_ROWS);
        let (i12, i13) = (plane % b.ne[2], plane / b.ne[2]);
        let (i02, i03) = (i12 / r2, i13 / r3);
        let x: *const u8 = if direct {
            b.row_ptr(0, i12, i13)
        } else {
            if converted != Some(plane) {
                load_column(a.dtype, b, 0, i12, i13, ctx.isa, row);
                let xb = &mut xt[..es * k];
                match a.dtype {
                    DType::F16 => vector::f32_to_f16_row(ctx.isa, row, xb).expect(vector::SIZED),
                    DType::BF16 => vector::f32_to_bf16_row(ctx.isa, row, xb).expect(vector::SIZED),
                    _ => {
                        for (c, v) in xb.chunks_exact_mut(4).zip(row.iter()) {
                            c.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
                converted = Some(plane);
            }
            xt.as_ptr()
        };
        let rows: [*const u8; GEMV_ROWS] =
            std::array::from_fn(|r| a.row_ptr((g0 + r).min(m - 1), i02, i03).cast_const());
        // SAFETY: the table's kernel for a.dtype runs on this CPU; every row
        // pointer has K weights of a.dtype (contiguous rows), x K values of
        // it.
        let out = unsafe { gemv8(k, &rows, x) };
        let mv = GEMV_ROWS.min(m - g0);
        let p = d.elem_ptr(g0, 0, i12, i13);
        d.elem_ptr(g0 + mv - 1, 0, i12, i13);
        // SAFETY: elements g0 .. g0 + mv of this dst row are in bounds
        // (both ends checked; rows contiguous) and owned by this thread.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), p.cast::<f32>(), mv) };
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

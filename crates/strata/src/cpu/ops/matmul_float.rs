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
//! edge. Threads split over rows of `a` when there are enough row panels to
//! balance, else over columns of `b` as well.
//!
//! **GEMV.** Eight rows of `a` at a time against one f32 activation row,
//! read one row after the other (sequential memory), four accumulator
//! registers per row (lanes along k), and one transposing reduction for the
//! eight rows at the end; threads split the row groups and each converts
//! the activation rows it needs itself (no barrier).

use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::vector::{self, Level};
use crate::cpu::TView;
use crate::quant::simd::Isa;
use crate::tensor::DType;

/// Largest K block of the GEMM (the blocks of a given K are equal-sized).
pub(crate) const KC_MAX: usize = 256;
/// Rows of `a` per packed block: a multiple of every level's MR.
const MC: usize = 256;
/// The largest NR of any level (sizes the shared work buffer).
const NR_MAX: usize = 12;
/// Rows per GEMV step.
const GEMV_ROWS: usize = 8;

/// A level's micro-kernel shape.
#[derive(Clone, Copy, Debug)]
struct Geom {
    mr: usize,
    nr: usize,
    level: Level,
}

fn geom(isa: Isa) -> Option<Geom> {
    match vector::level(isa) {
        #[cfg(target_arch = "x86_64")]
        level @ Level::Avx512 => Some(Geom {
            mr: 32,
            nr: 12,
            level,
        }),
        #[cfg(target_arch = "x86_64")]
        level @ Level::Avx2 => Some(Geom {
            mr: 16,
            nr: 6,
            level,
        }),
        _ => None,
    }
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
    !ctx.legacy && eligible(node) && geom(ctx.isa).is_some()
}

/// Work memory: enough for this file at any level and for matmul.rs's path
/// (which runs the same node when the level has no kernel here).
pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (a, b) = (node.src(0), node.src(1));
    let (k, n) = (a.ne[0], b.ne[1]);
    let planes = b.ne[2] * b.ne[3];
    let ours = if n == 1 {
        WorkSize {
            shared: 0,
            per_thread: 2 * k * 4,
        }
    } else {
        WorkSize {
            shared: planes * n.div_ceil(NR_MAX) * NR_MAX * k * 4,
            per_thread: (MC * KC_MAX + KC_MAX + k) * 4,
        }
    };
    let legacy = WorkSize {
        shared: crate::quant::vec_dot_type(a.dtype).row_size(k) * b.nrows(),
        per_thread: k * 4,
    };
    WorkSize {
        shared: ours.shared.max(legacy.shared),
        per_thread: ours.per_thread.max(legacy.per_thread),
    }
}

/// Computes this thread's share of `node` (call only when [`handles`]).
pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let g = geom(ctx.isa).expect("handles() checked the level");
    if node.src(1).ne[1] == 1 {
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

fn gemm(node: &NodePlan, ctx: &Ctx<'_>, g: Geom) {
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
    ctx.w.barrier();

    // 2. Items (plane, column chunk, row panel), row panels fastest.
    let nth = ctx.w.nth.max(1);
    let m_panels = m.div_ceil(mr);
    let work_m = planes * m_panels;
    let n_chunks = if work_m >= 4 * nth || work_m.is_multiple_of(nth) {
        1
    } else {
        nth.min(npan)
    };
    let per_plane = n_chunks * m_panels;
    let items = ctx.rows(planes * per_plane);
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
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
                    a,
                    (i02, i03),
                    (ib * mr, m.min(ie * mr)),
                    ie - ib,
                    mr,
                    (pc, kc),
                    apack,
                    tmp,
                );
                for jp in jp0..jp1 {
                    let nv = nr.min(n - jp * nr);
                    // SAFETY: panel (plane, jp) lies in the shared buffer
                    // (filled before the barrier, read-only now); pc + kc <= k.
                    let bp = unsafe { bpack.add((plane * npan + jp) * panel_len + pc * nr) };
                    for ip in ib..ie {
                        let mv = mr.min(m - ip * mr);
                        let ap = apack[(ip - ib) * kc * mr..].as_ptr();
                        let c = d.elem_ptr(ip * mr, jp * nr, i12, i13);
                        // The tile's last element is inside dst (bounds-checked).
                        d.elem_ptr(ip * mr + mv - 1, jp * nr + nv - 1, i12, i13);
                        // SAFETY: ap holds kc * mr packed values, bp kc * nr; the
                        // tile (mv rows × nv columns at stride nb[1]) is inside dst
                        // (both corners checked) and owned by this thread; the level
                        // was checked by geom().
                        unsafe { kernel(g, kc, ap, bp, c, d.nb[1], mv, nv, pc > 0) };
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
    a: &TView,
    plane: (usize, usize),
    rows: (usize, usize),
    panels: usize,
    mr: usize,
    kb: (usize, usize),
    out: &mut [f32],
    tmp: &mut [f32],
) {
    let (pc, kc) = kb;
    let tmp = &mut tmp[..kc];
    for p in 0..panels {
        let pan = &mut out[p * kc * mr..(p + 1) * kc * mr];
        let r0 = rows.0 + p * mr;
        #[cfg(target_arch = "x86_64")]
        if vector::level(isa) == Level::Avx512 && mr == 32 && r0 + mr <= rows.1 {
            let es = a.dtype.type_size();
            let ptrs: [*const u8; 32] = std::array::from_fn(|i| {
                // SAFETY: a is a read-only source with contiguous rows; row r0 + i < rows.1 <= M.
                unsafe { a.row_bytes(r0 + i, plane.0, plane.1).as_ptr().add(es * pc) }
            });
            let out = pan.as_mut_ptr();
            // SAFETY: AVX-512 checked by level(); each row pointer has kc
            // elements from pc (pc + kc <= K); pan holds kc * 32 values.
            unsafe {
                match a.dtype {
                    DType::F16 => x86::pack32_avx512::<{ x86::F16 }>(kc, &ptrs, out),
                    DType::BF16 => x86::pack32_avx512::<{ x86::BF16 }>(kc, &ptrs, out),
                    _ => x86::pack32_avx512::<{ x86::F32 }>(kc, &ptrs, out),
                }
            }
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

/// Runs the level's micro-kernel on one tile.
///
/// # Safety
/// The level must be runnable; `a` holds `kc * mr` packed f32, `b` `kc * nr`
/// (rows of `nr`, panel-strided); `c` is element (0, 0) of an `mv` × `nv`
/// tile of f32 with column stride `ldc` bytes that this thread owns.
#[allow(clippy::too_many_arguments)]
// only x86-64 has float GEMM tiles; elsewhere `geom()` never picks this path
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
#[inline]
unsafe fn kernel(
    g: Geom,
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut u8,
    ldc: usize,
    mv: usize,
    nv: usize,
    add: bool,
) {
    match g.level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded contract.
        Level::Avx512 => unsafe { x86::kernel_32x12(kc, a, b, c, ldc, mv, nv, add) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded contract.
        Level::Avx2 => unsafe { x86::kernel_16x6(kc, a, b, c, ldc, mv, nv, add) },
        Level::Portable => unreachable!("geom() has no portable kernel"),
    }
}

fn gemv(node: &NodePlan, ctx: &Ctx<'_>, g: Geom) {
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
        // SAFETY: every row pointer has K weights of a.dtype (contiguous
        // rows); x has K f32; the level was checked by geom().
        let out = unsafe { gemv_rows(g.level, a.dtype, k, &rows, x) };
        let mv = GEMV_ROWS.min(m - g0);
        let p = d.elem_ptr(g0, 0, i12, i13);
        d.elem_ptr(g0 + mv - 1, 0, i12, i13);
        // SAFETY: elements g0 .. g0 + mv of this dst row are in bounds
        // (both ends checked; rows contiguous) and owned by this thread.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), p.cast::<f32>(), mv) };
    }
}

/// Eight dot products of `rows` (K weights of `dtype` each) with `x`.
///
/// # Safety
/// The level must be runnable; every pointer covers K elements.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
unsafe fn gemv_rows(
    level: Level,
    dtype: DType,
    k: usize,
    rows: &[*const u8; GEMV_ROWS],
    x: *const u8,
) -> [f32; GEMV_ROWS] {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded contract.
        Level::Avx512 => unsafe {
            match dtype {
                DType::F16 => x86::gemv8_avx512::<{ x86::F16 }>(k, rows, x),
                DType::BF16 => x86::gemv8_avx512::<{ x86::BF16 }>(k, rows, x),
                _ => x86::gemv8_avx512::<{ x86::F32 }>(k, rows, x),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded contract.
        Level::Avx2 => unsafe {
            match dtype {
                DType::F16 => x86::gemv8_avx2::<{ x86::F16 }>(k, rows, x),
                DType::BF16 => x86::gemv8_avx2::<{ x86::BF16 }>(k, rows, x),
                _ => x86::gemv8_avx2::<{ x86::F32 }>(k, rows, x),
            }
        },
        Level::Portable => unreachable!("geom() has no portable kernel"),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86 micro-kernels. Each `unsafe fn` requires its `target_feature`
    //! set (checked by the caller through `geom`) and pointers covering the
    //! documented extents.

    use crate::cpu::vector::x86::mask16;
    use std::arch::x86_64::*;

    /// Weight element types of the GEMV kernels (const generic tags).
    pub(super) const F32: u8 = 0;
    pub(super) const F16: u8 = 1;
    pub(super) const BF16: u8 = 2;

    /// 32 × 12 tile: `c[j][i] (+)= Σ_kk a[kk][i] · b[kk][j]` for i < mv, j < nv.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; see `super::kernel`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn kernel_32x12(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut u8,
        ldc: usize,
        mv: usize,
        nv: usize,
        add: bool,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; 12];
        let (mut pa, mut pb) = (a, b);
        for _ in 0..kc {
            // SAFETY: 32 packed values at pa and 12 at pb (kc steps in all).
            unsafe {
                let a0 = _mm512_loadu_ps(pa);
                let a1 = _mm512_loadu_ps(pa.add(16));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let bj = _mm512_set1_ps(*pb.add(j));
                    acc[0] = _mm512_fmadd_ps(a0, bj, acc[0]);
                    acc[1] = _mm512_fmadd_ps(a1, bj, acc[1]);
                }
                pa = pa.add(32);
                pb = pb.add(12);
            }
        }
        let (m0, m1) = (mask16(mv), mask16(mv.saturating_sub(16)));
        for (j, acc) in acc.iter().enumerate().take(nv) {
            // SAFETY: column j < nv of the tile, rows masked to mv.
            unsafe {
                let cj = c.add(j * ldc).cast::<f32>();
                let (mut v0, mut v1) = (acc[0], acc[1]);
                if add {
                    v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cj), v0);
                    v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cj.add(16)), v1);
                }
                _mm512_mask_storeu_ps(cj, m0, v0);
                _mm512_mask_storeu_ps(cj.add(16), m1, v1);
            }
        }
    }

    /// 16 × 6 tile (AVX2), as [`kernel_32x12`].
    ///
    /// # Safety
    /// AVX2 + FMA; see `super::kernel`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn kernel_16x6(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut u8,
        ldc: usize,
        mv: usize,
        nv: usize,
        add: bool,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; 6];
        let (mut pa, mut pb) = (a, b);
        for _ in 0..kc {
            // SAFETY: 16 packed values at pa and 6 at pb (kc steps in all).
            unsafe {
                let a0 = _mm256_loadu_ps(pa);
                let a1 = _mm256_loadu_ps(pa.add(8));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let bj = _mm256_broadcast_ss(&*pb.add(j));
                    acc[0] = _mm256_fmadd_ps(a0, bj, acc[0]);
                    acc[1] = _mm256_fmadd_ps(a1, bj, acc[1]);
                }
                pa = pa.add(16);
                pb = pb.add(6);
            }
        }
        for (j, acc) in acc.iter().enumerate().take(nv) {
            // SAFETY: column j < nv of the tile; full stores only when mv == 16.
            unsafe {
                let cj = c.add(j * ldc).cast::<f32>();
                if mv == 16 {
                    let (mut v0, mut v1) = (acc[0], acc[1]);
                    if add {
                        v0 = _mm256_add_ps(_mm256_loadu_ps(cj), v0);
                        v1 = _mm256_add_ps(_mm256_loadu_ps(cj.add(8)), v1);
                    }
                    _mm256_storeu_ps(cj, v0);
                    _mm256_storeu_ps(cj.add(8), v1);
                } else {
                    let mut t = [0f32; 16];
                    _mm256_storeu_ps(t.as_mut_ptr(), acc[0]);
                    _mm256_storeu_ps(t.as_mut_ptr().add(8), acc[1]);
                    for (i, &v) in t.iter().enumerate().take(mv) {
                        let p = cj.add(i);
                        *p = if add { *p + v } else { v };
                    }
                }
            }
        }
    }

    /// Transposes 16 rows of 16 f32 (`r[i]` lane j → `out[j]` lane i).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // 2×2 blocks of single elements, then of pairs, then 128-bit lanes twice.
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            u[4 * i] = _mm512_shuffle_ps::<0x44>(a, c);
            u[4 * i + 1] = _mm512_shuffle_ps::<0xee>(a, c);
            u[4 * i + 2] = _mm512_shuffle_ps::<0x44>(b, d);
            u[4 * i + 3] = _mm512_shuffle_ps::<0xee>(b, d);
        }
        // u[4g + q] holds, in 128-bit lane L, elements 4L..4L+4 of column
        // q' of rows 4g..4g+4, with q' = [0, 1, 2, 3][q] per lane L.
        let mut v = [_mm512_setzero_ps(); 16];
        for q in 0..4 {
            let (a, b, c, d) = (u[q], u[4 + q], u[8 + q], u[12 + q]);
            v[q] = _mm512_shuffle_f32x4::<0x88>(a, b);
            v[4 + q] = _mm512_shuffle_f32x4::<0xdd>(a, b);
            v[8 + q] = _mm512_shuffle_f32x4::<0x88>(c, d);
            v[12 + q] = _mm512_shuffle_f32x4::<0xdd>(c, d);
        }
        let mut o = [_mm512_setzero_ps(); 16];
        for q in 0..4 {
            o[q] = _mm512_shuffle_f32x4::<0x88>(v[q], v[8 + q]);
            o[8 + q] = _mm512_shuffle_f32x4::<0xdd>(v[q], v[8 + q]);
            o[4 + q] = _mm512_shuffle_f32x4::<0x88>(v[4 + q], v[12 + q]);
            o[12 + q] = _mm512_shuffle_f32x4::<0xdd>(v[4 + q], v[12 + q]);
        }
        o
    }

    /// Packs 32 rows of `kc` weights of type `T` (`rows[i]` → element kk)
    /// into `out[kk * 32 + i]` as f32: sixteen-by-sixteen register
    /// transposes, masked for the last partial group of k.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; each row pointer covers kc elements; `out` has room for kc * 32 f32.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn pack32_avx512<const T: u8>(
        kc: usize,
        rows: &[*const u8; 32],
        out: *mut f32,
    ) {
        let mut k0 = 0;
        while k0 < kc {
            let w = (kc - k0).min(16);
            let m = mask16(w);
            for half in 0..2 {
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, v) in r.iter_mut().enumerate() {
                    // SAFETY: lanes in m are elements k0 .. k0 + w < kc of row 16·half + i.
                    *v = unsafe { load_w512::<T>(rows[16 * half + i], k0, m) };
                }
                let t = transpose16(r);
                for (j, v) in t.iter().enumerate().take(w) {
                    // SAFETY: kk = k0 + j < kc: 16 values at out[kk * 32 + 16·half].
                    unsafe { _mm512_storeu_ps(out.add((k0 + j) * 32 + 16 * half), *v) };
                }
            }
            k0 += 16;
        }
    }

    /// Loads up to sixteen weights of type `T` at element `i` (lanes in `m`) as f32.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load_w512<const T: u8>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
        // SAFETY: the caller guarantees the lanes in m are in bounds.
        unsafe {
            match T {
                F16 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.add(2 * i).cast())),
                BF16 => _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p.add(2 * i).cast())),
                    16,
                )),
                _ => _mm512_maskz_loadu_ps(m, p.add(4 * i).cast()),
            }
        }
    }

    /// Sixteen weights of type `T` at element `i` as f32, unmasked (masked
    /// loads stream measurably slower from DRAM).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load_full512<const T: u8>(p: *const u8, i: usize) -> __m512 {
        // SAFETY: the caller guarantees sixteen elements from i.
        unsafe {
            match T {
                F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * i).cast())),
                BF16 => _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.add(2 * i).cast())),
                    16,
                )),
                _ => _mm512_loadu_ps(p.add(4 * i).cast()),
            }
        }
    }

    /// Sums each of eight vectors: `[Σ v0, ..., Σ v7]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn reduce8_256(w: [__m256; 8]) -> [f32; 8] {
        let t0 = _mm256_hadd_ps(w[0], w[1]);
        let t1 = _mm256_hadd_ps(w[2], w[3]);
        let t2 = _mm256_hadd_ps(w[4], w[5]);
        let t3 = _mm256_hadd_ps(w[6], w[7]);
        let u0 = _mm256_hadd_ps(t0, t1);
        let u1 = _mm256_hadd_ps(t2, t3);
        let lo = _mm256_permute2f128_ps::<0x20>(u0, u1);
        let hi = _mm256_permute2f128_ps::<0x31>(u0, u1);
        let mut out = [0f32; 8];
        // SAFETY: out has room for eight f32.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(lo, hi)) };
        out
    }

    /// Eight dot products of `rows` (k weights of type `T`) with `x`. The
    /// rows are read one after the other (sequential memory when they are
    /// contiguous: DRAM streams best that way, measured ~1.8x faster than
    /// interleaving eight rows), each into four accumulators, and the eight
    /// row vectors are reduced together at the end.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; each pointer covers k elements.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn gemv8_avx512<const T: u8>(
        k: usize,
        rows: &[*const u8; 8],
        x: *const u8,
    ) -> [f32; 8] {
        // A plain loop, not a closure: closures are not compiled with the
        // function's target features (measured: a call and vzeroupper per row).
        let mut w = [_mm256_setzero_ps(); 8];
        for (wr, &p) in w.iter_mut().zip(rows) {
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= k {
                for (j, a) in acc.iter_mut().enumerate() {
                    // SAFETY: elements i + 16j .. + 16 <= k of x and the row.
                    unsafe {
                        let xv = load_full512::<T>(x, i + 16 * j);
                        *a = _mm512_fmadd_ps(load_full512::<T>(p, i + 16 * j), xv, *a);
                    }
                }
                i += 64;
            }
            while i < k {
                let m = mask16(k - i);
                // SAFETY: lanes in m are elements i .. min(i + 16, k) of x and the row.
                unsafe {
                    let xv = load_w512::<T>(x, i, m);
                    acc[0] = _mm512_fmadd_ps(load_w512::<T>(p, i, m), xv, acc[0]);
                }
                i += 16;
            }
            let v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            let lo = _mm512_castps512_ps256(v);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
            *wr = _mm256_add_ps(lo, hi);
        }
        reduce8_256(w)
    }

    /// Eight weights of type `T` at element `i` as f32 (AVX2).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_w256<const T: u8>(p: *const u8, i: usize) -> __m256 {
        // SAFETY: the caller guarantees eight elements from i.
        unsafe {
            match T {
                F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i).cast())),
                BF16 => _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(2 * i).cast())),
                    16,
                )),
                _ => _mm256_loadu_ps(p.add(4 * i).cast()),
            }
        }
    }

    /// One weight of type `T` at element `i` as f32.
    ///
    /// # Safety
    /// Element i is in bounds.
    #[inline(always)]
    unsafe fn load_w1<const T: u8>(p: *const u8, i: usize) -> f32 {
        // SAFETY: the caller guarantees element i.
        unsafe {
            match T {
                F16 => crate::quant::simd::f16_to_f32(p.add(2 * i).cast::<u16>().read_unaligned()),
                BF16 => crate::quant::bf16_to_f32(p.add(2 * i).cast::<u16>().read_unaligned()),
                _ => p.add(4 * i).cast::<f32>().read_unaligned(),
            }
        }
    }

    /// Eight dot products (AVX2), the rows one after the other as in
    /// [`gemv8_avx512`]: four eight-lane accumulators per row, a scalar tail,
    /// one reduction for the eight rows.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C; each pointer (and `x`, of the same type) covers k elements.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemv8_avx2<const T: u8>(
        k: usize,
        rows: &[*const u8; 8],
        x: *const u8,
    ) -> [f32; 8] {
        let mut w = [_mm256_setzero_ps(); 8];
        let main = k / 32 * 32;
        for (wr, &p) in w.iter_mut().zip(rows) {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < main {
                for (j, a) in acc.iter_mut().enumerate() {
                    // SAFETY: elements i + 8j .. + 8 <= k of x and the row.
                    unsafe {
                        *a = _mm256_fmadd_ps(
                            load_w256::<T>(p, i + 8 * j),
                            load_w256::<T>(x, i + 8 * j),
                            *a,
                        );
                    }
                }
                i += 32;
            }
            while i + 8 <= k {
                // SAFETY: elements i .. i + 8 <= k of x and the row.
                unsafe {
                    acc[0] = _mm256_fmadd_ps(load_w256::<T>(p, i), load_w256::<T>(x, i), acc[0]);
                }
                i += 8;
            }
            *wr = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        }
        let mut out = reduce8_256(w);
        let tail = k / 8 * 8;
        for (o, &r) in out.iter_mut().zip(rows) {
            for j in tail..k {
                // SAFETY: element j < k of x and the row.
                *o = unsafe { load_w1::<T>(r, j).mul_add(load_w1::<T>(x, j), *o) };
            }
        }
        out
    }
}

//! AVX-512 (sixteen f32 lanes) and AVX2 + FMA + F16C (eight lanes) kernels
//! of FLASH_ATTN_EXT, written once over [`Lanes`] and instantiated per level
//! inside `#[target_feature]` functions.
//!
//! * f16 → f32 is `vcvtph2ps` (exact); the f16 rounding of the one-chunk V
//!   accumulator is `vcvtps2ph` with round to nearest even and back, the
//!   same bits as `half::f16::from_f32(x).to_f32()` for every non-NaN x.
//! * [`exp`] is a vectorized `e^x`: `x = n·ln2 + r` (`n` rounded to nearest,
//!   `|r| ≤ ln2/2`, Cody–Waite split of ln2), a degree-5 polynomial for
//!   `(e^r − 1 − r)/r²` (the Cephes `expf` coefficients), times `2^n`. For
//!   `−87.33654 ≤ x ≤ 88` its relative error is below 1e-7 (max seen on a
//!   dense sweep of 16M points: 8.4e-8 ≈ 1.4·2⁻²⁴, tested); below −87.33654 (results under 2⁻¹²⁶, where
//!   f32 turns subnormal) and for −∞ it returns 0; above 88 it saturates at
//!   `e^88` (the kernels only take `x ≤ 0`); NaN stays NaN.
//! * The GEMMs of the tiled path compute every output element as one f32
//!   FMA chain in order of the inner index (as ggml's `simd_gemm`), whatever
//!   the register block it falls in, so results do not depend on the tile
//!   shapes or on which thread computes them.
//!
//! Every `unsafe fn` here requires the CPU features of its level; the level
//! types ([`Avx512`], [`Avx2`]) can only be built after checking them
//! ([`Isa::is_supported`]), and their safe [`Kernels`] methods check slice
//! lengths and row bounds before any raw access.

use std::arch::x86_64::*;

use super::{ChunkJob, Kernels, RowState, Scalar};
use crate::quant::simd::Isa;
use crate::tensor::DType;

/// f32 vector operations of one level. Every function requires the level's
/// CPU features; pointer arguments must be valid for `W` elements.
pub(crate) trait Lanes {
    /// A vector of `W` f32 lanes.
    type V: Copy;
    /// Lanes per vector.
    const W: usize;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `W` f16 values at `p` (any alignment) converted to f32.
    unsafe fn load_h(p: *const u16) -> Self::V;
    /// `a·b + c`, rounded once.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `maxps a, b`: `b` where either is NaN.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// `minps a, b`: `b` where either is NaN.
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// Each lane rounded to f16 (nearest even) and back.
    unsafe fn round_h(v: Self::V) -> Self::V;
    /// The sum of the lanes, in the order of ggml's reduction at this width
    /// (AVX-512: halves down to four lanes, then `(x0 + x2) + (x1 + x3)`;
    /// AVX2: halves, then `(x0 + x1) + (x2 + x3)`).
    unsafe fn hsum(v: Self::V) -> f32;
    /// Each lane rounded to the nearest integer (ties to even).
    unsafe fn round_int(v: Self::V) -> Self::V;
    /// `y · 2^n` for integral `n` in −126..=127.
    unsafe fn pow2(y: Self::V, n: Self::V) -> Self::V;
    /// Per lane `a < b ? x : y`.
    unsafe fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// Per lane `a > b ? x : y`.
    unsafe fn select_gt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
}

/// The AVX-512 lanes.
#[derive(Clone, Copy)]
pub(crate) struct L512;

impl Lanes for L512 {
    type V = __m512;
    const W: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: forwarded contract (16 readable f32).
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: forwarded contract (16 writable f32).
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> __m512 {
        // SAFETY: forwarded contract (16 readable f16).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        _mm512_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn round_h(v: __m512) -> __m512 {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(v))
    }
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        // GCC's _mm512_reduce_add_ps, which ggml's GGML_F32x16_REDUCE uses:
        // 256-bit halves, 128-bit halves, then (x0 + x2) + (x1 + x3).
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        let t = _mm256_add_ps(hi, _mm512_castps512_ps256(v));
        let t = _mm_add_ps(_mm256_extractf128_ps::<1>(t), _mm256_castps256_ps128(t));
        let t = _mm_add_ps(t, _mm_shuffle_ps::<0b01_00_11_10>(t, t));
        _mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_movehdup_ps(t))
    }
    #[inline(always)]
    unsafe fn round_int(v: __m512) -> __m512 {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }
    #[inline(always)]
    unsafe fn pow2(y: __m512, n: __m512) -> __m512 {
        _mm512_scalef_ps(y, n)
    }
    #[inline(always)]
    unsafe fn select_lt(a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b), y, x)
    }
    #[inline(always)]
    unsafe fn select_gt(a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b), y, x)
    }
}

/// The AVX2 lanes.
#[derive(Clone, Copy)]
pub(crate) struct L256;

impl Lanes for L256 {
    type V = __m256;
    const W: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: forwarded contract (8 readable f32).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: forwarded contract (8 writable f32).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> __m256 {
        // SAFETY: forwarded contract (8 readable f16).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        _mm256_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn round_h(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        // As ggml's GGML_F32x8_REDUCE: halves, then two horizontal adds.
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_hadd_ps(s, s);
        _mm_cvtss_f32(_mm_hadd_ps(s, s))
    }
    #[inline(always)]
    unsafe fn round_int(v: __m256) -> __m256 {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }
    #[inline(always)]
    unsafe fn pow2(y: __m256, n: __m256) -> __m256 {
        let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e)))
    }
    #[inline(always)]
    unsafe fn select_lt(a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
        _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    unsafe fn select_gt(a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
        _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_GT_OQ>(a, b))
    }
}

/// Smallest argument of [`exp`] with a normal result; below it returns 0.
pub(crate) const EXP_LO: f32 = -87.336_54;
/// Largest argument of [`exp`]; above it the result saturates.
pub(crate) const EXP_HI: f32 = 88.0;

/// `e^x` per lane (module docs: error and range).
#[inline(always)]
pub(crate) unsafe fn exp<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: only lane arithmetic; the caller has the level's features.
    unsafe {
        let lo = L::splat(EXP_LO);
        // max(lo, x) and min(hi, ·) return x when it is NaN.
        let xc = L::min(L::splat(EXP_HI), L::max(lo, x));
        let n = L::round_int(L::mul(xc, L::splat(std::f32::consts::LOG2_E)));
        let r = L::fma(n, L::splat(-0.693_359_4), xc);
        let r = L::fma(n, L::splat(2.121_944_4e-4), r);
        let mut p = L::splat(1.987_569_1e-4);
        p = L::fma(p, r, L::splat(1.398_199_9e-3));
        p = L::fma(p, r, L::splat(8.333_452e-3));
        p = L::fma(p, r, L::splat(4.166_579_6e-2));
        p = L::fma(p, r, L::splat(1.666_666_5e-1));
        p = L::fma(p, r, L::splat(0.5));
        let y = L::add(L::fma(p, L::mul(r, r), r), L::splat(1.0));
        L::select_lt(x, lo, L::zero(), L::pow2(y, n))
    }
}

/// The first `n < W` f32 at `p`, zeros after.
#[inline(always)]
unsafe fn load_part<L: Lanes>(p: *const f32, n: usize) -> L::V {
    let mut b = [0f32; 16];
    // SAFETY: the caller guarantees n readable f32 at p; n < W <= 16.
    unsafe {
        std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), n);
        L::load(b.as_ptr())
    }
}

/// The first `n < W` f16 at `p` as f32, zeros after.
#[inline(always)]
unsafe fn load_h_part<L: Lanes>(p: *const u16, n: usize) -> L::V {
    let mut b = [0u16; 16];
    // SAFETY: the caller guarantees n readable f16 at p; n < W <= 16.
    unsafe {
        std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), n);
        L::load_h(b.as_ptr())
    }
}

/// Elements `off .. off + n` (n ≤ W) of a K/V row (f16 when `H`) as f32
/// lanes, zeros past `n`.
#[inline(always)]
unsafe fn load_row<L: Lanes, const H: bool>(row: *const u8, off: usize, n: usize) -> L::V {
    // SAFETY: the caller guarantees elements off .. off + n of the row.
    unsafe {
        match (H, n == L::W) {
            (true, true) => L::load_h(row.cast::<u16>().add(off)),
            (true, false) => load_h_part::<L>(row.cast::<u16>().add(off), n),
            (false, true) => L::load(row.cast::<f32>().add(off)),
            (false, false) => load_part::<L>(row.cast::<f32>().add(off), n),
        }
    }
}

/// Converts `n` f16 (`half`) or f32 values at `src` (any alignment) to f32 at `dst`.
#[inline(always)]
unsafe fn to_f32<L: Lanes>(src: *const u8, half: bool, n: usize, dst: *mut f32) {
    // SAFETY: the caller guarantees n source values and n destination f32.
    unsafe {
        if !half {
            std::ptr::copy_nonoverlapping(src, dst.cast::<u8>(), 4 * n);
            return;
        }
        let s = src.cast::<u16>();
        let mut i = 0;
        while i + L::W <= n {
            L::store(dst.add(i), L::load_h(s.add(i)));
            i += L::W;
        }
        if i < n {
            let mut b = [0f32; 16];
            L::store(b.as_mut_ptr(), load_h_part::<L>(s.add(i), n - i));
            std::ptr::copy_nonoverlapping(b.as_ptr(), dst.add(i), n - i);
        }
    }
}

/// One register block of a GEMM: `C[RM × RN·W] = A·B` over `kd` steps, or
/// `C = diag(cs)·C + A·B` when `cs` is not null; element (r, k) of A at
/// `a[r·a_rs + k·a_ks]`, row k of B at `b + k·ldb`, row r of C at
/// `c + r·ldc`; each output an FMA chain in order of k.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<L: Lanes, const RM: usize, const RN: usize>(
    kd: usize,
    a: *const f32,
    a_rs: usize,
    a_ks: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cs: *const f32,
) {
    // SAFETY: the caller guarantees the A, B and C extents above, and RM
    // row scales at cs unless null.
    unsafe {
        let mut acc = [[L::zero(); RN]; RM];
        if !cs.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                let f = L::splat(*cs.add(r));
                for (v, x) in row.iter_mut().enumerate() {
                    *x = L::mul(L::load(c.add(r * ldc + v * L::W)), f);
                }
            }
        }
        for k in 0..kd {
            let mut bv = [L::zero(); RN];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = L::load(b.add(k * ldb + v * L::W));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = L::splat(*a.add(r * a_rs + k * a_ks));
                for (x, &bb) in row.iter_mut().zip(&bv) {
                    *x = L::fma(av, bb, *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, &x) in row.iter().enumerate() {
                L::store(c.add(r * ldc + v * L::W), x);
            }
        }
    }
}

/// One row block of a GEMM (`RM` rows, or 1 when `one`) across all `nv`
/// vectors of C, in groups of RN (layout as [`block`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row_block<L: Lanes, const RM: usize, const RN: usize>(
    one: bool,
    nv: usize,
    kd: usize,
    a: *const f32,
    a_rs: usize,
    a_ks: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cs: *const f32,
) {
    // SAFETY: the caller guarantees the extents; blocks stay inside them.
    unsafe {
        let mut v = 0;
        while v + RN <= nv {
            let (b, c) = (b.add(v * L::W), c.add(v * L::W));
            if one {
                block::<L, 1, RN>(kd, a, a_rs, a_ks, b, ldb, c, ldc, cs);
            } else {
                block::<L, RM, RN>(kd, a, a_rs, a_ks, b, ldb, c, ldc, cs);
            }
            v += RN;
        }
        while v < nv {
            let (b, c) = (b.add(v * L::W), c.add(v * L::W));
            if one {
                block::<L, 1, 1>(kd, a, a_rs, a_ks, b, ldb, c, ldc, cs);
            } else {
                block::<L, RM, 1>(kd, a, a_rs, a_ks, b, ldb, c, ldc, cs);
            }
            v += 1;
        }
    }
}

/// `p + i`, or null for null `p`.
#[inline(always)]
fn at(p: *const f32, i: usize) -> *const f32 {
    if p.is_null() {
        p
    } else {
        p.wrapping_add(i)
    }
}

/// `C[m × nv·W] (+)= A·B` in blocks of RM rows × RN vectors (layout as [`block`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm<L: Lanes, const RM: usize, const RN: usize>(
    m: usize,
    nv: usize,
    kd: usize,
    a: *const f32,
    a_rs: usize,
    a_ks: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cs: *const f32,
) {
    // SAFETY: the caller guarantees the extents; blocks stay inside them.
    unsafe {
        let mut i = 0;
        while i + RM <= m {
            let (a, c, s) = (a.add(i * a_rs), c.add(i * ldc), at(cs, i));
            row_block::<L, RM, RN>(false, nv, kd, a, a_rs, a_ks, b, ldb, c, ldc, s);
            i += RM;
        }
        while i < m {
            let (a, c, s) = (a.add(i * a_rs), c.add(i * ldc), at(cs, i));
            row_block::<L, RM, RN>(true, nv, kd, a, a_rs, a_ks, b, ldb, c, ldc, s);
            i += 1;
        }
    }
}

/// The column softmax of [`Kernels::softmax_cols`] over `kvn` × `np`
/// (`mt` null: no mask).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_cols<L: Lanes>(
    kq: *mut f32,
    kvn: usize,
    np: usize,
    scale: f32,
    mt: *const f32,
    m: *mut f32,
    s: *mut f32,
    ms: *mut f32,
) {
    // SAFETY: the caller guarantees kvn·np values at kq (and mt unless
    // null) and np at m, s, ms.
    unsafe {
        let ninf = L::splat(f32::NEG_INFINITY);
        let (one, zero, sc) = (L::splat(1.0), L::zero(), L::splat(scale));
        let mut c = 0;
        while c < np {
            let mut t = ninf;
            for j in 0..kvn {
                let p = kq.add(j * np + c);
                let mut x = L::mul(L::load(p), sc);
                if !mt.is_null() {
                    x = L::add(x, L::load(mt.add(j * np + c)));
                }
                L::store(p, x);
                t = L::max(t, x);
            }
            let mold = L::load(m.add(c));
            let mnew = L::max(mold, t);
            let f = L::select_gt(mnew, mold, exp::<L>(L::sub(mold, mnew)), one);
            let mut sum = zero;
            for j in 0..kvn {
                let p = kq.add(j * np + c);
                let e = exp::<L>(L::sub(L::load(p), mnew));
                let e = L::select_gt(t, ninf, e, zero);
                L::store(p, e);
                sum = L::add(sum, e);
            }
            L::store(s.add(c), L::add(L::mul(L::load(s.add(c)), f), sum));
            L::store(m.add(c), mnew);
            L::store(ms.add(c), f);
            c += L::W;
        }
    }
}

/// Keys per block of the one-chunk kernel (a multiple of every `W`).
const KB: usize = 32;

/// The one-chunk kernel's operands for `G` rows (checked by the wrapper).
pub(crate) struct ChunkArgs<const G: usize> {
    d: usize,
    dv: usize,
    /// Keys.
    n: usize,
    /// First K row and the byte stride between rows.
    k: *const u8,
    ks: usize,
    /// First V row and the byte stride between rows.
    v: *const u8,
    vs: usize,
    scale: f32,
    softcap: f32,
    /// Queries, `d` rounded up to `W` values each.
    q: [*const f32; G],
    /// `n` mask values each, or null.
    mask: [*const f32; G],
    /// Accumulators, `dv` rounded up to `W` values each.
    acc: [*mut f32; G],
    m: [f32; G],
    s: [f32; G],
}

/// `x` stored in the accumulator's type: f16 when `H`.
#[inline(always)]
unsafe fn store_round<L: Lanes, const H: bool>(x: L::V) -> L::V {
    if H {
        // SAFETY: lane arithmetic at the caller's level.
        unsafe { L::round_h(x) }
    } else {
        x
    }
}

/// The one-chunk algorithm (module docs of `attn`) for `G` rows sharing K
/// and V, both f16 when `H` (else f32), over blocks of [`KB`] keys: the
/// scores of a block, then per row the running maximum, the factors
/// `exp(M_old − M_new)` / `exp(s − M)` (vectorized) and the sum, then the
/// accumulator updates key by key (in key order, so every element sees
/// exactly ggml's sequence of f16 roundings).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // rows index several arrays at once
unsafe fn one_chunk<L: Lanes, const H: bool, const G: usize>(a: &mut ChunkArgs<G>) {
    let w = L::W;
    let nvc = a.dv.div_ceil(w);
    // Scores, then factors, per row and key of the block.
    let mut f = [[0f32; KB]; G];
    // Rows (bits) for which each key is not masked.
    let mut act = [0u8; KB];
    // Rows (bits) whose maximum grows at each key.
    let mut grew = [0u8; KB];
    let mut b0 = 0;
    // SAFETY: the wrapper checked every extent of `a`.
    unsafe {
        while b0 < a.n {
            let nb = KB.min(a.n - b0);
            for j in 0..nb {
                let mut bits = 0u8;
                for g in 0..G {
                    let mv = if a.mask[g].is_null() {
                        0.0
                    } else {
                        *a.mask[g].add(b0 + j)
                    };
                    f[g][j] = mv;
                    if mv != f32::NEG_INFINITY {
                        bits |= 1 << g;
                    }
                }
                act[j] = bits;
                grew[j] = 0;
                if bits == 0 {
                    continue;
                }
                let kr = a.k.add((b0 + j) * a.ks);
                let dots = dot::<L, H, G>(a, kr);
                for g in 0..G {
                    if bits >> g & 1 != 0 {
                        let mut x = dots[g] * a.scale;
                        if a.softcap != 0.0 {
                            x = a.softcap * (x / a.softcap).tanh();
                        }
                        f[g][j] += x;
                    }
                }
            }
            for g in 0..G {
                let e = &mut f[g];
                let mut mx = a.m[g];
                for j in 0..nb {
                    if act[j] >> g & 1 == 0 {
                        e[j] = 0.0;
                        continue;
                    }
                    let x = e[j];
                    if x > mx {
                        e[j] = mx - x;
                        mx = x;
                        grew[j] |= 1 << g;
                    } else {
                        e[j] = x - mx;
                    }
                }
                e[nb..].fill(0.0);
                let mut c = 0;
                while c < KB {
                    let p = e.as_mut_ptr().add(c);
                    L::store(p, exp::<L>(L::load(p)));
                    c += w;
                }
                let mut sum = a.s[g];
                for j in 0..nb {
                    if act[j] >> g & 1 != 0 {
                        sum = if grew[j] >> g & 1 != 0 {
                            sum * e[j] + 1.0
                        } else {
                            sum + e[j]
                        };
                    }
                }
                a.s[g] = sum;
                a.m[g] = mx;
            }
            // Whole vectors two at a time, then one, then the partial one.
            let nfull = a.dv / w;
            let mut c = 0;
            while c + 2 <= nfull {
                apply::<L, H, G, 2, true>(a, c, b0, nb, &act, &grew, &f);
                c += 2;
            }
            if c < nfull {
                apply::<L, H, G, 1, true>(a, c, b0, nb, &act, &grew, &f);
                c += 1;
            }
            if c < nvc {
                apply::<L, H, G, 1, false>(a, c, b0, nb, &act, &grew, &f);
            }
            b0 += nb;
        }
    }
}

/// q·k for the `G` queries and the K row at `kr`, summed as ggml's
/// `ggml_vec_dot_f16` / `ggml_vec_dot_f32` at this vector width: steps of
/// 4·W elements into four accumulators (one FMA per vector), reduced as
/// `(s0 + s2) + (s1 + s3)` then across lanes; the leftover elements added
/// one by one, in f64 for f16 (the products are exact) and in f32 for f32.
#[inline(always)]
unsafe fn dot<L: Lanes, const H: bool, const G: usize>(
    a: &ChunkArgs<G>,
    kr: *const u8,
) -> [f32; G] {
    let w = L::W;
    let step = 4 * w;
    let ns = a.d / step;
    // SAFETY: the K row holds d elements; the queries d (padded) f32.
    unsafe {
        let mut acc = [[L::zero(); 4]; G];
        for st in 0..ns {
            for (jj, i) in (st * 4..st * 4 + 4).enumerate() {
                let kv = load_row::<L, H>(kr, i * w, w);
                for (ag, &q) in acc.iter_mut().zip(&a.q) {
                    ag[jj] = L::fma(kv, L::load(q.add(i * w)), ag[jj]);
                }
            }
        }
        let mut out = [0f32; G];
        for (o, (ag, &q)) in out.iter_mut().zip(acc.iter().zip(&a.q)) {
            let r = L::hsum(L::add(L::add(ag[0], ag[2]), L::add(ag[1], ag[3])));
            if H {
                let mut sum = r as f64;
                let k = kr.cast::<u16>();
                for i in ns * step..a.d {
                    let kv = crate::quant::simd::f16_to_f32(k.add(i).read_unaligned());
                    sum += (kv * *q.add(i)) as f64;
                }
                *o = sum as f32;
            } else {
                let mut sum = r;
                let k = kr.cast::<f32>();
                for i in ns * step..a.d {
                    sum += k.add(i).read_unaligned() * *q.add(i);
                }
                *o = sum;
            }
        }
        out
    }
}

/// The accumulator updates of one key block for vectors `c .. c + NC` of
/// every row: on a new maximum `acc = r(acc·ms)` then `acc = r(acc + v)`,
/// else `acc = r(v·vs + acc)` (one FMA), `r` the accumulator's rounding.
/// `FULL`: the vectors lie within `dv` (no partial V loads).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn apply<L: Lanes, const H: bool, const G: usize, const NC: usize, const FULL: bool>(
    a: &ChunkArgs<G>,
    c: usize,
    b0: usize,
    nb: usize,
    act: &[u8; KB],
    grew: &[u8; KB],
    f: &[[f32; KB]; G],
) {
    let w = L::W;
    let all = ((1u32 << G) - 1) as u8;
    // SAFETY: the wrapper checked every extent of `a`; vectors c .. c + NC
    // of each accumulator lie within its padded length, and of each V row
    // within dv when FULL (else the loads stop at dv).
    unsafe {
        let mut acc = [[L::zero(); NC]; G];
        for (g, row) in acc.iter_mut().enumerate() {
            for (i, x) in row.iter_mut().enumerate() {
                *x = L::load(a.acc[g].add((c + i) * w));
            }
        }
        for j in 0..nb {
            let bits = act[j];
            if bits == 0 {
                continue;
            }
            let vr = a.v.add((b0 + j) * a.vs);
            let mut vv = [L::zero(); NC];
            for (i, x) in vv.iter_mut().enumerate() {
                let o = (c + i) * w;
                *x = if FULL {
                    load_row::<L, H>(vr, o, w)
                } else {
                    load_row::<L, H>(vr, o, w.min(a.dv - o))
                };
            }
            if bits == all && grew[j] == 0 {
                for (row, fg) in acc.iter_mut().zip(f) {
                    let fv = L::splat(fg[j]);
                    for (x, &v) in row.iter_mut().zip(&vv) {
                        *x = store_round::<L, H>(L::fma(v, fv, *x));
                    }
                }
                continue;
            }
            for (g, (row, fg)) in acc.iter_mut().zip(f).enumerate() {
                if bits >> g & 1 == 0 {
                    continue;
                }
                let fv = L::splat(fg[j]);
                if grew[j] >> g & 1 != 0 {
                    for (x, &v) in row.iter_mut().zip(&vv) {
                        *x = store_round::<L, H>(L::mul(*x, fv));
                        *x = store_round::<L, H>(L::add(v, *x));
                    }
                } else {
                    for (x, &v) in row.iter_mut().zip(&vv) {
                        *x = store_round::<L, H>(L::fma(v, fv, *x));
                    }
                }
            }
        }
        for (g, row) in acc.iter().enumerate() {
            for (i, &x) in row.iter().enumerate() {
                L::store(a.acc[g].add((c + i) * w), x);
            }
        }
    }
}

/// Builds the one-chunk operands of `G` rows (lengths checked by the caller).
fn chunk_args<const G: usize>(
    job: &ChunkJob<'_>,
    rows: &mut [RowState<'_>],
    k: *const u8,
    v: *const u8,
) -> ChunkArgs<G> {
    let null = std::ptr::null::<f32>();
    ChunkArgs {
        d: job.k.ne[0],
        dv: job.v.ne[0],
        n: job.c1 - job.c0,
        k,
        ks: job.k.nb[1],
        v,
        vs: job.v.nb[1],
        scale: job.scale,
        softcap: job.softcap,
        q: std::array::from_fn(|g| rows[g].q.as_ptr()),
        mask: std::array::from_fn(|g| rows[g].mask.map_or(null, |m| m.as_ptr())),
        acc: std::array::from_fn(|g| rows[g].acc.as_mut_ptr()),
        m: std::array::from_fn(|g| rows[g].m),
        s: std::array::from_fn(|g| rows[g].s),
    }
}

/// Defines a level: its kernel entry points (`#[target_feature]`) and its
/// [`Kernels`] type with the checked safe wrappers.
macro_rules! level {
    ($(#[$doc:meta])* $name:ident, $entry:ident, $lanes:ty, $isa:expr, $feat:literal,
     qk: ($qm:literal, $qn:literal), pv: ($pm:literal, $pn:literal)) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name(());

        impl $name {
            /// The level's kernels, if this CPU supports it.
            pub(crate) fn new() -> Option<$name> {
                $isa.is_supported().then_some($name(()))
            }
        }

        mod $entry {
            use super::*;

            #[target_feature(enable = $feat)]
            pub(super) unsafe fn to_f32_h(src: *const u8, half: bool, n: usize, dst: *mut f32) {
                // SAFETY: forwarded contract.
                unsafe { super::to_f32::<$lanes>(src, half, n, dst) }
            }

            #[target_feature(enable = $feat)]
            pub(super) unsafe fn qk(kf: *const f32, d: usize, kvn: usize, qt: *const f32, np: usize, kq: *mut f32) {
                // SAFETY: forwarded contract: A = kf (kvn × d), B = qt (d × np), C = kq (kvn × np).
                unsafe {
                    gemm::<$lanes, $qm, $qn>(kvn, np / <$lanes>::W, d, kf, d, 1, qt, np, kq, np, std::ptr::null())
                }
            }

            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn pv(p: *const f32, np: usize, rows: usize, kvn: usize, vf: *const f32, dvp: usize, ms: *const f32, vkq: *mut f32) {
                // SAFETY: forwarded contract: A = pᵀ (rows × kvn, stride np), B = vf (kvn × dvp), C = vkq, rows scales ms.
                unsafe {
                    gemm::<$lanes, $pm, $pn>(rows, dvp / <$lanes>::W, kvn, p, 1, np, vf, dvp, vkq, dvp, ms)
                }
            }

            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn softmax(kq: *mut f32, kvn: usize, np: usize, scale: f32, mt: *const f32, m: *mut f32, s: *mut f32, ms: *mut f32) {
                // SAFETY: forwarded contract.
                unsafe { softmax_cols::<$lanes>(kq, kvn, np, scale, mt, m, s, ms) }
            }

            #[target_feature(enable = $feat)]
            pub(super) unsafe fn one_chunk_k<const H: bool, const G: usize>(a: &mut ChunkArgs<G>) {
                // SAFETY: forwarded contract.
                unsafe { super::one_chunk::<$lanes, H, G>(a) }
            }

            #[cfg(test)]
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn exp_k(x: *mut f32, n: usize) {
                let mut i = 0;
                while i + <$lanes>::W <= n {
                    // SAFETY: n f32 at x (forwarded contract).
                    unsafe {
                        let p = x.add(i);
                        <$lanes>::store(p, exp::<$lanes>(<$lanes>::load(p)));
                    }
                    i += <$lanes>::W;
                }
            }

            #[cfg(test)]
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn round_h_k(x: *mut f32, n: usize) {
                let mut i = 0;
                while i + <$lanes>::W <= n {
                    // SAFETY: n f32 at x (forwarded contract).
                    unsafe {
                        let p = x.add(i);
                        <$lanes>::store(p, <$lanes>::round_h(<$lanes>::load(p)));
                    }
                    i += <$lanes>::W;
                }
            }
        }

        impl $name {
            /// `e^x` in place for the leading multiple of the width (tests).
            #[cfg(test)]
            fn exp_in_place(self, x: &mut [f32]) {
                // SAFETY: features checked by new(); x.len() f32 at x.
                unsafe { $entry::exp_k(x.as_mut_ptr(), x.len()) }
            }

            /// The f16 round trip in place for the leading multiple of the width (tests).
            #[cfg(test)]
            fn round_h_in_place(self, x: &mut [f32]) {
                // SAFETY: features checked by new(); x.len() f32 at x.
                unsafe { $entry::round_h_k(x.as_mut_ptr(), x.len()) }
            }

            fn run_chunk<const H: bool, const G: usize>(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>], k: *const u8, v: *const u8) {
                let mut a = chunk_args::<G>(job, rows, k, v);
                // SAFETY: features checked by new(); one_chunk() checked every
                // extent (queries, masks, accumulators, K/V rows c0..c1).
                unsafe { $entry::one_chunk_k::<H, G>(&mut a) };
                for (g, r) in rows.iter_mut().enumerate() {
                    r.m = a.m[g];
                    r.s = a.s[g];
                }
            }
        }

        impl Kernels for $name {
            fn width(self) -> usize {
                <$lanes>::W
            }

            fn to_f32(self, src: &[u8], dt: DType, dst: &mut [f32]) {
                let n = src.len() / dt.type_size();
                assert!(n <= dst.len() && matches!(dt, DType::F16 | DType::F32));
                // SAFETY: features checked by new(); n values in src and dst.
                unsafe { $entry::to_f32_h(src.as_ptr(), dt == DType::F16, n, dst.as_mut_ptr()) };
                dst[n..].fill(0.0);
            }

            fn qk(self, kf: &[f32], d: usize, qt: &[f32], np: usize, kq: &mut [f32]) {
                assert!(np > 0 && np % <$lanes>::W == 0 && kq.len() % np == 0);
                let kvn = kq.len() / np;
                assert!(kf.len() >= kvn * d && qt.len() >= d * np);
                // SAFETY: features checked by new(); extents checked above.
                unsafe { $entry::qk(kf.as_ptr(), d, kvn, qt.as_ptr(), np, kq.as_mut_ptr()) }
            }

            fn softmax_cols(self, kq: &mut [f32], np: usize, scale: f32, mt: Option<&[f32]>, m: &mut [f32], s: &mut [f32], ms: &mut [f32]) {
                assert!(np > 0 && np % <$lanes>::W == 0 && kq.len() % np == 0);
                assert!(m.len() >= np && s.len() >= np && ms.len() >= np);
                assert!(mt.is_none_or(|t| t.len() >= kq.len()));
                let kvn = kq.len() / np;
                let mt = mt.map_or(std::ptr::null(), |t| t.as_ptr());
                // SAFETY: features checked by new(); extents checked above.
                unsafe {
                    $entry::softmax(kq.as_mut_ptr(), kvn, np, scale, mt, m.as_mut_ptr(), s.as_mut_ptr(), ms.as_mut_ptr())
                }
            }

            fn pv(self, p: &[f32], np: usize, rows: usize, vf: &[f32], dvp: usize, ms: &[f32], vkq: &mut [f32]) {
                if dvp == 0 {
                    return;
                }
                assert!(dvp % <$lanes>::W == 0 && vf.len() % dvp == 0 && rows <= np);
                let kvn = vf.len() / dvp;
                assert!(p.len() >= kvn * np && vkq.len() >= rows * dvp && ms.len() >= rows);
                // SAFETY: features checked by new(); extents checked above.
                unsafe { $entry::pv(p.as_ptr(), np, rows, kvn, vf.as_ptr(), dvp, ms.as_ptr(), vkq.as_mut_ptr()) }
            }

            fn one_chunk(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
                let (kt, vt) = (job.k.dtype, job.v.dtype);
                if kt != vt || !matches!(kt, DType::F16 | DType::F32) {
                    return Scalar.one_chunk(job, rows);
                }
                if job.c0 >= job.c1 || rows.is_empty() {
                    return;
                }
                let (d, dv, n) = (job.k.ne[0], job.v.ne[0], job.c1 - job.c0);
                let w = <$lanes>::W;
                for r in rows.iter() {
                    assert!(r.q.len() >= d.next_multiple_of(w) && r.acc.len() >= dv.next_multiple_of(w));
                    assert!(r.mask.is_none_or(|m| m.len() >= n));
                }
                assert!(job.k.rows_contiguous() && job.v.rows_contiguous());
                // Rows c0 and c1 - 1 in bounds (row_ptr checks), hence all between.
                let k = job.k.row_ptr(job.c0, job.ik2, job.ik3).cast_const();
                let v = job.v.row_ptr(job.c0, job.ik2, job.ik3).cast_const();
                job.k.row_ptr(job.c1 - 1, job.ik2, job.ik3);
                job.v.row_ptr(job.c1 - 1, job.ik2, job.ik3);
                let half = kt == DType::F16;
                for group in rows.chunks_mut(4) {
                    match (half, group.len()) {
                        (true, 1) => self.run_chunk::<true, 1>(job, group, k, v),
                        (true, 2) => self.run_chunk::<true, 2>(job, group, k, v),
                        (true, 3) => self.run_chunk::<true, 3>(job, group, k, v),
                        (true, _) => self.run_chunk::<true, 4>(job, group, k, v),
                        (false, 1) => self.run_chunk::<false, 1>(job, group, k, v),
                        (false, 2) => self.run_chunk::<false, 2>(job, group, k, v),
                        (false, 3) => self.run_chunk::<false, 3>(job, group, k, v),
                        (false, _) => self.run_chunk::<false, 4>(job, group, k, v),
                    }
                }
            }
        }
    };
}

level!(
    /// The AVX-512 (F, BW, VL + AVX2, FMA, F16C) kernels; also the VNNI level's.
    Avx512,
    entry512,
    L512,
    Isa::Avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    qk: (4, 4),
    pv: (4, 4)
);

level!(
    /// The AVX2 + FMA + F16C kernels.
    Avx2,
    entry256,
    L256,
    Isa::Avx2,
    "avx2,fma,f16c",
    qk: (4, 2),
    pv: (4, 2)
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Max relative error of the vectorized exp over [EXP_LO, 0] and a bit
    /// above, on ~16M points, and its edge cases.
    fn check_exp(f: impl Fn(&mut [f32])) {
        let n = 1 << 24;
        let mut xs: Vec<f32> = (0..n)
            .map(|i| EXP_LO + (i as f32 / n as f32) * (-EXP_LO + 10.0))
            .collect();
        let want: Vec<f64> = xs.iter().map(|&x| (x as f64).exp()).collect();
        f(&mut xs);
        let worst = xs
            .iter()
            .zip(&want)
            .map(|(&g, &w)| ((g as f64 - w) / w).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-7, "exp max relative error {worst:e}");
        let mut edge = [
            f32::NEG_INFINITY,
            -1e30,
            -104.0,
            EXP_LO - 0.01,
            0.0,
            -0.0,
            f32::NAN,
            88.0,
            1e30,
            -1.0,
            -10.0,
            -50.0,
            -80.0,
            -87.0,
            1.0,
            2.0,
        ];
        f(&mut edge);
        assert_eq!(&edge[..4], &[0.0; 4]);
        assert_eq!((edge[4], edge[5]), (1.0, 1.0));
        assert!(edge[6].is_nan());
        assert!(edge[7].is_finite() && edge[8] == edge[7]);
    }

    #[test]
    fn vector_exp_relative_error_is_below_1e7() {
        if let Some(k) = Avx512::new() {
            check_exp(|x| k.exp_in_place(x));
        }
        if let Some(k) = Avx2::new() {
            check_exp(|x| k.exp_in_place(x));
        }
    }

    /// Around every f16 value: itself, the midpoints to its neighbours and
    /// one f32 ulp either side of them, plus the overflow edge.
    fn round_cases() -> Vec<f32> {
        let mut v = Vec::new();
        for h in 0..=u16::MAX {
            let x = half::f16::from_bits(h).to_f32();
            if !x.is_finite() {
                continue;
            }
            let nx = half::f16::from_bits(h.wrapping_add(1)).to_f32();
            v.push(x);
            if nx.is_finite() && (nx.abs() > x.abs()) == (x.to_bits() >> 31 == 0) {
                let mid = ((x as f64 + nx as f64) / 2.0) as f32;
                for t in [-1i32, 0, 1] {
                    v.push(f32::from_bits((mid.to_bits() as i32 + t) as u32));
                }
            }
        }
        v.extend([
            65504.0,
            65519.0,
            65520.0,
            65536.0,
            1e9,
            -65520.0,
            f32::INFINITY,
            1e-30,
            -1e-40,
        ]);
        let len = v.len().next_multiple_of(16);
        v.resize(len, 0.0);
        v
    }

    #[test]
    fn f16_round_trip_matches_half_bit_for_bit() {
        let cases = round_cases();
        let want: Vec<u32> = cases
            .iter()
            .map(|&x| half::f16::from_f32(x).to_f32().to_bits())
            .collect();
        let check = |f: &dyn Fn(&mut [f32])| {
            let mut got = cases.clone();
            f(&mut got);
            for ((&x, &g), &w) in cases.iter().zip(&got).zip(&want) {
                assert_eq!(g.to_bits(), w, "round trip of {x:e}");
            }
        };
        if let Some(k) = Avx512::new() {
            check(&|x| k.round_h_in_place(x));
        }
        if let Some(k) = Avx2::new() {
            check(&|x| k.round_h_in_place(x));
        }
    }

    /// The tile kernels against the scalar ones on random tiles: the GEMMs
    /// within f32 FMA-vs-mul+add rounding, the softmax within the exp error.
    fn check_tiles<K: Kernels>(k: K) {
        let mut rng = crate::conformance::Rng::new(7);
        for &(kvn, np, d, dvp) in &[
            (64, 64, 64, 64),
            (7, 16, 40, 48),
            (33, 48, 128, 128),
            (1, 16, 1, 16),
        ] {
            let np = np.max(k.width());
            let kf = rng.vec(kvn * d, -1.0, 1.0);
            let qt = rng.vec(d * np, -1.0, 1.0);
            let (mut a, mut b) = (vec![0f32; kvn * np], vec![0f32; kvn * np]);
            k.qk(&kf, d, &qt, np, &mut a);
            Scalar.qk(&kf, d, &qt, np, &mut b);
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-5 * d as f32, "qk {x} {y}");
            }
            // Softmax with some -inf and a column fully masked.
            for (i, x) in a.iter_mut().enumerate() {
                if i % 5 == 0 || i % np == 1 {
                    *x = f32::NEG_INFINITY;
                }
            }
            let mut b = a.clone();
            let m0: Vec<f32> = (0..np)
                .map(|i| if i % 3 == 0 { f32::NEG_INFINITY } else { 0.5 })
                .collect();
            let s0 = vec![2.0f32; np];
            let (mut ma, mut sa, mut fa) = (m0.clone(), s0.clone(), vec![0f32; np]);
            let (mut mb, mut sb, mut fb) = (m0.clone(), s0.clone(), vec![0f32; np]);
            let mt = rng.vec(kvn * np, -1.0, 0.0);
            k.softmax_cols(&mut a, np, 0.7, Some(&mt), &mut ma, &mut sa, &mut fa);
            Scalar.softmax_cols(&mut b, np, 0.7, Some(&mt), &mut mb, &mut sb, &mut fb);
            let close = |x: f32, y: f32| x == y || (x - y).abs() <= 4e-7 * y.abs().max(1.0);
            assert!(ma
                .iter()
                .zip(&mb)
                .all(|(x, y)| x == y || (x.is_nan() && y.is_nan())));
            for (v, w) in [(&a, &b), (&sa, &sb), (&fa, &fb)] {
                for (&x, &y) in v.iter().zip(w.iter()) {
                    assert!(close(x, y), "softmax {x} {y}");
                }
            }
            let vf = rng.vec(kvn * dvp, -1.0, 1.0);
            let rows = np - 1;
            let init = rng.vec(rows * dvp, -1.0, 1.0);
            let (mut va, mut vb) = (init.clone(), init);
            let ms = rng.vec(np, 0.0, 1.0);
            k.pv(&b, np, rows, &vf, dvp, &ms, &mut va);
            Scalar.pv(&b, np, rows, &vf, dvp, &ms, &mut vb);
            for (x, y) in va.iter().zip(&vb) {
                assert!((x - y).abs() <= 1e-5 * kvn as f32, "pv {x} {y}");
            }
        }
    }

    #[test]
    fn tile_kernels_match_the_scalar_ones() {
        if let Some(k) = Avx512::new() {
            check_tiles(k);
        }
        if let Some(k) = Avx2::new() {
            check_tiles(k);
        }
    }

    #[test]
    fn to_f32_converts_exactly() {
        let mut rng = crate::conformance::Rng::new(3);
        for n in [1, 7, 8, 15, 16, 17, 40, 64, 100] {
            let x = rng.vec(n, -70000.0, 70000.0);
            let h: Vec<u8> = x
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect();
            let f: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            for (src, dt) in [(&h, DType::F16), (&f, DType::F32)] {
                let mut want = vec![9f32; n + 5];
                Scalar.to_f32(src, dt, &mut want);
                let check = |k: &dyn Fn(&mut [f32])| {
                    let mut got = vec![9f32; n + 5];
                    k(&mut got);
                    assert!(got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()));
                };
                if let Some(k) = Avx512::new() {
                    check(&|o| k.to_f32(src, dt, o));
                }
                if let Some(k) = Avx2::new() {
                    check(&|o| k.to_f32(src, dt, o));
                }
            }
        }
    }
}

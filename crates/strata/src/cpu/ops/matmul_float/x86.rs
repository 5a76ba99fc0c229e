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
pub(super) unsafe fn pack32_avx512<const T: u8>(kc: usize, rows: &[*const u8; 32], out: *mut f32) {
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

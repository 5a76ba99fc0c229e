//! The x86 micro-kernels: the GEMM tile and the eight-row GEMV written once
//! over [`Lanes`] and instantiated per level by [`per_level!`] (modules
//! `avx512` and `avx2`), and the transposing packs of `a` (AVX-512 32-row
//! and AVX2 16-row panels); [`AVX2`] and [`AVX512`] are the levels' table
//! entries. Each `unsafe fn` requires its level's CPU features (a table
//! exists only for a level the CPU runs) and pointers covering the
//! documented extents.

use super::{Kernels, Tile, BF16, F16, F32};
use crate::isa::x86::{load16, load16_part, load_part, mask16, per_level, store_part, Lanes, L256};
use std::arch::x86_64::*;

/// How far ahead (bytes) of its loads a GEMV row prefetches its weights.
/// The rows of a weight matrix are contiguous, so this reaches into the
/// rows the next steps read; the hardware prefetcher alone, which stops at
/// every 4 KiB page, left the F16 model's token generation at about 70 %
/// of this host's DRAM read bandwidth.
const GEMV_PF: usize = 4096;

per_level! {
    fn tile(t: &Tile);
    fn gemv8<const T: u8>(k: usize, rows: &[*const u8; 8], x: *const u8) -> [f32; 8];
}

/// The AVX2 level's GEMM kernels (AVX-VNNI's too, through the fallback):
/// 16 × 6 tiles, panels of 16 rows.
pub(super) const AVX2: Kernels = Kernels {
    mr: 16,
    nr: 6,
    tile: avx2::tile,
    pack: [pack16::<F32>, pack16::<F16>, pack16::<BF16>],
    gemv8: [avx2::gemv8::<F32>, avx2::gemv8::<F16>, avx2::gemv8::<BF16>],
    pack_b: pack_b_avx2,
};

/// The AVX-512 level's GEMM kernels (VNNI's and AMX's too): 32 × 12 tiles,
/// panels of 32 rows; `b`'s panels through the AVX2 transposes.
pub(super) const AVX512: Kernels = Kernels {
    mr: 32,
    nr: 12,
    tile: avx512::tile,
    pack: [pack32::<F32>, pack32::<F16>, pack32::<BF16>],
    gemv8: [
        avx512::gemv8::<F32>,
        avx512::gemv8::<F16>,
        avx512::gemv8::<BF16>,
    ],
    pack_b: pack_b_avx2,
};

/// The level's tile: `2W × 3W/4` (AVX-512 32 × 12, AVX2 16 × 6), as [`kernel`].
///
/// # Safety
/// As [`kernel`] with `NR = 3W/4`.
#[inline(always)]
unsafe fn tile<L: Lanes>(t: &Tile) {
    // SAFETY: forwarded contract.
    unsafe {
        if L::W == 16 {
            kernel::<L, 12>(t)
        } else {
            kernel::<L, 6>(t)
        }
    }
}

/// A `2W × NR` [`Tile`]: the whole tile in registers (two vectors per
/// column), each output one FMA chain along kk, then added to `c` (when
/// `add`) and stored, the last partial vector of a column through a buffer.
///
/// # Safety
/// The level's features; `a` holds `kc * 2W` packed f32, `b` `kc * NR`;
/// `c` is element (0, 0) of an `mv` × `nv` tile (mv <= 2W, nv <= NR) of f32
/// with column stride `ldc` bytes.
#[inline(always)]
unsafe fn kernel<L: Lanes, const NR: usize>(t: &Tile) {
    let w = L::W;
    // SAFETY: the caller's contract; every access below is inside the
    // packed panels (kc steps of 2W and NR values) or the mv × nv tile.
    unsafe {
        let mut acc = [[L::zero(); 2]; NR];
        let (mut pa, mut pb) = (t.a, t.b);
        for _ in 0..t.kc {
            let a0 = L::load(pa);
            let a1 = L::load(pa.add(w));
            for (j, acc) in acc.iter_mut().enumerate() {
                let bj = L::splat(*pb.add(j));
                acc[0] = L::fma(a0, bj, acc[0]);
                acc[1] = L::fma(a1, bj, acc[1]);
            }
            pa = pa.add(2 * w);
            pb = pb.add(NR);
        }
        for (j, acc) in acc.iter().enumerate().take(t.nv) {
            let cj = t.c.add(j * t.ldc).cast::<f32>();
            for (h, &v) in acc.iter().enumerate() {
                let cnt = t.mv.saturating_sub(h * w).min(w);
                if cnt == w {
                    let p = cj.add(h * w);
                    L::store(p, if t.add { L::add(L::load(p), v) } else { v });
                } else if cnt > 0 {
                    let p = cj.add(h * w);
                    let v = if t.add {
                        L::add(load_part::<L>(p, cnt), v)
                    } else {
                        v
                    };
                    store_part::<L>(p, v, cnt);
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
unsafe fn pack32_avx512<const T: u8>(kc: usize, rows: &[*const u8; 32], out: *mut f32) {
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

/// Transposes 8 rows of 8 f32 (`r[i]` lane j → `out[j]` lane i).
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // Pairs of single elements, then of pairs, then the 128-bit halves.
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm256_setzero_ps(); 8];
    for i in 0..2 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        u[4 * i] = _mm256_shuffle_ps::<0x44>(a, c);
        u[4 * i + 1] = _mm256_shuffle_ps::<0xee>(a, c);
        u[4 * i + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        u[4 * i + 3] = _mm256_shuffle_ps::<0xee>(b, d);
    }
    // u[4g + q] holds, per 128-bit half H, element 4H + q' of rows 4g..4g+4
    // (q' = [0, 1, 2, 3][q]); the halves of rows 0..4 and 4..8 meet last.
    let mut o = [_mm256_setzero_ps(); 8];
    for q in 0..4 {
        o[q] = _mm256_permute2f128_ps::<0x20>(u[q], u[4 + q]);
        o[4 + q] = _mm256_permute2f128_ps::<0x31>(u[q], u[4 + q]);
    }
    o
}

/// Packs 16 rows of `kc` weights of type `T` (`rows[i]` → element kk) into
/// `out[kk * 16 + i]` as f32: eight-by-eight register transposes, the last
/// partial group of k through zero-padded loads.
///
/// # Safety
/// AVX2, FMA, F16C; each row pointer covers kc elements; `out` has room
/// for kc * 16 f32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack16_avx2<const T: u8>(kc: usize, rows: &[*const u8; 16], out: *mut f32) {
    let mut k0 = 0;
    while k0 < kc {
        let w = (kc - k0).min(8);
        for half in 0..2 {
            let mut r = [_mm256_setzero_ps(); 8];
            for (i, v) in r.iter_mut().enumerate() {
                // SAFETY: elements k0 .. k0 + w <= kc of row 8·half + i (a
                // partial load reads only w of them).
                *v = unsafe { load_w::<L256, T>(rows[8 * half + i], k0, w, w < 8) };
            }
            let t = transpose8(r);
            for (j, v) in t.iter().enumerate().take(w) {
                // SAFETY: kk = k0 + j < kc: 8 values at out[kk * 16 + 8·half].
                unsafe { _mm256_storeu_ps(out.add((k0 + j) * 16 + 8 * half), *v) };
            }
        }
        k0 += 8;
    }
}

/// Packs the f32 rows `src[j * k ..][..k]`, j < `nv` (the panel's columns
/// of `b`), into the `[k][nr]` panel `out[kk * nr + j]`, zeros for the
/// columns j in `nv..nr`: eight-by-eight transposes, stores masked to the
/// panel's width.
///
/// # Safety
/// AVX2, FMA, F16C; `nv <= nr <= 16`; `src` covers `nv * k` f32, `out`
/// `k * nr` f32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_b_avx2(nr: usize, nv: usize, k: usize, src: *const f32, out: *mut f32) {
    for g in 0..nr.div_ceil(8) {
        let cnt = (nr - 8 * g).min(8);
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt as i32), lanes);
        let rows = nv.saturating_sub(8 * g).min(cnt);
        let mut k0 = 0;
        while k0 < k {
            let w = (k - k0).min(8);
            let mut r = [_mm256_setzero_ps(); 8];
            for (i, v) in r.iter_mut().enumerate().take(rows) {
                // SAFETY: row 8g + i < nv has k values; elements k0 .. k0 + w.
                let p = unsafe { src.add((8 * g + i) * k + k0) };
                // SAFETY: as above (a partial load reads w values).
                *v = unsafe {
                    if w == 8 {
                        _mm256_loadu_ps(p)
                    } else {
                        load_part::<L256>(p, w)
                    }
                };
            }
            let t = transpose8(r);
            for (j, v) in t.iter().enumerate().take(w) {
                // SAFETY: kk = k0 + j < k; the mask keeps lanes 8g .. 8g + cnt <= nr
                // of panel row kk.
                unsafe { _mm256_maskstore_ps(out.add((k0 + j) * nr + 8 * g), mask, *v) };
            }
            k0 += 8;
        }
    }
}

/// [`pack32_avx512`] on a slice of 32 row pointers: the AVX-512 level's
/// [`Kernels::pack`].
///
/// # Safety
/// As [`pack32_avx512`].
unsafe fn pack32<const T: u8>(kc: usize, rows: &[*const u8], out: *mut f32) {
    let rows: &[*const u8; 32] = rows.try_into().expect("a panel of 32 rows");
    // SAFETY: forwarded contract.
    unsafe { pack32_avx512::<T>(kc, rows, out) }
}

/// [`pack16_avx2`] on a slice of 16 row pointers: the AVX2 level's
/// [`Kernels::pack`].
///
/// # Safety
/// As [`pack16_avx2`].
unsafe fn pack16<const T: u8>(kc: usize, rows: &[*const u8], out: *mut f32) {
    let rows: &[*const u8; 16] = rows.try_into().expect("a panel of 16 rows");
    // SAFETY: forwarded contract.
    unsafe { pack16_avx2::<T>(kc, rows, out) }
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

/// `W` weights of type `T` at element `i` as f32 (`n < W` of them, zeros
/// after, when `PART`).
#[inline(always)]
unsafe fn load_w<L: Lanes, const T: u8>(p: *const u8, i: usize, n: usize, part: bool) -> L::V {
    // SAFETY: the caller guarantees W (or n when part) elements from i.
    unsafe {
        match (T, part) {
            (F16, false) => load16::<L, false>(p.add(2 * i).cast()),
            (F16, true) => load16_part::<L, false>(p.add(2 * i).cast(), n),
            (BF16, false) => load16::<L, true>(p.add(2 * i).cast()),
            (BF16, true) => load16_part::<L, true>(p.add(2 * i).cast(), n),
            (_, false) => L::load(p.add(4 * i).cast()),
            (_, true) => load_part::<L>(p.add(4 * i).cast(), n),
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

/// Eight dot products of `rows` (k weights of type `T`) with `x` (k values
/// of the same type). The rows are read one after the other (sequential
/// memory when they are contiguous: DRAM streams best that way, measured
/// ~1.8x faster than interleaving eight rows), each into four accumulators
/// (steps of 4W, then single vectors into the first, then the partial
/// vector when [`Lanes::TAIL`]), summed `(a0 + a1) + (a2 + a3)` and folded
/// to eight lanes; the eight row vectors are reduced together at the end,
/// and a tail of fewer than W elements (levels without `TAIL`) is added by
/// scalar FMAs.
///
/// # Safety
/// The level's features; each pointer covers k elements.
#[inline(always)]
unsafe fn gemv8<L: Lanes, const T: u8>(k: usize, rows: &[*const u8; 8], x: *const u8) -> [f32; 8] {
    let w = L::W;
    let es = if T == F32 { 4 } else { 2 };
    // A plain loop, not a closure: closures are not compiled with the
    // function's target features (measured: a call and vzeroupper per row).
    // SAFETY: every load is of elements below k of x and the row.
    unsafe {
        let mut red = [_mm256_setzero_ps(); 8];
        for (wr, &p) in red.iter_mut().zip(rows) {
            let mut acc = [L::zero(); 4];
            let mut i = 0;
            while i + 4 * w <= k {
                let mut o = 0;
                while o < 4 * w * es {
                    // A prefetch never faults: addresses past the matrix are
                    // harmless, and wrapping_add keeps them defined.
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i * es + GEMV_PF + o).cast());
                    o += 64;
                }
                for (j, a) in acc.iter_mut().enumerate() {
                    let xv = load_w::<L, T>(x, i + w * j, w, false);
                    *a = L::fma(load_w::<L, T>(p, i + w * j, w, false), xv, *a);
                }
                i += 4 * w;
            }
            while i + w <= k {
                let xv = load_w::<L, T>(x, i, w, false);
                acc[0] = L::fma(load_w::<L, T>(p, i, w, false), xv, acc[0]);
                i += w;
            }
            if L::TAIL && i < k {
                let xv = load_w::<L, T>(x, i, k - i, true);
                acc[0] = L::fma(load_w::<L, T>(p, i, k - i, true), xv, acc[0]);
            }
            *wr = L::fold8(L::add(L::add(acc[0], acc[1]), L::add(acc[2], acc[3])));
        }
        let mut out = reduce8_256(red);
        if !L::TAIL {
            for (o, &r) in out.iter_mut().zip(rows) {
                for j in k / w * w..k {
                    *o = load_w1::<T>(r, j).mul_add(load_w1::<T>(x, j), *o);
                }
            }
        }
        out
    }
}

//! `e^x` in lanes, bit-identical to the libm `expf` that `f32::exp` calls
//! on x86-64 Linux: glibc's (since 2.27; the algorithm of Arm's
//! optimized-routines), in its FMA build `__expf_fma`, which glibc's ifunc
//! picks on every CPU with FMA and AVX2, so on every CPU that runs the lane
//! levels.
//!
//! The algorithm, in f64 (N = 32): `k = round(x · N / ln 2)`, `r = x · N /
//! ln 2 − k`, `e^x = 2^(k / N) · 2^(r / N)` with `2^(k / N)` a table entry
//! (`2^((k mod N) / N)`, its exponent field pre-biased so that adding `k <<
//! 47` to its bits scales it by `2^(k div N)`) and `2^(r / N)` a degree-3
//! polynomial, rounded to f32 once at the end. Bit-identity needs glibc's
//! constants, table and, because GCC contracted the source's multiply-adds
//! in `__expf_fma`, its five fused multiply-adds (disassembled from glibc
//! 2.36's libm.so.6):
//!
//! ```text
//! kd = fma(InvLn2N, xd, Shift)     // z = InvLn2N·xd is never rounded:
//! r  = fma(InvLn2N, xd, −(kd − Shift))  // both uses of z are fused
//! p  = fma(C0, r, C1)
//! y  = fma(C2, r, 1)
//! y  = fma(p, r·r, y) · s          // r·r and the scaling: plain products
//! ```
//!
//! The lanes compute that for every argument; lanes with `|x| >= 88` or NaN
//! (glibc's slow path: overflow, underflow, subnormal results, ±∞, NaN) are
//! recomputed with `f32::exp` itself, so they are identical by
//! construction. A libm with another `expf` (musl, another OS, a future
//! glibc) gives other bits: `cpu::vector` checks the lanes against
//! `f32::exp` once per process before using them.
//!
//! The fast path, for eight f32 lanes at a time: [`fast8_avx2`] (AVX2 +
//! FMA: two four-lane f64 halves, T looked up with eight 32-bit permutes of
//! its words) and [`fast8_avx512`] (AVX-512 F: one eight-lane f64 vector,
//! T looked up with two-register permutes). Per element on the Xeon that
//! built them (on-CPU time, a loop in L1): a gather of T cost 2.6 ns, more
//! than `f32::exp` (2.1 ns); the AVX2 permutes 1.1 ns; the AVX-512 version
//! 0.5 ns (the AVX2 one at the AVX-512 level: 1.1 ns).

use std::arch::x86_64::*;

/// N / ln 2 (N = 32), glibc's `InvLn2N`.
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// 1.5 · 2^52: adding it rounds a |z| < 2^51 to an integer in the low bits.
const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// 2^(r / N) ≈ 1 + C2·r + C1·r² + C0·r³ (glibc's `poly_scaled`).
const C0: f64 = f64::from_bits(0x3ebc_6af8_4b91_2394);
const C1: f64 = f64::from_bits(0x3f2e_bfce_50fa_c4f3);
const C2: f64 = f64::from_bits(0x3f96_2e42_ff0c_52d6);
/// The bits of 2^(i / 32), correctly rounded, minus `i << 47` (glibc's
/// `__exp2f_data.tab`).
const T: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// T's entries split into their low (`[0]`) and high (`[1]`) 32-bit words,
/// for 32-bit permutes.
static T_WORDS: [[u32; 32]; 2] = {
    let mut w = [[0u32; 32]; 2];
    let mut i = 0;
    while i < 32 {
        w[0][i] = T[i] as u32;
        w[1][i] = (T[i] >> 32) as u32;
        i += 1;
    }
    w
};
/// T, for 64-bit loads.
static T64: [u64; 32] = T;

/// Lanes whose `|x|` is at least this (or NaN) take glibc's slow path; the
/// lanes hand them to `f32::exp`.
pub(crate) const SLOW: f32 = 88.0;

/// `vpermd`: per lane, the word of `t` that bits 0..2 of `idx`'s pick.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn perm(t: __m256i, idx: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(t, idx))
}

/// One of T's word tables looked up for eight 32-bit indices (bits 0..4
/// of each; the higher bits are ignored): four in-register permutes by
/// bits 0..2, then blends on bits 3 and 4.
///
/// # Safety
/// AVX2; `w` is one of [`T_WORDS`]' rows.
#[inline(always)]
unsafe fn words8(w: &[u32; 32], idx: __m256i) -> __m256i {
    let p = w.as_ptr().cast::<__m256i>();
    // SAFETY: the four loads read w's 32 entries.
    let (w0, w1, w2, w3) = unsafe {
        (
            _mm256_loadu_si256(p),
            _mm256_loadu_si256(p.add(1)),
            _mm256_loadu_si256(p.add(2)),
            _mm256_loadu_si256(p.add(3)),
        )
    };
    // The index's bits 3 and 4 moved to the sign bit, which blendv reads.
    let b3 = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx));
    let b4 = _mm256_castsi256_ps(_mm256_slli_epi32::<27>(idx));
    let lo = _mm256_blendv_ps(perm(w0, idx), perm(w1, idx), b3);
    let hi = _mm256_blendv_ps(perm(w2, idx), perm(w3, idx), b3);
    _mm256_castps_si256(_mm256_blendv_ps(lo, hi, b4))
}

/// The end of glibc's fast path on four f64 lanes: `kd` (before `Shift` is
/// taken off), `r`, and T's entries `t` for them, to the f32 results.
///
/// # Safety
/// AVX2 and FMA.
#[inline(always)]
unsafe fn finish4(t: __m256i, kd: __m256d, r: __m256d) -> __m128 {
    let ki = _mm256_castpd_si256(kd);
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let p = _mm256_fmadd_pd(_mm256_set1_pd(C0), r, _mm256_set1_pd(C1));
    let y = _mm256_fmadd_pd(_mm256_set1_pd(C2), r, _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(p, _mm256_mul_pd(r, r), y);
    _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
}

/// glibc's fast path on eight lanes, in two f64 halves (AVX2 + FMA):
/// bit-identical to `f32::exp` where `|x| <` [`SLOW`], some value (no
/// fault) elsewhere.
///
/// # Safety
/// AVX2 and FMA.
#[inline(always)]
pub(crate) unsafe fn fast8_avx2(x: __m256) -> __m256 {
    let inv = _mm256_set1_pd(INV_LN2_N);
    let shift = _mm256_set1_pd(SHIFT);
    let xa = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    let xb = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x));
    let (ka, kb) = (
        _mm256_fmadd_pd(inv, xa, shift),
        _mm256_fmadd_pd(inv, xb, shift),
    );
    let ra = _mm256_fmsub_pd(inv, xa, _mm256_sub_pd(ka, shift));
    let rb = _mm256_fmsub_pd(inv, xb, _mm256_sub_pd(kb, shift));
    // The indices in the low words of ka, kb: [a0 a1 b0 b1 | a2 a3 b2 b3].
    let idx = _mm256_castps_si256(_mm256_shuffle_ps::<0b10_00_10_00>(
        _mm256_castpd_ps(ka),
        _mm256_castpd_ps(kb),
    ));
    // SAFETY: AVX2 and FMA (the caller's); T_WORDS' rows are the tables.
    unsafe {
        let (lo, hi) = (words8(&T_WORDS[0], idx), words8(&T_WORDS[1], idx));
        // Interleaved back per 128-bit lane: [a0 a1 | a2 a3], [b0 b1 | b2 b3].
        let ya = finish4(_mm256_unpacklo_epi32(lo, hi), ka, ra);
        let yb = finish4(_mm256_unpackhi_epi32(lo, hi), kb, rb);
        _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(ya), yb)
    }
}

/// [`fast8_avx2`] in one f64 vector (AVX-512 F), T looked up with
/// two-register permutes; the same bits.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
pub(crate) unsafe fn fast8_avx512(x: __m256) -> __m256 {
    let xd = _mm512_cvtps_pd(x);
    let inv = _mm512_set1_pd(INV_LN2_N);
    let shift = _mm512_set1_pd(SHIFT);
    let kd = _mm512_fmadd_pd(inv, xd, shift);
    let ki = _mm512_castpd_si512(kd);
    let r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(kd, shift));
    let p = T64.as_ptr().cast::<__m512i>();
    // SAFETY: the four loads read T64's 32 entries.
    let (t0, t1, t2, t3) = unsafe {
        (
            _mm512_loadu_si512(p),
            _mm512_loadu_si512(p.add(1)),
            _mm512_loadu_si512(p.add(2)),
            _mm512_loadu_si512(p.add(3)),
        )
    };
    // Bits 0..3 of ki pick within a pair of registers, bit 4 the pair.
    let lo = _mm512_permutex2var_epi64(t0, ki, t1);
    let hi = _mm512_permutex2var_epi64(t2, ki, t3);
    let t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
    let p = _mm512_fmadd_pd(_mm512_set1_pd(C0), r, _mm512_set1_pd(C1));
    let y = _mm512_fmadd_pd(_mm512_set1_pd(C2), r, _mm512_set1_pd(1.0));
    let y = _mm512_fmadd_pd(p, _mm512_mul_pd(r, r), y);
    _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
}

/// `ys[i] = xs[i].exp()` for each bit `i` set in `slow` (the lanes of a
/// vector that left the fast path, stored to arrays).
#[inline(always)]
pub(crate) fn patch(xs: &[f32], ys: &mut [f32], slow: u32) {
    let mut m = slow;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        ys[i] = xs[i].exp();
        m &= m - 1;
    }
}

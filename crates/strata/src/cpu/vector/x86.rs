//! x86-64 AVX2 / AVX-512 bodies of [`super`]'s helpers. Every function here
//! is `unsafe` for two reasons only: the caller must have checked the CPU
//! features named in its `target_feature` (the dispatcher in `super` does),
//! and the raw pointers must cover the element counts given.

use std::arch::x86_64::*;

/// An all-ones mask of the low `n` lanes (n <= 16).
#[inline(always)]
pub(crate) fn mask16(n: usize) -> __mmask16 {
    if n >= 16 {
        !0
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// f16 → f32, sixteen at a time with a masked tail.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` holds `n` f16, `dst` room for `n` f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn f16_to_f32_avx512(n: usize, src: *const u8, dst: *mut f32) {
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n), in bounds.
        unsafe {
            let h = _mm256_maskz_loadu_epi16(m, src.add(2 * i).cast());
            _mm512_mask_storeu_ps(dst.add(i), m, _mm512_cvtph_ps(h));
        }
        i += 16;
    }
}

/// f16 → f32, eight at a time, scalar tail.
///
/// # Safety
/// AVX2 + F16C; `src` holds `n` f16, `dst` room for `n` f32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_to_f32_avx2(n: usize, src: *const u8, dst: *mut f32) {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n are in bounds.
        unsafe {
            let h = _mm_loadu_si128(src.add(2 * i).cast());
            _mm256_storeu_ps(dst.add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    while i < n {
        // SAFETY: element i < n is in bounds.
        unsafe {
            let h = src.add(2 * i).cast::<u16>().read_unaligned();
            *dst.add(i) = crate::quant::simd::f16_to_f32(h);
        }
        i += 1;
    }
}

/// bf16 → f32 (a shift), sixteen at a time with a masked tail.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` holds `n` bf16, `dst` room for `n` f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn bf16_to_f32_avx512(n: usize, src: *const u8, dst: *mut f32) {
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n), in bounds.
        unsafe {
            let h = _mm256_maskz_loadu_epi16(m, src.add(2 * i).cast());
            let v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
            _mm512_mask_storeu_ps(dst.add(i), m, _mm512_castsi512_ps(v));
        }
        i += 16;
    }
}

/// bf16 → f32, eight at a time, scalar tail.
///
/// # Safety
/// AVX2; `src` holds `n` bf16, `dst` room for `n` f32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bf16_to_f32_avx2(n: usize, src: *const u8, dst: *mut f32) {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n are in bounds.
        unsafe {
            let h = _mm_loadu_si128(src.add(2 * i).cast());
            let v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_ps(dst.add(i), _mm256_castsi256_ps(v));
        }
        i += 8;
    }
    while i < n {
        // SAFETY: element i < n is in bounds.
        unsafe {
            let h = src.add(2 * i).cast::<u16>().read_unaligned();
            *dst.add(i) = crate::quant::bf16_to_f32(h);
        }
        i += 1;
    }
}

/// f32 → f16 with `vcvtps2ph` (round to nearest even), sixteen at a time;
/// a group of sixteen holding a NaN is converted by `half` (payload match).
/// Returns the number converted (all but a tail of fewer than sixteen).
///
/// # Safety
/// AVX-512 F/BW/VL; `src` holds `n` f32, `dst` room for `n` f16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn f32_to_f16_avx512(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i .. i + 16 <= n of both rows are in bounds.
        unsafe {
            let v = _mm512_loadu_ps(src.add(i));
            if _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0 {
                for j in i..i + 16 {
                    let h = half::f16::from_f32(*src.add(j)).to_bits();
                    dst.add(2 * j).cast::<u16>().write_unaligned(h);
                }
            } else {
                let h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
                _mm256_storeu_si256(dst.add(2 * i).cast(), h);
            }
        }
        i += 16;
    }
    i
}

/// f32 → f16, eight at a time (as [`f32_to_f16_avx512`]); returns the count converted.
///
/// # Safety
/// AVX2 + F16C; `src` holds `n` f32, `dst` room for `n` f16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_to_f16_avx2(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n of both rows are in bounds.
        unsafe {
            let v = _mm256_loadu_ps(src.add(i));
            if _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0 {
                for j in i..i + 8 {
                    let h = half::f16::from_f32(*src.add(j)).to_bits();
                    dst.add(2 * j).cast::<u16>().write_unaligned(h);
                }
            } else {
                let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
                _mm_storeu_si128(dst.add(2 * i).cast(), h);
            }
        }
        i += 8;
    }
    i
}

/// f32 → bf16 with ggml's rounding (NaN: truncate and set the quiet bit;
/// otherwise round to nearest even), sixteen at a time; returns the count converted.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` holds `n` f32, `dst` room for `n` bf16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn f32_to_bf16_avx512(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i .. i + 16 <= n of both rows are in bounds.
        unsafe {
            let u = _mm512_loadu_si512(src.add(i).cast());
            let abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fff_ffff));
            let nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
            let lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            let bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
            let rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
            let quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
            let r = _mm512_mask_blend_epi32(nan, rounded, quiet);
            _mm256_storeu_si256(dst.add(2 * i).cast(), _mm512_cvtepi32_epi16(r));
        }
        i += 16;
    }
    i
}

/// x = f32(f16(x)) in place, sixteen at a time (NaN groups left to the
/// caller's scalar loop: returns the index of the first unconverted value).
///
/// # Safety
/// AVX-512 F/BW/VL; `x` holds `n` f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn round_f16_avx512(n: usize, x: *mut f32) -> usize {
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i .. i + 16 <= n are in bounds.
        unsafe {
            let v = _mm512_loadu_ps(x.add(i));
            if _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0 {
                return i;
            }
            let h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
            _mm512_storeu_ps(x.add(i), _mm512_cvtph_ps(h));
        }
        i += 16;
    }
    i
}

/// As [`round_f16_avx512`], eight at a time.
///
/// # Safety
/// AVX2 + F16C; `x` holds `n` f32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn round_f16_avx2(n: usize, x: *mut f32) -> usize {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n are in bounds.
        unsafe {
            let v = _mm256_loadu_ps(x.add(i));
            if _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0 {
                return i;
            }
            let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
            _mm256_storeu_ps(x.add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    i
}

// ---- exponential (see the module docs of `super` for the bounds) ----

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this, e^x is subnormal: the result is 0.
const EXP_LO: f32 = -87.336_55;
/// Above this, e^x overflows f32: the result is +inf.
const EXP_HI: f32 = 88.722_84;
/// e^r - 1 - r = r² · P(r), Cephes expf's coefficients.
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// e^x in sixteen lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
pub(crate) fn exp512(x: __m512) -> __m512 {
    // max/min return their second operand for a NaN: x stays NaN.
    let xc = _mm512_min_ps(
        _mm512_set1_ps(EXP_HI),
        _mm512_max_ps(_mm512_set1_ps(EXP_LO), x),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm512_mul_ps(
        xc,
        _mm512_set1_ps(LOG2E),
    ));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), xc);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let e = _mm512_fmadd_ps(
        p,
        _mm512_mul_ps(r, r),
        _mm512_add_ps(r, _mm512_set1_ps(1.0)),
    );
    let y = _mm512_scalef_ps(e, n);
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
    let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_HI));
    let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    _mm512_mask_blend_ps(over, y, _mm512_set1_ps(f32::INFINITY))
}

/// e^x in eight lanes (AVX2: 2^n built in the exponent field, so x is
/// clamped to where n <= 127; lanes above fall back to the scalar `exp`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn exp256(x: __m256) -> __m256 {
    const HI_FAST: f32 = 88.0;
    let xc = _mm256_min_ps(
        _mm256_set1_ps(HI_FAST),
        _mm256_max_ps(_mm256_set1_ps(EXP_LO), x),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        xc,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), xc);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let e = _mm256_fmadd_ps(
        p,
        _mm256_mul_ps(r, r),
        _mm256_add_ps(r, _mm256_set1_ps(1.0)),
    );
    let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    )));
    let mut y = _mm256_mul_ps(e, pow2);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    let big = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(HI_FAST));
    if _mm256_movemask_ps(big) != 0 {
        let mut v = [0f32; 8];
        let mut xs = [0f32; 8];
        // SAFETY: both arrays hold eight f32.
        unsafe {
            _mm256_storeu_ps(v.as_mut_ptr(), y);
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
        }
        for (o, &xv) in v.iter_mut().zip(&xs) {
            if xv > HI_FAST {
                *o = xv.exp();
            }
        }
        // SAFETY: v holds eight f32.
        y = unsafe { _mm256_loadu_ps(v.as_ptr()) };
    }
    y
}

/// `out = x / (1 + e^-x) (· up if up is not null)`, sixteen at a time with
/// a masked tail; returns n.
///
/// # Safety
/// AVX-512 F/BW/VL; `x`, `out` (and `up` unless null) cover n f32; `out`
/// may equal `x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn silu_avx512(n: usize, x: *const f32, up: *const f32, out: *mut f32) -> usize {
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n) of every row.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, x.add(i));
            let e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
            let mut s = _mm512_div_ps(v, _mm512_add_ps(one, e));
            if !up.is_null() {
                s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up.add(i)));
            }
            _mm512_mask_storeu_ps(out.add(i), m, s);
        }
        i += 16;
    }
    n
}

/// As [`silu_avx512`], eight at a time; returns the count done (a tail of
/// fewer than eight is left to the caller).
///
/// # Safety
/// AVX2 + FMA; as [`silu_avx512`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn silu_avx2(n: usize, x: *const f32, up: *const f32, out: *mut f32) -> usize {
    let one = _mm256_set1_ps(1.0);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n of every row.
        unsafe {
            let v = _mm256_loadu_ps(x.add(i));
            let e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
            let mut s = _mm256_div_ps(v, _mm256_add_ps(one, e));
            if !up.is_null() {
                s = _mm256_mul_ps(s, _mm256_loadu_ps(up.add(i)));
            }
            _mm256_storeu_ps(out.add(i), s);
        }
        i += 8;
    }
    i
}

/// `x = e^(x - shift)` in place, sixteen at a time; returns n.
///
/// # Safety
/// AVX-512 F/BW/VL; `x` covers n f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn exp_shifted_avx512(n: usize, x: *mut f32, shift: f32) -> usize {
    let s = _mm512_set1_ps(shift);
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n).
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, x.add(i));
            _mm512_mask_storeu_ps(x.add(i), m, exp512(_mm512_sub_ps(v, s)));
        }
        i += 16;
    }
    n
}

/// `x = e^(x - shift)` in place, eight at a time; returns the count done.
///
/// # Safety
/// AVX2 + FMA; `x` covers n f32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn exp_shifted_avx2(n: usize, x: *mut f32, shift: f32) -> usize {
    let s = _mm256_set1_ps(shift);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n.
        unsafe {
            let v = _mm256_loadu_ps(x.add(i));
            _mm256_storeu_ps(x.add(i), exp256(_mm256_sub_ps(v, s)));
        }
        i += 8;
    }
    i
}

/// Σ x² in f64: eight f64 lanes, two accumulators, then a fixed tree.
///
/// # Safety
/// AVX-512 F/BW/VL; `x` covers n f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn sum_sq_avx512(n: usize, x: *const f32) -> f64 {
    let mut a0 = _mm512_setzero_pd();
    let mut a1 = _mm512_setzero_pd();
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n).
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.add(i)) };
        let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
            _mm512_castps_pd(v),
        )));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
        i += 16;
    }
    _mm512_reduce_add_pd(_mm512_add_pd(a0, a1))
}

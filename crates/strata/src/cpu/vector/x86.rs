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

//! The per-level f32 vector operations ([`Lanes`]: AVX-512 in [`L512`],
//! AVX2 + FMA + F16C in [`L256`]) that the x86 kernels are written over.

use std::arch::x86_64::*;

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
    /// `W` bf16 values at `p` (any alignment) widened to f32.
    unsafe fn load_bf16(p: *const u16) -> Self::V;
    /// Each lane rounded to f16 (nearest even), stored as `W` f16 at `p`.
    unsafe fn store_h(p: *mut u16, v: Self::V);
    /// True if any lane is NaN.
    unsafe fn any_nan(v: Self::V) -> bool;
    /// `a·b + c`, rounded once.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    /// Each lane with its sign bit flipped (as scalar `-x`, NaNs included).
    unsafe fn neg(v: Self::V) -> Self::V;
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
    /// Lane `j` is [`Lanes::hsum`] of vector `j` of the `W` at `r`, bit for
    /// bit: the same pairs added at each step, for `W` vectors at once.
    unsafe fn hsum_lanes(r: *const Self::V) -> Self::V;
    /// Each lane rounded to the nearest integer (ties to even).
    unsafe fn round_int(v: Self::V) -> Self::V;
    /// `y · 2^n` for integral `n` in −126..=127.
    unsafe fn pow2(y: Self::V, n: Self::V) -> Self::V;
    /// Per lane `a < b ? x : y`.
    unsafe fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// Per lane `a > b ? x : y`.
    unsafe fn select_gt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// True when the row kernels finish a row's last partial vector in
    /// lanes (AVX-512: masked loads and stores), false when they leave it
    /// to the caller's scalar loop (AVX2).
    const TAIL: bool;
    /// The largest argument [`super::exp`] computes in lanes: `2^n` must be
    /// representable by [`Lanes::pow2`] (AVX2 builds it in the exponent
    /// field, so n <= 127).
    const EXP_FAST_HI: f32;
    /// [`super::exp`]'s result `y` for the lanes of `x` above
    /// [`Lanes::EXP_FAST_HI`] (AVX-512: +inf above [`super::EXP_HI`]; AVX2:
    /// libm's `exp` of those lanes).
    unsafe fn exp_above(x: Self::V, y: Self::V) -> Self::V;
    /// glibc's `expf` fast path per lane ([`super::expf`]): `f32::exp`'s
    /// bits where `|x| <` [`super::expf::SLOW`], any value elsewhere.
    unsafe fn expf_fast(x: Self::V) -> Self::V;
    /// Bit `i` set where lane `i` is NaN or `|x| >= lim`.
    unsafe fn abs_not_below(x: Self::V, lim: f32) -> u32;
    /// The lanes folded to eight by adding the upper half to the lower
    /// (AVX-512), or unchanged (AVX2).
    unsafe fn fold8(v: Self::V) -> __m256;
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
    unsafe fn load_bf16(p: *const u16) -> __m512 {
        // SAFETY: forwarded contract (16 readable bf16).
        let h = unsafe { _mm256_loadu_si256(p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
    #[inline(always)]
    unsafe fn store_h(p: *mut u16, v: __m512) {
        let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        // SAFETY: forwarded contract (16 writable f16).
        unsafe { _mm256_storeu_si256(p.cast(), h) }
    }
    #[inline(always)]
    unsafe fn any_nan(v: __m512) -> bool {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) != 0
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
    unsafe fn div(a: __m512, b: __m512) -> __m512 {
        _mm512_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn neg(v: __m512) -> __m512 {
        _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(v),
            _mm512_set1_epi32(i32::MIN),
        ))
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
    unsafe fn hsum_lanes(r: *const __m512) -> __m512 {
        // SAFETY: forwarded contract (16 readable vectors).
        let r = unsafe { std::slice::from_raw_parts(r, 16) };
        // hsum's steps, each on two vectors' halves side by side.
        // 256-bit halves: u[a] = [r[2a] | r[2a + 1]], eight lanes each.
        let u: [__m512; 8] = std::array::from_fn(|a| {
            let (x, y) = (r[2 * a], r[2 * a + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0xee>(x, y),
                _mm512_shuffle_f32x4::<0x44>(x, y),
            )
        });
        // 128-bit halves: one quad per vector r[4b .. 4b + 4].
        let v: [__m512; 4] = std::array::from_fn(|b| {
            let (x, y) = (u[2 * b], u[2 * b + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0xdd>(x, y),
                _mm512_shuffle_f32x4::<0x88>(x, y),
            )
        });
        // x0 + x2 and x1 + x3 in each quad, two vectors' quads interleaved.
        let w: [__m512; 2] = std::array::from_fn(|c| {
            let (x, y) = (v[2 * c], v[2 * c + 1]);
            _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(x, y),
                _mm512_shuffle_ps::<0xee>(x, y),
            )
        });
        // the last pair: lane 4k + i holds vector 4i + k
        let z = _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(w[0], w[1]),
            _mm512_shuffle_ps::<0xdd>(w[0], w[1]),
        );
        let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(idx, z)
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
    const TAIL: bool = true;
    const EXP_FAST_HI: f32 = super::EXP_HI;
    #[inline(always)]
    unsafe fn exp_above(x: __m512, y: __m512) -> __m512 {
        // SAFETY: lane arithmetic at this level.
        unsafe { Self::select_gt(x, Self::splat(super::EXP_HI), Self::splat(f32::INFINITY), y) }
    }
    #[inline(always)]
    unsafe fn expf_fast(x: __m512) -> __m512 {
        let lo = _mm512_castps512_ps256(x);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
        // SAFETY: this level has AVX-512 F.
        let (lo, hi) = unsafe { (super::expf::fast8_avx512(lo), super::expf::fast8_avx512(hi)) };
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
            _mm256_castps_pd(hi),
        ))
    }
    #[inline(always)]
    unsafe fn abs_not_below(x: __m512, lim: f32) -> u32 {
        u32::from(_mm512_cmp_ps_mask::<_CMP_NLT_UQ>(
            _mm512_abs_ps(x),
            _mm512_set1_ps(lim),
        ))
    }
    #[inline(always)]
    unsafe fn fold8(v: __m512) -> __m256 {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        _mm256_add_ps(_mm512_castps512_ps256(v), hi)
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
    unsafe fn load_bf16(p: *const u16) -> __m256 {
        // SAFETY: forwarded contract (8 readable bf16).
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }
    #[inline(always)]
    unsafe fn store_h(p: *mut u16, v: __m256) {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        // SAFETY: forwarded contract (8 writable f16).
        unsafe { _mm_storeu_si128(p.cast(), h) }
    }
    #[inline(always)]
    unsafe fn any_nan(v: __m256) -> bool {
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0
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
    unsafe fn div(a: __m256, b: __m256) -> __m256 {
        _mm256_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn neg(v: __m256) -> __m256 {
        _mm256_xor_ps(v, _mm256_set1_ps(-0.0))
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
    unsafe fn hsum_lanes(r: *const __m256) -> __m256 {
        // SAFETY: forwarded contract (8 readable vectors).
        let r = unsafe { std::slice::from_raw_parts(r, 8) };
        // halves: u[a] = [r[2a] | r[2a + 1]], four lanes each
        let u: [__m256; 4] = std::array::from_fn(|a| {
            let (x, y) = (r[2 * a], r[2 * a + 1]);
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(x, y),
                _mm256_permute2f128_ps::<0x31>(x, y),
            )
        });
        // the two horizontal adds: lanes [r0, r2, r4, r6 | r1, r3, r5, r7]
        let h = _mm256_hadd_ps(_mm256_hadd_ps(u[0], u[1]), _mm256_hadd_ps(u[2], u[3]));
        _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
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
    const TAIL: bool = false;
    const EXP_FAST_HI: f32 = 88.0;
    #[inline(always)]
    unsafe fn exp_above(x: __m256, y: __m256) -> __m256 {
        let big = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(Self::EXP_FAST_HI));
        if _mm256_movemask_ps(big) == 0 {
            return y;
        }
        let (mut v, mut xs) = ([0f32; 8], [0f32; 8]);
        // SAFETY: both arrays hold eight f32.
        unsafe {
            _mm256_storeu_ps(v.as_mut_ptr(), y);
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
        }
        for (o, &xv) in v.iter_mut().zip(&xs) {
            if xv > Self::EXP_FAST_HI {
                *o = xv.exp();
            }
        }
        // SAFETY: v holds eight f32.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }
    #[inline(always)]
    unsafe fn expf_fast(x: __m256) -> __m256 {
        // SAFETY: this level has AVX2 and FMA.
        unsafe { super::expf::fast8_avx2(x) }
    }
    #[inline(always)]
    unsafe fn abs_not_below(x: __m256, lim: f32) -> u32 {
        let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(a, _mm256_set1_ps(lim))) as u32
    }
    #[inline(always)]
    unsafe fn fold8(v: __m256) -> __m256 {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of mixed sign and magnitude (2^-20 .. 2^20), so that adding
    /// them in another order changes the rounded sum.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::conformance::Rng::new(seed);
        let (m, e) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -20.0, 20.0));
        m.iter().zip(&e).map(|(m, e)| m * e.exp2()).collect()
    }

    /// `hsum_lanes` of the `W` vectors at `x` beside `hsum` of each.
    ///
    /// # Safety
    /// The level's CPU features; `x` holds `W·W` values.
    #[inline(always)]
    unsafe fn both<L: Lanes>(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let w = L::W;
        // SAFETY: the caller's features; x holds w·w values.
        unsafe {
            let r: Vec<L::V> = (0..w).map(|j| L::load(x.as_ptr().add(j * w))).collect();
            let mut lanes = vec![0f32; w];
            L::store(lanes.as_mut_ptr(), L::hsum_lanes(r.as_ptr()));
            (lanes, r.iter().map(|&v| L::hsum(v)).collect())
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn both512(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        // SAFETY: forwarded contract.
        unsafe { both::<L512>(x) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn both256(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        // SAFETY: forwarded contract.
        unsafe { both::<L256>(x) }
    }

    #[test]
    fn hsum_lanes_is_hsum_of_each_vector_bit_for_bit() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for seed in 0..50 {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the features were detected; 256 values.
                let (a, b) = unsafe { both512(&values(256, seed)) };
                assert_eq!(bits(&a), bits(&b), "avx512, seed {seed}");
            }
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c");
            if avx2 {
                // SAFETY: the features were detected; 64 values.
                let (a, b) = unsafe { both256(&values(64, seed)) };
                assert_eq!(bits(&a), bits(&b), "avx2, seed {seed}");
            }
        }
    }
}

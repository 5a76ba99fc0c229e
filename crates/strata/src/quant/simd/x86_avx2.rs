//! AVX2 + FMA + F16C kernels: one 32-element block per 256-bit register.
//!
//! Integer block sums are exact for any input bytes: 4/5-bit quants are kept
//! unsigned (`vpmaddubsw` of u8 ≤ 31 by i8 cannot saturate) with the offset
//! subtracted as `offset · Σy`; Q8_0 × Q8_0 widens both sides to i16.
//!
//! Every `unsafe fn` here requires the CPU to support AVX2, FMA and F16C;
//! [`vec_dot_fn`] / [`quantize_row_fn`] are only called by the dispatcher
//! after it checked that ([`super::Isa::is_supported`]), and the safe
//! wrappers they return check the row lengths before any raw read.

use super::super::{put_f16, DType, QuantizeRowFn, VecDotFn, QK};
use super::dot_blocks;
use std::arch::x86_64::*;

/// Defines a safe `VecDotFn` wrapper around an AVX2-level kernel.
macro_rules! safe_dot {
    ($name:ident, $imp:ident, $ty:expr) => {
        fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            let nb = dot_blocks($ty, n, x, y);
            // SAFETY: only handed out once the CPU was checked for this level's
            // features (module docs); both rows hold `nb` whole blocks.
            unsafe { $imp(nb, x.as_ptr(), y.as_ptr()) }
        }
    };
}
pub(super) use safe_dot;

safe_dot!(dot_q4_0, dot_q4_0_imp, DType::Q4_0);
safe_dot!(dot_q4_1, dot_q4_1_imp, DType::Q4_1);
safe_dot!(dot_q5_0, dot_q5_0_imp, DType::Q5_0);
safe_dot!(dot_q5_1, dot_q5_1_imp, DType::Q5_1);
safe_dot!(dot_q8_0, dot_q8_0_imp, DType::Q8_0);
safe_dot!(dot_f32, dot_f32_imp, DType::F32);
safe_dot!(dot_f16, dot_f16_imp, DType::F16);
safe_dot!(dot_bf16, dot_bf16_imp, DType::BF16);

/// This level's dot product for `dtype`.
pub(super) fn vec_dot_fn(dtype: DType) -> Option<VecDotFn> {
    Some(match dtype {
        DType::Q4_0 => dot_q4_0,
        DType::Q4_1 => dot_q4_1,
        DType::Q5_0 => dot_q5_0,
        DType::Q5_1 => dot_q5_1,
        DType::Q8_0 => dot_q8_0,
        DType::F32 => dot_f32,
        DType::F16 => dot_f16,
        DType::BF16 => dot_bf16,
        _ => return None,
    })
}

/// This level's row quantizer for `dtype` (the activation formats).
pub(super) fn quantize_row_fn(dtype: DType) -> Option<QuantizeRowFn> {
    Some(match dtype {
        DType::Q8_0 => quantize_q8_0,
        DType::Q8_1 => quantize_q8_1,
        DType::F16 => quantize_f16,
        _ => return None,
    })
}

// ---- shared block helpers (inlined into the AVX-512 kernels too) ----

/// Horizontal sum of eight f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `f16(a) · f16(b)` for the f16 scales at `a` and `b` (2 bytes each),
/// converted by `vcvtph2ps` (exact, like [`super::f16_to_f32`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn scale_product(a: *const u8, b: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes at a and at b.
    let (ha, hb) = unsafe {
        (
            a.cast::<u16>().read_unaligned(),
            b.cast::<u16>().read_unaligned(),
        )
    };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(ha) | (i32::from(hb) << 16)));
    _mm_cvtss_f32(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// The 32 nibbles at `p` (16 bytes) as u8 lanes in element order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(p.cast()) };
    _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
        _mm256_set1_epi8(0x0f),
    )
}

/// The 32 fifth bits of the little-endian u32 at `p` as `0x10` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn high_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes.
    let qh = unsafe { p.cast::<i32>().read_unaligned() };
    // Byte j takes byte j / 8 of qh, then tests bit j % 8.
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    let set = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Σ q_j y_j − offset Σ y_j in eight i32 lanes, exact: `q` u8 ≤ 31, `y` i8.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn sum_u8_i8(q: __m256i, y: __m256i, offset: i8) -> __m256i {
    let mut p = _mm256_maddubs_epi16(q, y);
    if offset != 0 {
        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(offset), y));
    }
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Σ x_j y_j of two i8 vectors in eight i32 lanes, exact (widened to i16).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn sum_i8_i8(x: __m256i, y: __m256i) -> __m256i {
    let w = |v: __m256i, hi: bool| {
        _mm256_cvtepi8_epi16(if hi {
            _mm256_extracti128_si256(v, 1)
        } else {
            _mm256_castsi256_si128(v)
        })
    };
    _mm256_add_epi32(
        _mm256_madd_epi16(w(x, false), w(y, false)),
        _mm256_madd_epi16(w(x, true), w(y, true)),
    )
}

// ---- quantized dot products ----

/// One block type's dot product: per block, eight exact i32 partial sums
/// scaled by `d_x d_y` into an f32 accumulator, plus `Σ m_x s_y` for the
/// `_1` types.
macro_rules! block_dot {
    ($imp:ident, $xb:expr, $yb:expr, |$bx:ident, $by:ident| $sum:expr, min: $min:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut mins = 0.0f32;
            for i in 0..nb {
                // SAFETY: block i of both rows is in bounds (nb checked by the wrapper).
                let ($bx, $by) = unsafe { (x.add(i * $xb), y.add(i * $yb)) };
                // SAFETY: as above; the block helpers read inside the blocks.
                let (sumi, d) = unsafe { ($sum, scale_product($bx, $by)) };
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
                if $min {
                    // SAFETY: the `_1` blocks store m / s at byte 2.
                    mins += unsafe { scale_product($bx.add(2), $by.add(2)) };
                }
            }
            hsum_ps(acc) + mins
        }
    };
}

const Q4_0: usize = DType::Q4_0.type_size();
const Q4_1: usize = DType::Q4_1.type_size();
const Q5_0: usize = DType::Q5_0.type_size();
const Q5_1: usize = DType::Q5_1.type_size();
const Q8_0: usize = DType::Q8_0.type_size();
const Q8_1: usize = DType::Q8_1.type_size();

block_dot!(dot_q4_0_imp, Q4_0, Q8_0, |bx, by| sum_u8_i8(
    nibbles(bx.add(2)),
    _mm256_loadu_si256(by.add(2).cast()),
    8
), min: false);
block_dot!(dot_q4_1_imp, Q4_1, Q8_1, |bx, by| sum_u8_i8(
    nibbles(bx.add(4)),
    _mm256_loadu_si256(by.add(4).cast()),
    0
), min: true);
block_dot!(dot_q5_0_imp, Q5_0, Q8_0, |bx, by| sum_u8_i8(
    _mm256_or_si256(nibbles(bx.add(6)), high_bits(bx.add(2))),
    _mm256_loadu_si256(by.add(2).cast()),
    16
), min: false);
block_dot!(dot_q5_1_imp, Q5_1, Q8_1, |bx, by| sum_u8_i8(
    _mm256_or_si256(nibbles(bx.add(8)), high_bits(bx.add(4))),
    _mm256_loadu_si256(by.add(4).cast()),
    0
), min: true);
block_dot!(dot_q8_0_imp, Q8_0, Q8_0, |bx, by| sum_i8_i8(
    _mm256_loadu_si256(bx.add(2).cast()),
    _mm256_loadu_si256(by.add(2).cast())
), min: false);

// ---- float dot products ----

/// A float dot product: `$load(p)` reads eight elements as f32 at `p`;
/// four accumulators of eight lanes, a scalar tail.
macro_rules! float_dot {
    ($imp:ident, $es:expr, |$p:ident| $load:expr, |$q:ident| $one:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(n: usize, x: *const u8, y: *const u8) -> f32 {
            let ld = |$p: *const u8| -> __m256 {
                // SAFETY: callers below only pass pointers to 8 in-bounds elements.
                unsafe { $load }
            };
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, a) in acc.iter_mut().enumerate() {
                    // SAFETY: elements i + 8k .. i + 8k + 8 < n are in bounds.
                    let (px, py) = unsafe { (x.add((i + 8 * k) * $es), y.add((i + 8 * k) * $es)) };
                    *a = _mm256_fmadd_ps(ld(px), ld(py), *a);
                }
                i += 32;
            }
            while i + 8 <= n {
                // SAFETY: elements i .. i + 8 <= n are in bounds.
                let (px, py) = unsafe { (x.add(i * $es), y.add(i * $es)) };
                acc[0] = _mm256_fmadd_ps(ld(px), ld(py), acc[0]);
                i += 8;
            }
            let s01 = _mm256_add_ps(acc[0], acc[1]);
            let s23 = _mm256_add_ps(acc[2], acc[3]);
            let mut sum = hsum_ps(_mm256_add_ps(s01, s23));
            while i < n {
                let one = |$q: *const u8| -> f32 {
                    // SAFETY: element i < n is in bounds.
                    unsafe { $one }
                };
                // SAFETY: element i < n is in bounds.
                let (px, py) = unsafe { (x.add(i * $es), y.add(i * $es)) };
                sum += one(px) * one(py);
                i += 1;
            }
            sum
        }
    };
}

float_dot!(dot_f32_imp, 4, |p| _mm256_loadu_ps(p.cast()), |q| q
    .cast::<f32>()
    .read_unaligned());
float_dot!(
    dot_f16_imp,
    2,
    |p| _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
    |q| super::f16_to_f32(q.cast::<u16>().read_unaligned())
);
float_dot!(
    dot_bf16_imp,
    2,
    |p| _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())),
        16
    )),
    |q| f32::from_bits(u32::from(q.cast::<u16>().read_unaligned()) << 16)
);

// ---- activation quantization ----

/// Quantizes one block of 32 f32 at `x` to i8 at `q` exactly as the scalar
/// `quantize_block_q8` does (same `d`, `1/d`, products and `roundf`);
/// returns `(d, Σq)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quantize_block_q8(x: *const f32, q: *mut u8) -> (f32, i32) {
    // SAFETY: the caller guarantees 32 readable f32 at x.
    let v: [__m256; 4] = unsafe { std::array::from_fn(|k| _mm256_loadu_ps(x.add(8 * k))) };
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut m = _mm256_setzero_ps();
    for &vk in &v {
        // maxps returns its second operand when either is NaN: NaNs are skipped,
        // as f32::max does in the scalar fold.
        m = _mm256_max_ps(_mm256_and_ps(vk, abs_mask), m);
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let d = amax / 127.0;
    let id = super::super::inv_or_zero(d);
    let idv = _mm256_set1_ps(id);
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    let (half, nhalf) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5));
    let one = _mm256_set1_epi32(1);
    let mut sum = _mm256_setzero_si256();
    let ints: [__m256i; 4] = std::array::from_fn(|k| {
        let r = _mm256_mul_ps(v[k], idv);
        // NaN → 0 (the scalar `as i32` does that), then clamp and roundf.
        let r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
        let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        let t = _mm256_cvttps_epi32(r);
        let frac = _mm256_sub_ps(r, _mm256_cvtepi32_ps(t));
        let up = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps(frac, half, _CMP_GE_OQ)),
            one,
        );
        let down = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps(frac, nhalf, _CMP_LE_OQ)),
            one,
        );
        let qi = _mm256_sub_epi32(_mm256_add_epi32(t, up), down);
        sum = _mm256_add_epi32(sum, qi);
        qi
    });
    // i32 → i8 with in-lane packs, then undo the lane interleave.
    let p16a = _mm256_packs_epi32(ints[0], ints[1]);
    let p16b = _mm256_packs_epi32(ints[2], ints[3]);
    let p8 = _mm256_packs_epi16(p16a, p16b);
    let p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: the caller guarantees 32 writable bytes at q.
    unsafe { _mm256_storeu_si256(q.cast(), p8) };
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(sum),
        _mm256_extracti128_si256(sum, 1),
    );
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    (d, _mm_cvtsi128_si32(s))
}

/// Quantizes whole blocks of `src` into `dst` (`$yb`-byte blocks, quants at
/// byte `$qoff`), then writes the scales with `$put(block, d, Σq)`.
macro_rules! quantize_q8 {
    ($name:ident, $imp:ident, $ty:expr, $qoff:expr, |$y:ident, $d:ident, $s:ident| $put:expr) => {
        fn $name(src: &[f32], dst: &mut [u8]) {
            super::super::debug_check_row($ty, src.len(), dst.len());
            let nb = (src.len() / QK).min(dst.len() / $ty.type_size());
            // SAFETY: only handed out once the CPU was checked for AVX2/FMA/F16C;
            // nb whole blocks fit both slices.
            unsafe { $imp(nb, src.as_ptr(), dst.as_mut_ptr()) };
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(nb: usize, src: *const f32, dst: *mut u8) {
            const YB: usize = $ty.type_size();
            for b in 0..nb {
                // SAFETY: block b of both rows is in bounds (nb from the slice lengths).
                let (x, yp) = unsafe { (src.add(b * QK), dst.add(b * YB)) };
                // SAFETY: as above.
                let ($d, $s) = unsafe { quantize_block_q8(x, yp.add($qoff)) };
                // SAFETY: the block's YB bytes are in bounds and only written here.
                let $y = unsafe { std::slice::from_raw_parts_mut(yp, YB) };
                $put;
            }
        }
    };
}

quantize_q8!(
    quantize_q8_0,
    quantize_q8_0_imp,
    DType::Q8_0,
    2,
    |y, d, s| {
        let _ = s;
        put_f16(y, 0, d)
    }
);
quantize_q8!(
    quantize_q8_1,
    quantize_q8_1_imp,
    DType::Q8_1,
    4,
    |y, d, s| {
        put_f16(y, 0, d);
        put_f16(y, 2, s as f32 * d)
    }
);

/// f32 → f16 row, eight at a time with `vcvtps2ph` (round to nearest even,
/// as the scalar `half` conversion); from the first group of eight holding a
/// NaN on, and for the tail, the scalar conversion (so NaN payloads match it).
fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), src.len() * 2);
    let n = src.len().min(dst.len() / 2);
    // SAFETY: only handed out once the CPU was checked for AVX2/FMA/F16C; n
    // elements fit both slices.
    let done = unsafe { quantize_f16_imp(n, src.as_ptr(), dst.as_mut_ptr()) };
    super::super::quantize_row_f16(&src[done..n], &mut dst[2 * done..2 * n]);
}

/// Converts the leading multiple of eight elements, each group of eight
/// without NaNs; returns how many were converted.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_f16_imp(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i .. i + 8 <= n of both rows are in bounds.
        let v = unsafe { _mm256_loadu_ps(src.add(i)) };
        if _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0 {
            break;
        }
        let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        // SAFETY: as above (16 bytes at element i).
        unsafe { _mm_storeu_si128(dst.add(2 * i).cast(), h) };
        i += 8;
    }
    i
}

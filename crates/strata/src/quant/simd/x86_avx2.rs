//! AVX2 + FMA + F16C kernels: one 32-element block per 256-bit register.
//!
//! Integer block sums are exact for any input bytes: 4/5-bit quants are kept
//! unsigned (`vpmaddubsw` of u8 ≤ 31 by i8 cannot saturate) with the offset
//! subtracted as `offset · Σy`; Q8_0 × Q8_0 widens both sides to i16.
//!
//! The Q4_K / Q5_K / Q6_K · Q8_K kernels compute each super-block's integer
//! sums the same way (6-bit Q6_K quants stay unsigned, `32 · Σy` taken off
//! per pair) and then add the scalar reference's f32 term in its order, so
//! they return the scalar result bit for bit; so does the Q8_K quantizer.
//! The Q2_K, Q3_K, IQ4_XS and IQ4_NL dots live in [`super::x86_avx2_k`].
//!
//! Every `unsafe fn` here requires the CPU to support AVX2, FMA and F16C;
//! this level's table (`own`, with the kernels of both files) is only
//! reached through [`super::kernels_for`] after it checked that
//! ([`super::Isa::is_supported`]), and the safe wrappers it holds check the
//! row lengths before any raw read.

use super::super::k_search::scale_min_k4;
use super::super::q8_k::bsum_at;
use super::super::{put_f16, DType, QK, QK_K};
use super::x86_avx2_k::{dot_iq4_nl_imp, dot_iq4_xs_imp, dot_q2_k_imp, dot_q3_k_imp};
use super::{f16_to_f32, sum_blocks};
use std::arch::x86_64::*;

super::table! {
    dot: all,
    dot4: [],
    quantize: [Q8_0 => quantize_q8_0, Q8_1 => quantize_q8_1, F16 => quantize_f16, Q8_K => quantize_q8_k],
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

/// One block type's dot product (`$xt` · `$yt`): per block, eight exact
/// i32 partial sums scaled by `d_x d_y` into an f32 accumulator, plus
/// `Σ m_x s_y` for the `_1` types.
macro_rules! block_dot {
    ($imp:ident, $xt:expr, $yt:expr, |$bx:ident, $by:ident| $sum:expr, min: $min:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            const XB: usize = $xt.type_size();
            const YB: usize = $yt.type_size();
            let mut acc = _mm256_setzero_ps();
            let mut mins = 0.0f32;
            for i in 0..nb {
                // SAFETY: block i of both rows is in bounds (nb checked by the wrapper).
                let ($bx, $by) = unsafe { (x.add(i * XB), y.add(i * YB)) };
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

block_dot!(dot_q4_0_imp, DType::Q4_0, DType::Q8_0, |bx, by| sum_u8_i8(
    nibbles(bx.add(2)),
    _mm256_loadu_si256(by.add(2).cast()),
    8
), min: false);
block_dot!(dot_q4_1_imp, DType::Q4_1, DType::Q8_1, |bx, by| sum_u8_i8(
    nibbles(bx.add(4)),
    _mm256_loadu_si256(by.add(4).cast()),
    0
), min: true);
block_dot!(dot_q5_0_imp, DType::Q5_0, DType::Q8_0, |bx, by| sum_u8_i8(
    _mm256_or_si256(nibbles(bx.add(6)), high_bits(bx.add(2))),
    _mm256_loadu_si256(by.add(2).cast()),
    16
), min: false);
block_dot!(dot_q5_1_imp, DType::Q5_1, DType::Q8_1, |bx, by| sum_u8_i8(
    _mm256_or_si256(nibbles(bx.add(8)), high_bits(bx.add(4))),
    _mm256_loadu_si256(by.add(4).cast()),
    0
), min: true);
block_dot!(dot_q8_0_imp, DType::Q8_0, DType::Q8_0, |bx, by| sum_i8_i8(
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

/// `r + copysign(below_half, r)`: truncated, `roundf(r)` for |r| <= 127
/// when `below_half` is `0.5 - 2^-25` (`sign` is the f32 sign-bit mask).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn round_away_add(r: __m256, below_half: __m256, sign: __m256) -> __m256 {
    _mm256_add_ps(r, _mm256_or_ps(below_half, _mm256_and_ps(r, sign)))
}

/// Quantizes one block of 32 f32 at `x` to i8 at `q` exactly as the scalar
/// `quantize_block_q8` does (same `d`, `1/d`, products and `roundf`);
/// returns `(d, Σq)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn quantize_block_q8(x: *const f32, q: *mut u8) -> (f32, i32) {
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
    // roundf for |r| <= 127: trunc(r + copysign(0.5 - 2^-25, r)). The sum
    // rounds to nearest even; with the addend just below one half, a value
    // below a half-integer can no longer round up to it, and one at it still
    // does (tested over every f32 in [-127, 127] by `round_away_in_lanes`).
    let below_half = _mm256_set1_ps(0.5 - f32::EPSILON / 4.0);
    let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let mut sum = _mm256_setzero_si256();
    let ints: [__m256i; 4] = std::array::from_fn(|k| {
        let r = _mm256_mul_ps(v[k], idv);
        // NaN → 0 (the scalar `as i32` does that), then clamp and roundf.
        let r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
        let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        let qi = _mm256_cvttps_epi32(round_away_add(r, below_half, sign));
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

// ---- K-quant dot products (super-blocks of 256 against Q8_K) ----

const Q4_K: usize = DType::Q4_K.type_size();
const Q5_K: usize = DType::Q5_K.type_size();
const Q6_K: usize = DType::Q6_K.type_size();
const Q8_K: usize = DType::Q8_K.type_size();

/// Sum of the eight i32 lanes (wrapping; the callers' sums are far from it).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Bit `bit` (0..8) of every byte of `v` as `0x10` / `0` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn bit_as_16(v: __m256i, bit: i32) -> __m256i {
    // A 16-bit shift moves bit `bit` of both bytes to their bit 0; the mask
    // drops what crossed from the high byte into the low one.
    let b = _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit));
    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi8(1)), 4)
}

/// The f32 scale of the Q8_K block at `p`.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
pub(super) unsafe fn q8_k_d(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees four readable bytes.
    f32::from_le_bytes(unsafe { p.cast::<[u8; 4]>().read_unaligned() })
}

/// The f16 at `p` as f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes.
    f16_to_f32(u16::from_le_bytes(unsafe {
        p.cast::<[u8; 2]>().read_unaligned()
    }))
}

/// One Q4_K / Q5_K super-block at `bx` against the Q8_K block at `by`:
/// `(Σ_j s_j Σ q_x q_y, Σ_j m_j (bsums_2j + bsums_2j+1))`, exact. `qs` is
/// the offset of the nibbles, `qh` that of Q5_K's fifth bits.
///
/// # Safety
/// The whole super-block at `bx` (144 or 176 bytes) and the 292-byte Q8_K
/// block at `by` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn sums_q45(bx: *const u8, by: *const u8, qs: usize, qh: Option<usize>) -> (i32, i32) {
    // SAFETY: bytes 4..16 of the super-block hold its scales and mins, and
    // the whole Q8_K block is readable (caller's bounds).
    let (sc, bsums) = unsafe {
        (
            std::slice::from_raw_parts(bx.add(4), 12),
            std::slice::from_raw_parts(by, Q8_K),
        )
    };
    let m4 = _mm256_set1_epi8(0x0f);
    // SAFETY: the 32 fifth-bit bytes lie inside the Q5_K super-block.
    let high = qh.map(|o| unsafe { _mm256_loadu_si256(bx.add(o).cast()) });
    let (mut acc, mut summs) = (_mm256_setzero_si256(), 0i32);
    for c in 0..4 {
        let (s0, m0) = scale_min_k4(2 * c, sc);
        let (s1, m1) = scale_min_k4(2 * c + 1, sc);
        // SAFETY: nibble bytes 32c .. 32c + 32 and Q8_K quants 64c .. 64c + 64
        // are inside their blocks.
        let (q, y0, y1) = unsafe {
            (
                _mm256_loadu_si256(bx.add(qs + 32 * c).cast()),
                _mm256_loadu_si256(by.add(4 + 64 * c).cast()),
                _mm256_loadu_si256(by.add(4 + 64 * c + 32).cast()),
            )
        };
        let mut lo = _mm256_and_si256(q, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if let Some(h) = high {
            lo = _mm256_or_si256(lo, bit_as_16(h, 2 * c as i32));
            hi = _mm256_or_si256(hi, bit_as_16(h, 2 * c as i32 + 1));
        }
        // u8 <= 31 times i8: pair sums within ±7936, then × 6-bit scales.
        let plo = _mm256_madd_epi16(
            _mm256_maddubs_epi16(lo, y0),
            _mm256_set1_epi16(i16::from(s0)),
        );
        let phi = _mm256_madd_epi16(
            _mm256_maddubs_epi16(hi, y1),
            _mm256_set1_epi16(i16::from(s1)),
        );
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(plo, phi));
        summs += i32::from(m0) * (bsum_at(bsums, 4 * c) + bsum_at(bsums, 4 * c + 1));
        summs += i32::from(m1) * (bsum_at(bsums, 4 * c + 2) + bsum_at(bsums, 4 * c + 3));
    }
    (hsum_epi32(acc), summs)
}

/// Q4_K / Q5_K · Q8_K: per super-block the scalar reference's
/// `d_x d_y · isum - dmin_x d_y · summs`, in block order.
macro_rules! dot_q45 {
    ($imp:ident, $xb:expr, $qs:expr, $qh:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            let term = |bx: *const u8, by: *const u8| {
                // SAFETY: as above.
                let ((isum, summs), d, dmin, dy) = unsafe {
                    (
                        sums_q45(bx, by, $qs, $qh),
                        f16_at(bx),
                        f16_at(bx.add(2)),
                        q8_k_d(by),
                    )
                };
                d * dy * isum as f32 - dmin * dy * summs as f32
            };
            // SAFETY: nb blocks of both rows are in bounds (checked by the wrapper).
            unsafe { sum_blocks::<{ $xb }, Q8_K>(nb, x, y, term) }
        }
    };
}

dot_q45!(dot_q4_k_imp, Q4_K, 16, None);
dot_q45!(dot_q5_k_imp, Q5_K, 48, Some(16));

/// Q6_K · Q8_K: per super-block `d_x d_y · Σ_j s_j Σ (q - 32) q_y`, in block
/// order, as the scalar reference.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(3);
    let off = _mm256_set1_epi8(32);
    let term = |bx: *const u8, by: *const u8| {
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: ql bytes 64h .. 64h + 64 and qh bytes 128 + 32h .. + 32
            // are inside the super-block.
            let (qa, qb, qh) = unsafe {
                (
                    _mm256_loadu_si256(bx.add(64 * h).cast()),
                    _mm256_loadu_si256(bx.add(64 * h + 32).cast()),
                    _mm256_loadu_si256(bx.add(128 + 32 * h).cast()),
                )
            };
            for k in 0..4 {
                let src = if k % 2 == 0 { qa } else { qb };
                let lo = if k < 2 {
                    _mm256_and_si256(src, m4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16(src, 4), m4)
                };
                let top = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m3);
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(top, 4));
                // SAFETY: Q8_K quants 128h + 32k .. + 32 are inside the block.
                let yv =
                    unsafe { _mm256_loadu_si256(by.add(4 + 128 * h + 32 * k as usize).cast()) };
                // u8 <= 63 and 32 times i8: both within ±16128, so is their
                // difference within i16.
                let p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q, yv), _mm256_maddubs_epi16(off, yv));
                // Sub-blocks 8h + 2k (low lane) and 8h + 2k + 1 (high lane).
                let s = 8 * h + 2 * k as usize;
                // SAFETY: the i8 scales are bytes 192 .. 208 of the super-block.
                let (s0, s1) = unsafe { (*bx.add(192 + s) as i8, *bx.add(192 + s + 1) as i8) };
                let scales =
                    _mm256_set_m128i(_mm_set1_epi16(i16::from(s1)), _mm_set1_epi16(i16::from(s0)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales));
            }
        }
        // SAFETY: d is bytes 208..210 of the super-block, d_y bytes 0..4 of the Q8_K block.
        let (d, dy) = unsafe { (f16_at(bx.add(208)), q8_k_d(by)) };
        d * dy * hsum_epi32(acc) as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (checked by the wrapper).
    unsafe { sum_blocks::<Q6_K, Q8_K>(nb, x, y, term) }
}

// ---- Q8_K activation quantization ----

/// f32 → Q8_K, bit-identical to the scalar `quantize_row_q8_k`.
fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    super::super::debug_check_row(DType::Q8_K, src.len(), dst.len());
    let nb = (src.len() / QK_K).min(dst.len() / Q8_K);
    // SAFETY: only handed out once the CPU was checked for AVX2/FMA/F16C;
    // nb whole blocks fit both slices.
    unsafe { quantize_q8_k_imp(nb, src.as_ptr(), dst.as_mut_ptr()) };
}

/// Per block: the signed absolute maximum (first one on ties, NaNs skipped),
/// `q = min(127, round_ties_even(x · (-127 / max)))` with non-finite
/// products giving 0, the bsums, and `d = 1 / (-127 / max)`; an all-zero
/// block is zero bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_k_imp(nb: usize, src: *const f32, dst: *mut u8) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    for b in 0..nb {
        // SAFETY: block b of both rows is in bounds (nb from the slice lengths).
        let (x, y) = unsafe { (src.add(b * QK_K), dst.add(b * Q8_K)) };
        // SAFETY: the block's 256 f32 are readable.
        let ld = |k: usize| unsafe { _mm256_loadu_ps(x.add(8 * k)) };
        // Four independent chains (one chain of 32 maxps was the block's
        // critical path), then their maximum: the same value, as none of
        // them is NaN.
        let mut m = [_mm256_setzero_ps(); 4];
        for k in 0..QK_K / 8 {
            // maxps returns its second operand when either is NaN: NaNs are
            // skipped, as the scalar `>` comparison skips them.
            m[k % 4] = _mm256_max_ps(_mm256_and_ps(ld(k), abs_mask), m[k % 4]);
        }
        let m = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 {
            // SAFETY: the block's Q8_K bytes are writable and only written here.
            unsafe { std::ptr::write_bytes(y, 0, Q8_K) };
            continue;
        }
        // The first element whose magnitude is amax keeps its sign.
        let av = _mm256_set1_ps(amax);
        let mut first = 0;
        for k in 0..QK_K / 8 {
            let hit = _mm256_cmp_ps(_mm256_and_ps(ld(k), abs_mask), av, _CMP_EQ_OQ);
            let mask = _mm256_movemask_ps(hit);
            if mask != 0 {
                first = 8 * k + mask.trailing_zeros() as usize;
                break;
            }
        }
        // SAFETY: first < 256.
        let iscale = -127.0 / unsafe { *x.add(first) };
        let iv = _mm256_set1_ps(iscale);
        let lim = _mm256_set1_epi32(127);
        let inf = _mm256_set1_ps(f32::INFINITY);
        for g in 0..QK_K / 32 {
            let ints: [__m256i; 4] = std::array::from_fn(|k| {
                let r = _mm256_mul_ps(iv, ld(4 * g + k));
                // NaN and ±inf → 0, then round half to even (the default
                // MXCSR mode, as ggml's nearest_int) and cap at 127.
                let finite = _mm256_cmp_ps(_mm256_and_ps(r, abs_mask), inf, _CMP_LT_OQ);
                let r = _mm256_and_ps(r, finite);
                _mm256_min_epi32(_mm256_cvtps_epi32(r), lim)
            });
            let p16a = _mm256_packs_epi32(ints[0], ints[1]);
            let p16b = _mm256_packs_epi32(ints[2], ints[3]);
            let p8 = _mm256_packs_epi16(p16a, p16b);
            let p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // SAFETY: quants 32g .. 32g + 32 of the block are writable.
            unsafe { _mm256_storeu_si256(y.add(4 + 32 * g).cast(), p8) };
            // Sums of 16: bytes 0..16 (group 2g) in the low lane, 16..32 in the high.
            let s = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_set1_epi8(1), p8),
                _mm256_set1_epi16(1),
            );
            let s = _mm256_hadd_epi32(s, s);
            let s = _mm256_hadd_epi32(s, s);
            let (s0, s1) = (
                _mm256_extract_epi32::<0>(s) as i16,
                _mm256_extract_epi32::<4>(s) as i16,
            );
            // SAFETY: bsums 2g, 2g + 1 are bytes 260 + 4g .. 260 + 4g + 4 of the block.
            unsafe {
                y.add(4 + QK_K + 4 * g)
                    .cast::<[u8; 2]>()
                    .write_unaligned(s0.to_le_bytes());
                y.add(4 + QK_K + 4 * g + 2)
                    .cast::<[u8; 2]>()
                    .write_unaligned(s1.to_le_bytes());
            }
        }
        // SAFETY: d is the block's first four bytes.
        unsafe {
            y.cast::<[u8; 4]>()
                .write_unaligned((1.0 / iscale).to_le_bytes())
        };
    }
}

#[cfg(test)]
mod round_tests {
    use super::*;

    /// The lane rounding equals `f32::round` (half away from zero, as C's
    /// `roundf`) for every f32 in [-127, 127]: 2.2e9 values, eight a step.
    #[test]
    fn round_away_in_lanes() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        // Every non-negative f32 up to 127 (its bits are ordered), both signs.
        let top = 127f32.to_bits();
        let mut bits = 0u32;
        let mut bad = Vec::new();
        while bits <= top {
            // lanes 0..4: four consecutive values; lanes 4..8: their negatives
            let xs: [f32; 8] = std::array::from_fn(|i| {
                let v = f32::from_bits((bits + (i % 4) as u32).min(top));
                if i < 4 {
                    v
                } else {
                    -v
                }
            });
            // SAFETY: AVX2/FMA checked above; 8 f32 in and out.
            let got: [i32; 8] = unsafe {
                let r = round_away_add(
                    _mm256_loadu_ps(xs.as_ptr()),
                    _mm256_set1_ps(0.5 - f32::EPSILON / 4.0),
                    _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)),
                );
                std::mem::transmute(_mm256_cvttps_epi32(r))
            };
            for (x, g) in xs.iter().zip(got) {
                if x.round() as i32 != g && bad.len() < 8 {
                    bad.push((*x, g));
                }
            }
            bits += 4;
        }
        assert!(bad.is_empty(), "roundf differs at {bad:?}");
    }
}

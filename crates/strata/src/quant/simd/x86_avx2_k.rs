//! AVX2 + FMA + F16C dot products of Q2_K, Q3_K and IQ4_XS with Q8_K and of
//! IQ4_NL with Q8_0; [`super::x86_avx2`]'s table lists them.
//!
//! Each one returns the scalar reference's result bit for bit: the integer
//! sums of a (super-)block are exact for any input bytes, and the f32 terms
//! are formed and added as the scalar reference does, in block order.
//!
//! * Q2_K / Q3_K: a 256-bit register holds one 32-element run of the 2-bit
//!   quants, i.e. two 16-element sub-blocks (one per 128-bit lane); the two
//!   sub-block scales are broadcast per lane as i16 and applied with
//!   `vpmaddwd`. Q2_K's quants (u8 ≤ 3) go straight into `vpmaddubsw`; its
//!   minimum term is `Σ bsums_j · min_j` from the Q8_K row, as the scalar
//!   reference takes it. Q3_K's quants are kept unsigned (`q + 4` ≤ 7) with
//!   `4 · Σy` taken off per pair, so its bsums are not read.
//! * IQ4_XS / IQ4_NL: the 4-bit indices pick their table values with one
//!   `vpshufb` of the 16-entry table; the signed × signed products go through
//!   `vpmaddubsw(|y|, sign(v, y))` (the table values are ≥ -127, so the sign
//!   flip cannot overflow, and `|-128|` is 128 as u8).
//! * IQ4_NL: four blocks' integer sums are reduced together (`vphaddd`), and
//!   their `(d_y d_x) · sumi` terms added to the f32 sum one by one.
//!
//! Every `unsafe fn` here requires the CPU to support AVX2, FMA and F16C;
//! they are only reached through the AVX2 table after the dispatcher checked
//! that ([`super::Isa::is_supported`]), and the safe wrappers check the row
//! lengths before any raw read.

use super::super::{DType, IQ4_NL_VALUES, QK_K};
use super::sum_blocks;
use super::x86_avx2::{f16_at, hsum_epi32, nibbles, q8_k_d, scale_product};
use std::arch::x86_64::*;

const Q2_K: usize = DType::Q2_K.type_size();
const Q3_K: usize = DType::Q3_K.type_size();
const IQ4_XS: usize = DType::IQ4_XS.type_size();
const IQ4_NL: usize = DType::IQ4_NL.type_size();
const Q8_K: usize = DType::Q8_K.type_size();
const Q8_0: usize = DType::Q8_0.type_size();
/// Byte offset of the bsums in a Q8_K block.
const BSUMS: usize = 4 + QK_K;

// ---- Q2_K / Q3_K: sub-blocks of 16, two per register ----

/// The sixteen sub-block scales (u8 or i8 in `sc`) as i16: the even
/// sub-blocks' in the low lane, the odd ones' in the high lane, so that
/// [`pair_scales`] is one in-lane shuffle.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale_table(sc: __m128i, signed: bool) -> __m256i {
    let even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    let eo = _mm_shuffle_epi8(sc, even_odd);
    if signed {
        _mm256_cvtepi8_epi16(eo)
    } else {
        _mm256_cvtepu8_epi16(eo)
    }
}

/// From a [`scale_table`]: the scale of sub-block `2p` in every i16 of the
/// low lane, that of `2p + 1` in the high lane (the sub-blocks of the
/// 32-element run `p`, 0..8).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pair_scales(table: __m256i, p: usize) -> __m256i {
    // Bytes 2p, 2p + 1 (i16 number p) of each lane.
    let b = 2 * p as i16;
    _mm256_shuffle_epi8(table, _mm256_set1_epi16(((b + 1) << 8) | b))
}

/// The 2-bit quants of run `k` (0..4) of a 32-byte `qs` half as u8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn low2(qs: __m256i, k: usize) -> __m256i {
    let shifted = _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * k as i32));
    _mm256_and_si256(shifted, _mm256_set1_epi8(3))
}

/// Q2_K · Q8_K: per super-block the scalar reference's
/// `(d_y d_x) · isum - (d_y dmin_x) · summs`, in block order.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q2_k_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm_set1_epi8(0x0f);
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: the 16 scale bytes start the super-block; the 16 i16 bsums
        // are the last 32 bytes of the Q8_K block.
        let (sc, bsums) = unsafe {
            (
                _mm_loadu_si128(bx.cast()),
                _mm256_loadu_si256(by.add(BSUMS).cast()),
            )
        };
        // Σ_j bsums_j · min_j: i16 × (u8 ≤ 15), exact in i32.
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
        let summs = hsum_epi32(_mm256_madd_epi16(bsums, mins));
        let table = scale_table(_mm_and_si128(sc, m4), false);
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: qs bytes 32h .. 32h + 32 are bytes 16 + 32h .. of the super-block.
            let qs = unsafe { _mm256_loadu_si256(bx.add(16 + 32 * h).cast()) };
            for k in 0..4 {
                // SAFETY: Q8_K quants 128h + 32k .. + 32 are inside the block.
                let yv = unsafe { _mm256_loadu_si256(by.add(4 + 128 * h + 32 * k).cast()) };
                // u8 <= 3 times i8: pair sums within ±768, then × 4-bit scales.
                let p = _mm256_maddubs_epi16(low2(qs, k), yv);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, pair_scales(table, 4 * h + k)));
            }
        }
        let isum = hsum_epi32(acc);
        // SAFETY: d / dmin are bytes 80..84 of the super-block, d_y bytes 0..4
        // of the Q8_K block.
        let (d, dmin, dy) = unsafe { (f16_at(bx.add(80)), f16_at(bx.add(82)), q8_k_d(by)) };
        let (dall, dmin) = (dy * d, dy * dmin);
        dall * isum as f32 - dmin * summs as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (checked by the wrapper).
    unsafe { sum_blocks::<Q2_K, Q8_K>(nb, x, y, term) }
}

/// The sixteen 6-bit Q3_K scales at `p` (12 bytes), offset removed, as i8.
///
/// # Safety
/// `p..p + 12` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q3_scales(p: *const u8) -> __m128i {
    // SAFETY: the caller guarantees 12 readable bytes.
    let (a0, a1, a2) = unsafe {
        (
            p.cast::<u32>().read_unaligned(),
            p.add(4).cast::<u32>().read_unaligned(),
            p.add(8).cast::<u32>().read_unaligned(),
        )
    };
    let nib = 0x0f0f_0f0f;
    // Scales 4g .. 4g + 4: low nibbles from bytes 0..8 (low halves for
    // g < 2, high halves after), top two bits at bits 2g of bytes 8..12.
    let word = |low: u32, g: u32| (low | (((a2 >> (2 * g)) & 0x0303_0303) << 4)) as i32;
    let v = _mm_setr_epi32(
        word(a0 & nib, 0),
        word(a1 & nib, 1),
        word((a0 >> 4) & nib, 2),
        word((a1 >> 4) & nib, 3),
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// Bit `b` (0..8) of every byte of `v` as `4` / `0` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn bit_as_4(v: __m256i, b: i32) -> __m256i {
    // A 16-bit shift moves bit b of both bytes to their bit 2 (b <= 7, so
    // nothing crosses into bit 2 of the other byte).
    let s = if b >= 2 {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(b - 2))
    } else {
        _mm256_sll_epi16(v, _mm_cvtsi32_si128(2 - b))
    };
    _mm256_and_si256(s, _mm256_set1_epi8(4))
}

/// Q3_K · Q8_K: per super-block `(d_x d_y) · Σ_j s_j Σ q_x q_y`, in block
/// order, as the scalar reference.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q3_k_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let four = _mm256_set1_epi8(4);
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: the scales are bytes 96..108 and hmask bytes 0..32 of the
        // super-block.
        let (sc, hmask) = unsafe { (q3_scales(bx.add(96)), _mm256_loadu_si256(bx.cast())) };
        let table = scale_table(sc, true);
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: qs bytes 32h .. 32h + 32 are bytes 32 + 32h .. of the super-block.
            let qs = unsafe { _mm256_loadu_si256(bx.add(32 + 32 * h).cast()) };
            for k in 0..4 {
                // The quant plus 4: the low two bits, plus 4 where the hmask bit is set.
                let q = _mm256_or_si256(low2(qs, k), bit_as_4(hmask, (4 * h + k) as i32));
                // SAFETY: Q8_K quants 128h + 32k .. + 32 are inside the block.
                let yv = unsafe { _mm256_loadu_si256(by.add(4 + 128 * h + 32 * k).cast()) };
                // u8 <= 7 and 4 times i8: both within ±1792, so is their
                // difference within i16; then × 6-bit scales.
                let p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q, yv), _mm256_maddubs_epi16(four, yv));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, pair_scales(table, 4 * h + k)));
            }
        }
        // SAFETY: d is bytes 108..110 of the super-block, d_y bytes 0..4 of the Q8_K block.
        let (d, dy) = unsafe { (f16_at(bx.add(108)), q8_k_d(by)) };
        d * dy * hsum_epi32(acc) as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (checked by the wrapper).
    unsafe { sum_blocks::<Q3_K, Q8_K>(nb, x, y, term) }
}

// ---- IQ4_XS / IQ4_NL: table lookups ----

/// The IQ4 value table in both lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn iq4_table() -> __m256i {
    // SAFETY: IQ4_NL_VALUES is 16 readable bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(IQ4_NL_VALUES.as_ptr().cast()) })
}

/// The 32 IQ4 values of the 16 index bytes at `p` (element order), times
/// the i8 `y`, as pair sums in sixteen i16 lanes, exact.
///
/// # Safety
/// `p..p + 16` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn iq4_pairs(table: __m256i, p: *const u8, y: __m256i) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = _mm256_shuffle_epi8(table, unsafe { nibbles(p) });
    // v >= -127, so sign(v, y) is exact; |y| <= 128 as u8. Pair sums within
    // ±2 · 128 · 127 = ±32512.
    _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(v, y))
}

/// IQ4_XS · Q8_K: per super-block `(d_x d_y) · Σ_j s_j Σ v_x q_y`, in
/// block order, as the scalar reference.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_iq4_xs_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = iq4_table();
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: scales_h is bytes 2..4 and scales_l bytes 4..8 of the super-block.
        let (sh, sl) = unsafe {
            (
                u32::from(bx.add(2).cast::<u16>().read_unaligned()),
                bx.add(4).cast::<u32>().read_unaligned(),
            )
        };
        let mut acc = _mm256_setzero_si256();
        for j in 0..8 {
            let s = (((sl >> (4 * j)) & 0x0f) | (((sh >> (2 * j)) & 3) << 4)) as i16 - 32;
            // SAFETY: sub-block j's indices are bytes 8 + 16j .. + 16 of the
            // super-block, its Q8_K quants 32j .. 32j + 32.
            let p = unsafe {
                let yv = _mm256_loadu_si256(by.add(4 + 32 * j).cast());
                iq4_pairs(table, bx.add(8 + 16 * j), yv)
            };
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(s)));
        }
        // SAFETY: d is bytes 0..2 of the super-block, d_y bytes 0..4 of the Q8_K block.
        let (d, dy) = unsafe { (f16_at(bx), q8_k_d(by)) };
        d * dy * hsum_epi32(acc) as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (checked by the wrapper).
    unsafe { sum_blocks::<IQ4_XS, Q8_K>(nb, x, y, term) }
}

/// IQ4_NL · Q8_0: per block `(d_y d_x) · Σ v_x q_y`, added in block order,
/// as the scalar reference.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_iq4_nl_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = iq4_table();
    let ones = _mm256_set1_epi16(1);
    // Block b's integer sum as eight i32 partial sums.
    let block = |b: usize| -> __m256i {
        // SAFETY: b < nb: block b of both rows is in bounds; its indices are
        // bytes 2..18, the Q8_0 quants bytes 2..34.
        let p = unsafe {
            let yv = _mm256_loadu_si256(y.add(b * Q8_0 + 2).cast());
            iq4_pairs(table, x.add(b * IQ4_NL + 2), yv)
        };
        _mm256_madd_epi16(p, ones)
    };
    // The f16 scale of block b of a row of `bytes`-byte blocks.
    let scale = |row: *const u8, bytes: usize, b: usize| -> i16 {
        // SAFETY: b < nb: the scale is the first two bytes of block b.
        unsafe { row.add(b * bytes).cast::<i16>().read_unaligned() }
    };
    let mut sumf = 0.0f32;
    let mut b = 0;
    while b + 4 <= nb {
        // Lane l of each 128-bit half: block b + l's partial sums.
        let s01 = _mm256_hadd_epi32(block(b), block(b + 1));
        let s23 = _mm256_hadd_epi32(block(b + 2), block(b + 3));
        let s = _mm256_hadd_epi32(s01, s23);
        let sumi = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        let f16s = |row: *const u8, bytes: usize| {
            _mm_cvtph_ps(_mm_setr_epi16(
                scale(row, bytes, b),
                scale(row, bytes, b + 1),
                scale(row, bytes, b + 2),
                scale(row, bytes, b + 3),
                0,
                0,
                0,
                0,
            ))
        };
        let dd = _mm_mul_ps(f16s(y, Q8_0), f16s(x, IQ4_NL));
        let mut t = [0f32; 4];
        // SAFETY: t is four writable f32.
        unsafe { _mm_storeu_ps(t.as_mut_ptr(), _mm_mul_ps(dd, _mm_cvtepi32_ps(sumi))) };
        for v in t {
            sumf += v;
        }
        b += 4;
    }
    while b < nb {
        // SAFETY: b < nb: both blocks' scales are readable.
        let dd = unsafe { scale_product(y.add(b * Q8_0), x.add(b * IQ4_NL)) };
        sumf += dd * hsum_epi32(block(b)) as f32;
        b += 1;
    }
    sumf
}

//! AVX-512 VNNI kernels for the quantized dot products: `vpdpbusd` sums four
//! u8 × i8 products straight into i32 lanes, two blocks per register.
//!
//! Exact for any input bytes: 4/5-bit quants are unsigned as they are, with
//! the offset subtracted as `offset · Σy`; Q8_0 weights are biased to
//! unsigned (`x + 128`, an XOR) and `128 · Σy` subtracted. The float types
//! use the AVX-512 kernels. The 4/5-bit kernels are the AVX-512 level's
//! ([`super::x86_avx512`]'s `nibble_dots`) over [`sum2`] / [`sum1`]. Every
//! `unsafe fn` here requires the [`Isa::Vnni`](super::Isa::Vnni) features;
//! this level's table is only reached through [`super::kernels_for`] after
//! it checked them, and the safe wrappers it holds check the row lengths
//! before any raw read.

use super::super::DType;
use super::x86_avx2::{high_bits, hsum_ps, nibbles, scale_product};
use super::x86_avx512::{halves, join, nibble_dots, pair_dot};
use std::arch::x86_64::*;

super::table! {
    dot: [
        Q4_0 => dot_q4_0_imp, Q4_1 => dot_q4_1_imp, Q5_0 => dot_q5_0_imp,
        Q5_1 => dot_q5_1_imp, Q8_0 => dot_q8_0_imp,
    ],
    dot4: [
        Q4_0 => dot_q4_0_n, Q4_1 => dot_q4_1_n, Q5_0 => dot_q5_0_n,
        Q5_1 => dot_q5_1_n, Q8_0 => dot_q8_0_n,
    ],
    quantize: [],
}

/// Σ q_j y_j − offset Σ y_j for two blocks (eight exact i32 lanes each);
/// `offset` is the u8 bias of `q` (0, 8, 16 or 128).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sum2(q: __m512i, y: __m512i, offset: u8) -> __m512i {
    let z = _mm512_setzero_si512();
    let s = _mm512_dpbusd_epi32(z, q, y);
    if offset == 0 {
        return s;
    }
    _mm512_sub_epi32(s, _mm512_dpbusd_epi32(z, _mm512_set1_epi8(offset as i8), y))
}

/// The one-block form of [`sum2`]: the block in the low half (the lanes
/// are independent, so the low eight are the block's).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sum1(q: __m256i, y: __m256i, offset: u8) -> __m256i {
    let (q, y) = (_mm512_zextsi256_si512(q), _mm512_zextsi256_si512(y));
    _mm512_castsi512_si256(sum2(q, y, offset))
}

nibble_dots!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    sum2,
    sum1
);
pair_dot! {
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", sum2, sum1;
    dot_q8_0_imp, dot_q8_0_n, Q8_0, 128,
        |bx| _mm256_xor_si256(_mm256_loadu_si256(bx.add(2).cast()), _mm256_set1_epi8(-128))
}

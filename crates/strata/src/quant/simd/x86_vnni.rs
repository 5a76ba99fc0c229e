//! AVX-512 VNNI kernels for the quantized dot products: `vpdpbusd` sums four
//! u8 × i8 products straight into i32 lanes, two blocks per register.
//!
//! Exact for any input bytes: 4/5-bit quants are unsigned as they are, with
//! the offset subtracted as `offset · Σy`; Q8_0 weights are biased to
//! unsigned (`x + 128`, an XOR) and `128 · Σy` subtracted. The float types
//! use the AVX-512 kernels. Every `unsafe fn` here requires the
//! [`Isa::Vnni`](super::Isa::Vnni) features; [`vec_dot_fn`] is only called by
//! the dispatcher after it checked them, and the safe wrappers check the row
//! lengths before any raw read.

use super::super::{DType, VecDot4Fn, VecDotFn};
use super::dot_blocks;
use super::x86_avx2::{high_bits, hsum_ps, nibbles, safe_dot, scale_product};
use super::x86_avx512::{halves, join, pair_dot, safe_dot4};
use std::arch::x86_64::*;

safe_dot!(dot_q4_0, dot_q4_0_imp, DType::Q4_0);
safe_dot!(dot_q4_1, dot_q4_1_imp, DType::Q4_1);
safe_dot!(dot_q5_0, dot_q5_0_imp, DType::Q5_0);
safe_dot!(dot_q5_1, dot_q5_1_imp, DType::Q5_1);
safe_dot!(dot_q8_0, dot_q8_0_imp, DType::Q8_0);

safe_dot4!(dot4_q4_0, dot_q4_0_n, DType::Q4_0);
safe_dot4!(dot4_q4_1, dot_q4_1_n, DType::Q4_1);
safe_dot4!(dot4_q5_0, dot_q5_0_n, DType::Q5_0);
safe_dot4!(dot4_q5_1, dot_q5_1_n, DType::Q5_1);
safe_dot4!(dot4_q8_0, dot_q8_0_n, DType::Q8_0);

/// This level's four-column dot product for `dtype` (quantized types).
pub(super) fn vec_dot4_fn(dtype: DType) -> Option<VecDot4Fn> {
    Some(match dtype {
        DType::Q4_0 => dot4_q4_0,
        DType::Q4_1 => dot4_q4_1,
        DType::Q5_0 => dot4_q5_0,
        DType::Q5_1 => dot4_q5_1,
        DType::Q8_0 => dot4_q8_0,
        _ => return None,
    })
}

/// This level's dot product for `dtype` (quantized types only).
pub(super) fn vec_dot_fn(dtype: DType) -> Option<VecDotFn> {
    Some(match dtype {
        DType::Q4_0 => dot_q4_0,
        DType::Q4_1 => dot_q4_1,
        DType::Q5_0 => dot_q5_0,
        DType::Q5_1 => dot_q5_1,
        DType::Q8_0 => dot_q8_0,
        _ => return None,
    })
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

/// The one-block form of [`sum2`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sum1(q: __m256i, y: __m256i, offset: u8) -> __m256i {
    let z = _mm256_setzero_si256();
    let s = _mm256_dpbusd_epi32(z, q, y);
    if offset == 0 {
        return s;
    }
    _mm256_sub_epi32(s, _mm256_dpbusd_epi32(z, _mm256_set1_epi8(offset as i8), y))
}

const Q4_0: usize = DType::Q4_0.type_size();
const Q4_1: usize = DType::Q4_1.type_size();
const Q5_0: usize = DType::Q5_0.type_size();
const Q5_1: usize = DType::Q5_1.type_size();
const Q8_0: usize = DType::Q8_0.type_size();
const Q8_1: usize = DType::Q8_1.type_size();

pair_dot!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_q4_0_imp,
    dot_q4_0_n,
    Q4_0,
    Q8_0,
    8,
    false,
    |bx| nibbles(bx.add(2)),
    |by| _mm256_loadu_si256(by.add(2).cast()),
    sum2,
    sum1
);
pair_dot!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_q4_1_imp,
    dot_q4_1_n,
    Q4_1,
    Q8_1,
    0,
    true,
    |bx| nibbles(bx.add(4)),
    |by| _mm256_loadu_si256(by.add(4).cast()),
    sum2,
    sum1
);
pair_dot!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_q5_0_imp,
    dot_q5_0_n,
    Q5_0,
    Q8_0,
    16,
    false,
    |bx| _mm256_or_si256(nibbles(bx.add(6)), high_bits(bx.add(2))),
    |by| _mm256_loadu_si256(by.add(2).cast()),
    sum2,
    sum1
);
pair_dot!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_q5_1_imp,
    dot_q5_1_n,
    Q5_1,
    Q8_1,
    0,
    true,
    |bx| _mm256_or_si256(nibbles(bx.add(8)), high_bits(bx.add(4))),
    |by| _mm256_loadu_si256(by.add(4).cast()),
    sum2,
    sum1
);
pair_dot!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_q8_0_imp,
    dot_q8_0_n,
    Q8_0,
    Q8_0,
    128,
    false,
    |bx| _mm256_xor_si256(_mm256_loadu_si256(bx.add(2).cast()), _mm256_set1_epi8(-128)),
    |by| _mm256_loadu_si256(by.add(2).cast()),
    sum2,
    sum1
);

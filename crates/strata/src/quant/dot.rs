//! Scalar reference dot products, computed as ggml's generic (non-SIMD) paths
//! do, so SIMD versions can be checked against them.
//!
//! Quantized × quantized: per block, an exact i32 sum of quant products,
//! scaled by `d_x * d_y` in f32 and accumulated in f32 (the Q4_1 / Q5_1
//! forms add `m_x * s_y` per block). Float types: f32 products accumulated in
//! f64 (ggml's `ggml_float`), returned as f32.
//!
//! Every function takes the element count `n` (a multiple of 32 for the
//! quantized types) and two little-endian byte rows of exactly
//! `row_size(n)` bytes: `x` in the named weight type and `y` in its
//! [`vec_dot_type`](super::vec_dot_type). Lengths are only `debug_assert!`ed;
//! a too-short row panics on a slice bound.

use super::{bf16_to_f32, get_f16, QK};
use crate::DType;
use half::f16;

const HALF: usize = QK / 2;

#[inline(always)]
pub(super) fn rows<'a>(wt: DType, n: usize, x: &'a [u8], y: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    let yt = super::vec_dot_type(wt);
    debug_assert!(super::whole_blocks(wt, n), "{wt} dot: n = {n}");
    debug_assert_eq!(x.len(), wt.row_size(n), "{wt} dot: x bytes");
    debug_assert_eq!(y.len(), yt.row_size(n), "{wt} dot: y bytes");
    (&x[..wt.row_size(n)], &y[..yt.row_size(n)])
}

/// The block-quant dot products: `Σ term(bx, by)` in f32, in block order,
/// over the blocks `bx` of the `wt` row `x` and `by` of the
/// [`vec_dot_type`](super::vec_dot_type) row `y`.
#[inline(always)]
pub(super) fn block_dot(
    wt: DType,
    n: usize,
    x: &[u8],
    y: &[u8],
    term: impl Fn(&[u8], &[u8]) -> f32,
) -> f32 {
    let (x, y) = rows(wt, n, x, y);
    let (xs, ys) = (wt.type_size(), super::vec_dot_type(wt).type_size());
    let mut sumf = 0.0f32;
    for (bx, by) in x.chunks_exact(xs).zip(y.chunks_exact(ys)) {
        sumf += term(bx, by);
    }
    sumf
}

#[inline(always)]
fn i8s(b: &[u8]) -> impl Iterator<Item = i32> + '_ {
    b.iter().map(|&q| i32::from(q as i8))
}

/// Q4_0 · Q8_0 over `n` elements.
pub fn vec_dot_q4_0_q8_0(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q4_0, n, x, y, |bx, by| {
        let (ylo, yhi) = by[2..].split_at(HALF);
        let mut sumi = 0i32;
        for ((&q, a), b) in bx[2..].iter().zip(i8s(ylo)).zip(i8s(yhi)) {
            sumi += (i32::from(q & 0x0f) - 8) * a + (i32::from(q >> 4) - 8) * b;
        }
        sumi as f32 * get_f16(bx, 0) * get_f16(by, 0)
    })
}

/// Q4_1 · Q8_1 over `n` elements.
pub fn vec_dot_q4_1_q8_1(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q4_1, n, x, y, |bx, by| {
        let (ylo, yhi) = by[4..].split_at(HALF);
        let mut sumi = 0i32;
        for ((&q, a), b) in bx[4..].iter().zip(i8s(ylo)).zip(i8s(yhi)) {
            sumi += i32::from(q & 0x0f) * a + i32::from(q >> 4) * b;
        }
        (get_f16(bx, 0) * get_f16(by, 0)) * sumi as f32 + get_f16(bx, 2) * get_f16(by, 2)
    })
}

/// Sum over one block of `(5-bit quant - offset) * y_quant`.
#[inline(always)]
fn sum_q5(packed: &[u8], yq: &[u8], offset: i32) -> i32 {
    let qh = u32::from_le_bytes([packed[0], packed[1], packed[2], packed[3]]);
    let (ylo, yhi) = yq.split_at(HALF);
    let mut sumi = 0i32;
    for (j, ((&q, a), b)) in packed[4..].iter().zip(i8s(ylo)).zip(i8s(yhi)).enumerate() {
        let ha = (((qh >> j) & 1) << 4) as i32;
        let hb = (((qh >> (j + HALF)) & 1) << 4) as i32;
        sumi += ((i32::from(q & 0x0f) | ha) - offset) * a + ((i32::from(q >> 4) | hb) - offset) * b;
    }
    sumi
}

/// Q5_0 · Q8_0 over `n` elements.
pub fn vec_dot_q5_0_q8_0(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q5_0, n, x, y, |bx, by| {
        let sumi = sum_q5(&bx[2..], &by[2..], 16);
        (get_f16(bx, 0) * get_f16(by, 0)) * sumi as f32
    })
}

/// Q5_1 · Q8_1 over `n` elements.
pub fn vec_dot_q5_1_q8_1(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q5_1, n, x, y, |bx, by| {
        let sumi = sum_q5(&bx[4..], &by[4..], 0);
        (get_f16(bx, 0) * get_f16(by, 0)) * sumi as f32 + get_f16(bx, 2) * get_f16(by, 2)
    })
}

/// Q8_0 · Q8_0 over `n` elements.
pub fn vec_dot_q8_0_q8_0(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q8_0, n, x, y, |bx, by| {
        let sumi: i32 = i8s(&bx[2..]).zip(i8s(&by[2..])).map(|(a, b)| a * b).sum();
        sumi as f32 * (get_f16(bx, 0) * get_f16(by, 0))
    })
}

/// F32 · F32 over `n` elements (f32 products, f64 sum).
pub fn vec_dot_f32(n: usize, x: &[u8], y: &[u8]) -> f32 {
    float_dot(DType::F32, n, x, y, |a| {
        f32::from_le_bytes([a[0], a[1], a[2], a[3]])
    })
}

/// F16 · F16 over `n` elements (f32 products, f64 sum).
pub fn vec_dot_f16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    float_dot(DType::F16, n, x, y, |a| {
        f16::from_bits(u16::from_le_bytes([a[0], a[1]])).to_f32()
    })
}

/// BF16 · BF16 over `n` elements (f32 products, f64 sum).
pub fn vec_dot_bf16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    float_dot(DType::BF16, n, x, y, |a| {
        bf16_to_f32(u16::from_le_bytes([a[0], a[1]]))
    })
}

/// The float dot products: each element of `x` and `y` decoded from its
/// `type_size()` bytes, f32 products, f64 sum.
#[inline(always)]
fn float_dot(dt: DType, n: usize, x: &[u8], y: &[u8], decode: impl Fn(&[u8]) -> f32) -> f32 {
    let (x, y) = rows(dt, n, x, y);
    let w = dt.type_size();
    let mut sum = 0.0f64;
    for (a, b) in x.chunks_exact(w).zip(y.chunks_exact(w)) {
        sum += f64::from(decode(a) * decode(b));
    }
    sum as f32
}

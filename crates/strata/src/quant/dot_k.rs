//! Scalar reference dot products of the K-quants and the IQ4 formats with
//! their [`vec_dot_type`](super::vec_dot_type) partner: Q8_K for Q2_K ..
//! Q6_K and IQ4_XS, Q8_0 for IQ4_NL.
//!
//! Per super-block of 256, the sum over sub-blocks of `scale × Σ q_x q_y` is
//! an exact i32 (at most about 2^27 in magnitude for any input bytes), as is
//! the minimum term `Σ_j min_j × bsums_j` of the formats with minimums
//! (Q2_K, Q4_K, Q5_K; `bsums` taken from the Q8_K row, as ggml does). Each
//! super-block then adds `d_x d_y · isum - dmin_x d_y · summs` (or
//! `d_x d_y · isum`) to an f32 sum, in block order. This is the arithmetic
//! of ggml's generic Q2_K dot; its generic Q3_K .. Q6_K / IQ4_XS dots split
//! the same integers over eight f32 lanes (or per 32 elements), so they may
//! differ from these in the last bits. IQ4_NL · Q8_0 is ggml's generic dot
//! exactly: per 32-element block, `(d_x d_y) · Σ q_x q_y`.
//!
//! Every function takes the element count `n` (a multiple of the weight
//! type's block size) and two little-endian byte rows of exactly
//! `row_size(n)` bytes, as the functions in `dot.rs`; lengths are only
//! `debug_assert!`ed, a too-short row panics on a slice bound.

use super::dot::block_dot;
use super::iq4::{index_at, value, xs_scale_at};
use super::k_search::scale_min_k4;
use super::q2_k::q2_at;
use super::q3_k::{q3_at, scale_at as q3_scale_at};
use super::q4_k::{high_at, nibble_at};
use super::q6_k::q6_at;
use super::q8_k::{bsum_at, d_of, quants};
use super::{get_f16, QK};
use crate::DType;

/// `Σ_{e in run} q8[e] · q(e)` over the `len` elements starting at `start`.
#[inline(always)]
fn run_sum(q8: &[u8], start: usize, len: usize, q: impl Fn(usize) -> i32) -> i32 {
    (start..start + len)
        .map(|e| i32::from(q8[e] as i8) * q(e))
        .sum()
}

/// Q2_K · Q8_K over `n` elements.
pub fn vec_dot_q2_k_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q2_K, n, x, y, |bx, by| {
        let (sc, qs, q8) = (&bx[..16], &bx[16..80], quants(by));
        let mut isum = 0i32;
        let mut summs = 0i32;
        for (j, &s) in sc.iter().enumerate() {
            let dot = run_sum(q8, 16 * j, 16, |e| i32::from(q2_at(qs, e)));
            isum += i32::from(s & 0x0f) * dot;
            summs += bsum_at(by, j) * i32::from(s >> 4);
        }
        let dy = d_of(by);
        let (dall, dmin) = (dy * get_f16(bx, 80), dy * get_f16(bx, 82));
        dall * isum as f32 - dmin * summs as f32
    })
}

/// Q3_K · Q8_K over `n` elements.
pub fn vec_dot_q3_k_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q3_K, n, x, y, |bx, by| {
        let q8 = quants(by);
        let mut isum = 0i32;
        for j in 0..16 {
            isum += q3_scale_at(&bx[96..108], j) * run_sum(q8, 16 * j, 16, |e| q3_at(bx, e));
        }
        get_f16(bx, 108) * d_of(by) * isum as f32
    })
}

/// The Q4_K / Q5_K super-block sums: `(Σ_j s_j Σ q_x q_y, Σ_j m_{j/2} bsums_j)`.
#[inline(always)]
fn sums_q45(bx: &[u8], by: &[u8], q: impl Fn(usize) -> i32) -> (i32, i32) {
    let q8 = quants(by);
    let (mut isum, mut summs) = (0i32, 0i32);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &bx[4..16]);
        isum += i32::from(sc) * run_sum(q8, 32 * j, 32, &q);
        summs += i32::from(m) * (bsum_at(by, 2 * j) + bsum_at(by, 2 * j + 1));
    }
    (isum, summs)
}

/// Q4_K · Q8_K over `n` elements.
pub fn vec_dot_q4_k_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q4_K, n, x, y, |bx, by| {
        let qs = &bx[16..];
        let (isum, summs) = sums_q45(bx, by, |e| i32::from(nibble_at(qs, e)));
        let dy = d_of(by);
        get_f16(bx, 0) * dy * isum as f32 - get_f16(bx, 2) * dy * summs as f32
    })
}

/// Q5_K · Q8_K over `n` elements.
pub fn vec_dot_q5_k_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q5_K, n, x, y, |bx, by| {
        let (qh, qs) = (&bx[16..48], &bx[48..]);
        let (isum, summs) = sums_q45(bx, by, |e| i32::from(nibble_at(qs, e) | high_at(qh, e)));
        let dy = d_of(by);
        get_f16(bx, 0) * dy * isum as f32 - get_f16(bx, 2) * dy * summs as f32
    })
}

/// Q6_K · Q8_K over `n` elements.
pub fn vec_dot_q6_k_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::Q6_K, n, x, y, |bx, by| {
        let q8 = quants(by);
        let mut isum = 0i32;
        for j in 0..16 {
            let s = i32::from(bx[192 + j] as i8);
            isum += s * run_sum(q8, 16 * j, 16, |e| q6_at(bx, e));
        }
        get_f16(bx, 208) * d_of(by) * isum as f32
    })
}

/// IQ4_XS · Q8_K over `n` elements.
pub fn vec_dot_iq4_xs_q8_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::IQ4_XS, n, x, y, |bx, by| {
        let q8 = quants(by);
        let mut isum = 0i32;
        for j in 0..8 {
            let qs = &bx[8 + 16 * j..];
            let dot = run_sum(q8, 32 * j, 32, |e| value(index_at(qs, e - 32 * j)));
            isum += xs_scale_at(bx, j) * dot;
        }
        get_f16(bx, 0) * d_of(by) * isum as f32
    })
}

/// IQ4_NL · Q8_0 over `n` elements.
pub fn vec_dot_iq4_nl_q8_0(n: usize, x: &[u8], y: &[u8]) -> f32 {
    block_dot(DType::IQ4_NL, n, x, y, |bx, by| {
        let sumi = run_sum(&by[2..], 0, QK, |e| value(index_at(&bx[2..], e)));
        get_f16(by, 0) * get_f16(bx, 0) * sumi as f32
    })
}

//! Q4_K and Q5_K: 4- and 5-bit K-quants, super-blocks of 256 in 8
//! sub-blocks of 32.
//!
//! Q4_K (144 B): f16 `d`, f16 `dmin`, 12 B `scales`, 128 B `qs`;
//! `x = d · s · q - dmin · m` with the 6-bit sub-block scale `s` and min `m`
//! ([`scale_min_k4`] packing) and the 4-bit quant `q`. Elements `64 i + l`
//! and `64 i + 32 + l` (`l < 32`) share byte `qs[32 i + l]`, low and high
//! nibble.
//!
//! Q5_K (176 B): f16 `d`, f16 `dmin`, 12 B `scales`, 32 B `qh`, 128 B `qs`;
//! as Q4_K with a fifth bit: element `e` adds 16 when bit `e / 32` of
//! `qh[e % 32]` is set.
//!
//! Quantizing (ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`):
//! each sub-block is fitted with `x ≈ s · q - m` by the weighted
//! squared-error search of [`make_qkx2_quants`] (weights `rms(x) + |x|`;
//! 21 candidate scales for Q4_K, 16 for Q5_K); scales and mins are stored as
//! 6-bit fractions of their maxima (`d = max s / 63`, `dmin = max m / 63`),
//! then every element is re-quantized against the stored values. A
//! super-block holding NaN or ±inf is written with a NaN `d` and zero
//! everything else, so it dequantizes to NaN.

use super::k_search::{
    make_qkx2_quants, nearest_int, put_scale_min_k4, quantize_blocks, scale_min_k4, QK_K,
};
use super::{debug_check_row, get_f16, put_f16};
use crate::DType;

const Q4_K_BYTES: usize = DType::Q4_K.type_size();
const Q5_K_BYTES: usize = DType::Q5_K.type_size();
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
/// Start of Q4_K's `qs`, and of Q5_K's `qh`.
const Q4_QS: usize = 16;
const Q5_QH: usize = 16;
const Q5_QS: usize = 48;

/// The low four bits of quant `e` (0..256) from the 128 `qs` bytes.
#[inline(always)]
pub(super) fn nibble_at(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 64) + e % 32] >> (4 * (e % 64 / 32))) & 0x0f
}

/// The fifth bit of Q5_K quant `e`, as 0 or 16.
#[inline(always)]
pub(super) fn high_at(qh: &[u8], e: usize) -> u8 {
    ((qh[e % 32] >> (e / 32)) & 1) << 4
}

/// The shared quantizer: fills `d`, `dmin`, `scales` of `y` and returns the
/// levels (`0..=nmax`) of the 256 elements of `x`.
fn quantize_block(x: &[f32], y: &mut [u8], nmax: i32, rmin: f32, nstep: i32) -> [u8; QK_K] {
    let mut levels = [0u8; QK_K];
    let mut aux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, xs) in x.chunks_exact(32).enumerate() {
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let l = &mut levels[32 * j..32 * (j + 1)];
        (scales[j], mins[j]) =
            make_qkx2_quants(nmax, xs, &weights, l, &mut aux, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // ggml keeps the rounded values in a uint8_t before capping at 63.
    let ls = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
    let lm = mins.map(|m| (nearest_int(inv_min * m) as u8).min(63));
    put_scale_min_k4(&mut y[SCALES..SCALES + 12], &ls, &lm);
    put_f16(y, D, max_scale / 63.0);
    put_f16(y, DMIN, max_min / 63.0);
    let (d, dmin) = (get_f16(y, D), get_f16(y, DMIN));
    for (j, xs) in x.chunks_exact(32).enumerate() {
        let (sc, m) = scale_min_k4(j, &y[SCALES..]);
        let dl = d * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let ml = dmin * f32::from(m);
        for (q, &v) in levels[32 * j..32 * (j + 1)].iter_mut().zip(xs) {
            *q = nearest_int((v + ml) / dl).clamp(0, nmax) as u8;
        }
    }
    levels
}

/// Quantizes an f32 row to Q4_K (`src.len()` a multiple of 256,
/// `dst.len() == 144 * src.len() / 256`).
pub fn quantize_row_q4_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(DType::Q4_K, src, dst, D, |x, y| {
        let levels = quantize_block(x, y, 15, -1.0, 20);
        let qs = &mut y[Q4_QS..];
        for i in 0..4 {
            for l in 0..32 {
                qs[32 * i + l] = levels[64 * i + l] | (levels[64 * i + 32 + l] << 4);
            }
        }
    });
}

/// Dequantizes a Q4_K row (`dst.len()` a multiple of 256,
/// `src.len() == 144 * dst.len() / 256`).
pub fn dequantize_row_q4_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q4_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q4_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (get_f16(x, D), get_f16(x, DMIN));
        let qs = &x[Q4_QS..];
        for (j, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(j, &x[SCALES..]);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            for (i, v) in ys.iter_mut().enumerate() {
                *v = dl * f32::from(nibble_at(qs, 32 * j + i)) - ml;
            }
        }
    }
}

/// Quantizes an f32 row to Q5_K (`src.len()` a multiple of 256,
/// `dst.len() == 176 * src.len() / 256`).
pub fn quantize_row_q5_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(DType::Q5_K, src, dst, D, |x, y| {
        let levels = quantize_block(x, y, 31, -0.5, 15);
        let (qh, qs) = y[Q5_QH..].split_at_mut(32);
        qh.fill(0);
        for (e, &l) in levels.iter().enumerate() {
            qh[e % 32] |= (l >> 4) << (e / 32);
        }
        for i in 0..4 {
            for l in 0..32 {
                let (a, b) = (levels[64 * i + l], levels[64 * i + 32 + l]);
                qs[32 * i + l] = (a & 0x0f) | ((b & 0x0f) << 4);
            }
        }
    });
}

/// Dequantizes a Q5_K row (`dst.len()` a multiple of 256,
/// `src.len() == 176 * dst.len() / 256`).
pub fn dequantize_row_q5_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q5_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q5_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (get_f16(x, D), get_f16(x, DMIN));
        let (qh, qs) = (&x[Q5_QH..Q5_QS], &x[Q5_QS..]);
        for (j, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(j, &x[SCALES..]);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            for (i, v) in ys.iter_mut().enumerate() {
                let e = 32 * j + i;
                *v = dl * f32::from(nibble_at(qs, e) | high_at(qh, e)) - ml;
            }
        }
    }
}

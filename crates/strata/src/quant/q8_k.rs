//! Q8_K: 8-bit blocks of 256, the activation format of the K-quant and
//! IQ4_XS dot products.
//!
//! Layout (292 B): f32 `d`, 256 × i8 `qs`, 16 × i16 `bsums` (little-endian;
//! `bsums[j]` is the sum of quants `16 j .. 16 j + 16`, which lets the
//! K-quant dots fold in their sub-block minimums with one multiply per 16
//! elements); `x = d · q`.
//!
//! Quantizing (ggml's `quantize_row_q8_K_ref`): with `max` the element of
//! largest magnitude *with its sign* (the first one on ties),
//! `q = min(127, round(x · (-127 / max)))` (ties to even) and
//! `d = 1 / (-127 / max)`; so `d` is negative when `max` is positive. An
//! all-zero block is all zero bytes (ggml leaves its `bsums` unwritten).
//! Non-finite products `x · (-127 / max)` quantize to 0: NaN elements, every
//! element of a block holding ±inf (then `d` is infinite), and every element
//! of a block whose largest magnitude is below about 3.7e-37, where
//! `-127 / max` overflows (then `d` is -0). ggml's rounding trick gives 0
//! for ±inf and for the default NaN; strata makes it 0 for every NaN so the
//! SIMD quantizer can match it.

use super::debug_check_row;
use super::k_search::{nearest_int, signed_amax, QK_K};
use crate::DType;

const BYTES: usize = DType::Q8_K.type_size();
const QS: usize = 4;
const BSUMS: usize = 4 + QK_K;

/// The f32 scale of a block.
#[inline(always)]
pub(super) fn d_of(block: &[u8]) -> f32 {
    f32::from_le_bytes([block[0], block[1], block[2], block[3]])
}

/// `bsums[j]` of a block.
#[inline(always)]
pub(super) fn bsum_at(block: &[u8], j: usize) -> i32 {
    i32::from(i16::from_le_bytes([
        block[BSUMS + 2 * j],
        block[BSUMS + 2 * j + 1],
    ]))
}

/// The 256 quants of a block.
#[inline(always)]
pub(super) fn quants(block: &[u8]) -> &[u8] {
    &block[QS..QS + QK_K]
}

/// Writes a block's `bsums` from its quants.
#[inline(always)]
pub(super) fn put_bsums(block: &mut [u8]) {
    for j in 0..16 {
        let s: i32 = block[QS + 16 * j..QS + 16 * (j + 1)]
            .iter()
            .map(|&q| i32::from(q as i8))
            .sum();
        block[BSUMS + 2 * j..BSUMS + 2 * j + 2].copy_from_slice(&(s as i16).to_le_bytes());
    }
}

/// Quantizes an f32 row to Q8_K (`src.len()` a multiple of 256,
/// `dst.len() == 292 * src.len() / 256`).
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q8_K, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BYTES)) {
        let (max, amax) = signed_amax(x);
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y[QS..QS + QK_K].iter_mut().zip(x) {
            let r = iscale * v;
            *q = if r.is_finite() {
                nearest_int(r).min(127) as i8 as u8
            } else {
                0
            };
        }
        put_bsums(y);
        y[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// Dequantizes a Q8_K row (`dst.len()` a multiple of 256,
/// `src.len() == 292 * dst.len() / 256`).
pub fn dequantize_row_q8_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q8_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = d_of(x);
        for (&q, v) in quants(x).iter().zip(y) {
            *v = d * f32::from(q as i8);
        }
    }
}

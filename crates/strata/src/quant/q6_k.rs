//! Q6_K: 6-bit K-quant, super-blocks of 256 in 16 sub-blocks of 16.
//!
//! Layout (210 B): 128 B `ql`, 64 B `qh`, 16 × i8 `scales`, f16 `d`;
//! `x = d · s · (q - 32)` with the 8-bit signed sub-block scale `s` and the
//! 6-bit quant `q`. In each half `h` (128 elements), element
//! `128 h + 32 k + l` (`k < 4`, `l < 32`) keeps its low nibble in
//! `ql[64 h + 32 (k % 2) + l]` (low half for `k < 2`) and its top two bits
//! in `qh[32 h + l]`, bits `2 k` and up.
//!
//! Quantizing (ggml's `quantize_row_q6_K_ref`): each sub-block gets the
//! symmetric fit of [`make_qx_quants`]; the sixteen scales are stored as
//! signed 8-bit fractions of the one of largest magnitude
//! (`d = -max / 128`), then every element is re-quantized against the stored
//! scale. An all-zero super-block is all zero bytes; one holding NaN or
//! ±inf is written with a NaN `d` and zero everything else, so it
//! dequantizes to NaN.

use super::k_search::{
    group_scales, make_qx_quants, nearest_int, quantize_blocks, GROUP_MAX_EPS, QK_K,
};
use super::{debug_check_row, get_f16, put_f16};
use crate::DType;

const BYTES: usize = DType::Q6_K.type_size();
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// The quant of element `e` (0..256) of a block, in `-32..32`.
#[inline(always)]
pub(super) fn q6_at(block: &[u8], e: usize) -> i32 {
    let (h, k, l) = (e / 128, e % 128 / 32, e % 32);
    let lo = (block[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
    let hi = (block[QH + 32 * h + l] >> (2 * k)) & 3;
    i32::from(lo | (hi << 4)) - 32
}

/// Quantizes an f32 row to Q6_K (`src.len()` a multiple of 256,
/// `dst.len() == 210 * src.len() / 256`).
pub fn quantize_row_q6_k(src: &[f32], dst: &mut [u8]) {
    let mut levels = [0i8; QK_K];
    quantize_blocks(DType::Q6_K, src, dst, D, |x, y| {
        let (scales, (max_scale, max_abs_scale)) =
            group_scales::<_, 16>(x, &mut levels, |xs, l| make_qx_quants(32, xs, l));
        if max_abs_scale < GROUP_MAX_EPS {
            return;
        }
        let iscale = -128.0 / max_scale;
        put_f16(y, D, 1.0 / iscale);
        for (b, &s) in y[SCALES..SCALES + 16].iter_mut().zip(&scales) {
            *b = nearest_int(iscale * s).min(127) as u8;
        }
        let d = get_f16(y, D);
        for (j, xs) in x.chunks_exact(16).enumerate() {
            let dl = d * f32::from(y[SCALES + j] as i8);
            if dl == 0.0 {
                continue;
            }
            for (q, &v) in levels[16 * j..16 * (j + 1)].iter_mut().zip(xs) {
                *q = (nearest_int(v / dl).clamp(-32, 31) + 32) as i8;
            }
        }
        for (e, &l) in levels.iter().enumerate() {
            let (h, k, i) = (e / 128, e % 128 / 32, e % 32);
            let l = l as u8;
            y[64 * h + 32 * (k % 2) + i] |= (l & 0x0f) << (4 * (k / 2));
            y[QH + 32 * h + i] |= (l >> 4) << (2 * k);
        }
    });
}

/// Dequantizes a Q6_K row (`dst.len()` a multiple of 256,
/// `src.len() == 210 * dst.len() / 256`).
pub fn dequantize_row_q6_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q6_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = get_f16(x, D);
        for (j, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(x[SCALES + j] as i8);
            for (i, v) in ys.iter_mut().enumerate() {
                *v = dl * q6_at(x, 16 * j + i) as f32;
            }
        }
    }
}

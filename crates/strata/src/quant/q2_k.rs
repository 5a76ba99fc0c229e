//! Q2_K: 2-bit K-quant, super-blocks of 256 in 16 sub-blocks of 16.
//!
//! Layout (84 B): 16 B `scales` (byte `j`: sub-block `j`'s 4-bit scale in
//! the low nibble, its 4-bit min in the high nibble), 64 B `qs`, f16 `d`,
//! f16 `dmin`; `x = d · (sc & 15) · q - dmin · (sc >> 4)` with `q` in `0..4`.
//! Quant `e` sits in `qs[32 · (e / 128) + e % 32]`, bits `2 · (e % 128 / 32)`
//! and up (four 32-element runs share each 32-byte half).
//!
//! Quantizing (ggml's `quantize_row_q2_K_ref`): each sub-block is fitted
//! with `x ≈ s · q - m` by the weighted-absolute-error search of
//! [`make_qkx2_quants`] (weights `|x|`); the sixteen `s` and `m` are stored
//! as 4-bit fractions of their maxima (`d = max s / 15`,
//! `dmin = max m / 15`), then every element is re-quantized against the
//! stored values. A super-block holding NaN or ±inf is written with a NaN
//! `d` and zero everything else, so it dequantizes to NaN.

use super::k_search::{make_qkx2_quants, nearest_int, quantize_blocks, QK_K};
use super::{debug_check_row, get_f16, put_f16};
use crate::DType;

const BYTES: usize = DType::Q2_K.type_size();
const QS: usize = 16;
const D: usize = 80;
const DMIN: usize = 82;

/// The 2-bit quant of element `e` (0..256) from the 64 `qs` bytes (also the
/// low two bits of Q3_K's quants).
#[inline(always)]
pub(super) fn q2_at(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3
}

/// Packs 256 levels (only their low two bits are used) into 64 `qs` bytes,
/// the layout [`q2_at`] reads.
#[inline(always)]
pub(super) fn pack_q2(levels: &[u8; QK_K], qs: &mut [u8]) {
    for h in 0..2 {
        for l in 0..32 {
            let e = 128 * h + l;
            qs[32 * h + l] = (levels[e] & 3)
                | ((levels[e + 32] & 3) << 2)
                | ((levels[e + 64] & 3) << 4)
                | ((levels[e + 96] & 3) << 6);
        }
    }
}

/// Quantizes an f32 row to Q2_K (`src.len()` a multiple of 256,
/// `dst.len() == 84 * src.len() / 256`).
pub fn quantize_row_q2_k(src: &[f32], dst: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    let mut aux = [0u8; 16];
    let mut weights = [0f32; 16];
    quantize_blocks(DType::Q2_K, src, dst, D, |x, y| {
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for (j, xs) in x.chunks_exact(16).enumerate() {
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let l = &mut levels[16 * j..16 * (j + 1)];
            (scales[j], mins[j]) =
                make_qkx2_quants(3, xs, &weights, l, &mut aux, -0.5, 0.1, 15, true);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let sc = &mut y[..QS];
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (b, &s) in sc.iter_mut().zip(&scales) {
                *b = nearest_int(iscale * s) as u8;
            }
        } else {
            sc.fill(0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (b, &m) in sc.iter_mut().zip(&mins) {
                *b |= (nearest_int(iscale * m) << 4) as u8;
            }
        }
        put_f16(
            y,
            D,
            if max_scale > 0.0 {
                max_scale / 15.0
            } else {
                0.0
            },
        );
        put_f16(y, DMIN, if max_min > 0.0 { max_min / 15.0 } else { 0.0 });
        let (d, dmin) = (get_f16(y, D), get_f16(y, DMIN));
        for (j, xs) in x.chunks_exact(16).enumerate() {
            let dl = d * f32::from(y[j] & 0x0f);
            if dl == 0.0 {
                continue;
            }
            let ml = dmin * f32::from(y[j] >> 4);
            for (q, &v) in levels[16 * j..16 * (j + 1)].iter_mut().zip(xs) {
                *q = nearest_int((v + ml) / dl).clamp(0, 3) as u8;
            }
        }
        pack_q2(&levels, &mut y[QS..QS + 64]);
    });
}

/// Dequantizes a Q2_K row (`dst.len()` a multiple of 256,
/// `src.len() == 84 * dst.len() / 256`).
pub fn dequantize_row_q2_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q2_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (get_f16(x, D), get_f16(x, DMIN));
        let qs = &x[QS..QS + 64];
        for (j, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(x[j] & 0x0f);
            let ml = dmin * f32::from(x[j] >> 4);
            for (i, v) in ys.iter_mut().enumerate() {
                *v = dl * f32::from(q2_at(qs, 16 * j + i)) - ml;
            }
        }
    }
}

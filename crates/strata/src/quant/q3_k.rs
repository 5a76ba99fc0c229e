//! Q3_K: 3-bit K-quant, super-blocks of 256 in 16 sub-blocks of 16.
//!
//! Layout (110 B): 32 B `hmask`, 64 B `qs`, 12 B `scales`, f16 `d`;
//! `x = d · (s - 32) · (q - 4)` with the 6-bit sub-block scale `s` and the
//! 3-bit quant `q`. The low two bits of quant `e` are packed as in Q2_K
//! ([`q2_at`]); its high bit is bit `e / 32` of `hmask[e % 32]`. Scale `j`
//! keeps its low nibble in `scales[j % 8]` (low half for `j < 8`, high half
//! after) and its top two bits in `scales[8 + j % 4]`, bits `2 · (j / 4)`.
//!
//! Quantizing (ggml's `quantize_row_q3_K_ref`): each sub-block gets the
//! symmetric fit of [`make_q3_quants`]; the sixteen scales are stored as
//! signed 6-bit fractions of the one of largest magnitude (`d = -max / 32`),
//! then every element is re-quantized against the stored scale. A
//! super-block holding NaN or ±inf is written with a NaN `d` and zero
//! everything else, so it dequantizes to NaN.

use super::k_search::{group_scales, make_q3_quants, nearest_int, quantize_blocks, QK_K};
use super::q2_k::{pack_q2, q2_at};
use super::{debug_check_row, get_f16, put_f16};
use crate::DType;

const BYTES: usize = DType::Q3_K.type_size();
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// The 6-bit scale of sub-block `j` (0..16), offset removed.
#[inline(always)]
pub(super) fn scale_at(scales: &[u8], j: usize) -> i32 {
    let lo = if j < 8 {
        scales[j] & 0x0f
    } else {
        scales[j - 8] >> 4
    };
    let hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(lo | (hi << 4)) - 32
}

/// The quant of element `e` (0..256) of a block, in `-4..4`.
#[inline(always)]
pub(super) fn q3_at(block: &[u8], e: usize) -> i32 {
    let high = (block[e % 32] >> (e / 32)) & 1;
    i32::from(q2_at(&block[QS..QS + 64], e)) - if high == 0 { 4 } else { 0 }
}

/// Quantizes an f32 row to Q3_K (`src.len()` a multiple of 256,
/// `dst.len() == 110 * src.len() / 256`).
pub fn quantize_row_q3_k(src: &[f32], dst: &mut [u8]) {
    let mut levels = [0i8; QK_K];
    quantize_blocks(DType::Q3_K, src, dst, D, |x, y| {
        let (scales, (max_scale, _)) =
            group_scales::<_, 16>(x, &mut levels, |xs, l| make_q3_quants(4, xs, l));
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            let sc = &mut y[SCALES..SCALES + 12];
            for (j, &s) in scales.iter().enumerate() {
                // ggml stores the rounded value in an int8_t before clamping.
                let l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = l & 0x0f;
                } else {
                    sc[j - 8] |= (l & 0x0f) << 4;
                }
                sc[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
            }
            put_f16(y, D, 1.0 / iscale);
        }
        let d = get_f16(y, D);
        for (j, xs) in x.chunks_exact(16).enumerate() {
            let dl = d * scale_at(&y[SCALES..], j) as f32;
            if dl == 0.0 {
                continue;
            }
            for (q, &v) in levels[16 * j..16 * (j + 1)].iter_mut().zip(xs) {
                *q = (nearest_int(v / dl).clamp(-4, 3) + 4) as i8;
            }
        }
        // Levels 4..8 set their bit in hmask and keep their low two bits.
        let mut low = [0u8; QK_K];
        for (e, (&l, q)) in levels.iter().zip(&mut low).enumerate() {
            let l = l as u8;
            if l > 3 {
                y[e % 32] |= 1 << (e / 32);
            }
            *q = l & 3;
        }
        pack_q2(&low, &mut y[QS..QS + 64]);
    });
}

/// Dequantizes a Q3_K row (`dst.len()` a multiple of 256,
/// `src.len() == 110 * dst.len() / 256`).
pub fn dequantize_row_q3_k(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q3_K, dst.len(), src.len());
    for (x, y) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = get_f16(x, D);
        for (j, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * scale_at(&x[SCALES..], j) as f32;
            for (i, v) in ys.iter_mut().enumerate() {
                *v = dl * q3_at(x, 16 * j + i) as f32;
            }
        }
    }
}

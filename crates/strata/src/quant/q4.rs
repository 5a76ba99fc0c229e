//! Q4_0 and Q4_1: 4-bit blocks of 32.
//!
//! Q4_0 (18 B): f16 `d`, 16 nibble bytes; `x = d * (q - 8)`. `d = max / -8`
//! where `max` is the element of largest magnitude *with its sign*, so that
//! element maps exactly to `q = 0`; `q = min(15, trunc(x / d + 8.5))`.
//!
//! Q4_1 (20 B): f16 `d`, f16 `m`, 16 nibble bytes; `x = d * q + m` with
//! `m = min`, `d = (max - min) / 15`, `q = min(15, trunc((x - min) / d + 0.5))`.
//!
//! Quantizing uses the f32 `d` (and `min`); only the stored copies are f16.

use super::{debug_check_row, get_f16, put_min_header, put_signed_header, QK};
use crate::DType;

const Q4_0_BYTES: usize = DType::Q4_0.type_size();
const Q4_1_BYTES: usize = DType::Q4_1.type_size();
const HALF: usize = QK / 2;

/// Quantizes an f32 row to Q4_0 (`src.len()` a multiple of 32,
/// `dst.len() == 18 * src.len() / 32`).
pub fn quantize_row_q4_0(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q4_0, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_0_BYTES)) {
        let id = put_signed_header(x, y, -8.0);
        let (lo, hi) = x.split_at(HALF);
        for ((q, &a), &b) in y[2..].iter_mut().zip(lo).zip(hi) {
            let qa = ((a * id + 8.5) as i32).clamp(0, 15) as u8;
            let qb = ((b * id + 8.5) as i32).clamp(0, 15) as u8;
            *q = qa | (qb << 4);
        }
    }
}

/// Dequantizes a Q4_0 row (`dst.len()` a multiple of 32,
/// `src.len() == 18 * dst.len() / 32`).
pub fn dequantize_row_q4_0(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q4_0, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q4_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        let (lo, hi) = y.split_at_mut(HALF);
        for ((&q, a), b) in x[2..].iter().zip(lo).zip(hi) {
            *a = d * f32::from((q & 0x0f) as i8 - 8);
            *b = d * f32::from((q >> 4) as i8 - 8);
        }
    }
}

/// Quantizes an f32 row to Q4_1 (`src.len()` a multiple of 32,
/// `dst.len() == 20 * src.len() / 32`).
pub fn quantize_row_q4_1(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q4_1, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_1_BYTES)) {
        let (min, id) = put_min_header(x, y, 15.0);
        let (lo, hi) = x.split_at(HALF);
        for ((q, &a), &b) in y[4..].iter_mut().zip(lo).zip(hi) {
            let qa = (((a - min) * id + 0.5) as i32).clamp(0, 15) as u8;
            let qb = (((b - min) * id + 0.5) as i32).clamp(0, 15) as u8;
            *q = qa | (qb << 4);
        }
    }
}

/// Dequantizes a Q4_1 row (`dst.len()` a multiple of 32,
/// `src.len() == 20 * dst.len() / 32`).
pub fn dequantize_row_q4_1(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q4_1, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q4_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        let m = get_f16(x, 2);
        let (lo, hi) = y.split_at_mut(HALF);
        for ((&q, a), b) in x[4..].iter().zip(lo).zip(hi) {
            *a = d * f32::from(q & 0x0f) + m;
            *b = d * f32::from(q >> 4) + m;
        }
    }
}

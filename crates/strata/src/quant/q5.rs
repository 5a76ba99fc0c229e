//! Q5_0 and Q5_1: 5-bit blocks of 32.
//!
//! The low 4 bits of each quant are packed as in Q4 (byte `j`: element `j`
//! low, element `j + 16` high); the fifth bits form the little-endian u32 `qh`
//! (bit `j` for element `j`).
//!
//! Q5_0 (22 B): f16 `d`, `qh`, 16 B; `x = d * (q - 16)`, `d = max / -16` with
//! `max` the signed element of largest magnitude,
//! `q = min(31, trunc(x / d + 16.5))`.
//!
//! Q5_1 (24 B): f16 `d`, f16 `m`, `qh`, 16 B; `x = d * q + m`, `m = min`,
//! `d = (max - min) / 31`, `q = min(31, trunc((x - min) / d + 0.5))`.

use super::{debug_check_row, get_f16, put_min_header, put_signed_header, QK};
use crate::DType;

const Q5_0_BYTES: usize = DType::Q5_0.type_size();
const Q5_1_BYTES: usize = DType::Q5_1.type_size();
const HALF: usize = QK / 2;

/// Packs 32 five-bit quants `q(j)` into `qh` (4 B) followed by 16 nibble bytes.
#[inline(always)]
fn pack5(out: &mut [u8], q: impl Fn(usize) -> u8) {
    let mut qh = 0u32;
    for j in 0..HALF {
        let (a, b) = (q(j), q(j + HALF));
        qh |= u32::from(a >> 4) << j;
        qh |= u32::from(b >> 4) << (j + HALF);
        out[4 + j] = (a & 0x0f) | ((b & 0x0f) << 4);
    }
    out[..4].copy_from_slice(&qh.to_le_bytes());
}

/// Unpacks `qh` + nibbles (20 B) into the 32 five-bit quants, calling
/// `put(j, q)` for element `j`.
#[inline(always)]
fn unpack5(packed: &[u8], mut put: impl FnMut(usize, u8)) {
    let qh = u32::from_le_bytes([packed[0], packed[1], packed[2], packed[3]]);
    for (j, &q) in packed[4..4 + HALF].iter().enumerate() {
        let ha = (((qh >> j) & 1) << 4) as u8;
        let hb = (((qh >> (j + HALF)) & 1) << 4) as u8;
        put(j, (q & 0x0f) | ha);
        put(j + HALF, (q >> 4) | hb);
    }
}

/// Quantizes an f32 row to Q5_0 (`src.len()` a multiple of 32,
/// `dst.len() == 22 * src.len() / 32`).
pub fn quantize_row_q5_0(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q5_0, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_0_BYTES)) {
        let id = put_signed_header(x, y, -16.0);
        pack5(&mut y[2..], |j| {
            ((x[j] * id + 16.5) as i32).clamp(0, 31) as u8
        });
    }
}

/// Dequantizes a Q5_0 row (`dst.len()` a multiple of 32,
/// `src.len() == 22 * dst.len() / 32`).
pub fn dequantize_row_q5_0(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q5_0, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q5_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        unpack5(&x[2..], |j, q| y[j] = d * f32::from(q as i8 - 16));
    }
}

/// Quantizes an f32 row to Q5_1 (`src.len()` a multiple of 32,
/// `dst.len() == 24 * src.len() / 32`).
pub fn quantize_row_q5_1(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q5_1, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_1_BYTES)) {
        let (min, id) = put_min_header(x, y, 31.0);
        pack5(&mut y[4..], |j| {
            (((x[j] - min) * id + 0.5) as i32).clamp(0, 31) as u8
        });
    }
}

/// Dequantizes a Q5_1 row (`dst.len()` a multiple of 32,
/// `src.len() == 24 * dst.len() / 32`).
pub fn dequantize_row_q5_1(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q5_1, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q5_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        let m = get_f16(x, 2);
        unpack5(&x[4..], |j, q| y[j] = d * f32::from(q) + m);
    }
}

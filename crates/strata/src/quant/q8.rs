//! Q8_0 and Q8_1: 8-bit blocks of 32, the activation formats of quantized
//! matmul.
//!
//! Q8_0 (34 B): f16 `d`, 32 × i8; `d = amax / 127`, `q = round(x / d)` with
//! ties away from zero (C `roundf`); `x = d * q`.
//!
//! Q8_1 (36 B): f16 `d`, f16 `s`, 32 × i8; as Q8_0 plus `s = d * Σ q`
//! (computed with the f32 `d`), which lets the Q4_1 / Q5_1 dot products fold
//! in the partner's minimum with one multiply per block. As in ggml, `s`
//! overflows to ±inf when a block's |Σx| exceeds the f16 range (65504).

use super::{debug_check_row, get_f16, inv_or_zero, put_f16, QK};
use crate::DType;

const Q8_0_BYTES: usize = DType::Q8_0.type_size();
const Q8_1_BYTES: usize = DType::Q8_1.type_size();

/// Quantizes one block into `qs`, returning the f32 scale `d` and `Σ q`.
#[inline(always)]
fn quantize_block_q8(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inv_or_zero(d);
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let qi = round_to_i8(v * id);
        sum += i32::from(qi);
        *q = qi as u8;
    }
    (d, sum)
}

/// C `roundf` (ties away from zero) to i8, without a libm call: `f32::round`
/// is one on x86-64 targets without SSE4.1, and this runs per activation.
///
/// `r - trunc(r)` is exact in this range. Out-of-range values saturate
/// (C leaves them undefined; here |r| <= 127 up to rounding), NaN gives 0.
#[inline(always)]
fn round_to_i8(r: f32) -> i8 {
    let r = r.clamp(-128.0, 127.0); // NaN stays NaN
    let t = r as i32; // truncates toward zero; NaN gives 0
    let frac = r - t as f32;
    (t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)) as i8
}

/// Quantizes an f32 row to Q8_0 (`src.len()` a multiple of 32,
/// `dst.len() == 34 * src.len() / 32`).
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q8_0, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, _) = quantize_block_q8(x, &mut y[2..]);
        put_f16(y, 0, d);
    }
}

/// Dequantizes a Q8_0 row (`dst.len()` a multiple of 32,
/// `src.len() == 34 * dst.len() / 32`).
pub fn dequantize_row_q8_0(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q8_0, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q8_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        for (&q, v) in x[2..].iter().zip(y) {
            *v = d * f32::from(q as i8);
        }
    }
}

/// Quantizes an f32 row to Q8_1 (`src.len()` a multiple of 32,
/// `dst.len() == 36 * src.len() / 32`).
pub fn quantize_row_q8_1(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::Q8_1, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, sum) = quantize_block_q8(x, &mut y[4..]);
        put_f16(y, 0, d);
        put_f16(y, 2, sum as f32 * d);
    }
}

/// Dequantizes a Q8_1 row (`x = d * q`; `s` is redundant), with
/// `dst.len()` a multiple of 32 and `src.len() == 36 * dst.len() / 32`.
pub fn dequantize_row_q8_1(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::Q8_1, dst.len(), src.len());
    for (x, y) in src.chunks_exact(Q8_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        for (&q, v) in x[4..].iter().zip(y) {
            *v = d * f32::from(q as i8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_to_i8;

    #[test]
    fn round_to_i8_is_roundf() {
        let check = |r: f32| {
            let want = r.round().clamp(-128.0, 127.0) as i8;
            assert_eq!(round_to_i8(r), want, "{r:e}");
        };
        // Every tie and its neighbours.
        for k in -130..130 {
            let t = k as f32 + 0.5;
            // Adjacent f32s (`next_up` / `next_down` need Rust 1.86).
            let adj = |v: f32, d: i32| f32::from_bits(v.to_bits().wrapping_add_signed(d));
            for v in [t, adj(t, 1), adj(t, -1), k as f32, adj(k as f32, -1)] {
                check(v);
            }
        }
        // A sweep of bit patterns over |r| < 256, both signs.
        for bits in (0..0x4380_0000u32).step_by(997) {
            check(f32::from_bits(bits));
            check(-f32::from_bits(bits));
        }
        assert_eq!(round_to_i8(f32::NAN), 0);
        assert_eq!(round_to_i8(f32::INFINITY), 127);
        assert_eq!(round_to_i8(-1e9), -128);
    }
}

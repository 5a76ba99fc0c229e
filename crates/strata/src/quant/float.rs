//! F32 / F16 / BF16 rows: conversions from and to f32.
//!
//! F16 rounds to nearest, ties to even (the `half` crate, as numpy's
//! `astype(float16)` and F16C's `vcvtps2ph`). BF16 follows ggml's
//! `ggml_compute_fp32_to_bf16` exactly: NaNs are truncated and forced quiet,
//! everything else rounds to nearest, ties to even (overflowing to ±inf).

use half::f16;

/// f32 → bf16 bits, exactly as ggml's `ggml_compute_fp32_to_bf16`: a NaN
/// keeps its sign and top payload bits with the quiet bit set; other values
/// round to nearest even.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    // Cannot overflow: the largest non-NaN pattern is 0xff80_0000 (-inf).
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// bf16 bits → f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Writes each of `src` as the `B` little-endian bytes `enc` gives
/// (`dst.len() == B * src.len()`): the body of every `quantize_row_*` here.
#[inline(always)]
fn encode_row<const B: usize>(src: &[f32], dst: &mut [u8], enc: impl Fn(f32) -> [u8; B]) {
    debug_assert_eq!(dst.len(), src.len() * B);
    for (x, y) in src.iter().zip(dst.chunks_exact_mut(B)) {
        y.copy_from_slice(&enc(*x));
    }
}

/// Reads each of `dst` from `B` little-endian bytes with `dec`
/// (`src.len() == B * dst.len()`): the body of every `dequantize_row_*`.
#[inline(always)]
fn decode_row<const B: usize>(src: &[u8], dst: &mut [f32], dec: impl Fn([u8; B]) -> f32) {
    debug_assert_eq!(src.len(), dst.len() * B);
    for (x, y) in src.chunks_exact(B).zip(dst.iter_mut()) {
        // The chunk is exactly `B` bytes.
        *y = dec(x.try_into().unwrap_or([0; B]));
    }
}

/// Copies an f32 row into little-endian bytes (`dst.len() == 4 * src.len()`).
pub fn quantize_row_f32(src: &[f32], dst: &mut [u8]) {
    encode_row(src, dst, f32::to_le_bytes);
}

/// Reads a little-endian f32 row (`src.len() == 4 * dst.len()`).
pub fn dequantize_row_f32(src: &[u8], dst: &mut [f32]) {
    decode_row(src, dst, f32::from_le_bytes);
}

/// Rounds an f32 row to little-endian f16 (`dst.len() == 2 * src.len()`).
pub fn quantize_row_f16(src: &[f32], dst: &mut [u8]) {
    encode_row(src, dst, |x| f16::from_f32(x).to_bits().to_le_bytes());
}

/// Widens a little-endian f16 row to f32 (`src.len() == 2 * dst.len()`).
pub fn dequantize_row_f16(src: &[u8], dst: &mut [f32]) {
    decode_row(src, dst, |b| f16::from_bits(u16::from_le_bytes(b)).to_f32());
}

/// Rounds an f32 row to little-endian bf16 with [`f32_to_bf16`]
/// (`dst.len() == 2 * src.len()`).
pub fn quantize_row_bf16(src: &[f32], dst: &mut [u8]) {
    encode_row(src, dst, |x| f32_to_bf16(x).to_le_bytes());
}

/// Widens a little-endian bf16 row to f32 (`src.len() == 2 * dst.len()`).
pub fn dequantize_row_bf16(src: &[u8], dst: &mut [f32]) {
    decode_row(src, dst, |b| bf16_to_f32(u16::from_le_bytes(b)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_ggml() {
        // Exact values pass through.
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(-2.0), 0xc000);
        // Ties go to even: 1 + 2^-8 is halfway between 0x3f80 and 0x3f81.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        // Above half rounds up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        // The largest finite f32 overflows to inf, as in ggml.
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        // NaN: truncated, forced quiet, sign kept.
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16(f32::from_bits(0xffff_ffff)), 0xffff);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        // And agrees with the half crate for every non-NaN exponent pattern.
        for hi in (0..=0xffffu32).step_by(7) {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                let x = f32::from_bits((hi << 16) | lo);
                if !x.is_nan() {
                    assert_eq!(f32_to_bf16(x), half::bf16::from_f32(x).to_bits(), "{x:e}");
                }
            }
        }
    }

    #[test]
    fn f16_rows_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to 1 + 2^-9.
        let x = [
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            65520.0,
            1e-8,
            -0.0,
        ];
        let mut b = [0u8; 10];
        quantize_row_f16(&x, &mut b);
        let bits: Vec<u16> = b
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(bits, [0x3c00, 0x3c02, 0x7c00, 0x0000, 0x8000]);
        let mut y = [0f32; 5];
        dequantize_row_f16(&b, &mut y);
        assert_eq!(y[0], 1.0);
        assert_eq!(y[1], 1.0 + 2f32.powi(-9));
        assert_eq!(y[2], f32::INFINITY);
        assert_eq!(y[4].to_bits(), 0x8000_0000);
    }
}

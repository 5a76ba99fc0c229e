//! Blocks of the 32-wide quant types as `packed.rs` and `quant_simd.rs` test
//! them: scrambled quants, unit scales, and the magnitude a dot product's
//! error bound scales with.

use super::Rng;
use strata::quant::{self, QK};
use strata::DType;

/// The 32-wide weight types (Q8_0's partner Q8_1 excluded).
pub const QUANT: [DType; 5] = strata::conformance::LEGACY_QUANTS;

/// The unit roundoff of f32.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Byte offset of the quants inside a block of `t`: the bytes of its scales
/// (d, and m / s for the `_1` types).
pub fn quant_offset(t: DType) -> usize {
    match t {
        DType::Q4_0 | DType::Q8_0 | DType::IQ4_NL => 2,
        DType::Q4_1 | DType::Q8_1 => 4,
        DType::Q5_0 => 2, // qh + nibbles
        DType::Q5_1 => 4,
        _ => unreachable!(),
    }
}

/// Replaces every block's quant bytes (not its scales) with random bytes, so
/// every nibble / fifth-bit / i8 pattern (-128 included) is exercised.
pub fn scramble(t: DType, row: &mut [u8], rng: &mut Rng) {
    for b in row.chunks_exact_mut(t.type_size()) {
        for q in &mut b[quant_offset(t)..] {
            *q = rng.next_u64() as u8;
        }
    }
}

/// Sets every block's scale to 1.0 and its minimum / sum to 0.
pub fn unit_scales(t: DType, row: &mut [u8]) {
    for b in row.chunks_exact_mut(t.type_size()) {
        b[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        if quant_offset(t) == 4 {
            b[2..4].fill(0);
        }
    }
}

/// The integer quants of one block of `t` (offset removed), read back by
/// dequantizing a copy with scale 1 and minimum 0.
pub fn block_quants(t: DType, block: &[u8]) -> Vec<f64> {
    let mut b = block.to_vec();
    unit_scales(t, &mut b);
    let mut out = vec![0f32; QK];
    quant::dequantize_row(t, &b, &mut out).unwrap();
    out.into_iter().map(f64::from).collect()
}

/// The f16 at byte `off` of `b`.
pub fn f16_at(b: &[u8], off: usize) -> f64 {
    f64::from(half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32())
}

/// `Σ_b (|d_x d_y| Σ_j |q_x,j q_y,j| + |m_x s_y|)`: the magnitude the
/// documented bound scales with (no cancellation inside or across blocks).
pub fn block_magnitude(t: DType, x: &[u8], y: &[u8]) -> f64 {
    let yt = quant::vec_dot_type(t);
    x.chunks_exact(t.type_size())
        .zip(y.chunks_exact(yt.type_size()))
        .map(|(bx, by)| {
            let (qx, qy) = (block_quants(t, bx), block_quants(yt, by));
            let prods: f64 = qx.iter().zip(&qy).map(|(a, b)| (a * b).abs()).sum();
            let mut m = (f16_at(bx, 0) * f16_at(by, 0)).abs() * prods;
            if quant_offset(t) == 4 {
                m += (f16_at(bx, 2) * f16_at(by, 2)).abs();
            }
            m
        })
        .sum()
}

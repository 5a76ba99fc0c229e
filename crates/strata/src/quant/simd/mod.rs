//! Runtime-dispatched SIMD kernels for the matmul inner loop: the dot
//! products of every weight type with its [`vec_dot_type`](super::vec_dot_type)
//! partner, and the activation conversions (f32 → Q8_0 / Q8_1 / F16).
//!
//! The levels are [`crate::isa::Isa`]'s. [`super::vec_dot_fn`] and
//! [`super::quantize_row_fn`] return the [`crate::isa::active`] level's
//! kernels; [`vec_dot_fn_for`] and [`quantize_row_fn_for`] return a given
//! level's (for tests and benchmarks), [`vec_dot4_fn_for`] a level's one-row ×
//! four-column kernel where it has one.
//!
//! | level | CPU features | own kernels |
//! |-------|--------------|-------------|
//! | `Avx2` | AVX2, FMA, F16C | the Q4_0 .. Q8_0, Q2_K .. Q6_K, IQ4_NL / IQ4_XS and float dot products, Q8_0 / Q8_1 / Q8_K / F16 quantize |
//! | `Avx512` | + AVX-512 F, BW, VL | the Q4_0 .. Q8_0 and float dot products (two blocks per register, masked float tails); four-column Q4/Q5 dots |
//! | `Vnni` | + AVX-512 VNNI | the Q4_0 .. Q8_0 dot products (`vpdpbusd`), one- and four-column |
//! | `Neon` | aarch64 NEON | the Q4_0 .. Q8_0 and float dot products, Q8_0 / Q8_1 quantize |
//!
//! A level without its own kernel for a type uses the next lower level's
//! (the AVX-512 and VNNI levels use the AVX2 K-quant and IQ4 dot products;
//! on aarch64 those are scalar).
//!
//! Semantics against the scalar reference ([`super::vec_dot_q4_0_q8_0`], ...):
//!
//! * Quantizers are bit-identical (same scale arithmetic, same rounding:
//!   `roundf` for Q8_0 / Q8_1, ties to even for Q8_K; the same f16 rounding).
//! * The K-quant and IQ4 dot products are bit-identical: they compute each
//!   super-block's (IQ4_NL: block's) integer sums exactly and add the scalar
//!   reference's f32 term in its order (a NaN result is NaN on every level,
//!   its payload unspecified).
//! * The other quantized dot products compute every block's integer sum
//!   exactly (for any input bytes); only the f32 accumulation of the
//!   per-block terms `t_b = d_x d_y Σq_x q_y` (+ `m_x s_y`) is reordered
//!   (partial sums of four quant products per lane, lanes, then a tree).
//!   With `u = 2^-24` and `nb` blocks, `|simd - scalar| <= (nb + 8) · 2u · M` where
//!   `M = Σ_b (|d_x d_y| Σ_j |q_x,j q_y,j| + |m_x s_y|)`.
//! * Float dot products accumulate f32 products in f32 lanes (the scalar
//!   reference sums in f64): `|simd - scalar| <= (n / 16 + 16) · 2u · Σ |x_i y_i|`
//!   (each lane sums at most `n / 16` products for the 512-bit kernels,
//!   `n / 32` products in four accumulators of eight for AVX2, plus the tree).

use super::{DType, QuantizeRowFn, VecDot4Fn, VecDotFn};
use crate::isa::Isa;

#[cfg(target_arch = "aarch64")]
mod aarch64_neon;
#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64_neon::quantize_block_q8 as quantize_block_q8_neon;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_avx2::quantize_block_q8 as quantize_block_q8_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_k;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_vnni;

/// The dot product of a `dtype` row with a `vec_dot_type(dtype)` row at
/// level `isa` (falling back to the next lower level's kernel for a type it
/// has none of its own for), or `None` if this CPU cannot run `isa` or the
/// type has no dot product.
pub fn vec_dot_fn_for(isa: Isa, dtype: DType) -> Option<VecDotFn> {
    if !isa.is_supported() {
        return None;
    }
    let own: Option<VecDotFn> = match isa {
        Isa::Scalar => return super::scalar_vec_dot_fn(dtype),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_avx2::vec_dot_fn(dtype),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86_avx512::vec_dot_fn(dtype),
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => x86_vnni::vec_dot_fn(dtype),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => aarch64_neon::vec_dot_fn(dtype),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    own.or_else(|| vec_dot_fn_for(isa.lower(), dtype))
}

/// The four-column dot product of level `isa` for `dtype`, bit-identical to
/// four calls of [`vec_dot_fn_for`]`(isa, dtype)`, or `None` where the level
/// has none (then call the one-column kernel four times). Present for the
/// quantized types at the AVX-512 (4/5-bit) and VNNI (all) levels.
pub fn vec_dot4_fn_for(isa: Isa, dtype: DType) -> Option<VecDot4Fn> {
    if !isa.is_supported() {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86_avx512::vec_dot4_fn(dtype),
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => x86_vnni::vec_dot4_fn(dtype),
        _ => {
            let _ = dtype; // no four-column kernels on other levels
            None
        }
    }
}

/// The row quantizer (f32 → `dtype`) at level `isa`, with the same fallback
/// as [`vec_dot_fn_for`]; `None` if this CPU cannot run `isa` or `dtype`
/// cannot be quantized to.
pub fn quantize_row_fn_for(isa: Isa, dtype: DType) -> Option<QuantizeRowFn> {
    if !isa.is_supported() {
        return None;
    }
    let own: Option<QuantizeRowFn> = match isa {
        Isa::Scalar => return super::scalar_quantize_row_fn(dtype),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_avx2::quantize_row_fn(dtype),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => aarch64_neon::quantize_row_fn(dtype),
        _ => None,
    };
    own.or_else(|| quantize_row_fn_for(isa.lower(), dtype))
}

/// Little-endian f16 bits → f32, exactly (normals, subnormals, ±inf; NaNs stay
/// NaN with their payload), without a table or a runtime feature check.
///
/// No f32 subnormal is ever an operand: LLVM vectorizes this with unused
/// lanes holding other bits, and a subnormal operand costs a ~150-cycle
/// microcode assist on x86 (measured: 3× slower dot products).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let em = h & 0x7fff;
    let bits = if em < 0x0400 {
        // Subnormal or zero: em · 2^-24, exact (em < 2^10), a normal result.
        (em as f32 * f32::from_bits(0x3380_0000)).to_bits()
    } else if em >= 0x7c00 {
        (em << 13) | 0x7f80_0000
    } else {
        // Rebias the exponent from 15 to 127.
        (em << 13) + (112 << 23)
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// The f16 scale stored at `p` (2 bytes, any alignment) as f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
#[allow(dead_code)] // unused on architectures without SIMD kernels
unsafe fn scale_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes.
    f16_to_f32(u16::from_le_bytes(unsafe { [*p, *p.add(1)] }))
}

/// Checks the length contract every SIMD dot product relies on for its
/// raw-pointer reads: whole blocks of `n`, and both rows at least that long.
/// Returns the number of blocks (elements for float types).
#[inline(always)]
#[allow(dead_code)] // unused on architectures without SIMD kernels
fn dot_blocks(wt: DType, n: usize, x: &[u8], y: &[u8]) -> usize {
    let yt = super::vec_dot_type(wt);
    let nb = n / wt.block_size();
    debug_assert!(super::whole_blocks(wt, n), "{wt} dot: n = {n}");
    assert!(
        x.len() >= nb * wt.type_size() && y.len() >= nb * yt.type_size(),
        "{wt} dot of {n}: rows of {} and {} bytes are too short",
        x.len(),
        y.len()
    );
    nb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_matches_half_for_every_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
                assert_eq!(got.to_bits() >> 31, want.to_bits() >> 31, "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }
}

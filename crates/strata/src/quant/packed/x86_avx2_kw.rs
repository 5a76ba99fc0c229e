//! The AVX2 levels' many-column K kernel ([`super::WideFn`]): the tiles of
//! `x86_avx2_k.rs` / `x86_avx2_k23.rs` decode every quant line again for
//! each pass of four columns, which at n = 512 is a quarter or more of the
//! work (Q3_K's two-part quants, Q5_K's fifth bit, Q6_K's re-coded pairs,
//! IQ4_XS's table). Here each super-block half is decoded once into 64
//! lines of scratch (IQ4_XS: also its magnitudes and eight scale
//! registers), and the tiles' own sums (`*_with`) run over the copy
//! for every four columns, the terms added to the outputs in super-block
//! order from zero: the tiles' (and the scalar reference's) bits.

use super::tags::{k_chunk_size, k_sub_dwords, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use super::x86_avx2_k::{
    iq4_xs_scales, iq4_xs_values, iq4_xs_with, load, q45_k_with, q45_quant, q6_k_with, q6_quant,
};
use super::x86_avx2_k23::{q2_k_with, q2_quant, q3_k_with, q3_quant};
use super::Tile;
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Bytes of a Q8_K block.
const Q8K: usize = DType::Q8_K.type_size();

/// Sixty-four 32-byte lines, 32-byte aligned: one half's decoded quants.
#[repr(C, align(32))]
struct Lines([u8; 2048]);

/// Writes line `sub j + t` of `buf` as `quant(j, t)` for all 64 lines.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fill(buf: &mut Lines, sub: usize, quant: impl Fn(usize, usize) -> __m256i) {
    for (l, line) in buf.0.chunks_exact_mut(32).enumerate() {
        // SAFETY: the line is 32 writable bytes, 32-aligned (Lines).
        unsafe { _mm256_store_si256(line.as_mut_ptr().cast(), quant(l / sub, l % sub)) };
    }
}

/// `n` columns (a multiple of 16) of one K-quant group of type `T` (the
/// [`super::WideFn`] contract): per super-block and half the quants are
/// decoded once into [`Lines`] (line `sub j + t`: dword `t` of sub-block
/// `j`), then every four columns run the tiles' sums over the decoded
/// copy, the terms added to the outputs in super-block order from zero
/// (the tiles' bits).
///
/// # Safety
/// As [`super::WideFn`]; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn wide<const T: u8>(t: Tile, n: usize) {
    let (sub, chunk) = (k_sub_dwords(T), k_chunk_size(T));
    let mut buf = Lines([0; 2048]);
    // IQ4_XS's magnitudes (`vpabsb` of its signed values) and sub-block
    // scales, decoded once too.
    let mut mag = Lines([0; 2048]);
    let mut scales = [_mm256_setzero_si256(); 8];
    for b in 0..t.nb {
        // SAFETY: chunk b is in bounds (contract).
        let c = unsafe { t.w.add(b * chunk) };
        for h in 0..2 {
            // SAFETY (each arm): the chunk is readable.
            unsafe {
                match T {
                    Q2_K => fill(&mut buf, sub, q2_quant(c, h)),
                    Q3_K => fill(&mut buf, sub, q3_quant(c, h)),
                    Q4_K => fill(&mut buf, sub, q45_quant::<false>(c, h)),
                    Q5_K => fill(&mut buf, sub, q45_quant::<true>(c, h)),
                    // Line 8j + 4e + t: values of dword t, nibbles e.
                    IQ4_XS => {
                        let v = iq4_xs_values(c, h);
                        fill(&mut buf, sub, |j, d| v(j, d / 4, d % 4));
                        fill(&mut mag, sub, |j, d| _mm256_abs_epi8(v(j, d / 4, d % 4)));
                        let s = iq4_xs_scales(c, h);
                        scales = std::array::from_fn(s);
                    }
                    _ => fill(&mut buf, sub, q6_quant(c, h)),
                }
            }
            // SAFETY: line sub j + d < 64 of the buffer.
            let copy = |j: usize, d: usize| unsafe { load(buf.0.as_ptr().add(32 * (sub * j + d))) };
            // SAFETY: as above.
            let mag = |j: usize, d: usize| unsafe { load(mag.0.as_ptr().add(32 * (sub * j + d))) };
            for c0 in (0..n).step_by(4) {
                // SAFETY: columns c0 .. c0 + 4 have block b (contract).
                let cols: [*const u8; 4] =
                    std::array::from_fn(|i| unsafe { t.a.add((c0 + i) * t.a_stride + b * Q8K) });
                // SAFETY (each arm): the chunk and the blocks are readable.
                let terms = unsafe {
                    match T {
                        Q2_K => q2_k_with(c, h, cols, copy),
                        Q3_K => q3_k_with(c, h, cols, copy),
                        Q4_K => q45_k_with::<false, 4>(c, h, cols, copy),
                        Q5_K => q45_k_with::<true, 4>(c, h, cols, copy),
                        IQ4_XS => {
                            let v = |j, e, t| (copy(j, 4 * e + t), mag(j, 4 * e + t));
                            iq4_xs_with(c, h, cols, v, |j| scales[j])
                        }
                        _ => q6_k_with(c, h, cols, copy),
                    }
                };
                for (i, term) in terms.into_iter().enumerate() {
                    // SAFETY: rows 8h .. 8h + 8 of column c0 + i are
                    // writable (contract), holding the earlier blocks' sum
                    // from block 1 on.
                    unsafe {
                        let o = t.out.add((c0 + i) * t.out_stride + 32 * h).cast::<f32>();
                        let prev = if b == 0 {
                            _mm256_setzero_ps()
                        } else {
                            _mm256_loadu_ps(o)
                        };
                        _mm256_storeu_ps(o, _mm256_add_ps(prev, term));
                    }
                }
            }
        }
    }
}

/// The AVX2 many-column kernel of the K type `dtype`.
pub(super) fn wide_for(dtype: DType) -> Option<super::WideFn> {
    match dtype {
        DType::Q2_K => Some(wide::<Q2_K>),
        DType::Q3_K => Some(wide::<Q3_K>),
        DType::Q4_K => Some(wide::<Q4_K>),
        DType::Q5_K => Some(wide::<Q5_K>),
        DType::Q6_K => Some(wide::<Q6_K>),
        DType::IQ4_XS => Some(wide::<IQ4_XS>),
        _ => None,
    }
}

//! The AVX2 tile kernel over packed IQ4_NL: Q4_0's chunks (`super::Chunk`),
//! whose nibbles are indices into the signed table
//! [`crate::quant::IQ4_NL_VALUES`], times Q8_0 activations in the prepared
//! layout (`super::prepare_activation`; the sum term is 0).
//!
//! The loop is `x86_avx2.rs`'s for the legacy types: per half group (rows
//! `8h .. 8h + 8`, one per 32-bit lane), per block, each nibble line is
//! loaded once, split into its two registers of indices, and each register
//! of indices becomes the eight rows' table values with one `vpshufb` (the
//! table sits in both 128-bit lanes), which are multiplied into every
//! column of the pass before the next one is decoded.
//!
//! Integer sums are exact: with `v` the table value (−127 ..= 113) and `a`
//! the activation quant, `vpmaddubsw(|v|, sign(a, v))` forms `v · a` pair
//! sums of at most 2 · 127 · 127 = 32258 in magnitude for activations in
//! −127 ..= 127 (the Q8_0 quantizer's range: `|x| · 127 / amax` rounds to
//! at most 127; an `a` of −128 would not be negated), widened with one
//! `vpmaddwd` per register, so the block sum (at most 32 · 127 · 127 in
//! magnitude) is exact in i32 and in f32. Per lane (row) and column:
//! `acc = fma(f32(s), d_w · d_a, acc)` in block order, the legacy kernels'
//! accumulation (module docs of `super`), within the bound of the scalar
//! reference the tests check.
//!
//! Every kernel is an `unsafe fn` with `#[target_feature]`, reached only
//! through [`kernels`] after the dispatcher checked the CPU
//! ([`super::has_kernels`]).

use super::tags::{chunk_size, offsets, Q4_0};
use super::x86_avx2::{f16_round, prefetch_ahead, skip_columns};
use super::{Kernels, Tile, TileFn, ACT_BLOCK};
use crate::quant::IQ4_NL_VALUES;
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Columns per pass over a half group.
const PASS: usize = 4;

/// How far ahead (bytes) the first half of a group prefetches.
const PF_BYTES: usize = 2048;

/// Bytes of one chunk: IQ4_NL's chunks are Q4_0's (same block size).
const CS: usize = chunk_size(Q4_0);

/// The packed IQ4_NL kernels of this level, `None` for every other type
/// (the caller checked `has_kernels`).
pub(super) fn kernels(dtype: DType) -> Option<Kernels> {
    (dtype == DType::IQ4_NL).then_some(Kernels {
        quantize,
        tiles: [
            tile::<1> as TileFn,
            tile::<2>,
            tile::<3>,
            tile::<4>,
            tile::<5>,
            tile::<6>,
            tile::<7>,
            tile::<8>,
        ],
    })
}

/// Columns `0 .. N` (`N ≤ PASS`) of half `h` of one group: the [`TileFn`]
/// contract for the eight rows `8h .. 8h + 8`.
///
/// # Safety
/// As [`TileFn`]; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn half<const N: usize>(t: Tile, h: usize) {
    let Tile {
        w,
        nb,
        a,
        a_stride,
        out,
        out_stride,
    } = t;
    // SAFETY: IQ4_NL_VALUES is 16 readable bytes.
    let table = unsafe { _mm_loadu_si128(IQ4_NL_VALUES.as_ptr().cast()) };
    let table = _mm256_broadcastsi128_si256(table);
    let m4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if h == 0 {
            prefetch_ahead(w, b, CS, PF_BYTES);
        }
        // SAFETY: chunk b < nb is inside the group (contract).
        let c = unsafe { w.add(b * CS) };
        let (d, _, qs) = offsets(Q4_0, b);
        // SAFETY: the 8 f16 scales of half h are inside the chunk.
        let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(c.add(d + 16 * h).cast()) });
        // Block b of column i: its quant dword j (j < 8) or its scale (j = 8).
        // SAFETY (word): block b of column i < N is in bounds (contract) and
        // holds ACT_BLOCK bytes: quants, scale, sum term.
        let word = |i: usize, j: usize| unsafe {
            a.add(i * a_stride + b * ACT_BLOCK + 4 * j)
                .cast::<i32>()
                .read_unaligned()
        };
        let mut s = [_mm256_setzero_si256(); N];
        for l in 0..4 {
            // SAFETY: 32 bytes of nibble line l, half h, inside the chunk.
            let x = unsafe { _mm256_loadu_si256(c.add(qs + 64 * l + 32 * h).cast()) };
            let lo = _mm256_and_si256(x, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            // Lane r of register j: quants 4j .. 4j + 4 of row 8h + r.
            for (j, idx) in [(l, lo), (l + 4, hi)] {
                let v = _mm256_shuffle_epi8(table, idx);
                let va = _mm256_abs_epi8(v);
                for (i, s) in s.iter_mut().enumerate() {
                    let y = _mm256_sign_epi8(_mm256_set1_epi32(word(i, j)), v);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(va, y), ones);
                    *s = _mm256_add_epi32(*s, p);
                }
            }
        }
        for (i, (acc, s)) in acc.iter_mut().zip(s).enumerate() {
            let da = _mm256_set1_ps(f32::from_bits(word(i, 8) as u32));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, da), *acc);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY: rows 8h .. 8h + 8 of column i are writable (contract).
        unsafe { _mm256_storeu_ps(out.add(i * out_stride + 32 * h).cast(), *acc) };
    }
}

/// `NR` columns of one 16-row group (the [`TileFn`] contract): both halves,
/// in passes of at most [`PASS`] columns.
///
/// # Safety
/// As [`TileFn`]; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const NR: usize>(t: Tile) {
    type Half = unsafe fn(Tile, usize);
    for h in 0..2 {
        let mut c = 0;
        while c < NR {
            let n = (NR - c).min(PASS);
            let f: Half = match n {
                1 => half::<1>,
                2 => half::<2>,
                3 => half::<3>,
                _ => half::<PASS>,
            };
            // SAFETY: columns c .. c + n ≤ NR of the contract, forwarded.
            unsafe { f(skip_columns(t, c), h) };
            c += n;
        }
    }
}

/// Quantizes `nb` blocks of 32 f32 at `x` to Q8_0 exactly as the level's
/// row quantizer, straight into the prepared layout for IQ4_NL weights:
/// the quants, the scale rounded to f16 (as f32), and a sum term of 0.
///
/// # Safety
/// `nb · 32` f32 readable at `x`, `nb · ACT_BLOCK` bytes writable at `out`;
/// the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize(x: *const f32, nb: usize, out: *mut u8) {
    for b in 0..nb {
        // SAFETY: block b's 32 f32 are readable and its ACT_BLOCK bytes
        // writable (contract); the quants are its first 32 bytes.
        let (d, _) = unsafe {
            let (xb, o) = (x.add(32 * b), out.add(b * ACT_BLOCK));
            crate::quant::simd::quantize_block_q8_avx2(xb, o)
        };
        // SAFETY: scale at 32..36, sum term at 36..40 of block b.
        unsafe {
            let o = out.add(b * ACT_BLOCK);
            o.add(32).cast::<f32>().write_unaligned(f16_round(d));
            o.add(36).cast::<u32>().write_unaligned(0);
        }
    }
}

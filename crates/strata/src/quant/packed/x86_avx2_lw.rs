//! The AVX2 level's many-column kernel for the legacy types whose quants
//! take the most decoding ([`super::WideFn`]): the tiles of `x86_avx2.rs`
//! decode every dword group again for each pass of four columns (for Q5_0
//! the fifth bits' shuffle, compare and masks, a third of a 16-column
//! product's instructions). Here each half's blocks are decoded once per
//! segment of [`SEG`] blocks into scratch, and the tiles' own sums
//! (`avx2::span`) run over the copy for every pass of columns.

use super::tags::{chunk_size, has_min, IQ4_NL, Q5_0, Q5_1};
use super::x86_avx2::{avx2, group, prefetch_ahead, skip_columns, PASS, PF_BYTES};
use super::Tile;
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Blocks per segment that [`wide`] decodes at a time.
const SEG: usize = 8;

/// Columns per step of [`wide`]'s column loop (their minimum sums
/// stay on the stack).
const WIDE_COLS: usize = 64;

/// [`SEG`] blocks' decoded quant registers, eight per block.
struct Decoded([__m256i; 8 * SEG]);

/// Any multiple of [`super::Kernels::WIDE`] columns of one legacy-type
/// group (the [`super::WideFn`] contract): per half and segment of [`SEG`]
/// blocks the quant registers are decoded once into scratch, then every
/// pass of columns runs [`avx2::span`] over the copy, its sums carried from
/// segment to segment in the outputs (and, for the minimum terms, on the
/// stack): per column the same operations in the same order as the tiles
/// (`x86_avx2::tile`), so the same bits.
///
/// # Safety
/// As [`super::WideFn`]; the CPU supports the features.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn wide<const T: u8>(t: Tile, n: usize) {
    let mut dec = Decoded([_mm256_setzero_si256(); 8 * SEG]);
    // The sign trick (IQ4_NL) in passes of eight columns, as the tiles.
    let pass = if T == IQ4_NL { 8 } else { PASS };
    for c0 in (0..n).step_by(WIDE_COLS) {
        let nc = (n - c0).min(WIDE_COLS);
        for h in 0..2 {
            let mut accm = [_mm256_setzero_ps(); WIDE_COLS];
            for b0 in (0..t.nb).step_by(SEG) {
                let b1 = (b0 + SEG).min(t.nb);
                for b in b0..b1 {
                    if h == 0 {
                        prefetch_ahead(t.w, b, chunk_size(T), PF_BYTES);
                    }
                    // SAFETY: chunk b < nb (contract).
                    let (c, (_, qh, qs)) = unsafe { t.chunk::<T>(b) };
                    for j in 0..8 {
                        // SAFETY: the whole chunk is in bounds.
                        let q = unsafe { group::<T, false>(c, qh, qs, h, j) };
                        dec.0[8 * (b - b0) + j] = q;
                    }
                }
                for p in (0..nc).step_by(pass) {
                    // SAFETY: columns c0 + p .. c0 + p + pass are the
                    // contract's (nc is a multiple of 16); blocks b0 .. b1
                    // are decoded in `dec`.
                    unsafe {
                        let tp = skip_columns(t, c0 + p);
                        let m = &mut accm[p..p + pass];
                        if pass == 8 {
                            wide_pass::<T, 8>(tp, h, (b0, b1), &dec, m);
                        } else {
                            wide_pass::<T, PASS>(tp, h, (b0, b1), &dec, m);
                        }
                    }
                }
            }
            if has_min(T) {
                for (i, m) in accm[..nc].iter().enumerate() {
                    // SAFETY: rows 8h .. 8h + 8 of column c0 + i are
                    // writable (contract) and hold its sum of terms.
                    unsafe {
                        let o = t.out(c0 + i).add(32 * h).cast::<f32>();
                        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), *m));
                    }
                }
            }
        }
    }
}

/// One pass of [`wide`]: columns `0 .. N` of `t`, blocks `b0 .. b1` of half
/// `h` from `dec`, their sums loaded from the outputs (zero at block 0) and
/// `accm`, and stored back.
///
/// # Safety
/// As [`avx2::span`] with `DEC`; `accm` has N entries.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_pass<const T: u8, const N: usize>(
    t: Tile,
    h: usize,
    (b0, b1): (usize, usize),
    dec: &Decoded,
    accm: &mut [__m256],
) {
    // SAFETY: rows 8h .. 8h + 8 of each column are writable (contract);
    // from block 1 on they hold the column's sum.
    let out = |i: usize| unsafe { t.out(i).add(32 * h).cast::<f32>() };
    let mut acc: [__m256; N] = std::array::from_fn(|i| {
        if b0 == 0 {
            _mm256_setzero_ps()
        } else {
            // SAFETY: as `out`.
            unsafe { _mm256_loadu_ps(out(i)) }
        }
    });
    // The minimum terms' sums (left zero and unread for types without).
    let mut m: [__m256; N] = std::array::from_fn(|i| {
        if has_min(T) {
            accm[i]
        } else {
            _mm256_setzero_ps()
        }
    });
    // SAFETY: the contract, forwarded.
    unsafe { avx2::span::<T, N, false, true>(t, h, (b0, b1), dec.0.as_ptr(), &mut acc, &mut m) };
    for (i, (a, mi)) in acc.iter().zip(m).enumerate() {
        // SAFETY: as `out`.
        unsafe { _mm256_storeu_ps(out(i), *a) };
        if has_min(T) {
            accm[i] = mi;
        }
    }
}

/// The many-column kernel of legacy type `t` at AVX2, for the types whose
/// quants take the most decoding (the fifth bits, IQ4_NL's table).
/// Measured (`mm_cycles`, one thread, 3072 × 576, n = 16 and 512, AMD Zen
/// 5): Q5_0 20–30 %, Q5_1 8–12 % and IQ4_NL 8–10 % less time than the
/// tiles; Q4_0 3–5 % and Q4_1 15–35 % more (their decoding is a load and a
/// mask, less than the copy's loads and the sums carried between
/// segments), so they keep the tiles, as Q8_0 does. At AVX-VNNI, where the
/// integer sums take fewer instructions, it measured 0–20 % slower for
/// every type, so that level has none.
pub(super) fn wide_for(t: DType) -> Option<super::WideFn> {
    match t {
        DType::Q5_0 => Some(wide::<Q5_0>),
        DType::Q5_1 => Some(wide::<Q5_1>),
        DType::IQ4_NL => Some(wide::<IQ4_NL>),
        _ => None,
    }
}

//! AVX-512 kernels over the packed layout: one 16-row group in the sixteen
//! i32 / f32 lanes of a zmm register, up to [`Kernels::NR`] activation
//! columns per call with their f32 accumulators in registers across K.
//!
//! Per block, the weight chunk is decoded once into eight u8 registers
//! (register `j`: lane `r` = quants `4j..4j+4` of row `r`), then for every
//! column: `s = -offset · Σa` (or 0), eight `s += w_j · bcast(a dword j)`
//! (`vpdpbusd` at the VNNI level; `vpmaddubsw` + `vpmaddwd` at the AVX-512
//! level, exact because the 4/5-bit quants keep the pair sums below 2^15),
//! then `acc = fma(f32(s), d_w · d_a, acc)` (+ `fma(m_w, s_a, acc)` for the
//! `_1` types). The operations on a column never depend on the other
//! columns, so a column gives the same bits in every kernel width.
//!
//! IQ4_NL (VNNI level only): Q4_0's chunks, each nibble register turned
//! into the rows' table values plus 128 (u8 1 ..= 241) by one `vpshufb`,
//! with the prepared activations' `-128 · Σa` as the start of every block
//! sum, as the AVX-VNNI kernels of `x86_avx2.rs` do on eight rows.
//!
//! Every kernel here is an `unsafe fn` with `#[target_feature]`: callers get
//! them only through the levels' tables ([`avx512_table`], [`vnni_table`];
//! entries of [`crate::isa::Table`], which is only built for a level the
//! CPU runs).

use super::tags::{
    chunk_size, has_min, kernel_table, quantize_blocks, tiles, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
};
use super::{Kernels, Table, Tile, TileFn};
use crate::tensor::DType;
use std::arch::x86_64::*;

/// How far ahead (bytes) a tile prefetches its group's weights.
const PF_BYTES: usize = 4096;

macro_rules! level {
    ($level:ident, $features:literal, |$s:ident, $w:ident, $a:ident| $dot:expr $(, $extra:ident)*) => {
        mod $level {
            use super::*;

            /// `s + Σ_t w[4r+t] · a[t]` per lane (u8 × i8, exact).
            #[target_feature(enable = $features)]
            #[inline]
            fn dot($s: __m512i, $w: __m512i, $a: __m512i) -> __m512i {
                $dot
            }

            /// The eight quant registers of the chunk at `c` (quants at
            /// byte `qs`, fifth-bit masks at `qh`).
            ///
            /// # Safety
            /// `c` points at a whole chunk of type `T`.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn decode<const T: u8>(c: *const u8, qh: usize, qs: usize) -> [__m512i; 8] {
                let mut q = [_mm512_setzero_si512(); 8];
                if T == Q8_0 {
                    for (j, v) in q.iter_mut().enumerate() {
                        // SAFETY: 64 bytes of quants j inside the chunk.
                        *v = unsafe { _mm512_loadu_si512(c.add(qs + 64 * j).cast()) };
                    }
                    return q;
                }
                let m4 = _mm512_set1_epi8(0x0f);
                for i in 0..4 {
                    // SAFETY: 64 bytes of nibbles i inside the chunk.
                    let x = unsafe { _mm512_loadu_si512(c.add(qs + 64 * i).cast()) };
                    q[i] = _mm512_and_si512(x, m4);
                    q[i + 4] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
                }
                if T == IQ4_NL {
                    // The table values plus 128 (u8), whose `-128 · Σa`
                    // the prepared activations carry as their sum term.
                    // SAFETY: 16 readable bytes.
                    let table = _mm512_broadcast_i32x4(unsafe {
                        _mm_loadu_si128(super::super::x86_avx2::IQ4_NL_BIASED.as_ptr().cast())
                    });
                    for v in q.iter_mut() {
                        *v = _mm512_shuffle_epi8(table, *v);
                    }
                }
                if T == Q5_0 || T == Q5_1 {
                    let sixteen = _mm512_set1_epi8(16);
                    for (j, v) in q.iter_mut().enumerate() {
                        // SAFETY: mask j is 8 bytes inside the chunk.
                        let k = unsafe { c.add(qh + 8 * j).cast::<u64>().read_unaligned() };
                        *v = _mm512_mask_add_epi8(*v, k, *v, sixteen);
                    }
                }
                q
            }

            /// `NR` columns of one 16-row group (the [`TileFn`] contract).
            #[target_feature(enable = $features)]
            unsafe fn tile<const T: u8, const NR: usize>(t: Tile) {
                let offset = !has_min(T);
                let mut acc = [_mm512_setzero_ps(); NR];
                for b in 0..t.nb {
                    // Token generation streams the weights from DRAM once:
                    // ask for them ahead, across the pages the hardware
                    // prefetcher stops at.
                    super::super::x86_avx2::prefetch_ahead(t.w, b, chunk_size(T), PF_BYTES);
                    // SAFETY: chunk b < nb (contract).
                    let (c, (d, qh, qs)) = unsafe { t.chunk::<T>(b) };
                    // SAFETY: the 16 f16 scales are inside the chunk.
                    let dw = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(c.add(d).cast()) });
                    let mw = if has_min(T) {
                        // SAFETY: the 16 f16 minimums follow the scales.
                        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(c.add(32).cast()) })
                    } else {
                        _mm512_setzero_ps()
                    };
                    // SAFETY: the whole chunk is in bounds.
                    let q = unsafe { decode::<T>(c, qh, qs) };
                    for (j, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: block b of column j is in bounds (contract).
                        let p = unsafe { t.act(j, b) };
                        // SAFETY: ACT_BLOCK bytes at p: quants, scale, sum term.
                        let word =
                            |i: usize| unsafe { p.add(4 * i).cast::<i32>().read_unaligned() };
                        let mut s = if offset {
                            _mm512_set1_epi32(word(9))
                        } else {
                            _mm512_setzero_si512()
                        };
                        if NR <= 2 {
                            // Two chains for latency when few columns share the
                            // block (integer sums: the same value either way).
                            let mut s1 = _mm512_setzero_si512();
                            for i in (0..8).step_by(2) {
                                s = dot(s, q[i], _mm512_set1_epi32(word(i)));
                                s1 = dot(s1, q[i + 1], _mm512_set1_epi32(word(i + 1)));
                            }
                            s = _mm512_add_epi32(s, s1);
                        } else {
                            for (i, &qi) in q.iter().enumerate() {
                                s = dot(s, qi, _mm512_set1_epi32(word(i)));
                            }
                        }
                        let da = _mm512_set1_ps(f32::from_bits(word(8) as u32));
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da), *acc);
                        if has_min(T) {
                            let sa = _mm512_set1_ps(f32::from_bits(word(9) as u32));
                            *acc = _mm512_fmadd_ps(mw, sa, *acc);
                        }
                    }
                }
                for (j, acc) in acc.iter().enumerate() {
                    // SAFETY: 16 writable f32 per column (contract).
                    unsafe { _mm512_storeu_ps(t.out(j).cast(), *acc) };
                }
            }

            /// Quantizes `nb` blocks of 32 f32 at `x` to Q8_0 or (types with
            /// a minimum) Q8_1 exactly as the scalar quantizers do (same
            /// scale, reciprocal, products, `roundf` and f16 rounding) and
            /// writes them at `out` in the layout of
            /// [`super::super::prepare_activation`] for weights of type tag `T`.
            ///
            /// # Safety
            /// `nb · 32` f32 readable at `x`, `nb · ACT_BLOCK` bytes writable at `out`.
            #[target_feature(enable = $features)]
            unsafe fn quantize<const T: u8>(x: *const f32, nb: usize, out: *mut u8) {
                let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
                // roundf for |r| <= 127 as trunc(r + copysign(0.5 - 2^-25, r)):
                // see the AVX2 quantizer's `round_away_add` and its test.
                let below_half = _mm512_castps_si512(_mm512_set1_ps(0.5 - f32::EPSILON / 4.0));
                let sign = _mm512_set1_epi32(i32::MIN);
                let block = |x: *const f32, o: *mut u8| -> (f32, i32) {
                    // SAFETY: the block's 32 f32 are readable (quantize_blocks).
                    let v = unsafe { [_mm512_loadu_ps(x), _mm512_loadu_ps(x.add(16))] };
                    // maxps returns its second operand when either is NaN, so
                    // NaNs are skipped as f32::max skips them in the scalar fold.
                    let m = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_setzero_ps());
                    let m = _mm512_max_ps(_mm512_abs_ps(v[1]), m);
                    let d = _mm512_reduce_max_ps(m) / 127.0;
                    let idv = _mm512_set1_ps(crate::quant::inv_or_zero(d));
                    let q = v.map(|v| {
                        let r = _mm512_mul_ps(v, idv);
                        // NaN → 0 (the scalar `as i32`), clamp, then roundf.
                        let r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r), r);
                        let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                        let add = _mm512_or_si512(
                            below_half,
                            _mm512_and_si512(_mm512_castps_si512(r), sign),
                        );
                        _mm512_cvttps_epi32(_mm512_add_ps(r, _mm512_castsi512_ps(add)))
                    });
                    // SAFETY: the block's quants 0..32 are writable (quantize_blocks).
                    unsafe {
                        _mm_storeu_si128(o.cast(), _mm512_cvtepi32_epi8(q[0]));
                        _mm_storeu_si128(o.add(16).cast(), _mm512_cvtepi32_epi8(q[1]));
                    }
                    (d, _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1])))
                };
                // SAFETY: the contract, forwarded.
                unsafe { quantize_blocks::<T>(x, nb, out, block, |v| f16_round(v)) }
            }

            /// `x` rounded to f16 (nearest even, as the scalar `half`
            /// conversion) and back.
            #[target_feature(enable = $features)]
            #[inline]
            fn f16_round(x: f32) -> f32 {
                let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
                _mm_cvtss_f32(_mm_cvtph_ps(h))
            }

            kernel_table!($($extra),*);
        }
    };
}

// IQ4_NL only here: its biased table values (≤ 241) would saturate the
// AVX-512 level's `vpmaddubsw` pair sums.
level!(
    vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    |s, w, a| _mm512_dpbusd_epi32(s, w, a),
    IQ4_NL
);

// Pair sums of u8 quants ≤ 31 times i8 stay within i16 (|2 · 31 · 128| <
// 2^15), so `vpmaddubsw` never saturates for the 4/5-bit types (Q8_0 has no
// kernel at this level).
level!(
    avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    |s, w, a| _mm512_add_epi32(
        s,
        _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), _mm512_set1_epi16(1))
    )
);

/// The AVX-512 level's own packed kernels: its tiles for the legacy 4/5-bit
/// types (Q8_0 has none at this level) and `x86_k`'s for the K-quants but
/// IQ4_XS; the other types run AVX2's ([`Isa::lower`](crate::isa::Isa::lower)).
pub(super) fn avx512_table() -> Table {
    Table::from_fn(|t| match t {
        DType::Q8_0 => None,
        _ => avx512::kernels(t).or_else(|| super::x86_k::avx512_kernels(t)),
    })
}

/// The VNNI level's own packed kernels: its `vpdpbusd` tiles for the legacy
/// types and IQ4_NL, `x86_k`'s for the K-quants.
pub(super) fn vnni_table() -> Table {
    Table::from_fn(|t| vnni::kernels(t).or_else(|| super::x86_k::vnni_kernels(t)))
}

/// The AMX level's own packed kernels: the K-quants' VNNI tiles with AMX
/// tile products for 16 columns and more (`x86_k`); the legacy types run
/// the VNNI level's.
pub(super) fn amx_table() -> Table {
    Table::from_fn(super::x86_k::amx_kernels)
}

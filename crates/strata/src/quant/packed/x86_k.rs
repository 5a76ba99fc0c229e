//! AVX-512 kernels over the packed K-quant layout (`k.rs`) for Q2_K .. Q6_K
//! and IQ4_XS weights times Q8_K activation columns: sixteen rows per zmm
//! register (one row per 32-bit lane: a whole 64-byte line of a group, where
//! the AVX2 kernels of `x86_avx2_k.rs` take it in two halves of eight rows).
//! IQ4_XS runs here at the VNNI level only (below).
//!
//! Per super-block, row (lane) and column, the integer sums are exact for
//! any weight bytes and any i8 activations (`|a| ≤ 128`):
//! - The sum of a sub-block (Q4_K / Q5_K / IQ4_XS: 32 elements, eight
//!   dwords; Q2_K / Q3_K / Q6_K: 16 elements, four dwords, in ggml's Q6_K
//!   element order) is an i32 chain of `dot`s of the unsigned quants with
//!   the broadcast activation dword: `vpdpbusd` at the VNNI level; at the
//!   AVX-512 level `vpmaddubsw`, whose pair sums cannot saturate for quants
//!   ≤ 63 (2 · 63 · 128 = 16128), then `vpmaddwd` with ones. IQ4_XS's
//!   quants are its table values plus 128 (u8 ≤ 241, one `vpshufb`), which
//!   would saturate that pair sum: no IQ4_XS tile at the AVX-512 level.
//! - The sum is scaled by the sub-block's scale: by `vpmulld` where it can
//!   pass an i16 (Q5_K: 32 · 31 · 128; Q6_K: 16 · 63 · 128; IQ4_XS:
//!   32 · 241 · 128), else by `wdot` (`vpdpwssd`) with the pair `(s, 0)`
//!   (Q2_K: 16 · 3 · 128; Q3_K: 16 · 7 · 128; Q4_K summed as two halves of
//!   16 · 15 · 128 at the VNNI level): `isum = Σ_j s_j Σ q a`, the scalar
//!   reference's integer.
//! - The offsets and minimums go through the Q8_K bsums (the Q8_K quantizer
//!   writes bsums that are the sums of its quants), one `wdot` of an i16
//!   pair per lane with a bsums dword: Q2_K / Q4_K / Q5_K's
//!   `summs = Σ_j m_j bsums_j`, Q3_K's `-4` and Q6_K's `-32` as
//!   `4 · Σ_j s_j bsums_j` and `32 · Σ_j s_j bsums_j`. IQ4_XS's bias is
//!   taken off before the scaling: its prepared columns carry `-128 ·` each
//!   32-element sum in place of the bsums (`k::iq4_xs_bias_terms`), where
//!   each sub-block's chain starts.
//!
//! The scales and mins are decoded once per super-block for the sixteen
//! rows (the byte masks and shifts of the AVX2 kernels on whole lines). The
//! f32 epilogue is the scalar reference's, as at AVX2: per super-block
//! `(d_w d_a) · f32(isum) - (dmin_w d_a) · f32(summs)` (Q6_K: `(d_w d_a) ·
//! f32(isum)`) with separate multiplies and subtraction, added to the row's
//! sum in super-block order, so every output is
//! [`crate::quant::vec_dot_fn`]'s scalar result bit for bit, whatever the
//! tile width, level or thread count.
//!
//! A tile runs all its columns (up to [`Kernels::NR`] = 8) in one pass over
//! the group's super-blocks (eight measured faster than passes of four:
//! Q6_K at 1024 × 1024 × 512, 4.3 against 5.5 ms); each super-block's
//! sub-blocks are straight code with constant indices (every shift an
//! immediate), each decoded quant register used by every column.
//!
//! The functions live in three files by algorithm, each a macro that
//! `level!` expands inside every level's module (so that each is compiled
//! with that level's target features): `x86_k/sums.rs` (loads, the exact
//! sub-block sums and their scaling, the bsums terms, the f32 epilogues),
//! `x86_k/k32.rs` (32-element sub-blocks: Q4_K, Q5_K, IQ4_XS) and
//! `x86_k/k16.rs` (16-element sub-blocks: Q2_K, Q3_K, Q6_K); this file has
//! the level-specific `dot` / `wdot`, the tile over a group and the tables.
//!
//! Every kernel here is an `unsafe fn` with `#[target_feature]`: callers
//! get them only through the per-level functions below ([`avx512_kernels`],
//! [`vnni_kernels`], [`amx_kernels`]), which fill the levels' tables
//! (`super::x86`), built only for a level the CPU runs.

use super::k::{IQ4_XS_LINES, Q2_K_D, Q3_K_D, Q4_K_LINES, Q5_K_LINES, Q6_K_D};
use super::tags::{
    k_chunk_size as chunk, k_kernel_table, k_sub_dwords, tiles, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K,
    Q6_K,
};
use super::x86_kshared::{fence, fifth_bit, min_terms, q3_bits, terms, BSUMS, QS};
use super::{Kernels, Tile, TileFn};
use crate::isa::Isa;
use crate::tensor::DType;
use std::arch::x86_64::*;

mod amx;
mod k16;
mod k32;
mod sums;
mod wide;

/// Super-blocks a tile prefetches ahead of the one it computes.
const PF: usize = 2;
/// Bytes of a Q8_K block: f32 `d` at 0, quants at [`QS`], i16 bsums at [`BSUMS`].
const Q8K: usize = DType::Q8_K.type_size();

macro_rules! level {
    (
        $level:ident,
        $isa:ident,
        $features:literal,
        |$s:ident, $w:ident, $a:ident| $dot:expr,
        |$t:ident, $x:ident, $y:ident| $wdot:expr,
        $split:literal
        $(, $more:ident)?
    ) => {
        mod $level {
            use super::*;

            /// Q4_K sub-blocks are summed in two runs of four dwords (each
            /// at most 16 · 15 · 128 = 30720, an i16) and scaled by
            /// [`wdot`] with `(s_j, 0)` (`vpdpwssd`: one instruction where
            /// `vpmulld` and an add take three micro-ops), not as one run
            /// scaled by `vpmulld`.
            const SPLIT: bool = $split;

            /// `t + x.lo16 · y.lo16 + x.hi16 · y.hi16` per lane (i16 pairs,
            /// exact in i32 for the operands here).
            #[target_feature(enable = $features)]
            #[inline]
            fn wdot($t: __m512i, $x: __m512i, $y: __m512i) -> __m512i {
                $wdot
            }

            /// `s + Σ_t w[4r+t] · a[t]` per lane (u8 × i8, exact for
            /// `w ≤ 63`).
            #[target_feature(enable = $features)]
            #[inline]
            fn dot($s: __m512i, $w: __m512i, $a: __m512i) -> __m512i {
                $dot
            }

            super::sums::k_sums!($features);
            super::k32::k32_tiles!($features);
            super::k16::k16_tiles!($features);
            super::wide::k_wide!($features);
            $(super::amx::$more!($features);)?

            /// `N` columns of one 16-row K-quant group of type `T` (the
            /// [`TileFn`] contract; `N ≤ 8`), all in one pass over the
            /// group's super-blocks, prefetching [`PF`] super-blocks ahead.
            ///
            /// # Safety
            /// As [`TileFn`] (the columns are Q8_K rows of `t.nb` blocks
            /// made by the Q8_K quantizer); the CPU supports the level.
            #[target_feature(enable = $features)]
            unsafe fn tile<const T: u8, const N: usize>(t: Tile) {
                let cs = chunk(T);
                let mut acc = [_mm512_setzero_ps(); N];
                for b in 0..t.nb {
                    let start = t.w.wrapping_add((b + PF) * cs);
                    for o in (0..cs).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(o).cast());
                    }
                    // SAFETY: chunk b and block b of every column are in
                    // bounds (contract).
                    let (c, cols) = unsafe {
                        (
                            t.w.add(b * cs),
                            std::array::from_fn(|i| t.a.add(i * t.a_stride + b * Q8K)),
                        )
                    };
                    // SAFETY (each arm): as above.
                    let terms = unsafe {
                        match T {
                            Q2_K => q2_k_with(c, cols, q2_dec(c).0),
                            Q3_K => q3_k_with(c, cols, q3_dec(c).0),
                            Q4_K => q45_k::<false, N>(c, cols),
                            Q5_K => q45_k::<true, N>(c, cols),
                            IQ4_XS => {
                                let (quant, scale) = iq4_xs_dec(c);
                                iq4_xs_with(c, cols, quant, scale)
                            }
                            _ => {
                                let (quant, scale) = q6_dec(c);
                                q6_k_with(c, cols, quant, scale, q6_pairs(c))
                            }
                        }
                    };
                    for (acc, t) in acc.iter_mut().zip(terms) {
                        *acc = _mm512_add_ps(*acc, t);
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    // SAFETY: the 16 rows of column i are writable (contract).
                    unsafe { _mm512_storeu_ps(t.out(i).cast(), *acc) };
                }
            }

            k_kernel_table!(Isa::$isa);
        }
    };
}

level!(
    vnni,
    Vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    |s, w, a| _mm512_dpbusd_epi32(s, w, a),
    |t, x, y| {
        // The instruction itself: LLVM splits the intrinsic into
        // `vpmaddwd` + `vpaddd` for a generic x86-64 target (two
        // micro-ops where `vpdpwssd` is one; measured: Q4_K / Q2_K /
        // Q3_K tiles).
        let mut t = t;
        // SAFETY: a register-only VNNI instruction; the enclosing function
        // enables `avx512vnni` and the caller checked the CPU.
        unsafe {
            std::arch::asm!(
                "vpdpwssd {t}, {x}, {y}",
                t = inout(zmm_reg) t,
                x = in(zmm_reg) x,
                y = in(zmm_reg) y,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        t
    },
    true,
    k_amx
);

// Pair sums of u8 quants ≤ 63 times i8 stay within i16 (2 · 63 · 128 <
// 2^15), so `vpmaddubsw` never saturates for these types.
level!(
    avx512,
    Avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    |s, w, a| _mm512_add_epi32(
        s,
        _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), _mm512_set1_epi16(1))
    ),
    |t, x, y| _mm512_add_epi32(t, _mm512_madd_epi16(x, y)),
    false
);

/// `$l::$f::<T>` (a level module's many-column kernel) for the K type `$t`.
macro_rules! wide_fn {
    ($l:ident :: $f:ident, $t:expr) => {
        match $t {
            DType::Q2_K => $l::$f::<Q2_K> as super::WideFn,
            DType::Q3_K => $l::$f::<Q3_K>,
            DType::Q4_K => $l::$f::<Q4_K>,
            DType::Q5_K => $l::$f::<Q5_K>,
            DType::IQ4_XS => $l::$f::<IQ4_XS>,
            _ => $l::$f::<Q6_K>,
        }
    };
}

/// The AVX-512 level's K-quant kernels for `dtype`, with its many-column
/// kernels; none for IQ4_XS, whose biased values (≤ 241) would saturate
/// `vpmaddubsw`'s pair sums: the AVX2 tiles (signed values, `vpsignb`) run
/// it.
pub(super) fn avx512_kernels(dtype: DType) -> Option<Kernels> {
    match dtype {
        DType::IQ4_XS => None,
        _ => avx512::kernels(dtype).map(|k| Kernels {
            wide: Some(wide_fn!(avx512::wide_dec, dtype)),
            ..k
        }),
    }
}

/// The VNNI level's K-quant kernels for `dtype`, with its many-column
/// kernels.
pub(super) fn vnni_kernels(dtype: DType) -> Option<Kernels> {
    vnni::kernels(dtype).map(|k| Kernels {
        wide: Some(wide_fn!(vnni::wide_dec, dtype)),
        ..k
    })
}

/// The AMX level's K-quant kernels for `dtype`: the VNNI tiles, and AMX
/// products for 16 columns and more.
pub(super) fn amx_kernels(dtype: DType) -> Option<Kernels> {
    vnni::kernels(dtype).map(|k| Kernels {
        wide: Some(wide_fn!(vnni::wide, dtype)),
        ..k
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::Rng;
    use crate::isa::x86::amx::Emulated;

    /// `rows` rows of `k` random ggml bytes of `t` (every quant and scale
    /// byte random, so the planes' bounds are reached), each f16 `d` /
    /// `dmin` a finite value in 0.5 .. 1.
    fn weights(t: DType, rows: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
        let halves: &[usize] = match t {
            DType::Q2_K => &[80, 82],
            DType::Q3_K => &[108],
            DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[0],
        };
        let mut w: Vec<u8> = (0..t.row_size(k) * rows)
            .map(|_| rng.next_u64() as u8)
            .collect();
        for b in w.chunks_exact_mut(t.type_size()) {
            for &at in halves {
                let h = 0x3800 | (rng.next_u64() as u16 & 0x3ff);
                b[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        w
    }

    /// The AMX kernel's algorithm (planes, products, epilogue), with the
    /// tile products in scalar code, gives the VNNI tiles' bits: the
    /// decomposition is checked on every AVX-512 VNNI CPU, AMX or not
    /// (where AMX runs, the packed MUL_MAT tests check the real one). On
    /// CPUs without AVX-512 VNNI neither kernel can run.
    #[test]
    fn amx_algorithm_gives_the_vnni_tiles_bits() {
        if !Isa::Vnni.is_supported() {
            return;
        }
        let mut rng = Rng::new(41);
        for t in super::super::K_TYPES {
            // 48 columns: one 32-column and one 16-column product.
            let (k, n) = (512, 48);
            let w = weights(t, 16, k, &mut rng);
            let mut packed = vec![0u8; w.len()];
            super::super::pack(t, [k, 16, 1, 1], &w, &mut packed).expect("pack");
            let col = DType::Q8_K.row_size(k);
            let kern = kernels_for_test(t);
            let mut act = vec![0u8; col * n];
            let x = rng.vec(k * n, -1.0, 1.0);
            for (c, a) in act.chunks_exact_mut(col).enumerate() {
                // SAFETY: VNNI is supported (checked); k f32 in, k / 256
                // Q8_K blocks out (the type's prepared columns).
                unsafe { (kern.quantize)(x[c * k..].as_ptr(), k / 256, a.as_mut_ptr()) };
            }
            let tile = |a: *const u8, out: *mut f32| Tile {
                w: packed.as_ptr(),
                nb: k / 256,
                a,
                a_stride: col,
                out: out.cast(),
                out_stride: 64,
            };
            let mut want = vec![0f32; 16 * n];
            for c0 in (0..n).step_by(8) {
                // SAFETY: VNNI is supported (checked); 8 columns of Q8_K
                // rows at c0 and 8 outputs of 16 f32 are in bounds.
                unsafe {
                    (kern.tiles[7])(tile(act[c0 * col..].as_ptr(), want[16 * c0..].as_mut_ptr()))
                };
            }
            let mut got = vec![f32::NAN; 16 * n];
            let tl = tile(act.as_ptr(), got.as_mut_ptr());
            // SAFETY: as above, for n columns; the products are scalar.
            unsafe {
                match t {
                    DType::Q2_K => vnni::wide_with::<Q2_K, _>(tl, n, &mut Emulated),
                    DType::Q3_K => vnni::wide_with::<Q3_K, _>(tl, n, &mut Emulated),
                    DType::Q4_K => vnni::wide_with::<Q4_K, _>(tl, n, &mut Emulated),
                    DType::Q5_K => vnni::wide_with::<Q5_K, _>(tl, n, &mut Emulated),
                    DType::IQ4_XS => vnni::wide_with::<IQ4_XS, _>(tl, n, &mut Emulated),
                    _ => vnni::wide_with::<Q6_K, _>(tl, n, &mut Emulated),
                }
            };
            let first = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g.to_bits() != w.to_bits());
            assert_eq!(
                first, None,
                "{t}: first differing output (column-major, 16 rows)"
            );
        }
    }

    /// The VNNI level's tiles of `t`.
    fn kernels_for_test(t: DType) -> Kernels {
        vnni::kernels(t).expect("VNNI K tiles")
    }
}

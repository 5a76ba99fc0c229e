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
//!   `4 · Σ_j s_j bsums_j` and `32 · Σ_j s_j bsums_j`, and IQ4_XS's bias as
//!   `128 · Σ_j s_j (bsums_2j + bsums_2j+1)`.
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
//! A tile of `NR` columns runs in passes of at most [`PASS`] columns over
//! the group's super-blocks (eight measured faster than four: Q6_K at
//! 1024 × 1024 × 512, 5.5 against 4.3 ms); each super-block's sub-blocks
//! are straight code with constant indices (every shift an immediate), each
//! decoded quant register used by every column of the pass.
//!
//! Every kernel here is an `unsafe fn` with `#[target_feature]`: callers
//! get them only through [`kernels`], which the dispatcher calls after
//! checking the CPU ([`super::has_kernels`]).

use super::k::{IQ4_XS_LINES, Q2_K_D, Q3_K_D, Q4_K_LINES, Q5_K_LINES, Q6_K_D};
use super::tags::{k_kernel_table, tiles, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use super::{Kernels, Tile, TileFn};
use crate::isa::Isa;
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Columns per pass over a group's super-blocks.
const PASS: usize = 8;
/// Super-blocks the first pass prefetches ahead of the one it computes.
const PF: usize = 2;
/// Bytes of a Q8_K block: f32 `d` at 0, quants at [`QS`], i16 bsums at [`BSUMS`].
const Q8K: usize = DType::Q8_K.type_size();
/// Offset of a Q8_K block's 256 i8 quants.
const QS: usize = 4;
/// Offset of a Q8_K block's 16 i16 bsums.
const BSUMS: usize = 4 + 256;

/// Chunk bytes of type tag `t` (16 super-blocks).
const fn chunk(t: u8) -> usize {
    match t {
        Q2_K => 16 * DType::Q2_K.type_size(),
        Q3_K => 16 * DType::Q3_K.type_size(),
        IQ4_XS => 16 * DType::IQ4_XS.type_size(),
        Q4_K => 16 * DType::Q4_K.type_size(),
        Q5_K => 16 * DType::Q5_K.type_size(),
        _ => 16 * DType::Q6_K.type_size(),
    }
}

macro_rules! level {
    (
        $level:ident,
        $isa:ident,
        $features:literal,
        |$s:ident, $w:ident, $a:ident| $dot:expr,
        |$t:ident, $x:ident, $y:ident| $wdot:expr,
        $split:literal
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

            /// The 64-byte line at `p`.
            ///
            /// # Safety
            /// `p .. p + 64` is readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn load(p: *const u8) -> __m512i {
                // SAFETY: the caller guarantees the 64 bytes.
                unsafe { _mm512_loadu_si512(p.cast()) }
            }

            /// Dword `i` of the Q8_K block at `p` (from its quants, or
            /// from its bsums with `at = BSUMS`) in every lane.
            ///
            /// # Safety
            /// `p + at + 4 i .. + 4` is readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn bcast(p: *const u8, at: usize, i: usize) -> __m512i {
                // SAFETY: the caller guarantees the four bytes.
                _mm512_set1_epi32(unsafe { p.add(at + 4 * i).cast::<i32>().read_unaligned() })
            }

            /// A shift count for the `_mm512_s*l_epi16/32` forms that take it
            /// in a register (constant-folded to an immediate).
            #[target_feature(enable = $features)]
            #[inline]
            fn count(n: usize) -> __m128i {
                _mm_cvtsi32_si128(n as i32)
            }

            /// Byte `b` of each lane of `v`, zero-extended to the lane.
            #[target_feature(enable = $features)]
            #[inline]
            fn byte(v: __m512i, b: usize) -> __m512i {
                _mm512_and_si512(_mm512_srl_epi32(v, count(8 * b)), _mm512_set1_epi32(0xff))
            }

            /// Byte `b` of each lane of `v`, sign-extended to the lane.
            #[target_feature(enable = $features)]
            #[inline]
            fn sbyte(v: __m512i, b: usize) -> __m512i {
                _mm512_sra_epi32(_mm512_sll_epi32(v, count(24 - 8 * b)), count(24))
            }

            /// Per lane of `v`, the i16 pair of its bytes `a`, `a + 1`,
            /// sign-extended (`a` is 0 or 2).
            #[target_feature(enable = $features)]
            #[inline]
            fn spair(v: __m512i, a: usize) -> __m512i {
                // Low i16: byte a at its top, shifted down arithmetically;
                // high i16: byte a + 1 (already at the top of the lane for
                // a = 2, moved there by 8 for a = 0), shifted down as well.
                let lo = _mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(_mm512_srl_epi32(
                    v,
                    count(8 * a),
                )));
                let hi = _mm512_srai_epi32::<24>(_mm512_sll_epi32(v, count(16 - 8 * a)));
                _mm512_or_si512(
                    _mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
                    _mm512_slli_epi32::<16>(hi),
                )
            }

            /// Per lane of `v`, the i16 pair of its bytes `a`, `a + 1`,
            /// zero-extended (`a` is 0 or 2).
            #[target_feature(enable = $features)]
            #[inline]
            fn upair(v: __m512i, a: usize) -> __m512i {
                let x = _mm512_srl_epi32(v, count(8 * a));
                _mm512_or_si512(
                    _mm512_and_si512(x, _mm512_set1_epi32(0xff)),
                    _mm512_and_si512(_mm512_slli_epi32::<8>(x), _mm512_set1_epi32(0x00ff_0000)),
                )
            }

            /// `isum += s · scale` per column, in i32 (exact: see the module
            /// docs for the bounds).
            #[target_feature(enable = $features)]
            #[inline]
            fn scale_into<const N: usize>(
                isum: &mut [__m512i; N],
                s: [__m512i; N],
                scale: __m512i,
            ) {
                for (acc, s) in isum.iter_mut().zip(s) {
                    *acc = _mm512_add_epi32(*acc, _mm512_mullo_epi32(s, scale));
                }
            }

            /// Ends a step: each of `v` passes through an empty `asm!`
            /// statement, so the step's work is done before the next
            /// step's loads (as `x86_avx2_k23::fence`: without it the
            /// compiler may interleave steps and spill decoded quants).
            #[target_feature(enable = $features)]
            #[inline]
            fn fence<const N: usize>(v: &mut [__m512i; N]) {
                for v in v {
                    let mut x = *v;
                    // SAFETY: no instructions; `x` stays in its register.
                    unsafe {
                        std::arch::asm!(
                            "/* {0} */",
                            inout(zmm_reg) x,
                            options(nostack, preserves_flags)
                        )
                    };
                    *v = x;
                }
            }

            /// The sum of one sub-block's `D` dwords for every column:
            /// `Σ_t dot(quant(t), activation dword d0 + t)`. One or two
            /// columns run two chains (even and odd `t`) for latency; the
            /// same integer either way.
            ///
            /// # Safety
            /// The Q8_K blocks `cols` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn sub_sums<const N: usize, const D: usize>(
                cols: &[*const u8; N],
                quant: impl Fn(usize) -> __m512i,
                d0: usize,
                t0: usize,
            ) -> [__m512i; N] {
                let mut s = [_mm512_setzero_si512(); N];
                let mut s1 = [_mm512_setzero_si512(); N];
                for t in t0..t0 + D {
                    let q = quant(t);
                    for i in 0..N {
                        // SAFETY: activation dword d0 + t < 64 of the block.
                        let a = unsafe { bcast(cols[i], QS, d0 + t) };
                        if N <= 2 && t % 2 == 1 {
                            s1[i] = dot(s1[i], q, a);
                        } else {
                            s[i] = dot(s[i], q, a);
                        }
                    }
                }
                if N <= 2 {
                    for i in 0..N {
                        s[i] = _mm512_add_epi32(s[i], s1[i]);
                    }
                }
                s
            }

            /// Sub-block `J` of a Q4_K (`Q5` false) or Q5_K super-block
            /// for every column: the low nibbles of quant lines
            /// `qs + 8 (J / 2) ..+ 8` for even `J`, the high ones for odd `J`
            /// (Q5_K: bit `J` of fifth-bit line `3 + t` as bit 4), times
            /// activation dwords `8J ..+ 8`, scaled by the sub-block's scale.
            ///
            /// # Safety
            /// The chunk at `c` and the Q8_K blocks `cols` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q45_step<const Q5: bool, const J: usize, const N: usize>(
                c: *const u8,
                cols: &[*const u8; N],
                scale: __m512i,
                isum: &mut [__m512i; N],
            ) {
                let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
                let qs = if Q5 { 11 } else { 3 };
                let m4 = _mm512_set1_epi8(0x0f);
                let quant = |t: usize| {
                    // SAFETY: quant line qs + 8 (J / 2) + t (< 35 / 43) is
                    // inside the chunk.
                    let x = unsafe { load(c.add(lines + 64 * (qs + 8 * (J / 2) + t))) };
                    let x = if J % 2 == 0 {
                        x
                    } else {
                        _mm512_srli_epi16::<4>(x)
                    };
                    let q = _mm512_and_si512(x, m4);
                    if Q5 {
                        // SAFETY: fifth-bit line 3 + t is inside the chunk.
                        let qh = unsafe { load(c.add(lines + 64 * (3 + t))) };
                        // Bit J of each byte to bit 4: an i16 shift, then
                        // the mask drops what crossed a byte boundary.
                        let x = if J <= 4 {
                            _mm512_sll_epi16(qh, count(4 - J))
                        } else {
                            _mm512_srl_epi16(qh, count(J - 4))
                        };
                        _mm512_or_si512(q, _mm512_and_si512(x, _mm512_set1_epi8(0x10)))
                    } else {
                        q
                    }
                };
                if SPLIT && !Q5 {
                    for t0 in [0, 4] {
                        // SAFETY: the contract, forwarded.
                        let s = unsafe { sub_sums::<N, 4>(cols, quant, 8 * J, t0) };
                        for (acc, s) in isum.iter_mut().zip(s) {
                            *acc = wdot(*acc, s, scale);
                        }
                    }
                } else {
                    // SAFETY: the contract, forwarded.
                    let s = unsafe { sub_sums::<N, 8>(cols, quant, 8 * J, 0) };
                    scale_into(isum, s, scale);
                }
                fence(isum);
            }

            /// One Q4_K / Q5_K super-block (chunk at `c`) against the Q8_K
            /// blocks `cols`: per column the sixteen rows' f32 terms.
            ///
            /// # Safety
            /// The chunk and the 292-byte blocks are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q45_k<const Q5: bool, const N: usize>(
                c: *const u8,
                cols: [*const u8; N],
            ) -> [__m512; N] {
                let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
                // SAFETY: the three scale lines are inside the chunk.
                let (a, b, cc) = unsafe {
                    (
                        load(c.add(lines)),
                        load(c.add(lines + 64)),
                        load(c.add(lines + 128)),
                    )
                };
                let (m4, m6, top) = (
                    _mm512_set1_epi8(0x0f),
                    _mm512_set1_epi8(0x3f),
                    _mm512_set1_epi8(0x30),
                );
                // Lane bytes: scales 0..4, 4..8, mins 0..4, 4..8 of the row
                // (ggml's 12-byte form: sc0..3 | top bits, m0..3 | top
                // bits, low nibbles of sc4..7 | m4..7).
                let sc_lo = _mm512_and_si512(a, m6);
                let sc_hi = _mm512_or_si512(
                    _mm512_and_si512(cc, m4),
                    _mm512_and_si512(_mm512_srli_epi32::<2>(a), top),
                );
                let mn_lo = _mm512_and_si512(b, m6);
                let mn_hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32::<4>(cc), m4),
                    _mm512_and_si512(_mm512_srli_epi32::<2>(b), top),
                );
                let mut isum = [_mm512_setzero_si512(); N];
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 0, N>(c, &cols, byte(sc_lo, 0), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 1, N>(c, &cols, byte(sc_lo, 1), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 2, N>(c, &cols, byte(sc_lo, 2), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 3, N>(c, &cols, byte(sc_lo, 3), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 4, N>(c, &cols, byte(sc_hi, 0), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 5, N>(c, &cols, byte(sc_hi, 1), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 6, N>(c, &cols, byte(sc_hi, 2), &mut isum) };
                // SAFETY: the contract, forwarded.
                unsafe { q45_step::<Q5, 7, N>(c, &cols, byte(sc_hi, 3), &mut isum) };
                // summs = Σ_j m_j (bsums_2j + bsums_2j+1): the pair
                // (m_j, m_j) with bsums dword j.
                let mins = |j: usize| {
                    let m = byte(if j < 4 { mn_lo } else { mn_hi }, j % 4);
                    _mm512_or_si512(m, _mm512_slli_epi32::<16>(m))
                };
                // SAFETY: the contract, forwarded.
                let summs = unsafe { bsums_dot(&cols, mins) };
                // SAFETY: the 16 f16 `d` at 0 and `dmin` at 32 are inside
                // the chunk.
                unsafe { min_terms(c, &cols, isum, summs) }
            }

            /// Sub-block `J` (16 elements, four dwords) for every column:
            /// `isum += scale · Σ_t dot(quant(J, t), activation dword
            /// 4J + t)`, by `vpmulld` (`MUL`: Q6_K, whose sums of up to
            /// 16 · 63 · 128 need it) or by [`wdot`] with `(s_J, 0)` (Q2_K,
            /// Q3_K: sums of at most 16 · 7 · 128 = 14336, an i16).
            ///
            /// # Safety
            /// The Q8_K blocks `cols` are readable, and what `quant` reads.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn step16<const J: usize, const N: usize, const MUL: bool>(
                cols: &[*const u8; N],
                quant: &impl Fn(usize, usize) -> __m512i,
                scale: __m512i,
                isum: &mut [__m512i; N],
            ) {
                // SAFETY: the contract, forwarded.
                let s = unsafe { sub_sums::<N, 4>(cols, |t| quant(J, t), 4 * J, 0) };
                if MUL {
                    scale_into(isum, s, scale);
                } else {
                    for (acc, s) in isum.iter_mut().zip(s) {
                        *acc = wdot(*acc, s, scale);
                    }
                }
                fence(isum);
            }

            /// The scaled sums `Σ_j scale(j) Σ_{e in j} q(e) a(e)` of one
            /// super-block of 16-element sub-blocks (Q2_K, Q3_K, Q6_K, whose
            /// quants share ggml's Q6_K element order) per column, with
            /// `quant(j, t)` the unsigned quants of elements
            /// `16 j + 4 t .. 16 j + 4 t + 4` (lane `r`: row `r`) and
            /// `scale(j)` as [`step16`] takes it; straight code with constant
            /// sub-block indices.
            ///
            /// # Safety
            /// As [`step16`].
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn sums16<const N: usize, const MUL: bool>(
                cols: &[*const u8; N],
                quant: impl Fn(usize, usize) -> __m512i,
                scale: impl Fn(usize) -> __m512i,
            ) -> [__m512i; N] {
                let mut isum = [_mm512_setzero_si512(); N];
                // SAFETY: the contract, forwarded.
                unsafe {
                    step16::<0, N, MUL>(cols, &quant, scale(0), &mut isum);
                    step16::<1, N, MUL>(cols, &quant, scale(1), &mut isum);
                    step16::<2, N, MUL>(cols, &quant, scale(2), &mut isum);
                    step16::<3, N, MUL>(cols, &quant, scale(3), &mut isum);
                    step16::<4, N, MUL>(cols, &quant, scale(4), &mut isum);
                    step16::<5, N, MUL>(cols, &quant, scale(5), &mut isum);
                    step16::<6, N, MUL>(cols, &quant, scale(6), &mut isum);
                    step16::<7, N, MUL>(cols, &quant, scale(7), &mut isum);
                    step16::<8, N, MUL>(cols, &quant, scale(8), &mut isum);
                    step16::<9, N, MUL>(cols, &quant, scale(9), &mut isum);
                    step16::<10, N, MUL>(cols, &quant, scale(10), &mut isum);
                    step16::<11, N, MUL>(cols, &quant, scale(11), &mut isum);
                    step16::<12, N, MUL>(cols, &quant, scale(12), &mut isum);
                    step16::<13, N, MUL>(cols, &quant, scale(13), &mut isum);
                    step16::<14, N, MUL>(cols, &quant, scale(14), &mut isum);
                    step16::<15, N, MUL>(cols, &quant, scale(15), &mut isum);
                }
                isum
            }

            /// `Σ_i pairs(i) · bsums dword i` per column (the i16 pair of
            /// sub-blocks `2i, 2i + 1` with their bsums).
            ///
            /// # Safety
            /// The Q8_K blocks `cols` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn bsums_dot<const N: usize>(
                cols: &[*const u8; N],
                pairs: impl Fn(usize) -> __m512i,
            ) -> [__m512i; N] {
                let mut acc = [_mm512_setzero_si512(); N];
                for i in 0..8 {
                    let m = pairs(i);
                    for (acc, &p) in acc.iter_mut().zip(cols) {
                        // SAFETY: bsums dword i of the block.
                        let y = unsafe { bcast(p, BSUMS, i) };
                        *acc = wdot(*acc, m, y);
                    }
                }
                acc
            }

            /// `(d_w d_a) · f32(isum)` per column (the Q3_K / Q6_K / IQ4_XS
            /// epilogue), with the sixteen f16 `d` at `d`.
            ///
            /// # Safety
            /// The 32 bytes at `d` and the blocks' f32 `d` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn terms<const N: usize>(
                d: *const u8,
                cols: &[*const u8; N],
                isum: [__m512i; N],
            ) -> [__m512; N] {
                // SAFETY: the caller guarantees the 16 f16.
                let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(d.cast()) });
                std::array::from_fn(|i| {
                    // SAFETY: the block's f32 d is its first four bytes.
                    let dy = _mm512_set1_ps(unsafe { cols[i].cast::<f32>().read_unaligned() });
                    _mm512_mul_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[i]))
                })
            }

            /// `(d_w d_a) · f32(isum) - (dmin_w d_a) · f32(summs)` per
            /// column (the Q2_K / Q4_K / Q5_K epilogue), with the sixteen
            /// f16 `d` at `d` and `dmin` 32 bytes after them.
            ///
            /// # Safety
            /// The 64 bytes at `d` and the blocks' f32 `d` are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn min_terms<const N: usize>(
                d: *const u8,
                cols: &[*const u8; N],
                isum: [__m512i; N],
                summs: [__m512i; N],
            ) -> [__m512; N] {
                // SAFETY: the caller guarantees the 32 f16.
                let (d, dmin) = unsafe {
                    (
                        _mm512_cvtph_ps(_mm256_loadu_si256(d.cast())),
                        _mm512_cvtph_ps(_mm256_loadu_si256(d.add(32).cast())),
                    )
                };
                std::array::from_fn(|i| {
                    // SAFETY: the block's f32 d is its first four bytes.
                    let dy = _mm512_set1_ps(unsafe { cols[i].cast::<f32>().read_unaligned() });
                    let t = _mm512_mul_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[i]));
                    let m = _mm512_mul_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(summs[i]));
                    _mm512_sub_ps(t, m)
                })
            }

            /// One Q6_K super-block (chunk at `c`) against the Q8_K blocks
            /// `cols`: per column the sixteen rows' f32 terms. Sub-block
            /// `j = 8hh + 2k + e`, dword `t` (element `128hh + 32k + 4tq ..`,
            /// `tq = 4e + t`), in the re-coded form of `k.rs`: for `k < 2`
            /// the whole quant is bits 0..6 of line `16hh + 8k + tq`; for
            /// `k ≥ 2` its nibble is the low (`k = 2`) or high (`k = 3`)
            /// half of line `32 + 8hh + tq` and its top pair bits 6, 7 of
            /// line `16hh + 8(k - 2) + tq`.
            ///
            /// # Safety
            /// The chunk and the 292-byte blocks are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q6_k<const N: usize>(c: *const u8, cols: [*const u8; N]) -> [__m512; N] {
                let line = |w: usize| c.wrapping_add(64 * w);
                let (m4, m30, m3f) = (
                    _mm512_set1_epi8(0x0f),
                    _mm512_set1_epi8(0x30),
                    _mm512_set1_epi8(0x3f),
                );
                let quant = |j: usize, t: usize| {
                    let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
                    // SAFETY: line 16hh + 8(k % 2) + tq (< 32) is inside the chunk.
                    let pq = unsafe { load(line(16 * hh + 8 * (k % 2) + tq)) };
                    if k < 2 {
                        return _mm512_and_si512(pq, m3f);
                    }
                    // SAFETY: line 32 + 8hh + tq (< 48) is inside the chunk.
                    let r = unsafe { load(line(32 + 8 * hh + tq)) };
                    let lo = if k == 2 {
                        r
                    } else {
                        _mm512_srli_epi16::<4>(r)
                    };
                    // Bits 6, 7 to bits 4, 5; the 16-bit shift's carry from
                    // the next byte lands in bits 6, 7 and is masked off.
                    let hi = _mm512_srli_epi16::<2>(pq);
                    _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_and_si512(hi, m30))
                };
                // SAFETY: scale line 48 + j / 4 is inside the chunk.
                let scale = |j: usize| sbyte(unsafe { load(line(48 + j / 4)) }, j % 4);
                // SAFETY: the contract, forwarded.
                let isum = unsafe { sums16::<N, true>(&cols, quant, scale) };
                // The `-32` offset: `32 · Σ_j s_j bsums_j`, from the scale
                // pairs (s_2i, s_2i+1) and bsums dword i.
                // SAFETY: scale line 48 + i / 2 is inside the chunk.
                let pairs = |i: usize| spair(unsafe { load(line(48 + i / 2)) }, 2 * (i % 2));
                // SAFETY: the contract, forwarded.
                let corr = unsafe { bsums_dot(&cols, pairs) };
                let isum: [__m512i; N] = std::array::from_fn(|i| {
                    _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<5>(corr[i]))
                });
                // SAFETY: the 16 f16 `d` are inside the chunk.
                unsafe { terms(c.add(Q6_K_D), &cols, isum) }
            }

            /// One Q2_K super-block (chunk at `c`) against the Q8_K blocks
            /// `cols`: per column the sixteen rows' f32 terms. Sub-block
            /// `j = 8hh + 2k + e`, dword `t`: bits `2k` of `qs` line
            /// `4 + 8hh + 4e + t`; scale line `w`: lane bytes are the
            /// scale / min bytes `4w .. 4w + 4` of the row (scale in the
            /// low nibble, min in the high one).
            ///
            /// # Safety
            /// The chunk and the 292-byte blocks are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q2_k<const N: usize>(c: *const u8, cols: [*const u8; N]) -> [__m512; N] {
                let line = |w: usize| c.wrapping_add(64 * w);
                let m3 = _mm512_set1_epi8(3);
                let quant = |j: usize, t: usize| {
                    // SAFETY: qs line 4 + 8 (j / 8) + 4 (j % 2) + t < 20 is
                    // inside the chunk.
                    let x = unsafe { load(line(4 + 8 * (j / 8) + 4 * (j % 2) + t)) };
                    _mm512_and_si512(_mm512_srl_epi16(x, count(j / 2 % 4 * 2)), m3)
                };
                let scale = |j: usize| {
                    // SAFETY: scale line j / 4 (< 4) is inside the chunk.
                    let v = unsafe { load(line(j / 4)) };
                    _mm512_and_si512(byte(v, j % 4), _mm512_set1_epi32(15))
                };
                // SAFETY: the contract, forwarded.
                let isum = unsafe { sums16::<N, false>(&cols, quant, scale) };
                // summs = Σ_j m_j bsums_j: the pair (m_2i, m_2i+1) (the
                // high nibbles of scale bytes 2i, 2i + 1) with bsums dword i.
                let mins = |i: usize| {
                    // SAFETY: scale line i / 2 (< 4) is inside the chunk.
                    let v = unsafe { load(line(i / 2)) };
                    _mm512_srli_epi16::<4>(upair(v, 2 * (i % 2)))
                };
                // SAFETY: the contract, forwarded.
                let summs = unsafe { bsums_dot(&cols, mins) };
                // SAFETY: the 16 f16 `d` and `dmin` are inside the chunk.
                unsafe { min_terms(c.add(Q2_K_D), &cols, isum, summs) }
            }

            /// One Q3_K super-block (chunk at `c`) against the Q8_K blocks
            /// `cols`: per column the sixteen rows' f32 terms, from the
            /// unsigned `q' = q2 | hbit << 2 ≤ 7` (the real quant is
            /// `q' - 4`, taken off once per super-block as
            /// `4 · Σ_j s_j bsums_j`). The scales (`a`, `b`, `c` = bytes
            /// 0..4, 4..8, 8..12 of the 12-byte packing, lines 24..27) are
            /// decoded for the sixteen rows as at AVX2 (`x86_avx2_k23.rs`).
            ///
            /// # Safety
            /// The chunk and the 292-byte blocks are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q3_k<const N: usize>(c: *const u8, cols: [*const u8; N]) -> [__m512; N] {
                let line = |w: usize| c.wrapping_add(64 * w);
                let (m3, m4, m15, m48) = (
                    _mm512_set1_epi8(3),
                    _mm512_set1_epi8(4),
                    _mm512_set1_epi8(15),
                    _mm512_set1_epi8(48),
                );
                // SAFETY: the scale lines 24, 25, 26 are inside the chunk.
                let (a, b, cc) = unsafe { (load(line(24)), load(line(25)), load(line(26))) };
                let lo = |x: __m512i, shift: bool| {
                    _mm512_and_si512(if shift { _mm512_srli_epi16::<4>(x) } else { x }, m15)
                };
                let top = |x: __m512i| _mm512_and_si512(x, m48);
                let m32 = _mm512_set1_epi8(32);
                // Lane bytes: the signed scales 4w .. 4w + 4 of the lane's row.
                let sc = [
                    _mm512_or_si512(lo(a, false), top(_mm512_slli_epi16::<4>(cc))),
                    _mm512_or_si512(lo(b, false), top(_mm512_slli_epi16::<2>(cc))),
                    _mm512_or_si512(lo(a, true), top(cc)),
                    _mm512_or_si512(lo(b, true), top(_mm512_srli_epi16::<2>(cc))),
                ]
                .map(|s| _mm512_sub_epi8(s, m32));
                // Sub-block j = 8hh + 2k + e, dword t: qs line 8 + 8hh + tq,
                // bits 2k, and bit 4hh + k of hmask line tq (tq = 4e + t).
                let quant = |j: usize, t: usize| {
                    let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
                    // SAFETY: qs line 8 + 8hh + tq (< 24) and hmask line tq
                    // (< 8) are inside the chunk.
                    let (x, hm) = unsafe { (load(line(8 + 8 * hh + tq)), load(line(tq))) };
                    let q2 = _mm512_and_si512(_mm512_srl_epi16(x, count(2 * k)), m3);
                    // Bit b = 4hh + k of each byte to bit 2 by one i16 shift;
                    // what crosses the byte boundary is masked off.
                    let b = 4 * hh + k;
                    let hb = if b >= 2 {
                        _mm512_srl_epi16(hm, count(b - 2))
                    } else {
                        _mm512_sll_epi16(hm, count(2 - b))
                    };
                    _mm512_or_si512(q2, _mm512_and_si512(hb, m4))
                };
                // (s_j, 0) per lane: the sign-extended scale's low i16.
                let scale = |j: usize| {
                    _mm512_and_si512(sbyte(sc[j / 4], j % 4), _mm512_set1_epi32(0xffff))
                };
                // SAFETY: the contract, forwarded.
                let isum = unsafe { sums16::<N, false>(&cols, quant, scale) };
                let pairs = |i: usize| spair(sc[i / 2], 2 * (i % 2));
                // SAFETY: the contract, forwarded.
                let corr = unsafe { bsums_dot(&cols, pairs) };
                let isum: [__m512i; N] = std::array::from_fn(|i| {
                    _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<2>(corr[i]))
                });
                // SAFETY: the 16 f16 `d` are inside the chunk.
                unsafe { terms(c.add(Q3_K_D), &cols, isum) }
            }

            /// One IQ4_XS super-block (chunk at `c`) against the Q8_K
            /// blocks `cols`: per column the sixteen rows' f32 terms. The
            /// 4-bit indices of quant line `1 + 4j + t` (low nibbles:
            /// activation dword `8j + t`, high: `8j + 4 + t`) become the
            /// table values biased by 128 (u8 1 ..= 241) by one `vpshufb`;
            /// a sub-block's sum `Σ (v + 128) a` (at most 32 · 241 · 128 in
            /// magnitude) is scaled by `vpmulld` with `s_j` (−32 ..= 31),
            /// and the bias is taken off once per super-block as
            /// `128 · Σ_j s_j (bsums_2j + bsums_2j+1)`.
            ///
            /// # Safety
            /// The chunk and the 292-byte blocks are readable.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn iq4_xs<const N: usize>(c: *const u8, cols: [*const u8; N]) -> [__m512; N] {
                let line = |w: usize| c.wrapping_add(IQ4_XS_LINES + 64 * w);
                let mut biased = [0u8; 16];
                for (b, &v) in biased.iter_mut().zip(&crate::quant::IQ4_NL_VALUES) {
                    *b = (v as u8) ^ 0x80;
                }
                // SAFETY: 16 readable bytes.
                let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(biased.as_ptr().cast()) });
                let m4 = _mm512_set1_epi8(0x0f);
                // SAFETY: line 0 (scales_l) and the 16 u16 scales_h are
                // inside the chunk.
                let (lo, hi) = unsafe {
                    (
                        load(line(0)),
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(c.add(32).cast())),
                    )
                };
                let scale = |j: usize| {
                    let s = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srl_epi32(lo, count(4 * j)), _mm512_set1_epi32(15)),
                        _mm512_slli_epi32::<4>(_mm512_and_si512(
                            _mm512_srl_epi32(hi, count(2 * j)),
                            _mm512_set1_epi32(3),
                        )),
                    );
                    _mm512_sub_epi32(s, _mm512_set1_epi32(32))
                };
                let mut isum = [_mm512_setzero_si512(); N];
                let mut corr = [_mm512_setzero_si512(); N];
                for j in 0..8 {
                    let quant = |t: usize| {
                        // SAFETY: quant line 1 + 4j + t % 4 (< 33) is inside the chunk.
                        let x = unsafe { load(line(1 + 4 * j + t % 4)) };
                        let x = if t < 4 { x } else { _mm512_srli_epi16::<4>(x) };
                        _mm512_shuffle_epi8(table, _mm512_and_si512(x, m4))
                    };
                    // SAFETY: the contract, forwarded.
                    let s = unsafe { sub_sums::<N, 8>(&cols, quant, 8 * j, 0) };
                    let sj = scale(j);
                    scale_into(&mut isum, s, sj);
                    // The bias term's pair (s_j, s_j) with bsums dword j.
                    let pair = _mm512_or_si512(
                        _mm512_and_si512(sj, _mm512_set1_epi32(0xffff)),
                        _mm512_slli_epi32::<16>(sj),
                    );
                    for (acc, &p) in corr.iter_mut().zip(&cols) {
                        // SAFETY: bsums dword j of the block.
                        let y = unsafe { bcast(p, BSUMS, j) };
                        *acc = wdot(*acc, pair, y);
                    }
                    fence(&mut isum);
                }
                let isum: [__m512i; N] = std::array::from_fn(|i| {
                    _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<7>(corr[i]))
                });
                // SAFETY: the 16 f16 `d` are inside the chunk.
                unsafe { terms(c, &cols, isum) }
            }

            /// Columns `0 .. N` (`N ≤ PASS`) of one K-quant group of type
            /// `T`; the first pass (`first`) prefetches the group ahead.
            ///
            /// # Safety
            /// As [`TileFn`] for `N` columns (Q8_K rows of `t.nb` blocks
            /// made by the Q8_K quantizer); the CPU supports the level.
            #[target_feature(enable = $features)]
            unsafe fn pass<const T: u8, const N: usize>(t: Tile, first: bool) {
                let cs = chunk(T);
                let mut acc = [_mm512_setzero_ps(); N];
                for b in 0..t.nb {
                    if first {
                        let start = t.w.wrapping_add((b + PF) * cs);
                        for o in (0..cs).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(o).cast());
                        }
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
                            Q2_K => q2_k::<N>(c, cols),
                            Q3_K => q3_k::<N>(c, cols),
                            Q4_K => q45_k::<false, N>(c, cols),
                            Q5_K => q45_k::<true, N>(c, cols),
                            IQ4_XS => iq4_xs::<N>(c, cols),
                            _ => q6_k::<N>(c, cols),
                        }
                    };
                    for (acc, t) in acc.iter_mut().zip(terms) {
                        *acc = _mm512_add_ps(*acc, t);
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    // SAFETY: the 16 rows of column i are writable (contract).
                    unsafe { _mm512_storeu_ps(t.out.add(i * t.out_stride).cast(), *acc) };
                }
            }

            /// `NR` columns of one 16-row group (the [`TileFn`] contract),
            /// in passes of at most [`PASS`] columns.
            ///
            /// # Safety
            /// As [`TileFn`]; the CPU supports the level.
            #[target_feature(enable = $features)]
            unsafe fn tile<const T: u8, const NR: usize>(t: Tile) {
                type Pass = unsafe fn(Tile, bool);
                let mut c = 0;
                while c < NR {
                    let n = (NR - c).min(PASS);
                    let f: Pass = match n {
                        1 => pass::<T, 1>,
                        2 => pass::<T, 2>,
                        3 => pass::<T, 3>,
                        4 => pass::<T, 4>,
                        5 => pass::<T, 5>,
                        6 => pass::<T, 6>,
                        7 => pass::<T, 7>,
                        _ => pass::<T, PASS>,
                    };
                    // SAFETY: columns c .. c + n ≤ NR of the contract.
                    unsafe { f(super::super::x86_avx2::skip_columns(t, c), c == 0) };
                    c += n;
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
    true
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

/// The K-quant kernels of `isa` for `dtype` (Q4_K, Q5_K, Q6_K at the
/// AVX-512 levels; the caller checked [`super::has_kernels`]).
pub(super) fn kernels(isa: Isa, dtype: DType) -> Option<Kernels> {
    match isa {
        Isa::Vnni => vnni::kernels(dtype),
        // IQ4_XS's biased values (≤ 241) would saturate `vpmaddubsw`'s
        // pair sums: the AVX2 tiles (signed values, `vpsignb`) run it.
        Isa::Avx512 if dtype != DType::IQ4_XS => avx512::kernels(dtype),
        _ => None,
    }
}

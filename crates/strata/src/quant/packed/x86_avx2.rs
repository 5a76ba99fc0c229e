//! AVX2 and AVX-VNNI kernels over the packed layout: the same 16-row groups
//! as the AVX-512 kernels ([`super::x86`]), taken as two halves of eight
//! rows, one row per 32-bit lane of a ymm register. One body (`level!`) is
//! compiled per level; they differ only in the integer sums (below).
//!
//! In a group, the bytes of row `r` inside each 64-byte line sit at
//! `4 r .. 4 r + 4`, so the first 32 bytes of every line belong to rows 0–7
//! and the last 32 to rows 8–15: a 256-bit load at `line + 32 h` gives half
//! `h` in the lane order the 512-bit kernels see. With sixteen vector
//! registers (against 32 at AVX-512) the loop order differs: per half, per
//! block, the quant registers are decoded one dword group `j` at a time and
//! immediately multiplied into every column's integer sum, so that only the
//! sums and the f32 accumulators of the columns stay in registers (4
//! columns per pass; wider tiles are several passes over the same group,
//! which is in L1 by then).
//!
//! Integer sums are exact, with fewer widenings than one `vpmaddwd` per
//! product pair:
//! - 4-bit quants (u8 ≤ 15) times activations (i8, |a| ≤ 127 from the
//!   quantizer, ≤ 128 for any i8): a `vpmaddubsw` pair sum is at most
//!   2 · 15 · 128 = 3840, so all eight dword groups add up in i16 (≤ 30720)
//!   before one `vpmaddwd` widens them;
//! - 5-bit quants (≤ 31): pair sums ≤ 7936, four groups (≤ 31744) per
//!   widening;
//! - Q8_0 (i8 × i8): the sign trick (`|w|` unsigned times `sign(a, w)`),
//!   pair sums ≤ 2 · 128 · 127 = 32512 for activations in −127..=127 (the
//!   quantizer's range: `|x| · 127 / amax` rounds to at most 127), widened
//!   per group; the weights are un-biased (`^ 0x80`) so no offset term is
//!   needed.
//! - IQ4_NL: Q4_0's chunks, each nibble register turned into the rows'
//!   signed table values ([`crate::quant::IQ4_NL_VALUES`], −127 ..= 113) by
//!   one `vpshufb`, then Q8_0's sign trick and widening (`|v| ≤ 127`, the
//!   same bound); its activations' sum term is 0.
//!
//! At AVX-VNNI (256-bit `vpdpbusd`, no saturation) every type takes one
//! `vpdpbusd` per dword group and column on an unsigned operand, after the
//! activation's sum term `-OFF · Σa`: the 4/5-bit quants as they are, Q8_0's
//! stored bytes (biased by 128), IQ4_NL's table values plus 128. Per column
//! that is 8 instructions per block against AVX2's 8 `vpmaddubsw`, 8 adds
//! and a widening (4-bit), or 8 × (sign, `vpmaddubsw`, `vpmaddwd`, add) for
//! Q8_0 / IQ4_NL. The sums are the same integers, so the levels give the
//! same bits; the tests also run the AVX-VNNI algorithm on any AVX2 CPU,
//! with an exact AVX2 stand-in for `vpdpbusd` (`dpbusd_avx2`).
//!
//! Per lane (row) and column: `acc = fma(f32(s), d_w · d_a, acc)` in block
//! order, as the AVX-512 kernels; the Q4_1 / Q5_1 minimum terms are summed
//! apart (`acc_m = fma(m_w, s_a, acc_m)`) and added at the end, as ggml's
//! dot products do (the AVX-512 kernels interleave them into `acc`, so for
//! these two types the levels differ in the last bits; both stay within the
//! bound of the scalar reference the tests check).
//!
//! Every kernel is an `unsafe fn` with `#[target_feature]`, reached only
//! through the levels' tables ([`avx2_table`], [`avx_vnni_table`]; entries
//! of [`crate::isa::Table`], which is only built for a level the CPU runs).

use super::tags::{
    block_quantizer, chunk_size, has_min, is_k, is_q5, kernel_table, quantize_blocks, tiles,
    IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
};
use super::{Kernels, Table, Tile, TileFn};
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Columns per pass over a half group.
pub(super) const PASS: usize = 4;

/// How far ahead (bytes) the first half of a legacy group prefetches.
pub(super) const PF_BYTES: usize = 2048;

/// Asks for the cache lines `dist` bytes past chunk `b` (of `cs` bytes) of
/// the weights at `w`: one prefetch per 64 bytes the chunk covers. The first
/// half of a group streams its chunks from memory (the second finds them in
/// L1/L2), and a GEMV has too little work per byte for the hardware
/// prefetcher alone to keep the loads fed (measured: 1.4× on a Q4_K / Q6_K
/// GEMV from DRAM). A prefetch never faults, so addresses past the tile's
/// end are harmless; `wrapping_add` keeps their computation defined.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_ahead(w: *const u8, b: usize, cs: usize, dist: usize) {
    let start = w.wrapping_add(b * cs + dist);
    let mut o = 0;
    while o < cs {
        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(o).cast());
        o += 64;
    }
}

/// The 32 bits of `m` spread to the 32 bytes of a register: byte `i` is
/// 16 where bit `i` is set, else 0 (the fifth bit of a 5-bit quant).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fifth_bits(m: u32) -> __m256i {
    let v = _mm256_set1_epi32(m as i32);
    // Byte i takes byte i / 8 of m (in-lane shuffle: the broadcast has all
    // four bytes in each 128-bit lane).
    let idx = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
    );
    let v = _mm256_shuffle_epi8(v, idx);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(16))
}

/// Dword group `j` (0..8) of half `h` of the chunk at `c`: lane `r` holds
/// quants `4j .. 4j + 4` of row `8h + r` (u8; for Q8_0 the signed quants,
/// for IQ4_NL the signed table values its nibbles index). With `U` (the
/// unsigned operand of `vpdpbusd`), Q8_0's stored bytes (its quants biased
/// by 128) and IQ4_NL's table values plus 128; the bias is `act_offset(T)`,
/// which the activation's sum term removes. The 4/5-bit quants are the
/// same either way.
///
/// # Safety
/// `c` points at a whole chunk of type `T`; `qh`, `qs` are its offsets.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn group<const T: u8, const U: bool>(
    c: *const u8,
    qh: usize,
    qs: usize,
    h: usize,
    j: usize,
) -> __m256i {
    if T == Q8_0 {
        // SAFETY: 32 bytes of line j, half h, inside the chunk.
        let x = unsafe { _mm256_loadu_si256(c.add(qs + 64 * j + 32 * h).cast()) };
        return if U {
            x
        } else {
            _mm256_xor_si256(x, _mm256_set1_epi8(-128))
        };
    }
    // SAFETY: 32 bytes of nibble line j % 4, half h, inside the chunk.
    let x = unsafe { _mm256_loadu_si256(c.add(qs + 64 * (j % 4) + 32 * h).cast()) };
    let x = if j < 4 { x } else { _mm256_srli_epi16(x, 4) };
    let q = _mm256_and_si256(x, _mm256_set1_epi8(0x0f));
    if T == IQ4_NL {
        let values: *const u8 = if U {
            IQ4_NL_BIASED.as_ptr()
        } else {
            crate::quant::IQ4_NL_VALUES.as_ptr().cast()
        };
        // SAFETY: both tables are 16 readable bytes.
        let table = unsafe { _mm_loadu_si128(values.cast()) };
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), q);
    }
    if is_q5(T) {
        // SAFETY: mask j (8 bytes) is inside the chunk; half h is its u32 h.
        let m = unsafe { c.add(qh + 8 * j + 4 * h).cast::<u32>().read_unaligned() };
        _mm256_or_si256(q, fifth_bits(m))
    } else {
        q
    }
}

/// `acc + Σ_t u[4r+t] · s[4r+t]` per 32-bit lane `r` (u8 × i8, exact): the
/// value `vpdpbusd` computes, from AVX2 instructions (the bytes widened to
/// i16, even and odd apart, then two `vpmaddwd`). It runs the AVX-VNNI
/// kernels' algorithm on any AVX2 CPU, so that the tests check it on hosts
/// without AVX-VNNI; only the instruction itself is not exercised there.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dpbusd_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00ff));
    let u_odd = _mm256_srli_epi16(u, 8);
    let s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
    let s_odd = _mm256_srai_epi16(s, 8);
    let even = _mm256_madd_epi16(u_even, s_even);
    let odd = _mm256_madd_epi16(u_odd, s_odd);
    _mm256_add_epi32(acc, _mm256_add_epi32(even, odd))
}

/// [`crate::quant::IQ4_NL_VALUES`] plus 128, as u8 (1 ..= 241): the
/// unsigned operand of `vpdpbusd`; the `-128 · Σa` sum term of IQ4_NL's
/// prepared activations removes the bias.
pub(super) const IQ4_NL_BIASED: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (crate::quant::IQ4_NL_VALUES[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// Defines a level's module: `half` and `tile` (the [`TileFn`]s, in
/// passes of at most [`PASS`] columns) compiled for `$features`, and its
/// kernel table. `$vnni` picks the integer sums: `false` for AVX2's
/// (`vpmaddubsw` sums in i16, the sign trick for Q8_0 / IQ4_NL), `true`
/// for one `$dot` (`vpdpbusd`) per dword group and column on unsigned
/// operands ([`group`] with `U`) after the sum term. Both sums are exact and the
/// f32 steps are the same, so the levels give the same bits.
macro_rules! level {
    ($level:ident, $features:literal, $vnni:literal, $dot:path) => {
        pub(super) mod $level {
            use super::*;

            /// Columns `0 .. N` (`N ≤ PASS`) of half `h` of one group: the
            /// [`TileFn`] contract for the eight rows `8h .. 8h + 8`; `V`
            /// picks the integer sums (the macro's docs).
            ///
            /// # Safety
            /// As [`TileFn`]; the CPU supports the module's features.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn half<const T: u8, const N: usize, const V: bool>(t: Tile, h: usize) {
                if is_k(T) {
                    // SAFETY: the contract, forwarded (a K-quant group).
                    return unsafe { super::super::x86_avx2_k::half::<T, N>(t, h) };
                }
                let mut acc = [_mm256_setzero_ps(); N];
                let mut accm = [_mm256_setzero_ps(); N];
                // SAFETY: the contract, forwarded (all nb blocks).
                unsafe {
                    span::<T, N, V, false>(t, h, (0, t.nb), std::ptr::null(), &mut acc, &mut accm)
                };
                if has_min(T) {
                    for (acc, accm) in acc.iter_mut().zip(accm) {
                        *acc = _mm256_add_ps(*acc, accm);
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    // SAFETY: rows 8h .. 8h + 8 of column i are writable (contract).
                    unsafe { _mm256_storeu_ps(t.out(i).add(32 * h).cast(), *acc) };
                }
            }

            /// Blocks `b0 .. b1` of columns `0 .. N` of half `h` of one
            /// legacy-type group, in block order: each block's term added
            /// to `acc` (`fma(f32(s), d_w · d_a, acc)`) and, for the types
            /// with a minimum, `fma(m_w, s_a, accm)` to `accm`. With `DEC`
            /// the quant registers come decoded from `dec` (dword group `j`
            /// of block `b` at `dec[8 (b − b0) + j]`, as [`group`] gives
            /// them), else from the chunks.
            ///
            /// # Safety
            /// As [`TileFn`] for blocks `b0 .. b1 ≤ nb`; with `DEC`, `dec`
            /// holds those blocks' groups; the CPU supports the features.
            #[target_feature(enable = $features)]
            #[inline]
            pub(in super::super) unsafe fn span<
                const T: u8,
                const N: usize,
                const V: bool,
                const DEC: bool,
            >(
                t: Tile,
                h: usize,
                (b0, b1): (usize, usize),
                dec: *const __m256i,
                acc: &mut [__m256; N],
                accm: &mut [__m256; N],
            ) {
                let ones = _mm256_set1_epi16(1);
                let split_min = has_min(T) && N >= 3;
                // Dword group j of block b: decoded here, or from `dec`.
                // SAFETY (both): chunk b < nb is in bounds (contract); with
                // DEC its groups are in `dec` (contract).
                let quant = |c: *const u8, qh: usize, qs: usize, b: usize, j: usize| unsafe {
                    if DEC {
                        _mm256_load_si256(dec.add(8 * (b - b0) + j))
                    } else {
                        group::<T, V>(c, qh, qs, h, j)
                    }
                };
                // The sign trick's eight dword groups per block: for three
                // or more columns as a count the compiler cannot see, so it
                // keeps the loop. Unrolled, it scheduled several groups'
                // registers at once and spilled (49 stack accesses in the
                // 4-column Q8_0 half): the loop measured 1.3x faster there
                // (Q8_0, 1536 x 576 x 512, one thread).
                let groups = if N >= 3 {
                    std::hint::black_box(8usize)
                } else {
                    8
                };
                for b in b0..b1 {
                    if h == 0 && !DEC {
                        prefetch_ahead(t.w, b, chunk_size(T), PF_BYTES);
                    }
                    // SAFETY: chunk b < nb (contract).
                    let (c, (d, qh, qs)) = unsafe { t.chunk::<T>(b) };
                    // SAFETY: the 8 f16 scales of half h are inside the chunk.
                    let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(c.add(d + 16 * h).cast()) });
                    // Block b of column i: its quant dword j, scale and sum term.
                    // SAFETY (word): block b of column i < N is in bounds
                    // (contract) and holds ACT_BLOCK bytes: quants, scale, sum term.
                    let word = |i: usize, j: usize| unsafe {
                        t.act(i, b).add(4 * j).cast::<i32>().read_unaligned()
                    };
                    let mut s = [_mm256_setzero_si256(); N];
                    if V {
                        // The sum term first (0 for the types with a minimum,
                        // whose word 9 is Q8_1's f32 `s`).
                        if !has_min(T) {
                            for (i, s) in s.iter_mut().enumerate() {
                                *s = _mm256_set1_epi32(word(i, 9));
                            }
                        }
                        // Two chains per column when few columns share the
                        // block (the latency of the dependent `vpdpbusd`s).
                        let mut s1 = [_mm256_setzero_si256(); N];
                        for j in 0..8 {
                            let q = quant(c, qh, qs, b, j);
                            for (i, (s, s1)) in s.iter_mut().zip(s1.iter_mut()).enumerate() {
                                let y = _mm256_set1_epi32(word(i, j));
                                if N <= 2 && j % 2 == 1 {
                                    *s1 = $dot(*s1, q, y);
                                } else {
                                    *s = $dot(*s, q, y);
                                }
                            }
                        }
                        if N <= 2 {
                            for (s, s1) in s.iter_mut().zip(s1) {
                                *s = _mm256_add_epi32(*s, s1);
                            }
                        }
                    } else if T == Q8_0 || T == IQ4_NL {
                        for j in 0..groups {
                            let q = quant(c, qh, qs, b, j);
                            let qa = _mm256_abs_epi8(q);
                            for (i, s) in s.iter_mut().enumerate() {
                                let y = _mm256_sign_epi8(_mm256_set1_epi32(word(i, j)), q);
                                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, y), ones);
                                *s = _mm256_add_epi32(*s, p);
                            }
                        }
                    } else {
                        // Sums of pair sums in i16: all eight groups for 4-bit
                        // quants, four at a time for 5-bit ones (module docs).
                        let span = if is_q5(T) { 4 } else { 8 };
                        for j0 in (0..8).step_by(span) {
                            let mut s16 = [_mm256_setzero_si256(); N];
                            for j in j0..j0 + span {
                                let q = quant(c, qh, qs, b, j);
                                for (i, s16) in s16.iter_mut().enumerate() {
                                    let p = _mm256_maddubs_epi16(q, _mm256_set1_epi32(word(i, j)));
                                    *s16 = _mm256_add_epi16(*s16, p);
                                }
                            }
                            for (s, s16) in s.iter_mut().zip(s16) {
                                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(s16, ones));
                            }
                        }
                        if !has_min(T) {
                            for (i, s) in s.iter_mut().enumerate() {
                                *s = _mm256_add_epi32(*s, _mm256_set1_epi32(word(i, 9)));
                            }
                        }
                    }
                    let mw = if has_min(T) && !split_min {
                        // SAFETY: the 8 f16 minimums of half h follow the scales.
                        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(c.add(32 + 16 * h).cast()) })
                    } else {
                        _mm256_setzero_ps()
                    };
                    for (i, ((acc, accm), s)) in
                        acc.iter_mut().zip(accm.iter_mut()).zip(s).enumerate()
                    {
                        let da = _mm256_set1_ps(f32::from_bits(word(i, 8) as u32));
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, da), *acc);
                        if has_min(T) && !split_min {
                            let sa = _mm256_set1_ps(f32::from_bits(word(i, 9) as u32));
                            *accm = _mm256_fmadd_ps(mw, sa, *accm);
                        }
                    }
                }
                if split_min {
                    // The minimum terms `acc_m = fma(m_w, s_a, acc_m)` in
                    // block order, in a loop of their own for three or more
                    // columns: kept beside the sums, their N registers made
                    // the 4-column pass spill (10 stack moves per block;
                    // 4-6 % of a 16-column Q4_1 product). The same FMAs in
                    // the same order, so the same bits.
                    for b in b0..b1 {
                        // SAFETY: chunk b < nb (contract); the 8 f16
                        // minimums of half h follow the scales; block b of
                        // column i < N holds its Q8_1 sum `s` as word 9.
                        unsafe {
                            let (c, _) = t.chunk::<T>(b);
                            let mw = _mm256_cvtph_ps(_mm_loadu_si128(c.add(32 + 16 * h).cast()));
                            for (i, accm) in accm.iter_mut().enumerate() {
                                let w9 = t.act(i, b).add(36).cast::<i32>().read_unaligned();
                                let sa = _mm256_set1_ps(f32::from_bits(w9 as u32));
                                *accm = _mm256_fmadd_ps(mw, sa, *accm);
                            }
                        }
                    }
                }
            }

            /// `NR` columns of one 16-row group (the [`TileFn`] contract):
            /// both halves, in passes of at most [`PASS`] columns (eight for
            /// AVX2's sign trick), with the integer sums `V` picks.
            ///
            /// # Safety
            /// As [`TileFn`]; the CPU supports the module's features.
            #[target_feature(enable = $features)]
            unsafe fn tile_v<const T: u8, const NR: usize, const V: bool>(t: Tile) {
                type Half = unsafe fn(Tile, usize);
                for h in 0..2 {
                    let mut c = 0;
                    while c < NR {
                        // The sign trick (Q8_0, IQ4_NL) shares one `vpabsb`
                        // per dword group among the pass's columns: eight at
                        // a time measured faster than four (one thread, ×
                        // 512: Q8_0 1.5–3 % at 1536 × 576, 576 × 576 and
                        // 576 × 1536; IQ4_NL 3–4 % at 1024², 1 % at
                        // 1536 × 576); the other types keep passes of four.
                        let eight = (T == Q8_0 || T == IQ4_NL) && !V && NR - c >= 8;
                        let n = if eight { 8 } else { (NR - c).min(PASS) };
                        let f: Half = match n {
                            1 => half::<T, 1, V>,
                            2 => half::<T, 2, V>,
                            3 => half::<T, 3, V>,
                            8 => half::<T, 8, V>,
                            _ => half::<T, PASS, V>,
                        };
                        // SAFETY: columns c .. c + n ≤ NR of the contract, forwarded.
                        unsafe { f(skip_columns(t, c), h) };
                        c += n;
                    }
                }
            }

            /// `NR` columns of one 16-row group (the [`TileFn`] contract)
            /// with this level's integer sums.
            ///
            /// # Safety
            /// As [`TileFn`]; the CPU supports the module's features.
            #[target_feature(enable = $features)]
            pub(in super::super) unsafe fn tile<const T: u8, const NR: usize>(t: Tile) {
                // SAFETY: the contract, forwarded.
                unsafe { tile_v::<T, NR, $vnni>(t) }
            }

            kernel_table!(IQ4_NL);
        }
    };
}

level!(avx2, "avx2,fma,f16c", false, dpbusd_avx2);
level!(
    avxvnni,
    "avx2,fma,f16c,avxvnni",
    true,
    _mm256_dpbusd_avx_epi32
);
// The AVX-VNNI kernels' algorithm with [`dpbusd_avx2`] standing in for
// `vpdpbusd`, for the tests on CPUs without AVX-VNNI.
#[cfg(test)]
level!(vnni_emulated, "avx2,fma,f16c", true, dpbusd_avx2);

pub(super) use avx2::tile;

/// The AVX2 level's own packed kernels: its tiles for the legacy types and
/// IQ4_NL, `x86_avx2_k`'s for the K-quants, with `x86_avx2_kw`'s
/// many-column K-quant kernels.
pub(super) fn avx2_table() -> Table {
    Table::from_fn(|t| {
        avx2::kernels(t)
            .or_else(|| super::x86_avx2_k::kernels(t))
            .map(|k| Kernels {
                wide: super::x86_avx2_kw::wide_for(t).or_else(|| super::x86_avx2_lw::wide_for(t)),
                ..k
            })
    })
}

/// The AVX-VNNI level's own packed kernels: its `vpdpbusd` tiles for the
/// legacy types and IQ4_NL; the K-quants run AVX2's.
pub(super) fn avx_vnni_table() -> Table {
    Table::from_fn(avxvnni::kernels)
}

/// `t` without its first `c` columns.
///
/// # Safety
/// Columns `0 .. c` must lie inside the allocations of `t.a` and `t.out`.
#[inline(always)]
pub(super) unsafe fn skip_columns(t: Tile, c: usize) -> Tile {
    Tile {
        // SAFETY: the caller keeps both offsets inside their allocations.
        a: unsafe { t.a.add(c * t.a_stride) },
        // SAFETY: as above.
        out: unsafe { t.out.add(c * t.out_stride) },
        ..t
    }
}

block_quantizer!(
    "avx2,fma,f16c",
    crate::quant::simd::quantize_block_q8_avx2,
    f16_round
);

/// `x` rounded to f16 (nearest even, as the scalar `half` conversion) and back.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_round(x: f32) -> f32 {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}

#[cfg(test)]
mod tests {
    use super::super::{kernels_for, pack, ACT_BLOCK, ROWS};
    use super::*;
    use crate::conformance::Rng;
    use crate::isa::Isa;

    /// `rows` rows of `nb` blocks of `dtype` with random quant bytes (every
    /// value, Q8_0's −128 included) and finite f16 scales / minimums.
    fn weights(rng: &mut Rng, dtype: DType, rows: usize, nb: usize) -> Vec<u8> {
        let mut w = rng.bytes(rows * dtype.row_size(32 * nb));
        let heads = if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
            2
        } else {
            1
        };
        for blk in w.chunks_exact_mut(dtype.type_size()) {
            for h in 0..heads {
                let v = half::f16::from_f32(rng.uniform(-0.05, 0.05));
                blk[2 * h..2 * h + 2].copy_from_slice(&v.to_bits().to_le_bytes());
            }
        }
        w
    }

    /// Runs `nr` columns of the packed group `packed` through `kern`.
    fn run(kern: Kernels, packed: &[u8], nb: usize, act: &[f32], nr: usize) -> Vec<f32> {
        let k = 32 * nb;
        let bytes = nb * ACT_BLOCK;
        let mut a = vec![0u8; nr * bytes];
        for (col, dst) in act.chunks_exact(k).zip(a.chunks_exact_mut(bytes)) {
            // SAFETY: the level is supported (the callers checked); k f32
            // in, nb prepared blocks out.
            unsafe { (kern.quantize)(col.as_ptr(), nb, dst.as_mut_ptr()) };
        }
        let mut out = vec![0f32; nr * ROWS];
        let t = Tile {
            w: packed.as_ptr(),
            nb,
            a: a.as_ptr(),
            a_stride: bytes,
            out: out.as_mut_ptr().cast(),
            out_stride: 4 * ROWS,
        };
        // SAFETY: one whole group of nb chunks, nr prepared columns and nr
        // outputs of 16 f32; the level is supported.
        unsafe { kern.tiles[nr - 1](t) };
        out
    }

    /// The AVX-VNNI algorithm (biased unsigned operands, sum terms first,
    /// one `vpdpbusd` per group and column) gives AVX2's bits for every
    /// type, column count and block count, on random quant bytes and on
    /// activations at the quantizer's extremes; so does the real AVX-VNNI
    /// kernel where this CPU has it.
    #[test]
    fn avx_vnni_kernels_give_avx2_bits() {
        if !Isa::Avx2.is_supported() {
            return;
        }
        let mut rng = Rng::new(29);
        for dtype in crate::conformance::LEGACY_QUANTS
            .into_iter()
            .chain([DType::IQ4_NL])
        {
            let avx2 = avx2::kernels(dtype).unwrap();
            let emulated = vnni_emulated::kernels(dtype).unwrap();
            let real = kernels_for(Isa::AvxVnni, dtype);
            assert_eq!(real.is_some(), Isa::AvxVnni.is_supported(), "{dtype}");
            for nb in [1, 2, 3, 8] {
                let k = 32 * nb;
                let w = weights(&mut rng, dtype, ROWS, nb);
                let mut packed = vec![0u8; w.len()];
                pack(dtype, [k, ROWS, 1, 1], &w, &mut packed).unwrap();
                let mut act = rng.vec(8 * k, -1.0, 1.0);
                // Columns of ±amax: quants of ±127 (and a zero column).
                for (i, x) in act[k..2 * k].iter_mut().enumerate() {
                    *x = if i % 3 == 0 { -2.0 } else { 2.0 };
                }
                act[2 * k..3 * k].fill(0.0);
                for nr in 1..=8 {
                    let act = &act[..nr * k];
                    let want = run(avx2, &packed, nb, act, nr);
                    let got = run(emulated, &packed, nb, act, nr);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{dtype} nb={nb} nr={nr}");
                    if let Some(real) = real {
                        let got = run(real, &packed, nb, act, nr);
                        assert_eq!(bits(&got), bits(&want), "real {dtype} nb={nb} nr={nr}");
                    }
                }
            }
        }
    }
}

//! AVX2 kernels over the packed Q2_K and Q3_K layout (`k.rs`) times Q8_K
//! activation columns, eight rows per ymm register (one row per 32-bit lane,
//! half `h` of a group at `line + 32 h`), called per super-block by
//! [`super::x86_avx2_k`]'s `half` as its Q4_K .. Q6_K kernels are.
//!
//! Both types keep their 2-bit quants in ggml's Q2_K order, which is
//! Q6_K's: element `128 hh + 32 k + l` (`l < 32`) is bits `2k, 2k + 1` of
//! `qs` byte `32 hh + l`, i.e. of `qs` line `8 hh + tq` (`tq = l / 4`),
//! times activation dword `32 hh + 8 k + tq`, in the 16-element sub-block
//! `j = 8 hh + 2 k + tq / 4`. Q3_K's third bit is bit `4 hh + k` of `hmask`
//! byte `l`, so of `hmask` line `tq`, the same `tq` as its `qs` line.
//!
//! Per super-block, row (lane) and column, the integer sums are exact for
//! any weight bytes and any i8 activations (`|a| ≤ 128`):
//! - Q2_K: the unsigned quant `q ≤ 3` in `vpmaddubsw` with a broadcast
//!   activation dword (pair sums ≤ 2 · 3 · 128 = 768); the four dwords of a
//!   sub-block summed in i16 (≤ 3072), then one `vpmaddwd` with the
//!   sub-block's 4-bit scale in both i16 of the lane widens and scales:
//!   `isum = Σ_j s_j Σ q a`. The minimum term `summs = Σ_j m_j bsums_j` is
//!   a `vpmaddwd` of the pair `(m_2i, m_2i+1)` with the Q8_K row's bsums
//!   dword `i`, eight per column.
//! - Q3_K: the unsigned `q' = q2 | hbit << 2 ≤ 7`, the real quant being
//!   `q' - 4` ([`crate::quant`]'s `q3_at`: 4 is taken off where the high
//!   bit is clear): pair sums ≤ 2 · 7 · 128 = 1792, four dwords in i16
//!   (≤ 7168), one `vpmaddwd` with the signed 6-bit scale `s_j` (−32 ..= 31)
//!   per sub-block; the offset is taken off once per super-block as
//!   `4 · Σ_j s_j bsums_j` (scale pairs times bsums dwords, as Q6_K's `-32`),
//!   so `isum = Σ_j s_j Σ (q' - 4) a` exactly as the reference (the Q8_K
//!   quantizer writes bsums that are the sums of its quants). In i32,
//!   `|isum| ≤ 16 · 32 · 16 · 7 · 128 + 4 · 16 · 32 · 2048`, far inside.
//!
//! Q3_K's scales are decoded for eight rows at once from the three scale
//! lines (`a` = bytes 0..4, `b` = 4..8, `c` = 8..12 of the 12-byte packing:
//! scale `j` has its low nibble in byte `j % 8` of `a | b`, low half for
//! `j < 8`, and its top two bits at bits `2 (j / 4)` of byte `j % 4` of
//! `c`) with byte masks and shifts per lane: lane bytes of
//! `(a & 15) | (c << 4 & 48)` are scales 0..4, `(b & 15) | (c << 2 & 48)`
//! 4..8, `(a >> 4 & 15) | (c & 48)` 8..12, `(b >> 4 & 15) | (c >> 2 & 48)`
//! 12..16, each then less 32.
//!
//! For one or two columns (the GEMV and its neighbour) each quant line is
//! loaded once for all four `k` (eight i16 sums in registers); wider
//! passes go sub-block by sub-block with one i16 sum per column, decoding a
//! line per `k`. The same integer sums either way. Both orders are unrolled
//! into straight code per super-block ([`sums16`]), which Q6_K's kernel
//! (`x86_avx2_k.rs`, same element order, 6-bit quants) shares; the
//! Q4_K / Q5_K steps there use its helpers ([`mul`], [`widen`]). The step
//! fence, the bsums terms, Q3_K's quant bits and the f32 epilogues are
//! `x86_kshared.rs`'s, which the AVX-512 kernels share.
//!
//! The f32 epilogue is the scalar reference's ([`crate::quant::vec_dot_fn`]
//! at `Scalar`): per super-block `(d_w d_a) · f32(isum) - (dmin_w d_a) ·
//! f32(summs)` (Q3_K: `(d_w d_a) · f32(isum)`) with separate multiplies and
//! subtraction, so every output is the reference's bits.

use super::k::{Q2_K_D, Q3_K_D};
use super::x86_avx2_k::{bcast, load, pair};
use super::x86_kshared::{bsums_dot, fence, min_terms, q3_bits, terms, QS};
use crate::isa::x86::IntLanes;
use std::arch::x86_64::*;

/// The scaled sub-block sums `Σ_j scale(j) Σ_{e in j} q(e) a(e)` of one
/// super-block against the Q8_K blocks `cols`, per column, with
/// `quant(j, t)` the register of unsigned quants of elements
/// `16 j + 4 t .. + 4` (lane `r`: row `8h + r`; activation dword `4 j + t`)
/// and `scale(j)` the i16 pair `(s_j, s_j)` per lane (module docs: loop
/// orders and bounds). `RUN` (1, 2 or 4) dwords of pair sums are summed in
/// i16 per `vpmaddwd` with the scale: 4 for Q2_K and Q3_K (quants ≤ 7);
/// 6-bit quants (≤ 63) allow 2 (2 · 2 · 63 · 128 = 32256 ≤ 32767).
/// Each step is its own instance with the sub-block indices as constants,
/// so the 64 quant registers are decoded in straight code with immediate
/// shifts, offsets and `pshufb` controls: a loop over `j` kept its index
/// arithmetic, shift counts and controls at run time and measured much
/// slower (packed Q3_K, n = 512: about 65 against 110 GFLOP/s; n = 1:
/// 30–40 against 55–65; packed Q6_K, whose steps chose their shifts by a
/// `match` on `k` in loops: 21.4 against 14.4 ms, 576 × 1536 × 512).
///
/// # Safety
/// The 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn sums16<const N: usize, const RUN: usize>(
    cols: [*const u8; N],
    quant: impl Fn(usize, usize) -> __m256i,
    scale: impl Fn(usize) -> __m256i,
) -> [__m256i; N] {
    let mut isum = [_mm256_setzero_si256(); N];
    let (c, q, s, acc) = (&cols, &quant, &scale, &mut isum);
    if N <= 2 {
        // SAFETY: the contract, forwarded.
        unsafe {
            narrow::<0, 0, N, RUN>(c, q, s, acc);
            narrow::<0, 1, N, RUN>(c, q, s, acc);
            narrow::<1, 0, N, RUN>(c, q, s, acc);
            narrow::<1, 1, N, RUN>(c, q, s, acc);
        }
    } else {
        macro_rules! wide {
            ($($j:literal)*) => {
                // SAFETY: the contract, forwarded.
                unsafe { $( wide::<$j, N, RUN>(c, q, s, acc); )* }
            };
        }
        wide!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    }
    isum
}

/// [`sums16`] for N ≤ 2: the sub-blocks `8 HH + 2k + E` of the four `k`,
/// which share their quant lines (dwords `t`), so each line is loaded once
/// for four registers; eight i16 sums stay in registers.
///
/// # Safety
/// As [`sums16`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn narrow<const HH: usize, const E: usize, const N: usize, const RUN: usize>(
    cols: &[*const u8; N],
    quant: &impl Fn(usize, usize) -> __m256i,
    scale: &impl Fn(usize) -> __m256i,
    isum: &mut [__m256i; N],
) {
    let mut s16 = [[_mm256_setzero_si256(); N]; 4];
    for t in 0..4 {
        for (k, s16) in s16.iter_mut().enumerate() {
            let j = 8 * HH + 2 * k + E;
            // SAFETY: as the caller's.
            unsafe { mul(cols, s16, quant(j, t), 4 * j + t) };
        }
        if t % RUN == RUN - 1 {
            for (k, s16) in s16.iter_mut().enumerate() {
                widen(isum, s16, scale(8 * HH + 2 * k + E));
            }
        }
    }
}

/// [`sums16`] for N > 2: sub-block `J` (its four dwords) for every column.
///
/// # Safety
/// As [`sums16`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide<const J: usize, const N: usize, const RUN: usize>(
    cols: &[*const u8; N],
    quant: &impl Fn(usize, usize) -> __m256i,
    scale: &impl Fn(usize) -> __m256i,
    isum: &mut [__m256i; N],
) {
    let mut s16 = [_mm256_setzero_si256(); N];
    for t in 0..4 {
        // SAFETY: as the caller's.
        unsafe { mul(cols, &mut s16, quant(J, t), 4 * J + t) };
        if t % RUN == RUN - 1 {
            widen(isum, &mut s16, scale(J));
        }
    }
    // SAFETY: AVX2 (contract).
    unsafe { fence(isum) };
}

/// `s += q · a` in i16 pair sums, `a` the activation dword `dw` of each
/// column broadcast.
///
/// # Safety
/// `dw < 64`; the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn mul<const N: usize>(
    cols: &[*const u8; N],
    s: &mut [__m256i; N],
    q: __m256i,
    dw: usize,
) {
    for (s, &p) in s.iter_mut().zip(cols) {
        // SAFETY: quant dword dw of the block.
        let y = unsafe { bcast(p.add(QS), dw) };
        *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(q, y));
    }
}

/// `isum += s16 · sc`, then `s16 = 0`: one `vpmaddwd` per column (the
/// i16 pair sums of a sub-block's run of dwords times its scale pair)
/// widens to i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn widen<const N: usize>(isum: &mut [__m256i; N], s16: &mut [__m256i; N], sc: __m256i) {
    for (acc, s) in isum.iter_mut().zip(s16) {
        *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(*s, sc));
        *s = _mm256_setzero_si256();
    }
}

/// `acc + m.lo16 · y.lo16 + m.hi16 · y.hi16` per lane (`vpmaddwd`, then
/// `vpaddd`): this width's `wdot` for [`bsums_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn madd_add(acc: __m256i, m: __m256i, y: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(m, y))
}

/// The quant decoder of half `h` of the Q2_K super-block (chunk) at `c`:
/// `quant(j, t)` (0 ..= 3) of sub-block `j = 8hh + 2k + e`, dword `t`: bits
/// `2k` of qs line `4 + 8hh + 4e + t`.
///
/// # Safety
/// The closure reads the chunk: it stays readable while it is called.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q2_quant(c: *const u8, h: usize) -> impl Fn(usize, usize) -> __m256i {
    let line = move |w: usize| c.wrapping_add(64 * w + 32 * h);
    move |j: usize, t: usize| {
        // SAFETY: qs line 4 + 8 (j / 8) + 4 (j % 2) + t < 20 is inside the chunk.
        let x = unsafe { load(line(4 + 8 * (j / 8) + 4 * (j % 2) + t)) };
        // SAFETY: AVX2 (the closure's caller's contract).
        _mm256_and_si256(
            unsafe { IntLanes::shr16(x, j / 2 % 4 * 2) },
            _mm256_set1_epi8(3),
        )
    }
}

/// One Q2_K super-block (chunk at `c`, half `h`) against the Q8_K blocks
/// `cols`: per column the eight rows' f32 terms.
///
/// The quants come from `quant` ([`q2_quant`]'s, or a decoded copy of
/// them).
///
/// # Safety
/// The 1344-byte chunk and the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q2_k_with<const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
    quant: impl Fn(usize, usize) -> __m256i,
) -> [__m256; N] {
    let line = |w: usize| c.wrapping_add(64 * w + 32 * h);
    let m15 = _mm256_set1_epi16(15);
    // Scale line w: lane bytes are the scale / min bytes 4w .. 4w + 4 of
    // the row (scale in the low nibble, min in the high one).
    let scale = |j: usize| {
        // SAFETY: scale line j / 4 (< 4) is inside the chunk.
        let v = unsafe { load(line(j / 4)) };
        let k = (j % 4) as u32;
        _mm256_and_si256(pair(v, k, k, false), m15)
    };
    // SAFETY: the contract, forwarded.
    let isum = unsafe { sums16::<N, 4>(cols, quant, scale) };
    let mins = |i: usize| {
        let a = 2 * (i % 2) as u32;
        // SAFETY: scale line i / 2 (< 4) is inside the chunk.
        let v = unsafe { load(line(i / 2)) };
        // Zero-extended bytes: the i16 shift leaves the high nibble.
        _mm256_srli_epi16(pair(v, a, a + 1, false), 4)
    };
    // SAFETY: the contract, forwarded.
    let summs = unsafe { bsums_dot(&cols, mins, |a, m, y| madd_add(a, m, y)) };
    // SAFETY: the 16 f16 `d` at Q2_K_D and `dmin` 32 bytes after them are
    // inside the chunk (the 8 of half h used).
    unsafe {
        min_terms(
            c.add(Q2_K_D + 16 * h),
            c.add(Q2_K_D + 32 + 16 * h),
            &cols,
            isum,
            summs,
        )
    }
}

/// The quant decoder of half `h` of the Q3_K super-block (chunk) at `c`:
/// `quant(j, t)`, the unsigned `q' = q2 | hbit << 2 ≤ 7` of sub-block
/// `j = 8hh + 2k + e`, dword `t`: qs line `8 + 8hh + tq`, bits `2k`, and
/// bit `4hh + k` of hmask line `tq`, with `tq = 4e + t`.
///
/// # Safety
/// The closure reads the chunk: it stays readable while it is called.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q3_quant(c: *const u8, h: usize) -> impl Fn(usize, usize) -> __m256i {
    let line = move |w: usize| c.wrapping_add(64 * w + 32 * h);
    move |j: usize, t: usize| {
        let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
        // SAFETY: qs line 8 + 8hh + tq (< 24) and hmask line tq (< 8) are
        // inside the chunk.
        let (x, hm) = unsafe { (load(line(8 + 8 * hh + tq)), load(line(tq))) };
        // SAFETY: AVX2 (contract).
        unsafe { q3_bits(x, hm, hh, k) }
    }
}

/// One Q3_K super-block (chunk at `c`, half `h`) against the Q8_K blocks
/// `cols`: per column the eight rows' f32 terms.
///
/// The quants come from `quant` ([`q3_quant`]'s, or a decoded copy of
/// them).
///
/// # Safety
/// The 1760-byte chunk and the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q3_k_with<const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
    quant: impl Fn(usize, usize) -> __m256i,
) -> [__m256; N] {
    let line = |w: usize| c.wrapping_add(64 * w + 32 * h);
    let (m15, m48) = (_mm256_set1_epi8(15), _mm256_set1_epi8(48));
    // SAFETY: the scale lines 24, 25, 26 are inside the chunk.
    let (a, b, cc) = unsafe { (load(line(24)), load(line(25)), load(line(26))) };
    let lo = |x: __m256i, shift: bool| {
        _mm256_and_si256(if shift { _mm256_srli_epi16(x, 4) } else { x }, m15)
    };
    let top = |x: __m256i| _mm256_and_si256(x, m48);
    let m32 = _mm256_set1_epi8(32);
    // Lane bytes: the signed scales 4w .. 4w + 4 of the lane's row.
    let sc = [
        _mm256_or_si256(lo(a, false), top(_mm256_slli_epi16(cc, 4))),
        _mm256_or_si256(lo(b, false), top(_mm256_slli_epi16(cc, 2))),
        _mm256_or_si256(lo(a, true), top(cc)),
        _mm256_or_si256(lo(b, true), top(_mm256_srli_epi16(cc, 2))),
    ]
    .map(|s| _mm256_sub_epi8(s, m32));
    let scale = |j: usize| pair(sc[j / 4], (j % 4) as u32, (j % 4) as u32, true);
    // SAFETY: the contract, forwarded.
    let isum = unsafe { sums16::<N, 4>(cols, quant, scale) };
    let pairs = |i: usize| {
        let a = 2 * (i % 2) as u32;
        pair(sc[i / 2], a, a + 1, true)
    };
    // SAFETY: the contract, forwarded.
    let corr = unsafe { bsums_dot(&cols, pairs, |a, m, y| madd_add(a, m, y)) };
    let isum = std::array::from_fn(|i| _mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 2)));
    // SAFETY: the 8 f16 `d` of half h are inside the chunk.
    unsafe { terms(c.add(Q3_K_D + 16 * h), &cols, isum) }
}

//! AVX2 kernels over the packed K-quant layout (`k.rs`): Q4_K, Q5_K, Q6_K
//! and IQ4_XS weights (Q2_K and Q3_K: `x86_avx2_k23.rs`, through this module's
//! [`half()`] loop) times Q8_K activation columns, eight rows per ymm
//! register (one row per 32-bit lane, half `h` of a group at `line + 32 h`,
//! as the legacy kernels of [`super::x86_avx2`], whose `tile` runs these
//! halves in passes of four columns).
//!
//! Per super-block, row (lane) and column, the integer sums are exact for any
//! weight bytes and any i8 activations:
//! - Q4_K: per 32-element sub-block `j`, eight `vpmaddubsw` of the nibbles
//!   (u8 ≤ 15) with a broadcast activation dword, summed in i16 (pair sums
//!   ≤ 2 · 15 · 128 = 3840, eight of them ≤ 30720), then one `vpmaddwd` with
//!   the sub-block's 6-bit scale in both i16 of the lane widens and scales:
//!   `isum = Σ_j s_j Σ q a`; the minimum term
//!   `summs = Σ_j m_j (bsums_2j + bsums_2j+1)` is a `vpmaddwd` of `(m_j, m_j)`
//!   with the Q8_K row's bsums dword `j`.
//! - Q5_K: as Q4_K (same scales, mins and sub-blocks), the quant being the
//!   nibble with bit `j` of the fifth-bit line `tq` as bit 4 (u8 ≤ 31): pair
//!   sums ≤ 2 · 31 · 128 = 7936, so four `vpmaddubsw` are summed in i16
//!   (≤ 31744) per `vpmaddwd` with the scale, two per sub-block.
//! - Q6_K: per 16-element sub-block, the unsigned 6-bit quants (≤ 63) in
//!   `vpmaddubsw`, two dwords summed in i16 (≤ 2 · 2 · 63 · 128 = 32256)
//!   per `vpmaddwd` with the i8 scale; the `-32` offset is taken off once per
//!   super-block as `32 · Σ_j s_j bsums_j` (`vpmaddwd` of scale pairs with
//!   the bsums), so `isum = Σ_j s_j Σ (q - 32) a` exactly as the reference
//!   (the Q8_K quantizer writes bsums that are the sums of its quants).
//!
//! The scales and mins are decoded per super-block from ggml's 12-byte form
//! (three lines: `sc0..3 | top bits`, `m0..3 | top bits`,
//! `low nibbles of sc4..7 | m4..7`) with byte masks and shifts, the way
//! ggml's `kmask` trick does on one row, here on eight rows at once.
//!
//! The f32 epilogue is the scalar reference's ([`crate::quant::vec_dot_fn`]
//! at `Scalar`): per super-block `(d_w d_a) · f32(isum) - (dmin_w d_a) ·
//! f32(summs)` (Q6_K: `(d_w d_a) · f32(isum)`) with separate multiplies and
//! subtraction, added to the row's sum in super-block order, so every output
//! is the reference's bits whatever the tile width or thread count.

use super::k::{IQ4_XS_LINES, Q4_K_LINES, Q5_K_LINES, Q6_K_D};
use super::tags::{k_chunk_size, k_kernel_table, tiles, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use super::x86_avx2::tile;
use super::x86_avx2_k23::{madd_add, mul, q2_k_with, q2_quant, q3_k_with, q3_quant, sums16, widen};
use super::x86_kshared::{bsums_dot, fence, fifth_bit, min_terms, terms, QS};
use super::{Kernels, Tile, TileFn};
use crate::isa::Isa;
use crate::tensor::DType;
use std::arch::x86_64::*;

/// Chunks a first half prefetches ahead of the one it computes.
const PF: usize = 2;

/// Bytes of a Q8_K block: f32 `d` at 0, quants at [`QS`], i16 bsums at
/// [`x86_kshared::BSUMS`](super::x86_kshared::BSUMS).
const Q8K: usize = DType::Q8_K.type_size();

/// The activation dword `i` (bytes `4i..4i+4` from `p`) in every lane.
///
/// # Safety
/// `p + 4 i .. p + 4 i + 4` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bcast(p: *const u8, i: usize) -> __m256i {
    // SAFETY: the caller guarantees the four bytes.
    _mm256_set1_epi32(unsafe { p.add(4 * i).cast::<i32>().read_unaligned() })
}

/// 32 bytes at `p` (half of a line).
///
/// # Safety
/// `p .. p + 32` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the 32 bytes.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Per dword lane of `v`, the i16 pair `(byte a, byte b)` of that dword
/// (`a`, `b` < 4): zero-extended, or (`signed`) sign-extended.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn pair(v: __m256i, a: u32, b: u32, signed: bool) -> __m256i {
    // pshufb control per dword; bytes with the top bit set give 0, which
    // adding 4p (the dword's position in its 128-bit lane) keeps.
    let base = if signed {
        0x80 | (a << 8) | (0x80 << 16) | (b << 24)
    } else {
        a | (0x80 << 8) | (b << 16) | (0x80 << 24)
    };
    let d = |p: u32| (base + p * 0x0404_0404) as i32;
    let ctl = _mm256_setr_epi32(d(0), d(1), d(2), d(3), d(0), d(1), d(2), d(3));
    let x = _mm256_shuffle_epi8(v, ctl);
    if signed {
        _mm256_srai_epi16(x, 8)
    } else {
        x
    }
}

/// Columns `0 .. N` (`N ≤ 4`) of half `h` of one K-quant group of type `T`
/// (the [`TileFn`] contract for rows `8h .. 8h + 8`).
///
/// # Safety
/// As [`TileFn`] (the columns are Q8_K rows of `t.nb` blocks made by the
/// Q8_K quantizer); the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn half<const T: u8, const N: usize>(t: Tile, h: usize) {
    let mut acc = [_mm256_setzero_ps(); N];
    let chunk = k_chunk_size(T);
    for b in 0..t.nb {
        if h == 0 {
            super::x86_avx2::prefetch_ahead(t.w, b, chunk, PF * chunk);
        }
        // SAFETY: chunk b and block b of every column are in bounds (contract).
        let cols: [*const u8; N] =
            std::array::from_fn(|i| unsafe { t.a.add(i * t.a_stride + b * Q8K) });
        // SAFETY (each arm): chunk b and the blocks `cols` are in bounds
        // (contract).
        let terms = unsafe {
            let c = t.w.add(b * chunk);
            match T {
                Q2_K => q2_k_with(c, h, cols, q2_quant(c, h)),
                Q3_K => q3_k_with(c, h, cols, q3_quant(c, h)),
                Q4_K => q45_k::<false, N>(c, h, cols),
                Q5_K => q45_k::<true, N>(c, h, cols),
                IQ4_XS => iq4_xs::<N>(c, h, cols),
                _ => q6_k_with(c, h, cols, q6_quant(c, h)),
            }
        };
        for (acc, t) in acc.iter_mut().zip(terms) {
            *acc = _mm256_add_ps(*acc, t);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY: rows 8h .. 8h + 8 of column i are writable (contract).
        unsafe { _mm256_storeu_ps(t.out(i).add(32 * h).cast(), *acc) };
    }
}

/// One Q4_K (`Q5` false) or Q5_K (`Q5` true) super-block (chunk at `c`,
/// half `h`) against the Q8_K blocks `cols`: per column the eight rows'
/// f32 terms. The eight sub-blocks are straight-code steps
/// ([`q45_step`]); the minimum term is one [`bsums_dot`] after them.
///
/// # Safety
/// The chunk and the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q45_k<const Q5: bool, const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
) -> [__m256; N] {
    // SAFETY: the contract, forwarded.
    unsafe { q45_k_with::<Q5, N>(c, h, cols, q45_quant::<Q5>(c, h)) }
}

/// The quant decoder of half `h` of the Q4_K / Q5_K super-block (chunk)
/// at `c`: `quant(j, tq)`, the low nibbles of quant line
/// `qs + 8 (j / 2) + tq` for even `j`, the high ones for odd `j` (Q5_K: bit
/// `j` of fifth-bit line `3 + tq` as bit 4).
///
/// # Safety
/// The closure reads the chunk: it stays readable while it is called.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q45_quant<const Q5: bool>(
    c: *const u8,
    h: usize,
) -> impl Fn(usize, usize) -> __m256i {
    let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
    let line = move |w: usize| c.wrapping_add(lines + 64 * w + 32 * h);
    // First quant line: after the scales (and Q5_K's eight fifth-bit lines).
    let qs = if Q5 { 11 } else { 3 };
    move |j: usize, tq: usize| {
        // SAFETY: quant line qs + 8(j/2) + tq is inside the chunk.
        let x = unsafe { load(line(qs + 8 * (j / 2) + tq)) };
        let x = if j.is_multiple_of(2) {
            x
        } else {
            _mm256_srli_epi16(x, 4)
        };
        let q = _mm256_and_si256(x, _mm256_set1_epi8(0x0f));
        if Q5 {
            // SAFETY: fifth-bit line 3 + tq is inside the chunk; AVX2.
            unsafe { fifth_bit(q, load(line(3 + tq)), j) }
        } else {
            q
        }
    }
}

/// [`q45_k`] with the quants from `quant` ([`q45_quant`]'s, or a decoded
/// copy of them).
///
/// # Safety
/// As [`q45_k`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q45_k_with<const Q5: bool, const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
    quant: impl Fn(usize, usize) -> __m256i,
) -> [__m256; N] {
    let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
    let line = |w: usize| c.wrapping_add(lines + 64 * w + 32 * h);
    // Lane bytes of scale line `w` (0: scales 0..4, 1: scales 4..8, 2:
    // mins 0..4, 3: mins 4..8 of the lane's row), decoded from the three
    // scale lines where they are used: four held registers would spill in
    // the steps of three or four columns.
    let six = |w: usize| {
        let (m4, m6, top) = (
            _mm256_set1_epi8(0x0f),
            _mm256_set1_epi8(0x3f),
            _mm256_set1_epi8(0x30),
        );
        let (lo, hi) = (w.is_multiple_of(2), w >= 2);
        // SAFETY: the three scale lines are inside the chunk.
        let x = unsafe { load(line(usize::from(hi))) };
        if lo {
            _mm256_and_si256(x, m6)
        } else {
            // SAFETY: as above.
            let cc = unsafe { load(line(2)) };
            let cc = if hi { _mm256_srli_epi32(cc, 4) } else { cc };
            _mm256_or_si256(
                _mm256_and_si256(cc, m4),
                _mm256_and_si256(_mm256_srli_epi32(x, 2), top),
            )
        }
    };
    // One or two columns leave registers to hold them: decoded once.
    let held: [__m256i; 4] = std::array::from_fn(&six);
    let six = |w: usize| if N <= 2 { held[w] } else { six(w) };
    let scale = |j: usize| pair(six(j / 4), (j % 4) as u32, (j % 4) as u32, false);
    let mut isum = [_mm256_setzero_si256(); N];
    macro_rules! steps {
        ($($j:literal)*) => {
            // SAFETY: the contract, forwarded.
            unsafe { $( q45_step::<Q5, $j, N>(&quant, &cols, &scale, &mut isum); )* }
        };
    }
    steps!(0 1 2 3 4 5 6 7);
    // summs = Σ_j m_j (bsums_2j + bsums_2j+1): the pair (m_j, m_j) with
    // bsums dword j.
    let mins = |j: usize| pair(six(2 + j / 4), (j % 4) as u32, (j % 4) as u32, false);
    // SAFETY: the contract, forwarded.
    let summs = unsafe { bsums_dot(&cols, mins, |a, m, y| madd_add(a, m, y)) };
    // SAFETY: the 16 f16 `d` at 0 and `dmin` at 32 are inside the chunk
    // (the 8 of half h used).
    unsafe { min_terms(c.add(16 * h), c.add(32 + 16 * h), &cols, isum, summs) }
}

/// Sub-block `J` of [`q45_k`] for every column: its quants
/// (`quant(J, tq)`, [`q45_quant`]) times activation dwords `8J ..+ 8`;
/// summed in i16 over all eight dwords (Q4_K), or four
/// (Q5_K: 4 · 2 · 31 · 128 = 31744 ≤ 32767), per `vpmaddwd` with the scale.
/// With `J` a constant every shift is an immediate and nothing branches.
///
/// # Safety
/// As [`q45_k`]; `line(w)` is line `w` of the chunk's half.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q45_step<const Q5: bool, const J: usize, const N: usize>(
    quant: &impl Fn(usize, usize) -> __m256i,
    cols: &[*const u8; N],
    scale: &impl Fn(usize) -> __m256i,
    isum: &mut [__m256i; N],
) {
    let run = if Q5 { 4 } else { 8 };
    let mut s16 = [_mm256_setzero_si256(); N];
    for tq in 0..8 {
        let q = quant(J, tq);
        // SAFETY: quant dword 8J + tq of the blocks (the caller's).
        unsafe { mul(cols, &mut s16, q, 8 * J + tq) };
        if tq % run == run - 1 {
            widen(isum, &mut s16, scale(J));
        }
    }
    // SAFETY: AVX2 (contract).
    unsafe { fence(isum) };
}

/// One IQ4_XS super-block (chunk at `c`, half `h`) against the Q8_K blocks
/// `cols`: per column the eight rows' f32 terms.
///
/// Per 32-element sub-block `j`, each of its four quant lines gives two
/// registers of indices (low nibbles: activation dwords `8j + t`, high
/// nibbles: `8j + 4 + t`), turned into the rows' table values `v` by one
/// `vpshufb`; `vpmaddubsw(|v|, sign(a, v))` gives `v · a` pair sums of at
/// most 2 · 127 · 127 = 32258 in magnitude (activations in −127 ..= 127,
/// the Q8_K quantizer's range), so each is widened at once, by a
/// `vpmaddwd` with the sub-block's scale `s_j` (−32 ..= 31) in both i16 of
/// the lane: `isum = Σ_j s_j Σ v a` exactly.
///
/// # Safety
/// The chunk and the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn iq4_xs<const N: usize>(c: *const u8, h: usize, cols: [*const u8; N]) -> [__m256; N] {
    // SAFETY: the contract, forwarded.
    let v = unsafe { iq4_xs_values(c, h) };
    // SAFETY: as above.
    unsafe {
        let values = |j, e, t| {
            let v = v(j, e, t);
            (v, _mm256_abs_epi8(v))
        };
        iq4_xs_with(c, h, cols, values, iq4_xs_scales(c, h))
    }
}

/// The value decoder of half `h` of the IQ4_XS super-block (chunk) at `c`:
/// `values(j, e, t)`, the table values of quant line `1 + 4j + t`'s low
/// (`e = 0`) or high (`e = 1`) nibbles (activation dword `8j + 4e + t`).
///
/// # Safety
/// The closure reads the chunk: it stays readable while it is called.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn iq4_xs_values(
    c: *const u8,
    h: usize,
) -> impl Fn(usize, usize, usize) -> __m256i {
    let line = move |w: usize| c.wrapping_add(IQ4_XS_LINES + 64 * w + 32 * h);
    // SAFETY: IQ4_NL_VALUES is 16 readable bytes.
    let table = unsafe { _mm_loadu_si128(crate::quant::IQ4_NL_VALUES.as_ptr().cast()) };
    let table = _mm256_broadcastsi128_si256(table);
    let m4 = _mm256_set1_epi8(0x0f);
    move |j: usize, e: usize, t: usize| {
        // SAFETY: quant line 1 + 4j + t is inside the chunk.
        let x = unsafe { load(line(1 + 4 * j + t)) };
        let x = if e == 0 { x } else { _mm256_srli_epi16(x, 4) };
        _mm256_shuffle_epi8(table, _mm256_and_si256(x, m4))
    }
}

/// The sub-block scales of half `h` of the IQ4_XS super-block (chunk) at
/// `c`: `scale(j)` holds per lane (row) `s_j = (nibble j of scales_l |
/// bits 2j, 2j + 1 of scales_h << 4) - 32` (−32 ..= 31) in both i16 halves.
///
/// # Safety
/// The chunk is readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn iq4_xs_scales(c: *const u8, h: usize) -> impl Fn(usize) -> __m256i {
    // SAFETY: line 0 (scales_l) and the 8 u16 scales_h of half h are inside
    // the chunk.
    let (lo, hi) = unsafe {
        (
            load(c.add(IQ4_XS_LINES + 32 * h)),
            _mm256_cvtepu16_epi32(_mm_loadu_si128(c.add(32 + 16 * h).cast())),
        )
    };
    move |j: usize| {
        let (c4, c2) = (
            _mm_cvtsi32_si128(4 * j as i32),
            _mm_cvtsi32_si128(2 * j as i32),
        );
        let s = _mm256_or_si256(
            _mm256_and_si256(_mm256_srl_epi32(lo, c4), _mm256_set1_epi32(0x0f)),
            _mm256_slli_epi32(
                _mm256_and_si256(_mm256_srl_epi32(hi, c2), _mm256_set1_epi32(3)),
                4,
            ),
        );
        let s = _mm256_sub_epi32(s, _mm256_set1_epi32(32));
        _mm256_or_si256(
            _mm256_and_si256(s, _mm256_set1_epi32(0xffff)),
            _mm256_slli_epi32(s, 16),
        )
    }
}

/// [`iq4_xs`] with the values and their magnitudes from `values`
/// ([`iq4_xs_values`]'s and `vpabsb`) and the sub-block scales from
/// `scales` ([`iq4_xs_scales`]), or a decoded copy of all three: per pass
/// of four columns the copy saves eight scale decodes and 64 `vpabsb`
/// (measured 10 % at 1024² × 512, the scales most of it).
///
/// # Safety
/// As [`iq4_xs`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn iq4_xs_with<const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
    values: impl Fn(usize, usize, usize) -> (__m256i, __m256i),
    scales: impl Fn(usize) -> __m256i,
) -> [__m256; N] {
    let mut isum = [_mm256_setzero_si256(); N];
    for j in 0..8 {
        let scale = scales(j);
        for t in 0..4 {
            for e in 0..2 {
                let (v, va) = values(j, e, t);
                for (acc, &p) in isum.iter_mut().zip(&cols) {
                    // SAFETY: quant dword 8j + 4e + t of the block.
                    let y = _mm256_sign_epi8(unsafe { bcast(p.add(QS), 8 * j + 4 * e + t) }, v);
                    let m = _mm256_madd_epi16(_mm256_maddubs_epi16(va, y), scale);
                    *acc = _mm256_add_epi32(*acc, m);
                }
            }
        }
    }
    // SAFETY: the 8 f16 `d` of half h are inside the chunk.
    unsafe { terms(c.add(16 * h), &cols, isum) }
}

/// The quant decoder of half `h` of the Q6_K super-block (chunk) at `c`:
/// `quant(j, t)`, the unsigned quants (≤ 63) of sub-block `j`'s dword `t`.
///
/// # Safety
/// The closure reads the chunk: it stays readable while it is called.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_quant(c: *const u8, h: usize) -> impl Fn(usize, usize) -> __m256i {
    let line = move |w: usize| c.wrapping_add(64 * w + 32 * h);
    let (m4, m30, m3f) = (
        _mm256_set1_epi8(0x0f),
        _mm256_set1_epi8(0x30),
        _mm256_set1_epi8(0x3f),
    );
    // Sub-block j = 8hh + 2k + e, dword t (element 128hh + 32k + 4tq + ..,
    // tq = 4e + t), in the re-coded form (`k.rs`): for k < 2 the whole quant
    // is bits 0..6 of line 16hh + 8k + tq (P', Q'); for k ≥ 2 its nibble is
    // the low (k = 2) or high (k = 3) half of line 32 + 8hh + tq (R') and
    // its top pair bits 6, 7 of line 16hh + 8(k - 2) + tq.
    move |j: usize, t: usize| {
        let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
        // SAFETY: line 16hh + 8(k % 2) + tq (< 32) is inside the chunk.
        let pq = unsafe { load(line(16 * hh + 8 * (k % 2) + tq)) };
        if k < 2 {
            return _mm256_and_si256(pq, m3f);
        }
        // SAFETY: line 32 + 8hh + tq (< 48) is inside the chunk.
        let r = unsafe { load(line(32 + 8 * hh + tq)) };
        let lo = if k == 2 { r } else { _mm256_srli_epi16(r, 4) };
        // Bits 6, 7 to bits 4, 5; the 16-bit shift's carry from the next
        // byte lands in bits 6, 7 and is masked off.
        let hi = _mm256_srli_epi16(pq, 2);
        _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30))
    }
}

/// One Q6_K super-block (chunk at `c`, half `h`) against the Q8_K blocks
/// `cols`: per column the eight rows' f32 terms. The sub-block sums are
/// [`sums16`]'s straight-code steps (two dwords per `vpmaddwd`), so each
/// quant register is decoded with the shifts of its constant `k` (one mask
/// for `k < 2`, two shifts for `k ≥ 2`, from the re-coded quants of
/// `k.rs`), and for one or two columns each line once for all four `k`.
///
/// The quants come from `quant` ([`q6_quant`]'s, decoded from the chunk,
/// or read back from a decoded copy).
///
/// # Safety
/// The chunk and the 292-byte blocks are readable; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_k_with<const N: usize>(
    c: *const u8,
    h: usize,
    cols: [*const u8; N],
    quant: impl Fn(usize, usize) -> __m256i,
) -> [__m256; N] {
    let line = |w: usize| c.wrapping_add(64 * w + 32 * h);
    let scale = |j: usize| {
        // SAFETY: scale line 48 + j / 4 is inside the chunk.
        let v = unsafe { load(line(48 + j / 4)) };
        pair(v, (j % 4) as u32, (j % 4) as u32, true)
    };
    // SAFETY: the contract, forwarded.
    let isum = unsafe { sums16::<N, 2>(cols, quant, scale) };
    // The `-32` offset: `32 · Σ_j s_j bsums_j`, from the scale pairs.
    let pairs = |i: usize| {
        // SAFETY: scale line 48 + i / 2 is inside the chunk.
        let v = unsafe { load(line(48 + i / 2)) };
        let a = 2 * (i % 2) as u32;
        pair(v, a, a + 1, true)
    };
    // SAFETY: the contract, forwarded.
    let corr = unsafe { bsums_dot(&cols, pairs, |a, m, y| madd_add(a, m, y)) };
    let isum = std::array::from_fn(|i| _mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 5)));
    // SAFETY: the 8 f16 `d` of half h are inside the chunk.
    unsafe { terms(c.add(Q6_K_D + 16 * h), &cols, isum) }
}

k_kernel_table!(Isa::Avx2);

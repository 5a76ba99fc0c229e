//! aarch64 NEON kernels over the packed layout, with `sdot` (the `dotprod`
//! extension, detected at run time: [`available`]).
//!
//! A 128-bit register holds four i32 lanes, so a 16-row group is taken as
//! four *quarters*: bytes `16 q .. 16 q + 16` of every 64-byte line are rows
//! `4 q .. 4 q + 4` (row `r`'s four bytes sit at `4 r .. 4 r + 4`), one row
//! per lane. That is exactly the operand shape of `sdot` by element:
//! `sdot v.4s, w.16b, a.4b[L]` adds `Σ_t w[4 r + t] · a[4 L + t]` to lane
//! `r`, so the quant register of dword group `j` (lane `r` = quants
//! `4 j .. 4 j + 4` of the quarter's row `r`) meets activation dword `j`
//! without any broadcast: the 32 activation quants of a block are two
//! registers, dwords `0..4` and `4..8`, each used by lane index.
//!
//! Per quarter and block: the 4/5-bit quants are four 16-byte loads split
//! into low and high nibbles (groups `j = i` and `j = i + 4`); a Q5 fifth
//! bit is bit `16 q + 4 r + t` of mask `j`, i.e. bit `4 r + t` of the u16 at
//! byte `8 j + 2 q` of the masks, spread to bytes with a table lookup
//! (`tbl`: low byte into bytes 0–7, high byte into 8–15), a bit test
//! against `1, 2, …, 128` and a bit select of `0x10`. Q8_0 is eight
//! 16-byte loads, un-biased (`^ 0x80`) back to the signed quants, so no
//! offset term is needed (the prepared activation still carries one; it is
//! ignored, as at AVX2). The 4/5-bit quants are small non-negative i8 and
//! the offset types add the activation's `-offset · Σa` to the integer sum
//! (it seeds the accumulator). All sums are exact in i32 (at most
//! 32 · 128 · 128 per block).
//!
//! Per lane (row) and column the f32 arithmetic is the x86 kernels'
//! exactly: `acc = fma(f32(s), d_w · d_a, acc)` (+ `fma(m_w, s_a, acc)`) in
//! block order (`fmla` is fused), so the results do not depend on the tile
//! width or the thread count. A quarter keeps its eight quant registers and
//! one f32 accumulator per column (up to [`Kernels::NR`]) in the 32 vector
//! registers; the four quarters are four passes over the group, each
//! reading its own quarter of every line (the weights are read once, the
//! activations once per quarter, from L1).
//!
//! `sdot` and the f16 → f32 widening (`fcvtl`, exact for every finite or
//! infinite f16) are written as inline assembly: their intrinsics
//! (`vdotq_laneq_s32`, `vcvt_f32_f16`) are not stable Rust yet. Every kernel
//! is an `unsafe fn` with `#[target_feature(enable = "neon,dotprod")]`,
//! reached only through [`neon_table`] (the level's entries in its
//! [`crate::isa::Table`]), which checks `dotprod`.
//!
//! Where the CPU also has `i8mm`, the tiles of two or more columns are
//! `aarch64_i8mm.rs`'s (`smmla` on column pairs, the same bits); it reuses
//! this file's quant registers ([`quants`]), scales ([`scales`]), block
//! term ([`block_term`]) and, for an odd last column, [`column`], so the
//! per-lane f32 arithmetic is written once.

use super::tags::{
    block_quantizer, has_min, is_q5, kernel_table, quantize_blocks, tiles, Q4_0, Q4_1, Q5_0, Q5_1,
    Q8_0,
};
use super::{Kernels, Table, Tile, TileFn};
pub(super) use crate::isa::aarch64::sdot_lane;
use crate::tensor::DType;
use std::arch::aarch64::*;
use std::arch::asm;

/// True when this CPU has the `dotprod` extension the kernels need (NEON
/// itself is mandatory on aarch64).
pub(super) fn available() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// The NEON level's own packed kernels on a CPU with `dotprod` (none
/// without): this file's tiles for the legacy types (of two or more
/// columns `aarch64_i8mm.rs`'s where the CPU has `i8mm`), and
/// `aarch64_neon_k.rs`'s for the K-quants; none for IQ4_NL.
pub(super) fn neon_table() -> Table {
    if !available() {
        return Table::EMPTY;
    }
    let i8mm = super::aarch64_i8mm::available();
    Table::from_fn(|t| {
        let legacy = if i8mm {
            super::aarch64_i8mm::kernels(t)
        } else {
            kernels(t)
        };
        legacy.or_else(|| super::aarch64_neon_k::kernels(t))
    })
}

/// Four f16 bit patterns widened to f32 (`fcvtl`): exact for every finite
/// or infinite value (NaNs stay NaN, quieted, as `vcvtph2ps` does).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn f16x4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: `fcvtl` reads and writes only these two vector registers
    // (base Advanced SIMD, which NEON guarantees).
    unsafe {
        asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = lateout(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
    r
}

/// Byte `p` tests bit `p % 8` (the fifth bits, see [`quants`]).
const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// The eight quant registers of quarter `q` of the chunk at `c`: register
/// `j` has in lane `r` the quants `4 j .. 4 j + 4` of row `4 q + r` (signed;
/// 4/5-bit quants as 0..=31). `idx` are the `tbl` indices of the fifth
/// bits of masks `2 k` and `2 k + 1` (Q5 only; [`mask_idx`]).
///
/// # Safety
/// `c` points at a whole chunk of type `T`; `qh`, `qs` are its offsets.
#[target_feature(enable = "neon")]
#[inline]
pub(super) unsafe fn quants<const T: u8>(
    c: *const u8,
    qh: usize,
    qs: usize,
    q: usize,
    idx: [uint8x16_t; 2],
) -> [int8x16_t; 8] {
    if T == Q8_0 {
        return std::array::from_fn(|j| {
            // SAFETY: 16 bytes of line j, quarter q, inside the chunk.
            let x = unsafe { vld1q_s8(c.add(qs + 64 * j + 16 * q).cast()) };
            veorq_s8(x, vdupq_n_s8(-128))
        });
    }
    let mut w = [vdupq_n_u8(0); 8];
    for i in 0..4 {
        // SAFETY: 16 bytes of nibble line i, quarter q, inside the chunk.
        let x = unsafe { vld1q_u8(c.add(qs + 64 * i + 16 * q)) };
        w[i] = vandq_u8(x, vdupq_n_u8(0x0f));
        w[i + 4] = vshrq_n_u8(x, 4);
    }
    if is_q5(T) {
        // SAFETY: BITS is 16 bytes.
        let bits = unsafe { vld1q_u8(BITS.as_ptr()) };
        for k in 0..4 {
            // SAFETY: masks 2k and 2k + 1 (16 bytes) are inside the chunk.
            let m = unsafe { vld1q_u8(c.add(qh + 16 * k)) };
            for (h, idx) in idx.iter().enumerate() {
                let set = vtstq_u8(vqtbl1q_u8(m, *idx), bits);
                let j = 2 * k + h;
                w[j] = vbslq_u8(vdupq_n_u8(0x10), set, w[j]);
            }
        }
    }
    std::array::from_fn(|j| vreinterpretq_s8_u8(w[j]))
}

/// The `tbl` indices of quarter `q`'s fifth bits (Q5, see [`quants`]): the
/// u16 at byte `2 q` of mask `2 k` (bytes 0..8 of the pair) or of mask
/// `2 k + 1` (bytes 8..16) into bytes 0..8 (low) and 8..16 (high).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn mask_idx(q: usize) -> [uint8x16_t; 2] {
    let lo = vaddq_u8(
        vcombine_u8(vdup_n_u8(0), vdup_n_u8(1)),
        vdupq_n_u8(2 * q as u8),
    );
    [lo, vaddq_u8(lo, vdupq_n_u8(8))]
}

/// The f32 scales `d` and (types with a minimum; else zeros) minimums `m`
/// of quarter `q`'s four rows in the chunk at `c`, whose scales start at
/// byte `d`.
///
/// # Safety
/// `c` points at a whole chunk of type `T`; `d` is its scales' offset.
#[target_feature(enable = "neon")]
#[inline]
pub(super) unsafe fn scales<const T: u8>(
    c: *const u8,
    d: usize,
    q: usize,
) -> (float32x4_t, float32x4_t) {
    // SAFETY: the 4 f16 scales of quarter q are inside the chunk.
    let dw = f16x4(unsafe { vld1_u16(c.add(d + 8 * q).cast()) });
    let mw = if has_min(T) {
        // SAFETY: the 4 f16 minimums of quarter q follow the scales.
        f16x4(unsafe { vld1_u16(c.add(32 + 8 * q).cast()) })
    } else {
        vdupq_n_f32(0.0)
    };
    (dw, mw)
}

/// One prepared activation block at `p`: its 32 quants as two registers
/// (quants `0..16`, `16..32`), and its f32 scale (lane 0) beside its sum
/// term's bits (lane 1), one 8-byte load that the f32 arithmetic uses by
/// lane.
///
/// # Safety
/// [`ACT_BLOCK`](super::ACT_BLOCK) bytes readable at `p`.
#[target_feature(enable = "neon")]
#[inline]
pub(super) unsafe fn act_block(p: *const u8) -> (int8x16_t, int8x16_t, float32x2_t) {
    // SAFETY: the block's 32 quants, the f32 scale at 32 and the sum term
    // at 36 are inside the ACT_BLOCK bytes at p (contract).
    unsafe {
        (
            vld1q_s8(p.cast()),
            vld1q_s8(p.add(16).cast()),
            vld1_f32(p.add(32).cast()),
        )
    }
}

/// The integer sum's seed in every lane, from a block's scale and sum term
/// `st` ([`act_block`]): the offset types' `-offset · Σa`, 0 for Q8_0
/// (un-biased quants) and the types with a minimum (their term is
/// `m_w s_a`, added in f32).
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn seed<const T: u8>(st: float32x2_t) -> int32x4_t {
    if has_min(T) || T == Q8_0 {
        vdupq_n_s32(0)
    } else {
        vreinterpretq_s32_f32(vdupq_lane_f32::<1>(st))
    }
}

/// `acc` plus one block's term for one column, per lane (row), from its
/// integer sums `s` and the activation's scale and sum term `st`
/// ([`act_block`]): `fma(f32(s), d_w · d_a, acc)`, then (types with a
/// minimum) `fma(m_w, s_a, ·)` — the order every level keeps.
#[target_feature(enable = "neon")]
#[inline]
pub(super) fn block_term<const T: u8>(
    acc: float32x4_t,
    s: int32x4_t,
    dw: float32x4_t,
    mw: float32x4_t,
    st: float32x2_t,
) -> float32x4_t {
    let acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_lane_f32::<0>(dw, st));
    if has_min(T) {
        vfmaq_lane_f32::<1>(acc, mw, st)
    } else {
        acc
    }
}

/// `acc` plus one block of one column with `sdot`: the activation block
/// at `p` against the quarter's quant registers `wq` ([`quants`]) and
/// scales `dw`, `mw` ([`scales`]).
///
/// # Safety
/// [`ACT_BLOCK`](super::ACT_BLOCK) bytes readable at `p`; the CPU supports NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
pub(super) unsafe fn column<const T: u8>(
    acc: float32x4_t,
    wq: &[int8x16_t; 8],
    dw: float32x4_t,
    mw: float32x4_t,
    p: *const u8,
) -> float32x4_t {
    // SAFETY: the contract.
    let (a0, a1, st) = unsafe { act_block(p) };
    let mut s = seed::<T>(st);
    s = sdot_lane::<0>(s, wq[0], a0);
    s = sdot_lane::<1>(s, wq[1], a0);
    s = sdot_lane::<2>(s, wq[2], a0);
    s = sdot_lane::<3>(s, wq[3], a0);
    s = sdot_lane::<0>(s, wq[4], a1);
    s = sdot_lane::<1>(s, wq[5], a1);
    s = sdot_lane::<2>(s, wq[6], a1);
    s = sdot_lane::<3>(s, wq[7], a1);
    block_term::<T>(acc, s, dw, mw, st)
}

/// The frame of a quarter's pass, which the `sdot` and `smmla` tiles
/// share: for each block `b` of the group, quarter `q`'s scales `dw`, `mw`
/// ([`scales`]) and quant registers `wq` ([`quants`]) go to
/// `block(acc, wq, dw, mw, b)`, which adds block `b` of every column to
/// `acc` (one f32 register per column); then column `i`'s rows
/// `4 q .. 4 q + 4` are stored.
///
/// # Safety
/// As [`TileFn`] for `N` columns, `q < 4`.
#[inline(always)]
pub(super) unsafe fn quarter_with<const T: u8, const N: usize>(
    t: Tile,
    q: usize,
    mut block: impl FnMut(&mut [float32x4_t; N], &[int8x16_t; 8], float32x4_t, float32x4_t, usize),
) {
    let idx = mask_idx(q);
    let mut acc = [vdupq_n_f32(0.0); N];
    for b in 0..t.nb {
        // SAFETY: chunk b < nb (contract).
        let (c, (d, qh, qs)) = unsafe { t.chunk::<T>(b) };
        // SAFETY: the whole chunk is in bounds.
        let ((dw, mw), wq) = unsafe { (scales::<T>(c, d, q), quants::<T>(c, qh, qs, q, idx)) };
        block(&mut acc, &wq, dw, mw, b);
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY: rows 4q .. 4q + 4 of column i are writable (contract).
        unsafe { vst1q_f32(t.out(i).add(16 * q).cast(), *acc) };
    }
}

/// Columns `0 .. N` of quarter `q` of one group: the [`TileFn`] contract
/// for the four rows `4 q .. 4 q + 4`, a column at a time.
///
/// # Safety
/// As [`TileFn`]; the CPU supports NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn quarter<const T: u8, const N: usize>(t: Tile, q: usize) {
    let block = |acc: &mut [float32x4_t; N], wq: &[int8x16_t; 8], dw, mw, b| {
        // Column i (`i < N`): written out for each i, since LLVM keeps a
        // loop over the columns (accumulators in memory) otherwise.
        macro_rules! columns {
            ($($i:literal)*) => {$(
                if let Some(acc) = acc.get_mut($i) {
                    // SAFETY: block b of column i < N is in bounds (contract).
                    *acc = unsafe { column::<T>(*acc, wq, dw, mw, t.act($i, b)) };
                }
            )*};
        }
        columns!(0 1 2 3 4 5 6 7);
    };
    // SAFETY: the contract, forwarded.
    unsafe { quarter_with::<T, N>(t, q, block) }
}

/// `NR` columns of one 16-row group (the [`TileFn`] contract): the four
/// quarters in turn.
///
/// # Safety
/// As [`TileFn`]; the CPU supports NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile<const T: u8, const NR: usize>(t: Tile) {
    for q in 0..4 {
        // SAFETY: the contract, forwarded; quarter q < 4 of the group.
        unsafe { quarter::<T, NR>(t, q) };
    }
}

block_quantizer!(
    "neon",
    crate::quant::simd::quantize_block_q8_neon,
    f16_round
);

/// `x` rounded to f16 (nearest even, as the row quantizer stores it) and
/// read back as the prepared layout's definition reads it.
fn f16_round(x: f32) -> f32 {
    crate::quant::simd::f16_to_f32(half::f16::from_f32(x).to_bits())
}

kernel_table!();

//! aarch64 NEON kernels over the packed layout with `smmla` (the `i8mm`
//! extension, detected at run time: [`available`]), for tiles of two or
//! more activation columns; the one-column tile, and the odd last column
//! of an odd tile, are the `sdot` kernel's (`aarch64_neon.rs`, whose
//! module docs describe the quarters this file shares).
//!
//! `smmla v.4s, w.16b, a.16b` multiplies the 2 × 8 i8 matrix `w` (rows
//! `w[0..8]`, `w[8..16]`) by the transpose of the 2 × 8 matrix `a` and adds
//! the 2 × 2 i32 result to `v`: lane `2 i + j` gets
//! `Σ_{t<8} w[8 i + t] · a[8 j + t]`. The packed bytes are the `sdot`
//! kernel's, unchanged (every level shares them): in a quarter's quant
//! register of dword group `j`, lane `r` holds quants `4 j .. 4 j + 4` of
//! the quarter's row `r`. For groups `j = 2 p` and `2 p + 1`, `zip1` on
//! 32-bit elements gives `[row 0: k 8p..8p+8, row 1: k 8p..8p+8]` and `zip2`
//! the same for rows 2 and 3 — exactly `smmla`'s weight operand. The
//! activation operand of a column pair `(c, c + 1)` and step `p` is
//! `[column c: k 8p..8p+8, column c+1: k 8p..8p+8]`: `zip1` / `zip2` on
//! 64-bit elements of the two columns' quant registers (`0..16`, `16..32`).
//! Four `smmla` per row pair sum a block (32 k), so a quarter and a column
//! pair take eight per block, where `sdot` takes sixteen.
//!
//! The two row pairs' sums `[r0 c, r0 c', r1 c, r1 c']` and
//! `[r2 c, r2 c', r3 c, r3 c']` become the per-column lanes of the `sdot`
//! kernel with `uzp1` / `uzp2` on 32-bit elements (`[r0 c, r1 c, r2 c,
//! r3 c]` and the same for `c'`). The offset types' `-offset · Σa` seeds
//! both sums as `[t_c, t_c', t_c, t_c']`; Q8_0 quants are un-biased and the
//! types with a minimum add `m_w s_a` in f32, as at `sdot`. Integer sums
//! are exact whatever the order, and the f32 arithmetic per lane and column
//! is the `sdot` kernel's ([`super::aarch64_neon`]'s `block_term`:
//! `fma(f32(s), d_w · d_a, acc)` (+ `fma(m_w, s_a, acc)`) in block order),
//! so every tile returns the `sdot` kernel's bits (tested below, and by
//! the tile-width tests of `tests/packed.rs`).
//!
//! `smmla` is inline assembly: its intrinsic (`vmmlaq_s32`) is not stable
//! Rust (`stdarch_neon_i8mm`). Every kernel is an `unsafe fn` with
//! `#[target_feature(enable = "neon,dotprod,i8mm")]`, reached only through
//! [`kernels`], which fills the NEON level's table (`super::aarch64_neon`)
//! after [`available`] checked the CPU.

use super::aarch64_neon::{act_block, block_term, column, quarter_with, seed};
use super::tags::{tiles, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use super::{Kernels, Tile, TileFn};
use crate::isa::aarch64::smmla;
use crate::tensor::DType;
use std::arch::aarch64::*;

/// True when this CPU has `i8mm` (`smmla`) and `dotprod` (`sdot`, for the
/// one-column tiles).
pub(super) fn available() -> bool {
    std::arch::is_aarch64_feature_detected!("i8mm") && super::aarch64_neon::available()
}

/// The quarter's quant registers `wq` (`sdot` layout) as `smmla` weight
/// operands: `[h][p]` holds rows `2 h` and `2 h + 1` of the quarter, quants
/// `8 p .. 8 p + 8` each.
#[target_feature(enable = "neon")]
#[inline]
fn row_pairs(wq: &[int8x16_t; 8]) -> [[int8x16_t; 4]; 2] {
    let w = |j: usize| vreinterpretq_s32_s8(wq[j]);
    [
        std::array::from_fn(|p| vreinterpretq_s8_s32(vzip1q_s32(w(2 * p), w(2 * p + 1)))),
        std::array::from_fn(|p| vreinterpretq_s8_s32(vzip2q_s32(w(2 * p), w(2 * p + 1)))),
    ]
}

/// `acc` plus one block of the column pair whose activation blocks are at
/// `p` and `p + stride`, against the quarter's row pairs `wz`
/// ([`row_pairs`]) and scales `dw`, `mw`: the two columns' accumulators,
/// each exactly as the `sdot` kernel's [`column`] leaves it.
///
/// # Safety
/// [`ACT_BLOCK`](super::ACT_BLOCK) bytes readable at `p` and at `p + stride`; the CPU
/// supports NEON and i8mm.
#[target_feature(enable = "neon,i8mm")]
#[inline]
unsafe fn pair<const T: u8>(
    acc: [float32x4_t; 2],
    wz: &[[int8x16_t; 4]; 2],
    dw: float32x4_t,
    mw: float32x4_t,
    p: *const u8,
    stride: usize,
) -> [float32x4_t; 2] {
    // SAFETY: the contract.
    let ((x0, x1, sx), (y0, y1, sy)) = unsafe { (act_block(p), act_block(p.add(stride))) };
    let (x0, x1, y0, y1) = (
        vreinterpretq_s64_s8(x0),
        vreinterpretq_s64_s8(x1),
        vreinterpretq_s64_s8(y0),
        vreinterpretq_s64_s8(y1),
    );
    // Step p: [column c: k 8p..8p+8, column c + 1: k 8p..8p+8].
    let av = [
        vreinterpretq_s8_s64(vzip1q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip2q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip1q_s64(x1, y1)),
        vreinterpretq_s8_s64(vzip2q_s64(x1, y1)),
    ];
    // [t_c, t_c', t_c, t_c'] in the 2 × 2 order.
    let s0 = vzip1q_s32(seed::<T>(sx), seed::<T>(sy));
    let (mut s01, mut s23) = (s0, s0);
    for (p, a) in av.into_iter().enumerate() {
        s01 = smmla(s01, wz[0][p], a);
        s23 = smmla(s23, wz[1][p], a);
    }
    // [r0 c, r1 c, r2 c, r3 c] and the same for c + 1.
    let (ix, iy) = (vuzp1q_s32(s01, s23), vuzp2q_s32(s01, s23));
    [
        block_term::<T>(acc[0], ix, dw, mw, sx),
        block_term::<T>(acc[1], iy, dw, mw, sy),
    ]
}

/// Columns `0 .. N` of quarter `q` of one group (the [`TileFn`] contract
/// for the four rows `4 q .. 4 q + 4`): column pairs with `smmla`, an odd
/// last column with `sdot`.
///
/// # Safety
/// As [`TileFn`]; the CPU supports NEON, dotprod and i8mm.
#[target_feature(enable = "neon,dotprod,i8mm")]
#[inline]
unsafe fn quarter<const T: u8, const N: usize>(t: Tile, q: usize) {
    let block = |acc: &mut [float32x4_t; N], wq: &[int8x16_t; 8], dw, mw, b| {
        // Block b of column i (`i < N`, contract).
        // SAFETY (all uses): the offset of block b of column i < N.
        let col = |i: usize| unsafe { t.act(i, b) };
        if N % 2 == 1 {
            // The odd last column first, while `wq` is live anyway.
            // SAFETY: column N - 1's block b is in bounds (contract).
            acc[N - 1] = unsafe { column::<T>(acc[N - 1], wq, dw, mw, col(N - 1)) };
        }
        let wz = row_pairs(wq);
        // Pair i (columns 2i, 2i + 1 < N): written out for each i, since
        // LLVM keeps a loop over the columns (accumulators in memory)
        // otherwise.
        macro_rules! pairs {
            ($($i:literal)*) => {$(
                if 2 * $i + 1 < N {
                    // SAFETY: columns 2i and 2i + 1 < N are in bounds (contract).
                    let [x, y] = unsafe {
                        pair::<T>([acc[2 * $i], acc[2 * $i + 1]], &wz, dw, mw, col(2 * $i), t.a_stride)
                    };
                    (acc[2 * $i], acc[2 * $i + 1]) = (x, y);
                }
            )*};
        }
        pairs!(0 1 2 3);
    };
    // SAFETY: the contract, forwarded.
    unsafe { quarter_with::<T, N>(t, q, block) }
}

/// `NR` columns of one 16-row group (the [`TileFn`] contract): the four
/// quarters in turn.
///
/// # Safety
/// As [`TileFn`]; the CPU supports NEON, dotprod and i8mm.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tile<const T: u8, const NR: usize>(t: Tile) {
    for q in 0..4 {
        // SAFETY: the contract, forwarded; quarter q < 4 of the group.
        unsafe { quarter::<T, NR>(t, q) };
    }
}

/// The `i8mm` level's kernels for `dtype` (the caller checked
/// [`available`]): the `sdot` level's quantizer and one-column tile, and
/// the `smmla` tiles for 2 ..= [`Kernels::NR`] columns.
pub(super) fn kernels(dtype: DType) -> Option<Kernels> {
    let sdot = super::aarch64_neon::kernels(dtype)?;
    let mut tiles = match dtype {
        DType::Q4_0 => tiles!(tile, Q4_0),
        DType::Q4_1 => tiles!(tile, Q4_1),
        DType::Q5_0 => tiles!(tile, Q5_0),
        DType::Q5_1 => tiles!(tile, Q5_1),
        DType::Q8_0 => tiles!(tile, Q8_0),
        _ => return None,
    };
    tiles[0] = sdot.tiles[0];
    Some(Kernels { tiles, ..sdot })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Isa;

    /// Every `smmla` tile (1 ..= 8 columns, odd widths included) returns
    /// the `sdot` tile's bits, for every type, several K, weights of
    /// random values and of extreme quants, activations with zero, tiny
    /// and large blocks.
    #[test]
    fn smmla_tiles_are_the_sdot_tiles_bit_for_bit() {
        if !available() {
            eprintln!("skipped: this CPU has no i8mm");
            return;
        }
        let mut rng = crate::conformance::Rng::new(41);
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
        ] {
            let (fast, base) = (
                kernels(dtype).unwrap(),
                super::super::aarch64_neon::kernels(dtype).unwrap(),
            );
            let quantize = crate::quant::simd::quantize_row_fn_for(Isa::Scalar, dtype).unwrap();
            for (i, k) in [32, 64, 96, 320].into_iter().enumerate() {
                let rs = dtype.row_size(k);
                let mut plain = vec![0u8; 16 * rs];
                for (r, row) in plain.chunks_exact_mut(rs).enumerate() {
                    let mut x = rng.vec(k, -1.0, 1.0);
                    if r % 5 == i % 5 {
                        // Extreme quants: ±max in every block.
                        x.iter_mut().for_each(|v| *v = v.signum());
                    }
                    quantize(&x, row);
                }
                let mut group = vec![0u8; plain.len()];
                super::super::pack(dtype, [k, 16, 1, 1], &plain, &mut group).unwrap();
                let cols: Vec<Vec<f32>> = (0..8)
                    .map(|j| match j {
                        2 => vec![0.0; k],
                        5 => rng.vec(k, -1e-30, 1e-30),
                        6 => rng.vec(k, -6e4, 6e4),
                        _ => rng.vec(k, -2.0, 1.5),
                    })
                    .collect();
                let ab = super::super::act_bytes(dtype, k);
                let mut act = vec![0u8; 8 * ab];
                for (x, o) in cols.iter().zip(act.chunks_exact_mut(ab)) {
                    // SAFETY: available() checked the CPU; k f32 in, ab bytes out.
                    unsafe { (fast.quantize)(x.as_ptr(), k / 32, o.as_mut_ptr()) };
                }
                for n in 1..=8 {
                    let run = |f: TileFn| {
                        let mut out = [0f32; 8 * 16];
                        let t = Tile {
                            w: group.as_ptr(),
                            nb: k / 32,
                            a: act.as_ptr(),
                            a_stride: ab,
                            out: out.as_mut_ptr().cast(),
                            out_stride: 64,
                        };
                        // SAFETY: available() checked the CPU; the group
                        // holds k / 32 chunks, n <= 8 columns of ab bytes,
                        // n · 16 f32 of output.
                        unsafe { f(t) };
                        out.map(f32::to_bits)
                    };
                    let (got, want) = (run(fast.tiles[n - 1]), run(base.tiles[n - 1]));
                    assert_eq!(got, want, "{dtype} k={k} n={n}");
                    assert!(
                        got[..16 * n].iter().any(|&b| b != 0),
                        "{dtype} k={k} n={n}: outputs written"
                    );
                }
            }
        }
    }
}

//! What the K-quant kernels of both x86 widths share, written once over
//! [`IntLanes`] (`__m256i` for `x86_avx2_k.rs` / `x86_avx2_k23.rs`, eight
//! rows per register; `__m512i` for `x86_k/`, sixteen): the Q8_K block
//! offsets, the step fence, the bsums terms, the quant bit decoders whose
//! shifts depend on the sub-block, and the two f32 epilogues, which are
//! the scalar reference's so that every width returns its bits.
//!
//! Every function is `#[inline(always)]`: each runs inside a kernel with
//! the width's `#[target_feature]`, which the operations need.

use crate::isa::x86::{IntLanes, Lanes};

/// Offset of a Q8_K block's 256 i8 quants (its f32 `d` is at 0).
pub(super) const QS: usize = 4;
/// Offset of a Q8_K block's 16 i16 bsums.
pub(super) const BSUMS: usize = 4 + 256;

/// Ends a step: each of `v` passes through an empty `asm!` statement that
/// may read and write memory ([`IntLanes::fence`]), so the step's work
/// (which `v` sums) is done before it and the next step's loads (and what
/// is computed from them) come after it. Without it the compiler
/// interleaved the 16 steps of a super-block column by column and spilled
/// the decoded quants: the 4-column AVX2 Q2_K and Q3_K halves made over
/// 200 stack accesses each (under 40 with it), and packed Q2_K at 576 ×
/// 1536 × 512 took 15.2 against 11.9 ms on one thread.
///
/// # Safety
/// The width's CPU features.
#[inline(always)]
pub(super) unsafe fn fence<V: IntLanes, const N: usize>(v: &mut [V; N]) {
    for v in v {
        // SAFETY: the contract.
        *v = unsafe { V::fence(*v) };
    }
}

/// `Σ_i pairs(i) · bsums dword i` per column: `wdot(acc, pair, bsums)` (the
/// level's i16-pair multiply-add: `vpmaddwd` and `vpaddd`, or `vpdpwssd`) of
/// the i16 pair per lane of sub-blocks `2i, 2i + 1` with the broadcast
/// bsums dword `i` of each Q8_K block `cols`.
///
/// # Safety
/// The Q8_K blocks `cols` are readable; the width's CPU features.
#[inline(always)]
pub(super) unsafe fn bsums_dot<V: IntLanes, const N: usize>(
    cols: &[*const u8; N],
    pairs: impl Fn(usize) -> V,
    wdot: impl Fn(V, V, V) -> V,
) -> [V; N] {
    // SAFETY: the width's features (contract).
    let mut acc = [unsafe { V::zero() }; N];
    for i in 0..8 {
        let m = pairs(i);
        for (acc, &p) in acc.iter_mut().zip(cols) {
            // SAFETY: bsums dword i (bsums 2i, 2i + 1) of the block.
            let y = unsafe { V::bcast(p.add(BSUMS + 4 * i)) };
            *acc = wdot(*acc, m, y);
        }
    }
    acc
}

/// `(d_w d_a) · f32(isum)` per column (the Q3_K / Q6_K / IQ4_XS
/// epilogue), with the rows' f16 `d` at `d` (one per lane) and each Q8_K
/// block's f32 `d` (its first four bytes).
///
/// # Safety
/// The f16 at `d` and the blocks' `d` are readable; the width's CPU
/// features.
#[inline(always)]
pub(super) unsafe fn terms<V: IntLanes, const N: usize>(
    d: *const u8,
    cols: &[*const u8; N],
    isum: [V; N],
) -> [<V::F as Lanes>::V; N] {
    // SAFETY: the contract (every read below is one it names).
    unsafe {
        let d = V::F::load_h(d.cast());
        let mut out = [V::F::zero(); N];
        for i in 0..N {
            let dy = V::F::splat(cols[i].cast::<f32>().read_unaligned());
            out[i] = V::F::mul(V::F::mul(d, dy), V::to_f32(isum[i]));
        }
        out
    }
}

/// `(d_w d_a) · f32(isum) - (dmin_w d_a) · f32(summs)` per column (the
/// Q2_K / Q4_K / Q5_K epilogue), as [`terms`] with the rows' f16 `dmin` at
/// `dmin`: separate multiplies, then the subtraction.
///
/// # Safety
/// As [`terms`], and the f16 at `dmin`.
#[inline(always)]
pub(super) unsafe fn min_terms<V: IntLanes, const N: usize>(
    d: *const u8,
    dmin: *const u8,
    cols: &[*const u8; N],
    isum: [V; N],
    summs: [V; N],
) -> [<V::F as Lanes>::V; N] {
    // SAFETY: the contract.
    let mut out = unsafe { terms(d, cols, isum) };
    // SAFETY: as above.
    unsafe {
        let dmin = V::F::load_h(dmin.cast());
        for i in 0..N {
            let dy = V::F::splat(cols[i].cast::<f32>().read_unaligned());
            let m = V::F::mul(V::F::mul(dmin, dy), V::to_f32(summs[i]));
            out[i] = V::F::sub(out[i], m);
        }
    }
    out
}

/// Q3_K's unsigned quants `q' = q2 | hbit << 2 ≤ 7` per byte: `q2` bits
/// `2k, 2k + 1` of the `qs` line `x`, the high bit bit `4 hh + k` of the
/// `hmask` line `hm` (the same element order at both widths).
///
/// # Safety
/// The width's CPU features.
#[inline(always)]
pub(super) unsafe fn q3_bits<V: IntLanes>(x: V, hm: V, hh: usize, k: usize) -> V {
    // SAFETY: the contract.
    unsafe {
        let q2 = V::and(V::shr16(x, 2 * k), V::splat8(3));
        // Bit b = 4hh + k of each byte to bit 2 by one i16 shift: the low
        // byte's bit 2 takes its own bit b and the high byte's bit 10 its
        // bit 8 + b (b ≤ 7), whatever crosses the byte boundary is masked.
        let b = 4 * hh + k;
        let hb = if b >= 2 {
            V::shr16(hm, b - 2)
        } else {
            V::shl16(hm, 2 - b)
        };
        V::or(q2, V::and(hb, V::splat8(4)))
    }
}

/// Q5_K's quants of sub-block `j`: the nibbles `q` with bit `j` of each
/// byte of the fifth-bit line `qh` as bit 4. One i16 shift by a constant
/// where `j` is one (the tiles' steps; a `match` on a run-time `j` once
/// became a jump table, measured at a third of Q4_K's speed), then the mask
/// drops what crossed a byte.
///
/// # Safety
/// The width's CPU features.
#[inline(always)]
pub(super) unsafe fn fifth_bit<V: IntLanes>(q: V, qh: V, j: usize) -> V {
    // SAFETY: the contract.
    unsafe {
        let x = if j <= 4 {
            V::shl16(qh, 4 - j)
        } else {
            V::shr16(qh, j - 4)
        };
        V::or(q, V::and(x, V::splat8(0x10)))
    }
}

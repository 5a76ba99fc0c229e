//! aarch64 NEON kernels over the packed K-quant layout (`k.rs`): Q2_K ..
//! Q6_K and IQ4_XS weights times Q8_K activation columns, with `sdot` (the
//! `dotprod` extension, detected at run time; CPUs without it keep the
//! unpacking path, [`super::has_kernels`]).
//!
//! The register shape is the legacy NEON kernels' (`aarch64_neon.rs`): a
//! 16-row group is four *quarters*, bytes `16 q .. 16 q + 16` of every
//! 64-byte dword line are rows `4 q .. 4 q + 4`, one row per i32 lane, and
//! `sdot v.4s, w.16b, a.4b[L]` adds `Σ_t w[4 r + t] · a[4 L + t]` to lane
//! `r`: a quant register holding body dword `tq` of four rows meets the
//! activation dword of the same elements by lane index, with no broadcast.
//! One 16-byte activation register (16 Q8_K quants) serves four quant
//! registers ([`dot4`]).
//!
//! Per super-block, quarter and column the integer sums are exact for any
//! weight bytes and any i8 activations (every sub-block sum is at most
//! 32 · 127 · 128 in magnitude, every scaled sum far below 2^31):
//! - Q4_K / Q5_K: per half of a 32-element sub-block `j`, four quant
//!   registers (low nibbles of four quant lines for even `j`, high nibbles
//!   of the same lines for odd `j`; Q5_K: bit `j` of the fifth-bit lines as
//!   bit 4), four `sdot` into a fresh accumulator, then one `mla` by the
//!   sub-block's 6-bit scale (per lane: each row its own):
//!   `isum = Σ_j s_j Σ q a`; the minimum term
//!   `summs = Σ_j m_j (bsums_2j + bsums_2j+1)` is eight `mla` by lanes of
//!   the column's pairwise-added bsums. Tiles of more than four columns
//!   run as two passes ([`tile`]), as do IQ4_XS's.
//! - Q6_K: per 16-element sub-block, four quant registers (from the
//!   re-coded quants of `k.rs`: six bits masked, or a nibble and a bit pair
//!   joined by `sli`, minus 32: signed −32 ..= 31),
//!   four `sdot`, one `mla` by the i8 scale; sub-blocks `k` and `k + 2`
//!   share their lines and are decoded together.
//! - Q2_K: as Q6_K with the 2-bit crumbs (0 ..= 3), the low nibble of the
//!   scale byte as scale; the minimum term is `Σ_j (scale byte >> 4) ·
//!   bsums_j`, sixteen `mla` by lanes of the column's bsums.
//! - Q3_K: as Q2_K with `crumb - 4` where the `hmask` bit is clear (signed
//!   −4 ..= 3), the 6-bit scales of ggml's 12-byte form minus 32.
//! - IQ4_XS: per 32-element sub-block, four quant lines looked up in the
//!   table (`tbl`, signed −127 ..= 113), low nibbles against one activation
//!   register and high nibbles against the next, one `mla` by the 6-bit
//!   scale minus 32.
//!
//! The scales and mins are decoded once per super-block and quarter from
//! the scale lines, four rows at once (the byte masks and shifts of ggml's
//! `kmask` trick, per 32-bit lane), and the quant registers once per
//! sub-block and quarter; every column of the tile reuses them.
//!
//! The f32 epilogue is the scalar reference's ([`crate::quant::vec_dot_fn`]
//! at `Scalar`): per super-block `(d_w d_a) · f32(isum) - (dmin_w d_a) ·
//! f32(summs)` (without a minimum: `(d_w d_a) · f32(isum)`) with separate
//! multiplies and subtraction (`fmul`, `fsub`: nothing fused), added to the
//! row's sum in super-block order, so every output is the reference's bits
//! whatever the tile width or thread count.
//!
//! `sdot` by element and the f16 → f32 widening (`fcvtl`) are
//! `aarch64_neon.rs`'s inline assembly (their intrinsics are not stable
//! Rust). Every kernel is an `unsafe fn` with
//! `#[target_feature(enable = "neon,dotprod")]`, reached only through
//! [`kernels`], which fills the NEON level's table (`super::aarch64_neon`)
//! on a CPU with `dotprod`.

use super::aarch64_neon::{f16x4, sdot_lane};
use super::k::{IQ4_XS_LINES, Q2_K_D, Q3_K_D, Q4_K_LINES, Q5_K_LINES, Q6_K_D};
use super::tags::{k_kernel_table, tiles, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use super::{Kernels, Tile, TileFn};
use crate::isa::Isa;
use crate::tensor::DType;
use std::arch::aarch64::*;

/// Bytes of a Q8_K block: f32 `d` at 0, quants at [`QS`], i16 bsums at [`BSUMS`].
const Q8K: usize = DType::Q8_K.type_size();
/// Offset of a Q8_K block's 256 i8 quants.
const QS: usize = 4;
/// Offset of a Q8_K block's 16 i16 bsums.
const BSUMS: usize = 4 + 256;

/// Packed chunk bytes (16 rows × one super-block) of type tag `t`.
const fn chunk(t: u8) -> usize {
    16 * match t {
        Q2_K => DType::Q2_K.type_size(),
        Q3_K => DType::Q3_K.type_size(),
        Q4_K => DType::Q4_K.type_size(),
        Q5_K => DType::Q5_K.type_size(),
        IQ4_XS => DType::IQ4_XS.type_size(),
        _ => DType::Q6_K.type_size(),
    }
}

/// `acc` plus, per lane `r`, `Σ_L Σ_t w[L][4 r + t] · a[4 L + t]`: four
/// quant registers (body dwords `tq .. tq + 4`) against the activation
/// register of the same 16 elements.
#[target_feature(enable = "neon,dotprod")]
#[inline]
fn dot4(acc: int32x4_t, w: [int8x16_t; 4], a: int8x16_t) -> int32x4_t {
    let acc = sdot_lane::<0>(acc, w[0], a);
    let acc = sdot_lane::<1>(acc, w[1], a);
    let acc = sdot_lane::<2>(acc, w[2], a);
    sdot_lane::<3>(acc, w[3], a)
}

/// The four f16 at `p` (the quarter's rows of a header field) as f32.
///
/// # Safety
/// `p .. p + 8` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn f16_at(p: *const u8) -> float32x4_t {
    // SAFETY: the caller guarantees the 8 bytes.
    f16x4(unsafe { vld1_u16(p.cast()) })
}

/// 16 bytes at `p` (a quarter of a line).
///
/// # Safety
/// `p .. p + 16` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn ld(p: *const u8) -> uint8x16_t {
    // SAFETY: the caller guarantees the 16 bytes.
    unsafe { vld1q_u8(p) }
}

/// The 16 activation quants `16 g .. 16 g + 16` of the Q8_K block at `p`.
///
/// # Safety
/// The Q8_K block at `p` must be readable, `g < 16`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn act(p: *const u8, g: usize) -> int8x16_t {
    // SAFETY: the caller guarantees the block; quants QS + 16g .. + 16.
    unsafe { vld1q_s8(p.add(QS + 16 * g).cast()) }
}

/// The f32 `d` of the Q8_K block at `p`.
///
/// # Safety
/// `p .. p + 4` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn act_d(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the four bytes.
    unsafe { p.cast::<f32>().read_unaligned() }
}

/// Byte `k` (`k < 4`) of every 32-bit lane of `v`, zero-extended.
#[target_feature(enable = "neon")]
#[inline]
fn ubyte(v: uint32x4_t, k: usize) -> int32x4_t {
    let x = vshlq_u32(v, vdupq_n_s32(-8 * k as i32));
    vreinterpretq_s32_u32(vandq_u32(x, vdupq_n_u32(0xff)))
}

/// Byte `k` (`k < 4`) of every 32-bit lane of `v`, sign-extended (for a
/// constant `k`: one or two immediate shifts).
#[target_feature(enable = "neon")]
#[inline]
fn sbyte(v: uint32x4_t, k: usize) -> int32x4_t {
    let v = vreinterpretq_s32_u32(v);
    match k {
        0 => vshrq_n_s32::<24>(vshlq_n_s32::<24>(v)),
        1 => vshrq_n_s32::<24>(vshlq_n_s32::<16>(v)),
        2 => vshrq_n_s32::<24>(vshlq_n_s32::<8>(v)),
        _ => vshrq_n_s32::<24>(v),
    }
}

/// The line as four u32 lanes (one per row).
#[target_feature(enable = "neon")]
#[inline]
fn u32s(v: uint8x16_t) -> uint32x4_t {
    vreinterpretq_u32_u8(v)
}

/// Bits `2 k, 2 k + 1` (`k < 4`) of every byte of `v`, as 0 ..= 3.
#[target_feature(enable = "neon")]
#[inline]
fn crumb(v: uint8x16_t, k: usize) -> uint8x16_t {
    vandq_u8(vshlq_u8(v, vdupq_n_s8(-2 * k as i8)), vdupq_n_u8(3))
}

/// The per-column f32 terms of a type without a minimum:
/// `(d_w d_a) · f32(isum)` with the quarter's four `d_w` in `d`.
///
/// # Safety
/// The Q8_K blocks `cols` are readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn plain_terms<const N: usize>(
    d: float32x4_t,
    cols: [*const u8; N],
    isum: [int32x4_t; N],
) -> [float32x4_t; N] {
    std::array::from_fn(|i| {
        // SAFETY: the caller guarantees the block.
        let dy = unsafe { act_d(cols[i]) };
        vmulq_f32(vmulq_n_f32(d, dy), vcvtq_f32_s32(isum[i]))
    })
}

/// The per-column f32 terms of a type with a minimum: `(d_w d_a) ·
/// f32(isum) - (dmin_w d_a) · f32(summs)`.
///
/// # Safety
/// The Q8_K blocks `cols` are readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn min_terms<const N: usize>(
    d: float32x4_t,
    dmin: float32x4_t,
    cols: [*const u8; N],
    isum: [int32x4_t; N],
    summs: [int32x4_t; N],
) -> [float32x4_t; N] {
    std::array::from_fn(|i| {
        // SAFETY: the caller guarantees the block.
        let dy = unsafe { act_d(cols[i]) };
        let t = vmulq_f32(vmulq_n_f32(d, dy), vcvtq_f32_s32(isum[i]));
        let m = vmulq_f32(vmulq_n_f32(dmin, dy), vcvtq_f32_s32(summs[i]));
        vsubq_f32(t, m)
    })
}

/// The i32 sums of the column's 16 bsums, in pairs: lane `t` of
/// `[0]` is `bsums_2t + bsums_2t+1`, of `[1]` the same for `t + 4`.
///
/// # Safety
/// The Q8_K block at `p` is readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn bsum_pairs(p: *const u8) -> [int32x4_t; 2] {
    // SAFETY: the caller guarantees the block; bsums at BSUMS .. + 32.
    let (b0, b1) = unsafe {
        let b = p.add(BSUMS).cast::<i16>();
        (vld1q_s16(b), vld1q_s16(b.add(8)))
    };
    [vpaddlq_s16(b0), vpaddlq_s16(b1)]
}

/// `Σ_{t<4} m[t] · p[t]` (lane `t` of `p`, the same for every lane of
/// `m[t]`) added to `acc`.
#[target_feature(enable = "neon")]
#[inline]
fn mla_lanes(acc: int32x4_t, m: &[int32x4_t], p: int32x4_t) -> int32x4_t {
    let acc = vmlaq_laneq_s32::<0>(acc, m[0], p);
    let acc = vmlaq_laneq_s32::<1>(acc, m[1], p);
    let acc = vmlaq_laneq_s32::<2>(acc, m[2], p);
    vmlaq_laneq_s32::<3>(acc, m[3], p)
}

/// One Q4_K (`Q5` false) or Q5_K (`Q5` true) super-block (chunk at `c`,
/// quarter `q`) against the Q8_K blocks `cols`: per column the four rows'
/// f32 terms.
///
/// # Safety
/// The chunk and the Q8_K blocks are readable; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q45_k<const Q5: bool, const N: usize>(
    c: *const u8,
    q: usize,
    cols: [*const u8; N],
) -> [float32x4_t; N] {
    let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
    let line = |w: usize| c.wrapping_add(lines + 64 * w + 16 * q);
    // First quant line: after the scales (and Q5_K's eight fifth-bit lines).
    let qs = if Q5 { 11 } else { 3 };
    // SAFETY: the three scale lines are inside the chunk.
    let (a, bm, cc) = unsafe { (u32s(ld(line(0))), u32s(ld(line(1))), u32s(ld(line(2)))) };
    let (m6, m4, top) = (
        vdupq_n_u32(0x3f3f_3f3f),
        vdupq_n_u32(0x0f0f_0f0f),
        vdupq_n_u32(0x3030_3030),
    );
    // Lane bytes: scales 0..4, 4..8, mins 0..4, 4..8 of the lane's row.
    let sc = [
        vandq_u32(a, m6),
        vorrq_u32(vandq_u32(cc, m4), vandq_u32(vshrq_n_u32::<2>(a), top)),
    ];
    let mn = [
        vandq_u32(bm, m6),
        vorrq_u32(
            vandq_u32(vshrq_n_u32::<4>(cc), m4),
            vandq_u32(vshrq_n_u32::<2>(bm), top),
        ),
    ];
    let (nib, m10) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x10));
    let mut isum = [vdupq_n_s32(0); N];
    // Step (jp, h): quant lines qs + 8 jp + 4 h .. + 4, whose low nibbles
    // are dwords 4h .. 4h + 4 of sub-block 2 jp and high nibbles those of
    // sub-block 2 jp + 1 (Q5_K: bits 2 jp, 2 jp + 1 of fifth-bit lines
    // 3 + 4 h .. as bit 4). Each half sub-block is scaled on its own (the
    // scale distributes over the exact sums). Written out so that every
    // shift and scale lane is a constant.
    macro_rules! step {
        ($jp:literal, $h:literal) => {{
            let (ja, jb) = (2 * $jp, 2 * $jp + 1);
            let mut w = [[vdupq_n_s8(0); 4]; 2];
            for t in 0..4 {
                // SAFETY: quant line qs + 8jp + 4h + t is inside the chunk.
                let x = unsafe { ld(line(qs + 8 * $jp + 4 * $h + t)) };
                let (mut lo, mut hi) = (vandq_u8(x, nib), vshrq_n_u8::<4>(x));
                if Q5 {
                    // SAFETY: fifth-bit line 3 + 4h + t is inside the chunk.
                    let qh = unsafe { ld(line(3 + 4 * $h + t)) };
                    let at4 = |j: i8| vshlq_u8(qh, vdupq_n_s8(4 - j));
                    lo = vbslq_u8(m10, at4(ja as i8), lo);
                    hi = vbslq_u8(m10, at4(jb as i8), hi);
                }
                w[0][t] = vreinterpretq_s8_u8(lo);
                w[1][t] = vreinterpretq_s8_u8(hi);
            }
            let (sa, sb) = (ubyte(sc[ja / 4], ja % 4), ubyte(sc[jb / 4], jb % 4));
            for (acc, &p) in isum.iter_mut().zip(&cols) {
                // SAFETY: activation quants 32j + 16h .. + 16 of the block.
                let (ya, yb) = unsafe { (act(p, 2 * ja + $h), act(p, 2 * jb + $h)) };
                let da = dot4(vdupq_n_s32(0), w[0], ya);
                let db = dot4(vdupq_n_s32(0), w[1], yb);
                *acc = vmlaq_s32(vmlaq_s32(*acc, da, sa), db, sb);
            }
        }};
    }
    step!(0, 0);
    step!(0, 1);
    step!(1, 0);
    step!(1, 1);
    step!(2, 0);
    step!(2, 1);
    step!(3, 0);
    step!(3, 1);
    let m: [int32x4_t; 8] = std::array::from_fn(|j| ubyte(mn[j / 4], j % 4));
    let summs: [int32x4_t; N] = std::array::from_fn(|i| {
        // SAFETY: the caller guarantees the block.
        let p = unsafe { bsum_pairs(cols[i]) };
        mla_lanes(mla_lanes(vdupq_n_s32(0), &m[..4], p[0]), &m[4..], p[1])
    });
    // SAFETY: the 16 f16 `d` at 0 and `dmin` at 32 are inside the chunk.
    unsafe {
        let (d, dmin) = (f16_at(c.add(8 * q)), f16_at(c.add(32 + 8 * q)));
        min_terms(d, dmin, cols, isum, summs)
    }
}

/// The Q6_K quants of `k = KP` and `k = KP + 2` from one line of the
/// re-coded quants (`k.rs`: `P'` for `KP = 0`, `Q'` for 1) and its `R'`
/// line: bits 0..6 of `P'` / `Q'`, and the nibble of `R'` (low for
/// `KP = 0`, high for 1) with bits 6, 7 of `P'` / `Q'` above it, each
/// minus 32 (signed −32 ..= 31); `sli` puts nibble and bit pair side by
/// side in one instruction.
#[target_feature(enable = "neon")]
#[inline]
fn q6_quants<const KP: usize>(pq: uint8x16_t, r: uint8x16_t) -> [int8x16_t; 2] {
    let (m6, off) = (vdupq_n_u8(0x3f), vdupq_n_u8(32));
    let nib = if KP == 0 { r } else { vshrq_n_u8::<4>(r) };
    let (lo, hi) = (vandq_u8(pq, m6), vsliq_n_u8::<4>(nib, vshrq_n_u8::<6>(pq)));
    [
        vreinterpretq_s8_u8(vsubq_u8(lo, off)),
        vreinterpretq_s8_u8(vsubq_u8(hi, off)),
    ]
}

/// One Q6_K super-block (chunk at `c`, quarter `q`) against the Q8_K
/// blocks `cols`: per column the four rows' f32 terms.
///
/// Element `128 hh + 32 k + l` in the re-coded quants (`k.rs`): for
/// `k < 2` bits 0..6 of dword `16 hh + 8 k + l / 4`; for `k ≥ 2` the low
/// (`k = 2`) or high nibble of dword `32 + 8 hh + l / 4` below bits 6, 7 of
/// dword `16 hh + 8 (k - 2) + l / 4`; sub-block `8 hh + 2 k + l / 16`. Each step
/// takes four `ql` lines and their `qh` lines once, for the two sub-blocks
/// `k` and `k + 2` that share them; the steps are written out so that every
/// shift and scale lane is a constant.
///
/// # Safety
/// The chunk and the Q8_K blocks are readable; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q6_k<const N: usize>(c: *const u8, q: usize, cols: [*const u8; N]) -> [float32x4_t; N] {
    let line = |w: usize| c.wrapping_add(64 * w + 16 * q);
    // SAFETY: the four scale lines (body dwords 48..52) are inside the chunk.
    let sc: [uint32x4_t; 4] = std::array::from_fn(|p| unsafe { u32s(ld(line(48 + p))) });
    let mut isum = [vdupq_n_s32(0); N];
    macro_rules! step {
        ($hh:literal, $kp:literal, $e:literal) => {{
            let mut w = [[vdupq_n_s8(0); 4]; 2];
            for t in 0..4 {
                let tq = 4 * $e + t;
                // SAFETY: ql line 16hh + 8kp + tq and qh line 32 + 8hh + tq
                // are inside the chunk.
                let (ql, qh) = unsafe {
                    (
                        ld(line(16 * $hh + 8 * $kp + tq)),
                        ld(line(32 + 8 * $hh + tq)),
                    )
                };
                let [a, b] = q6_quants::<$kp>(ql, qh);
                w[0][t] = a;
                w[1][t] = b;
            }
            let ja = 8 * $hh + 2 * $kp + $e;
            let jb = ja + 4;
            let (sa, sb) = (sbyte(sc[ja / 4], ja % 4), sbyte(sc[jb / 4], jb % 4));
            for (acc, &p) in isum.iter_mut().zip(&cols) {
                // SAFETY: activation quants 16j .. 16j + 16 of the block.
                let (ya, yb) = unsafe { (act(p, ja), act(p, jb)) };
                let da = dot4(vdupq_n_s32(0), w[0], ya);
                let db = dot4(vdupq_n_s32(0), w[1], yb);
                *acc = vmlaq_s32(vmlaq_s32(*acc, da, sa), db, sb);
            }
        }};
    }
    step!(0, 0, 0);
    step!(0, 0, 1);
    step!(0, 1, 0);
    step!(0, 1, 1);
    step!(1, 0, 0);
    step!(1, 0, 1);
    step!(1, 1, 0);
    step!(1, 1, 1);
    // SAFETY: the 16 f16 `d` at Q6_K_D are inside the chunk.
    unsafe { plain_terms(f16_at(c.add(Q6_K_D + 8 * q)), cols, isum) }
}

/// One IQ4_XS super-block (chunk at `c`, quarter `q`) against the Q8_K
/// blocks `cols`: per column the four rows' f32 terms. Sub-block `j`'s
/// quant lines are `1 + 4 j + t`: low nibbles elements `32 j + 4 t ..`,
/// high nibbles `32 j + 16 + 4 t ..`.
///
/// # Safety
/// The chunk and the Q8_K blocks are readable; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn iq4_xs<const N: usize>(c: *const u8, q: usize, cols: [*const u8; N]) -> [float32x4_t; N] {
    let line = |w: usize| c.wrapping_add(IQ4_XS_LINES + 64 * w + 16 * q);
    // SAFETY: IQ4_NL_VALUES is 16 readable bytes; line 0 (scales_l) and the
    // four u16 scales_h of quarter q are inside the chunk.
    let (table, sl, sh) = unsafe {
        (
            vld1q_s8(crate::quant::IQ4_NL_VALUES.as_ptr()),
            u32s(ld(line(0))),
            vmovl_u16(vld1_u16(c.add(32 + 8 * q).cast())),
        )
    };
    let nib = vdupq_n_u8(0x0f);
    let mut isum = [vdupq_n_s32(0); N];
    for j in 0..8 {
        // s_j = (nibble j of scales_l | bits 2j, 2j + 1 of scales_h << 4) - 32.
        let lo4 = vandq_u32(vshlq_u32(sl, vdupq_n_s32(-4 * j as i32)), vdupq_n_u32(0x0f));
        let hi2 = vandq_u32(
            vshlq_u32(sh, vdupq_n_s32(4 - 2 * j as i32)),
            vdupq_n_u32(0x30),
        );
        let scale = vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(lo4, hi2)), vdupq_n_s32(32));
        let mut lo = [vdupq_n_s8(0); 4];
        let mut hi = [vdupq_n_s8(0); 4];
        for t in 0..4 {
            // SAFETY: quant line 1 + 4j + t is inside the chunk.
            let x = unsafe { ld(line(1 + 4 * j + t)) };
            lo[t] = vqtbl1q_s8(table, vandq_u8(x, nib));
            hi[t] = vqtbl1q_s8(table, vshrq_n_u8::<4>(x));
        }
        for (acc, &p) in isum.iter_mut().zip(&cols) {
            // SAFETY: activation quants 32j .. 32j + 32 of the block.
            let (y0, y1) = unsafe { (act(p, 2 * j), act(p, 2 * j + 1)) };
            let s = dot4(dot4(vdupq_n_s32(0), lo, y0), hi, y1);
            *acc = vmlaq_s32(*acc, s, scale);
        }
    }
    // SAFETY: the 16 f16 `d` at 0 are inside the chunk.
    unsafe { plain_terms(f16_at(c.add(8 * q)), cols, isum) }
}

/// One Q2_K (`Q3` false) or Q3_K (`Q3` true) super-block (chunk at `c`,
/// quarter `q`) against the Q8_K blocks `cols`: per column the four rows'
/// f32 terms.
///
/// Element `128 n + 32 k + l`: crumb `k` of `qs` byte `32 n + l` (Q2_K:
/// line `4 + 8 n + l / 4`, Q3_K: `8 + 8 n + l / 4`); Q3_K's high bit is bit
/// `4 n + k` of `hmask` byte `l` (line `l / 4`); sub-block `8 n + 2 k + l / 16`.
///
/// # Safety
/// The chunk and the Q8_K blocks are readable; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q23_k<const Q3: bool, const N: usize>(
    c: *const u8,
    q: usize,
    cols: [*const u8; N],
) -> [float32x4_t; N] {
    let line = |w: usize| c.wrapping_add(64 * w + 16 * q);
    // Per lane, bytes 0..4 of sc[g] are the row's scale bytes 4g .. 4g + 4
    // (Q2_K: scale | min << 4; Q3_K: the 6-bit scale + 32).
    let sc: [uint32x4_t; 4] = if Q3 {
        // SAFETY: the three scale lines 24..27 are inside the chunk.
        let (a0, a1, a2) = unsafe { (u32s(ld(line(24))), u32s(ld(line(25))), u32s(ld(line(26)))) };
        let nib = vdupq_n_u32(0x0f0f_0f0f);
        let top = |g: i32| {
            let x = vandq_u32(vshlq_u32(a2, vdupq_n_s32(-2 * g)), vdupq_n_u32(0x0303_0303));
            vshlq_n_u32::<4>(x)
        };
        [
            vorrq_u32(vandq_u32(a0, nib), top(0)),
            vorrq_u32(vandq_u32(a1, nib), top(1)),
            vorrq_u32(vandq_u32(vshrq_n_u32::<4>(a0), nib), top(2)),
            vorrq_u32(vandq_u32(vshrq_n_u32::<4>(a1), nib), top(3)),
        ]
    } else {
        // SAFETY: the four scale lines 0..4 are inside the chunk.
        std::array::from_fn(|p| unsafe { u32s(ld(line(p))) })
    };
    let qs = if Q3 { 8 } else { 4 };
    let mut isum = [vdupq_n_s32(0); N];
    for n in 0..2 {
        for k in 0..4 {
            for e in 0..2 {
                let j = 8 * n + 2 * k + e;
                let b = ubyte(sc[j / 4], j % 4);
                let scale = if Q3 {
                    vsubq_s32(b, vdupq_n_s32(32))
                } else {
                    vandq_s32(b, vdupq_n_s32(0x0f))
                };
                let w: [int8x16_t; 4] = std::array::from_fn(|t| {
                    let tq = 4 * e + t;
                    // SAFETY: qs line qs + 8n + tq is inside the chunk.
                    let x = crumb(unsafe { ld(line(qs + 8 * n + tq)) }, k);
                    let x = if Q3 {
                        // SAFETY: hmask line tq is inside the chunk.
                        let h = unsafe { ld(line(tq)) };
                        let set = vtstq_u8(h, vdupq_n_u8(1 << (4 * n + k)));
                        vsubq_u8(x, vbicq_u8(vdupq_n_u8(4), set))
                    } else {
                        x
                    };
                    vreinterpretq_s8_u8(x)
                });
                for (acc, &p) in isum.iter_mut().zip(&cols) {
                    // SAFETY: activation quants 16j .. 16j + 16 of the block.
                    let y = unsafe { act(p, j) };
                    *acc = vmlaq_s32(*acc, dot4(vdupq_n_s32(0), w, y), scale);
                }
            }
        }
    }
    if Q3 {
        // SAFETY: the 16 f16 `d` at Q3_K_D are inside the chunk.
        return unsafe { plain_terms(f16_at(c.add(Q3_K_D + 8 * q)), cols, isum) };
    }
    // Q2_K's minimum term: Σ_j (scale byte j >> 4) · bsums_j.
    let m: [int32x4_t; 16] = std::array::from_fn(|j| {
        vreinterpretq_s32_u32(vshrq_n_u32::<4>(vreinterpretq_u32_s32(ubyte(
            sc[j / 4],
            j % 4,
        ))))
    });
    let summs: [int32x4_t; N] = std::array::from_fn(|i| {
        // SAFETY: the caller guarantees the block; bsums at BSUMS .. + 32.
        let (b0, b1) = unsafe {
            let b = cols[i].add(BSUMS).cast::<i16>();
            (vld1q_s16(b), vld1q_s16(b.add(8)))
        };
        let b = [
            vmovl_s16(vget_low_s16(b0)),
            vmovl_high_s16(b0),
            vmovl_s16(vget_low_s16(b1)),
            vmovl_high_s16(b1),
        ];
        let mut s = vdupq_n_s32(0);
        for (g, &bg) in b.iter().enumerate() {
            s = mla_lanes(s, &m[4 * g..4 * g + 4], bg);
        }
        s
    });
    // SAFETY: the 16 f16 `d` at Q2_K_D and `dmin` after them are inside the chunk.
    unsafe {
        let (d, dmin) = (
            f16_at(c.add(Q2_K_D + 8 * q)),
            f16_at(c.add(Q2_K_D + 32 + 8 * q)),
        );
        min_terms(d, dmin, cols, isum, summs)
    }
}

/// Columns `0 .. N` of quarter `q` of one K-quant group of type `T` (the
/// [`TileFn`] contract for rows `4 q .. 4 q + 4`).
///
/// # Safety
/// As [`TileFn`] (the columns are Q8_K rows of `t.nb` blocks); the CPU
/// supports NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn quarter<const T: u8, const N: usize>(t: Tile, q: usize) {
    let mut acc = [vdupq_n_f32(0.0); N];
    for b in 0..t.nb {
        // SAFETY: chunk b and block b of every column are in bounds (contract).
        let (c, cols): (*const u8, [*const u8; N]) = unsafe {
            (
                t.w.add(b * chunk(T)),
                std::array::from_fn(|i| t.a.add(i * t.a_stride + b * Q8K)),
            )
        };
        // SAFETY: as above; the CPU has NEON and dotprod (contract).
        let terms = unsafe {
            match T {
                Q2_K => q23_k::<false, N>(c, q, cols),
                Q3_K => q23_k::<true, N>(c, q, cols),
                Q4_K => q45_k::<false, N>(c, q, cols),
                Q5_K => q45_k::<true, N>(c, q, cols),
                IQ4_XS => iq4_xs::<N>(c, q, cols),
                _ => q6_k::<N>(c, q, cols),
            }
        };
        for (acc, t) in acc.iter_mut().zip(terms) {
            *acc = vaddq_f32(*acc, t);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY: rows 4q .. 4q + 4 of column i are writable (contract).
        unsafe { vst1q_f32(t.out.add(i * t.out_stride + 16 * q).cast(), *acc) };
    }
}

/// `N` columns of one 16-row group (the [`TileFn`] contract): the four
/// quarters in turn. Q4_K and IQ4_XS take more than four columns as two
/// passes (four columns, then the rest): their eight-column quarters run
/// out of vector registers (measured: more instructions per column than
/// two passes, whose second one decodes the quants again); the other types'
/// wide quarters are cheaper per column.
///
/// # Safety
/// As [`TileFn`]; the CPU supports NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile<const T: u8, const N: usize>(t: Tile) {
    if N > 4 && (T == Q4_K || T == IQ4_XS) {
        // Columns 4 .. N: the same tile, shifted (its width is N - 4).
        let rest = Tile {
            a: t.a.wrapping_add(4 * t.a_stride),
            out: t.out.wrapping_add(4 * t.out_stride),
            ..t
        };
        // SAFETY: the contract, forwarded: columns 0 .. 4 and 4 .. N are
        // columns of the caller's tile.
        unsafe {
            tile::<T, 4>(t);
            match N {
                5 => tile::<T, 1>(rest),
                6 => tile::<T, 2>(rest),
                7 => tile::<T, 3>(rest),
                _ => tile::<T, 4>(rest),
            }
        }
        return;
    }
    for q in 0..4 {
        // SAFETY: the contract, forwarded; quarter q < 4 of the group.
        unsafe { quarter::<T, N>(t, q) };
    }
}

k_kernel_table!(Isa::Neon);

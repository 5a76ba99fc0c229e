//! aarch64 NEON dot products of Q2_K .. Q6_K and IQ4_XS with Q8_K, and of
//! IQ4_NL with Q8_0; [`super`]'s table lists them.
//!
//! Each returns the scalar reference's result bit for bit: a super-block's
//! (IQ4_NL: block's) integer sums are exact for any input bytes, and its f32
//! term is formed and added as the scalar reference does, in block order.
//!
//! Every kernel is one generic body over the integer-sum primitive
//! ([`Isum`]): `sdot` ([`Sdot`], the `dotprod` extension, written as inline
//! assembly because its intrinsic is not stable Rust) or widening multiplies
//! ([`Mull`], base NEON). [`dispatch!`] instantiates the body for both and
//! picks one per call from the run-time detection, so a CPU without
//! `dotprod` runs the same kernels.
//!
//! Per super-block the weight quants are unpacked to signed (or small
//! unsigned) i8 lanes, 16 per register, each register one 16-element
//! sub-block or half a 32-element one; the primitive sums a register's
//! products with the matching Q8_K quants into four i32 lanes. Four
//! sub-blocks' lanes are reduced to one vector (two pairwise adds, lane `t`
//! = sub-block `t`) and scaled with one vector multiply-accumulate by their
//! four scales (widened to i32 once per super-block). The minimum terms of Q2_K,
//! Q4_K and Q5_K come from the Q8_K bsums, as in the scalar reference.

use super::super::super::{DType, IQ4_NL_VALUES};
use super::super::{scale_at, sum_blocks};
use super::{i8s as i8x32, BSUMS, Q8_K};
use std::arch::aarch64::*;

const Q2_K: usize = DType::Q2_K.type_size();
const Q3_K: usize = DType::Q3_K.type_size();
const Q4_K: usize = DType::Q4_K.type_size();
const Q5_K: usize = DType::Q5_K.type_size();
const Q6_K: usize = DType::Q6_K.type_size();
const IQ4_XS: usize = DType::IQ4_XS.type_size();
const IQ4_NL: usize = DType::IQ4_NL.type_size();
const Q8_0: usize = DType::Q8_0.type_size();

// ---- the integer-sum primitive ----

/// An exact i8 · i8 dot product of 16 lanes.
pub(super) trait Isum {
    /// `acc` plus `Σ_i a_i b_i`, spread over its four lanes (how depends on
    /// the primitive; only the sum of the lanes is defined). Exact for
    /// `a_i` in `-127..=127` and any `b_i`.
    ///
    /// # Safety
    /// The CPU must support the primitive's features (and the caller be
    /// compiled with them, so it inlines).
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Base NEON: `smull` + `smlal2` into i16 lanes, `sadalp` into i32 ones.
/// Each i16 lane sums two products of magnitude at most 127 · 128, so it
/// stays within ±32512.
pub(super) struct Mull;

impl Isum for Mull {
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
        vpadalq_s16(acc, p)
    }
}

/// `sdot` (the `dotprod` extension): lane `r` adds `Σ_{t<4} a_{4r+t} b_{4r+t}`.
pub(super) struct Sdot;

impl Isum for Sdot {
    #[target_feature(enable = "neon,dotprod")]
    #[inline]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        crate::isa::aarch64::sdot(acc, a, b)
    }
}

/// Σ of the products of `a` and `b` (32 lanes each, as two registers) in a
/// fresh accumulator.
///
/// # Safety
/// As [`Isum::dot`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn dot32<D: Isum>(a: (int8x16_t, int8x16_t), b: (int8x16_t, int8x16_t)) -> int32x4_t {
    // SAFETY: the caller's guarantee.
    unsafe { D::dot(D::dot(vdupq_n_s32(0), a.0, b.0), a.1, b.1) }
}

/// Declares the table's `unsafe fn $imp(nb, x, y) -> f32` for each generic
/// body `$body::<D: Isum>`: the `sdot` instantiation where the CPU has
/// `dotprod`, the base NEON one otherwise.
macro_rules! dispatch {
    ($($imp:ident => $body:ident),* $(,)?) => {$(
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn with_sdot(nb: usize, x: *const u8, y: *const u8) -> f32 {
                // SAFETY: the caller's guarantees, and dotprod was detected.
                unsafe { $body::<Sdot>(nb, x, y) }
            }
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                // SAFETY: the caller's guarantees (nb whole blocks in both
                // rows); the CPU has dotprod.
                unsafe { with_sdot(nb, x, y) }
            } else {
                // SAFETY: the caller's guarantees; Mull needs only NEON.
                unsafe { $body::<Mull>(nb, x, y) }
            }
        }
    )*};
}

dispatch! {
    dot_q2_k_imp => q2_k, dot_q3_k_imp => q3_k, dot_q4_k_imp => q4_k,
    dot_q5_k_imp => q5_k, dot_q6_k_imp => q6_k,
    dot_iq4_xs_imp => iq4_xs, dot_iq4_nl_imp => iq4_nl,
}

// ---- shared helpers ----

/// Lane `t`: the sum of the four lanes of `p[t]`.
#[target_feature(enable = "neon")]
#[inline]
fn sum4(p: [int32x4_t; 4]) -> int32x4_t {
    vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]))
}

/// Four 16-element sub-blocks: lane `t` is `Σ q[t]_i y_{16t + i}` for the
/// i8 quants `y` at `p` (64 bytes).
///
/// # Safety
/// `p..p + 64` must be readable; as [`Isum::dot`] for `D`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn group16<D: Isum>(q: [int8x16_t; 4], p: *const u8) -> int32x4_t {
    // SAFETY: the caller's guarantees.
    unsafe {
        let z = vdupq_n_s32(0);
        let (y0, y1) = i8x32(p);
        let (y2, y3) = i8x32(p.add(32));
        sum4([
            D::dot(z, q[0], y0),
            D::dot(z, q[1], y1),
            D::dot(z, q[2], y2),
            D::dot(z, q[3], y3),
        ])
    }
}

/// `Σ_j s_j Σ_i q_ji y_ji` over the sixteen 16-element sub-blocks of a
/// super-block, exact: `scales` are the `s_j`, `quants(g)` the quants of
/// elements 64g .. 64g + 64 (four registers), `y` the 256 Q8_K quants.
///
/// # Safety
/// `y..y + 256` must be readable; as [`Isum::dot`] for `D`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn isum16<D: Isum>(
    scales: int8x16_t,
    y: *const u8,
    quants: impl Fn(usize) -> [int8x16_t; 4],
) -> i32 {
    let s = widen16(scales);
    // Written out so that `g` is a constant in each `quants(g)`.
    // SAFETY: the caller's guarantees; y + 64g .. + 64 is inside.
    unsafe {
        let mut acc = vmulq_s32(group16::<D>(quants(0), y), s[0]);
        acc = vmlaq_s32(acc, group16::<D>(quants(1), y.add(64)), s[1]);
        acc = vmlaq_s32(acc, group16::<D>(quants(2), y.add(128)), s[2]);
        acc = vmlaq_s32(acc, group16::<D>(quants(3), y.add(192)), s[3]);
        hsum(acc)
    }
}

/// Eight i8 as two i32 vectors.
#[target_feature(enable = "neon")]
#[inline]
fn widen8(s: int8x8_t) -> [int32x4_t; 2] {
    let w = vmovl_s8(s);
    [vmovl_s16(vget_low_s16(w)), vmovl_high_s16(w)]
}

/// Sixteen i8 as four i32 vectors.
#[target_feature(enable = "neon")]
#[inline]
fn widen16(s: int8x16_t) -> [int32x4_t; 4] {
    let [a, b] = widen8(vget_low_s8(s));
    let [c, d] = widen8(vget_high_s8(s));
    [a, b, c, d]
}

/// Sum of the four lanes, wrapping (the callers' sums are far from it).
#[target_feature(enable = "neon")]
#[inline]
fn hsum(v: int32x4_t) -> i32 {
    vaddvq_s32(v)
}

/// The 32 u8 at `p` as two registers.
///
/// # Safety
/// `p..p + 32` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn u8x32(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { (vld1q_u8(p), vld1q_u8(p.add(16))) }
}

/// The little-endian u32 at `p`.
///
/// # Safety
/// `p..p + 4` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn u32_at(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees four readable bytes.
    u32::from_le_bytes(unsafe { p.cast::<[u8; 4]>().read_unaligned() })
}

/// The f32 scale of the Q8_K block at `p`.
///
/// # Safety
/// `p..p + 4` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q8_k_d(p: *const u8) -> f32 {
    // SAFETY: the caller's guarantee.
    f32::from_bits(unsafe { u32_at(p) })
}

/// Both registers' lanes as i8 (their values are below 128).
#[target_feature(enable = "neon")]
#[inline]
fn s8(q: (uint8x16_t, uint8x16_t)) -> (int8x16_t, int8x16_t) {
    (vreinterpretq_s8_u8(q.0), vreinterpretq_s8_u8(q.1))
}

/// `f` on both registers.
#[target_feature(enable = "neon")]
#[inline]
fn both(
    q: (uint8x16_t, uint8x16_t),
    f: impl Fn(uint8x16_t) -> uint8x16_t,
) -> (uint8x16_t, uint8x16_t) {
    (f(q.0), f(q.1))
}

/// Bits `2k, 2k + 1` (k < 4) of every byte, as 0..4.
#[target_feature(enable = "neon")]
#[inline]
fn crumb(v: uint8x16_t, k: usize) -> uint8x16_t {
    let shifted = vshlq_u8(v, vdupq_n_s8(-2 * k as i8));
    vandq_u8(shifted, vdupq_n_u8(3))
}

/// Bit `b` (0..8) of every byte as `m` / 0 bytes.
#[target_feature(enable = "neon")]
#[inline]
fn bit_as(v: uint8x16_t, b: usize, m: u8) -> uint8x16_t {
    vandq_u8(vtstq_u8(v, vdupq_n_u8(1 << b)), vdupq_n_u8(m))
}

// ---- Q2_K / Q3_K / Q6_K: sixteen sub-blocks of 16 ----

/// Q2_K · Q8_K: per super-block the scalar reference's
/// `(d_y d_x) · isum - (d_y dmin_x) · summs`, in block order.
///
/// # Safety
/// `nb` whole blocks at `x` and `y`; the CPU supports `D`, and the caller
/// is compiled with its features.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q2_k<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: the 16 scale bytes start the super-block, the 16 i16 bsums
        // are the last 32 bytes of the Q8_K block.
        let (sc, b0, b1) = unsafe {
            let b = by.add(BSUMS).cast::<i16>();
            (vld1q_u8(bx), vld1q_s16(b), vld1q_s16(b.add(8)))
        };
        // Σ_j bsums_j · min_j: any i16 times u8 <= 15, exact in i32.
        let mins = vshrq_n_u8::<4>(sc);
        let m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        let m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        let s = vmlal_high_s16(vmull_s16(vget_low_s16(b0), vget_low_s16(m0)), b0, m0);
        let s = vmlal_high_s16(vmlal_s16(s, vget_low_s16(b1), vget_low_s16(m1)), b1, m1);
        let summs = hsum(s);
        let scales = vreinterpretq_s8_u8(vandq_u8(sc, vdupq_n_u8(0x0f)));
        // Elements 64g .. 64g + 64: runs k, k + 1 of half h.
        let quants = |g: usize| {
            let (h, k) = (g / 2, 2 * (g % 2));
            // SAFETY: qs bytes 32h .. 32h + 32 are bytes 16 + 32h .. of the
            // super-block.
            let qs = unsafe { u8x32(bx.add(16 + 32 * h)) };
            let (a, b) = (
                s8(both(qs, |v| crumb(v, k))),
                s8(both(qs, |v| crumb(v, k + 1))),
            );
            [a.0, a.1, b.0, b.1]
        };
        // SAFETY: the Q8_K quants are bytes 4..260 of its block; the
        // caller's guarantee for D.
        let isum = unsafe { isum16::<D>(scales, by.add(4), quants) };
        // SAFETY: d / dmin are bytes 80..84 of the super-block, d_y bytes
        // 0..4 of the Q8_K block.
        let (d, dmin, dy) = unsafe { (scale_at(bx.add(80)), scale_at(bx.add(82)), q8_k_d(by)) };
        let (dall, dmin) = (dy * d, dy * dmin);
        dall * isum as f32 - dmin * summs as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (caller's contract).
    unsafe { sum_blocks::<Q2_K, Q8_K>(nb, x, y, term) }
}

/// The sixteen 6-bit Q3_K scales at `p` (12 bytes), offset removed.
///
/// # Safety
/// `p..p + 12` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q3_scales(p: *const u8) -> int8x16_t {
    // SAFETY: the caller guarantees 12 readable bytes.
    let (a0, a1, a2) = unsafe { (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8))) };
    let nib = 0x0f0f_0f0f;
    // Scales 4g .. 4g + 4: low nibbles from bytes 0..8 (low halves for
    // g < 2, high halves after), top two bits at bits 2g of bytes 8..12.
    let word = |low: u32, g: u32| u64::from(low | (((a2 >> (2 * g)) & 0x0303_0303) << 4));
    let lo = word(a0 & nib, 0) | word(a1 & nib, 1) << 32;
    let hi = word((a0 >> 4) & nib, 2) | word((a1 >> 4) & nib, 3) << 32;
    let v = vcombine_u8(vcreate_u8(lo), vcreate_u8(hi));
    vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(32))
}

/// The term of a Q3_K or Q6_K super-block at `bx` against the Q8_K block
/// at `by`: `d_x d_y · isum`, `isum` [`isum16`]'s with the signed scales
/// `sc` and the quants `quants`, `d_x` the f16 at `bx + d_at`.
///
/// # Safety
/// The two blocks are readable, `d_at + 2` within `bx`'s; as
/// [`Isum::dot`] for `D`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn k16_term<D: Isum>(
    bx: *const u8,
    by: *const u8,
    d_at: usize,
    sc: int8x16_t,
    quants: impl Fn(usize) -> [int8x16_t; 4],
) -> f32 {
    // SAFETY: the Q8_K quants are bytes 4..260 of its block, its f32 d
    // bytes 0..4; the contract.
    unsafe {
        let isum = isum16::<D>(sc, by.add(4), quants);
        scale_at(bx.add(d_at)) * q8_k_d(by) * isum as f32
    }
}

/// Q3_K · Q8_K: per super-block `(d_x d_y) · Σ_j s_j Σ q_x q_y`, in block
/// order, as the scalar reference.
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q3_k<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: hmask is bytes 0..32 and the scales bytes 96..108 of the
        // super-block.
        let (hmask, sc) = unsafe { (u8x32(bx), q3_scales(bx.add(96))) };
        // Elements 64g .. 64g + 64: runs r, r + 1 (hmask bits), k, k + 1
        // of half h.
        let quants = |g: usize| {
            let (h, k) = (g / 2, 2 * (g % 2));
            let r = 4 * h + k;
            // SAFETY: qs bytes 32h .. 32h + 32 are bytes 32 + 32h .. of the
            // super-block.
            let qs = unsafe { u8x32(bx.add(32 + 32 * h)) };
            // The low two bits, minus 4 where the hmask bit is clear.
            let q = |v: uint8x16_t, m: uint8x16_t, k: usize, r: usize| {
                let minus = vbicq_u8(vdupq_n_u8(4), bit_as(m, r, 4));
                vreinterpretq_s8_u8(vsubq_u8(crumb(v, k), minus))
            };
            [
                q(qs.0, hmask.0, k, r),
                q(qs.1, hmask.1, k, r),
                q(qs.0, hmask.0, k + 1, r + 1),
                q(qs.1, hmask.1, k + 1, r + 1),
            ]
        };
        // SAFETY: d is bytes 108..110 of the super-block (the caller's
        // contract); the caller's guarantee for D.
        unsafe { k16_term::<D>(bx, by, 108, sc, quants) }
    };
    // SAFETY: nb blocks of both rows are in bounds (caller's contract).
    unsafe { sum_blocks::<Q3_K, Q8_K>(nb, x, y, term) }
}

/// Q6_K · Q8_K: per super-block `d_x d_y · Σ_j s_j Σ (q - 32) q_y`, in block
/// order, as the scalar reference.
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q6_k<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = vdupq_n_u8(0x0f);
    let top = vdupq_n_u8(0x30);
    let off = vdupq_n_u8(32);
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: the i8 scales are bytes 192..208 of the super-block.
        let sc = unsafe { vld1q_s8(bx.add(192).cast()) };
        // Elements 64g .. 64g + 64: runs k, k + 1 of half h; their low
        // nibbles are those of ql bytes 64h .. 64h + 64 (high nibbles for
        // odd g), their top bits bits 2k and 2k + 2 of qh bytes 32h ..
        // 32h + 32, moved to bits 4, 5.
        let quants = |g: usize| {
            let (h, k) = (g / 2, 2 * (g % 2));
            // SAFETY: ql bytes 64h .. 64h + 64 and qh bytes 128 + 32h .. + 32
            // are inside the super-block.
            let (ql, qh) = unsafe { (u8x32(bx.add(64 * h)), u8x32(bx.add(128 + 32 * h))) };
            // SAFETY: as above.
            let ql2 = unsafe { u8x32(bx.add(64 * h + 32)) };
            let nib = |v: uint8x16_t| vandq_u8(vshlq_u8(v, vdupq_n_s8(-4 * (g % 2) as i8)), m4);
            let q = |l: uint8x16_t, t: uint8x16_t, k: usize| {
                let top_bits = vshlq_u8(t, vdupq_n_s8(4 - 2 * k as i8));
                vreinterpretq_s8_u8(vsubq_u8(vbslq_u8(top, top_bits, nib(l)), off))
            };
            [
                q(ql.0, qh.0, k),
                q(ql.1, qh.1, k),
                q(ql2.0, qh.0, k + 1),
                q(ql2.1, qh.1, k + 1),
            ]
        };
        // SAFETY: d is bytes 208..210 of the super-block (the caller's
        // contract); the caller's guarantee for D.
        unsafe { k16_term::<D>(bx, by, 208, sc, quants) }
    };
    // SAFETY: nb blocks of both rows are in bounds (caller's contract).
    unsafe { sum_blocks::<Q6_K, Q8_K>(nb, x, y, term) }
}

// ---- Q4_K / Q5_K / IQ4_XS: eight sub-blocks of 32 ----

/// The eight 6-bit scales and mins of a Q4_K / Q5_K super-block from its 12
/// packed bytes at `p`, as i32 vectors.
///
/// # Safety
/// `p..p + 12` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn scales_mins_k4(p: *const u8) -> ([int32x4_t; 2], [int32x4_t; 2]) {
    // SAFETY: the caller guarantees 12 readable bytes.
    let (a0, a1, a2) = unsafe { (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8))) };
    // Sub-blocks 0..4 keep six bits in bytes 0..4 (scales) and 4..8 (mins);
    // 4..8 their low nibbles in bytes 8..12 and top bits in bits 6, 7 of
    // bytes 0..4 / 4..8.
    let six = 0x3f3f_3f3f;
    let top = |a: u32| ((a >> 6) & 0x0303_0303) << 4;
    let sc = u64::from(a0 & six) | u64::from((a2 & 0x0f0f_0f0f) | top(a0)) << 32;
    let mn = u64::from(a1 & six) | u64::from(((a2 >> 4) & 0x0f0f_0f0f) | top(a1)) << 32;
    (widen8(vcreate_s8(sc)), widen8(vcreate_s8(mn)))
}

/// Q4_K · Q8_K, as [`q45`].
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_k<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: the caller's guarantees.
    unsafe { q45::<D, false>(nb, x, y) }
}

/// Q5_K · Q8_K, as [`q45`].
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_k<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: the caller's guarantees.
    unsafe { q45::<D, true>(nb, x, y) }
}

/// Q4_K (`Q5` false) / Q5_K · Q8_K: per super-block the scalar reference's
/// `d_x d_y · isum - dmin_x d_y · summs`, in block order.
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q45<D: Isum, const Q5: bool>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let qs = if Q5 { 48 } else { 16 };
    let m4 = vdupq_n_u8(0x0f);
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: bytes 4..16 of the super-block are its scales and mins,
        // the 16 i16 bsums the last 32 bytes of the Q8_K block, Q5_K's fifth
        // bits bytes 16..48 of its super-block.
        let ((sc, mn), b0, b1, qh) = unsafe {
            let b = by.add(BSUMS).cast::<i16>();
            let qh = if Q5 {
                u8x32(bx.add(16))
            } else {
                (vdupq_n_u8(0), vdupq_n_u8(0))
            };
            let sm = scales_mins_k4(bx.add(4));
            (sm, vld1q_s16(b), vld1q_s16(b.add(8)), qh)
        };
        // Σ_j m_j (bsums_2j + bsums_2j+1): pair sums of any i16 widened to
        // i32, times mins <= 63, exact.
        let s = vmulq_s32(vpaddlq_s16(b0), mn[0]);
        let summs = hsum(vmlaq_s32(s, vpaddlq_s16(b1), mn[1]));
        let mut acc = vdupq_n_s32(0);
        for (g, sg) in sc.into_iter().enumerate() {
            // Sub-blocks 4g .. 4g + 4: the low and high nibbles of nibble
            // bytes 64g .. 64g + 32, then of 64g + 32 .. 64g + 64.
            let mut p = [vdupq_n_s32(0); 4];
            for (t, pair) in p.chunks_exact_mut(2).enumerate() {
                let c = 2 * g + t;
                // SAFETY: nibble bytes 32c .. 32c + 32 are inside the super-block.
                let q = unsafe { u8x32(bx.add(qs + 32 * c)) };
                let mut lo = both(q, |v| vandq_u8(v, m4));
                let mut hi = both(q, |v| vshrq_n_u8::<4>(v));
                if Q5 {
                    lo = (
                        vorrq_u8(lo.0, bit_as(qh.0, 2 * c, 0x10)),
                        vorrq_u8(lo.1, bit_as(qh.1, 2 * c, 0x10)),
                    );
                    hi = (
                        vorrq_u8(hi.0, bit_as(qh.0, 2 * c + 1, 0x10)),
                        vorrq_u8(hi.1, bit_as(qh.1, 2 * c + 1, 0x10)),
                    );
                }
                // SAFETY: Q8_K quants 64c .. 64c + 64 are inside the block;
                // the caller's guarantee for D.
                unsafe {
                    let y = by.add(4 + 64 * c);
                    pair[0] = dot32::<D>(s8(lo), i8x32(y));
                    pair[1] = dot32::<D>(s8(hi), i8x32(y.add(32)));
                }
            }
            acc = vmlaq_s32(acc, sum4(p), sg);
        }
        // SAFETY: d / dmin are bytes 0..4 of the super-block, d_y bytes 0..4
        // of the Q8_K block.
        let (d, dmin, dy) = unsafe { (scale_at(bx), scale_at(bx.add(2)), q8_k_d(by)) };
        d * dy * hsum(acc) as f32 - dmin * dy * summs as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (caller's contract).
    unsafe {
        if Q5 {
            sum_blocks::<Q5_K, Q8_K>(nb, x, y, term)
        } else {
            sum_blocks::<Q4_K, Q8_K>(nb, x, y, term)
        }
    }
}

/// The 32 IQ4 values of the 16 index bytes at `p` (element order: low
/// nibbles, then high ones), looked up in `table`.
///
/// # Safety
/// `p..p + 16` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn iq4_values(table: int8x16_t, p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = unsafe { vld1q_u8(p) };
    (
        vqtbl1q_s8(table, vandq_u8(v, vdupq_n_u8(0x0f))),
        vqtbl1q_s8(table, vshrq_n_u8::<4>(v)),
    )
}

/// The IQ4 value table (values in -127..=113, as [`Isum`] requires).
#[target_feature(enable = "neon")]
#[inline]
fn iq4_table() -> int8x16_t {
    // SAFETY: IQ4_NL_VALUES is 16 readable bytes.
    unsafe { vld1q_s8(IQ4_NL_VALUES.as_ptr()) }
}

/// IQ4_XS · Q8_K: per super-block `(d_x d_y) · Σ_j s_j Σ v_x q_y`, in
/// block order, as the scalar reference.
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn iq4_xs<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = iq4_table();
    let term = |bx: *const u8, by: *const u8| {
        // SAFETY: scales_h is bytes 2..4 and scales_l bytes 4..8 of the
        // super-block.
        let (sl, sh) = unsafe {
            let sh = u32::from(bx.add(2).cast::<u16>().read_unaligned());
            (u32_at(bx.add(4)), sh)
        };
        // Scale j: low nibble j of scales_l, bits 2j, 2j + 1 of scales_h.
        let mut sc = [0i8; 8];
        for (j, s) in sc.iter_mut().enumerate() {
            let lo = (sl >> (4 * j)) & 0x0f;
            let hi = (sh >> (2 * j)) & 3;
            *s = (lo | (hi << 4)) as i8 - 32;
        }
        // SAFETY: sc is eight i8.
        let scales = widen8(unsafe { vld1_s8(sc.as_ptr()) });
        let mut acc = vdupq_n_s32(0);
        for (g, sg) in scales.into_iter().enumerate() {
            let mut p = [vdupq_n_s32(0); 4];
            for (t, pt) in p.iter_mut().enumerate() {
                let j = 4 * g + t;
                // SAFETY: sub-block j's indices are bytes 8 + 16j .. + 16 of
                // the super-block, its Q8_K quants 32j .. 32j + 32; the
                // caller's guarantee for D.
                *pt = unsafe {
                    dot32::<D>(
                        iq4_values(table, bx.add(8 + 16 * j)),
                        i8x32(by.add(4 + 32 * j)),
                    )
                };
            }
            acc = vmlaq_s32(acc, sum4(p), sg);
        }
        // SAFETY: d is bytes 0..2 of the super-block, d_y bytes 0..4 of the
        // Q8_K block.
        let (d, dy) = unsafe { (scale_at(bx), q8_k_d(by)) };
        d * dy * hsum(acc) as f32
    };
    // SAFETY: nb blocks of both rows are in bounds (caller's contract).
    unsafe { sum_blocks::<IQ4_XS, Q8_K>(nb, x, y, term) }
}

/// IQ4_NL · Q8_0: per block `(d_y d_x) · Σ v_x q_y`, added in block order,
/// as the scalar reference.
///
/// # Safety
/// As [`q2_k`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn iq4_nl<D: Isum>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = iq4_table();
    let mut sumf = 0.0f32;
    for b in 0..nb {
        // SAFETY: block b < nb of both rows is in bounds (caller's contract):
        // the indices are bytes 2..18 of the IQ4_NL block, the quants bytes
        // 2..34 of the Q8_0 one, the f16 scales their first two bytes; the
        // caller's guarantee for D.
        let (sumi, dx, dy) = unsafe {
            let (bx, by) = (x.add(b * IQ4_NL), y.add(b * Q8_0));
            let p = dot32::<D>(iq4_values(table, bx.add(2)), i8x32(by.add(2)));
            (hsum(p), scale_at(bx), scale_at(by))
        };
        sumf += dy * dx * sumi as f32;
    }
    sumf
}

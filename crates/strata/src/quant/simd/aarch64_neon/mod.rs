//! aarch64 NEON kernels: the Q4_0 .. Q8_0 and float dot products here, the
//! K-quant and IQ4 ones in [`k`]; the Q8_0 / Q8_1 / Q8_K quantizers.
//!
//! The Q4_0 .. Q8_0 dot products are base Advanced SIMD: each block's
//! integer sum by widening i8 × i8 → i16 multiplies (exact: every
//! |product| ≤ 2^14) and pairwise i32 accumulation, then the block terms
//! scaled and accumulated in exactly the scalar reference's order, so their
//! results equal the reference bit for bit. The K-quant and IQ4 ones use
//! `sdot` where the CPU has `dotprod` (detected at run time; inline
//! assembly, as in `quant/packed/aarch64_neon.rs`, since the intrinsic is
//! not stable Rust) and the same widening multiplies otherwise, one generic
//! body for both. Float dot products use four f32x4 accumulators. The Q8
//! quantizers use `vmaxnm` (NaN-skipping, like `f32::max`) and `vcvta`
//! (round to nearest, ties away: C `roundf`), bit-identical to the scalar
//! quantizer; the Q8_K one takes the maximum magnitude on the integer bits
//! (NaNs of any kind skipped) and rounds ties to even (`vcvtn`), as its
//! scalar reference. f32 → f16 stays scalar (Rust's `float16x4_t` is
//! unstable).
//!
//! NEON is mandatory on aarch64, and this level's table is only reached
//! through [`super::kernels_for`] when [`super::Isa::Neon`] was detected;
//! the safe wrappers it holds check the row lengths before any raw read.

use super::super::{put_f16, DType, QK, QK_K};
use super::scale_at;
use k::{
    dot_iq4_nl_imp, dot_iq4_xs_imp, dot_q2_k_imp, dot_q3_k_imp, dot_q4_k_imp, dot_q5_k_imp,
    dot_q6_k_imp,
};
use std::arch::aarch64::*;

mod k;

const Q8_K: usize = DType::Q8_K.type_size();
/// Byte offset of the bsums in a Q8_K block.
const BSUMS: usize = 4 + QK_K;

super::table! {
    dot: all,
    dot4: [],
    quantize: [Q8_0 => quantize_q8_0, Q8_1 => quantize_q8_1, Q8_K => quantize_q8_k],
}

/// Σ x_j y_j over 16 + 16 i8 pairs, exact.
#[target_feature(enable = "neon")]
#[inline]
fn sum_i8(xlo: int8x16_t, xhi: int8x16_t, ylo: int8x16_t, yhi: int8x16_t) -> i32 {
    let mut acc = vdupq_n_s32(0);
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(xlo), vget_low_s8(ylo)));
    acc = vpadalq_s16(acc, vmull_high_s8(xlo, ylo));
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(xhi), vget_low_s8(yhi)));
    acc = vpadalq_s16(acc, vmull_high_s8(xhi, yhi));
    vaddvq_s32(acc)
}

/// The 32 nibbles at `p` (16 bytes): elements 0..16 and 16..32 as u8.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = unsafe { vld1q_u8(p) };
    (vandq_u8(v, vdupq_n_u8(0x0f)), vshrq_n_u8(v, 4))
}

/// The fifth bits in the u32 at `p` as `0x10` bytes: elements 0..16, 16..32.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn high_bits(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller guarantees 4 readable bytes.
    let b = unsafe { [*p, *p.add(1), *p.add(2), *p.add(3)] };
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: BITS is 16 bytes.
    let bits = unsafe { vld1q_u8(BITS.as_ptr()) };
    let expand = |a: u8, c: u8| {
        let v = vcombine_u8(vdup_n_u8(a), vdup_n_u8(c));
        vandq_u8(vtstq_u8(v, bits), vdupq_n_u8(0x10))
    };
    (expand(b[0], b[1]), expand(b[2], b[3]))
}

/// The 32 i8 quants at `p`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn i8s(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { (vld1q_s8(p.cast()), vld1q_s8(p.add(16).cast())) }
}

/// u8 quants minus `offset` as i8 (quants ≤ 31, so no overflow).
#[target_feature(enable = "neon")]
#[inline]
fn signed(q: (uint8x16_t, uint8x16_t), offset: i8) -> (int8x16_t, int8x16_t) {
    let o = vdupq_n_s8(offset);
    (
        vsubq_s8(vreinterpretq_s8_u8(q.0), o),
        vsubq_s8(vreinterpretq_s8_u8(q.1), o),
    )
}

/// The 32 quants of a Q5 block less `offset`, as i8: the fifth bits in
/// the u32 at `p`, then the 16 nibble bytes.
///
/// # Safety
/// `p .. p + 20` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_quants(p: *const u8, offset: i8) -> (int8x16_t, int8x16_t) {
    // SAFETY: the caller guarantees the 20 bytes.
    let ((lo, hi), (hlo, hhi)) = unsafe { (nibbles(p.add(4)), high_bits(p)) };
    signed((vorrq_u8(lo, hlo), vorrq_u8(hi, hhi)), offset)
}

/// A quantized dot product of types `$xt` · `$yt`: `$q(bx)` gives the
/// block's signed quants, the block term is computed as the scalar
/// reference computes it.
macro_rules! block_dot {
    ($imp:ident, $xt:expr, $yt:expr, $yoff:expr, |$bx:ident| $q:expr,
     |$s:ident, $dx:ident, $dy:ident, $mx:ident, $sy:ident| $term:expr) => {
        #[target_feature(enable = "neon")]
        unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            const XB: usize = $xt.type_size();
            const YB: usize = $yt.type_size();
            let mut sumf = 0.0f32;
            for i in 0..nb {
                // SAFETY: block i < nb of both rows is in bounds.
                let ($bx, by) = unsafe { (x.add(i * XB), y.add(i * YB)) };
                // SAFETY: the helpers read inside the two blocks.
                let (xq, yq) = unsafe { ($q, i8s(by.add($yoff))) };
                let $s = sum_i8(xq.0, xq.1, yq.0, yq.1) as f32;
                // SAFETY: scales (and m / s for the `_1` types) lead the blocks.
                let ($dx, $dy, $mx, $sy) = unsafe {
                    let m = if $yoff == 4 {
                        (scale_at($bx.add(2)), scale_at(by.add(2)))
                    } else {
                        (0.0, 0.0)
                    };
                    (scale_at($bx), scale_at(by), m.0, m.1)
                };
                sumf += $term;
            }
            sumf
        }
    };
}

block_dot!(
    dot_q4_0_imp,
    DType::Q4_0,
    DType::Q8_0,
    2,
    |bx| signed(nibbles(bx.add(2)), 8),
    |s, dx, dy, _mx, _sy| s * dx * dy
);
block_dot!(
    dot_q4_1_imp,
    DType::Q4_1,
    DType::Q8_1,
    4,
    |bx| signed(nibbles(bx.add(4)), 0),
    |s, dx, dy, mx, sy| (dx * dy) * s + mx * sy
);
block_dot!(
    dot_q5_0_imp,
    DType::Q5_0,
    DType::Q8_0,
    2,
    |bx| q5_quants(bx.add(2), 16),
    |s, dx, dy, _mx, _sy| (dx * dy) * s
);
block_dot!(
    dot_q5_1_imp,
    DType::Q5_1,
    DType::Q8_1,
    4,
    |bx| q5_quants(bx.add(4), 0),
    |s, dx, dy, mx, sy| (dx * dy) * s + mx * sy
);
block_dot!(
    dot_q8_0_imp,
    DType::Q8_0,
    DType::Q8_0,
    2,
    |bx| i8s(bx.add(2)),
    |s, dx, dy, _mx, _sy| s * (dx * dy)
);

/// A float dot product: `$load(p)` reads four elements as f32 at `p`,
/// `$one(p)` one; four accumulators of four lanes and a scalar tail.
macro_rules! float_dot {
    ($imp:ident, $es:expr, |$p:ident| $load:expr, |$q:ident| $one:expr) => {
        #[target_feature(enable = "neon")]
        unsafe fn $imp(n: usize, x: *const u8, y: *const u8) -> f32 {
            let ld = |$p: *const u8| -> float32x4_t {
                // SAFETY: callers pass pointers to four in-bounds elements.
                unsafe { $load }
            };
            let one = |$q: *const u8| -> f32 {
                // SAFETY: callers pass pointers to an in-bounds element.
                unsafe { $one }
            };
            let mut acc = [vdupq_n_f32(0.0); 4];
            let mut i = 0;
            while i + 16 <= n {
                for (k, a) in acc.iter_mut().enumerate() {
                    let o = (i + 4 * k) * $es;
                    // SAFETY: elements i + 4k .. + 4 <= n are in bounds.
                    let (px, py) = unsafe { (x.add(o), y.add(o)) };
                    *a = vfmaq_f32(*a, ld(px), ld(py));
                }
                i += 16;
            }
            while i + 4 <= n {
                // SAFETY: elements i .. i + 4 <= n are in bounds.
                let (px, py) = unsafe { (x.add(i * $es), y.add(i * $es)) };
                acc[0] = vfmaq_f32(acc[0], ld(px), ld(py));
                i += 4;
            }
            let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
            let mut sum = vaddvq_f32(s);
            while i < n {
                // SAFETY: element i < n is in bounds.
                let (px, py) = unsafe { (x.add(i * $es), y.add(i * $es)) };
                sum += one(px) * one(py);
                i += 1;
            }
            sum
        }
    };
}

/// Four f16 bit patterns widened to f32 exactly (see [`super::f16_to_f32`]).
#[target_feature(enable = "neon")]
#[inline]
fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let h = vmovl_u16(h);
    let em = vandq_u32(h, vdupq_n_u32(0x7fff));
    let shifted = vshlq_n_u32(em, 13);
    let scaled = vmulq_f32(
        vreinterpretq_f32_u32(shifted),
        vdupq_n_f32(f32::from_bits(0x7780_0000)),
    );
    let special = vorrq_u32(shifted, vdupq_n_u32(0x7f80_0000));
    let is_special = vcgeq_u32(em, vdupq_n_u32(0x7c00));
    let bits = vbslq_u32(is_special, special, vreinterpretq_u32_f32(scaled));
    let sign = vshlq_n_u32(vandq_u32(h, vdupq_n_u32(0x8000)), 16);
    vreinterpretq_f32_u32(vorrq_u32(bits, sign))
}

float_dot!(dot_f32_imp, 4, |p| vld1q_f32(p.cast()), |q| q
    .cast::<f32>()
    .read_unaligned());
float_dot!(dot_f16_imp, 2, |p| f16x4_to_f32(vld1_u16(p.cast())), |q| {
    super::f16_to_f32(q.cast::<u16>().read_unaligned())
});
float_dot!(
    dot_bf16_imp,
    2,
    |p| vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vld1_u16(p.cast())), 16)),
    |q| f32::from_bits(u32::from(q.cast::<u16>().read_unaligned()) << 16)
);

/// Quantizes one block of 32 f32 at `x` into i8 at `q` exactly as the scalar
/// quantizer does; returns `(d, Σq)`.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn quantize_block_q8(x: *const f32, q: *mut u8) -> (f32, i32) {
    // SAFETY: the caller guarantees 32 readable f32 at x.
    let v: [float32x4_t; 8] = std::array::from_fn(|k| unsafe { vld1q_f32(x.add(4 * k)) });
    let mut m = vdupq_n_f32(0.0);
    for &vk in &v {
        m = vmaxnmq_f32(m, vabsq_f32(vk));
    }
    let amax = vmaxnmvq_f32(m);
    let d = amax / 127.0;
    let id = super::super::inv_or_zero(d);
    let mut sum = vdupq_n_s32(0);
    let mut out = [0i8; QK];
    for (k, &vk) in v.iter().enumerate() {
        let r = vmulq_n_f32(vk, id);
        let r = vminq_f32(vmaxq_f32(r, vdupq_n_f32(-128.0)), vdupq_n_f32(127.0));
        let qi = vcvtaq_s32_f32(r);
        sum = vaddq_s32(sum, qi);
        let mut lanes = [0i32; 4];
        // SAFETY: lanes holds four i32.
        unsafe { vst1q_s32(lanes.as_mut_ptr(), qi) };
        for (o, l) in out[4 * k..4 * k + 4].iter_mut().zip(lanes) {
            *o = l as i8;
        }
    }
    // SAFETY: the caller guarantees 32 writable bytes at q.
    unsafe { std::ptr::copy_nonoverlapping(out.as_ptr().cast::<u8>(), q, QK) };
    (d, vaddvq_s32(sum))
}

macro_rules! quantize_q8 {
    ($name:ident, $ty:expr, $qoff:expr, |$y:ident, $d:ident, $s:ident| $put:expr) => {
        fn $name(src: &[f32], dst: &mut [u8]) {
            super::super::debug_check_row($ty, src.len(), dst.len());
            for (x, $y) in src
                .chunks_exact(QK)
                .zip(dst.chunks_exact_mut($ty.type_size()))
            {
                // SAFETY: NEON was detected; x is 32 f32 and the quants are the
                // block's bytes $qoff .. $qoff + 32.
                let ($d, $s) = unsafe { quantize_block_q8(x.as_ptr(), $y[$qoff..].as_mut_ptr()) };
                $put;
            }
        }
    };
}

quantize_q8!(quantize_q8_0, DType::Q8_0, 2, |y, d, _s| put_f16(y, 0, d));
quantize_q8!(quantize_q8_1, DType::Q8_1, 4, |y, d, s| {
    put_f16(y, 0, d);
    put_f16(y, 2, s as f32 * d)
});

// ---- Q8_K activation quantization ----

/// f32 → Q8_K, bit-identical to the scalar `quantize_row_q8_k`.
fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    super::super::debug_check_row(DType::Q8_K, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K)) {
        // SAFETY: this level's table is only reached once NEON was detected;
        // x is 256 f32, y one 292-byte block.
        unsafe { quantize_block_q8_k(x.as_ptr(), y.as_mut_ptr()) };
    }
}

/// One block: the signed absolute maximum (the first one on ties, NaNs
/// skipped), `q = min(127, round_ties_even(x · (-127 / max)))` with
/// non-finite products giving 0, the bsums, and `d = 1 / (-127 / max)`; an
/// all-zero block is zero bytes.
///
/// # Safety
/// `x..x + 256` must be readable, `y..y + 292` writable.
#[target_feature(enable = "neon")]
unsafe fn quantize_block_q8_k(x: *const f32, y: *mut u8) {
    // SAFETY: the caller guarantees 256 readable f32.
    let ld = |k: usize| unsafe { vld1q_f32(x.add(4 * k)) };
    // |x| as bits, NaN (any payload) as 0: for the rest, the integer order
    // is the order of the magnitudes.
    let mag = |v: float32x4_t| {
        let b = vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x7fff_ffff));
        vandq_u32(b, vcleq_u32(b, vdupq_n_u32(0x7f80_0000)))
    };
    let mut m = vdupq_n_u32(0);
    for k in 0..QK_K / 4 {
        m = vmaxq_u32(m, mag(ld(k)));
    }
    let amax = vdupq_n_u32(vmaxvq_u32(m));
    if vgetq_lane_u32::<0>(amax) == 0 {
        // SAFETY: the caller guarantees the block's bytes are writable.
        unsafe { std::ptr::write_bytes(y, 0, Q8_K) };
        return;
    }
    // The first element of largest magnitude keeps its sign.
    let mut first = 0;
    for k in 0..QK_K / 4 {
        let hit = vceqq_u32(mag(ld(k)), amax);
        if vmaxvq_u32(hit) != 0 {
            let mut lanes = [0u32; 4];
            // SAFETY: lanes holds four u32.
            unsafe { vst1q_u32(lanes.as_mut_ptr(), hit) };
            first = 4 * k + lanes.iter().position(|&l| l != 0).unwrap_or(0);
            break;
        }
    }
    // SAFETY: first < 256.
    let iscale = -127.0 / unsafe { *x.add(first) };
    let iv = vdupq_n_f32(iscale);
    for g in 0..QK_K / 16 {
        let q: [int16x4_t; 4] = std::array::from_fn(|k| {
            let r = vmulq_f32(iv, ld(4 * g + k));
            // NaN and ±inf → 0, then round half to even (as ggml's
            // nearest_int) and cap at 127; |r| <= 127 + rounding, so the
            // narrowing keeps the value.
            let finite = vcaltq_f32(r, vdupq_n_f32(f32::INFINITY));
            let r = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), finite));
            vmovn_s32(vminq_s32(vcvtnq_s32_f32(r), vdupq_n_s32(127)))
        });
        let q = vcombine_s8(
            vmovn_s16(vcombine_s16(q[0], q[1])),
            vmovn_s16(vcombine_s16(q[2], q[3])),
        );
        // SAFETY: quants 16g .. 16g + 16 and bsum g (bytes 260 + 2g ..
        // 262 + 2g) lie inside the block.
        unsafe {
            vst1q_s8(y.add(4 + 16 * g).cast(), q);
            y.add(BSUMS + 2 * g)
                .cast::<[u8; 2]>()
                .write_unaligned(vaddlvq_s8(q).to_le_bytes());
        }
    }
    // SAFETY: d is the block's first four bytes.
    unsafe {
        y.cast::<[u8; 4]>()
            .write_unaligned((1.0 / iscale).to_le_bytes())
    };
}

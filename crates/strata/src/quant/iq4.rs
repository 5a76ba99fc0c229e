//! IQ4_NL and IQ4_XS: 4-bit non-linear quants. Each 4-bit index selects one
//! of the sixteen values of [`IQ4_NL_VALUES`] (denser near zero), times a
//! block scale.
//!
//! IQ4_NL (18 B, blocks of 32): f16 `d`, 16 B `qs`; `x = d · v[q]`. Byte `j`
//! holds element `j` in its low nibble and element `j + 16` in its high one
//! (the Q4_0 order).
//!
//! IQ4_XS (136 B, super-blocks of 256 in 8 sub-blocks of 32): f16 `d`, u16
//! `scales_h`, 4 B `scales_l`, 128 B `qs`; `x = d · (s - 32) · v[q]` with the
//! 6-bit sub-block scale `s` (low nibble in `scales_l[j / 2]`, low half for
//! even `j`; top two bits at bit `2 j` of `scales_h`); sub-block `j`'s 16
//! `qs` bytes `16 j ..` hold its elements in the IQ4_NL order.
//!
//! Quantizing follows ggml's `quantize_row_iq4_nl_impl` without importance
//! weights (weights `x²`). Per 32-element block: start from the scale that
//! maps the signed absolute maximum to the table's end, take the weighted
//! least-squares scale of the nearest-value indices, and (with `ntry > 0`)
//! also try the `2 ntry + 1` scales `(v[0] + t) / max`, keeping the best.
//! IQ4_XS then stores the eight scales as signed 6-bit fractions of the one
//! of largest magnitude (`d = -max / 32`) and re-picks every index against
//! them. Blocks holding NaN or ±inf are written with a NaN `d` and zero
//! everything else, so they dequantize to NaN.

use super::k_search::{
    best_index, group_scales, nearest_int, nonfinite, quantize_blocks, signed_amax, GROUP_MAX_EPS,
    QK_K,
};
use super::{debug_check_row, get_f16, put_f16, QK};
use crate::DType;

/// The sixteen values IQ4_NL and IQ4_XS indices select (ggml's
/// `kvalues_iq4nl`).
pub const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const NL_BYTES: usize = DType::IQ4_NL.type_size();
const XS_BYTES: usize = DType::IQ4_XS.type_size();
const XS_SCALES_H: usize = 2;
const XS_SCALES_L: usize = 4;
const XS_QS: usize = 8;
/// Trial scales on each side of the first guess, as ggml's file quantizer
/// (`quantize_iq4_nl` / `quantize_iq4_xs`) uses.
const NTRY: i32 = 7;

/// The table value of index `q` (low four bits).
#[inline(always)]
pub(super) fn value(q: u8) -> i32 {
    i32::from(IQ4_NL_VALUES[usize::from(q & 0x0f)])
}

/// The table index of element `i` (0..32) of a block's 16 `qs` bytes.
#[inline(always)]
pub(super) fn index_at(qs: &[u8], i: usize) -> u8 {
    (qs[i % 16] >> (4 * (i / 16))) & 0x0f
}

/// The 6-bit scale of IQ4_XS sub-block `j` (0..8), offset removed.
#[inline(always)]
pub(super) fn xs_scale_at(block: &[u8], j: usize) -> i32 {
    let h = u16::from_le_bytes([block[XS_SCALES_H], block[XS_SCALES_H + 1]]);
    let lo = (block[XS_SCALES_L + j / 2] >> (4 * (j % 2))) & 0x0f;
    let hi = ((h >> (2 * j)) & 3) as u8;
    i32::from(lo | (hi << 4)) - 32
}

/// Σ w q x and Σ w q² over a block for the nearest-value indices of `id · x`,
/// with `w = x²`; also writes the indices when `out` is given.
#[inline(always)]
fn fit(x: &[f32], id: f32, mut out: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (j, &v) in x.iter().enumerate() {
        let l = best_index(&IQ4_NL_VALUES, id * v);
        if let Some(o) = out.as_deref_mut() {
            o[j] = l as u8;
        }
        let q = f32::from(IQ4_NL_VALUES[l]);
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The scale of one 32-element block (0 for an all-zero one, whose
/// `levels` are left alone); writes the first guess's indices to `levels`.
fn block_scale(x: &[f32], levels: &mut [u8], ntry: i32) -> f32 {
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(IQ4_NL_VALUES[0]);
    let d = if ntry > 0 { -max / v0 } else { max / v0 };
    let (sumqx, sumq2) = fit(x, 1.0 / d, Some(levels));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry + i32::from(IQ4_NL_VALUES[0])) as f32 / max;
        let (sumqx, sumq2) = fit(x, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 indices into 16 bytes (element `j` low, `j + 16` high).
#[inline(always)]
fn pack(levels: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = levels[j] | (levels[j + 16] << 4);
    }
}

/// One IQ4_NL block with `ntry` trial scales each side.
fn quantize_nl_block(x: &[f32], y: &mut [u8], ntry: i32) {
    if nonfinite(x) {
        y.fill(0);
        put_f16(y, 0, f32::NAN);
        return;
    }
    // An all-zero block keeps index 8 (value 1, the one nearest 0): ggml's
    // file quantizer writes that; its single-pass one leaves the indices
    // uninitialized.
    let mut levels = [8u8; QK];
    let d = block_scale(x, &mut levels, ntry);
    put_f16(y, 0, d);
    if ntry > 0 {
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = best_index(&IQ4_NL_VALUES, id * v) as u8;
        }
    }
    pack(&levels, &mut y[2..]);
}

/// Quantizes an f32 row to IQ4_NL (`src.len()` a multiple of 32,
/// `dst.len() == 18 * src.len() / 32`) the way ggml's CPU backend converts
/// rows (`quantize_row_iq4_nl_ref`, its `from_float`): one least-squares
/// refit of the absolute-maximum scale, no trial scales.
pub fn quantize_row_iq4_nl(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::IQ4_NL, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(NL_BYTES)) {
        quantize_nl_block(x, y, -1);
    }
}

/// Quantizes an f32 row to IQ4_NL the way ggml writes model files
/// (`ggml_quantize_chunk` / `quantize_iq4_nl` without an importance matrix,
/// as `llama-quantize` does): 15 trial scales per block and the indices
/// re-picked against the chosen one. Slower than [`quantize_row_iq4_nl`]
/// and a little more accurate; the same length contract.
pub fn quantize_row_iq4_nl_search(src: &[f32], dst: &mut [u8]) {
    debug_check_row(DType::IQ4_NL, src.len(), dst.len());
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(NL_BYTES)) {
        quantize_nl_block(x, y, NTRY);
    }
}

/// Dequantizes an IQ4_NL row (`dst.len()` a multiple of 32,
/// `src.len() == 18 * dst.len() / 32`).
pub fn dequantize_row_iq4_nl(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::IQ4_NL, dst.len(), src.len());
    for (x, y) in src.chunks_exact(NL_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = get_f16(x, 0);
        for (i, v) in y.iter_mut().enumerate() {
            *v = d * value(index_at(&x[2..], i)) as f32;
        }
    }
}

/// Quantizes an f32 row to IQ4_XS (`src.len()` a multiple of 256,
/// `dst.len() == 136 * src.len() / 256`), as ggml does both for files and
/// in its CPU backend (`quantize_iq4_xs` without an importance matrix).
pub fn quantize_row_iq4_xs(src: &[f32], dst: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    quantize_blocks(DType::IQ4_XS, src, dst, 0, |x, y| {
        let (scales, (max_scale, _)) =
            group_scales::<_, 8>(x, &mut levels, |xs, l| block_scale(xs, l, NTRY));
        let d = -max_scale / 32.0;
        put_f16(y, 0, d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        for (j, xs) in x.chunks_exact(QK).enumerate() {
            let l = nearest_int(id * scales[j]).clamp(-32, 31);
            // The unrounded f32 `d`, as ggml.
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for (q, &v) in levels[QK * j..QK * (j + 1)].iter_mut().zip(xs) {
                *q = best_index(&IQ4_NL_VALUES, idl * v) as u8;
            }
            let l = (l + 32) as u8;
            y[XS_SCALES_L + j / 2] |= (l & 0x0f) << (4 * (j % 2));
            scales_h |= u16::from(l >> 4) << (2 * j);
        }
        y[XS_SCALES_H..XS_SCALES_H + 2].copy_from_slice(&scales_h.to_le_bytes());
        for j in 0..8 {
            let qs = &mut y[XS_QS + 16 * j..XS_QS + 16 * (j + 1)];
            pack(&levels[QK * j..QK * (j + 1)], qs);
        }
    });
}

/// Dequantizes an IQ4_XS row (`dst.len()` a multiple of 256,
/// `src.len() == 136 * dst.len() / 256`).
pub fn dequantize_row_iq4_xs(src: &[u8], dst: &mut [f32]) {
    debug_check_row(DType::IQ4_XS, dst.len(), src.len());
    for (x, y) in src.chunks_exact(XS_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = get_f16(x, 0);
        for (j, ys) in y.chunks_exact_mut(QK).enumerate() {
            let dl = d * xs_scale_at(x, j) as f32;
            let qs = &x[XS_QS + 16 * j..];
            for (i, v) in ys.iter_mut().enumerate() {
                *v = dl * value(index_at(qs, i)) as f32;
            }
        }
    }
}

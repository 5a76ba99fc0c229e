//! The scale searches of ggml's reference K-quant and IQ4 quantizers (no
//! importance matrix), shared by the per-format files.
//!
//! Each search is written to do the same f32 operations in the same order as
//! ggml's C reference (`make_qkx2_quants`, `make_q3_quants`,
//! `make_qx_quants`, `best_index_int8`, built without FMA contraction), so the
//! quantized bytes match ggml's bit for bit. Every index they produce is
//! clamped before use: non-finite input gives meaningless but in-range quants,
//! never a panic (the quantizers replace such blocks anyway, see
//! [`nonfinite`]).

/// Elements per K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// Absolute maxima below this count as an all-zero group (ggml's
/// `GROUP_MAX_EPS`).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, the way ggml's `nearest_int` does it:
/// adding `1.5 · 2^23` leaves the rounded integer in the low mantissa bits.
///
/// Exact for `|v| < 2^22`; outside that range (and for NaN) the result is
/// some value in `-2^22 .. 2^22`, as in ggml (which only asserts the range).
#[inline(always)]
pub(super) fn nearest_int(v: f32) -> i32 {
    let t = v + 12_582_912.0;
    (t.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// True if any element is NaN or infinite.
#[inline(always)]
pub(super) fn nonfinite(x: &[f32]) -> bool {
    x.iter().any(|v| !v.is_finite())
}

/// The row loop of the quantizers that zero each block first: checks the
/// lengths for `dtype`, then runs `quantize_block` on each `QK_K` values of
/// `src` and its zeroed block of `dst`, except for blocks holding a
/// non-finite value, which get a NaN f16 scale at byte `d` and stay zero.
pub(super) fn quantize_blocks(
    dtype: crate::DType,
    src: &[f32],
    dst: &mut [u8],
    d: usize,
    mut quantize_block: impl FnMut(&[f32], &mut [u8]),
) {
    super::debug_check_row(dtype, src.len(), dst.len());
    for (x, y) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(dtype.type_size()))
    {
        y.fill(0);
        if nonfinite(x) {
            super::put_f16(y, d, f32::NAN);
            continue;
        }
        quantize_block(x, y);
    }
}

/// The scales `fit` finds for the `N` equal groups of `x` (filling the
/// matching groups of `levels`), and their [`signed_amax`].
#[inline(always)]
pub(super) fn group_scales<T, const N: usize>(
    x: &[f32],
    levels: &mut [T],
    mut fit: impl FnMut(&[f32], &mut [T]) -> f32,
) -> ([f32; N], (f32, f32)) {
    let n = x.len() / N;
    let mut scales = [0f32; N];
    for (j, xs) in x.chunks_exact(n).enumerate() {
        scales[j] = fit(xs, &mut levels[n * j..n * (j + 1)]);
    }
    let amax = signed_amax(&scales);
    (scales, amax)
}

/// The element of largest magnitude, with its sign, and that magnitude
/// (first one on ties; NaNs skipped; `(0, 0)` for an all-zero group).
#[inline(always)]
pub(super) fn signed_amax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Affine fit `x ≈ scale · L + min` with `L` in `0..=nmax` and `min <= 0`,
/// minimizing the `weights`-weighted squared (or, with `use_mad`, absolute)
/// error: start from the min/max grid, then try the `nstep + 1` inverse
/// scales `(nmax + rmin + rdelta · is) / (max - min)` and keep the best
/// least-squares refit (ggml's `make_qkx2_quants`).
///
/// Writes the levels to `l` (`aux` is scratch of the same length) and
/// returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    aux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let level = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let err = |d: f32| if use_mad { d.abs() } else { d * d };

    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = level(iscale, x[i], min);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = level(iscale, x[i], min);
            aux[i] = q as u8;
            let (w, q) = (weights[i], q as f32);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The start of the symmetric fits: the signed absolute maximum of `x`, or
/// `None` for an all-zero group (below `GROUP_MAX_EPS`), whose levels `l`
/// it sets to 0.
#[inline(always)]
fn symmetric_max(x: &[f32], l: &mut [i8]) -> Option<f32> {
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        l[..x.len()].fill(0);
        return None;
    }
    Some(max)
}

/// Symmetric fit `x ≈ scale · (L - nmax)` with `L` in `0..2 nmax`, weights
/// `x²`: start from the grid of the signed absolute maximum, then move single
/// levels while that improves the weighted least-squares fit, for up to five
/// passes (ggml's `make_q3_quants` with `do_rmse`). Returns the scale (0 for
/// an all-zero group, whose levels are all 0).
pub(super) fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let Some(max) = symmetric_max(x, l) else {
        return 0.0;
    };
    let n = x.len();
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let (w, q) = (x[i] * x[i], q as f32);
        sumlx += w * x[i] * q;
        suml2 += w * q * q;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = f32::from(l[i]);
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(l[i]) {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for v in &mut l[..n] {
        *v += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Symmetric fit `x ≈ scale · (L - nmax)` with `L` in `0..2 nmax`, weights
/// `x²`: the least-squares scale of the absolute-maximum grid, then of the
/// grids for `nmax + 0.1 · is`, `is` in `-9..=9`, keeping the best (ggml's
/// `make_qx_quants` with `rmse_type` 1 and no importance weights). Returns
/// the scale (0 for an all-zero group, whose levels are all 0).
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let Some(max) = symmetric_max(x, l) else {
        return 0.0;
    };
    // Σ w·x·l and Σ w·l² over the grid of `iscale`, with w = x².
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, l: &mut [i8]| {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as i8;
        }
    };
    let iscale = -(nmax as f32) / max;
    fill(iscale, l);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9i32..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Index of the entry of the ascending table `values` nearest to `x` (the
/// upper one on a tie), by bisection (ggml's `best_index_int8`). NaN gives
/// the last index.
#[inline(always)]
pub(super) fn best_index(values: &[i8; 16], x: f32) -> usize {
    let v = |i: usize| f32::from(values[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - v(hi - 1) < v(hi) - x {
        hi - 1
    } else {
        hi
    }
}

/// Reads the 6-bit scale and min of sub-block `j` (0..8) from the 12-byte
/// packing Q4_K and Q5_K share: bytes 0..4 hold scales 0..4 and bytes 4..8
/// mins 0..4 in their low six bits; scales / mins 4..8 keep their low
/// nibbles in bytes 8..12 and their top two bits in the top bits of bytes
/// 0..4 / 4..8 (ggml's `get_scale_min_k4`).
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Writes eight 6-bit scales and mins in the packing [`scale_min_k4`] reads.
#[inline(always)]
pub(super) fn put_scale_min_k4(q: &mut [u8], ls: &[u8; 8], lm: &[u8; 8]) {
    for j in 0..4 {
        q[j] = ls[j] | ((ls[j + 4] >> 4) << 6);
        q[j + 4] = lm[j] | ((lm[j + 4] >> 4) << 6);
        q[j + 8] = (ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (v, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49, 0),
            (-7.51, -8),
            (4_194_303.0, 4_194_303),
            (-4_194_303.0, -4_194_303),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
        for i in -3000..3000 {
            let v = i as f32 * 0.37;
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
        }
        // Out of range and NaN: no panic, some in-range value.
        for v in [f32::NAN, f32::INFINITY, -1e30] {
            assert!(nearest_int(v).abs() <= 1 << 22);
        }
    }

    #[test]
    fn best_index_picks_the_nearest_table_entry() {
        const V: [i8; 16] = [
            -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
        ];
        for k in -1400..1400 {
            let x = k as f32 * 0.1;
            let got = best_index(&V, x);
            let dist = |i: usize| (x - f32::from(V[i])).abs();
            let best = (0..16).map(dist).fold(f32::INFINITY, f32::min);
            assert!(dist(got) <= best + 1e-4, "x = {x}: index {got}");
        }
        // A tie goes to the upper entry: -4.5 is 5.5 from both -10 and 1.
        assert_eq!(best_index(&V, -4.5), 8);
        assert_eq!(best_index(&V, f32::NAN), 15);
    }

    #[test]
    fn scale_min_packing_round_trips() {
        let ls = [0u8, 63, 17, 42, 5, 63, 33, 1];
        let lm = [63u8, 0, 12, 48, 60, 7, 0, 31];
        let mut q = [0u8; 12];
        put_scale_min_k4(&mut q, &ls, &lm);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &q), (ls[j], lm[j]), "{j}");
        }
    }
}

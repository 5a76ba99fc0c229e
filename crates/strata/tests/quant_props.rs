//! Properties of strata::quant beyond the golden vectors: round-trip error
//! bounds per format (sanity bounds for the K-quant and IQ4 formats), Q8_1,
//! Q8_K and F16 against ggml's definitions, the dot products against
//! dequantize-then-f64, and error (never panic) on bad input.

use proptest::prelude::*;
use strata::conformance::{FLOAT_WEIGHTS, K_AND_IQ4_QUANTS as K_TYPES, LEGACY_QUANTS};
use strata::{quant, DType, Error};

const QK: usize = 32;

fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len())];
    quant::quantize_row(t, x, &mut q).unwrap();
    q
}

fn dequantize(t: DType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    quant::dequantize_row(t, q, &mut y).unwrap();
    y
}

/// The largest |dequantize(quantize(x)) - x| the format allows for one block
/// `x` (for scalar types, one element).
///
/// With `d` the f32 scale the quantizer computes and `d16` / `m16` the stored
/// f16 copies: rounding to the nearest level costs `d / 2` (a full `d` for
/// Q4_0 / Q5_0, whose clamp at +7 / +15 moves the element equal to `-max`
/// by one step), storing `d` in f16 costs `|q| * |d - d16|` and storing the
/// minimum costs `|min - m16|`. The small relative term covers f32 rounding
/// of `x * (1/d)` and of the dequantizing multiply-add.
fn error_bound(t: DType, x: &[f32]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (min, max) = x
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let fp = 1e-5 * amax;
    let offset = |d: f32, steps: f32, qmax: f32, m: f32| {
        d * steps + qmax * (d - f16_round(d)).abs() + (m - f16_round(m)).abs() + fp
    };
    match t {
        DType::F32 => 0.0,
        DType::F16 => amax * 2f32.powi(-11) + 2f32.powi(-25),
        DType::BF16 => amax * 2f32.powi(-8) + 2f32.powi(-134),
        DType::Q4_0 => offset(amax / 8.0, 1.0, 8.0, 0.0),
        DType::Q5_0 => offset(amax / 16.0, 1.0, 16.0, 0.0),
        DType::Q8_0 | DType::Q8_1 => offset(amax / 127.0, 0.5, 127.0, 0.0),
        DType::Q4_1 => offset((max - min) / 15.0, 0.5, 15.0, min),
        DType::Q5_1 => offset((max - min) / 31.0, 0.5, 31.0, min),
        _ => unreachable!(),
    }
}

/// One checked dot product of `t` (see [`dot`]).
struct Dot {
    /// `y_seed` repeated to `x`'s length, and its type `vec_dot_type(t)`.
    y: Vec<f32>,
    yt: DType,
    /// The quantized rows.
    qx: Vec<u8>,
    qy: Vec<u8>,
    /// `quant::vec_dot` of the quantized rows.
    got: f32,
    /// The dequantized rows, and their dot product in f64.
    dx: Vec<f32>,
    dy: Vec<f32>,
    want: f64,
}

/// `x` quantized to `t` dotted with `y_seed` (cycled to `x`'s length)
/// quantized to `t`'s dot type; fails unless `quant::vec_dot` and
/// `quant::vec_dot_fn` agree bit for bit.
fn dot(t: DType, x: &[f32], y_seed: &[f32]) -> Result<Dot, TestCaseError> {
    let n = x.len();
    let y: Vec<f32> = y_seed.iter().cycle().take(n).copied().collect();
    let yt = quant::vec_dot_type(t);
    let (qx, qy) = (quantize(t, x), quantize(yt, &y));
    let got = quant::vec_dot(t, n, &qx, &qy).unwrap();
    let f = quant::vec_dot_fn(t).unwrap();
    prop_assert_eq!(got.to_bits(), f(n, &qx, &qy).to_bits());

    let (dx, dy) = (dequantize(t, &qx, n), dequantize(yt, &qy, n));
    let want: f64 = dx
        .iter()
        .zip(&dy)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    Ok(Dot {
        y,
        yt,
        qx,
        qy,
        got,
        dx,
        dy,
        want,
    })
}

/// Rows of 32..=256 elements: mostly uniform in [-1, 1], with exact 0 and ±1
/// mixed in (ties for the largest magnitude, constant and zero stretches),
/// scaled by 10^-6 ..= 10^max_exp.
fn row_upto(max_exp: i32) -> impl Strategy<Value = Vec<f32>> {
    rows(1..=8, QK, max_exp)
}

/// Rows of `blocks` blocks of `block` elements, drawn as [`row_upto`]'s.
fn rows(
    blocks: std::ops::RangeInclusive<usize>,
    block: usize,
    max_exp: i32,
) -> impl Strategy<Value = Vec<f32>> {
    let elem = prop_oneof![
        8 => -1f32..1f32,
        1 => Just(0f32),
        1 => Just(1f32),
        1 => Just(-1f32),
    ];
    (
        blocks.prop_flat_map(move |k| prop::collection::vec(elem.clone(), k * block)),
        -6i32..=max_exp,
    )
        .prop_map(|(v, e)| {
            let s = 10f32.powi(e);
            v.into_iter().map(|x| x * s).collect()
        })
}

/// [`row_upto`] with values up to 10^4 (every stored f16 scale stays finite).
fn row() -> impl Strategy<Value = Vec<f32>> {
    row_upto(4)
}

proptest! {
    #[test]
    fn round_trip_within_format_bound(x in row()) {
        for t in FLOAT_WEIGHTS.into_iter().chain(LEGACY_QUANTS).chain([DType::Q8_1]) {
            let y = dequantize(t, &quantize(t, &x), x.len());
            for (b, (xb, yb)) in x.chunks(t.block_size().max(QK)).zip(y.chunks(QK)).enumerate() {
                for (i, (a, c)) in xb.iter().zip(yb).enumerate() {
                    let bound = if t.is_quantized() { error_bound(t, xb) } else { error_bound(t, &[*a]) };
                    prop_assert!(
                        (a - c).abs() <= bound,
                        "{} block {} elem {}: x = {:e}, got {:e}, err {:e} > bound {:e}",
                        t, b, i, a, c, (a - c).abs(), bound
                    );
                }
            }
        }
    }

    /// The checked API answers every length / type combination with Ok or
    /// Err, never a panic, and accepts exactly the valid ones.
    #[test]
    fn bad_lengths_are_errors(n in 0usize..200, extra in -40isize..40) {
        let x = vec![0.25f32; n];
        for t in DType::ALL {
            let supported = t.is_float() || t.is_quantized();
            let whole = n % t.block_size() == 0;
            let bytes = (t.row_size(n) as isize + extra).max(0) as usize;
            let valid = supported && whole && bytes == t.row_size(n);
            let mut q = vec![0u8; bytes];
            let r = quant::quantize_row(t, &x, &mut q);
            prop_assert_eq!(r.is_ok(), valid, "quantize {} n={} bytes={}", t, n, bytes);
            if !supported {
                prop_assert!(matches!(r, Err(Error::Type { .. })), "{:?}", r);
            } else if !valid {
                match &r {
                    Err(Error::BadValue { value, .. }) if !whole => {
                        prop_assert_eq!(value, &n.to_string());
                    }
                    Err(Error::Length { expected, got, .. }) if whole => {
                        prop_assert_eq!((*expected, *got), (t.row_size(n), bytes));
                    }
                    _ => prop_assert!(false, "{} n={} bytes={}: {:?}", t, n, bytes, r),
                }
            }
            let mut y = vec![0f32; n];
            let r = quant::dequantize_row(t, &q, &mut y);
            prop_assert_eq!(r.is_ok(), valid, "dequantize {} n={} bytes={}", t, n, bytes);

            let yt = quant::vec_dot_type(t);
            let ybytes = vec![0u8; yt.row_size(n)];
            let has_dot = quant::vec_dot_fn(t).is_some();
            let r = quant::vec_dot(t, n, &q, &ybytes);
            prop_assert_eq!(r.is_ok(), valid && has_dot, "vec_dot {} n={}", t, n);
            let r = quant::vec_dot(t, n, &ybytes, &q);
            let valid_swapped = valid && has_dot && yt.row_size(n) == t.row_size(n);
            prop_assert_eq!(r.is_ok(), valid_swapped);
        }
    }

    /// Every dot product against the f64 dot of the dequantized rows.
    ///
    /// Activations stay within 10^3: Q8_1's f16 `s = d * Σq` overflows once
    /// a block's |Σx| passes 65504 (as in ggml), and `0 * inf` is NaN.
    ///
    /// Tolerance: `1e-5 * Σ|x_i y_i| + 1e-30` covers the per-block f32
    /// scaling and f32 accumulation. The Q4_1 / Q5_1 forms use Q8_1's stored
    /// `s` (f16 of the f32 `d * Σq`) where the dequantized reference has
    /// `d16 * Σq`; they differ by f16 rounding of `s` and of `d` (large when
    /// `d` is f16-subnormal), so per block add
    /// `|m| * (Σ|q| * |d - d16| + 2^-10 |s| + 2^-25)`.
    #[test]
    fn vec_dot_matches_dequantized_f64_dot(x in row(), y_seed in row_upto(3)) {
        for t in [DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::Q8_0] {
            let Dot { y, yt, qx, qy, got, dx, dy, want } = dot(t, &x, &y_seed)?;
            let mag: f64 = dx.iter().zip(&dy).map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs()).sum();
            let mut tol = 1e-5 * mag + 1e-30;
            if yt == DType::Q8_1 {
                for (b, yb) in y.chunks(QK).enumerate() {
                    let m = f64::from(f16_at(&qx[b * t.type_size()..], 2));
                    let by = &qy[b * 36..(b + 1) * 36];
                    let d = yb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                    let d_err = f64::from((d - f16_round(d)).abs());
                    let sum_q: f64 = by[4..].iter().map(|&q| f64::from((q as i8).unsigned_abs())).sum();
                    let s = f64::from(f16_at(by, 2)).abs();
                    tol += m.abs() * (sum_q * d_err + s * 2f64.powi(-10) + 2f64.powi(-25));
                }
            }
            prop_assert!(
                (f64::from(got) - want).abs() <= tol,
                "{}: dot {:e} vs f64 {:e}, tolerance {:e}", t, got, want, tol
            );
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`, written out independently: per block
/// `d = amax / 127`, `q = roundf(x * (1/d))`, `s = d * Σq`, both stored f16.
#[test]
fn q8_1_matches_ggml_definition() {
    let mut rows: Vec<Vec<f32>> = vec![
        (0..64).map(|j| j as f32 - 16.0).collect(),
        vec![0.0; 32],
        vec![-0.5; 32],
        (0..96)
            .map(|j| ((j * 37 % 101) as f32 - 50.0) * 0.013)
            .collect(),
        (0..32)
            .map(|j| if j == 7 { 1e4 } else { j as f32 * 1e-3 })
            .collect(),
    ];
    // Exact ties at ±k.5 after scaling: amax 127 makes d = 1, id = 1.
    rows.push(
        (0..32)
            .map(|j| if j == 0 { 127.0 } else { j as f32 - 15.5 })
            .collect(),
    );
    for x in rows {
        let q = quantize(DType::Q8_1, &x);
        let q8_0 = quantize(DType::Q8_0, &x);
        for (b, xb) in x.chunks(QK).enumerate() {
            let blk = &q[b * 36..(b + 1) * 36];
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let qs: Vec<i8> = xb.iter().map(|v| (v * id).round() as i8).collect();
            let sum: i32 = qs.iter().map(|&v| i32::from(v)).sum();
            assert_eq!(f16_at(blk, 0).to_bits(), f16_round(d).to_bits(), "d");
            assert_eq!(
                f16_at(blk, 2).to_bits(),
                f16_round(sum as f32 * d).to_bits(),
                "s"
            );
            let got: Vec<i8> = blk[4..].iter().map(|&v| v as i8).collect();
            assert_eq!(got, qs);
            // Q8_1 is Q8_0 plus the s field.
            assert_eq!(&blk[..2], &q8_0[b * 34..b * 34 + 2]);
            assert_eq!(&blk[4..], &q8_0[b * 34 + 2..(b + 1) * 34]);
        }
        let y = dequantize(DType::Q8_1, &q, x.len());
        assert_eq!(y, dequantize(DType::Q8_0, &q8_0, x.len()));
    }
    // Ties round away from zero (C roundf), not to even.
    let x: Vec<f32> = (0..32)
        .map(|j| if j == 0 { 127.0 } else { j as f32 - 15.5 })
        .collect();
    let q = quantize(DType::Q8_1, &x);
    assert_eq!(q[4 + 1] as i8, -15); // -14.5
    assert_eq!(q[4 + 16] as i8, 1); // 0.5
    assert_eq!(q[4 + 17] as i8, 2); // 1.5
}

/// F16 rows: every finite f16 survives dequantize → quantize unchanged, and
/// quantizing matches the `half` crate's round-to-nearest-even.
#[test]
fn f16_is_ieee_round_to_nearest_even() {
    let all: Vec<u8> = (0..=u16::MAX)
        .filter(|&b| half::f16::from_bits(b).is_finite())
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let n = all.len() / 2;
    let y = dequantize(DType::F16, &all, n);
    assert_eq!(quantize(DType::F16, &y), all);

    let x: Vec<f32> = (0..4096u32)
        .map(|i| f32::from_bits(0x3800_0000u32.wrapping_add(i.wrapping_mul(0x0011_1111))))
        .collect();
    let q = quantize(DType::F16, &x);
    for (i, v) in x.iter().enumerate() {
        assert_eq!(
            f16_at(&q, 2 * i).to_bits(),
            half::f16::from_f32(*v).to_f32().to_bits()
        );
    }
}

/// A hand-checked Q4_0 · Q8_0 block: the integer sum is exact and scaled by
/// `d_x * d_y` once.
#[test]
fn q4_0_q8_0_dot_by_hand() {
    // x: d = 1 (max = -8), quants q = j % 16 → values j % 16 - 8.
    let x: Vec<f32> = (0..32)
        .map(|j| if j == 0 { -8.0 } else { (j % 16) as f32 - 8.0 })
        .collect();
    // y: d = 1 (amax = 127), values 1 except the first.
    let y: Vec<f32> = (0..32).map(|j| if j == 0 { 127.0 } else { 1.0 }).collect();
    let qx = quantize(DType::Q4_0, &x);
    let qy = quantize(DType::Q8_0, &y);
    let want: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    assert_eq!(quant::vec_dot_q4_0_q8_0(32, &qx, &qy), want);
    assert_eq!(
        want,
        -8.0 * 127.0 + (1..32).map(|j| (j % 16) as f32 - 8.0).sum::<f32>()
    );
}

/// Rows of 256..=768 elements (one to three super-blocks) drawn as in
/// [`row_upto`], scaled by 10^-6 ..= 10^max_exp.
fn row_k(max_exp: i32) -> impl Strategy<Value = Vec<f32>> {
    rows(1..=3, quant::QK_K, max_exp)
}

/// Largest round-trip error allowed in a super-block (a block for IQ4_NL)
/// with largest magnitude `amax`: `f · amax + a`.
///
/// `f` is a sanity bound about 1.5 to 2 times the worst `error / amax` seen
/// over 9000 random rows (Q2_K 0.45, Q3_K 0.29, Q4_K 0.12, Q5_K 0.07,
/// Q6_K 0.023, IQ4_NL 0.16, IQ4_XS 0.14), not a tight format bound (the
/// scale searches have no simple one): it catches a broken packing, sign or
/// scale, not a slightly worse search. Q8_K's is exact: half a step
/// `amax / 127`, plus f32 rounding.
///
/// `a` covers the f16 super-block scales: when `d` (or `dmin`) falls into
/// the f16 subnormal range it is rounded to a multiple of 2^-24 (possibly
/// 0), so values up to (largest sub-block scale × largest quant + largest
/// min) × 2^-24 can be lost whatever `amax` is.
fn k_error_bound(t: DType, amax: f32) -> f32 {
    let (f, levels) = match t {
        DType::Q2_K => (0.7, 15 * 3 + 15),
        DType::Q3_K => (0.45, 32 * 4),
        DType::Q4_K => (0.2, 63 * 15 + 63),
        DType::Q5_K => (0.12, 63 * 31 + 63),
        DType::Q6_K => (0.05, 128 * 32),
        DType::IQ4_NL => (0.25, 127),
        DType::IQ4_XS => (0.25, 32 * 127),
        DType::Q8_K => (0.5 / 127.0 + 1e-6, 0),
        _ => unreachable!(),
    };
    f * amax + levels as f32 * 2f32.powi(-24)
}

/// `|dy_e| · (|dx_e| + 2 |m_e|)` summed: the magnitude a dot of dequantized
/// rows carries, where `m_e` is the sub-block minimum the formats with
/// minimums subtract (read back by dequantizing a copy whose quants are
/// zeroed: every element is then `-m`). Rounding of `dx_e` is relative to
/// `|d · s · q| <= |dx_e| + |m_e|`, which the plain `Σ |dx dy|` misses when
/// the two terms cancel.
fn k_magnitude(t: DType, qx: &[u8], dx: &[f32], dy: &[f32]) -> f64 {
    let quants = match t {
        DType::Q2_K => 16..80,
        DType::Q4_K | DType::Q5_K => 16..t.type_size(),
        _ => 0..0,
    };
    let mut zeroed = qx.to_vec();
    for b in zeroed.chunks_exact_mut(t.type_size()) {
        b[quants.clone()].fill(0);
    }
    let minus_m = dequantize(t, &zeroed, dx.len());
    dx.iter()
        .zip(dy)
        .zip(&minus_m)
        .map(|((&a, &b), &m)| {
            let m = if quants.is_empty() {
                0.0
            } else {
                f64::from(m).abs()
            };
            f64::from(b).abs() * (f64::from(a).abs() + 2.0 * m)
        })
        .sum()
}

proptest! {
    #[test]
    fn k_round_trip_within_sanity_bound(x in row_k(4)) {
        for t in K_TYPES.into_iter().chain([DType::Q8_K]) {
            let y = dequantize(t, &quantize(t, &x), x.len());
            let bs = t.block_size();
            for (b, (xb, yb)) in x.chunks(bs).zip(y.chunks(bs)).enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let bound = k_error_bound(t, amax);
                for (i, (a, c)) in xb.iter().zip(yb).enumerate() {
                    prop_assert!(
                        (a - c).abs() <= bound,
                        "{} block {} elem {}: x = {:e}, got {:e}, err {:e} > bound {:e}",
                        t, b, i, a, c, (a - c).abs(), bound
                    );
                }
            }
        }
    }

    /// Every K / IQ4 dot product (the dispatched one, and the scalar
    /// reference it must agree with bit for bit when nothing faster exists)
    /// against the f64 dot of the dequantized rows. Tolerance
    /// `1e-5 · k_magnitude + 1e-30`: exact integer block sums, a few f32
    /// roundings per block and f32 accumulation over at most 24 blocks.
    #[test]
    fn k_vec_dot_matches_dequantized_f64_dot(x in row_k(4), y_seed in row_k(3)) {
        for t in K_TYPES {
            let Dot { qx, got, dx, dy, want, .. } = dot(t, &x, &y_seed)?;
            let tol = 1e-5 * k_magnitude(t, &qx, &dx, &dy) + 1e-30;
            prop_assert!(
                (f64::from(got) - want).abs() <= tol,
                "{}: dot {:e} vs f64 {:e}, tolerance {:e}", t, got, want, tol
            );
        }
    }
}

/// Q8_K's `bsums` are the sums of its quants in groups of 16, `d` is the
/// f32 `1 / (-127 / max)`, and quants round half to even (ggml's
/// `nearest_int`), unlike Q8_0's `roundf`.
#[test]
fn q8_k_matches_ggml_definition() {
    // max = 127 (first element), so d = -1 and q = -x exactly, halves tie.
    let x: Vec<f32> = (0..256)
        .map(|j| {
            if j == 0 {
                127.0
            } else {
                (j % 64) as f32 * 0.5 - 16.0
            }
        })
        .collect();
    let q = quantize(DType::Q8_K, &x);
    let d = f32::from_le_bytes([q[0], q[1], q[2], q[3]]);
    assert_eq!(d, 1.0 / (-127.0f32 / 127.0));
    let qs: Vec<i32> = q[4..260].iter().map(|&v| i32::from(v as i8)).collect();
    for (j, (&v, &got)) in x.iter().zip(&qs).enumerate() {
        assert_eq!(got, (-v).round_ties_even() as i32, "element {j}");
    }
    assert_eq!(qs[1], 16); // -(-15.5) = 15.5 rounds to 16 (even)
    assert_eq!(qs[3], 14); // 14.5 rounds to 14
    for g in 0..16 {
        let want: i32 = qs[16 * g..16 * (g + 1)].iter().sum();
        let got = i16::from_le_bytes([q[260 + 2 * g], q[261 + 2 * g]]);
        assert_eq!(i32::from(got), want, "bsums[{g}]");
    }
    // An all-zero block is all zero bytes.
    assert!(quantize(DType::Q8_K, &[0.0; 256]).iter().all(|&b| b == 0));
}

//! SOFT_MAX (mask f32/f16, broadcast masks, scale, ALiBi, sinks, fully
//! masked rows) and DIAG_MASK_INF against f64 references; permuted sources,
//! in place, 1/2/3 threads, random shapes.

mod common;
mod kernel_util;

use common::{assert_close, tensor, Rng};
use kernel_util::{assert_in_place, run_threads};
use proptest::prelude::*;
use strata::ops::{self, Op};
use strata::{DType, Tensor};

/// ALiBi slope of head `h` of `n_head`, straight from the definition.
fn slope_ref(max_bias: f64, h: usize, n_head: usize) -> f64 {
    if max_bias == 0.0 {
        return 1.0;
    }
    let mut n = 1;
    while n * 2 <= n_head {
        n *= 2;
    }
    let m0 = 2f64.powf(-max_bias / n as f64);
    let m1 = 2f64.powf(-max_bias / 2.0 / n as f64);
    if h < n {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n) as i32 + 1)
    }
}

struct Case<'a> {
    /// Logical logits, [ne0, ne1, ne2, ne3] order.
    x: &'a [f32],
    ne: [usize; 4],
    /// Logical mask values and shape.
    mask: Option<(&'a [f32], [usize; 4])>,
    sinks: Option<&'a [f32]>,
    scale: f32,
    max_bias: f32,
}

fn softmax_ref(c: &Case) -> Vec<f64> {
    let [ne0, ne1, ne2, ne3] = c.ne;
    let mut out = Vec::with_capacity(c.x.len());
    for i3 in 0..ne3 {
        for i2 in 0..ne2 {
            for i1 in 0..ne1 {
                let base = ((i3 * ne2 + i2) * ne1 + i1) * ne0;
                let slope = slope_ref(c.max_bias as f64, i2, ne2);
                let w: Vec<f64> = (0..ne0)
                    .map(|i0| {
                        let mut v = c.x[base + i0] as f64 * c.scale as f64;
                        if let Some((m, nm)) = c.mask {
                            let mi =
                                (((i3 % nm[3]) * nm[2] + i2 % nm[2]) * nm[1] + i1) * nm[0] + i0;
                            v += slope * m[mi] as f64;
                        }
                        v
                    })
                    .collect();
                let sink = c.sinks.map(|s| s[i2] as f64);
                let max = w
                    .iter()
                    .copied()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    out.extend(std::iter::repeat_n(0.0, ne0));
                    continue;
                }
                let e: Vec<f64> = w.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
                out.extend(e.iter().map(|v| v / sum));
            }
        }
    }
    out
}

/// The F32 leaf `x` and the logits `a` of shape `ne` read from it: `x`
/// itself, or (`permuted`) a view of a leaf holding dims 1 and 2 swapped.
fn logits(ne: [usize; 4], permuted: bool) -> (Tensor, Tensor) {
    if permuted {
        let x = tensor("x", DType::F32, &[ne[0], ne[2], ne[1], ne[3]]);
        let a = ops::permute(&x, [0, 2, 1, 3]).unwrap();
        (x, a)
    } else {
        let x = tensor("x", DType::F32, &ne);
        (x.clone(), x)
    }
}

/// Builds and runs one softmax case (logits optionally through a permuted
/// view, mask of `mask_dtype`), checks the reference and thread invariance.
#[allow(clippy::too_many_arguments)]
fn check(
    ne: [usize; 4],
    mask_ne: Option<[usize; 4]>,
    mask_dtype: DType,
    sinks: bool,
    permuted: bool,
    scale: f32,
    max_bias: f32,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let (x, a) = logits(ne, permuted);
    let x_data = rng.vec(x.nelements(), -6.0, 6.0);
    let mask = mask_ne.map(|nm| tensor("mask", mask_dtype, &nm));
    let mask_data: Vec<f32> = mask.as_ref().map_or(vec![], |m| {
        (0..m.nelements())
            .map(|_| match rng.below(4) {
                0 => f32::NEG_INFINITY,
                _ => rng.uniform(-2.0, 2.0),
            })
            .collect()
    });
    let sink_t = sinks.then(|| tensor("sinks", DType::F32, &[ne[2]]));
    let sink_data = rng.vec(ne[2], -1.0, 3.0);
    let y = ops::make(
        Op::SoftMax { scale, max_bias },
        vec![Some(a.clone()), mask.clone(), sink_t.clone()],
        None,
    )
    .unwrap();
    let mut inputs: Vec<(&Tensor, &[f32])> = vec![(&x, &x_data)];
    if let Some(m) = &mask {
        inputs.push((m, &mask_data));
    }
    if let Some(s) = &sink_t {
        inputs.push((s, &sink_data));
    }
    let mut outs = vec![y, a];
    if let Some(m) = &mask {
        outs.push(m.clone());
    }
    let out = run_threads(&outs, &inputs);
    let case = Case {
        x: &out[1],
        ne,
        mask: mask_ne.map(|nm| (&out[2][..], nm)),
        sinks: sinks.then_some(&sink_data[..]),
        scale,
        max_bias,
    };
    let what = format!(
        "softmax {ne:?} mask {mask_ne:?} {mask_dtype} sinks={sinks} p={permuted} alibi={max_bias}"
    );
    assert_close(&what, &out[0], &softmax_ref(&case), 1e-12);
}

#[test]
fn softmax_without_mask() {
    check([37, 5, 3, 2], None, DType::F32, false, false, 1.0, 0.0, 1);
    check([1, 4, 1, 1], None, DType::F32, false, false, 0.3, 0.0, 2);
    check([33, 3, 4, 1], None, DType::F32, false, true, 0.7, 0.0, 3);
}

#[test]
fn softmax_with_masks_of_both_types_and_broadcast() {
    let mut seed = 100;
    for mask_dtype in [DType::F32, DType::F16] {
        for (ne, nm) in [
            // mask with more rows than the logits (KQ mask padding)
            ([19, 5, 3, 2], [19, 8, 1, 1]),
            // broadcast over dims 2 and 3 by modulo
            ([19, 5, 4, 2], [19, 5, 2, 1]),
            ([19, 5, 4, 2], [19, 6, 4, 2]),
        ] {
            for permuted in [false, true] {
                seed += 1;
                check(ne, Some(nm), mask_dtype, false, permuted, 0.125, 0.0, seed);
            }
        }
    }
}

#[test]
fn softmax_with_alibi_and_sinks() {
    // 6 heads: not a power of two, so both slope formulas are used.
    for (max_bias, sinks) in [(8.0, false), (8.0, true), (0.0, true), (3.5, true)] {
        // (shape, mask shape, mask type, permuted, scale, seed)
        for (ne, nm, mask_dtype, permuted, scale, seed) in [
            ([23, 4, 6, 1], [23, 4, 1, 1], DType::F16, false, 0.5, 7),
            ([23, 4, 6, 2], [23, 4, 3, 1], DType::F32, true, 1.5, 8),
        ] {
            check(
                ne,
                Some(nm),
                mask_dtype,
                sinks,
                permuted,
                scale,
                max_bias,
                seed,
            );
        }
    }
    check([9, 2, 6, 1], None, DType::F32, true, false, 1.0, 0.0, 9);
}

#[test]
fn fully_masked_rows_give_zeros_not_nan() {
    let x = tensor("x", DType::F32, &[7, 3]);
    let m = tensor("mask", DType::F16, &[7, 3]);
    let y = ops::soft_max_ext(&x, Some(&m), 1.0, 0.0).unwrap();
    let x_data = Rng::new(5).vec(21, -1.0, 1.0);
    let mut m_data = vec![f32::NEG_INFINITY; 21];
    m_data[7..14].fill(0.0); // only the middle row is visible
    let out = run_threads(&[y], &[(&x, &x_data), (&m, &m_data)]);
    assert!(
        out[0][..7].iter().chain(&out[0][14..]).all(|&v| v == 0.0),
        "{:?}",
        out[0]
    );
    let middle: f64 = out[0][7..14].iter().map(|&v| v as f64).sum();
    assert!((middle - 1.0).abs() < 1e-6, "row sum {middle}");
    // With a sink, a fully masked row still sums to less than one: zeros.
    let s = tensor("sinks", DType::F32, &[1]);
    let y = ops::make(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        },
        vec![Some(x.clone()), Some(m.clone()), Some(s.clone())],
        None,
    )
    .unwrap();
    let out = run_threads(&[y], &[(&x, &x_data), (&m, &m_data), (&s, &[0.5])]);
    assert!(out[0][..7].iter().all(|&v| v == 0.0));
}

fn diag_ref(x: &[f32], ne: [usize; 4], n_past: usize) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let (i0, i1) = (i % ne[0], (i / ne[0]) % ne[1]);
            if i0 > n_past + i1 {
                f64::NEG_INFINITY
            } else {
                v as f64
            }
        })
        .collect()
}

#[test]
fn diag_mask_inf_masks_the_future() {
    let mut rng = Rng::new(11);
    for (ne, n_past) in [([9, 6, 2, 2], 0), ([9, 6, 2, 1], 3), ([4, 3, 1, 1], 10)] {
        for permuted in [false, true] {
            let (x, a) = logits(ne, permuted);
            let y = ops::diag_mask_inf(&a, n_past).unwrap();
            let data = rng.vec(x.nelements(), -1.0, 1.0);
            let out = run_threads(&[y, a], &[(&x, &data)]);
            let want = diag_ref(&out[1], ne, n_past);
            for (i, (&g, &w)) in out[0].iter().zip(&want).enumerate() {
                assert_eq!(g as f64, w, "diag_mask_inf {ne:?} n_past {n_past} at {i}");
            }
        }
    }
}

#[test]
fn softmax_and_diag_mask_in_place() {
    let ne = [17, 6, 4, 1];
    let n: usize = ne.iter().product();
    let mut rng = Rng::new(12);
    let x_data = rng.vec(n, -5.0, 5.0);
    let m = tensor("mask", DType::F16, &[17, 8, 2, 1]);
    let m_data: Vec<f32> = (0..m.nelements())
        .map(|i| {
            if i % 5 == 0 {
                f32::NEG_INFINITY
            } else {
                0.25 * (i % 7) as f32
            }
        })
        .collect();
    let m_seen = common::round_trip(DType::F16, &m_data);
    let build = |x: &Tensor| ops::soft_max_ext(x, Some(&m), 0.3, 4.0).unwrap();
    let got = assert_in_place(DType::F32, &ne, &x_data, &[(&m, &m_data)], build);
    let case = Case {
        x: &x_data,
        ne,
        mask: Some((&m_seen, [17, 8, 2, 1])),
        sinks: None,
        scale: 0.3,
        max_bias: 4.0,
    };
    assert_close("softmax in place", &got, &softmax_ref(&case), 1e-12);

    let build = |x: &Tensor| ops::diag_mask_inf(x, 2).unwrap();
    let got = assert_in_place(DType::F32, &ne, &x_data, &[], build);
    let want = diag_ref(&x_data, ne, 2);
    assert!(got.iter().zip(&want).all(|(&g, &w)| g as f64 == w));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn softmax_on_random_shapes(
        ne0 in 1usize..50, ne1 in 1usize..5, ne2 in 1usize..5, ne3 in 1usize..3,
        extra_rows in 0usize..3, bcast2: bool, f16_mask: bool, use_mask: bool,
        sinks: bool, permuted: bool, alibi: bool, seed in 0u64..1000,
    ) {
        let nm = [ne0, ne1 + extra_rows, if bcast2 { 1 } else { ne2 }, 1];
        let mask_dtype = if f16_mask { DType::F16 } else { DType::F32 };
        let max_bias = if alibi { 8.0 } else { 0.0 };
        check([ne0, ne1, ne2, ne3], use_mask.then_some(nm), mask_dtype, sinks, permuted, 0.6, max_bias, seed);
    }
}

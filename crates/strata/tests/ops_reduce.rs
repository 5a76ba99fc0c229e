//! SUM, SUM_ROWS, MEAN, ARGMAX and ARGSORT against f64 references, on odd
//! shapes, strided/permuted and F16/BF16 sources, for 1, 2 and 3 threads.

mod common;
mod kernel_util;

use common::{assert_close, tensor, Rng};
use kernel_util::run_threads;
use strata::ops::{self, SortOrder};
use strata::{DType, Tensor};

/// Logical rows (ne0 values each) of a 4-d value list.
fn rows(v: &[f32], ne0: usize) -> impl Iterator<Item = &[f32]> {
    v.chunks(ne0)
}

/// A source of `dims` in `dtype`, optionally read through a permuted view
/// (dims 0<->1 and 2<->3 swapped). Returns (input leaf, operand).
fn source(dtype: DType, dims: [usize; 4], permuted: bool) -> (Tensor, Tensor) {
    let x = tensor("x", dtype, &dims);
    let a = if permuted {
        ops::permute(&x, [1, 0, 3, 2]).unwrap()
    } else {
        x.clone()
    };
    (x, a)
}

/// NMSE allowed for a result rounded to `dtype` (f64 accumulation otherwise).
fn out_tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-12,
        DType::F16 => 1e-6,
        _ => 5e-5,
    }
}

const SHAPES: [[usize; 4]; 4] = [
    [37, 5, 3, 2],
    [1, 7, 1, 3],
    [5000, 3, 1, 1],
    [11, 2000, 1, 1],
];

/// Calls `f(what, dtype, x, a)` for every shape of [`SHAPES`] in F32, F16
/// and BF16, read directly and through a permuted view ([`source`]); `what`
/// names the case.
fn each_source(mut f: impl FnMut(String, DType, Tensor, Tensor)) {
    for dims in SHAPES {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for permuted in [false, true] {
                let (x, a) = source(dtype, dims, permuted);
                f(format!("{dims:?} {dtype} p={permuted}"), dtype, x, a);
            }
        }
    }
}

#[test]
fn sum_all_elements() {
    let mut rng = Rng::new(1);
    each_source(|what, dtype, x, a| {
        let s = ops::sum(&a).unwrap();
        assert_eq!(s.dtype(), dtype);
        let data = rng.vec(x.nelements(), -1.0, 2.0);
        let out = run_threads(&[s, a], &[(&x, &data)]);
        let want: f64 = out[1].iter().map(|&v| v as f64).sum();
        let tol = out_tol(dtype);
        assert_close(&format!("sum {what}"), &out[0], &[want], tol);
    });
}

#[test]
fn sum_is_accurate_on_large_cancelling_input() {
    // 1e6 values of ±1e4 plus a small offset: an f32 running sum loses the offset.
    let n = 1_000_000;
    let x = tensor("x", DType::F32, &[n]);
    let s = ops::sum(&x).unwrap();
    let data: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { 1e4 + 0.25 } else { -1e4 })
        .collect();
    let out = run_threads(&[s], &[(&x, &data)]);
    let want: f64 = data.iter().map(|&v| v as f64).sum();
    assert_eq!(out[0][0], want as f32);
}

#[test]
fn sum_rows_and_mean() {
    let mut rng = Rng::new(2);
    each_source(|what, dtype, x, a| {
        let sr = ops::sum_rows(&a).unwrap();
        let mean = ops::mean(&a).unwrap();
        assert_eq!(sr.dtype(), dtype);
        assert_eq!(mean.dtype(), DType::F32);
        let data = rng.vec(x.nelements(), -3.0, 1.0);
        let out = run_threads(&[sr, mean, a.clone()], &[(&x, &data)]);
        let ne0 = a.ne()[0];
        let sums: Vec<f64> = rows(&out[2], ne0)
            .map(|r| r.iter().map(|&v| v as f64).sum())
            .collect();
        let means: Vec<f64> = sums.iter().map(|s| s / ne0 as f64).collect();
        let tol = out_tol(dtype);
        assert_close(&format!("sum_rows {what}"), &out[0], &sums, tol);
        assert_close(&format!("mean {what}"), &out[1], &means, 1e-12);
    });
}

#[test]
fn argmax_takes_the_first_maximum() {
    let mut rng = Rng::new(3);
    for (dims, transposed) in [([13, 9], false), ([6, 40], true), ([1, 3], false)] {
        for dtype in [DType::F32, DType::F16] {
            let x = tensor("x", dtype, &dims);
            let a = if transposed {
                ops::transpose(&x).unwrap()
            } else {
                x.clone()
            };
            let am = ops::argmax(&a).unwrap();
            // Small integers: many ties.
            let data: Vec<f32> = (0..x.nelements()).map(|_| rng.below(5) as f32).collect();
            let out = run_threads(&[am, a.clone()], &[(&x, &data)]);
            let want: Vec<f32> = rows(&out[1], a.ne()[0])
                .map(|r| {
                    let mut best = 0;
                    for (i, &v) in r.iter().enumerate() {
                        if v > r[best] {
                            best = i;
                        }
                    }
                    best as f32
                })
                .collect();
            assert_eq!(out[0], want, "argmax {dims:?} {dtype} t={transposed}");
        }
    }
}

fn stable_argsort(r: &[f32], order: SortOrder) -> Vec<f32> {
    let mut idx: Vec<usize> = (0..r.len()).collect();
    match order {
        SortOrder::Asc => idx.sort_by(|&p, &q| r[p].partial_cmp(&r[q]).unwrap()),
        SortOrder::Desc => idx.sort_by(|&p, &q| r[q].partial_cmp(&r[p]).unwrap()),
    }
    idx.into_iter().map(|i| i as f32).collect()
}

#[test]
fn argsort_is_stable_in_both_orders() {
    let mut rng = Rng::new(4);
    for dims in [[29, 3, 2, 1], [1, 4, 1, 1], [300, 2, 1, 2]] {
        for dtype in [DType::F32, DType::F16] {
            for permuted in [false, true] {
                for order in [SortOrder::Asc, SortOrder::Desc] {
                    let (x, a) = source(dtype, dims, permuted);
                    let s = ops::argsort(&a, order).unwrap();
                    assert_eq!(s.dtype(), DType::I32);
                    // Few distinct values so ties are everywhere; some negative zeros.
                    let data: Vec<f32> = (0..x.nelements())
                        .map(|_| match rng.below(7) {
                            0 => -0.0,
                            k => k as f32 * 0.5 - 1.5,
                        })
                        .collect();
                    let out = run_threads(&[s, a.clone()], &[(&x, &data)]);
                    let want: Vec<f32> = rows(&out[1], a.ne()[0])
                        .flat_map(|r| stable_argsort(r, order))
                        .collect();
                    assert_eq!(
                        out[0], want,
                        "argsort {dims:?} {dtype} p={permuted} {order:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn argsort_puts_nan_last_ascending_and_first_descending() {
    let x = tensor("x", DType::F32, &[5]);
    let asc = ops::argsort(&x, SortOrder::Asc).unwrap();
    let desc = ops::argsort(&x, SortOrder::Desc).unwrap();
    let data = [2.0, f32::NAN, -1.0, f32::INFINITY, 0.0];
    let out = run_threads(&[asc, desc], &[(&x, &data)]);
    assert_eq!(out[0], vec![2.0, 4.0, 0.0, 3.0, 1.0]);
    assert_eq!(out[1], vec![1.0, 3.0, 0.0, 4.0, 2.0]);
}

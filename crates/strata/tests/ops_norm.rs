//! NORM and RMS_NORM against f64 references: odd and random shapes,
//! permuted sources, in place, and 1/2/3 threads.

mod common;
mod kernel_util;

use common::{assert_close, tensor, Rng};
use kernel_util::{assert_in_place, run_threads};
use proptest::prelude::*;
use strata::{ops, DType, Tensor};

fn norm_ref(r: &[f32], eps: f32, rms: bool) -> Vec<f64> {
    let n = r.len() as f64;
    let x: Vec<f64> = r.iter().map(|&v| v as f64).collect();
    let mean = if rms { 0.0 } else { x.iter().sum::<f64>() / n };
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let s = 1.0 / (var + eps as f64).sqrt();
    x.iter().map(|v| (v - mean) * s).collect()
}

/// Runs NORM or RMS_NORM on `dims` (through a permuted view when asked) and
/// checks it against the reference.
fn check(dims: [usize; 4], permuted: bool, eps: f32, rms: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let x = tensor("x", DType::F32, &dims);
    let a = if permuted {
        ops::permute(&x, [2, 0, 1, 3]).unwrap()
    } else {
        x.clone()
    };
    let y = if rms {
        ops::rms_norm(&a, eps).unwrap()
    } else {
        ops::norm(&a, eps).unwrap()
    };
    // An offset makes the mean matter; a scale makes eps matter less.
    let data: Vec<f32> = rng
        .vec(x.nelements(), -2.0, 2.0)
        .into_iter()
        .map(|v| v * 3.0 + 5.0)
        .collect();
    let out = run_threads(&[y, a.clone()], &[(&x, &data)]);
    let want: Vec<f64> = out[1]
        .chunks(a.ne()[0])
        .flat_map(|r| norm_ref(r, eps, rms))
        .collect();
    let what = format!(
        "{} {dims:?} p={permuted} eps={eps}",
        if rms { "rms_norm" } else { "norm" }
    );
    assert_close(&what, &out[0], &want, 1e-12);
}

#[test]
fn norms_on_odd_and_permuted_shapes() {
    let mut seed = 10;
    for dims in [[37, 5, 3, 2], [1, 3, 2, 1], [4097, 2, 1, 1], [8, 1, 1, 1]] {
        for permuted in [false, true] {
            for rms in [false, true] {
                for eps in [1e-5, 1e-6, 0.5] {
                    seed += 1;
                    check(dims, permuted, eps, rms, seed);
                }
            }
        }
    }
}

#[test]
fn constant_rows_normalize_to_zero_not_nan() {
    let x = tensor("x", DType::F32, &[6, 2]);
    let y = ops::norm(&x, 1e-5).unwrap();
    let out = run_threads(&[y], &[(&x, &[3.0; 12])]);
    assert!(out[0].iter().all(|&v| v == 0.0), "{:?}", out[0]);
}

#[test]
fn norms_in_place_match_out_of_place() {
    let dims = [45, 7, 3, 1];
    let n: usize = dims.iter().product();
    let data = Rng::new(20).vec(n, -4.0, 4.0);
    for (what, eps, rms) in [("norm", 1e-5, false), ("rms_norm", 1e-6, true)] {
        let build = |x: &Tensor| {
            if rms {
                ops::rms_norm(x, eps).unwrap()
            } else {
                ops::norm(x, eps).unwrap()
            }
        };
        let got = assert_in_place(DType::F32, &dims, &data, &[], build);
        let want: Vec<f64> = data
            .chunks(45)
            .flat_map(|r| norm_ref(r, eps, rms))
            .collect();
        assert_close(&format!("{what} in place"), &got, &want, 1e-12);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn norms_on_random_shapes(
        ne0 in 1usize..70, ne1 in 1usize..5, ne2 in 1usize..4, ne3 in 1usize..3,
        permuted: bool, rms: bool, seed in 0u64..1000,
    ) {
        check([ne0, ne1, ne2, ne3], permuted, 1e-5, rms, seed);
    }
}

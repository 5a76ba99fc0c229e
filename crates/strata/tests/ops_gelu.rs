//! The GELU family against f64 references: GELU (tanh approximation),
//! GELU_ERF (exact, ggml's unary op 16) and the gated GEGLU / GEGLU_ERF
//! (ggml's GLU ops 1 and 4), split and fused, on 1–3 threads.

mod common;
mod kernel_util;

use common::{assert_close, tensor, Rng};
use kernel_util::run_threads;
use strata::ops::{self, GluOp, UnaryOp};
use strata::DType;

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

#[test]
fn gelu_erf_matches_the_exact_formula() {
    let mut rng = Rng::new(7);
    let x = tensor("x", DType::F32, &[67, 5]);
    let data: Vec<f32> = rng.vec(x.nelements(), -6.0, 6.0);
    for (op, f) in [
        (UnaryOp::GeluErf, gelu_erf as fn(f64) -> f64),
        (UnaryOp::Gelu, gelu_tanh),
    ] {
        let y = ops::unary(&x, op).unwrap();
        let out = run_threads(&[y], &[(&x, &data)]);
        let want: Vec<f64> = data.iter().map(|&v| f(v as f64)).collect();
        assert_close(&format!("{op:?}"), &out[0], &want, 1e-12);
    }
    // the two differ by more than the bound: the test tells them apart
    let d: f64 = data
        .iter()
        .map(|&v| (gelu_erf(v as f64) - gelu_tanh(v as f64)).abs())
        .fold(0.0, f64::max);
    assert!(d > 1e-4, "{d}");
    assert_eq!(UnaryOp::GeluErf.ggml_id(), 16);
    assert_eq!(UnaryOp::from_ggml_id(16), Some(UnaryOp::GeluErf));
}

#[test]
fn geglu_erf_split_and_fused() {
    let mut rng = Rng::new(9);
    let n = 40;
    let a = tensor("a", DType::F32, &[n, 3]);
    let b = tensor("b", DType::F32, &[n, 3]);
    let ab = tensor("ab", DType::F32, &[2 * n, 3]);
    let da: Vec<f32> = rng.vec(a.nelements(), -5.0, 5.0);
    let db: Vec<f32> = rng.vec(b.nelements(), -2.0, 2.0);
    let dab: Vec<f32> = rng.vec(ab.nelements(), -5.0, 5.0);
    for (op, f) in [
        (GluOp::GegluErf, gelu_erf as fn(f64) -> f64),
        (GluOp::Geglu, gelu_tanh),
    ] {
        let y = ops::glu_split(&a, &b, op).unwrap();
        let out = run_threads(&[y], &[(&a, &da), (&b, &db)]);
        let want: Vec<f64> = da
            .iter()
            .zip(&db)
            .map(|(&x, &g)| f(x as f64) * g as f64)
            .collect();
        assert_close(&format!("{op:?} split"), &out[0], &want, 1e-12);
        for swapped in [false, true] {
            let y = ops::glu(&ab, op, swapped).unwrap();
            let out = run_threads(&[y], &[(&ab, &dab)]);
            let want: Vec<f64> = dab
                .chunks(2 * n)
                .flat_map(|r| {
                    let (g, u) = if swapped {
                        (&r[n..], &r[..n])
                    } else {
                        (&r[..n], &r[n..])
                    };
                    g.iter()
                        .zip(u)
                        .map(|(&x, &v)| f(x as f64) * v as f64)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_close(
                &format!("{op:?} fused swapped={swapped}"),
                &out[0],
                &want,
                1e-12,
            );
        }
    }
    assert_eq!(GluOp::GegluErf.ggml_id(), 4);
    assert_eq!(GluOp::from_ggml_id(4), Some(GluOp::GegluErf));
}

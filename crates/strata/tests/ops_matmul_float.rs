//! The float-weight MUL_MAT kernels (F16 / BF16 / F32 weights: packed GEMM
//! for n > 1, multi-row GEMV for n = 1) at every SIMD level this CPU runs,
//! against an f64 reference, element by element.
//!
//! The bound is the one `cpu/ops/matmul_float.rs` documents: activations
//! rounded to the weight's dot type (f16 / bf16 / f32) as ggml does, then
//! `|got - ref| <= (K + K / 256 + 2) · 2^-24 · Σ_k |a_k b_k|` per output
//! (the GEMV's bound is smaller). A kernel that drops, duplicates or
//! misplaces a single product misses it by orders of magnitude. Also: odd
//! sizes around the 32 × 12 / 16 × 6 tiles and the K blocks, strided /
//! transposed / permuted activations, broadcasting over dims 2 and 3,
//! bitwise-identical results on 1, 2 and 3 threads, and the per-output dot
//! products of levels without GEMM tiles agreeing within the same bound.

mod common;

use common::matmul::{make_b, reference, Case, Layout, LAYOUTS};
use common::{round_trip, tensor, Rng};
use proptest::prelude::*;
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::isa::Isa;
use strata::{ops, DType, Graph};

struct Run {
    got: Vec<f32>,
    want: Vec<f64>,
    mag: Vec<f64>,
}

/// Computes the case with `nth` threads at level `isa`, and the f64
/// reference with activations rounded to the dot type.
fn run(c: &Case, nth: usize, isa: Isa, seed: u64) -> Run {
    let mut rng = Rng::new(seed);
    let ane = [c.k, c.m, c.a23[0], c.a23[1]];
    let a = tensor("a", c.at, &ane);
    let (base, nbase, b) = make_b(c);
    let out = ops::mul_mat(&a, &b).unwrap();
    let g = Graph::build(&[out.clone()]);
    let _bufs = alloc_graph_host(&g).unwrap();
    a.write_f32(&rng.vec(ane.iter().product(), -1.0, 1.0))
        .unwrap();
    base.write_f32(&rng.vec(nbase, -1.0, 1.0)).unwrap();
    let mut cpu = CpuBackend::new(nth);
    cpu.set_isa(isa).unwrap();
    cpu.graph_compute(&g).unwrap();
    let got = out.to_f32_vec().unwrap();

    let av = a.to_f32_vec().unwrap();
    let dot_type = strata::quant::vec_dot_type(c.at);
    let bv: Vec<f32> = b
        .to_f32_vec()
        .unwrap()
        .chunks(c.k)
        .flat_map(|r| round_trip(dot_type, r))
        .collect();
    Run {
        got,
        want: reference(&av, ane, &bv, b.ne(), |x| x),
        mag: reference(&av, ane, &bv, b.ne(), f64::abs),
    }
}

impl Run {
    fn check(&self, what: &str, k: usize) {
        assert_eq!(self.got.len(), self.want.len(), "{what}: output size");
        let factor = (k + k / 256 + 2) as f64 * 2f64.powi(-24);
        for (i, ((&g, &w), &m)) in self.got.iter().zip(&self.want).zip(&self.mag).enumerate() {
            let bound = factor * m + 1e-30;
            assert!(
                (g as f64 - w).abs() <= bound,
                "{what}: output {i}: got {g}, want {w} (|diff| {:e} > bound {bound:e})",
                (g as f64 - w).abs()
            );
        }
    }
}

fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

const WEIGHTS: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

#[test]
fn every_level_every_float_type_odd_shapes() {
    let mut shapes = Vec::new();
    for k in [1, 7, 64] {
        for m in [1, 15, 16, 33, 192] {
            for n in [1, 2, 3, 5, 8, 17, 64] {
                shapes.push((k, m, n));
            }
        }
    }
    check_plain(&shapes, 1);
}

#[test]
fn model_sized_k_and_n() {
    // K of the model (576, 1536: several K blocks, the last one short for
    // neither and both), N = 512 with edge panels, M around the tiles.
    check_plain(
        &[
            (576, 33, 512),
            (1536, 15, 17),
            (1536, 192, 5),
            (576, 192, 1),
            (1536, 33, 1),
            (577, 47, 13),
            (257, 64, 64),
        ],
        100,
    );
}

/// Checks [`Case::plain`] of every (k, m, n) of `shapes` for every float
/// weight type at every level, on 2 threads, with seeds `seed + 1`, ...
fn check_plain(shapes: &[(usize, usize, usize)], mut seed: u64) {
    for isa in levels() {
        for at in WEIGHTS {
            for &(k, m, n) in shapes {
                seed += 1;
                let c = Case::plain(at, k, m, n);
                run(&c, 2, isa, seed).check(&format!("{isa} {c:?}"), k);
            }
        }
    }
}

#[test]
fn layouts_activation_types_and_broadcast() {
    let mut seed = 1000;
    for isa in levels() {
        for at in WEIGHTS {
            for bt in [DType::F32, DType::F16, DType::BF16] {
                for layout in LAYOUTS {
                    for (k, m, n) in [(37, 35, 11), (70, 19, 1), (64, 64, 3)] {
                        seed += 1;
                        let c = Case {
                            at,
                            bt,
                            layout,
                            k,
                            m,
                            n,
                            a23: [2, 1],
                            b23: [4, 3],
                        };
                        run(&c, 2, isa, seed).check(&format!("{isa} {c:?}"), k);
                    }
                }
            }
        }
    }
}

#[test]
fn identical_bits_for_one_two_three_threads() {
    for isa in levels() {
        for (at, layout, k, m, n, a23, b23) in [
            (DType::F16, Layout::Contiguous, 576, 192, 64, [1, 1], [1, 1]),
            (DType::F16, Layout::Contiguous, 576, 100, 1, [1, 1], [1, 1]),
            (DType::BF16, Layout::Transposed, 300, 37, 29, [1, 2], [3, 2]),
            (DType::F32, Layout::Permuted, 64, 33, 17, [3, 1], [9, 1]),
            (DType::F32, Layout::Strided, 45, 5, 1, [1, 2], [3, 2]),
            (DType::F16, Layout::Contiguous, 64, 70, 2, [3, 1], [9, 1]),
        ] {
            let c = Case {
                at,
                bt: DType::F32,
                layout,
                k,
                m,
                n,
                a23,
                b23,
            };
            let one = run(&c, 1, isa, 7);
            one.check(&format!("{isa} {c:?}"), k);
            for nth in [2, 3] {
                let got = run(&c, nth, isa, 7).got;
                assert!(
                    one.got
                        .iter()
                        .zip(&got)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{isa} {c:?}: {nth} threads differ from 1"
                );
            }
        }
    }
}

#[test]
fn dot_product_path_meets_the_same_bound() {
    // Levels without GEMM tiles (scalar) run matmul.rs's per-output dot products.
    for at in WEIGHTS {
        for n in [1, 9] {
            let c = Case::plain(at, 96, 40, n);
            run(&c, 2, Isa::Scalar, 3).check(&format!("scalar {c:?}"), 96);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes(
        wi in 0usize..3,
        bi in 0usize..3,
        li in 0usize..4,
        k in 1usize..300,
        m in 1usize..80,
        n in 1usize..30,
        a2 in 1usize..3,
        r2 in 1usize..3,
        r3 in 1usize..3,
        nth in 1usize..4,
        lvl in 0usize..4,
        seed in 0u64..1000,
    ) {
        let ls = levels();
        let isa = ls[lvl % ls.len()];
        let c = Case {
            at: WEIGHTS[wi],
            bt: [DType::F32, DType::F16, DType::BF16][bi],
            layout: [Layout::Contiguous, Layout::Transposed, Layout::Permuted, Layout::Strided][li],
            k,
            m,
            n,
            a23: [a2, 1],
            b23: [a2 * r2, r3],
        };
        run(&c, nth, isa, seed).check(&format!("{isa} {c:?}"), k);
    }
}

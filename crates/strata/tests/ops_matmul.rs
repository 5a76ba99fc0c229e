//! MUL_MAT on the CPU against an f64 reference: every weight type, float
//! activations in any layout, broadcasting, thread-count independence.
//!
//! Error bounds (NMSE, sum of squared errors over sum of squares):
//! * F32 weights: 1e-10 (f32 products, f64 sums).
//! * F16 weights: activations are rounded to f16 first: 1e-5.
//! * BF16 weights: activations rounded to bf16: 1e-4.
//! * Q4_0/Q5_0/Q8_0 (activations quantized to Q8_0) and Q4_1/Q5_1 (Q8_1):
//!   the reference uses the dequantized weights and exact activations, so
//!   the only error is the 8-bit activation rounding (~1.5e-5 for uniform
//!   data): bound 1e-4, checked where there are enough outputs for the
//!   NMSE to average (≥ 16 values; a lone dot product can cancel). The same
//!   holds for IQ4_NL (Q8_0) and Q2_K..Q6_K / IQ4_XS (activations quantized
//!   to Q8_K, 256 per block, the same 8-bit rounding).
//!
//! Every case is also checked against a second reference whose activations
//! are rounded to the dot type first (what ggml computes), with the error
//! normalized by Σ|a·b| per output (robust to cancellation in a single dot
//! product): bound 1e-12 for float weights and Q8_0 partners (f32
//! accumulation only), 1e-7 for Q8_1 partners (Q4_1/Q5_1: their dot product
//! uses the f16-rounded block sum `s` of the activations). Q8_K partners
//! share the 1e-12 bound (f32 accumulation only; measured below 3e-16 on
//! these cases, although the Q2_K / Q4_K / Q5_K terms `d·s·Σqx·qy` and
//! `dmin·m·Σqy` are rounded separately where the reference dequantizes each
//! weight to `d·s·q - dmin·m` first).

mod common;

use common::matmul::{
    assert_emulated, exact_tol as tol, k_blocks, make_b, reference, Case, Layout, LAYOUTS,
};
use common::{assert_close, cpu_round_trip, cpu_round_trip_at, run, tensor, Rng};
use proptest::prelude::*;
use strata::backend::Backend;
use strata::conformance::WEIGHT_TYPES as WEIGHTS;
use strata::isa::Isa;
use strata::{ops, DType};

/// Result, reference with exact activations, reference with activations
/// rounded to the weight's dot type.
struct Outcome {
    got: Vec<f32>,
    exact: Vec<f64>,
    emulated: Vec<f64>,
    magnitude: Vec<f64>,
}

impl Outcome {
    fn check(&self, what: &str, at: DType) {
        assert_emulated(what, at, &self.got, &self.emulated, &self.magnitude);
        if self.got.len() >= 16 {
            assert_close(
                &format!("{what} (vs exact activations)"),
                &self.got,
                &self.exact,
                tol(at),
            );
        }
    }
}

/// Runs the case with `nth` threads.
fn run_case(c: &Case, nth: usize, seed: u64) -> Outcome {
    run_case_at(c, nth, seed, None)
}

/// Runs the case with `nth` threads, at SIMD level `isa` (default: active).
fn run_case_at(c: &Case, nth: usize, seed: u64, isa: Option<Isa>) -> Outcome {
    let mut rng = Rng::new(seed);
    let ane = [c.k, c.m, c.a23[0], c.a23[1]];
    let a = tensor("a", c.at, &ane);
    let (base, nbase, b) = make_b(c);
    let out = ops::mul_mat(&a, &b).unwrap();
    assert_eq!(out.ne(), [c.m, c.n, c.b23[0], c.b23[1]]);
    let av = rng.vec(ane.iter().product(), -1.0, 1.0);
    let bv = rng.vec(nbase, -1.0, 1.0);
    let got = match isa {
        None => run(&[out], &[(&a, &av), (&base, &bv)], nth).remove(0),
        Some(isa) => {
            let g = strata::Graph::build(&[out.clone()]);
            let _bufs = strata::cpu::alloc_graph_host(&g).unwrap();
            a.write_f32(&av).unwrap();
            base.write_f32(&bv).unwrap();
            let mut cpu = strata::cpu::CpuBackend::new(nth);
            cpu.set_isa(isa).unwrap();
            assert_eq!(cpu.isa(), isa);
            cpu.graph_compute(&g).unwrap();
            out.to_f32_vec().unwrap()
        }
    };
    // Reference inputs: the values as stored (dequantized weights, rounded
    // activations), read back through the views.
    let a_stored = a.to_f32_vec().unwrap();
    let b_logical = b.to_f32_vec().unwrap();
    let vdt = strata::quant::vec_dot_type(c.at);
    let b_rounded: Vec<f32> = b_logical
        .chunks(c.k)
        .flat_map(|r| cpu_round_trip_at(isa.unwrap_or_else(strata::isa::active), vdt, r))
        .collect();
    Outcome {
        got,
        exact: reference(&a_stored, ane, &b_logical, b.ne(), |x| x),
        emulated: reference(&a_stored, ane, &b_rounded, b.ne(), |x| x),
        magnitude: reference(&a_stored, ane, &b_rounded, b.ne(), f64::abs),
    }
}

#[test]
fn every_weight_type_every_layout_with_broadcast() {
    let mut seed = 1;
    for at in WEIGHTS {
        for bt in [DType::F32, DType::F16, DType::BF16] {
            for layout in LAYOUTS {
                seed += 1;
                // Block types need K in whole blocks; floats get an odd K.
                let k = if at.is_quantized() {
                    k_blocks(at, 3)
                } else {
                    37
                };
                let c = Case {
                    at,
                    bt,
                    layout,
                    k,
                    m: 19,
                    n: 11,
                    a23: [2, 1],
                    b23: [4, 3],
                };
                run_case(&c, 2, seed).check(&format!("{at} x {bt} {layout:?}"), at);
            }
        }
    }
}

/// Every SIMD level this CPU runs (chosen per backend, so one process covers
/// scalar, AVX2, AVX-512 and VNNI), every weight type, K with an odd number
/// of blocks / not a multiple of the float unroll, matrix and vector shapes.
#[test]
fn every_simd_level_matches_the_reference() {
    let levels: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_supported()).collect();
    assert!(levels.contains(&strata::isa::detected()));
    let mut seed = 500;
    for isa in levels {
        for at in WEIGHTS {
            for (k, n) in [(160, 11), (160, 1), (608, 5)] {
                seed += 1;
                // K-quants: 1 and 3 super-blocks.
                let k = if at.is_quantized() {
                    k_blocks(at, k / 32)
                } else {
                    k - 3
                };
                let c = Case::plain(at, k, 21, n);
                run_case_at(&c, 2, seed, Some(isa)).check(&format!("{isa} {at} k={k} n={n}"), at);
            }
        }
    }
}

#[test]
fn unsupported_simd_levels_are_refused() {
    let mut cpu = strata::cpu::CpuBackend::new(1);
    let before = cpu.isa();
    for isa in Isa::ALL.into_iter().filter(|i| !i.is_supported()) {
        let e = cpu.set_isa(isa).unwrap_err();
        let strata::Error::BadValue {
            arg,
            value,
            expected,
        } = &e
        else {
            panic!("{isa}: {e}");
        };
        assert_eq!(arg, "CpuBackend::set_isa: instruction-set level");
        assert_eq!(value, isa.name());
        let up_to = format!("up to {}", strata::isa::detected());
        assert!(expected.ends_with(&up_to), "{e}");
        assert!(e.to_string().contains(isa.name()), "{e}");
        assert_eq!(cpu.isa(), before);
    }
    cpu.set_isa(Isa::Scalar).unwrap();
    assert_eq!(cpu.isa(), Isa::Scalar);
}

#[test]
fn small_m_and_vector_shapes() {
    // M smaller than a tile (work split over columns), N = 1 (matrix-vector),
    // M = 1 (row-vector): all must match the reference.
    for (m, n) in [(3, 40), (33, 1), (1, 17), (1, 1)] {
        for at in [DType::F32, DType::Q8_0, DType::Q4_1, DType::Q6_K] {
            let c = Case {
                at,
                bt: DType::F32,
                layout: Layout::Contiguous,
                k: k_blocks(at, 2),
                m,
                n,
                a23: [1, 1],
                b23: [1, 1],
            };
            run_case(&c, 3, (m * 100 + n) as u64).check(&format!("{at} m={m} n={n}"), at);
        }
    }
}

#[test]
fn identical_bits_for_one_two_three_threads() {
    for (at, layout, m, n) in [
        (DType::F32, Layout::Transposed, 37, 9),
        (DType::Q4_0, Layout::Contiguous, 35, 13),
        (DType::F16, Layout::Permuted, 5, 29),
        (DType::Q5_1, Layout::Strided, 2, 3),
        (DType::Q4_K, Layout::Transposed, 19, 7),
        (DType::IQ4_NL, Layout::Contiguous, 17, 5),
    ] {
        let c = Case {
            at,
            bt: DType::F32,
            layout,
            k: 64,
            m,
            n,
            a23: [1, 2],
            b23: [3, 2],
        };
        let c = Case {
            k: k_blocks(at, 2),
            ..c
        };
        let one = run_case(&c, 1, 77).got;
        for nth in [2, 3] {
            let got = run_case(&c, nth, 77).got;
            let same = one
                .iter()
                .zip(&got)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{at} {layout:?}: {nth} threads differ from 1");
        }
    }
}

#[test]
fn unsupported_weight_types_are_refused_not_computed() {
    // Q8_1 and Q8_K have no dot product: the graph builds (ggml allows it)
    // but the CPU backend must refuse it with a typed error instead of
    // aborting.
    for at in [DType::Q8_1, DType::Q8_K] {
        let k = at.block_size();
        let a = tensor("a", at, &[k, 2]);
        let b = tensor("b", DType::F32, &[k, 3]);
        let Ok(c) = ops::mul_mat(&a, &b) else {
            continue; // refused at build time: also fine
        };
        let g = strata::Graph::build(&[c]);
        let _bufs = strata::cpu::alloc_graph_host(&g).unwrap();
        let err = strata::cpu::compute(&g, 1).unwrap_err();
        assert!(
            matches!(err, strata::Error::Unsupported { .. }),
            "{at}: {err}"
        );
    }
}

/// K-quant weights need K in whole super-blocks of 256: other lengths are
/// refused when the tensor is made, not computed.
#[test]
fn k_quant_rows_must_be_whole_super_blocks() {
    for at in [DType::Q4_K, DType::IQ4_XS] {
        let e = strata::Tensor::new(at, &[128, 4]).unwrap_err();
        assert!(e.to_string().contains("256"), "{at}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_shapes_and_views(
        wi in 0usize..WEIGHTS.len(),
        bi in 0usize..3,
        li in 0usize..4,
        kb in 1usize..4,
        kodd in 1usize..40,
        m in 1usize..24,
        n in 1usize..12,
        a2 in 1usize..3,
        r2 in 1usize..3,
        r3 in 1usize..3,
        nth in 1usize..4,
        seed in 0u64..1000,
    ) {
        let at = WEIGHTS[wi];
        let k = if at.is_quantized() { at.block_size() * kb } else { kodd };
        let c = Case {
            at,
            bt: [DType::F32, DType::F16, DType::BF16][bi],
            layout: LAYOUTS[li],
            k,
            m,
            n,
            a23: [a2, 1],
            b23: [a2 * r2, r3],
        };
        run_case(&c, nth, seed).check(&format!("{at} k={k} m={m} n={n}"), at);
    }
}

#[test]
fn permuted_weights_as_in_unfused_attention() {
    // kq = mul_mat(k, q) with k a permuted view [D, n_kv, H] of a
    // [D, H, n_kv] cache: rows of a stay contiguous, dims 1 and 2 are strided.
    let mut rng = Rng::new(21);
    for at in [DType::F32, DType::F16, DType::Q8_0] {
        let (k, m, h, n) = (64, 9, 3, 5);
        let a_base = tensor("k_cache", at, &[k, h, m]);
        let a = ops::permute(&a_base, [0, 2, 1, 3]).unwrap();
        let b = tensor("q", DType::F32, &[k, n, h]);
        let out = ops::mul_mat(&a, &b).unwrap();
        let av = rng.vec(k * m * h, -1.0, 1.0);
        let bv = rng.vec(k * n * h, -1.0, 1.0);
        let got = run(&[out], &[(&a_base, &av), (&b, &bv)], 2).remove(0);
        let a_logical = a.to_f32_vec().unwrap();
        let vdt = strata::quant::vec_dot_type(at);
        let b_rounded: Vec<f32> = bv.chunks(k).flat_map(|r| cpu_round_trip(vdt, r)).collect();
        let want = reference(&a_logical, a.ne(), &b_rounded, b.ne(), |x| x);
        assert_close(&format!("permuted {at}"), &got, &want, 1e-10);
    }
}

//! ROPE against an f64 reference: NORMAL and NEOX modes, partial rotation,
//! YaRN scaling, frequency factors, F16 and permuted sources, in place,
//! 1/2/3 threads and random shapes.

mod common;
mod kernel_util;

use common::{assert_close, tensor, Rng};
use kernel_util::{assert_in_place, run_threads};
use proptest::prelude::*;
use strata::ops::{self, RopeMode, RopeParams};
use strata::{DType, Tensor};

/// YaRN correction range, from the definition (the dimension making n_rot
/// turns over the original context), floored/ceiled and clamped.
fn corr_dims_ref(p: &RopeParams) -> (f64, f64) {
    let dim = |n_rot: f64| {
        p.n_dims as f64 * (p.n_ctx_orig as f64 / (n_rot * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * (p.freq_base as f64).ln())
    };
    let lo = dim(p.beta_fast as f64).floor().max(0.0);
    let hi = dim(p.beta_slow as f64).ceil().min(p.n_dims as f64 - 1.0);
    (lo, hi)
}

/// Reference RoPE of logical x [ne0, ne1, ne2, ne3] at positions (one per i2).
fn rope_ref(
    x: &[f32],
    ne: [usize; 4],
    pos: &[f32],
    ff: Option<&[f32]>,
    p: &RopeParams,
) -> Vec<f64> {
    let half = p.n_dims / 2;
    let (lo, hi) = corr_dims_ref(p);
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (r, row) in out.chunks_mut(ne[0]).enumerate() {
        let i2 = (r / ne[1]) % ne[2];
        for i in 0..half {
            let mut extrap =
                pos[i2] as f64 * (p.freq_base as f64).powf(-2.0 * i as f64 / p.n_dims as f64);
            if let Some(f) = ff {
                extrap /= f[i] as f64;
            }
            let interp = p.freq_scale as f64 * extrap;
            let mut mscale = p.attn_factor as f64;
            let theta = if p.ext_factor != 0.0 {
                let y = (i as f64 - lo) / (hi - lo).max(0.001);
                let mix = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor as f64;
                mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            let (s, c) = theta.sin_cos();
            let (j0, j1) = match p.mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (x0, x1) = (row[j0], row[j1]);
            row[j0] = (x0 * c - x1 * s) * mscale;
            row[j1] = (x0 * s + x1 * c) * mscale;
        }
    }
    out
}

fn yarn(mut p: RopeParams) -> RopeParams {
    p.n_ctx_orig = 64;
    p.freq_scale = 0.25;
    p.ext_factor = 1.0;
    p.attn_factor = 0.9;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p
}

/// Runs one ROPE case and checks it against the reference and thread invariance.
fn check(ne: [usize; 4], dtype: DType, p: RopeParams, with_ff: bool, permuted: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let leaf_ne = if permuted {
        [ne[0], ne[2], ne[1], ne[3]]
    } else {
        ne
    };
    let x = tensor("x", dtype, &leaf_ne);
    let a = if permuted {
        ops::permute(&x, [0, 2, 1, 3]).unwrap()
    } else {
        x.clone()
    };
    let pos = tensor("pos", DType::I32, &[ne[2]]);
    let ff = with_ff.then(|| tensor("ff", DType::F32, &[p.n_dims / 2]));
    let y = ops::rope_ext(&a, &pos, ff.as_ref(), p).unwrap();
    assert_eq!(y.dtype(), dtype);
    let x_data = rng.vec(x.nelements(), -2.0, 2.0);
    let pos_data: Vec<f32> = (0..ne[2]).map(|_| rng.below(3000) as f32).collect();
    let ff_data = rng.vec(p.n_dims / 2, 1.0, 4.0);
    let mut inputs: Vec<(&Tensor, &[f32])> = vec![(&x, &x_data), (&pos, &pos_data)];
    if let Some(f) = &ff {
        inputs.push((f, &ff_data));
    }
    let out = run_threads(&[y, a], &inputs);
    let want = rope_ref(&out[1], ne, &pos_data, with_ff.then_some(&ff_data[..]), &p);
    let tol = if dtype == DType::F32 { 1e-9 } else { 1e-6 };
    let what = format!("rope {ne:?} {dtype} {p:?} ff={with_ff} p={permuted}");
    assert_close(&what, &out[0], &want, tol);
}

#[test]
fn rope_modes_full_and_partial_rotation() {
    let mut seed = 0;
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (ne, n_dims) in [([16, 3, 5, 2], 16), ([14, 3, 5, 1], 10), ([2, 1, 3, 1], 2)] {
            for dtype in [DType::F32, DType::F16] {
                for permuted in [false, true] {
                    seed += 1;
                    let p = RopeParams::new(n_dims, mode, 10000.0);
                    check(ne, dtype, p, false, permuted, seed);
                }
            }
        }
    }
}

#[test]
fn rope_with_yarn_and_freq_factors() {
    let mut seed = 100;
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (ne, n_dims, base) in [([16, 3, 5, 2], 16, 10000.0), ([22, 2, 4, 1], 18, 500000.0)] {
            for (scaled, with_ff) in [(true, false), (false, true), (true, true)] {
                seed += 1;
                let mut p = RopeParams::new(n_dims, mode, base);
                if scaled {
                    p = yarn(p);
                }
                check(ne, DType::F32, p, with_ff, seed % 2 == 0, seed);
            }
        }
    }
    // Linear scaling only (no YaRN ramp) and a custom attention factor.
    let mut p = RopeParams::new(16, RopeMode::Neox, 10000.0);
    p.freq_scale = 0.5;
    p.attn_factor = 1.25;
    check([16, 3, 5, 1], DType::F16, p, true, false, 200);
}

#[test]
fn yarn_ramp_is_really_exercised() {
    // The YaRN test parameters put the correction range inside the rotated
    // dimensions, so extrapolated, interpolated and mixed dims all occur.
    let p = yarn(RopeParams::new(16, RopeMode::Normal, 10000.0));
    let (lo, hi) = corr_dims_ref(&p);
    assert!(lo >= 0.0 && hi > lo && hi < 7.0, "{lo} {hi}");
}

#[test]
fn rope_in_place_f32_and_f16() {
    let ne = [12, 4, 6, 1];
    let n: usize = ne.iter().product();
    let x_data = Rng::new(300).vec(n, -1.0, 1.0);
    let pos = tensor("pos", DType::I32, &[6]);
    let pos_data = [0.0, 1.0, 2.0, 7.0, 100.0, 2047.0];
    for dtype in [DType::F32, DType::F16] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let p = yarn(RopeParams::new(8, mode, 10000.0));
            let build = |x: &Tensor| ops::rope(x, &pos, p).unwrap();
            let got = assert_in_place(dtype, &ne, &x_data, &[(&pos, &pos_data)], build);
            let seen = common::round_trip(dtype, &x_data);
            let want = rope_ref(&seen, ne, &pos_data, None, &p);
            let tol = if dtype == DType::F32 { 1e-9 } else { 1e-6 };
            assert_close(&format!("rope in place {dtype} {mode:?}"), &got, &want, tol);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn rope_on_random_shapes(
        half in 1usize..12, extra in 0usize..5, ne1 in 1usize..4, ne2 in 1usize..5, ne3 in 1usize..3,
        neox: bool, scaled: bool, with_ff: bool, permuted: bool, f16: bool, seed in 0u64..1000,
    ) {
        let n_dims = 2 * half;
        let mode = if neox { RopeMode::Neox } else { RopeMode::Normal };
        let mut p = RopeParams::new(n_dims, mode, 10000.0);
        if scaled {
            p = yarn(p);
        }
        let dtype = if f16 { DType::F16 } else { DType::F32 };
        check([n_dims + extra, ne1, ne2, ne3], dtype, p, with_ff, permuted, seed);
    }
}

/// ROPE nodes of one graph with parameter sets that differ in one field
/// each, over two position tensors, computed several times with new
/// positions: every cached result (no frequency factors) must equal bit for
/// bit the same node with frequency factors of 1 (never cached; dividing by
/// 1 is exact), and the f64 reference. A cos/sin cache entry reused for
/// other parameters or another position would show here. Nodes with other
/// frequency factors (new values each compute) follow, against the
/// reference: they must not read what the others cached.
#[test]
fn cached_cos_sin_never_cross_parameters_or_positions() {
    let ne = [64, 3, 6, 1];
    let base = RopeParams::new(64, RopeMode::Neox, 10000.0);
    let mut sets = vec![base];
    for f in [
        (|p: &mut RopeParams| p.freq_base = 500000.0) as fn(&mut RopeParams),
        |p| p.n_dims = 32,
        |p| p.mode = RopeMode::Normal,
        |_| {},
        |p| p.freq_scale = 0.5,
        |p| p.ext_factor = 0.5,
        |p| p.attn_factor = 0.75,
        |p| p.beta_fast = 16.0,
        |p| p.beta_slow = 2.0,
        |p| p.n_ctx_orig = 256,
    ] {
        // After the first three, YaRN variants of a YaRN base.
        let mut p = if sets.len() < 4 { base } else { yarn(base) };
        f(&mut p);
        sets.push(p);
    }
    let x = tensor("x", DType::F32, &ne);
    let pos = [
        tensor("pos_a", DType::I32, &[ne[2]]),
        tensor("pos_b", DType::I32, &[ne[2]]),
    ];
    let ones = tensor("ones", DType::F32, &[32]);
    let factors = tensor("factors", DType::F32, &[32]);
    // Each set next to the previous one, on both position tensors.
    let mut nodes = Vec::new();
    for i in 1..sets.len() {
        for (s, pi) in [(i - 1, 0), (i, 0), (i - 1, 1), (i, 1)] {
            nodes.push((s, pi));
        }
    }
    let mut outs: Vec<Tensor> = nodes
        .iter()
        .map(|&(s, pi)| ops::rope_ext(&x, &pos[pi], None, sets[s]).unwrap())
        .collect();
    outs.extend(nodes.iter().map(|&(s, pi)| {
        let ff = ops::view_1d(&ones, sets[s].n_dims / 2, 0).unwrap();
        ops::rope_ext(&x, &pos[pi], Some(&ff), sets[s]).unwrap()
    }));
    let factored: Vec<(usize, usize)> = (0..sets.len()).map(|s| (s, s % 2)).collect();
    outs.extend(factored.iter().map(|&(s, pi)| {
        let ff = ops::view_1d(&factors, sets[s].n_dims / 2, 0).unwrap();
        ops::rope_ext(&x, &pos[pi], Some(&ff), sets[s]).unwrap()
    }));
    let mut rng = Rng::new(77);
    let ones_data = vec![1.0f32; 32];
    let calls: [[Vec<f32>; 2]; 3] = [
        [
            (0..6).map(|i| i as f32).collect(),
            vec![5.0, 4.0, 3.0, 100.0, 2047.0, 4097.0],
        ],
        [
            (0..6).map(|i| (i + 4096) as f32).collect(),
            (0..6).map(|_| rng.below(9000) as f32).collect(),
        ],
        [
            vec![1.0, 1.0, 0.0, 8192.0, 3.0, 4.0],
            (0..6).map(|i| (i + 1) as f32).collect(),
        ],
    ];
    for (call, [pa, pb]) in calls.iter().enumerate() {
        let x_data = rng.vec(x.nelements(), -2.0, 2.0);
        let ff_data = rng.vec(32, 1.0, 4.0);
        let inputs: Vec<(&Tensor, &[f32])> = vec![
            (&x, &x_data),
            (&pos[0], pa),
            (&pos[1], pb),
            (&ones, &ones_data),
            (&factors, &ff_data),
        ];
        let got = run_threads(&outs, &inputs);
        let (cached, rest) = got.split_at(nodes.len());
        let (uncached, with_ff) = rest.split_at(nodes.len());
        for (k, &(s, pi)) in factored.iter().enumerate() {
            let what = format!("call {call} factors {k}: {:?} pos {pi}", sets[s]);
            let ff = &ff_data[..sets[s].n_dims / 2];
            let want = rope_ref(&x_data, ne, [pa, pb][pi], Some(ff), &sets[s]);
            assert_close(&what, &with_ff[k], &want, 1e-9);
        }
        for (k, &(s, pi)) in nodes.iter().enumerate() {
            let what = format!("call {call} node {k}: {:?} pos {pi}", sets[s]);
            let same = cached[k]
                .iter()
                .zip(&uncached[k])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: cached and uncached differ");
            let p = [pa, pb][pi];
            let want = rope_ref(&x_data, ne, p, None, &sets[s]);
            assert_close(&what, &cached[k], &want, 1e-9);
        }
    }
}

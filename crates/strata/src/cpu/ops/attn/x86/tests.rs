use super::*;
use crate::isa::x86::EXP_LO;

/// Max relative error of the vectorized exp over [EXP_LO, 0] and a bit
/// above, on ~16M points, and its edge cases (the attention kernels only
/// take x <= 0; above, it is soft_max's exp, tested with it).
fn check_exp(f: impl Fn(&mut [f32])) {
    let n = 1 << 24;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| EXP_LO + (i as f32 / n as f32) * (-EXP_LO + 10.0))
        .collect();
    let want: Vec<f64> = xs.iter().map(|&x| (x as f64).exp()).collect();
    f(&mut xs);
    let worst = xs
        .iter()
        .zip(&want)
        .map(|(&g, &w)| ((g as f64 - w) / w).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1.2e-7, "exp max relative error {worst:e}");
    let mut edge = [
        f32::NEG_INFINITY,
        -1e30,
        -104.0,
        EXP_LO - 0.01,
        0.0,
        -0.0,
        f32::NAN,
        88.0,
        1e30,
        -1.0,
        -10.0,
        -50.0,
        -80.0,
        -87.0,
        1.0,
        2.0,
    ];
    f(&mut edge);
    assert_eq!(&edge[..4], &[0.0; 4]);
    assert_eq!((edge[4], edge[5]), (1.0, 1.0));
    assert!(edge[6].is_nan());
    assert!(edge[7].is_finite() && edge[8] == f32::INFINITY);
}

/// 65 536 evenly spaced points from `lo` up to `hi`, then `edges`, padded
/// with −1 to whole vectors (the exp kernels take whole vectors only).
fn sweep(lo: f32, hi: f32, edges: &[f32]) -> Vec<f32> {
    let n = 1 << 16;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| lo + (hi - lo) * i as f32 / n as f32)
        .collect();
    xs.extend_from_slice(edges);
    xs.resize(xs.len().next_multiple_of(16), -1.0);
    xs
}

/// FLASH_ATTN_EXT's exp is soft_max's: bit for bit the same as
/// `vector::exp_shifted_row` at the same level, on a sweep and the edges
/// (subnormal results, overflow, ±inf, NaN).
#[test]
fn attention_exp_is_the_soft_max_exp() {
    let xs = sweep(
        -110.0,
        90.0,
        &[
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
            -1e30,
            1e30,
            -104.0,
            -103.97,
            -88.0,
            -87.336_55,
            -87.336_54,
            88.0,
            88.7,
            88.722_84,
            88.73,
            -0.0,
        ],
    );
    let check = |isa: Isa, f: &dyn Fn(&mut [f32])| {
        let mut a = xs.clone();
        f(&mut a);
        let mut b = xs.clone();
        crate::cpu::vector::exp_shifted_row(isa, &mut b, 0.0);
        for ((&x, &g), &w) in xs.iter().zip(&a).zip(&b) {
            assert_eq!(g.to_bits(), w.to_bits(), "{isa} exp({x:e}): {g:e} vs {w:e}");
        }
    };
    if let Some(k) = Simd::new(Isa::Avx512) {
        check(Isa::Avx512, &|x| k.exp_in_place(x));
    }
    if let Some(k) = Simd::new(Isa::Avx2) {
        check(Isa::Avx2, &|x| k.exp_in_place(x));
    }
}

/// The softmax's [`exp_bounded`] gives [`exp`]'s bits on every lane up to
/// 88 (both levels' fast limit), −∞ and NaN included: the sweep crosses
/// `EXP_LO`, below which both return 0 (computing e^0 there, not the
/// subnormal e^EXP_LO).
#[test]
fn bounded_exp_is_exp_up_to_the_fast_limit() {
    let xs = sweep(
        -110.0,
        88.0,
        &[
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            -1e30,
            EXP_LO,
            EXP_LO - 1e-5,
            -87.336_54,
            -0.0,
            0.0,
            88.0,
        ],
    );
    for isa in [Isa::Avx512, Isa::Avx2] {
        let Some(k) = Simd::new(isa) else { continue };
        let (mut a, mut b) = (xs.clone(), xs.clone());
        k.exp_in_place(&mut a);
        k.exp_bounded_in_place(&mut b);
        for ((&x, &e), &g) in xs.iter().zip(&a).zip(&b) {
            assert_eq!(g.to_bits(), e.to_bits(), "{isa} exp({x:e}): {g:e} vs {e:e}");
        }
        let below = xs.iter().zip(&b).filter(|(&x, _)| x < EXP_LO);
        assert!(below.clone().count() > 1000);
        assert!(below.into_iter().all(|(_, &g)| g == 0.0));
    }
}

/// The argument the exponential's polynomial takes ([`exp_arg`]): 0 for
/// every lane below `EXP_LO` (−∞ and −1e30 included), never `EXP_LO`,
/// whose e^x ends in a subnormal product (an assist per vector at AVX2,
/// invisible in the results, which are 0 either way); the lanes from
/// `EXP_LO` up unchanged up to the fast limit, clamped above it, NaN kept.
#[test]
fn exp_argument_below_exp_lo_is_zero_not_exp_lo() {
    let below = [f32::NEG_INFINITY, -1e30, -104.0, -90.0, EXP_LO - 1e-3];
    let kept = [EXP_LO, -87.0, -1.0, -0.0, 0.0, 1.0, 88.0];
    for isa in [Isa::Avx512, Isa::Avx2] {
        let Some(k) = Simd::new(isa) else { continue };
        let mut xs: Vec<f32> = below.iter().chain(&kept).copied().collect();
        xs.extend([f32::NAN, 1e30]);
        xs.resize(32, -100.0);
        let mut a = xs.clone();
        k.exp_arg_in_place(&mut a);
        let fast_hi = if isa == Isa::Avx2 {
            <crate::isa::x86::L256 as crate::isa::x86::Lanes>::EXP_FAST_HI
        } else {
            <crate::isa::x86::L512 as crate::isa::x86::Lanes>::EXP_FAST_HI
        };
        for (&x, &y) in xs.iter().zip(&a) {
            let want = if x.is_nan() {
                x
            } else if x < EXP_LO {
                0.0
            } else {
                x.min(fast_hi)
            };
            assert_eq!(y.to_bits(), want.to_bits(), "{isa} exp_arg({x:e}): {y:e}");
        }
    }
}

#[test]
fn vector_exp_relative_error_is_below_1_2e7() {
    if let Some(k) = Simd::new(Isa::Avx512) {
        check_exp(|x| k.exp_in_place(x));
    }
    if let Some(k) = Simd::new(Isa::Avx2) {
        check_exp(|x| k.exp_in_place(x));
    }
}

/// Around every f16 value: itself, the midpoints to its neighbours and
/// one f32 ulp either side of them, plus the overflow edge.
fn round_cases() -> Vec<f32> {
    let mut v = Vec::new();
    for h in 0..=u16::MAX {
        let x = half::f16::from_bits(h).to_f32();
        if !x.is_finite() {
            continue;
        }
        let nx = half::f16::from_bits(h.wrapping_add(1)).to_f32();
        v.push(x);
        if nx.is_finite() && (nx.abs() > x.abs()) == (x.to_bits() >> 31 == 0) {
            let mid = ((x as f64 + nx as f64) / 2.0) as f32;
            for t in [-1i32, 0, 1] {
                v.push(f32::from_bits((mid.to_bits() as i32 + t) as u32));
            }
        }
    }
    v.extend([
        65504.0,
        65519.0,
        65520.0,
        65536.0,
        1e9,
        -65520.0,
        f32::INFINITY,
        1e-30,
        -1e-40,
    ]);
    let len = v.len().next_multiple_of(16);
    v.resize(len, 0.0);
    v
}

#[test]
fn f16_round_trip_matches_half_bit_for_bit() {
    let cases = round_cases();
    let want: Vec<u32> = cases
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32().to_bits())
        .collect();
    // whole vectors, and lengths that end in a partial one (the scalar tail)
    let check = |k: Simd| {
        for len in [cases.len(), cases.len() - 5, 3] {
            let mut got = cases[..len].to_vec();
            k.round_h(&mut got);
            for ((&x, &g), &w) in cases.iter().zip(&got).zip(&want) {
                assert_eq!(g.to_bits(), w, "round trip of {x:e}");
            }
        }
    };
    for isa in [Isa::Avx512, Isa::Avx2] {
        if let Some(k) = Simd::new(isa) {
            check(k);
        }
    }
}

/// The tile kernels against the scalar ones on random tiles: the GEMMs
/// within f32 FMA-vs-mul+add rounding, the softmax within the exp error.
fn check_tiles<K: Kernels>(k: K) {
    let mut rng = crate::conformance::Rng::new(7);
    for &(kvn, np, d, dvp) in &[
        (64, 64, 64, 64),
        (7, 16, 40, 48),
        (33, 48, 128, 128),
        (1, 16, 1, 16),
        // An odd number of eight-lane chunks: the softmax's one-chunk step.
        (5, 24, 32, 32),
    ] {
        let np = np.max(k.width()).next_multiple_of(k.width());
        let kf = rng.vec(kvn * d, -1.0, 1.0);
        let qt = rng.vec(d * np, -1.0, 1.0);
        let (mut a, mut b) = (vec![0f32; kvn * np], vec![0f32; kvn * np]);
        k.qk(&kf, d, &qt, np, &mut a);
        Scalar.qk(&kf, d, &qt, np, &mut b);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5 * d as f32, "qk {x} {y}");
        }
        // Softmax with some -inf and a column fully masked.
        for (i, x) in a.iter_mut().enumerate() {
            if i % 5 == 0 || i % np == 1 {
                *x = f32::NEG_INFINITY;
            }
        }
        let m0: Vec<f32> = (0..np)
            .map(|i| if i % 3 == 0 { f32::NEG_INFINITY } else { 0.5 })
            .collect();
        let s0 = vec![2.0f32; np];
        let close = |x: f32, y: f32| x == y || (x - y).abs() <= 4e-7 * y.abs().max(1.0);
        // Both kernels over the same scores, with the mask `mt` or none;
        // the scalar probabilities come back.
        let softmax = |mt: Option<&[f32]>| {
            let (mut a, mut b) = (a.clone(), a.clone());
            let (mut ma, mut sa, mut fa) = (m0.clone(), s0.clone(), vec![0f32; np]);
            let (mut mb, mut sb, mut fb) = (m0.clone(), s0.clone(), vec![0f32; np]);
            let cols = |kq, m, s, ms| SoftmaxCols {
                kq,
                np,
                scale: 0.7,
                mt,
                m,
                s,
                ms,
            };
            k.softmax_cols(cols(&mut a, &mut ma, &mut sa, &mut fa));
            Scalar.softmax_cols(cols(&mut b, &mut mb, &mut sb, &mut fb));
            assert!(ma
                .iter()
                .zip(&mb)
                .all(|(x, y)| x == y || (x.is_nan() && y.is_nan())));
            for (v, w) in [(&a, &b), (&sa, &sb), (&fa, &fb)] {
                for (&x, &y) in v.iter().zip(w.iter()) {
                    assert!(close(x, y), "softmax (mask: {}) {x} {y}", mt.is_some());
                }
            }
            b
        };
        let mt = rng.vec(kvn * np, -1.0, 0.0);
        let b = softmax(Some(&mt));
        softmax(None);
        let vf = rng.vec(kvn * dvp, -1.0, 1.0);
        let rows = np - 1;
        let init = rng.vec(rows * dvp, -1.0, 1.0);
        let (mut va, mut vb) = (init.clone(), init);
        let ms = rng.vec(np, 0.0, 1.0);
        let cols = |vkq| PvCols {
            p: &b,
            np,
            rows,
            vf: &vf,
            dvp,
            ms: &ms,
            vkq,
        };
        k.pv(cols(&mut va));
        Scalar.pv(cols(&mut vb));
        for (x, y) in va.iter().zip(&vb) {
            assert!((x - y).abs() <= 1e-5 * kvn as f32, "pv {x} {y}");
        }
    }
}

#[test]
fn tile_kernels_match_the_scalar_ones() {
    if let Some(k) = Simd::new(Isa::Avx512) {
        check_tiles(k);
    }
    if let Some(k) = Simd::new(Isa::Avx2) {
        check_tiles(k);
    }
}

#[test]
fn to_f32_converts_exactly() {
    let mut rng = crate::conformance::Rng::new(3);
    for n in [1, 7, 8, 15, 16, 17, 40, 64, 100] {
        let x = rng.vec(n, -70000.0, 70000.0);
        let h: Vec<u8> = x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect();
        let f: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (src, dt) in [(&h, DType::F16), (&f, DType::F32)] {
            let mut want = vec![9f32; n + 5];
            Scalar.to_f32(src, dt, &mut want);
            let check = |k: &dyn Fn(&mut [f32])| {
                let mut got = vec![9f32; n + 5];
                k(&mut got);
                assert!(got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            };
            if let Some(k) = Simd::new(Isa::Avx512) {
                check(&|o| k.to_f32(src, dt, o));
            }
            if let Some(k) = Simd::new(Isa::Avx2) {
                check(&|o| k.to_f32(src, dt, o));
            }
        }
    }
}

#[test]
fn visibility_words_match_a_naive_scan_at_every_level() {
    let mut rng = crate::conformance::Rng::new(5);
    let specials = [
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::NAN,
        -0.0,
        0.0,
        -65504.0,
    ];
    for n in [1, 7, 63, 64, 65, 127, 128, 200, 4096] {
        let x: Vec<f32> = rng
            .vec(n, -3.0, 3.0)
            .iter()
            .map(|&v| {
                if v < 0.5 {
                    specials[(v.abs() * 2.0) as usize % 6]
                } else {
                    v
                }
            })
            .collect();
        let raw: Vec<u8> = x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect();
        let words = n.div_ceil(64);
        let mut want = vec![0u64; words];
        for (j, v) in x.iter().enumerate() {
            if half::f16::from_f32(*v).to_f32() != f32::NEG_INFINITY {
                want[j / 64] |= 1 << (j % 64);
            }
        }
        let mut got = vec![!0u64; words];
        Scalar.vis_f16(&raw, &mut got);
        assert_eq!(got, want, "scalar, n = {n}");
        for isa in [Isa::Avx512, Isa::Avx2] {
            if let Some(k) = Simd::new(isa) {
                let mut got = vec![!0u64; words];
                k.vis_f16(&raw, &mut got);
                assert_eq!(got, want, "{isa}, n = {n}");
            }
        }
    }
}

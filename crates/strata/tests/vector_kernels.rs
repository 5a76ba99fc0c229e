//! The runtime-dispatched vector helpers of `strata::cpu::vector` at every
//! SIMD level this CPU runs, against `half` (conversions: bit for bit) and
//! f64 references (math: the documented ulp bounds), on odd lengths; and the
//! ops that use them (RMS_NORM, SOFT_MAX, SwiGLU, SiLU, F16 CPY / SET_ROWS /
//! GET_ROWS) through a backend at each level: against f64 references, and
//! bitwise identical for 1, 2 and 3 threads.

mod common;

use common::{assert_close, tensor, write_input, Rng};
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, vector, CpuBackend};
use strata::isa::Isa;
use strata::{ops, DType, Graph, Tensor};

fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

const LENGTHS: [usize; 9] = [0, 1, 7, 8, 15, 16, 17, 100, 1537];

/// f32 values that exercise rounding: every f16 pattern widened, halfway
/// points between f16 neighbours, bf16 ties, specials, random values.
fn tricky_f32() -> Vec<f32> {
    let mut v = Vec::new();
    for h in 0..=u16::MAX {
        let x = half::f16::from_bits(h).to_f32();
        v.push(x);
        let next = half::f16::from_bits(h.wrapping_add(1)).to_f32();
        if x.is_finite() && next.is_finite() {
            v.push(((x as f64 + next as f64) / 2.0) as f32);
        }
    }
    for b in [
        0x3f80_8000u32,
        0x3f81_8000,
        0x3f80_8001,
        0x7f7f_ffff,
        0x7f80_0001,
        0xffff_ffff,
        0x0000_0001,
        0x8000_0000,
    ] {
        v.push(f32::from_bits(b));
    }
    v.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65520.0,
        65519.99,
        1e-8,
        -1e-8,
    ]);
    let mut rng = Rng::new(5);
    v.extend(rng.vec(10_000, -70000.0, 70000.0));
    v
}

/// The same bits, or both NaN (of any payload).
fn same_f32(want: f32, got: f32) -> bool {
    want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan())
}

#[test]
fn f16_and_bf16_conversions_are_bit_exact_at_every_level() {
    let xs = tricky_f32();
    for isa in levels() {
        // Narrowing, over several lengths/offsets (tails).
        for len in [xs.len(), xs.len() - 5] {
            let src = &xs[..len];
            let mut h = vec![0u8; 2 * len];
            vector::f32_to_f16_row(isa, src, &mut h).unwrap();
            for (i, (&x, c)) in src.iter().zip(h.chunks(2)).enumerate() {
                let got = u16::from_le_bytes([c[0], c[1]]);
                assert_eq!(
                    got,
                    half::f16::from_f32(x).to_bits(),
                    "{isa} f16({x:e}) at {i}"
                );
            }
            let mut b = vec![0u8; 2 * len];
            vector::f32_to_bf16_row(isa, src, &mut b).unwrap();
            for (&x, c) in src.iter().zip(b.chunks(2)) {
                let got = u16::from_le_bytes([c[0], c[1]]);
                assert_eq!(got, strata::quant::f32_to_bf16(x), "{isa} bf16({x:e})");
            }
            // Widening back is exact.
            let mut w = vec![0f32; len];
            vector::f16_to_f32_row(isa, &h, &mut w).unwrap();
            for (c, &y) in h.chunks(2).zip(&w) {
                let want = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
                assert!(same_f32(want, y), "{isa} widen f16 {want}");
            }
            vector::bf16_to_f32_row(isa, &b, &mut w).unwrap();
            for (c, &y) in b.chunks(2).zip(&w) {
                let want = half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
                assert!(same_f32(want, y), "{isa} widen bf16");
            }
            // Rounding in place equals narrowing then widening.
            let mut r = src.to_vec();
            vector::round_to_f16(isa, &mut r);
            for (&x, &y) in src.iter().zip(&r) {
                let want = half::f16::from_f32(x).to_f32();
                assert!(same_f32(want, y), "{isa} round {x:e}");
            }
        }
    }
}

/// Distance in units in the last place between an f32 and the f64 value.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if got == w {
        return 0.0;
    }
    let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
    (got as f64 - want).abs() / ulp
}

#[test]
fn exp_is_within_two_ulp_and_handles_the_edges() {
    let mut rng = Rng::new(9);
    let mut xs = rng.vec(20_000, -87.0, 88.0);
    xs.extend(rng.vec(2000, -1.0, 1.0));
    xs.extend([0.0, -0.0, 1.0, -1.0, 88.3, 88.7, -87.3]);
    for isa in levels() {
        for shift in [0.0f32, 3.5] {
            let mut y: Vec<f32> = xs.iter().map(|x| x + shift).collect();
            vector::exp_shifted_row(isa, &mut y, shift);
            for (&x, &g) in xs.iter().zip(&y) {
                let xin = ((x + shift) - shift) as f64; // the argument as f32 computes it
                let u = ulps(g, xin.exp());
                assert!(
                    u <= 2.0,
                    "{isa} exp({xin}) = {g}, want {} ({u} ulp)",
                    xin.exp()
                );
            }
        }
        let mut e = vec![
            -1e30f32,
            -200.0,
            -88.0,
            f32::NEG_INFINITY,
            89.0,
            1e30,
            f32::INFINITY,
            f32::NAN,
        ];
        vector::exp_shifted_row(isa, &mut e, 0.0);
        // Zero (SIMD levels) or the subnormal value (the scalar exp).
        assert!(
            e[..4].iter().all(|v| (0.0..1.2e-38).contains(v)),
            "{isa} underflow {e:?}"
        );
        assert!(
            e[4..7].iter().all(|v| *v == f32::INFINITY),
            "{isa} overflow {e:?}"
        );
        assert!(e[7].is_nan(), "{isa} NaN");
    }
}

#[test]
fn sum_of_squares_matches_f64() {
    for isa in levels() {
        for len in LENGTHS {
            let mut rng = Rng::new(len as u64 + 11);
            let g = rng.vec(len, -20.0, 20.0);
            let ss = vector::sum_squares_f64(isa, &g);
            let want: f64 = g.iter().map(|&x| x as f64 * x as f64).sum();
            assert!(
                (ss - want).abs() <= 1e-13 * want.max(1e-300),
                "{isa} sum of squares {ss} vs {want}"
            );
        }
    }
}

/// Runs `out` at level `isa` with 1, 2, 3 threads; asserts identical bits; returns the result.
fn run_levels(isa: Isa, out: &Tensor, inputs: &[(&Tensor, Vec<f32>)]) -> Vec<f32> {
    let g = Graph::build(&[out.clone()]);
    let _b = alloc_graph_host(&g).unwrap();
    let mut first: Option<Vec<f32>> = None;
    for nth in [1, 2, 3] {
        for (t, v) in inputs {
            write_input(t, v);
        }
        let mut cpu = CpuBackend::new(nth);
        cpu.set_isa(isa).unwrap();
        cpu.graph_compute(&g).unwrap();
        let got = out.to_f32_vec().unwrap();
        match &first {
            None => first = Some(got),
            Some(f) => assert!(
                f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa}: {nth} threads differ from 1"
            ),
        }
    }
    first.unwrap()
}

#[test]
fn ops_at_every_level_match_f64_and_do_not_depend_on_threads() {
    for isa in levels() {
        for (n, rows) in [(576, 7), (37, 5), (1, 3)] {
            let mut rng = Rng::new(n as u64);
            let xv = rng.vec(n * rows, -4.0, 4.0);
            let yv = rng.vec(n * rows, -2.0, 2.0);
            // RMS_NORM
            let x = tensor("x", DType::F32, &[n, rows]);
            let out = ops::rms_norm(&x, 1e-5).unwrap();
            let got = run_levels(isa, &out, &[(&x, xv.clone())]);
            let mut want = Vec::new();
            for r in xv.chunks(n) {
                let ms: f64 = r.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
                want.extend(r.iter().map(|&v| v as f64 / (ms + 1e-5).sqrt()));
            }
            assert_close(&format!("{isa} rms_norm n={n}"), &got, &want, 1e-12);
            // SOFT_MAX with scale
            let x = tensor("x", DType::F32, &[n, rows]);
            let out = ops::soft_max_ext(&x, None, 0.7, 0.0).unwrap();
            let got = run_levels(isa, &out, &[(&x, xv.clone())]);
            let mut want = Vec::new();
            for r in xv.chunks(n) {
                let m = r
                    .iter()
                    .map(|&v| v as f64 * 0.7f32 as f64)
                    .fold(f64::MIN, f64::max);
                let e: Vec<f64> = r
                    .iter()
                    .map(|&v| (v as f64 * 0.7f32 as f64 - m).exp())
                    .collect();
                let s: f64 = e.iter().sum();
                want.extend(e.iter().map(|v| v / s));
            }
            assert_close(&format!("{isa} soft_max n={n}"), &got, &want, 1e-12);
            // SwiGLU (split) and SiLU
            let (a, b) = (
                tensor("a", DType::F32, &[n, rows]),
                tensor("b", DType::F32, &[n, rows]),
            );
            let out = ops::swiglu_split(&a, &b).unwrap();
            let got = run_levels(isa, &out, &[(&a, xv.clone()), (&b, yv.clone())]);
            let silu = |x: f32| x as f64 / (1.0 + (-(x as f64)).exp());
            let want: Vec<f64> = xv
                .iter()
                .zip(&yv)
                .map(|(&x, &y)| silu(x) * y as f64)
                .collect();
            assert_close(&format!("{isa} swiglu n={n}"), &got, &want, 1e-12);
            let a = tensor("a", DType::F32, &[n, rows]);
            let out = ops::silu(&a).unwrap();
            let got = run_levels(isa, &out, &[(&a, xv.clone())]);
            let want: Vec<f64> = xv.iter().map(|&x| silu(x)).collect();
            assert_close(&format!("{isa} silu n={n}"), &got, &want, 1e-12);
            // F32 -> F16 copy and back through GET_ROWS: exact f16 rounding.
            let a = tensor("a", DType::F32, &[n, rows]);
            let h = ops::cpy(&a, &tensor("h", DType::F16, &[n, rows])).unwrap();
            let idx = tensor("idx", DType::I32, &[2]);
            let out = ops::get_rows(&h, &idx).unwrap();
            let got = run_levels(
                isa,
                &out,
                &[(&a, xv.clone()), (&idx, vec![(rows - 1) as f32, 0.0])],
            );
            let f16 = |v: f32| half::f16::from_f32(v).to_f32();
            let want: Vec<f32> = xv[(rows - 1) * n..]
                .iter()
                .chain(&xv[..n])
                .map(|&v| f16(v))
                .collect();
            assert_eq!(got, want, "{isa} cpy f16 + get_rows n={n}");
        }
    }
}

/// SOFT_MAX's exp at the edges (issue #17: soft_max and FLASH_ATTN_EXT
/// compute the same e^x; `ops_attn.rs` checks the attention side): logits
/// whose distance to the row maximum spans 0 .. -104 and beyond, -inf
/// (masked), in rows of odd lengths (vector bodies and tails), against
/// f64 at every level: within a few f32 rounding steps where the result is
/// normal, within the subnormal range (which the vector exp flushes to 0)
/// below it.
#[test]
fn soft_max_exp_matches_f64_at_the_edges() {
    let edges = [
        0.0f32,
        -1e-3,
        -1.0,
        -10.0,
        -50.0,
        -87.0,
        -87.3,
        -87.33,
        -87.336,
        -87.34,
        -88.0,
        -88.7,
        -90.0,
        -95.0,
        -100.0,
        -103.9,
        -104.0,
        -1e30,
        f32::NEG_INFINITY,
    ];
    for isa in levels() {
        for n in [19, 24, 33] {
            let row: Vec<f32> = (0..n).map(|i| edges[i % edges.len()]).collect();
            let total: f64 = row.iter().map(|&s| (s as f64).exp()).sum();
            let x = tensor("x", DType::F32, &[n, 1]);
            let out = ops::soft_max_ext(&x, None, 1.0, 0.0).unwrap();
            let got = run_levels(isa, &out, &[(&x, row.clone())]);
            for (&s, &g) in row.iter().zip(&got) {
                let w = (s as f64).exp() / total;
                let ok = if w >= f32::MIN_POSITIVE as f64 {
                    (g as f64 - w).abs() <= 5e-7 * w
                } else {
                    (0.0..f32::MIN_POSITIVE).contains(&g)
                };
                assert!(ok, "{isa} n={n}: logit {s}: got {g:e}, want {w:e}");
            }
        }
    }
}

/// The public row functions refuse mismatched slices with a typed error.
#[test]
fn row_functions_refuse_mismatched_lengths() {
    let isa = strata::isa::active();
    let mut w = [0f32; 3];
    let mut h = [0u8; 4];
    assert!(matches!(
        vector::f16_to_f32_row(isa, &[0u8; 4], &mut w),
        Err(strata::Error::Length { what, expected: 6, got: 4 }) if what.starts_with("f16_to_f32_row")
    ));
    assert!(matches!(
        vector::f32_to_bf16_row(isa, &[1.0; 3], &mut h),
        Err(strata::Error::Length {
            expected: 6,
            got: 4,
            ..
        })
    ));
    assert!(vector::bf16_to_f32_row(isa, &[0u8; 7], &mut w).is_err());
    assert!(vector::f32_to_f16_row(isa, &[1.0; 3], &mut h).is_err());
    assert!(vector::f32_to_bf16_row(isa, &[1.0; 3], &mut h).is_err());
    assert!(matches!(
        vector::swiglu_row(isa, &[1.0; 3], &[1.0; 2], &mut w),
        Err(strata::Error::Length { what, expected: 3, got: 2 }) if what.starts_with("swiglu_row: up")
    ));
    assert!(matches!(
        vector::swiglu_row(isa, &[1.0; 2], &[1.0; 2], &mut w),
        Err(strata::Error::Length { what, expected: 2, got: 3 }) if what.starts_with("swiglu_row: out")
    ));
    // matching lengths still work
    vector::f16_to_f32_row(isa, &[0u8; 6], &mut w).unwrap();
    assert_eq!(w, [0.0; 3]);
}

/// True where strata's lanes must reproduce `f32::exp`: glibc's libm.
const GLIBC: bool = cfg!(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu"
));

/// Every level whose rows run in lanes must, on glibc, pass the libm probe
/// (else the tests below would compare the scalar code with itself).
fn assert_lanes_where_expected(isa: Isa) {
    if GLIBC && isa.is_supported() && isa != Isa::Scalar {
        assert!(
            vector::libm_exp_in_lanes(isa),
            "{isa}: the lanes' expf does not reproduce this libm's"
        );
    }
}

/// Arguments whose `expf` hinges on glibc's last bits, found by searching
/// all 2^32 with a scalar model of `__expf_fma` (checked equal to it): the
/// 64 whose f64 result before the final rounding lies nearest an f32
/// rounding midpoint (the first exactly on one; ties at the last distance
/// cut by bits); those whose result moves when `r` is not fused
/// (0x4202422f, 0xc27c65d9; no other contraction, and no 1-ulp change of
/// the polynomial's coefficients, moves any result) or when `N / ln 2`
/// moves by an ulp (with 0xc27f1f83, 0xc1d2107a, 0x4197276c, 0xc2633f4c,
/// 0xc23dd581); and 16 where glibc's result is not the correctly rounded
/// one, spread over [-87.3, 88].
const HARD: [u32; 81] = [
    0x3e73ade2, 0xbfde3004, 0xb3000000, 0xbbe861b2, 0x3d8932e8, 0x400d98c7, 0x3b37991a, 0xba253b54,
    0x337fffff, 0x33800000, 0x343fffff, 0x34dffffd, 0x37ff7f01, 0x356ffff9, 0x3b0b4517, 0x3fbe11a6,
    0x40143eb5, 0x4202422f, 0x35f7fff1, 0xc0d7626b, 0x367bffe1, 0x40c12c37, 0x4197276c, 0xba921bd7,
    0xbeae4609, 0xc1d2107a, 0x36fdffc1, 0xbb378639, 0x387ebe05, 0xb9fbab76, 0xbe14c82c, 0x377eff81,
    0x38fddc11, 0xb2ffffff, 0xc068da36, 0xb9a56aae, 0xbf0fa174, 0x3b50125a, 0x337ffffe, 0x3d103181,
    0x40a63bf9, 0xbc70a558, 0x3b8f4138, 0xb3000001, 0xb3c00001, 0xb4200001, 0xbac75bcb, 0xbc3f2901,
    0xb4b00002, 0xbd3e69a5, 0x3a29cdeb, 0xb8df930d, 0xb5d4000b, 0xc27c65d9, 0xb616000b, 0xbb57a63b,
    0xbeb7bdad, 0xc2633f4c, 0x3998e24b, 0x3df0cb95, 0xc23dd581, 0xb6b50020, 0xbab8080f, 0xb2fffffe,
    0xc27f1f83, 0xc2a559c0, 0xc2982714, 0xc277a817, 0xc2455526, 0xc2117d15, 0xc1db1430, 0xc1320bee,
    0xc085e1d2, 0x40014e2c, 0x419289f5, 0x41d2a112, 0x42144cfb, 0x4243855c, 0x427f0629, 0x42940fc4,
    0x429f2d8b,
];

/// `exp_row`'s arguments: the [`HARD`] ones; glibc's edges (the overflow and
/// underflow bounds of its slow path, ±88 where the lanes hand over to
/// `f32::exp`), signed zeros, subnormals, infinities, NaNs; a strided sweep
/// of the bit patterns of [-104, 89]; and values spread evenly over it.
fn exp_args() -> Vec<f32> {
    let mut v: Vec<f32> = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        88.0,
        -88.0,
        f32::from_bits(0x42af_ffff), // the largest below 88
        f32::from_bits(0xc2af_ffff),
        f32::from_bits(0x42b1_7217), // 0x1.62e42ep6: the last finite result
        f32::from_bits(0x42b1_7218), // the first overflow
        f32::from_bits(0xc2cf_f1b4), // -0x1.9fe368p6: the underflow bound
        f32::from_bits(0xc2cf_f1b5),
        f32::from_bits(0xc2ce_8ecf), // -0x1.9d1d9ep6: may underflow
        f32::from_bits(0xc2ae_ac50), // ~-87.34: results turn subnormal
        f32::from_bits(0x7fc0_0001),
        f32::from_bits(0x7f80_0001), // signalling NaN
        f32::from_bits(0xff80_0001),
    ]
    .to_vec();
    v.extend(HARD.iter().map(|&b| f32::from_bits(b)));
    v.extend((1..64u32).map(|b| f32::from_bits(b * 0x1_0001))); // subnormals
    v.extend((1..64u32).map(|b| -f32::from_bits(b * 0x1_0003)));
    // Bit patterns of [0, 89] and [-104, -0], a prime stride apart.
    for (lo, hi) in [(0u32, 89f32.to_bits()), (0x8000_0000, (-104f32).to_bits())] {
        v.extend((lo..=hi).step_by(1109).map(f32::from_bits));
    }
    let n = 1 << 20;
    v.extend(
        (0..=n)
            .map(|i| -104.0 + 193.0 * (i as f64 / n as f64))
            .map(|x| x as f32),
    );
    v
}

#[test]
fn exp_row_is_bit_identical_to_libm_at_every_level() {
    let xs = exp_args();
    assert!(xs.len() > 2_000_000, "{}", xs.len());
    let want: Vec<u32> = xs.iter().map(|x| x.exp().to_bits()).collect();
    for isa in levels() {
        assert_lanes_where_expected(isa);
        // Two lengths: a tail of every size at some level.
        for len in [xs.len(), xs.len() - 13] {
            let mut y = xs[..len].to_vec();
            vector::exp_row(isa, &mut y);
            for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    *w,
                    "{isa} exp({:e} = {:#x}) at {i}: {g:e}, libm {:e}",
                    xs[i],
                    xs[i].to_bits(),
                    f32::from_bits(*w)
                );
            }
        }
    }
}

/// Once, not in CI (`cargo test --release -p strata --test vector_kernels
/// -- --ignored every_f32`): `exp_row` at every lane level against
/// `f32::exp` on all 2^32 bit patterns, on every core.
#[test]
#[ignore = "exhaustive: 2^32 arguments per level"]
fn exp_row_is_bit_identical_to_libm_on_every_f32() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for isa in levels().into_iter().filter(|&i| i != Isa::Scalar) {
        assert_lanes_where_expected(isa);
        let start = std::time::Instant::now();
        let chunks: Vec<u32> = (0..1u32 << 16).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let bad: usize = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let (mut x, mut bad) = (vec![0f32; 1 << 16], 0usize);
                        loop {
                            let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&hi) = chunks.get(c) else { break bad };
                            for (lo, v) in x.iter_mut().enumerate() {
                                *v = f32::from_bits(hi << 16 | lo as u32);
                            }
                            let mut y = x.clone();
                            vector::exp_row(isa, &mut y);
                            for (a, b) in x.iter().zip(&y) {
                                if a.exp().to_bits() != b.to_bits() {
                                    if bad < 10 {
                                        eprintln!("{isa}: exp({:#x}) = {b:e}", a.to_bits());
                                    }
                                    bad += 1;
                                }
                            }
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        eprintln!(
            "{isa}: 2^32 arguments, {bad} differ, {:.1} s on {threads} threads",
            start.elapsed().as_secs_f64()
        );
        assert_eq!(bad, 0, "{isa}");
    }
}

/// Equal bits, except that where both factors of SwiGLU's product are NaN
/// any NaN will do (which operand's payload `mulss` keeps is the compiler's
/// choice of operand order).
fn same_swiglu(got: f32, s: f32, u: f32) -> bool {
    got.to_bits() == (s * u).to_bits() || (s.is_nan() && u.is_nan() && got.is_nan())
}

#[test]
fn silu_and_swiglu_rows_are_bit_identical_to_the_scalar_code() {
    let mut rng = Rng::new(29);
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        88.0,
        -88.0,
        100.0,
        -100.0,
        1e30,
        -1e30,
        f32::from_bits(1),
    ];
    // SiLU takes e^-x: the negated HARD arguments, where exp's last bits
    // are at stake, and all of exp's arguments.
    let hard: Vec<f32> = HARD.iter().map(|&b| -f32::from_bits(b)).collect();
    let every: Vec<f32> = exp_args().iter().map(|&x| -x).collect();
    let u: Vec<f32> = (0..every.len()).map(|i| [1.5, -0.75, 3.0][i % 3]).collect();
    for isa in levels() {
        assert_lanes_where_expected(isa);
        for g in [&hard, &every] {
            let mut s = g.to_vec();
            vector::silu_row(isa, &mut s);
            let mut out = vec![0f32; g.len()];
            vector::swiglu_row(isa, g, &u[..g.len()], &mut out).unwrap();
            for (i, &x) in g.iter().enumerate() {
                let want = vector::silu(x);
                assert_eq!(
                    want.to_bits(),
                    s[i].to_bits(),
                    "{isa} silu({x:e} = {:#x})",
                    x.to_bits()
                );
                assert!(
                    same_swiglu(out[i], want, u[i]),
                    "{isa} swiglu({x:e}, {})",
                    u[i]
                );
            }
        }
        for len in 0..70 {
            for trial in 0..8 {
                let mut val = |spread: f32| {
                    if rng.below(10) == 0 {
                        specials[rng.below(specials.len())]
                    } else {
                        rng.uniform(-spread, spread)
                    }
                };
                let spread = [1.0, 8.0, 30.0, 120.0][trial % 4];
                let g: Vec<f32> = (0..len).map(|_| val(spread)).collect();
                let u: Vec<f32> = (0..len).map(|_| val(4.0)).collect();
                let mut s = g.clone();
                vector::silu_row(isa, &mut s);
                for (i, (&x, y)) in g.iter().zip(&s).enumerate() {
                    let want = vector::silu(x);
                    assert_eq!(
                        want.to_bits(),
                        y.to_bits(),
                        "{isa} silu({x:e}) at {i}/{len}"
                    );
                    assert_eq!(want.to_bits(), (x / (1.0 + (-x).exp())).to_bits());
                }
                let mut out = vec![0f32; len];
                vector::swiglu_row(isa, &g, &u, &mut out).unwrap();
                for i in 0..len {
                    let s = vector::silu(g[i]);
                    assert!(
                        same_swiglu(out[i], s, u[i]),
                        "{isa} swiglu({:e}, {:e}) at {i}/{len}: {:e}",
                        g[i],
                        u[i],
                        out[i]
                    );
                }
            }
        }
    }
}

/// SiLU, SwiGLU (split and fused, swapped or not) through the CPU backend:
/// the scalar expression's bits at every level.
#[test]
fn silu_and_swiglu_ops_match_the_scalar_code_bit_for_bit() {
    let (n, rows) = (37, 5);
    let mut rng = Rng::new(31);
    let xv = rng.vec(2 * n * rows, -12.0, 12.0);
    let yv = rng.vec(n * rows, -3.0, 3.0);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for isa in levels() {
        assert_lanes_where_expected(isa);
        let a = tensor("a", DType::F32, &[n, rows]);
        let out = ops::silu(&a).unwrap();
        let got = run_levels(isa, &out, &[(&a, xv[..n * rows].to_vec())]);
        let want: Vec<f32> = xv[..n * rows].iter().map(|&x| vector::silu(x)).collect();
        assert_eq!(bits(&got), bits(&want), "{isa} silu");
        let (a, b) = (
            tensor("a", DType::F32, &[n, rows]),
            tensor("b", DType::F32, &[n, rows]),
        );
        let out = ops::swiglu_split(&a, &b).unwrap();
        let got = run_levels(
            isa,
            &out,
            &[(&a, xv[..n * rows].to_vec()), (&b, yv.clone())],
        );
        let want: Vec<f32> = xv
            .iter()
            .zip(&yv)
            .map(|(&x, &y)| vector::silu(x) * y)
            .collect();
        assert_eq!(bits(&got), bits(&want), "{isa} swiglu split");
        for swapped in [false, true] {
            let a = tensor("a", DType::F32, &[2 * n, rows]);
            let out = ops::glu(&a, ops::GluOp::Swiglu, swapped).unwrap();
            let got = run_levels(isa, &out, &[(&a, xv.clone())]);
            let mut want = Vec::new();
            for r in xv.chunks(2 * n) {
                let (g, u) = r.split_at(n);
                let (g, u) = if swapped { (u, g) } else { (g, u) };
                want.extend(g.iter().zip(u).map(|(&x, &y)| vector::silu(x) * y));
            }
            assert_eq!(
                bits(&got),
                bits(&want),
                "{isa} swiglu fused, swapped {swapped}"
            );
        }
    }
}

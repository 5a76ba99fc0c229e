//! Every SIMD kernel of every instruction-set level this CPU supports against
//! the scalar reference: dot products within the bound `quant::simd`
//! documents (and exactly where the float arithmetic is exact; the K-quant
//! and IQ4 ones bit for bit on any bytes: random, adversarial and
//! proptest-generated rows), quantizers bit for bit; plus the `STRATA_ISA`
//! override.
//!
//! Levels are iterated in-process through `vec_dot_fn_for` /
//! `quantize_row_fn_for`, so one run covers scalar, AVX2, AVX-512 and VNNI
//! on an AVX-512 VNNI machine.

mod common;

use common::qblock::{block_magnitude, scramble, unit_scales, QUANT, U};
use common::Rng;
use proptest::prelude::*;
use strata::isa::{self, Isa};
use strata::quant::simd;
use strata::quant::{self, VecDotFn, QK};
use strata::DType;

const FLOAT: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The levels this CPU runs, the scalar reference first.
fn levels() -> Vec<Isa> {
    let l: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_supported()).collect();
    assert_eq!(l[0], Isa::Scalar);
    assert!(l.contains(&isa::detected()));
    l
}

fn scalar_dot(t: DType) -> VecDotFn {
    simd::vec_dot_fn_for(Isa::Scalar, t).unwrap()
}

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len())];
    simd::quantize_row_fn_for(Isa::Scalar, t).unwrap()(x, &mut q);
    q
}

#[test]
fn quantized_dots_match_scalar_within_bound_on_every_level() {
    let mut rng = Rng::new(7);
    for t in QUANT {
        let yt = quant::vec_dot_type(t);
        for nb in [1usize, 2, 3, 5, 17, 18, 48, 49, 97] {
            let n = nb * QK;
            for case in 0..4 {
                let xf = rng.vec(n, -2.0, 2.0);
                let yf = rng.vec(n, -3.0, 1.0);
                let (mut x, mut y) = (quantize(t, &xf), quantize(yt, &yf));
                if case & 1 == 1 {
                    scramble(t, &mut x, &mut rng);
                }
                if case & 2 == 2 {
                    scramble(yt, &mut y, &mut rng);
                }
                let want = scalar_dot(t)(n, &x, &y);
                let bound = (nb as f64 + 8.0) * 2.0 * U * block_magnitude(t, &x, &y);
                for isa in levels() {
                    let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                    let err = (f64::from(got) - f64::from(want)).abs();
                    assert!(
                        err <= bound,
                        "{isa} {t} nb={nb} case={case}: {got:e} vs scalar {want:e} \
                         (|err| {err:e} > bound {bound:e})"
                    );
                }
            }
        }
    }
}

/// With unit scales every partial sum is a small integer, so every level's
/// float arithmetic is exact: the results must equal the scalar integer sum
/// bit for bit — this pins the integer block sums (offsets, nibble order,
/// fifth bits, -128) independently of rounding.
#[test]
fn quantized_integer_sums_are_exact_on_every_level() {
    let mut rng = Rng::new(11);
    for t in QUANT {
        let yt = quant::vec_dot_type(t);
        for nb in [1usize, 2, 3, 7, 16, 33] {
            let n = nb * QK;
            let (mut x, mut y) = (quantize(t, &vec![0.0; n]), quantize(yt, &vec![0.0; n]));
            scramble(t, &mut x, &mut rng);
            scramble(yt, &mut y, &mut rng);
            unit_scales(t, &mut x);
            unit_scales(yt, &mut y);
            let want = scalar_dot(t)(n, &x, &y);
            assert_eq!(want, want.round(), "{t}: the reference is an integer");
            for isa in levels() {
                let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                assert_eq!(got, want, "{isa} {t} nb={nb}");
            }
        }
    }
}

fn float_row(t: DType, v: &[f32]) -> Vec<u8> {
    quantize(t, v)
}

fn float_values(t: DType, row: &[u8]) -> Vec<f64> {
    let mut out = vec![0f32; row.len() / t.type_size()];
    quant::dequantize_row(t, row, &mut out).unwrap();
    out.into_iter().map(f64::from).collect()
}

#[test]
fn float_dots_match_scalar_within_bound_on_every_level() {
    let mut rng = Rng::new(13);
    let sizes = [
        0usize, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 576, 1000, 1539,
    ];
    for t in FLOAT {
        for n in sizes {
            let x = float_row(t, &rng.vec(n, -4.0, 4.0));
            let y = float_row(t, &rng.vec(n, -1.0, 3.0));
            let (vx, vy) = (float_values(t, &x), float_values(t, &y));
            let mag: f64 = vx.iter().zip(&vy).map(|(a, b)| (a * b).abs()).sum();
            let want = scalar_dot(t)(n, &x, &y);
            let bound = (n as f64 / 16.0 + 16.0) * 2.0 * U * mag;
            for isa in levels() {
                let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                let err = (f64::from(got) - f64::from(want)).abs();
                assert!(
                    err <= bound,
                    "{isa} {t} n={n}: {got:e} vs scalar {want:e} (|err| {err:e} > {bound:e})"
                );
            }
        }
    }
}

/// Small integers: every product and partial sum is exact in f32, so every
/// level must return the scalar value exactly — pins element order, the
/// masked / scalar tails and the f16 / bf16 widening.
#[test]
fn float_dots_are_exact_on_integers_on_every_level() {
    let mut rng = Rng::new(17);
    for t in FLOAT {
        for n in [1usize, 5, 16, 23, 64, 79, 130, 577] {
            let ints = |rng: &mut Rng| -> Vec<f32> {
                (0..n).map(|_| rng.below(17) as f32 - 8.0).collect()
            };
            let (x, y) = (float_row(t, &ints(&mut rng)), float_row(t, &ints(&mut rng)));
            let want = scalar_dot(t)(n, &x, &y);
            for isa in levels() {
                let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                assert_eq!(got, want, "{isa} {t} n={n}");
            }
        }
    }
}

/// Rows with the values quantizers must get right: zeros, ties of `roundf`,
/// signed zeros, subnormals, huge values, ±inf and NaN.
fn hard_rows(rng: &mut Rng, nb: usize) -> Vec<Vec<f32>> {
    let n = nb * QK;
    let mut rows = vec![
        rng.vec(n, -1.0, 1.0),
        rng.vec(n, -1e-3, 5e3),
        vec![0.0; n],
        (0..n)
            .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
            .collect(),
        // Multiples of d / 2 with amax 127: every x * (1/d) lands on a tie.
        (0..n).map(|i| (i % 255) as f32 * 0.5 - 63.5).collect(),
        (0..n).map(|i| f32::from_bits(1 + i as u32 * 977)).collect(),
        (0..n).map(|i| (i as f32 - 40.0) * 3e37).collect(),
    ];
    let mut special = rng.vec(n, -2.0, 2.0);
    for (i, v) in special.iter_mut().enumerate() {
        match i % 37 {
            3 => *v = f32::NAN,
            11 => *v = f32::INFINITY,
            20 => *v = f32::NEG_INFINITY,
            29 => *v = f32::from_bits(0xffc0_1234),
            _ => {}
        }
    }
    rows.push(special);
    let mut one_nan = rng.vec(n, -2.0, 2.0);
    one_nan[n / 2] = f32::NAN;
    rows.push(one_nan);
    rows
}

#[test]
fn activation_quantizers_are_bit_identical_on_every_level() {
    let mut rng = Rng::new(19);
    for t in [DType::Q8_0, DType::Q8_1, DType::F16] {
        for nb in [1usize, 2, 3, 18, 48] {
            for (r, x) in hard_rows(&mut rng, nb).into_iter().enumerate() {
                // F16 rows also get lengths that are not multiples of 8.
                let lens: &[usize] = if t == DType::F16 {
                    &[x.len(), x.len() - 1, x.len() - 5]
                } else {
                    &[x.len()]
                };
                for &len in lens {
                    let x = &x[..len];
                    let want = quantize(t, x);
                    for isa in levels() {
                        let mut got = vec![0xa5u8; t.row_size(len)];
                        simd::quantize_row_fn_for(isa, t).unwrap()(x, &mut got);
                        assert!(got == want, "{isa} {t} nb={nb} row {r} len {len}");
                    }
                }
            }
        }
    }
}

#[test]
fn dispatched_functions_are_the_active_level() {
    let active = isa::active();
    assert!(active.is_supported());
    assert!(active <= isa::detected());
    let mut rng = Rng::new(23);
    for t in QUANT.into_iter().chain(FLOAT) {
        let n = 5 * QK;
        let x = quantize(t, &rng.vec(n, -1.0, 1.0));
        let y = quantize(quant::vec_dot_type(t), &rng.vec(n, -1.0, 1.0));
        let want = simd::vec_dot_fn_for(active, t).unwrap()(n, &x, &y);
        assert_eq!(
            quant::vec_dot_fn(t).unwrap()(n, &x, &y).to_bits(),
            want.to_bits()
        );
    }
    for t in K_QUANT {
        let n = 3 * quant::QK_K;
        let x = quantize(t, &rng.vec(n, -1.0, 1.0));
        let y = quantize(quant::vec_dot_type(t), &rng.vec(n, -1.0, 1.0));
        let want = simd::vec_dot_fn_for(active, t).unwrap()(n, &x, &y);
        assert_eq!(
            quant::vec_dot_fn(t).unwrap()(n, &x, &y).to_bits(),
            want.to_bits(),
            "{t}"
        );
    }
    for t in DType::ALL {
        assert_eq!(
            simd::vec_dot_fn_for(Isa::Scalar, t).is_some(),
            quant::vec_dot_fn(t).is_some()
        );
    }
}

#[test]
fn levels_this_cpu_lacks_give_no_kernels() {
    for isa in Isa::ALL {
        assert_eq!(
            simd::vec_dot_fn_for(isa, DType::Q4_0).is_some(),
            isa.is_supported(),
            "{isa}"
        );
        assert_eq!(
            simd::quantize_row_fn_for(isa, DType::Q8_0).is_some(),
            isa.is_supported(),
            "{isa}"
        );
    }
    assert!(Isa::Scalar.is_supported());
    // x86 and aarch64 levels never both run.
    assert!(!(Isa::Neon.is_supported() && Isa::Avx2.is_supported()));
}

#[test]
fn strata_isa_values_parse_and_resolve() {
    for isa in Isa::ALL {
        assert_eq!(isa.name().parse::<Isa>().unwrap(), isa);
        assert_eq!(isa.name().to_uppercase().parse::<Isa>().unwrap(), isa);
        assert_eq!(format!(" {isa} ").parse::<Isa>().unwrap(), isa);
    }
    for bad in ["", "sse", "avx-512", "avx512vnni", "native"] {
        let e = bad.parse::<Isa>().unwrap_err();
        assert!(
            matches!(&e, strata::Error::BadValue { arg, value, .. }
                if arg == "STRATA_ISA" && *value == format!("{bad:?}")),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains("STRATA_ISA"), "{e}");
    }
    use isa::resolve;
    assert_eq!(resolve(None, Isa::Vnni).unwrap(), Isa::Vnni);
    assert_eq!(resolve(Some("avx2"), Isa::Vnni).unwrap(), Isa::Avx2);
    assert_eq!(resolve(Some("scalar"), Isa::Vnni).unwrap(), Isa::Scalar);
    assert_eq!(resolve(Some("avx512"), Isa::Avx512).unwrap(), Isa::Avx512);
    assert_eq!(resolve(Some("scalar"), Isa::Neon).unwrap(), Isa::Scalar);
    assert_eq!(resolve(Some("neon"), Isa::Neon).unwrap(), Isa::Neon);
    // A level above the CPU's, or of another architecture, is refused.
    let e = resolve(Some("vnni"), Isa::Avx2).unwrap_err();
    assert!(e.to_string().contains("avx2"), "{e}");
    assert!(
        matches!(&e, strata::Error::BadValue { arg, value, expected }
            if arg == "STRATA_ISA" && value == "\"vnni\"" && expected.ends_with("up to avx2")),
        "{e}"
    );
    assert!(resolve(Some("neon"), Isa::Vnni).is_err());
    assert!(resolve(Some("avx2"), Isa::Neon).is_err());
    assert!(resolve(Some("avx2"), Isa::Scalar).is_err());
    assert!(resolve(Some("bogus"), Isa::Vnni).is_err());
    // AVX-VNNI: under an AVX-VNNI CPU's own level, and above AVX2; the
    // AVX-512 levels do not imply it, so there it follows the CPU's flag.
    assert_eq!(
        resolve(Some("avxvnni"), Isa::AvxVnni).unwrap(),
        Isa::AvxVnni
    );
    assert_eq!(
        resolve(Some("AVXVNNI "), Isa::AvxVnni).unwrap(),
        Isa::AvxVnni
    );
    assert_eq!(resolve(Some("avx2"), Isa::AvxVnni).unwrap(), Isa::Avx2);
    assert!(resolve(Some("avx512"), Isa::AvxVnni).is_err());
    assert!(resolve(Some("avxvnni"), Isa::Avx2).is_err());
    assert!(resolve(Some("avxvnni"), Isa::Neon).is_err());
    #[cfg(target_arch = "x86_64")]
    let flag = std::arch::is_x86_feature_detected!("avxvnni");
    #[cfg(not(target_arch = "x86_64"))]
    let flag = false;
    for top in [Isa::Avx512, Isa::Vnni, Isa::Amx] {
        assert_eq!(resolve(Some("avxvnni"), top).is_ok(), flag, "{top}");
    }
    assert_eq!(Isa::AvxVnni.lower(), Isa::Avx2);
    assert_eq!(Isa::Avx512.lower(), Isa::Avx2);
    // AMX: above VNNI, which it falls back to; not implied by VNNI.
    assert_eq!(resolve(Some("amx"), Isa::Amx).unwrap(), Isa::Amx);
    assert_eq!(resolve(Some("vnni"), Isa::Amx).unwrap(), Isa::Vnni);
    assert_eq!(resolve(None, Isa::Amx).unwrap(), Isa::Amx);
    assert!(resolve(Some("amx"), Isa::Vnni).is_err());
    assert!(resolve(Some("amx"), Isa::Neon).is_err());
    assert_eq!(Isa::Amx.lower(), Isa::Vnni);
    assert_eq!(Isa::Amx.to_string(), "amx");
}

/// Run by [`strata_isa_env_var_forces_the_level`] in a child process (and
/// on its own in every pass): the active level is the one `STRATA_ISA`
/// asks for when this CPU runs it, the detected one otherwise, and this CPU
/// supports it.
#[test]
fn child_reports_active_level() {
    let (active, detected) = (isa::active(), isa::detected());
    let var = std::env::var("STRATA_ISA").ok();
    let want = isa::resolve(var.as_deref(), detected).unwrap_or(detected);
    assert_eq!(active, want, "STRATA_ISA={var:?}, detected {detected}");
    assert!(active.is_supported(), "{active} is not supported here");
    assert!(active <= detected, "{active} above {detected}");
    println!("ACTIVE={active}");
}

/// The environment variable itself, read by a fresh process.
#[test]
fn strata_isa_env_var_forces_the_level() {
    let exe = std::env::current_exe().unwrap();
    // Under a cargo target runner (e.g. qemu for aarch64) start the child
    // through the same runner.
    let runner: Vec<String> = std::env::vars()
        .find(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"))
        .map(|(_, v)| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let run = |value: &str| -> String {
        let mut cmd = match runner.split_first() {
            Some((prog, args)) => {
                let mut c = std::process::Command::new(prog);
                c.args(args).arg(&exe);
                c
            }
            None => std::process::Command::new(&exe),
        };
        let out = cmd
            .args(["--exact", "child_reports_active_level", "--nocapture"])
            .env("STRATA_ISA", value)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child failed with STRATA_ISA={value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.starts_with("ACTIVE="))
            .unwrap_or("");
        line.trim_start_matches("ACTIVE=").to_string()
    };
    let detected = isa::detected();
    for isa in levels() {
        assert_eq!(run(isa.name()), isa.name());
    }
    // Unknown or unsupported values fall back to the detected level.
    assert_eq!(run("bogus"), detected.name());
    if detected != Isa::Neon {
        assert_eq!(run("neon"), detected.name());
    }
}

/// The four-column kernels return exactly what four one-column calls of the
/// same level return (the matmul relies on it for thread-count-independent
/// results), on scrambled quants and odd block counts.
#[test]
fn four_column_dots_are_bit_identical_to_one_column_calls() {
    let mut rng = Rng::new(29);
    let mut covered = 0;
    for isa in levels() {
        for t in QUANT {
            let Some(dot4) = simd::vec_dot4_fn_for(isa, t) else {
                continue;
            };
            covered += 1;
            let dot = simd::vec_dot_fn_for(isa, t).unwrap();
            let yt = quant::vec_dot_type(t);
            for nb in [1usize, 2, 3, 18, 49] {
                let n = nb * QK;
                let mut x = quantize(t, &rng.vec(n, -1.0, 1.0));
                scramble(t, &mut x, &mut rng);
                let ys: Vec<Vec<u8>> = (0..4)
                    .map(|_| quantize(yt, &rng.vec(n, -2.0, 2.0)))
                    .collect();
                let mut out = [0f32; 4];
                dot4(n, &x, [&ys[0], &ys[1], &ys[2], &ys[3]], &mut out);
                for (j, y) in ys.iter().enumerate() {
                    assert_eq!(
                        out[j].to_bits(),
                        dot(n, &x, y).to_bits(),
                        "{isa} {t} nb={nb} col {j}"
                    );
                }
            }
        }
    }
    // On an AVX-512 machine the four-column kernels must exist and be tested.
    if isa::detected() >= Isa::Avx512 && isa::detected() != Isa::Neon {
        assert!(covered >= 4, "only {covered} four-column kernels");
    }
}

/// The K-quant and IQ4 weight types with Q8_K partners, and IQ4_NL (Q8_0).
use strata::conformance::K_AND_IQ4_QUANTS as K_QUANT;

/// Byte ranges of a block of `t` that hold its quants and sub-block scales
/// (everything but the f16 / f32 super-block scales), and of the Q8_K block
/// (quants and bsums).
fn k_payload(t: DType) -> std::ops::Range<usize> {
    match t {
        DType::Q2_K => 0..80,
        DType::Q3_K => 0..108,
        DType::Q4_K | DType::Q5_K => 4..t.type_size(),
        DType::Q6_K => 0..208,
        DType::IQ4_NL | DType::Q8_0 => 2..t.type_size(),
        DType::IQ4_XS => 2..t.type_size(),
        DType::Q8_K => 4..t.type_size(),
        _ => unreachable!(),
    }
}

/// Random bytes in every block's quants and sub-block scales (Q8_K: its
/// quants, -128 included, and bsums that need not match them).
fn scramble_k(t: DType, row: &mut [u8], rng: &mut Rng) {
    for b in row.chunks_exact_mut(t.type_size()) {
        for q in &mut b[k_payload(t)] {
            *q = rng.next_u64() as u8;
        }
    }
}

/// Sets every super-block scale to 1 (f16 `d` / `dmin`, Q8_K's f32 `d`).
fn unit_k_scales(t: DType, row: &mut [u8]) {
    let one = 0x3c00u16.to_le_bytes();
    for b in row.chunks_exact_mut(t.type_size()) {
        match t {
            DType::Q2_K => {
                b[80..82].copy_from_slice(&one);
                b[82..84].copy_from_slice(&one);
            }
            DType::Q3_K => b[108..110].copy_from_slice(&one),
            DType::Q4_K | DType::Q5_K => {
                b[0..2].copy_from_slice(&one);
                b[2..4].copy_from_slice(&one);
            }
            DType::Q6_K => b[208..210].copy_from_slice(&one),
            DType::IQ4_NL | DType::IQ4_XS | DType::Q8_0 => b[0..2].copy_from_slice(&one),
            DType::Q8_K => b[0..4].copy_from_slice(&1.0f32.to_le_bytes()),
            _ => unreachable!(),
        }
    }
}

/// The K-quant kernels add the scalar reference's per-block f32 term in its
/// order, so every level returns the scalar result bit for bit, whatever
/// the quant and scale bytes (scrambled below, bsums included).
#[test]
fn k_quant_dots_are_bit_identical_to_scalar_on_every_level() {
    let mut rng = Rng::new(31);
    for t in K_QUANT {
        let yt = quant::vec_dot_type(t);
        for nsb in [1usize, 2, 3, 5, 8] {
            let n = nsb * quant::QK_K;
            for case in 0..4 {
                let (mut x, mut y) = (
                    quantize(t, &rng.vec(n, -2.0, 2.0)),
                    quantize(yt, &rng.vec(n, -3.0, 1.0)),
                );
                if case & 1 == 1 {
                    scramble_k(t, &mut x, &mut rng);
                }
                if case & 2 == 2 {
                    scramble_k(yt, &mut y, &mut rng);
                }
                same_bits_on_every_level(t, n, &x, &y, &format!("super-blocks={nsb} case={case}"));
            }
        }
    }
}

/// With unit super-block scales the result is an exact integer: every level
/// must equal the scalar one, and that must equal the integer sum of the
/// quants read back through dequantization — pins nibble order, fifth /
/// sixth bits, 6-bit scales and mins, the Q8_K bsums and -128.
#[test]
fn k_quant_integer_sums_are_exact_on_every_level() {
    let mut rng = Rng::new(37);
    for t in K_QUANT {
        let yt = quant::vec_dot_type(t);
        for nsb in [1usize, 2, 7] {
            let n = nsb * quant::QK_K;
            let (mut x, mut y) = (quantize(t, &vec![0.0; n]), quantize(yt, &vec![0.0; n]));
            scramble_k(t, &mut x, &mut rng);
            scramble_k(yt, &mut y, &mut rng);
            unit_k_scales(t, &mut x);
            unit_k_scales(yt, &mut y);
            if yt == DType::Q8_K {
                // bsums consistent with the quants, so dequantized values
                // give the same minimum term.
                for b in y.chunks_exact_mut(yt.type_size()) {
                    for g in 0..16 {
                        let s: i32 = b[4 + 16 * g..4 + 16 * (g + 1)]
                            .iter()
                            .map(|&q| i32::from(q as i8))
                            .sum();
                        b[260 + 2 * g..262 + 2 * g].copy_from_slice(&(s as i16).to_le_bytes());
                    }
                }
            }
            let mut dx = vec![0f32; n];
            let mut dy = vec![0f32; n];
            quant::dequantize_row(t, &x, &mut dx).unwrap();
            quant::dequantize_row(yt, &y, &mut dy).unwrap();
            let exact: f64 = dx
                .iter()
                .zip(&dy)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let want = scalar_dot(t)(n, &x, &y);
            assert_eq!(want, want.round(), "{t}: the reference is an integer");
            assert_eq!(
                f64::from(want),
                exact,
                "{t}: the reference is the integer sum"
            );
            for isa in levels() {
                let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                assert_eq!(got, want, "{isa} {t} super-blocks={nsb}");
            }
        }
    }
}

#[test]
fn q8_k_quantizer_is_bit_identical_on_every_level() {
    let mut rng = Rng::new(41);
    for nsb in [1usize, 2, 3] {
        let mut rows = hard_rows(&mut rng, nsb * 8);
        // Ties of the largest magnitude with both signs: the first one wins.
        let mut ties = rng.vec(nsb * quant::QK_K, -1.0, 1.0);
        ties[5] = -3.0;
        ties[9] = 3.0;
        rows.push(ties);
        // Exact halves after scaling (max 127 gives iscale -1): ties to even.
        rows.push(
            (0..nsb * quant::QK_K)
                .map(|i| {
                    if i == 0 {
                        127.0
                    } else {
                        (i % 100) as f32 * 0.5 - 25.0
                    }
                })
                .collect(),
        );
        // Signaling NaNs after the largest magnitude, in every lane: skipped
        // like quiet ones (NEON's fmaxnm would turn them into quiet NaNs).
        let mut snan = rng.vec(nsb * quant::QK_K, -1.0, 1.0);
        snan[3] = 7.0;
        for i in (4..snan.len()).step_by(5) {
            snan[i] = f32::from_bits(0x7f80_0001 + i as u32);
        }
        rows.push(snan);
        for (r, x) in rows.iter().enumerate() {
            let want = quantize(DType::Q8_K, x);
            for isa in levels() {
                let mut got = vec![0xa5u8; want.len()];
                simd::quantize_row_fn_for(isa, DType::Q8_K).unwrap()(x, &mut got);
                assert!(got == want, "{isa} Q8_K super-blocks={nsb} row {r}");
            }
        }
    }
}

/// The block counts the K-quant tests run: super-blocks for the Q8_K
/// types; for IQ4_NL (blocks of 32) also counts around the AVX2 kernel's
/// groups of four blocks.
fn k_block_counts(t: DType) -> &'static [usize] {
    if t.block_size() == QK {
        &[1, 2, 3, 4, 5, 7, 8, 9, 11, 33]
    } else {
        &[1, 2, 3, 5]
    }
}

/// Byte offsets of the f16 super-block scales of a `t` block (`d`, and
/// `dmin` for Q2_K / Q4_K / Q5_K); Q8_K's f32 `d` is at 0.
fn k_f16_scales(t: DType) -> &'static [usize] {
    match t {
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        DType::IQ4_NL | DType::IQ4_XS | DType::Q8_0 => &[0],
        _ => unreachable!(),
    }
}

/// f16 scales at the edges: largest finite, smallest normal and subnormal,
/// both signs, zeros, one.
const F16_EDGES: [u16; 9] = [
    0x7bff, 0xfbff, 0x0400, 0x8400, 0x0001, 0x8001, 0x0000, 0x8000, 0x3c00,
];
/// Q8_K scales at the edges (finite).
const F32_EDGES: [f32; 8] = [
    f32::MAX,
    -f32::MAX,
    f32::MIN_POSITIVE,
    -1e-45,
    0.0,
    -0.0,
    1.0,
    -3.5e10,
];

/// Sets every super-block scale of a `t` row: all to the edge value
/// `which` (0..9 for f16, wrapping for Q8_K), or each to a random edge
/// value when `which` is `None`.
fn edge_k_scales(t: DType, row: &mut [u8], which: Option<usize>, rng: &mut Rng) {
    for b in row.chunks_exact_mut(t.type_size()) {
        if t == DType::Q8_K {
            let i = which.unwrap_or_else(|| rng.below(F32_EDGES.len()));
            b[..4].copy_from_slice(&F32_EDGES[i % F32_EDGES.len()].to_le_bytes());
            continue;
        }
        for &off in k_f16_scales(t) {
            let i = which.unwrap_or_else(|| rng.below(F16_EDGES.len()));
            b[off..off + 2].copy_from_slice(&F16_EDGES[i % F16_EDGES.len()].to_le_bytes());
        }
    }
}

/// Fills every block's quants and sub-block scales (Q8_K: quants and
/// bsums) with `byte`, or with random bytes for `None`.
fn fill_k(t: DType, row: &mut [u8], byte: Option<u8>, rng: &mut Rng) {
    match byte {
        Some(v) => {
            for b in row.chunks_exact_mut(t.type_size()) {
                b[k_payload(t)].fill(v);
            }
        }
        None => scramble_k(t, row, rng),
    }
}

/// Bit for bit, except that any NaN matches any NaN (NaN payloads are not
/// part of the contract; extreme scales can give ∞ - ∞).
fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Adversarial blocks: all-max / all-min / -128 quants (the largest integer
/// sums every format allows), scales at the f16 / f32 edges (overflow to
/// ±∞ included), in every combination, at several row lengths (IQ4_NL
/// across its four-block groups and tails).
#[test]
fn k_quant_dots_are_bit_identical_on_adversarial_blocks() {
    let mut rng = Rng::new(43);
    let patterns = [Some(0x00u8), Some(0xff), Some(0x80), Some(0x7f), None];
    for t in K_QUANT {
        let yt = quant::vec_dot_type(t);
        for &nb in k_block_counts(t) {
            let n = nb * t.block_size();
            for (px, py) in patterns.iter().flat_map(|&a| patterns.map(|b| (a, b))) {
                for scales in [None, Some(0), Some(1), Some(8), Some(4)] {
                    let (mut x, mut y) = (vec![0u8; t.row_size(n)], vec![0u8; yt.row_size(n)]);
                    fill_k(t, &mut x, px, &mut rng);
                    fill_k(yt, &mut y, py, &mut rng);
                    edge_k_scales(t, &mut x, scales, &mut rng);
                    edge_k_scales(yt, &mut y, scales, &mut rng);
                    let want = scalar_dot(t)(n, &x, &y);
                    for isa in levels() {
                        let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
                        assert!(
                            same_f32(got, want),
                            "{isa} {t} nb={nb} x={px:?} y={py:?} scales={scales:?}: \
                             {got:e} vs {want:e}"
                        );
                    }
                }
            }
        }
    }
}

/// Real quantized rows at every length of [`k_block_counts`], with random
/// payload bytes or not: bit for bit on every level (the IQ4_NL tails
/// included, which the super-block multiples above never reach).
#[test]
fn k_quant_dots_are_bit_identical_at_every_length() {
    let mut rng = Rng::new(47);
    for t in K_QUANT {
        let yt = quant::vec_dot_type(t);
        for &nb in k_block_counts(t) {
            let n = nb * t.block_size();
            for case in 0..4 {
                let mut x = quantize(t, &rng.vec(n, -5.0, 3.0));
                let mut y = quantize(yt, &rng.vec(n, -1.0, 2.0));
                if case & 1 == 1 {
                    scramble_k(t, &mut x, &mut rng);
                }
                if case & 2 == 2 {
                    scramble_k(yt, &mut y, &mut rng);
                }
                same_bits_on_every_level(t, n, &x, &y, &format!("nb={nb} case={case}"));
            }
        }
    }
}

/// A K-quant type, an element count, and arbitrary rows of it and of its
/// `vec_dot_type` (scales included: any f16 / f32 bits, NaN and ∞ too).
fn any_k_rows() -> impl Strategy<Value = (DType, usize, Vec<u8>, Vec<u8>)> {
    (0..K_QUANT.len())
        .prop_flat_map(|i| {
            let t = K_QUANT[i];
            let most: usize = if t.block_size() == QK { 40 } else { 6 };
            (Just(t), 1..=most)
        })
        .prop_flat_map(|(t, nb)| {
            let n = nb * t.block_size();
            let yt = quant::vec_dot_type(t);
            (
                Just(t),
                Just(n),
                prop::collection::vec(any::<u8>(), t.row_size(n)),
                prop::collection::vec(any::<u8>(), yt.row_size(n)),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any bytes at all: every level returns the scalar result bit for bit
    /// (NaN where it is NaN).
    #[test]
    fn k_quant_dots_match_scalar_on_any_bytes((t, n, x, y) in any_k_rows()) {
        let want = scalar_dot(t)(n, &x, &y);
        for isa in levels() {
            let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, &x, &y);
            prop_assert!(same_f32(got, want), "{isa} {t} n={n}: {got:e} vs {want:e}");
        }
    }
}

/// Every level's dot product of `t` gives the scalar reference's bits on
/// the rows `x`, `y` of `n` elements.
fn same_bits_on_every_level(t: DType, n: usize, x: &[u8], y: &[u8], what: &str) {
    let want = scalar_dot(t)(n, x, y);
    for isa in levels() {
        let got = simd::vec_dot_fn_for(isa, t).unwrap()(n, x, y);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{isa} {t} {what}: {got:e} vs {want:e}"
        );
    }
}

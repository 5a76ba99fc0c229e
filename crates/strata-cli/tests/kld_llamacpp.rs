//! Fidelity over many positions, as llama.cpp users measure it: `strata
//! perplexity --kl-divergence` against llama.cpp's log-probabilities on the
//! CI text (the first 8000 bytes of the GPL-3, `-c 512 -b 512`, 3 chunks,
//! 765 scored positions), SmolLM2-135M-Instruct Q4_1, flash attention
//! (issue #19).
//!
//! The references in `tests/data/kld/` are llama.cpp's own
//! `--kl-divergence-base` files, one per instruction-set level, rewritten in
//! strata's compact top-k layout (the 256 most likely tokens per position,
//! 1.6 MB instead of 75 MB):
//!
//! ```text
//! llama-perplexity -m SmolLM2-135M-Instruct.Q4_1.gguf -f tests/data/gpl3_first_8000_bytes.txt \
//!     -c 512 -b 512 -t 2 -fa on --kl-divergence-base BASE.bin
//! strata kld-convert -k 256 BASE.bin tests/data/kld/llamacpp-LEVEL.top256
//! ```
//!
//! with llama.cpp b11312 (llama-cpp-python 0.3.36's vendored sources) built
//! natively (`-DGGML_NATIVE=ON`) on an AMD EPYC Zen 4 (AVX-512 VNNI) for
//! `avx512`, and with `-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON
//! -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON` on the same host for `avx2`
//! (its perplexities and FA on/off KLD equal the Zen 3 host's to the last
//! digit).
//!
//! ## What llama.cpp measures against itself on this text
//! Mean KLD ± its standard error, from `strata kld-compare` of llama.cpp's
//! own base files (the full-layout figures equal llama-perplexity's own
//! `--kl-divergence` output: 0.003602 at AVX-512):
//!
//! | pair (base → compared) | full layout | top-256 base |
//! |---|---:|---:|
//! | AVX-512: flash on → off | 3.602e-3 ± 0.115e-3 | 3.483e-3 ± 0.131e-3 |
//! | AVX2: flash on → off | 3.716e-3 ± 0.140e-3 | 3.558e-3 ± 0.142e-3 |
//! | AVX-512 → AVX2 build (flash on) | 3.520e-3 ± 0.128e-3 | 3.328e-3 ± 0.124e-3 |
//!
//! Any last-bit difference anywhere in the model (another attention path,
//! another accumulation order, another instruction set) lands in the same
//! place, ~3.5–3.8e-3: every quantized matmul re-quantizes its activations
//! to 8 bits, so one-ulp differences move whole quantization steps, and
//! that saturates after a few layers. strata against llama.cpp measured at
//! the time of writing (full / top-256): VNNI vs AVX-512 3.752e-3 / 3.558e-3,
//! AVX2 vs AVX2 3.986e-3 / 3.786e-3; strata AVX2 vs strata VNNI 3.792e-3.
//!
//! ## The bars
//! * strata's mean KLD against the reference of its level is not
//!   significantly above llama.cpp's mean KLD between its own flash-attention
//!   on and off runs at that level ([`SELF_SPREAD`], top-256 metric, so both
//!   sides are measured alike): at most the bound plus two standard errors
//!   of the difference. The strict point comparison (strata ≤ the bound) is
//!   printed, not asserted: at the time of writing strata lies 2 % (VNNI)
//!   and 6 % (AVX2) above it, inside the measurement noise (3.7 % and 4 %
//!   standard error). strata levels without a llama.cpp build (`scalar`,
//!   `neon`) are compared with the AVX2 reference and its bound.
//! * strata's levels agree with each other (the highest level's base file,
//!   written by strata in llama.cpp's full layout, against each lower level)
//!   as well as llama.cpp's AVX2 and AVX-512 builds agree ([`LEVEL_SPREAD`]),
//!   under the same two-standard-error rule.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// llama.cpp's mean KLD between its flash-attention-on (top-256 base) and
/// -off runs per level: (level, reference file, mean, standard error).
const SELF_SPREAD: [(&str, &str, f64, f64); 2] = [
    ("avx512", "kld/llamacpp-avx512.top256", 3.483e-3, 0.131e-3),
    ("avx2", "kld/llamacpp-avx2.top256", 3.558e-3, 0.142e-3),
];

/// llama.cpp's mean KLD between its native AVX-512 build (base, full layout)
/// and its AVX2-only build, flash attention on both: (mean, standard error).
const LEVEL_SPREAD: (f64, f64) = (3.520e-3, 0.128e-3);

/// `mean ± unc` is not significantly above `bound ± bound_unc`: at most two
/// standard errors of the difference above it.
fn within(mean: f64, unc: f64, bound: f64, bound_unc: f64) -> (bool, f64) {
    let limit = bound + 2.0 * (unc * unc + bound_unc * bound_unc).sqrt();
    (mean <= limit, limit)
}

/// Prints `what`'s mean KLD beside `spread` (`bound ± bound_unc`) and
/// asserts it is [`within`] it.
fn assert_within(what: &str, k: &Kld, spread: &str, (bound, bound_unc): (f64, f64)) {
    let (ok, limit) = within(k.mean, k.unc, bound, bound_unc);
    eprintln!(
        "{what}: mean KLD {:.4e} ± {:.2e}; {spread} {bound:.4e} ± {bound_unc:.2e} \
         (strict bar {}: {:+.1} %); asserted limit {limit:.4e}",
        k.mean,
        k.unc,
        if k.mean <= bound { "met" } else { "not met" },
        100.0 * (k.mean / bound - 1.0)
    );
    assert!(
        ok,
        "{what}: mean KLD {} ± {} is significantly above {spread} {bound} ± {bound_unc} \
         (limit {limit})",
        k.mean, k.unc
    );
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// What `--kl-divergence` printed.
#[derive(Debug)]
struct Kld {
    mean: f64,
    unc: f64,
    median: f64,
    p99: f64,
    same_top: f64,
    chunks: usize,
}

fn field(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{out}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("unparsable: {line}"))
}

/// Runs `strata perplexity` at `isa` (the inherited level when `None`) with `args`.
fn strata(model: &Path, isa: Option<&str>, args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(["perplexity", "-m"])
        .arg(model)
        .args(["-c", "512", "-b", "512", "-t", "2"])
        .args(args);
    if let Some(isa) = isa {
        cmd.env("STRATA_ISA", isa);
    }
    common::stdout_of(
        &mut cmd,
        &format!("perplexity {args:?} (STRATA_ISA={isa:?})"),
    )
}

fn kld(model: &Path, isa: Option<&str>, base: &Path, extra: &[&str]) -> Kld {
    let mut args = vec!["--kl-divergence", "--kl-divergence-base"];
    let b = base.to_str().expect("utf-8 path");
    args.push(b);
    args.extend_from_slice(extra);
    let out = strata(model, isa, &args);
    let k = Kld {
        mean: field(&out, "Mean    KLD:"),
        unc: {
            let l = out.lines().find(|l| l.starts_with("Mean    KLD:")).unwrap();
            l.rsplit('±').next().unwrap().trim().parse().unwrap()
        },
        median: field(&out, "Median  KLD:"),
        p99: field(&out, "99.0%   KLD:"),
        same_top: field(&out, "Same top p:"),
        // the per-chunk progress lines
        chunks: out
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
            })
            .count(),
    };
    eprintln!("strata at {isa:?} against {}: {k:?}", base.display());
    k
}

/// The llama.cpp level strata's active level is compared with (the AVX2
/// one for levels llama.cpp has no build of).
fn reference() -> &'static str {
    use strata::isa::{active, Isa};
    match active() {
        Isa::Amx | Isa::Vnni | Isa::Avx512 => "avx512",
        Isa::Avx2 | Isa::AvxVnni | Isa::Scalar | Isa::Neon => "avx2",
    }
}

#[test]
fn mean_kld_against_llama_cpp_of_the_same_level() {
    let Some(m) = common::q4_1_model("KL divergence vs llama.cpp") else {
        return;
    };
    let level = reference();
    let &(_, file, bound, bound_unc) = SELF_SPREAD.iter().find(|s| s.0 == level).expect("listed");
    eprintln!(
        "strata at {} on {}: against llama.cpp {level} ({file})",
        strata::isa::active(),
        strata::cpu::cpu_model()
    );
    let k = kld(&m, None, &data(file), &[]);
    assert_eq!(k.chunks, 3, "3 chunks scored");
    assert_within(
        &format!("against llama.cpp {level}"),
        &k,
        "llama.cpp's own flash on/off spread",
        (bound, bound_unc),
    );
    assert!(k.median <= k.mean && k.p99 >= k.mean, "{k:?}");
    // llama.cpp's variants put the same token first at 95.8-96.9 % of the positions
    assert!(k.same_top >= 94.0, "same top token only {} %", k.same_top);
}

#[test]
fn levels_agree_as_well_as_llama_cpp_builds() {
    let Some(m) = common::q4_1_model("KL divergence vs llama.cpp") else {
        return;
    };
    use strata::isa::{detected, Isa};
    let top = detected();
    let lower: Vec<Isa> = Isa::ALL
        .into_iter()
        .filter(|&i| i < top && i.is_supported())
        .collect();
    if lower.is_empty() {
        eprintln!("only one level ({top}) on this CPU: nothing to compare");
        return;
    }
    let dir = std::env::temp_dir().join(format!("strata-kld-levels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join(format!("strata-{top}.bin"));
    let b = base.to_str().expect("utf-8 path");
    let out = strata(
        &m,
        Some(top.name()),
        &[
            "-f",
            data("gpl3_first_8000_bytes.txt").to_str().unwrap(),
            "--kl-divergence-base",
            b,
        ],
    );
    assert!(out.contains("Final estimate"), "{out}");
    for isa in lower {
        // the scalar kernels are ~20x slower: one chunk (255 positions) keeps CI short
        let chunks: &[&str] = if isa == Isa::Scalar {
            &["--chunks", "1"]
        } else {
            &[]
        };
        let k = kld(&m, Some(isa.name()), &base, chunks);
        assert_within(
            &format!("strata {isa} against strata {top}"),
            &k,
            "llama.cpp's AVX2/AVX-512 spread",
            LEVEL_SPREAD,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_base_of_another_layout_or_model_is_refused() {
    let Some(m) = common::q4_1_model("KL divergence vs llama.cpp") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("strata-kld-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("not-a-base.bin");
    std::fs::write(&bad, b"GGUF and more bytes").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["perplexity", "-m"])
        .arg(&m)
        .args(["--kl-divergence", "--kl-divergence-base"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not-a-base.bin") && err.contains("does not look like"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

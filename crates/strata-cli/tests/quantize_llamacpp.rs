//! `strata quantize --allow-requantize` of the shipped SmolLM2-135M-Instruct
//! Q4_1 model against llama.cpp's `llama-quantize` (b11312, the sources
//! vendored in llama-cpp-python 0.3.36):
//!
//! ```text
//! llama-quantize --allow-requantize SmolLM2-135M-Instruct.Q4_1.gguf OUT.gguf Q4_K_M   (and Q6_K)
//! ```
//!
//! is deterministic (the same sha256 on every run, any thread count), and
//! strata must write the same file byte for byte: same metadata and order,
//! same tensor order, types, offsets and padding, and the same bytes in
//! every block (requantizing dequantizes Q4_1 to f32 with ggml's
//! `to_float` first, then quantizes with ggml's reference quantizers).
//! `tests/data/quantize/{TYPE}.tensors.tsv` lists llama-quantize's tensors
//! (name, type, bytes, sha256 of the bytes) so that a mismatch says which
//! tensors differ. The quantizers' SIMD paths must give the scalar
//! reference's bytes, so the file is also made at `STRATA_ISA=scalar`.
//!
//! Needs the model: skipped without it unless STRATA_REQUIRE_MODEL=1.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use strata::gguf::GgufFile;

/// llama-quantize's output per file type: (type, sha256, bytes).
const REFERENCES: [(&str, &str, usize); 2] = [
    (
        "Q4_K_M",
        "dc0f3a02e821146247a0af6895adf9872124f368682cb110cb9ed09ff2a9f9f1",
        105_454_144,
    ),
    (
        "Q6_K",
        "a969ae2086dd4945a7c61594bf72b2bcc3b7df8571c92aed8f213918673a7f80",
        138_382_912,
    ),
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// Runs `strata quantize --allow-requantize` (at `isa`, if given).
fn quantize(model: &Path, out: &Path, ftype: &str, isa: Option<&str>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(["quantize", "--allow-requantize", "-t", "2"])
        .arg(model)
        .arg(out)
        .arg(ftype);
    if let Some(isa) = isa {
        cmd.env("STRATA_ISA", isa);
    }
    let o = cmd.output().expect("strata runs");
    assert!(
        o.status.success(),
        "strata quantize failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Compares the file with llama-quantize's tensor list; returns the
/// number of tensors whose bytes differ (after asserting that names,
/// order and types are llama-quantize's).
fn compare_tensors(ftype: &str, bytes: Vec<u8>) -> usize {
    let tsv = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/data/quantize/{ftype}.tensors.tsv")),
    )
    .unwrap();
    let f = GgufFile::from_bytes(bytes).unwrap();
    let lines: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(f.tensors().len(), lines.len(), "{ftype}: tensor count");
    let mut differ = 0;
    for (t, l) in f.tensors().iter().zip(&lines) {
        assert_eq!(t.name(), l[0], "{ftype}: tensor order");
        assert_eq!(t.dtype().name(), l[1], "{ftype}: type of {}", t.name());
        assert_eq!(t.size().to_string(), l[2], "{ftype}: size of {}", t.name());
        if sha256(f.tensor_data(t)) != l[3] {
            eprintln!(
                "{ftype}: {} ({}) differs from llama-quantize's",
                t.name(),
                l[1]
            );
            differ += 1;
        }
    }
    differ
}

#[test]
fn quantize_writes_llama_quantizes_bytes() {
    let Some(m) = common::q4_1_model("quantize vs llama-quantize") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("quantize-llamacpp");
    std::fs::create_dir_all(&dir).unwrap();
    let active = strata::isa::active().to_string();
    for (ftype, want, len) in REFERENCES {
        let isas: &[Option<&str>] = if ftype == "Q4_K_M" && active != "scalar" {
            &[None, Some("scalar")]
        } else {
            &[None]
        };
        for &isa in isas {
            let out = dir.join(format!("{ftype}.gguf"));
            quantize(&m, &out, ftype, isa);
            let bytes = std::fs::read(&out).unwrap();
            std::fs::remove_file(&out).unwrap();
            let got = sha256(&bytes);
            let level = isa.unwrap_or(&active);
            eprintln!("{ftype} at {level}: {} bytes, sha256 {got}", bytes.len());
            let n = bytes.len();
            let differ = compare_tensors(ftype, bytes);
            assert_eq!(differ, 0, "{ftype} at {level}: {differ} tensors differ");
            assert_eq!(n, len, "{ftype}: file size");
            assert_eq!(
                got, want,
                "{ftype} at {level}: sha256 (header or padding differs)"
            );
        }
    }
}

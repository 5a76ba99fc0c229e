//! Bit-exactness against golden vectors: the legacy formats against the
//! python `gguf` package 0.19.0 (`quants.quantize` / `quants.dequantize`, the
//! reference quantizers of the GGUF format; `tests/data/quant/manifest.json`),
//! the K-quants and IQ4 formats against bytes quantized by ggml itself and
//! dequantized by `gguf` (`tests/data/quant/manifest_k.json`, made by
//! `scripts/quant_golden_k.py`).

use std::path::PathBuf;

use strata::{quant, DType};

const ROWS: usize = 8;
const COLS: usize = 256;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant")
}

fn read(name: &str) -> Vec<u8> {
    let p = data_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn input() -> Vec<f32> {
    let x = f32s(&read("input_f32_8x256.bin"));
    assert_eq!(x.len(), ROWS * COLS);
    x
}

/// One `"types"` entry of a manifest.
struct Entry {
    name: String,
    quantized: String,
    dequantized: String,
    row_bytes: usize,
    /// ggml's dot products (K manifest, weight types only).
    dot: Option<String>,
    /// ggml's bytes for the stress input (K manifest).
    stress: Option<String>,
}

/// The `"types"` entries of the legacy manifest: (type name, quantized file,
/// dequantized file, bytes per row).
fn manifest_types() -> Vec<(String, String, String, usize)> {
    manifest_entries("manifest.json")
        .into_iter()
        .map(|e| (e.name, e.quantized, e.dequantized, e.row_bytes))
        .collect()
}

/// The `"types"` entries of manifest `file`. A tiny scan instead of a JSON
/// parser: the manifests are ours and fixed (flat objects, no commas inside
/// the values read here).
fn manifest_entries(file: &str) -> Vec<Entry> {
    let m = String::from_utf8(read(file)).unwrap();
    let types = &m[m.find("\"types\"").expect("manifest has types")..];
    let try_field = |obj: &str, key: &str| -> Option<String> {
        let at = obj.find(&format!("\"{key}\""))?;
        let rest = obj[at + key.len() + 2..].trim_start_matches([':', ' ']);
        let end = rest.find([',', '\n', '}']).unwrap();
        Some(rest[..end].trim().trim_matches('"').to_string())
    };
    let field =
        |obj: &str, key: &str| try_field(obj, key).unwrap_or_else(|| panic!("{file}: no {key}"));
    let mut out = Vec::new();
    let mut rest = &types[types.find('{').unwrap() + 1..];
    while let Some(open) = rest.find('{') {
        let name = rest[..open]
            .trim()
            .trim_matches([',', ':', ' ', '\n'])
            .trim_matches('"');
        let close = open + rest[open..].find('}').unwrap();
        let obj = &rest[open..=close];
        out.push(Entry {
            name: name.to_string(),
            quantized: field(obj, "quantized"),
            dequantized: field(obj, "dequantized"),
            row_bytes: field(obj, "quantized_bytes_per_row").parse().unwrap(),
            dot: try_field(obj, "dot"),
            stress: try_field(obj, "stress_quantized"),
        });
        rest = &rest[close + 1..];
    }
    out
}

#[test]
fn manifest_lists_the_expected_types() {
    let names: Vec<String> = manifest_types().into_iter().map(|t| t.0).collect();
    assert_eq!(names, ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16"]);
}

/// Quantizes every golden input row and dequantizes every golden quantized
/// row, requiring identical bytes and identical f32 bit patterns.
#[test]
fn quantize_and_dequantize_match_gguf_bit_for_bit() {
    let x = input();
    for (name, qfile, dqfile, row_bytes) in manifest_types() {
        let t = DType::from_name(&name).unwrap_or_else(|| panic!("unknown type {name}"));
        assert_eq!(t.row_size(COLS), row_bytes, "{t}");
        let want_q = read(&qfile);
        let want_dq = f32s(&read(&dqfile));
        assert_eq!(want_q.len(), ROWS * row_bytes, "{t}");
        assert_eq!(want_dq.len(), ROWS * COLS, "{t}");

        let mut q = vec![0u8; row_bytes];
        let mut dq = vec![0f32; COLS];
        for r in 0..ROWS {
            let src = &x[r * COLS..(r + 1) * COLS];
            quant::quantize_row(t, src, &mut q).unwrap();
            let golden_q = &want_q[r * row_bytes..(r + 1) * row_bytes];
            if let Some(i) = (0..row_bytes).find(|&i| q[i] != golden_q[i]) {
                let b = i / t.type_size();
                let blk = b * t.type_size()..(b + 1) * t.type_size();
                panic!(
                    "{t} row {r}: quantized byte {i} (block {b}) differs\n ours:   {:02x?}\n golden: {:02x?}",
                    &q[blk.clone()],
                    &golden_q[blk]
                );
            }

            // Dequantize the golden bytes (not ours) so both halves are
            // checked independently.
            quant::dequantize_row(t, golden_q, &mut dq).unwrap();
            for (i, (a, b)) in dq.iter().zip(&want_dq[r * COLS..]).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{t} row {r} element {i}: dequantized {a:e} vs golden {b:e}"
                );
            }
        }
    }
}

/// F32 "quantization" is a little-endian copy in both directions.
#[test]
fn f32_rows_are_copied() {
    let x = input();
    let mut b = vec![0u8; x.len() * 4];
    quant::quantize_row(DType::F32, &x, &mut b).unwrap();
    assert_eq!(b, read("input_f32_8x256.bin"));
    let mut y = vec![0f32; x.len()];
    quant::dequantize_row(DType::F32, &b, &mut y).unwrap();
    assert!(x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn k_manifest_lists_the_expected_types() {
    let names: Vec<String> = manifest_entries("manifest_k.json")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        [
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ4_NL",
            "IQ4_XS",
            "IQ4_NL_REF"
        ]
    );
}

/// The type of a K manifest entry and the quantizer that must reproduce its
/// bytes: `IQ4_NL` holds what `ggml_quantize_chunk` writes (strata's
/// `quantize_row_iq4_nl_search`), `IQ4_NL_REF` what ggml's CPU backend
/// converts rows to (`quantize_row_iq4_nl`, the dispatched one); every other
/// type uses the checked, dispatched `quant::quantize_row`.
type Quantizer = Box<dyn Fn(&[f32], &mut [u8])>;

fn k_quantizer(name: &str) -> (DType, Quantizer) {
    match name {
        "IQ4_NL" => (DType::IQ4_NL, Box::new(quant::quantize_row_iq4_nl_search)),
        "IQ4_NL_REF" => (
            DType::IQ4_NL,
            Box::new(|x: &[f32], q: &mut [u8]| quant::quantize_row(DType::IQ4_NL, x, q).unwrap()),
        ),
        _ => {
            let t = DType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"));
            (
                t,
                Box::new(move |x: &[f32], q: &mut [u8]| quant::quantize_row(t, x, q).unwrap()),
            )
        }
    }
}

/// Quantizes `rows` rows of `x` with `quantize` and lists every block that
/// differs from `golden`. The only blocks exempt are the all-zero IQ4_NL
/// blocks of `quantize_row_iq4_nl_ref`: ggml writes `d = 0` there and leaves
/// the index nibbles as whatever its stack held; strata writes index 8, and
/// only `d` is compared (the count of those comes back too).
fn differing_blocks(
    name: &str,
    t: DType,
    quantize: &dyn Fn(&[f32], &mut [u8]),
    x: &[f32],
    golden: &[u8],
) -> (Vec<String>, usize) {
    let (bs, row_bytes) = (t.type_size(), t.row_size(COLS));
    let rows = x.len() / COLS;
    assert_eq!(golden.len(), rows * row_bytes, "{name}");
    let mut q = vec![0u8; row_bytes];
    let (mut differing, mut exempt) = (Vec::new(), 0);
    for r in 0..rows {
        let src = &x[r * COLS..(r + 1) * COLS];
        quantize(src, &mut q);
        let golden_q = &golden[r * row_bytes..(r + 1) * row_bytes];
        for (b, (ours, gold)) in q.chunks(bs).zip(golden_q.chunks(bs)).enumerate() {
            let elems = &src[b * t.block_size()..(b + 1) * t.block_size()];
            if name == "IQ4_NL_REF" && elems.iter().all(|v| *v == 0.0) {
                assert_eq!(&ours[..2], &gold[..2], "{name} row {r} block {b}: d");
                assert!(ours[2..].iter().all(|&v| v == 0x88), "row {r} block {b}");
                exempt += 1;
            } else if ours != gold {
                differing.push(format!(
                    "row {r} block {b}\n ours:   {ours:02x?}\n golden: {gold:02x?}"
                ));
            }
        }
    }
    (differing, exempt)
}

/// ggml's quantized bytes, block for block, on the golden rows and on the
/// 32 stress rows (see `scripts/quant_golden_k.py`), and gguf's dequantized
/// values bit for bit. Apart from the exempt IQ4_NL blocks of
/// [`differing_blocks`] (row 2 of the golden input, 8 blocks, and the
/// all-zero blocks of the sparse stress rows), every block of every type
/// must be identical: the reference build has no FMA, so no float
/// contraction separates ggml's C from these.
#[test]
fn k_quantize_matches_ggml_and_dequantize_matches_gguf_bit_for_bit() {
    let x = input();
    let stress = f32s(&read("input_k_stress_f32_32x256.bin"));
    assert_eq!(stress.len(), 32 * COLS);
    for e in manifest_entries("manifest_k.json") {
        let (t, quantize) = k_quantizer(&e.name);
        assert_eq!(t.row_size(COLS), e.row_bytes, "{}", e.name);
        let want_q = read(&e.quantized);
        let (differing, exempt) = differing_blocks(&e.name, t, &quantize, &x, &want_q);
        assert!(
            differing.is_empty(),
            "{}: {} blocks differ from ggml:\n{}",
            e.name,
            differing.len(),
            differing.join("\n")
        );
        assert_eq!(exempt, if e.name == "IQ4_NL_REF" { 8 } else { 0 });

        let stress_file = e.stress.as_deref().expect("stress bytes");
        let (differing, _) = differing_blocks(&e.name, t, &quantize, &stress, &read(stress_file));
        assert!(
            differing.is_empty(),
            "{} (stress rows): {} blocks differ from ggml:\n{}",
            e.name,
            differing.len(),
            differing.join("\n")
        );

        // Dequantize the golden bytes (not ours) so both halves are
        // checked independently.
        let want_dq = f32s(&read(&e.dequantized));
        assert_eq!(want_dq.len(), ROWS * COLS, "{}", e.name);
        let mut dq = vec![0f32; ROWS * COLS];
        quant::dequantize_row(t, &want_q, &mut dq).unwrap();
        for (i, (a, b)) in dq.iter().zip(&want_dq).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{} row {} element {}: dequantized {a:e} vs golden {b:e}",
                e.name,
                i / COLS,
                i % COLS
            );
        }
    }
}

/// ggml's CPU dot products (its native SIMD kernels) of quantized row `r`
/// with row `(r + 1) % 8` in the dot partner type, against strata's scalar
/// reference on the same bytes. ggml's kernels accumulate the same exact
/// integer block sums in another order (and partly in lanes), so they agree
/// to within a few f32 roundings of the magnitude `Σ |x_i y_i|` of the
/// dequantized rows; the bound allows 1e-6 of it.
#[test]
fn k_dots_match_ggml() {
    let x = input();
    let mut checked = 0;
    for e in manifest_entries("manifest_k.json") {
        let Some(dot_file) = e.dot else { continue };
        let (t, quantize) = k_quantizer(&e.name);
        let yt = quant::vec_dot_type(t);
        let want = f32s(&read(&dot_file));
        assert_eq!(want.len(), ROWS, "{}", e.name);
        for (r, &want) in want.iter().enumerate() {
            let mut qx = vec![0u8; e.row_bytes];
            quantize(&x[r * COLS..(r + 1) * COLS], &mut qx);
            let r1 = (r + 1) % ROWS;
            let mut qy = vec![0u8; yt.row_size(COLS)];
            quant::quantize_row(yt, &x[r1 * COLS..(r1 + 1) * COLS], &mut qy).unwrap();
            let got = quant::vec_dot(t, COLS, &qx, &qy).unwrap();

            let (mut dx, mut dy) = (vec![0f32; COLS], vec![0f32; COLS]);
            quant::dequantize_row(t, &qx, &mut dx).unwrap();
            quant::dequantize_row(yt, &qy, &mut dy).unwrap();
            let mag: f64 = dx
                .iter()
                .zip(&dy)
                .map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs())
                .sum();
            let err = (f64::from(got) - f64::from(want)).abs();
            assert!(
                err <= 1e-6 * mag,
                "{} row {r}: strata {got:e} vs ggml {want:e} (|err| {err:e}, magnitude {mag:e})",
                e.name
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 7 * ROWS);
}

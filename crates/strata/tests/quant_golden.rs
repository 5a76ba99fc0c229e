//! Bit-exactness against golden vectors made by the python `gguf` package
//! 0.19.0 (`quants.quantize` / `quants.dequantize`, the reference quantizers
//! of the GGUF format). See `tests/data/quant/manifest.json`.

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

/// The `"types"` entries of the manifest: (type name, quantized file,
/// dequantized file, bytes per row). A tiny scan instead of a JSON parser:
/// the manifest is ours and fixed.
fn manifest_types() -> Vec<(String, String, String, usize)> {
    let m = String::from_utf8(read("manifest.json")).unwrap();
    let types = &m[m.find("\"types\"").expect("manifest has types")..];
    let field = |obj: &str, key: &str| -> String {
        let at = obj
            .find(&format!("\"{key}\""))
            .unwrap_or_else(|| panic!("no {key}"));
        let rest = obj[at + key.len() + 2..].trim_start_matches([':', ' ']);
        let end = rest.find([',', '\n', '}']).unwrap();
        rest[..end].trim().trim_matches('"').to_string()
    };
    let mut out = Vec::new();
    let mut rest = &types[types.find('{').unwrap() + 1..];
    while let Some(open) = rest.find('{') {
        let name = rest[..open]
            .trim()
            .trim_matches([',', ':', ' ', '\n'])
            .trim_matches('"');
        let close = open + rest[open..].find('}').unwrap();
        let obj = &rest[open..=close];
        out.push((
            name.to_string(),
            field(obj, "quantized"),
            field(obj, "dequantized"),
            field(obj, "quantized_bytes_per_row").parse().unwrap(),
        ));
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

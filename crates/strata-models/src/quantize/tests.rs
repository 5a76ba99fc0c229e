//! The quantizer on small writer-made models: the bytes of every
//! conversion, metadata and tensor order, streaming over several slabs and
//! threads, and every refusal.

use std::path::{Path, PathBuf};

use strata::gguf::{GgufFile, GgufWriter, Value};
use strata::{quant, DType};

use super::*;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("strata-quantize-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    strata::testkit::xorshift(seed)
        .take(n)
        .map(|s| ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32)
        .collect()
}

/// A two-layer llama with f32 weights (rows of 64, except ffn_down's 256),
/// its tensors out of llama.cpp's order; `poke` may change a tensor's
/// values before it is written.
fn f32_model(path: &Path, poke: &dyn Fn(&str, &mut Vec<f32>)) {
    let mut w = GgufWriter::new();
    for (k, v) in [
        ("general.architecture", Value::from("llama")),
        ("general.file_type", Value::U32(0)),
        ("llama.block_count", Value::U32(2)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("general.quantization_version", Value::U32(1)),
        ("general.name", Value::from("tiny")),
    ] {
        w.add_metadata(k, v).unwrap();
    }
    let mut tensors: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![64, 40]),
        ("output_norm.weight".into(), vec![64]),
    ];
    for il in [1, 0] {
        for (n, d) in [
            ("attn_norm.weight", vec![64]),
            ("attn_q.weight", vec![64, 64]),
            ("attn_v.weight", vec![64, 32]),
            ("ffn_down.weight", vec![256, 64]),
        ] {
            tensors.push((format!("blk.{il}.{n}"), d));
        }
    }
    for (i, (name, dims)) in tensors.iter().enumerate() {
        let mut v = values(dims.iter().product(), i as u64 + 1);
        poke(name, &mut v);
        w.add_tensor(name.as_str(), DType::F32, dims, f32_bytes(&v))
            .unwrap();
    }
    w.write_to_path(path).unwrap();
}

/// A fresh temporary directory `name` holding [`f32_model`] (with `poke`)
/// as `in.gguf`; returns both paths.
fn f32_model_in(name: &str, poke: &dyn Fn(&str, &mut Vec<f32>)) -> (PathBuf, PathBuf) {
    let d = dir(name);
    let input = d.join("in.gguf");
    f32_model(&input, poke);
    (d, input)
}

fn opts(ft: FileType, threads: usize) -> QuantizeOptions {
    QuantizeOptions {
        threads,
        ..QuantizeOptions::new(ft)
    }
}

fn run(input: &Path, output: &Path, o: &QuantizeOptions) -> Result<Plan> {
    let mut last = None;
    let r = quantize_file(input, output, o, &mut |p| {
        assert!(p.bytes_done <= p.bytes_total);
        last = Some((p.index, p.count, p.tensor_done));
    });
    if r.is_ok() {
        let (i, n, done) = last.unwrap();
        assert!(i + 1 == n && done, "progress reached the end");
    }
    r
}

/// Every output tensor is `dtype` row by row of the input's values
/// (through f32 when the input is quantized).
fn assert_rows_are(input: &GgufFile, output: &GgufFile, plan: &Plan) {
    for t in &plan.tensors {
        let src = input.tensor(&t.name).unwrap();
        let dst = output.tensor(&t.name).unwrap();
        assert_eq!(dst.dtype(), t.to, "{}", t.name);
        assert_eq!(dst.dims(), t.dims.as_slice(), "{}", t.name);
        let n = t.ncols();
        let mut x = vec![0f32; n];
        let mut q = vec![0u8; t.to.row_size(n)];
        let src_rows = input.tensor_data(src).chunks_exact(t.from.row_size(n));
        let dst_rows = output.tensor_data(dst).chunks_exact(t.to.row_size(n));
        for (s, d) in src_rows.zip(dst_rows) {
            quant::dequantize_row(t.from, s, &mut x).unwrap();
            quant::quantize_row(t.to, &x, &mut q).unwrap();
            assert_eq!(q, d, "{}", t.name);
        }
    }
}

fn leftovers(d: &Path) -> Vec<String> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect()
}

#[test]
fn q8_0_and_q4_k_m_write_the_reference_rows_in_llama_order() {
    let (d, input) = f32_model_in("mix", &|_, _| {});
    let inf = GgufFile::open(&input).unwrap();
    for ft in [
        FileType::Q8_0,
        FileType::Q4_K_M,
        FileType::F16,
        FileType::BF16,
    ] {
        let out = d.join(format!("{ft}.gguf"));
        let plan = run(&input, &out, &opts(ft, 3)).unwrap();
        let f = GgufFile::open(&out).unwrap();
        // metadata: the input's, the two keys llama-quantize sets at the end
        let keys: Vec<&str> = f.metadata().keys().collect();
        assert_eq!(
            keys,
            [
                "general.architecture",
                "llama.block_count",
                "llama.attention.head_count",
                "llama.attention.head_count_kv",
                "general.name",
                "general.quantization_version",
                "general.file_type"
            ]
        );
        assert_eq!(f.metadata().get_u32("general.file_type").unwrap(), ft.id());
        assert_eq!(
            f.metadata()
                .get_u32("general.quantization_version")
                .unwrap(),
            2
        );
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(names[..2], ["output_norm.weight", "token_embd.weight"]);
        assert_eq!(
            names[2..6],
            [
                "blk.0.attn_norm.weight",
                "blk.0.attn_q.weight",
                "blk.0.attn_v.weight",
                "blk.0.ffn_down.weight"
            ]
        );
        assert_rows_are(&inf, &f, &plan);
        let ty = |n: &str| f.tensor(n).unwrap().dtype();
        assert_eq!(ty("output_norm.weight"), DType::F32);
        match ft {
            FileType::Q8_0 => assert_eq!(ty("blk.1.ffn_down.weight"), DType::Q8_0),
            FileType::Q4_K_M => {
                // use_more_bits over 2 layers: the second one only
                assert_eq!(ty("blk.0.ffn_down.weight"), DType::Q4_K);
                assert_eq!(ty("blk.1.ffn_down.weight"), DType::Q6_K);
                assert_eq!(ty("blk.0.attn_q.weight"), DType::Q5_0);
                // tied embedding: Q6_K, rows of 64 fall back to Q8_0
                assert_eq!(ty("token_embd.weight"), DType::Q8_0);
                // attn_q and attn_v: rows of 64 are no 256-blocks
                assert_eq!(plan.n_fallback(), 4);
            }
            _ => assert_eq!(ty("blk.1.attn_q.weight"), ft.default_type()),
        }
        // one thread writes the same bytes
        let one = d.join("one.gguf");
        run(&input, &one, &opts(ft, 1)).unwrap();
        assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&out).unwrap());
    }
    assert!(leftovers(&d).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn requantizing_needs_the_flag_and_goes_through_f32() {
    let (d, input) = f32_model_in("requant", &|_, _| {});
    let q8 = d.join("q8.gguf");
    run(&input, &q8, &opts(FileType::Q8_0, 2)).unwrap();
    let out = d.join("q4.gguf");
    let e = run(&q8, &out, &opts(FileType::Q4_0, 2)).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, QuantizeError::Requantize { tensor, from: DType::Q8_0, .. } if tensor == "blk.0.attn_q.weight"),
        "{msg}"
    );
    assert!(msg.contains("--allow-requantize"), "{msg}");
    assert!(!out.exists());
    let mut o = opts(FileType::Q4_0, 2);
    o.allow_requantize = true;
    let plan = run(&q8, &out, &o).unwrap();
    let f = GgufFile::open(&out).unwrap();
    assert_rows_are(&GgufFile::open(&q8).unwrap(), &f, &plan);
    assert_eq!(
        f.tensor("blk.0.attn_q.weight").unwrap().dtype(),
        DType::Q4_0
    );
    // the same type is copied, even without the flag
    let same = d.join("same.gguf");
    let plan = run(&q8, &same, &opts(FileType::Q8_0, 2)).unwrap();
    assert!(plan.tensors.iter().all(|t| t.from == t.to));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn non_finite_values_are_refused_with_their_position() {
    // row 5, column 7 of blk.1.ffn_down (rows of 256): in the third slab
    let (d, input) = f32_model_in("nan", &|n, v| {
        if n == "blk.1.ffn_down.weight" {
            v[5 * 256 + 7] = f32::NAN;
        }
    });
    let out = d.join("out.gguf");
    std::fs::write(&out, b"old").unwrap();
    for ft in [FileType::Q4_K_M, FileType::F16] {
        let e = run(&input, &out, &opts(ft, 2)).unwrap_err();
        assert!(
            matches!(&e, QuantizeError::NonFinite { tensor, row: 5, col: 7, .. } if tensor == "blk.1.ffn_down.weight"),
            "{e}"
        );
        assert!(e.to_string().contains("in the input"), "{e}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"old",
            "the old output is untouched"
        );
        assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
    }
    // finite in the input, infinite in f16
    f32_model(&input, &|n, v| {
        if n == "blk.0.attn_q.weight" {
            v[64 * 3 + 1] = 1e6;
        }
    });
    let e = run(&input, &out, &opts(FileType::F16, 2)).unwrap_err();
    assert!(
        matches!(&e, QuantizeError::NonFinite { row: 3, col: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("after conversion to f16"), "{e}");
    // an f32 norm is copied, and checked too
    f32_model(&input, &|n, v| {
        if n == "output_norm.weight" {
            v[3] = f32::INFINITY;
        }
    });
    let e = run(&input, &out, &opts(FileType::Q8_0, 2)).unwrap_err();
    assert!(
        e.to_string()
            .contains("'output_norm.weight': inf at row 0, column 3"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn paths_and_options_are_checked_before_any_work() {
    let (d, input) = f32_model_in("paths", &|_, _| {});
    let o = opts(FileType::Q8_0, 1);
    let e = run(&input, &input, &o).unwrap_err();
    assert!(matches!(e, QuantizeError::SameFile { .. }), "{e}");
    #[cfg(unix)]
    {
        let link = d.join("link.gguf");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let e = run(&input, &link, &o).unwrap_err();
        assert!(matches!(e, QuantizeError::SameFile { .. }), "{e}");
    }
    let e = run(&input, &d.join("missing/out.gguf"), &o).unwrap_err();
    assert!(e.to_string().contains("missing/out.gguf"), "{e}");
    assert!(matches!(e, QuantizeError::Output { .. }), "{e}");
    let e = run(&input, &d, &o).unwrap_err();
    assert!(matches!(e, QuantizeError::Output { .. }), "{e}");
    let e = run(&d.join("absent.gguf"), &d.join("o.gguf"), &o).unwrap_err();
    assert!(matches!(e, QuantizeError::Input(_)), "{e}");
    let mut bad = o.clone();
    bad.output_tensor_type = Some(DType::Q8_K);
    let e = run(&input, &d.join("o.gguf"), &bad).unwrap_err();
    assert!(e.to_string().contains("--output-tensor-type"), "{e}");
    assert!(parse_tensor_type("--token-embedding-type", "q8_1").is_err());
    assert_eq!(
        parse_tensor_type("--token-embedding-type", "Q6_K").unwrap(),
        DType::Q6_K
    );
    // explicit types, pure
    let mut ex = opts(FileType::Q4_K_M, 2);
    ex.token_embedding_type = Some(DType::F16);
    ex.pure = true;
    let out = d.join("ex.gguf");
    run(&input, &out, &ex).unwrap();
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.tensor("token_embd.weight").unwrap().dtype(), DType::F16);
    assert_eq!(
        f.tensor("blk.1.ffn_down.weight").unwrap().dtype(),
        DType::Q4_K
    );
    assert!(leftovers(&d).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

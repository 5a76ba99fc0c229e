//! Tiny writer-made GGUF files: the proptest fuzzer's starting points and
//! the cargo-fuzz seed corpus (`examples/gguf_seed_corpus.rs`).

use strata::gguf::{Array, GgufWriter, Value};
use strata::DType;

/// `(name, bytes)` of each seed file.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // Every value type, nested arrays, three tensor types.
    let mut w = GgufWriter::new();
    let kv: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("u8", 1u8.into()),
        ("i8", (-1i8).into()),
        ("u16", 2u16.into()),
        ("i16", (-2i16).into()),
        ("u32", 3u32.into()),
        ("i32", (-3i32).into()),
        ("f32", 0.5f32.into()),
        ("bool", true.into()),
        ("str", "s".into()),
        ("u64", 4u64.into()),
        ("i64", (-4i64).into()),
        ("f64", 0.25f64.into()),
        ("a.str", vec!["a", "bc"].into()),
        ("a.i32", vec![1i32, 2].into()),
        ("a.f32", vec![1.0f32].into()),
        ("a.bool", vec![false, true].into()),
        (
            "a.nested",
            vec![Array::from(vec![1u8]), Array::from(vec!["x"])].into(),
        ),
    ];
    for (k, v) in kv {
        w.add_metadata(k, v).unwrap();
    }
    w.add_tensor("norm", DType::F32, &[2], vec![0u8; 8])
        .unwrap();
    w.add_tensor("q", DType::Q4_1, &[32, 2], vec![1u8; 40])
        .unwrap();
    w.add_tensor("e", DType::Q8_0, &[32, 1, 1, 1], vec![2u8; 34])
        .unwrap();
    let all_types = w.to_bytes().unwrap();

    // Custom alignment, one tensor.
    let mut w = GgufWriter::new();
    w.set_alignment(8).unwrap();
    w.add_metadata("general.name", "aligned").unwrap();
    w.add_tensor("t", DType::F16, &[3, 2], vec![3u8; 12])
        .unwrap();
    let aligned = w.to_bytes().unwrap();

    // Metadata only.
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<s>", "</s>", "a"])
        .unwrap();
    let no_tensors = w.to_bytes().unwrap();

    // Same as `aligned` but version 2.
    let mut v2 = aligned.clone();
    v2[4] = 2;

    vec![
        ("all_types", all_types),
        ("aligned", aligned),
        ("no_tensors", no_tensors),
        ("v2", v2),
    ]
}

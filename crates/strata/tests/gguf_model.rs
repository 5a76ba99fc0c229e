//! Reads a real llama-architecture GGUF model (SmolLM2-135M-Instruct Q4_1,
//! when present) and, always, a writer-made file with the same layout, both
//! through the same checks, so nothing hides behind the skip.
//!
//! The model is looked up at `$STRATA_MODEL`, else at
//! `~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf`.

use std::path::PathBuf;

use strata::gguf::{GgufFile, GgufWriter, Value};
use strata::DType;

/// The per-layer tensors of a llama model and whether each is a matrix
/// (quantized) or a norm (F32).
const LAYER_TENSORS: [(&str, bool); 9] = [
    ("attn_norm", false),
    ("attn_q", true),
    ("attn_k", true),
    ("attn_v", true),
    ("attn_output", true),
    ("ffn_norm", false),
    ("ffn_gate", true),
    ("ffn_up", true),
    ("ffn_down", true),
];

/// What a llama-architecture GGUF file must contain.
struct Expect {
    n_layers: usize,
    n_embd: usize,
    n_ff: usize,
    n_head: usize,
    n_head_kv: usize,
    n_vocab: usize,
    matrix_type: DType,
    embd_type: DType,
}

fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// The checks shared by the real model and the synthetic file.
fn check_llama(f: &GgufFile, e: &Expect) {
    let m = f.metadata();
    assert_eq!(f.version(), 3);
    assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
    let u32_at = |key: &str| m.get_u32(key).unwrap() as usize;
    assert_eq!(u32_at("llama.block_count"), e.n_layers);
    assert_eq!(u32_at("llama.embedding_length"), e.n_embd);
    assert_eq!(u32_at("llama.feed_forward_length"), e.n_ff);
    assert_eq!(u32_at("llama.attention.head_count"), e.n_head);
    assert_eq!(u32_at("llama.attention.head_count_kv"), e.n_head_kv);
    let eps = m.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap();
    assert!(eps > 0.0 && eps < 1e-3, "{eps}");
    assert!(m.get_f32("llama.rope.freq_base").unwrap() > 0.0);
    assert_eq!(u32_at("llama.rope.dimension_count"), e.n_embd / e.n_head);
    // Wrong-type lookups name the key.
    let err = m.get_str("llama.block_count").unwrap_err().to_string();
    assert!(
        err.contains("'llama.block_count'") && err.contains("found u32"),
        "{err}"
    );

    // Tokenizer.
    assert_eq!(m.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    let tokens = m.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), e.n_vocab);
    assert_eq!(
        m.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        e.n_vocab
    );
    assert!(!m.get_str_array("tokenizer.ggml.merges").unwrap().is_empty());
    let bos = m.get_u32("tokenizer.ggml.bos_token_id").unwrap() as usize;
    let eos = m.get_u32("tokenizer.ggml.eos_token_id").unwrap() as usize;
    assert!(bos < e.n_vocab && eos < e.n_vocab);
    assert!(matches!(
        m.get("tokenizer.ggml.merges"),
        Some(Value::Array(_))
    ));

    // Tensors: names, types, shapes, sizes, data.
    let n_embd_kv = e.n_embd / e.n_head * e.n_head_kv;
    let mut expected = vec![
        (
            "token_embd.weight".to_owned(),
            e.embd_type,
            vec![e.n_embd, e.n_vocab],
        ),
        ("output_norm.weight".to_owned(), DType::F32, vec![e.n_embd]),
    ];
    for l in 0..e.n_layers {
        for (t, matrix) in LAYER_TENSORS {
            let dims = match t {
                "attn_q" | "attn_output" => vec![e.n_embd, e.n_embd],
                "attn_k" | "attn_v" => vec![e.n_embd, n_embd_kv],
                "ffn_gate" | "ffn_up" => vec![e.n_embd, e.n_ff],
                "ffn_down" => vec![e.n_ff, e.n_embd],
                _ => vec![e.n_embd],
            };
            let ty = if matrix { e.matrix_type } else { DType::F32 };
            expected.push((format!("blk.{l}.{t}.weight"), ty, dims));
        }
    }
    assert_eq!(f.tensors().len(), expected.len());
    let count = |ty: DType| f.tensors().iter().filter(|t| t.dtype() == ty).count();
    assert_eq!(count(e.matrix_type), 7 * e.n_layers);
    assert_eq!(count(DType::F32), 2 * e.n_layers + 1);
    assert_eq!(count(e.embd_type), 1);
    for (name, ty, dims) in &expected {
        let t = f
            .tensor(name)
            .unwrap_or_else(|| panic!("tensor {name} missing"));
        assert_eq!((t.dtype(), t.dims()), (*ty, dims.as_slice()), "{name}");
        let rows: usize = dims[1..].iter().product();
        assert_eq!(t.size(), ty.row_size(dims[0]) * rows, "{name}");
        assert_eq!(t.offset() % f.alignment(), 0, "{name}");
        let data = f.tensor_data(t);
        assert_eq!(data.len(), t.size());
        if *ty == DType::F32 {
            // Norm weights: finite and not all zero (catches a wrong data offset).
            assert!(f32s(data).all(f32::is_finite), "{name}");
            assert!(f32s(data).any(|x| x != 0.0), "{name}");
        }
    }
    let total: usize = f.tensors().iter().map(|t| t.size()).sum();
    assert!(f.data_offset() + total <= f.as_bytes().len());
    assert_eq!(f.data_offset() % f.alignment(), 0);
}

fn model_path() -> Option<PathBuf> {
    let path = strata::testkit::default_model_path();
    path.exists().then_some(path)
}

#[test]
fn gguf_reads_smollm2_model_when_present() {
    let Some(path) = model_path() else {
        println!(
            "SKIPPED gguf_reads_smollm2_model_when_present: no model at $STRATA_MODEL or \
             ~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf (gguf_reads_writer_made_llama_file \
             covers the same checks)"
        );
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    assert!(f.bytes().is_mmap());
    check_llama(
        &f,
        &Expect {
            n_layers: 30,
            n_embd: 576,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            n_vocab: 49152,
            matrix_type: DType::Q4_1,
            embd_type: DType::Q8_0,
        },
    );
    let m = f.metadata();
    assert_eq!(m.get_u32("llama.context_length").unwrap(), 8192);
    assert_eq!(m.get_u32("llama.vocab_size").unwrap(), 49152);
    assert_eq!(m.get_f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert_eq!(m.get_u32("general.file_type").unwrap(), 3); // MOSTLY_Q4_1
    assert_eq!(
        m.get_str_array("tokenizer.ggml.tokens").unwrap()[1],
        "<|im_start|>"
    );
    assert_eq!(f.tensors().len(), 272);
    println!(
        "{}: {} tensors, {} metadata keys, data section at {}",
        path.display(),
        f.tensors().len(),
        m.len(),
        f.data_offset()
    );
}

/// Deterministic pseudo-random bytes.
fn noise(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn gguf_reads_writer_made_llama_file() {
    let e = Expect {
        n_layers: 3,
        n_embd: 64,
        n_ff: 96,
        n_head: 4,
        n_head_kv: 2,
        n_vocab: 10,
        matrix_type: DType::Q4_1,
        embd_type: DType::Q8_0,
    };
    let mut w = GgufWriter::new();
    let kv: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("general.name", "synthetic".into()),
        ("llama.block_count", (e.n_layers as u32).into()),
        ("llama.context_length", 256u32.into()),
        ("llama.embedding_length", (e.n_embd as u32).into()),
        ("llama.feed_forward_length", (e.n_ff as u32).into()),
        ("llama.attention.head_count", (e.n_head as u32).into()),
        ("llama.attention.head_count_kv", (e.n_head_kv as u32).into()),
        ("llama.rope.freq_base", 100000.0f32.into()),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5f32.into()),
        (
            "llama.rope.dimension_count",
            ((e.n_embd / e.n_head) as u32).into(),
        ),
        ("tokenizer.ggml.model", "gpt2".into()),
        (
            "tokenizer.ggml.tokens",
            (0..e.n_vocab)
                .map(|i| format!("t{i}"))
                .collect::<Vec<_>>()
                .into(),
        ),
        ("tokenizer.ggml.token_type", vec![1i32; e.n_vocab].into()),
        ("tokenizer.ggml.merges", vec!["t 1", "t1 0"].into()),
        ("tokenizer.ggml.bos_token_id", 1u32.into()),
        ("tokenizer.ggml.eos_token_id", 2u32.into()),
    ];
    for (k, v) in kv {
        w.add_metadata(k, v).unwrap();
    }
    let f32_data = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|i| (1.0 + i as f32 / 8.0).to_le_bytes())
            .collect()
    };
    let embd = noise(e.embd_type.row_size(e.n_embd) * e.n_vocab, 7);
    w.add_tensor(
        "token_embd.weight",
        e.embd_type,
        &[e.n_embd, e.n_vocab],
        embd.clone(),
    )
    .unwrap();
    let n_embd_kv = e.n_embd / e.n_head * e.n_head_kv;
    for l in 0..e.n_layers {
        for (i, (t, matrix)) in LAYER_TENSORS.iter().enumerate() {
            let name = format!("blk.{l}.{t}.weight");
            let dims: &[usize] = match *t {
                "attn_q" | "attn_output" => &[e.n_embd, e.n_embd],
                "attn_k" | "attn_v" => &[e.n_embd, n_embd_kv],
                "ffn_gate" | "ffn_up" => &[e.n_embd, e.n_ff],
                "ffn_down" => &[e.n_ff, e.n_embd],
                _ => &[e.n_embd],
            };
            if *matrix {
                let n = e.matrix_type.row_size(dims[0]) * dims[1];
                w.add_tensor(name, e.matrix_type, dims, noise(n, (l * 9 + i) as u32))
                    .unwrap();
            } else {
                w.add_tensor(name, DType::F32, dims, f32_data(dims[0]))
                    .unwrap();
            }
        }
    }
    w.add_tensor(
        "output_norm.weight",
        DType::F32,
        &[e.n_embd],
        f32_data(e.n_embd),
    )
    .unwrap();

    let dir = std::env::temp_dir().join(format!("strata-gguf-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("synthetic-llama.gguf");
    w.write_to_path(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert!(f.bytes().is_mmap());
    check_llama(&f, &e);
    assert_eq!(f.tensor_data(f.tensor("token_embd.weight").unwrap()), embd);
    // The in-memory path reads the same file identically.
    let g = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(g.metadata(), f.metadata());
    assert_eq!(g.tensors(), f.tensors());
    std::fs::remove_dir_all(&dir).unwrap();
}

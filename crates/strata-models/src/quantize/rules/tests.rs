use super::*;

fn smollm() -> ModelInfo {
    ModelInfo {
        arch: "llama".into(),
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        n_expert: 0,
    }
}

/// SmolLM2-135M's tensors (576 wide, FFN 1536, tied embeddings), in
/// the file's own order (llama.cpp sorts them).
fn smollm_tensors() -> Vec<(String, DType, Vec<usize>)> {
    let mut v = vec![
        (
            "token_embd.weight".to_string(),
            DType::Q8_0,
            vec![576, 49152],
        ),
        ("output_norm.weight".to_string(), DType::F32, vec![576]),
    ];
    for il in 0..30 {
        for (n, d) in [
            ("attn_norm.weight", vec![576]),
            ("attn_q.weight", vec![576, 576]),
            ("attn_k.weight", vec![576, 192]),
            ("attn_v.weight", vec![576, 192]),
            ("attn_output.weight", vec![576, 576]),
            ("ffn_norm.weight", vec![576]),
            ("ffn_gate.weight", vec![576, 1536]),
            ("ffn_up.weight", vec![576, 1536]),
            ("ffn_down.weight", vec![1536, 576]),
        ] {
            let t = if d.len() == 1 {
                DType::F32
            } else {
                DType::Q4_1
            };
            v.push((format!("blk.{il}.{n}"), t, d));
        }
    }
    v
}

fn choose_all(
    model: &ModelInfo,
    opts: TypeOptions,
    tensors: &[(String, DType, Vec<usize>)],
) -> Vec<(String, DType)> {
    let mut sorted: Vec<_> = tensors.iter().collect();
    sorted.sort_by(|a, b| llama_order(&a.0, &b.0));
    let mut c = TypeChooser::new(model, opts, sorted.iter().map(|t| t.0.as_str()));
    sorted
        .iter()
        .map(|(n, t, d)| (n.clone(), c.choose(n, *t, d).unwrap().dtype))
        .collect()
}

fn opts(file_type: FileType) -> TypeOptions {
    TypeOptions {
        file_type,
        pure: false,
        output_tensor_type: None,
        token_embedding_type: None,
    }
}

fn count(v: &[(String, DType)], t: DType) -> usize {
    v.iter().filter(|x| x.1 == t).count()
}

#[test]
fn order_is_llamas_weights_map() {
    let mut v = vec![
        "blk.10.attn_q.weight",
        "token_embd.weight",
        "blk.2.ffn_up.weight",
        "blk.2.attn_k.weight",
        "output_norm.weight",
    ];
    v.sort_by(|a, b| llama_order(a, b));
    assert_eq!(
        v,
        [
            "output_norm.weight",
            "token_embd.weight",
            "blk.2.attn_k.weight",
            "blk.2.ffn_up.weight",
            "blk.10.attn_q.weight"
        ]
    );
    assert_eq!(layer_of("blk.7x"), Some(7));
    assert_eq!(layer_of("blk.x"), None);
    assert_eq!(layer_of("blk.-3.a"), Some(-3));
}

/// The types llama-quantize b11312 gave the shipped SmolLM2 Q4_1 file
/// (its log): 16 q4_K, 166 q5_0, 14 q6_K, 14 q8_0 converted, the Q8_0
/// token embedding kept.
#[test]
fn q4_k_m_on_smollm_matches_llama_quantize() {
    let v = choose_all(&smollm(), opts(FileType::Q4_K_M), &smollm_tensors());
    let get = |n: &str| v.iter().find(|x| x.0 == n).unwrap().1;
    assert_eq!(get("token_embd.weight"), DType::Q8_0);
    assert_eq!(get("output_norm.weight"), DType::F32);
    assert_eq!(count(&v, DType::Q4_K), 16);
    assert_eq!(count(&v, DType::Q5_0), 166);
    assert_eq!(count(&v, DType::Q6_K), 14);
    assert_eq!(count(&v, DType::Q8_0), 14 + 1);
    // use_more_bits(i, 30): i < 3, i >= 26, (i - 3) % 3 == 2
    for il in 0..30 {
        let more = !(3..26).contains(&il) || (il - 3) % 3 == 2;
        let (v_t, d_t) = if more {
            (DType::Q8_0, DType::Q6_K)
        } else {
            (DType::Q5_0, DType::Q4_K)
        };
        assert_eq!(get(&format!("blk.{il}.attn_v.weight")), v_t, "{il}");
        assert_eq!(get(&format!("blk.{il}.ffn_down.weight")), d_t, "{il}");
        assert_eq!(get(&format!("blk.{il}.attn_q.weight")), DType::Q5_0);
    }
}

#[test]
fn q6_k_and_legacy_types_on_smollm() {
    let v = choose_all(&smollm(), opts(FileType::Q6_K), &smollm_tensors());
    assert_eq!(count(&v, DType::Q6_K), 30);
    assert_eq!(count(&v, DType::Q8_0), 180 + 1);
    // Q4_0: the tied embedding gets the output rule (Q6_K), which falls
    // back to Q8_0 at 576 columns
    let v = choose_all(&smollm(), opts(FileType::Q4_0), &smollm_tensors());
    assert_eq!(count(&v, DType::Q4_0), 210);
    assert_eq!(count(&v, DType::Q8_0), 1);
    // F16: every matrix, the embedding too
    let v = choose_all(&smollm(), opts(FileType::F16), &smollm_tensors());
    assert_eq!(count(&v, DType::F16), 211);
    // --pure: no mixture, still the fallback
    let mut o = opts(FileType::Q4_K_M);
    o.pure = true;
    let v = choose_all(&smollm(), o, &smollm_tensors());
    assert_eq!(count(&v, DType::Q4_K), 30);
    assert_eq!(count(&v, DType::Q5_0), 180 + 1);
}

#[test]
fn explicit_embedding_and_output_types() {
    // SmolLM2's token_embd type at Q4_K_M with `set` applied to the options
    let embd_type = |set: &dyn Fn(&mut TypeOptions)| {
        let mut o = opts(FileType::Q4_K_M);
        set(&mut o);
        let v = choose_all(&smollm(), o, &smollm_tensors());
        v.iter().find(|x| x.0 == "token_embd.weight").unwrap().1
    };
    assert_eq!(
        embd_type(&|o| o.token_embedding_type = Some(DType::Q4_0)),
        DType::Q4_0
    );
    // tied embeddings: the output type applies to token_embd
    assert_eq!(
        embd_type(&|o| o.output_tensor_type = Some(DType::F16)),
        DType::F16
    );
    // a type whose blocks do not divide the row is refused
    let mut o = opts(FileType::Q4_K_M);
    o.token_embedding_type = Some(DType::Q6_K);
    let m = smollm();
    let mut c = TypeChooser::new(&m, o, ["token_embd.weight"]);
    let e = c
        .choose("token_embd.weight", DType::Q8_0, &[576, 49152])
        .unwrap_err();
    assert!(e.to_string().contains("token_embd.weight"), "{e}");
}

/// A 4096-wide model (rows divide into 256): the K mixes as llama.cpp
/// documents them.
#[test]
fn k_mixes_on_a_wide_model() {
    let model = ModelInfo {
        arch: "llama".into(),
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        n_expert: 0,
    };
    let mut tensors = vec![
        (
            "token_embd.weight".to_string(),
            DType::F16,
            vec![4096, 32000],
        ),
        ("output.weight".to_string(), DType::F16, vec![4096, 32000]),
    ];
    for il in 0..32 {
        for (n, d) in [
            ("attn_q.weight", vec![4096, 4096]),
            ("attn_v.weight", vec![4096, 1024]),
            ("attn_output.weight", vec![4096, 4096]),
            ("ffn_down.weight", vec![14336, 4096]),
        ] {
            tensors.push((format!("blk.{il}.{n}"), DType::F16, d));
        }
    }
    let get = |v: &[(String, DType)], n: &str| v.iter().find(|x| x.0 == n).unwrap().1;
    let v = choose_all(&model, opts(FileType::Q3_K_M), &tensors);
    assert_eq!(get(&v, "output.weight"), DType::Q6_K);
    assert_eq!(get(&v, "token_embd.weight"), DType::Q3_K);
    assert_eq!(get(&v, "blk.0.attn_v.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.2.attn_v.weight"), DType::Q4_K);
    assert_eq!(get(&v, "blk.1.ffn_down.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.2.ffn_down.weight"), DType::Q4_K);
    assert_eq!(get(&v, "blk.5.attn_output.weight"), DType::Q4_K);
    assert_eq!(get(&v, "blk.5.attn_q.weight"), DType::Q3_K);
    let v = choose_all(&model, opts(FileType::Q2_K), &tensors);
    assert_eq!(get(&v, "blk.5.attn_v.weight"), DType::Q4_K); // n_gqa 4
    assert_eq!(get(&v, "blk.5.ffn_down.weight"), DType::Q3_K);
    assert_eq!(get(&v, "blk.5.attn_output.weight"), DType::Q3_K);
    let v = choose_all(&model, opts(FileType::Q4_K_S), &tensors);
    assert_eq!(get(&v, "blk.3.attn_v.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.4.attn_v.weight"), DType::Q4_K);
    assert_eq!(get(&v, "blk.3.ffn_down.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.4.ffn_down.weight"), DType::Q4_K);
    let v = choose_all(&model, opts(FileType::IQ4_XS), &tensors);
    assert_eq!(get(&v, "blk.9.attn_v.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.3.ffn_down.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.4.ffn_down.weight"), DType::IQ4_XS);
    assert_eq!(get(&v, "output.weight"), DType::Q6_K);
    let v = choose_all(&model, opts(FileType::Q3_K_L), &tensors);
    assert_eq!(get(&v, "blk.9.attn_output.weight"), DType::Q5_K);
    assert_eq!(get(&v, "blk.9.ffn_down.weight"), DType::Q5_K);
    // the 70B llama: Q3_K / Q4_K attn_v become Q5_K
    let big = ModelInfo {
        n_layer: 80,
        ..model.clone()
    };
    let v = choose_all(&big, opts(FileType::Q3_K_S), &tensors);
    assert_eq!(get(&v, "blk.9.attn_v.weight"), DType::Q5_K);
}

#[test]
fn fallbacks_follow_llama_cpp() {
    let f = |t, n| fallback("x", n, t).unwrap().dtype;
    assert_eq!(f(DType::Q4_K, 576), DType::Q5_0);
    assert_eq!(f(DType::Q5_K, 576), DType::Q5_1);
    assert_eq!(f(DType::Q6_K, 576), DType::Q8_0);
    assert_eq!(f(DType::Q2_K, 576), DType::Q4_0);
    assert_eq!(f(DType::Q3_K, 576), DType::Q4_0);
    assert_eq!(f(DType::IQ4_XS, 576), DType::IQ4_NL);
    assert_eq!(f(DType::Q4_K, 100), DType::F16);
    assert_eq!(f(DType::Q8_0, 100), DType::F16);
    assert_eq!(f(DType::Q4_K, 512), DType::Q4_K);
    assert!(fallback("x", 576, DType::Q4_K).unwrap().fallback_from == Some(DType::Q4_K));
}

#[test]
fn file_type_names_and_parsing() {
    assert_eq!(FileType::parse("q4_k_m").unwrap(), FileType::Q4_K_M);
    assert_eq!(FileType::parse("Q4_K").unwrap(), FileType::Q4_K_M);
    assert_eq!(FileType::parse("18").unwrap(), FileType::Q6_K);
    let e = FileType::parse("Q4_K_X").unwrap_err().to_string();
    assert!(
        e.contains("Q4_K_X") && e.contains("Q4_K_M") && e.contains("IQ4_XS"),
        "{e}"
    );
    assert_eq!(file_type_name(15), "Q4_K - Medium");
    assert_eq!(file_type_name(15 | 1024), "(guessed) Q4_K - Medium");
    assert_eq!(file_type_name(999), "unknown, may not work");
    for t in FileType::ALL {
        assert_eq!(FileType::from_id(t.id()), Some(t));
        assert_eq!(FileType::parse(t.name()).unwrap(), t);
        assert!(t.default_type().block_size() <= 256);
    }
    assert!(!allows_quantization("blk.0.attn_norm.weight", &[576, 2]));
    assert!(!allows_quantization("blk.0.attn_q.weight", &[576, 1]));
    assert!(allows_quantization("blk.0.attn_q.weight", &[576, 2, 1]));
    assert!(!allows_quantization("blk.0.attn_q.bias", &[576, 2]));
}

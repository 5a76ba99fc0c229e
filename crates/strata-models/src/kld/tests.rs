use super::*;
use std::path::PathBuf;

fn logits(n: usize, seed: u64) -> Vec<f32> {
    // a fixed pseudo-random spread of about 20 nats
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
        })
        .collect()
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
    x.iter().map(|&v| v as f64 - m - s.ln()).collect()
}

fn kl_f64(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("strata-kld-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

#[test]
fn quantized_row_decodes_to_log_softmax_within_one_step() {
    let l = logits(1000, 1);
    let row = BaseRow::quantize(&l);
    let want = log_softmax(&l);
    let BaseRow::Quantized { scale, .. } = row else {
        panic!("quantized row expected")
    };
    for (i, &w) in want.iter().enumerate() {
        if w > want.iter().cloned().fold(f64::MIN, f64::max) - 16.0 {
            let got = row.log_prob(i) as f64;
            assert!((got - w).abs() <= scale as f64 + 1e-5, "{i}: {got} vs {w}");
        }
    }
}

#[test]
fn kld_matches_an_f64_reference_in_both_layouts() {
    let (p, q) = (logits(512, 2), logits(512, 3));
    // mix them so the distributions are close but not equal
    let q: Vec<f32> = p.iter().zip(&q).map(|(a, b)| a + 0.3 * b).collect();
    let want = kl_f64(&p, &q);
    let full = compare(&BaseRow::quantize(&p), &q, 7).unwrap();
    assert!(
        (full.kld - want).abs() < 1e-3 * want.max(1e-3),
        "{} vs {want}",
        full.kld
    );
    let all = compare(&BaseRow::top_k(&p, 7, 512), &q, 7).unwrap();
    assert!(
        (all.kld - want).abs() < 1e-5 * want.max(1.0),
        "{} vs {want}",
        all.kld
    );
    // fewer tokens: a lower bound that grows with k
    let top64 = compare(&BaseRow::top_k(&p, 7, 64), &q, 7).unwrap().kld;
    let top256 = compare(&BaseRow::top_k(&p, 7, 256), &q, 7).unwrap().kld;
    assert!(0.0 < top64 && top64 <= top256 + 1e-9 && top256 <= all.kld + 1e-9);
    assert!((full.nll - all.nll).abs() < 1e-9);
    assert!((full.nll_base - all.nll_base).abs() < 1e-3);
    let same = compare(&BaseRow::top_k(&p, 3, 16), &p, 3).unwrap();
    assert!(same.kld.abs() < 1e-6 && same.same_top && same.p_diff.abs() < 1e-6);
}

#[test]
fn files_round_trip_and_convert() {
    let (n_ctx, n_vocab, n_chunk) = (8usize, 37usize, 2usize);
    let tokens: Vec<u32> = (0..n_ctx * n_chunk)
        .map(|i| (i * 5 % n_vocab) as u32)
        .collect();
    let header = Header {
        format: Format::Llama,
        n_ctx,
        n_vocab,
        n_chunk,
        tokens: tokens.clone(),
    };
    let path = tmp("full");
    let mut w = BaseWriter::create(&path, header.clone()).unwrap();
    let mut rows = Vec::new();
    for c in 0..n_chunk {
        for j in 0..header.scored_per_chunk() {
            let row = BaseRow::quantize(&logits(n_vocab, (c * 100 + j) as u64));
            w.write_row(&row).unwrap();
            rows.push(row);
        }
    }
    assert!(!path.exists(), "the file appears only when finished");
    w.finish().unwrap();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    // llama.cpp's layout: 8 + 12 + tokens + rows of 2 * (38 + 4) bytes
    assert_eq!(len, 20 + 4 * 16 + 2 * 3 * 2 * 42);
    let mut r = BaseReader::open(&path).unwrap();
    assert_eq!(r.header(), &header);
    let mut back = Vec::new();
    while let Some(c) = r.next_chunk().unwrap() {
        back.extend(c);
    }
    assert_eq!(back, rows);

    let small = tmp("topk");
    convert_to_top_k(&path, &small, 5).unwrap();
    let mut r = BaseReader::open(&small).unwrap();
    assert_eq!(r.header().format, Format::TopK(5));
    assert_eq!(r.header().tokens, tokens);
    let c0 = r.next_chunk().unwrap().unwrap();
    let target = tokens[header.first() + 1] as usize;
    assert_eq!(c0[0], rows[0].to_top_k(target, 5));
    let BaseRow::TopK {
        log_probs,
        target_log_prob,
        ..
    } = &c0[0]
    else {
        panic!("top-k row expected")
    };
    assert!(log_probs.windows(2).all(|w| w[0] >= w[1]));
    assert_eq!(*target_log_prob, rows[0].log_prob(target));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&small);
}

#[test]
fn hostile_files_are_refused_before_allocating() {
    let path = tmp("bad");
    let write = |b: &[u8]| std::fs::write(&path, b).unwrap();
    let header = |n_ctx: u32, n_vocab: u32, n_chunk: u32| {
        let mut b = LLAMA_MAGIC.to_vec();
        for v in [n_ctx, n_vocab, n_chunk] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    };
    for (bytes, needle) in [
        (b"nonsense".to_vec(), "does not look like"),
        (b"_logi".to_vec(), "magic"),
        (header(u32::MAX, 10, 1), "n_ctx"),
        (header(8, u32::MAX, 1), "n_vocab"),
        (header(8, 10, 0), "no chunk"),
        // a 2^31-chunk header in a 20-byte file: refused by its length
        (header(8, 10, 1 << 31), "truncated"),
    ] {
        write(&bytes);
        let e = BaseReader::open(&path).err().expect("refused").to_string();
        assert!(e.contains(needle) && e.contains("bad"), "{needle}: {e}");
    }
    // a token outside the vocabulary
    let mut b = header(4, 3, 1);
    b.extend([0u32, 1, 9, 2].iter().flat_map(|t| t.to_le_bytes()));
    b.extend(vec![0u8; 2 * llama_row_len(3)]);
    write(&b);
    let e = BaseReader::open(&path).err().expect("refused").to_string();
    assert!(e.contains("token id 9"), "{e}");
    // a top-k file whose k exceeds the vocabulary
    let mut b = TOPK_MAGIC.to_vec();
    for v in [TOPK_VERSION, 4, 3, 1, 7] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    write(&b);
    let e = BaseReader::open(&path).err().expect("refused").to_string();
    assert!(e.contains("top-k 7"), "{e}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn rows_of_another_vocabulary_are_refused() {
    let row = BaseRow::quantize(&logits(10, 1));
    assert!(compare(&row, &logits(11, 1), 0).is_err());
    assert!(compare(&row, &logits(10, 1), 10).is_err());
}

#[test]
fn summary_has_llama_cpp_labels() {
    let mut s = KldStats::default();
    for i in 0..200 {
        let p = logits(64, i);
        let q: Vec<f32> = p.iter().map(|v| v * 1.01).collect();
        s.add(compare(&BaseRow::quantize(&p), &q, (i % 64) as usize).unwrap());
    }
    let text = s.to_string();
    for label in [
        "Mean PPL(Q)",
        "Mean    KLD:",
        "Median  KLD:",
        "99.0%   KLD:",
        "RMS Δp    :",
        "Same top p:",
    ] {
        assert!(text.contains(label), "{label} in\n{text}");
    }
    assert!(s.mean_kld().value > 0.0 && s.same_top().value > 0.9);
    assert!(s.kld_percentile(0.0) <= s.kld_percentile(0.5));
    assert!(s.kld_percentile(0.5) <= s.kld_percentile(1.0));
}

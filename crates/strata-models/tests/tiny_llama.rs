//! A 2-layer llama made with strata's GGUF writer (random weights, GQA, tied
//! output head in f16), run through the model loader, the graph and the
//! scheduler, compared with a straightforward f64 forward pass written here.
//! Always on: no model file needed.

#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use half::f16;
use strata::backend::Backend;
use strata::gguf::{GgufFile, GgufWriter, Value};
use strata::testkit::TestBackend;
use strata::DType;
use strata_models::model::Override;
use strata_models::{
    Attention, Context, ContextOptions, LoadOptions, Logits, Model, ModelError, PlacementSpec,
};
use tiny_models::{load, offload, QkvRows, Rng};

const N_EMBD: usize = 32;
const N_HEAD: usize = 4;
const N_KV: usize = 2;
const HD: usize = N_EMBD / N_HEAD;
const N_FF: usize = 48;
const N_VOCAB: usize = 40;
const N_LAYER: usize = 2;
const EPS: f64 = 1e-5;
const BASE: f64 = 10000.0;

/// Weights as f64 (after the rounding the file stores).
struct W {
    emb: Vec<f64>, // [vocab][embd]
    out_norm: Vec<f64>,
    layers: Vec<[Vec<f64>; 9]>, // attn_norm q k v o ffn_norm gate up down
}

const NAMES: [(&str, usize, usize); 9] = [
    ("attn_norm", N_EMBD, 1),
    ("attn_q", N_EMBD, N_EMBD),
    ("attn_k", N_EMBD, N_KV * HD),
    ("attn_v", N_EMBD, N_KV * HD),
    ("attn_output", N_EMBD, N_EMBD),
    ("ffn_norm", N_EMBD, 1),
    ("ffn_gate", N_EMBD, N_FF),
    ("ffn_up", N_EMBD, N_FF),
    ("ffn_down", N_FF, N_EMBD),
];

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_model(drop: Option<&str>) -> (Vec<u8>, W) {
    write_model_with(drop, &[])
}

/// The tiny model with metadata `set` (replacing or adding keys).
fn write_model_with(drop: Option<&str>, set: &[(&str, Value)]) -> (Vec<u8>, W) {
    let mut g = GgufWriter::new();
    let mut md: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("llama.block_count", Value::U32(N_LAYER as u32)),
        ("llama.embedding_length", Value::U32(N_EMBD as u32)),
        ("llama.feed_forward_length", Value::U32(N_FF as u32)),
        ("llama.attention.head_count", Value::U32(N_HEAD as u32)),
        ("llama.attention.head_count_kv", Value::U32(N_KV as u32)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(EPS as f32),
        ),
        ("llama.rope.freq_base", Value::F32(BASE as f32)),
        ("llama.rope.dimension_count", Value::U32(HD as u32)),
        ("llama.context_length", Value::U32(64)),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.pre", "default".into()),
    ];
    for (k, v) in set {
        md.retain(|(m, _)| m != k);
        md.push((k, v.clone()));
    }
    for (k, v) in md {
        g.add_metadata(k, v).unwrap();
    }
    let toks: Vec<String> = (0..N_VOCAB)
        .map(|i| format!("{}", (b'a' + (i % 26) as u8) as char).repeat(1 + i / 26))
        .collect();
    strata::testkit::add_normal_tokens(&mut g, toks).unwrap();
    g.add_metadata(
        "tokenizer.ggml.merges",
        Value::Array(Vec::<String>::new().into()),
    )
    .unwrap();
    let mut r = Rng(0x1234_5678_9abc_def1);
    let emb16: Vec<f16> = r
        .vec(N_EMBD * N_VOCAB, 1.0, 0.0)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let emb: Vec<f64> = emb16.iter().map(|x| x.to_f64()).collect();
    g.add_tensor(
        "token_embd.weight",
        DType::F16,
        &[N_EMBD, N_VOCAB],
        emb16
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let out_norm = r.vec(N_EMBD, 0.5, 1.0);
    g.add_tensor(
        "output_norm.weight",
        DType::F32,
        &[N_EMBD],
        f32_bytes(&out_norm),
    )
    .unwrap();
    let mut layers = Vec::new();
    for il in 0..N_LAYER {
        let mut ws: Vec<Vec<f64>> = Vec::new();
        for (name, ne0, ne1) in NAMES {
            let v: Vec<f32> = if ne1 == 1 {
                r.vec(ne0, 0.3, 1.0)
            } else {
                r.vec(ne0 * ne1, 1.0 / (ne0 as f32).sqrt(), 0.0)
            };
            let full = format!("blk.{il}.{name}.weight");
            if drop != Some(full.as_str()) {
                let dims: Vec<usize> = if ne1 == 1 { vec![ne0] } else { vec![ne0, ne1] };
                g.add_tensor(full, DType::F32, &dims, f32_bytes(&v))
                    .unwrap();
            }
            ws.push(v.iter().map(|&x| x as f64).collect());
        }
        layers.push(ws.try_into().unwrap());
    }
    (
        g.to_bytes().unwrap(),
        W {
            emb,
            out_norm: out_norm.iter().map(|&x| x as f64).collect(),
            layers,
        },
    )
}

fn rms(x: &[f64], w: &[f64]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(w).map(|(a, b)| a * s * b).collect()
}

/// y[j] = Σ_i W[j][i] x[i] with W stored as ggml [ne0 = in, ne1 = out].
fn mv(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rope(x: &mut [f64], pos: usize) {
    for h in x.chunks_mut(HD) {
        for i in 0..HD / 2 {
            let theta = pos as f64 * BASE.powf(-2.0 * i as f64 / HD as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = (h[2 * i], h[2 * i + 1]);
            h[2 * i] = a * c - b * s;
            h[2 * i + 1] = a * s + b * c;
        }
    }
}

/// Logits of every position of `tokens`, f64.
fn reference(w: &W, tokens: &[u32]) -> Vec<Vec<f64>> {
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| w.emb[t as usize * N_EMBD..][..N_EMBD].to_vec())
        .collect();
    for l in &w.layers {
        let mut rows = QkvRows::default();
        for (p, x) in xs.iter().enumerate() {
            let h = rms(x, &l[0]);
            let (mut q, mut k, v) = (mv(&l[1], &h), mv(&l[2], &h), mv(&l[3], &h));
            rope(&mut q, p);
            rope(&mut k, p);
            rows.push(q, k, v);
        }
        for (p, x) in xs.iter_mut().enumerate() {
            let att = rows.attention(p, (N_HEAD, N_KV, HD));
            let o = mv(&l[4], &att);
            let ffn_in: Vec<f64> = o.iter().zip(x.iter()).map(|(a, b)| a + b).collect();
            let h = rms(&ffn_in, &l[5]);
            let (g, u) = (mv(&l[6], &h), mv(&l[7], &h));
            let act: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let d = mv(&l[8], &act);
            *x = d.iter().zip(&ffn_in).map(|(a, b)| a + b).collect();
        }
    }
    xs.iter()
        .map(|x| mv(&w.emb, &rms(x, &w.out_norm)))
        .collect()
}

fn ctx(model: &Arc<Model>, attention: Attention, threads: usize) -> Context {
    Context::new(
        model.clone(),
        ContextOptions {
            n_ctx: 16,
            n_batch: 3,
            n_ubatch: 3,
            n_threads: threads,
            attention,
            logits_all: true,
            n_seq_max: 1,
            batch_invariant: false,
        },
    )
    .unwrap()
}

const PROMPT: [u32; 7] = [3, 17, 0, 39, 22, 5, 5];

/// All-position logits of PROMPT (chunks of 3) and two single-token steps.
fn run(model: &Arc<Model>, attention: Attention, threads: usize) -> Vec<Vec<f32>> {
    let mut c = ctx(model, attention, threads);
    let all = c.decode(&PROMPT, Logits::All).unwrap();
    let mut rows: Vec<Vec<f32>> = all.chunks(N_VOCAB).map(<[f32]>::to_vec).collect();
    assert_eq!(rows.len(), PROMPT.len());
    // only rows 4.. (the second chunk's last two and the third chunk's one): the same values
    let mut c2 = ctx(model, attention, threads);
    let from = c2.decode(&PROMPT, Logits::From(4)).unwrap();
    assert_eq!(from, all[4 * N_VOCAB..].to_vec());
    for t in [11, 30] {
        rows.push(c.decode(&[t], Logits::Last).unwrap());
    }
    rows
}

#[test]
fn tiny_llama_matches_f64_reference() {
    let (bytes, w) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    assert!(model.tied_output);
    let mut tokens = PROMPT.to_vec();
    tokens.extend([11, 30]);
    let want = reference(&w, &tokens);
    for attention in [Attention::Flash, Attention::SoftMax] {
        let got = run(&model, attention, 2);
        for (p, (g, r)) in got.iter().zip(&want).enumerate() {
            let err = g
                .iter()
                .zip(r)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            let scale = r.iter().map(|x| x.abs()).fold(0.0, f64::max);
            // f16 K/V (and f16 Q, V·P inside flash attention) bound the error
            assert!(
                err < 1e-2 * scale.max(1.0),
                "{attention:?} pos {p}: max err {err} (scale {scale})"
            );
        }
    }
}

#[test]
fn tiny_llama_same_bits_for_1_2_3_threads_and_offload() {
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    for attention in [Attention::Flash, Attention::SoftMax] {
        let one = run(&model, attention, 1);
        for t in [2, 3] {
            assert_eq!(one, run(&model, attention, t), "{attention:?}, {t} threads");
        }
        // llama.cpp's count: 2 blocks + the output layer; -ngl 1 moves the
        // output alone, 2 adds the last block, 3 (or -1: all) every block
        for (ngl, layers) in [
            (1, vec![1, 1]),
            (2, vec![1, 0]),
            (3, vec![0, 0]),
            (-1, vec![0, 0]),
        ] {
            let fake = TestBackend::device("FAKE0", |_| true, 2).device();
            let opts = offload(vec![fake], ngl, Vec::new());
            let m = load(&bytes, &opts).unwrap();
            assert_eq!(m.layer_map.layers, layers, "-ngl {ngl}");
            assert!(
                m.tied_output && m.layer_map.output == 0,
                "-ngl {ngl}: the output layer (tied head copied) is on the device"
            );
            assert_eq!(one, run(&m, attention, 2), "{attention:?}, -ngl {ngl}");
        }
    }
}

#[test]
fn fit_reports_bytes_per_device_without_loading() {
    let (bytes, _) = write_model(None);
    let dir = std::env::temp_dir().join(format!("strata-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let fake = TestBackend::device("FAKE0", |_| true, 1).device();
    let opts = offload(
        vec![fake],
        2,
        vec![Override::parse("blk\\.1\\.ffn_down=CPU").unwrap()],
    );
    let r = Model::fit(&path, &opts, 16).unwrap();
    assert_eq!(r.devices, vec!["FAKE0".to_string(), "CPU".to_string()]);
    let layer: usize = NAMES.iter().map(|(_, a, b)| a * b * 4).sum();
    let down = N_FF * N_EMBD * 4;
    // -ngl 2 of 2 blocks + output: block 1 (less its ffn_down) and the
    // output layer: its norm and a device copy of the tied f16 head
    let f = GgufFile::open(&path).unwrap();
    let head = f.tensor("token_embd.weight").unwrap().size();
    assert_eq!(r.bytes[0].weights, layer - down + N_EMBD * 4 + head);
    assert_eq!(r.bytes[0].n_tensors, 8 + 2);
    let total: usize = r.bytes.iter().map(|b| b.weights).sum();
    assert_eq!(
        total,
        f.tensors().iter().map(|t| t.size()).sum::<usize>() + head
    );
    let kv_layer = 2 * 16 * 2 * N_KV * HD;
    assert_eq!(
        (r.bytes[0].kv_cache, r.bytes[1].kv_cache),
        (kv_layer, kv_layer)
    );
    assert!(r.to_text().contains("FAKE0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn user_mistakes_are_errors() {
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    let mut c = ctx(&model, Attention::Flash, 1);
    assert!(matches!(
        c.decode(&[N_VOCAB as u32], Logits::Last),
        Err(ModelError::TokenOutOfVocab { .. })
    ));
    assert!(c.decode(&[], Logits::Last).is_err());
    c.decode(&[1; 16], Logits::Last).unwrap();
    let e = c.decode(&[1], Logits::Last).unwrap_err();
    assert!(e.to_string().contains("context full"), "{e}");
    c.clear().unwrap();
    assert_eq!(c.n_past(), 0);
    c.decode(&[1], Logits::Last).unwrap();

    // -ngl without a device: nothing to offload to, every layer on the CPU
    // (llama.cpp's behaviour; the CLI warns)
    let ngl = offload(vec![], 99, Vec::new());
    let m = load(&bytes, &ngl).unwrap();
    assert_eq!(
        (m.layer_map.layers.clone(), m.layer_map.output),
        (vec![0, 0], 0)
    );
    let ot = LoadOptions {
        devices: vec![],
        placement: PlacementSpec {
            overrides: vec![Override::parse("ffn=NPU9").unwrap()],
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(load(&bytes, &ot).unwrap_err().to_string().contains("NPU9"));
    assert!(Override::parse("no-equals").is_err());
    assert!(Override::parse("(=CPU").is_err());

    let (missing, _) = write_model(Some("blk.1.attn_k.weight"));
    let e = load(&missing, &LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("blk.1.attn_k.weight"), "{e}");
}

#[test]
fn session_generation_is_reproducible_with_a_seed() {
    use strata_models::sample::{Sampler, SamplerConfig};
    use strata_models::session::Session;
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    let gen = |seed: u64, temperature: f32| {
        let mut s = Session::from_model(
            model.clone(),
            ContextOptions {
                n_ctx: 32,
                n_batch: 4,
                n_threads: 2,
                ..ContextOptions::default()
            },
        )
        .unwrap();
        let cfg = SamplerConfig {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplerConfig::default()
        };
        let mut g = s.generate(&PROMPT, Sampler::new(cfg).unwrap(), 12).unwrap();
        let mut ids = Vec::new();
        let mut text = String::new();
        while let Some(t) = g.next_token().unwrap() {
            ids.push(t.id);
            text += &t.text;
        }
        assert_eq!(g.stats().n_prompt, PROMPT.len());
        assert_eq!(g.stats().n_gen, ids.len());
        (ids, text)
    };
    let (a, ta) = gen(5, 2.0);
    assert_eq!(
        a.len(),
        12,
        "no EOG in this vocabulary: the budget ends generation"
    );
    assert_eq!((a.clone(), ta.clone()), gen(5, 2.0));
    assert_ne!(a, gen(6, 2.0).0);
    let decoded: String = a
        .iter()
        .map(|&i| model.tokenizer.token_text(i).unwrap().to_string())
        .collect();
    assert_eq!(ta, decoded, "streamed pieces are the tokens' text");
    // greedy = argmax of the context's own logits
    let (g1, _) = gen(1, 0.0);
    let mut c = ctx(&model, Attention::Flash, 2);
    let mut l = c.decode(&PROMPT, Logits::Last).unwrap();
    for &id in &g1[..3] {
        assert_eq!(Some(id), strata_models::sample::argmax(&l));
        l = c.decode(&[id], Logits::Last).unwrap();
    }
    // the tiny model has no chat template: chatml, as llama.cpp falls back
    let s = Session::from_model(model.clone(), ContextOptions::default()).unwrap();
    let p = s
        .chat_prompt(&[strata_models::chat::Message::new("user", "hi")], true)
        .unwrap();
    assert_eq!(p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn reused_decode_graphs_give_the_same_bits_as_rebuilt_ones() {
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    for attention in [Attention::Flash, Attention::SoftMax] {
        // one token at a time: every step has the same (padded) shape, so the
        // graph is built once and reused
        let mut a = ctx(&model, attention, 2);
        let mut b = ctx(&model, attention, 2);
        for (i, &t) in PROMPT.iter().enumerate() {
            let la = a.decode(&[t], Logits::Last).unwrap();
            // re-planning the scheduler for another graph in between forces the
            // reused graph to be allocated again
            b.report().unwrap();
            let lb = b.decode(&[t], Logits::Last).unwrap();
            assert_eq!(la, lb, "{attention:?} step {i}");
        }
        let (ta, tb) = (a.timings(), b.timings());
        assert_eq!(
            (ta.tokens, ta.graphs, ta.built),
            (PROMPT.len(), PROMPT.len(), 1)
        );
        assert_eq!((tb.graphs, tb.built), (PROMPT.len(), 1));
        assert!(ta.kernels > std::time::Duration::ZERO && ta.compute >= ta.kernels);
        // a batch of another shape builds a new graph
        a.decode(&[1, 2], Logits::Last).unwrap();
        assert_eq!(a.timings().built, 2);
        a.reset_timings();
        assert_eq!(a.timings(), strata_models::DecodeTimings::default());
    }
}

#[test]
fn decode_into_gives_decodes_logits_in_the_memory_it_is_given() {
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    let mut a = ctx(&model, Attention::Flash, 2);
    let mut b = ctx(&model, Attention::Flash, 2);
    // every row of a prompt in two micro-batches (3 + 2 tokens); what the
    // vector held before is overwritten, not kept
    let want = a.decode(&PROMPT[..5], Logits::All).unwrap();
    let mut got = vec![7.0; 3];
    b.decode_into(&PROMPT[..5], Logits::All, &mut got).unwrap();
    assert_eq!(got, want);
    // one token at a time: the same bits, in the same memory every time
    let at = got.as_ptr();
    for &t in &PROMPT[5..] {
        let want = a.decode(&[t], Logits::Last).unwrap();
        b.decode_into(&[t], Logits::Last, &mut got).unwrap();
        assert_eq!(got, want);
        assert_eq!(got.as_ptr(), at, "no new allocation");
    }
    // a refused call leaves it empty
    assert!(b.decode_into(&[], Logits::Last, &mut got).is_err());
    assert!(got.is_empty());
}

/// Issue 16 item 7: hyperparameters that disagree with the tensors present
/// are typed errors naming the key, found before anything is sized by them
/// (block_count 2^40 aborted on an 8 TiB layer map; 2^27 used 1.2 GB).
#[test]
fn hyperparameters_are_checked_against_the_tensors() {
    for (key, value, says) in [
        ("llama.block_count", Value::U64(1 << 40), "for 2 blocks"),
        ("llama.block_count", Value::U32(1 << 27), "for 2 blocks"),
        ("llama.block_count", Value::U32(3), "for 2 blocks"),
        (
            "llama.attention.key_length",
            Value::U64(1 << 40),
            "blk.0.attn_q.weight",
        ),
        (
            "llama.attention.value_length",
            Value::U32(1 << 30),
            "blk.0.attn_v.weight",
        ),
        (
            "llama.attention.head_count_kv",
            Value::U32(4),
            "blk.0.attn_k.weight",
        ),
        (
            "llama.feed_forward_length",
            Value::U64(1 << 50),
            "blk.0.ffn_up.weight",
        ),
        (
            "llama.embedding_length",
            Value::U32(64),
            "token_embd.weight",
        ),
    ] {
        let (bytes, _) = write_model_with(None, &[(key, value.clone())]);
        let t0 = std::time::Instant::now();
        let e = load(&bytes, &LoadOptions::default()).unwrap_err();
        let msg = e.to_string();
        let short = key.trim_start_matches("llama.");
        assert!(
            matches!(e, ModelError::Metadata { .. }) && msg.contains(short) && msg.contains(says),
            "{key} = {value:?}: {msg}"
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(2), "{key}");
        // --fit sizes the KV cache from the same numbers: refused the same way
        let dir = std::env::temp_dir().join(format!("strata-hp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        std::fs::write(&path, &bytes).unwrap();
        assert!(Model::fit(&path, &LoadOptions::default(), 32).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
    // and a context whose cache size overflows is an error, not a panic
    let (bytes, _) = write_model(None);
    let dir = std::env::temp_dir().join(format!("strata-hp-ok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let e = Model::fit(&path, &LoadOptions::default(), usize::MAX).unwrap_err();
    assert!(e.to_string().contains("-c"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 16 item 10: an out-of-range special token id and non-finite
/// hyperparameters are typed errors naming the key; an empty prompt says
/// so; a generation stopped by a full context says so.
#[test]
fn broken_metadata_and_limits_are_reported() {
    let (bytes, _) = write_model_with(None, &[("tokenizer.ggml.bos_token_id", Value::U32(99_999))]);
    let e = load(&bytes, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bos_token_id = 99999") && e.contains("40 tokens"),
        "{e}"
    );
    for key in [
        "llama.attention.layer_norm_rms_epsilon",
        "llama.rope.freq_base",
        "llama.rope.scaling.factor",
    ] {
        for v in [f32::NAN, f32::INFINITY, -1.0] {
            let (bytes, _) = write_model_with(None, &[(key, Value::F32(v))]);
            let e = load(&bytes, &LoadOptions::default()).unwrap_err();
            assert!(
                matches!(&e, ModelError::Metadata { key: k, .. } if k == key),
                "{key} = {v}: {e}"
            );
        }
    }

    use strata_models::sample::{Sampler, SamplerConfig};
    use strata_models::session::Session;
    let (bytes, _) = write_model(None);
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    let opts = ContextOptions {
        n_ctx: 8,
        n_batch: 4,
        n_threads: 1,
        ..ContextOptions::default()
    };
    let mut s = Session::from_model(model, opts).unwrap();
    let e = s
        .generate(&[], Sampler::new(SamplerConfig::greedy()).unwrap(), 4)
        .err()
        .unwrap();
    assert!(e.to_string().contains("prompt has no tokens"), "{e}");
    let mut g = s
        .generate(
            &PROMPT[..5],
            Sampler::new(SamplerConfig::greedy()).unwrap(),
            100,
        )
        .unwrap();
    g.set_stop_at_eog(false);
    let mut n = 0;
    while g.next_token().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(
        n, 4,
        "8 cells: 5 prompt tokens, then 3 decoded and 1 sampled"
    );
    assert!(g.stats().context_full);
}

//! The families (llama as Llama 3 has it, qwen2, qwen3, gemma2, gemma3,
//! phi3, the mixture-of-experts qwen3moe and Mixtral-style llama) on tiny
//! random-weight models written by `support/tiny_models.rs`, each checked
//! against an f64 forward pass written here from the families' definitions
//! (not from strata's graph), on a short prompt and on a prompt that takes
//! two batches (the KV cache carries over), then one more decoded token.
//! Always on: no model file needed.

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use strata::backend::Backend;
use strata::gguf::{GgufFile, Value};
use strata::testkit::TestBackend;
use strata_models::{Attention, Context, ContextOptions, LoadOptions, Logits, Model};
use support::one_seq;
use tiny_models::{
    assert_tensor_errors, configs, load, load_err, metadata_key, offload, set_meta, write,
    write_with, Config, Edit, Fam, LayerW, QkvRows, TensorEdit, Weights, N_VOCAB,
};
use TensorEdit::{Added, Missing, Shrunk};

// ---------------------------------------------------------------- reference

fn rms(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * s * b).collect()
}

/// y = W x (+ b), W stored as ggml `[ne0 = in, ne1 = out]`.
fn mv(w: &[f64], x: &[f64], b: Option<&Vec<f64>>) -> Vec<f64> {
    let mut y: Vec<f64> = w
        .chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect();
    if let Some(b) = b {
        y.iter_mut().zip(b).for_each(|(y, b)| *y += b);
    }
    y
}

/// The window of layer `il` when it is a sliding-window layer (Gemma, with
/// llama.cpp's defaults: Gemma 2 a window of 4096 on every other layer,
/// Gemma 3 one only when given, on five layers of six).
fn window(cfg: &Config, il: usize) -> Option<usize> {
    let (n_swa, pattern) = match cfg.fam {
        Fam::Gemma2 => (cfg.n_swa.unwrap_or(4096), 2),
        Fam::Gemma3 => (cfg.n_swa.filter(|&n| n > 0)?, 6),
        _ => return None,
    };
    let n = cfg.swa_pattern.unwrap_or(pattern);
    (n == 0 || il % n < n - 1).then_some(n_swa)
}

/// RoPE of every head of `x` at `pos` in layer `il`: pair i turns by
/// pos · scale · base^(-2i/d) / factor_i; llama pairs adjacent values, the
/// Qwen and Gemma families the two halves of the head (NEOX). Gemma's
/// window layers have their own base (Gemma 3: 10000 and no scaling unless
/// given; Gemma 2: the global one unless given).
fn rope(cfg: &Config, w: &Weights, x: &mut [f64], pos: usize, il: usize) {
    let hd = cfg.head_dim;
    let mut scale = cfg.rope_linear.map_or(1.0, |f| 1.0 / f as f64);
    let mut base = cfg.rope_base as f64;
    if window(cfg, il).is_some() {
        let default = if cfg.fam == Fam::Gemma3 {
            scale = 1.0;
            10000.0
        } else {
            cfg.rope_base
        };
        base = cfg.rope_base_swa.unwrap_or(default) as f64;
    }
    for h in x.chunks_mut(hd) {
        for i in 0..hd / 2 {
            let mut theta = pos as f64 * scale * base.powf(-2.0 * i as f64 / hd as f64);
            if let Some(ff) = &w.rope_freqs {
                theta /= ff[i];
            }
            let (s, c) = theta.sin_cos();
            let (s, c) = (s * w.rope_mscale, c * w.rope_mscale);
            let (j0, j1) = match cfg.fam.neox() {
                false => (2 * i, 2 * i + 1),
                true => (i, i + hd / 2),
            };
            let (a, b) = (h[j0], h[j1]);
            h[j0] = a * c - b * s;
            h[j1] = a * s + b * c;
        }
    }
}

/// Per-head RMS norm (Qwen 3's Q/K norms).
fn head_norm(x: &mut [f64], w: Option<&Vec<f64>>, hd: usize, eps: f64) {
    if let Some(w) = w {
        for h in x.chunks_mut(hd) {
            let y = rms(h, w, eps);
            h.copy_from_slice(&y);
        }
    }
}

/// GELU, tanh form.
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// `x`, RMS-normed with `w` when given.
fn post_norm(x: Vec<f64>, w: Option<&Vec<f64>>, eps: f64) -> Vec<f64> {
    match w {
        Some(w) => rms(&x, w, eps),
        None => x,
    }
}

/// Gemma 2's attention soft-cap (50 unless given).
fn attn_softcap(cfg: &Config) -> Option<f64> {
    (cfg.fam == Fam::Gemma2).then(|| cfg.attn_softcap.unwrap_or(50.0) as f64)
}

/// Gemma's final soft-cap (Gemma 2: 30 unless given; Gemma 3: when given).
fn final_softcap(cfg: &Config) -> Option<f64> {
    match cfg.fam {
        Fam::Gemma2 => Some(cfg.final_softcap.unwrap_or(30.0) as f64),
        Fam::Gemma3 => cfg.final_softcap.map(f64::from),
        _ => None,
    }
}

/// One block (layer `il`) over all positions `xs` (causal attention over them).
fn block(cfg: &Config, w: &Weights, l: &LayerW, il: usize, xs: &mut [Vec<f64>]) {
    let (hd, nh, nkv) = (cfg.head_dim, cfg.n_head, cfg.n_head_kv);
    let eps = cfg.eps as f64;
    let mut rows = QkvRows::default();
    for (p, x) in xs.iter().enumerate() {
        let h = rms(x, &l.attn_norm, eps);
        let mut q = mv(&l.wq, &h, l.bq.as_ref());
        let mut k = mv(&l.wk, &h, l.bk.as_ref());
        let v = mv(&l.wv, &h, l.bv.as_ref());
        head_norm(&mut q, l.q_norm.as_ref(), hd, eps);
        head_norm(&mut k, l.k_norm.as_ref(), hd, eps);
        rope(cfg, w, &mut q, p, il);
        rope(cfg, w, &mut k, p, il);
        rows.push(q, k, v);
    }
    for (p, x) in xs.iter_mut().enumerate() {
        let att = rows.attention_with(p, (nh, nkv, hd), window(cfg, il), attn_softcap(cfg));
        let o = post_norm(mv(&l.wo, &att, None), l.post_attn_norm.as_ref(), eps);
        let ffn_in: Vec<f64> = o.iter().zip(x.iter()).map(|(a, b)| a + b).collect();
        let h = rms(&ffn_in, &l.ffn_norm, eps);
        let d = match &l.router {
            Some(router) => moe_ffn(cfg, l, router, &h),
            None if cfg.fam.is_gemma() => {
                let (g, u) = (mv(&l.gate, &h, None), mv(&l.up, &h, None));
                let act: Vec<f64> = g.iter().zip(&u).map(|(&g, u)| gelu(g) * u).collect();
                mv(&l.down, &act, None)
            }
            None => swiglu_ffn(&l.gate, &l.up, &l.down, &h),
        };
        let d = post_norm(d, l.post_ffn_norm.as_ref(), eps);
        *x = d.iter().zip(&ffn_in).map(|(a, b)| a + b).collect();
    }
}

/// down(silu(gate h) · up h).
fn swiglu_ffn(gate: &[f64], up: &[f64], down: &[f64], h: &[f64]) -> Vec<f64> {
    let (g, u) = (mv(gate, h, None), mv(up, h, None));
    let act: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    mv(down, &act, None)
}

/// A mixture of experts as Mixtral and Qwen 3 MoE define it: softmax of the
/// router's logits, the `n_expert_used` most probable experts, their
/// probabilities renormalised to sum 1 weighting their SwiGLU FFNs' outputs.
fn moe_ffn(cfg: &Config, l: &LayerW, router: &[f64], h: &[f64]) -> Vec<f64> {
    let logits = mv(router, h, None);
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let p: Vec<f64> = logits.iter().map(|z| (z - m).exp()).collect();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
    let chosen = &order[..cfg.n_expert_used];
    let total: f64 = chosen.iter().map(|&i| p[i]).sum();
    let (e, ff) = (cfg.n_embd, cfg.n_ff);
    let mut out = vec![0.0; e];
    for &i in chosen {
        let y = swiglu_ffn(
            &l.gate[i * e * ff..][..e * ff],
            &l.up[i * e * ff..][..e * ff],
            &l.down[i * e * ff..][..e * ff],
            h,
        );
        out.iter_mut()
            .zip(&y)
            .for_each(|(o, y)| *o += p[i] / total * y);
    }
    out
}

/// Logits of every position of `tokens`, f64.
fn reference(cfg: &Config, w: &Weights, tokens: &[u32]) -> Vec<Vec<f64>> {
    let e = cfg.n_embd;
    let scale = if cfg.fam.is_gemma() {
        (e as f64).sqrt()
    } else {
        1.0
    };
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            w.emb[t as usize * e..][..e]
                .iter()
                .map(|v| v * scale)
                .collect()
        })
        .collect();
    for (il, l) in w.layers.iter().enumerate() {
        block(cfg, w, l, il, &mut xs);
    }
    xs.iter()
        .map(|x| {
            let y = mv(
                &w.out,
                &rms(x, &w.out_norm, cfg.eps as f64),
                w.out_b.as_ref(),
            );
            match final_softcap(cfg) {
                Some(c) => y.iter().map(|v| c * (v / c).tanh()).collect(),
                None => y,
            }
        })
        .collect()
}

// ---------------------------------------------------------------- strata

/// 3 tokens: one batch.
const SHORT: [u32; 3] = [72, 105, 33];
/// 13 tokens: two batches of `N_BATCH`.
const LONG: [u32; 13] = [84, 104, 101, 32, 113, 117, 105, 99, 107, 256, 98, 114, 111];
const N_BATCH: usize = 8;
/// The token decoded after each prompt.
const NEXT: u32 = 257;

/// Every prompt position's logits, then the next token's.
fn run(model: &Arc<Model>, attention: Attention, prompt: &[u32]) -> Vec<Vec<f32>> {
    let opts = ContextOptions {
        logits_all: true,
        ..one_seq(32, N_BATCH, attention)
    };
    let mut c = Context::new(model.clone(), opts).unwrap();
    let all = c.decode(prompt, Logits::All).unwrap();
    let mut rows: Vec<Vec<f32>> = all.chunks(N_VOCAB).map(<[f32]>::to_vec).collect();
    assert_eq!(rows.len(), prompt.len());
    rows.push(c.decode(&[NEXT], Logits::Last).unwrap());
    rows
}

/// The largest |Δ| over all rows, relative to max(1, largest |logit|).
fn max_rel_err(got: &[Vec<f32>], want: &[Vec<f64>]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut worst = 0.0f64;
    for (g, r) in got.iter().zip(want) {
        let scale = r.iter().map(|x| x.abs()).fold(1.0, f64::max);
        let err = g
            .iter()
            .zip(r)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        worst = worst.max(err / scale);
    }
    worst
}

/// The Gemma models with a window of 4 positions, so that the test prompts
/// reach past it (the goldens' models have 64, for llama.cpp's long prompt).
fn small_windows() -> Vec<Config> {
    configs()
        .into_iter()
        .filter(|c| c.fam.is_gemma())
        .map(|mut c| {
            c.n_swa = Some(4);
            c
        })
        .collect()
}

/// Every family's models against the f64 reference, both attention paths,
/// one and two batches.
///
/// The reference rounds K and V to f16 as the cache does; what remains is
/// the f16 rounding of activations where ggml rounds them (Q against the
/// f16 K, the attention weights against the f16 V, the V accumulator of
/// one-row flash attention: 2^-11 ≈ 4.9e-4 relative each, carried through
/// 2–3 layers), the f16 rounding of K and V themselves landing on the other
/// side of a tie than the f64 values do, and f32 arithmetic (~1e-6).
/// Measured worst: 1.5e-3 (flash, gemma2), 7.9e-4 (soft_max) of max(1, |logit|);
/// bound 3e-3 for both. Leaving out any family feature moves the logits by
/// more than 2e-2 (next test), so the bound does tell the features apart.
#[test]
fn every_family_matches_its_f64_reference() {
    for cfg in configs().into_iter().chain(small_windows()) {
        let (bytes, w) = write(&cfg);
        let model = load(&bytes, &LoadOptions::default()).unwrap();
        assert_eq!(model.hparams.arch, cfg.fam.arch());
        assert_eq!(model.tied_output, cfg.tied, "{}", cfg.name);
        for prompt in [&SHORT[..], &LONG[..]] {
            let mut tokens = prompt.to_vec();
            tokens.push(NEXT);
            let want = reference(&cfg, &w, &tokens);
            for (attention, bound) in [(Attention::Flash, 3e-3), (Attention::SoftMax, 3e-3)] {
                let got = run(&model, attention, prompt);
                let err = max_rel_err(&got, &want);
                println!(
                    "{} {attention:?} {} tokens: {err:.2e}",
                    cfg.name,
                    prompt.len()
                );
                assert!(
                    err < bound,
                    "{} {attention:?} {} tokens: max relative error {err:e} > {bound:e}",
                    cfg.name,
                    prompt.len()
                );
            }
        }
    }
}

/// The reference is sensitive to what the families differ in: dropping the
/// frequency factors, the biases, the Q/K norms or swapping the RoPE pairing
/// moves the logits far beyond the bounds above (so the test above would
/// catch strata ignoring any of them).
#[test]
fn the_reference_sees_every_family_feature() {
    for cfg in configs().into_iter().chain(small_windows()) {
        let (_, w) = write(&cfg);
        let want = reference(&cfg, &w, &LONG);
        let mut variants: Vec<(&str, Config, Weights)> = Vec::new();
        let mut no_ff = w.clone();
        no_ff.rope_freqs = None;
        variants.push(("no rope_freqs", cfg.clone(), no_ff));
        let mut no_bias = w.clone();
        no_bias.out_b = None;
        for l in &mut no_bias.layers {
            (l.bq, l.bk, l.bv) = (None, None, None);
        }
        variants.push(("no biases", cfg.clone(), no_bias));
        let mut no_norm = w.clone();
        for l in &mut no_norm.layers {
            (l.q_norm, l.k_norm) = (None, None);
        }
        variants.push(("no q/k norms", cfg.clone(), no_norm));
        let mut other_pairing = cfg.clone();
        other_pairing.fam = match cfg.fam {
            Fam::Llama => Fam::Qwen2,
            _ => Fam::Llama,
        };
        variants.push(("other RoPE pairing", other_pairing, w.clone()));
        let mut fewer_experts = cfg.clone();
        fewer_experts.n_expert_used = cfg.n_expert_used.saturating_sub(1).max(1);
        variants.push(("fewer experts used", fewer_experts, w.clone()));
        let mut unscaled = cfg.clone();
        unscaled.rope_linear = None;
        variants.push(("no linear scaling", unscaled, w.clone()));
        let mut no_post = w.clone();
        for l in &mut no_post.layers {
            (l.post_attn_norm, l.post_ffn_norm) = (None, None);
        }
        variants.push(("no post-norms", cfg.clone(), no_post));
        let mut uncapped = cfg.clone();
        uncapped.attn_softcap = Some(1e9);
        variants.push(("no attention soft-cap", uncapped, w.clone()));
        let mut uncapped = cfg.clone();
        uncapped.final_softcap = cfg.final_softcap.map(|_| 1e9);
        variants.push(("no final soft-cap", uncapped, w.clone()));
        let mut unwindowed = cfg.clone();
        unwindowed.n_swa = cfg.n_swa.map(|_| 1 << 20);
        variants.push(("no window", unwindowed, w.clone()));
        let mut same_base = cfg.clone();
        same_base.rope_base_swa = Some(cfg.rope_base);
        variants.push(("global RoPE base in window layers", same_base, w.clone()));
        for (what, c, v) in variants {
            let got = reference(&c, &v, &LONG);
            if got == want {
                continue; // the model does not have this feature
            }
            let as_f32: Vec<Vec<f32>> = got
                .iter()
                .map(|r| r.iter().map(|&x| x as f32).collect())
                .collect();
            let err = max_rel_err(&as_f32, &want);
            assert!(err > 2e-2, "{} {what}: only {err:e}", cfg.name);
        }
    }
}

#[test]
fn the_generator_writes_the_same_bytes_every_time() {
    let all = configs();
    for cfg in &all {
        let (a, _) = write(cfg);
        let (b, _) = write(cfg);
        assert!(a == b, "{}: two writes differ", cfg.name);
    }
    let (a, _) = write(&all[0]);
    let (b, _) = write(&all[1]);
    assert!(a != b);
}

// ---------------------------------------------------------------- placement

/// Layers 1.. of the Llama 3 model on a simulated device: the frequency
/// factors are copied there (so the device's ROPEs do not read a CPU
/// weight), `--fit` counts the copy, and the logits are bit-identical to the
/// CPU's.
#[test]
fn offloaded_llama3_layers_get_their_own_rope_freqs() {
    let cfg = &configs()[0];
    assert!(cfg.rope_freqs);
    let (bytes, _) = write(cfg);
    let cpu_model = load(&bytes, &LoadOptions::default()).unwrap();
    let cpu = run(&cpu_model, Attention::Flash, &LONG);
    let fake = TestBackend::device("FAKE0", |_| true, 2).device();
    // llama.cpp's count: the output layer and blocks 1 and 2
    let opts = offload(vec![fake], 3, Vec::new());
    let m = load(&bytes, &opts).unwrap();
    let names: Vec<String> = m
        .layers
        .iter()
        .map(|l| l.rope_freqs.as_ref().unwrap().name().to_string())
        .collect();
    assert_eq!(names[0], "rope_freqs.weight");
    assert_eq!(names[1], "rope_freqs.weight (copy on FAKE0)");
    assert!(
        m.layers[1].rope_freqs.as_ref().unwrap().id()
            == m.layers[2].rope_freqs.as_ref().unwrap().id()
    );
    assert_eq!(cpu, run(&m, Attention::Flash, &LONG));

    let dir = std::env::temp_dir().join(format!("strata-families-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("llama3.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let fit = Model::fit(&path, &opts, 32).unwrap();
    let file_total: usize = GgufFile::open(&path)
        .unwrap()
        .tensors()
        .iter()
        .map(|t| t.size())
        .sum();
    let fit_total: usize = fit.bytes.iter().map(|b| b.weights).sum();
    assert_eq!(
        fit_total,
        file_total + cfg.head_dim / 2 * 4,
        "one copy of rope_freqs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same model with all its layers on a strata RPC server on a loopback
/// port: ROPE's third source (the frequency factors) goes through the RPC
/// graph, and the logits are bit-identical to the CPU's.
#[test]
fn llama3_rope_freqs_over_rpc_give_identical_logits() {
    let (addr, _server) = strata_rpc::server::spawn_loopback_cpu(2).unwrap();
    let dev: Arc<dyn strata::backend::Device> = strata_rpc::RpcProvider::new()
        .connect(&addr.to_string())
        .unwrap()
        .remove(0);
    let cfg = &configs()[0];
    let (bytes, _) = write(cfg);
    let cpu = run(
        &load(&bytes, &LoadOptions::default()).unwrap(),
        Attention::Flash,
        &LONG,
    );
    let opts = offload(vec![dev], -1, Vec::new());
    let m = load(&bytes, &opts).unwrap();
    assert!(m
        .layers
        .iter()
        .all(|l| l.rope_freqs.as_ref().unwrap().name().contains("copy on")));
    assert_eq!(cpu, run(&m, Attention::Flash, &LONG));
}

// ---------------------------------------------------------------- bad input

/// Unknown architectures, unsupported keys and inconsistent values are typed
/// errors naming the key.
#[test]
fn bad_metadata_names_the_key() {
    let all = configs();
    let (llama, qwen2, qwen3) = (&all[0], &all[2], &all[4]);
    let e = load_err(llama, &mut set_meta("general.architecture", "gemma".into()));
    assert_eq!(metadata_key(&e), "general.architecture");
    for arch in [
        "llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3",
    ] {
        assert!(
            e.to_string().contains(&format!(" {arch},"))
                || e.to_string().contains(&format!(" {arch})")),
            "{arch}: {e}"
        );
    }

    for (cfg, key, v) in [
        (llama, "llama.rope.scaling.type", Value::from("longrope")),
        (
            llama,
            "llama.rope.scaling.yarn_log_multiplier",
            Value::F32(0.1),
        ),
        (qwen2, "qwen2.rope.scaling.yarn_beta_fast", Value::F32(16.0)),
        // experts used without experts (MoE itself: the MoE tests below)
        (llama, "llama.expert_used_count", Value::U32(2)),
        (qwen3, "qwen3.attention.key_length", Value::U32(16)),
        (qwen3, "qwen3.block_count", Value::U32(3)),
        (qwen2, "qwen2.attention.head_count_kv", Value::U32(1)),
        // partial rotary, refused as llama.cpp refuses it for these families
        (llama, "llama.rope.dimension_count", Value::U32(8)),
        (qwen2, "qwen2.rope.dimension_count", Value::U32(8)),
    ] {
        let e = load_err(cfg, &mut set_meta(key, v.clone()));
        assert!(
            metadata_key(&e).contains(key.split_once('.').unwrap().1),
            "{key} = {v:?}: {e}"
        );
    }
    // honoured scaling keys load
    for (key, v) in [
        ("llama.rope.scaling.type", Value::from("yarn")),
        ("llama.rope.scaling.finetuned", Value::Bool(true)),
        ("llama.rope.scaling.original_context_length", Value::U32(64)),
        ("llama.rope.scaling.attn_factor", Value::F32(0.5)),
    ] {
        let (bytes, _) = write_with(&all[1], &mut set_meta(key, v));
        load(&bytes, &LoadOptions::default()).unwrap();
    }
}

/// YaRN's magnitude as llama.cpp's context sets it: mscale(factor) /
/// (1 + 0.1 ln factor) (cancelling the kernel's own factor), times
/// rope.scaling.attn_factor; linear scaling only divides the positions.
#[test]
fn rope_scaling_keys_set_the_rope_parameters() {
    let cfg = &configs()[1];
    let hp = |set: &[(&str, Value)]| {
        let (bytes, _) = write_with(cfg, &mut |p| {
            for (k, v) in set {
                set_meta(k, v.clone())(p);
            }
        });
        load(&bytes, &LoadOptions::default())
            .unwrap()
            .hparams
            .rope_params()
    };
    let p = hp(&[]);
    assert_eq!((p.freq_scale, p.ext_factor, p.attn_factor), (0.5, 0.0, 1.0));
    let p = hp(&[
        ("llama.rope.scaling.type", "yarn".into()),
        ("llama.rope.scaling.factor", Value::F32(4.0)),
        ("llama.rope.scaling.original_context_length", Value::U32(64)),
        ("llama.rope.scaling.attn_factor", Value::F32(0.5)),
    ]);
    assert_eq!((p.freq_scale, p.ext_factor, p.n_ctx_orig), (0.25, 1.0, 64));
    let m = 1.0 + 0.1 * 4f64.ln();
    assert!(
        (p.attn_factor as f64 - m / m * 0.5).abs() < 1e-6,
        "{}",
        p.attn_factor
    );
    let p = hp(&[("llama.rope.scaling.type", "none".into())]);
    assert_eq!(p.freq_scale, 1.0);
    // the older key, without a type: linear
    let p = hp(&[
        ("llama.rope.scaling.type", "linear".into()),
        ("llama.rope.scaling.factor", Value::F32(0.0)),
        ("llama.rope.scale_linear", Value::F32(4.0)),
    ]);
    assert_eq!(p.freq_scale, 1.0, "rope.scaling.factor given (0): it wins");
}

/// Missing, misshapen and foreign tensors are typed errors naming them.
#[test]
fn bad_tensors_name_the_tensor() {
    let all = configs();
    let (llama, qwen2, qwen3) = (&all[0], &all[2], &all[4]);
    let cases = vec![
        (qwen3, Missing("blk.1.attn_k_norm.weight")),
        (qwen2, Shrunk("blk.0.attn_v.bias")),
        (llama, Shrunk("rope_freqs.weight")),
        (qwen2, Added("rope_freqs.weight", vec![8])),
        (llama, Added("blk.0.attn_q_norm.weight", vec![16])),
        (qwen3, Added("output.bias", vec![N_VOCAB])),
    ];
    assert_tensor_errors(cases);
}

// ---------------------------------------------------------------- gemma

fn gemma(name: &str) -> Config {
    configs().into_iter().find(|c| c.name == name).unwrap()
}

/// Gemma's hyperparameters as llama.cpp b11312 loads them: the window
/// layers by pattern (Gemma 2: even layers, unless given; Gemma 3: five of
/// six, here 3 given), their RoPE base and scale, the query scale
/// 1/√head_dim, the soft-caps (Gemma 2's defaults 50 and 30 when the keys
/// are missing; Gemma 3 none unless given), no window for a Gemma 3 file
/// without `sliding_window`.
#[test]
fn gemma_hyperparameters_follow_llamacpp() {
    let hp = |cfg: &Config, edit: &mut Edit| {
        let (bytes, _) = write_with(cfg, edit);
        load(&bytes, &LoadOptions::default())
            .unwrap()
            .hparams
            .clone()
    };
    let g2 = gemma("gemma2-swa-softcap");
    let h = hp(&g2, &mut |_| {});
    let swa = h.swa.as_ref().unwrap();
    assert_eq!(
        (swa.n_swa, swa.layers.clone()),
        (64, vec![true, false, true])
    );
    assert_eq!(h.shaping.attn_softcap, Some(1.5));
    assert_eq!(h.shaping.final_softcap, Some(4.0));
    assert_eq!(h.shaping.q_scale, Some(0.25));
    assert_eq!(h.shaping.embd_scale, Some(8.0));
    let h = hp(&g2, &mut |p| {
        p.metadata
            .retain(|(k, _)| !k.ends_with("softcapping") && k != "gemma2.attention.sliding_window")
    });
    assert_eq!(h.shaping.attn_softcap, Some(50.0));
    assert_eq!(h.shaping.final_softcap, Some(30.0));
    assert_eq!(h.swa.as_ref().unwrap().n_swa, 4096);
    let h = hp(
        &g2,
        &mut set_meta(
            "gemma2.attention.sliding_window_pattern",
            Value::from(vec![false, true, false]),
        ),
    );
    assert_eq!(h.swa.unwrap().layers, vec![false, true, false]);

    let g3 = gemma("gemma3-swa-untied");
    let h = hp(&g3, &mut |_| {});
    assert_eq!(h.swa.as_ref().unwrap().layers, vec![true, true, false]);
    assert_eq!(h.shaping.attn_softcap, None);
    assert_eq!(h.shaping.final_softcap, None);
    assert_eq!(h.shaping.q_scale, Some(1.0 / 24f32.sqrt()));
    let (local, global) = (h.rope_params_for(0), h.rope_params_for(2));
    assert_eq!((local.freq_base, local.freq_scale), (10000.0, 1.0));
    assert_eq!((global.freq_base, global.freq_scale), (1e6, 0.125));
    let h = hp(&g3, &mut |p| {
        p.metadata.retain(|(k, _)| !k.contains("sliding_window"))
    });
    assert!(h.swa.is_none());
    assert_eq!(h.rope_params_for(0).freq_base, 1e6);
}

/// Bad Gemma files: a missing post-norm, Q/K norm or a foreign output head
/// name the tensor; a window of 0 with window layers, a non-positive
/// soft-cap, a per-layer pattern of the wrong length name the key.
#[test]
fn bad_gemma_files_are_typed_errors() {
    let (g2, g3) = (gemma("gemma2-swa-softcap"), gemma("gemma3-swa-untied"));
    assert_tensor_errors(vec![
        (&g2, Missing("blk.1.post_ffw_norm.weight")),
        (&g3, Missing("blk.0.post_attention_norm.weight")),
        (&g3, Missing("blk.2.attn_q_norm.weight")),
        (&g2, Added("output.weight", vec![64, N_VOCAB])),
    ]);
    for (cfg, key, v) in [
        (&g2, "gemma2.attention.sliding_window", Value::U32(0)),
        (&g2, "gemma2.attn_logit_softcapping", Value::F32(0.0)),
        (&g2, "gemma2.final_logit_softcapping", Value::F32(-30.0)),
        (&g3, "gemma3.final_logit_softcapping", Value::F32(f32::NAN)),
        (&g3, "gemma3.rope.freq_base_swa", Value::F32(0.0)),
        (
            &g3,
            "gemma3.attention.sliding_window_pattern",
            Value::from(vec![true, false]),
        ),
        (
            &g3,
            "gemma3.attention.sliding_window_pattern",
            Value::from("6"),
        ),
    ] {
        let e = load_err(cfg, &mut set_meta(key, v.clone()));
        assert_eq!(metadata_key(&e), key, "{key} = {v:?}: {e}");
    }
    // a Gemma 3 window of 0 is llama.cpp's "no window", not an error
    let (bytes, _) = write_with(
        &g3,
        &mut set_meta("gemma3.attention.sliding_window", Value::U32(0)),
    );
    assert!(load(&bytes, &LoadOptions::default())
        .unwrap()
        .hparams
        .swa
        .is_none());
}

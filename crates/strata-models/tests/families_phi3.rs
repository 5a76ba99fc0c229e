//! Phi-3 on the tiny generated models: its own tensors (fused QKV and
//! gate+up, LongRoPE factors) as typed load errors, and LongRoPE's choice of
//! factors by the context length. (The logits themselves are checked against
//! f64 in `families.rs` and against llama.cpp in `families_llamacpp.rs`.)

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use strata::gguf::Value;
use strata_models::{Attention, Context, LoadOptions, Logits};
use support::one_seq;
use tiny_models::{
    assert_tensor_errors, configs, load, load_err, metadata_key, set_meta, write_with, Fam,
    TensorEdit, N_VOCAB,
};
use TensorEdit::{Added, Missing, Shrunk};

/// 13 tokens: two batches of 8.
const LONG: [u32; 13] = [84, 104, 101, 32, 113, 117, 105, 99, 107, 256, 98, 114, 111];
const N_BATCH: usize = 8;

/// Phi-3's own tensors: the fused QKV and gate+up matrices, the LongRoPE
/// factors; missing or misshapen ones, and tensors phi3.cpp does not load
/// (a separate `ffn_gate`, `output.bias`, `rope_freqs`), are typed errors
/// naming the tensor; a fused `ffn_up` of the unfused width names the key.
#[test]
fn bad_phi3_tensors_name_the_tensor() {
    let all = configs();
    let phi3 = all
        .iter()
        .find(|c| c.fam == Fam::Phi3 && c.fused_qkv)
        .unwrap();
    let split = all
        .iter()
        .find(|c| c.fam == Fam::Phi3 && !c.fused_qkv)
        .unwrap();
    let (e, hd, ff) = (phi3.n_embd, phi3.head_dim, phi3.n_ff);
    let cases = vec![
        (phi3, Missing("blk.1.attn_qkv.weight")),
        (phi3, Shrunk("blk.1.attn_qkv.weight")),
        (split, Missing("blk.1.attn_v.weight")),
        (phi3, Shrunk("blk.1.ffn_up.weight")),
        (phi3, Shrunk("rope_factors_long.weight")),
        (split, Shrunk("rope_factors_short.weight")),
        (phi3, Added("blk.0.ffn_gate.weight", vec![e, ff])),
        (phi3, Added("output.bias", vec![N_VOCAB])),
        (phi3, Added("rope_freqs.weight", vec![hd / 2])),
        // both forms in one file: the separate Q is not loaded
        (phi3, Added("blk.0.attn_q.weight", vec![e, e])),
    ];
    assert_tensor_errors(cases);
    // gate+up written unfused (n_ff rows): the FFN width key is named
    let err = load_err(phi3, &mut |p: &mut tiny_models::Parts| {
        for (n, shape, data) in &mut p.tensors {
            if n == "blk.0.ffn_up.weight" {
                data.truncate(data.len() / 2);
                shape[1] /= 2;
            }
        }
    });
    assert_eq!(metadata_key(&err), "phi3.feed_forward_length", "{err}");
    // a missing key is named
    let err = load_err(phi3, &mut |p: &mut tiny_models::Parts| {
        p.metadata.retain(|(k, _)| k != "phi3.attention.head_count")
    });
    assert_eq!(metadata_key(&err), "phi3.attention.head_count", "{err}");
}

/// LongRoPE picks its factors by the context as llama.cpp does (its
/// per-sequence context, rounded up to 256 cells, against
/// `rope.scaling.original_context_length`), and the Phi-3 sliding window
/// is ignored, as llama.cpp b11312 ignores it.
#[test]
fn phi3_longrope_follows_the_context_length() {
    let all = configs();
    let cfg = all
        .iter()
        .find(|c| c.name == "phi3-fused-longrope")
        .unwrap();
    let (bytes, _) = write_with(
        cfg,
        &mut set_meta("phi3.rope.scaling.original_context_length", Value::U32(512)),
    );
    let model = load(&bytes, &LoadOptions::default()).unwrap();
    let hp = &model.hparams;
    assert!(!hp.long_context(1) && !hp.long_context(512));
    assert!(hp.long_context(513), "513 cells count as 768 > 512");
    let rope = hp.rope_params();
    let want = tiny_models::longrope_attn_factor(64);
    assert_eq!(
        rope.attn_factor, want,
        "rope.scaling.attn_factor as written"
    );
    assert_eq!((rope.freq_scale, rope.ext_factor), (1.0, 0.0));
    // the long and the short context give different logits
    let logits = |n_ctx: usize| {
        let mut c = Context::new(model.clone(), one_seq(n_ctx, N_BATCH, Attention::Flash)).unwrap();
        c.decode(&LONG, Logits::Last).unwrap()
    };
    let (short, long) = (logits(32), logits(600));
    assert_eq!(
        short,
        logits(512),
        "contexts up to 512 use the short factors"
    );
    assert!(short != long, "the long factors change the logits");
}

//! Four prompts generated concurrently in one context: each step decodes
//! the next token of every unfinished sequence in one batch (the weights
//! are read once for all four).
//!
//! ```text
//! cargo run --release -p strata-models --example parallel -- [MODEL.gguf]
//! ```
//! (default: `~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf`, which
//! `strata run` fetches).

use std::sync::Arc;

use strata_models::sample::{Sampler, SamplerConfig};
use strata_models::{Batch, Context, ContextOptions, LoadOptions, Model, SeqId};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    let model = Arc::new(Model::load(&path, &LoadOptions::default(), None)?);
    let prompts = [
        "The capital of France is",
        "Rust is a programming language that",
        "The three primary colors are",
        "Once upon a time, in a small village,",
    ];
    let opts = ContextOptions {
        n_seq_max: prompts.len(),
        batch_invariant: true,
        ..ContextOptions::default()
    };
    let mut ctx = Context::new(model.clone(), opts)?;
    let tok = &model.tokenizer;

    // every prompt in one batch, each in its own sequence, logits of its last token
    let mut batch = Batch::new();
    let mut text: Vec<String> = Vec::new();
    for (s, p) in prompts.iter().enumerate() {
        let ids = tok.encode(p, true, true)?;
        batch.add_seq(&ids, 0, s as SeqId, true);
        text.push(p.to_string());
    }
    let mut out = ctx.decode_batch(&batch)?;
    // the batch index of each sequence's logits row
    let mut rows: Vec<usize> = out.indices().to_vec();
    let mut samplers: Vec<Sampler> = (0..prompts.len())
        .map(|_| Sampler::new(SamplerConfig::greedy()))
        .collect::<Result<_, _>>()?;
    let mut done = vec![false; prompts.len()];
    for _ in 0..24 {
        let mut next = Batch::new();
        let mut live = Vec::new();
        for s in 0..prompts.len() {
            if done[s] {
                continue;
            }
            let logits = out.get(rows[s]).ok_or("missing logits")?;
            let id = samplers[s].sample(logits)?;
            samplers[s].accept(id);
            if tok.is_eog(id) {
                done[s] = true;
                continue;
            }
            text[s].push_str(&String::from_utf8_lossy(tok.token_to_piece(id)?));
            let pos = ctx.seq_pos_max(s as SeqId).map_or(0, |p| p + 1);
            next.add(id, pos, &[s as SeqId], true);
            live.push(s);
        }
        if next.is_empty() {
            break;
        }
        out = ctx.decode_batch(&next)?;
        for (i, &s) in live.iter().enumerate() {
            rows[s] = i;
        }
    }
    for (s, t) in text.iter().enumerate() {
        println!("[{s}] {t}\n");
    }
    println!(
        "KV cells used: {} of {}",
        ctx.kv_used(),
        ctx.options().n_ctx
    );
    Ok(())
}

//! `strata perplexity`: perplexity of a text as llama.cpp's `llama-perplexity`
//! computes it: the text is cut into chunks of `-c` tokens, each evaluated
//! from an empty cache (first token replaced by BOS when the model adds one),
//! and only the second half of each chunk is scored.

use strata_models::{Context, Logits};

use crate::common::{CliResult, ModelArgs};

/// Arguments of `strata perplexity`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text file to score.
    #[arg(short = 'f', long)]
    pub file: std::path::PathBuf,
    /// Score at most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
}

/// −log softmax(logits)[target], in f64.
pub fn nll(logits: &[f32], target: usize) -> f64 {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = logits.iter().map(|&v| (v as f64 - m).exp()).sum();
    -(logits[target] as f64 - m - z.ln())
}

/// Runs `strata perplexity`.
pub fn run(mut a: Args) -> CliResult {
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| format!("cannot read {}: {e}", a.file.display()))?;
    if a.model.ctx_size < 4 {
        return Err("perplexity needs -c of at least 4".into());
    }
    a.model.batch_size = a.model.batch_size.min(a.model.ctx_size);
    let model = a.model.load()?;
    let tokens = model.tokenizer.encode(&text, true, false)?;
    let n_ctx = a.model.ctx_size;
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(c) = a.chunks {
        n_chunk = n_chunk.min(c);
    }
    if n_chunk == 0 {
        return Err(format!(
            "the text has {} tokens; perplexity needs at least -c {n_ctx} of them (use a smaller -c)",
            tokens.len()
        )
        .into());
    }
    let mut ctx = Context::new(model.clone(), a.model.context_options(true))?;
    let n_vocab = model.hparams.n_vocab;
    let bos = if model.tokenizer.add_bos() {
        model.tokenizer.bos()
    } else {
        None
    };
    let first = n_ctx / 2;
    let (mut sum, mut sum2, mut count) = (0.0f64, 0.0f64, 0usize);
    eprintln!(
        "perplexity: {} tokens, {n_chunk} chunks of {n_ctx}, scoring positions {first}..{}",
        tokens.len(),
        n_ctx - 1
    );
    let t0 = std::time::Instant::now();
    for i in 0..n_chunk {
        let mut chunk = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        ctx.clear()?;
        let logits = ctx.decode(&chunk, Logits::All)?;
        for j in first..n_ctx - 1 {
            let v = nll(
                &logits[j * n_vocab..(j + 1) * n_vocab],
                tokens[i * n_ctx + j + 1] as usize,
            );
            sum += v;
            sum2 += v * v;
            count += 1;
        }
        print!("[{}]{:.4},", i + 1, (sum / count as f64).exp());
        use std::io::Write;
        std::io::stdout().flush()?;
    }
    let mean = sum / count as f64;
    let var = (sum2 / count as f64 - mean * mean).max(0.0);
    let ppl = mean.exp();
    // llama.cpp's uncertainty: ppl · sqrt(var / (n - 1))
    let err = ppl * (var / (count.max(2) - 1) as f64).sqrt();
    println!("\nFinal estimate: PPL = {ppl:.4} +/- {err:.5}");
    eprintln!(
        "({count} tokens scored in {:.2} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn nll_is_minus_log_softmax() {
        let l = [0.0f32, (3.0f32).ln()]; // p = 1/4, 3/4
        assert!((super::nll(&l, 0) - 4f64.ln()).abs() < 1e-6);
        assert!((super::nll(&l, 1) - (4.0f64 / 3.0).ln()).abs() < 1e-6);
    }
}

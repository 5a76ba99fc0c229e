//! `strata perplexity`: perplexity of a text as llama.cpp's `llama-perplexity`
//! computes it: the text is cut into chunks of `-c` tokens, each evaluated
//! from an empty cache (first token replaced by BOS when the model adds one),
//! and only the second half of each chunk is scored.
//!
//! With `--kl-divergence-base FILE` it also saves the log-probabilities of
//! every scored position (llama.cpp's layout, or strata's compact top-k
//! layout with `--kl-divergence-top-k K`); with `--kl-divergence` it instead
//! reads such a file (written by strata or by `llama-perplexity`), evaluates
//! the same tokens and prints llama.cpp's statistics of how far this model,
//! build or instruction-set level is from the base (see
//! [`strata_models::kld`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use strata_models::kld::{self, BaseReader, BaseRow, BaseWriter, Format, Header, KldStats};
use strata_models::{Context, Logits, Model};

use crate::common::{CliResult, ModelArgs};

/// Arguments of `strata perplexity`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text file to score (not needed with --kl-divergence: the base file holds the tokens).
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Score at most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// File of log-probabilities: written while scoring, or read with --kl-divergence
    /// (llama-perplexity's `--kl-divergence-base` files are read and written alike).
    #[arg(long = "kl-divergence-base", visible_alias = "save-all-logits")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare with the --kl-divergence-base file instead of writing it.
    #[arg(long = "kl-divergence", requires = "kl_divergence_base")]
    pub kl_divergence: bool,
    /// Write the base file in strata's compact layout with the K most likely tokens
    /// per position (about 100x smaller than llama.cpp's; its KLD is a lower bound).
    #[arg(
        long = "kl-divergence-top-k",
        value_name = "K",
        requires = "kl_divergence_base"
    )]
    pub top_k: Option<usize>,
}

/// Arguments of `strata kld-convert`.
#[derive(clap::Args)]
pub struct ConvertArgs {
    /// A base file (llama.cpp's layout or strata's top-k).
    pub input: PathBuf,
    /// The top-k file to write.
    pub output: PathBuf,
    /// Tokens kept per position.
    #[arg(short = 'k', long = "top-k", default_value_t = 64)]
    pub top_k: usize,
}

/// Arguments of `strata kld-compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// The base file (either layout).
    pub base: PathBuf,
    /// The compared file, in llama.cpp's layout (every token), over the same tokens.
    pub other: PathBuf,
}

/// Runs `strata kld-compare`: the statistics of `--kl-divergence` between
/// two saved files, without running a model (e.g. llama.cpp's builds of two
/// instruction-set levels, or a full file against its own top-k rewrite).
pub fn compare_files(a: CompareArgs) -> CliResult {
    let mut base = BaseReader::open(&a.base)?;
    let mut other = BaseReader::open(&a.other)?;
    let (h, o) = (base.header().clone(), other.header().clone());
    if o.format != Format::Llama {
        return Err(format!(
            "{}: the compared file must hold every token (llama.cpp's layout)",
            a.other.display()
        )
        .into());
    }
    if (h.n_ctx, h.n_vocab, h.n_chunk, &h.tokens) != (o.n_ctx, o.n_vocab, o.n_chunk, &o.tokens) {
        return Err(format!(
            "{} and {} were not written over the same tokens and chunking",
            a.base.display(),
            a.other.display()
        )
        .into());
    }
    let mut stats = KldStats::default();
    let mut chunk = 0;
    while let (Some(b), Some(q)) = (base.next_chunk()?, other.next_chunk()?) {
        let toks = h.chunk_tokens(chunk);
        for (j, (br, qr)) in b.iter().zip(&q).enumerate() {
            let lq: Vec<f64> = (0..h.n_vocab).map(|i| qr.log_prob(i) as f64).collect();
            // the first most likely token, as llama.cpp picks it
            let imax = (0..lq.len()).fold(0, |m, i| if lq[i] > lq[m] { i } else { m });
            let target = toks[h.first() + j + 1] as usize;
            stats.add(kld::compare_log_probs(br, &lq, imax, target)?);
        }
        chunk += 1;
        println!("{}", stats.progress_line(chunk));
    }
    println!();
    print!("{stats}");
    Ok(0)
}

/// Runs `strata kld-convert`: rewrites a KL-divergence base file in the top-k layout.
pub fn convert(a: ConvertArgs) -> CliResult {
    if a.top_k == 0 {
        return Err("--top-k must be at least 1".into());
    }
    if same_file(&a.input, &a.output) {
        return Err(format!(
            "kld-convert: input and output are the same file ({}); name another output",
            a.output.display()
        )
        .into());
    }
    kld::convert_to_top_k(&a.input, &a.output, a.top_k)?;
    eprintln!(
        "wrote {} (top {} tokens per position)",
        a.output.display(),
        a.top_k
    );
    Ok(0)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// −log softmax(logits)[target], in f64.
pub fn nll(logits: &[f32], target: usize) -> f64 {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = logits.iter().map(|&v| (v as f64 - m).exp()).sum();
    -(logits[target] as f64 - m - z.ln())
}

/// Evaluates one chunk from an empty cache (first token replaced by BOS
/// when the model adds one) and returns the logits of every position.
fn eval_chunk(ctx: &mut Context, model: &Model, tokens: &[u32]) -> Result<Vec<f32>, String> {
    let mut chunk = tokens.to_vec();
    if model.tokenizer.add_bos() {
        if let Some(b) = model.tokenizer.bos() {
            chunk[0] = b;
        }
    }
    ctx.clear().map_err(|e| e.to_string())?;
    ctx.decode(&chunk, Logits::All).map_err(|e| e.to_string())
}

/// Runs `strata perplexity`.
pub fn run(mut a: Args) -> CliResult {
    if a.top_k == Some(0) {
        return Err("--kl-divergence-top-k must be at least 1".into());
    }
    if a.kl_divergence {
        if a.top_k.is_some() {
            return Err(
                "--kl-divergence-top-k applies when writing a base file, not with --kl-divergence"
                    .into(),
            );
        }
        return compare(a);
    }
    let Some(file) = a.file.clone() else {
        return Err("perplexity needs a text file: -f FILE".into());
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
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
    let n_vocab = model.hparams.n_vocab;
    let mut base = match &a.kl_divergence_base {
        Some(path) => Some(BaseWriter::create(
            path,
            Header {
                format: a.top_k.map_or(Format::Llama, Format::TopK),
                n_ctx,
                n_vocab,
                n_chunk,
                tokens: tokens[..n_chunk * n_ctx].to_vec(),
            },
        )?),
        None => None,
    };
    let mut ctx = a.model.context(model.clone(), true)?;
    let first = n_ctx / 2;
    let (mut sum, mut sum2, mut count) = (0.0f64, 0.0f64, 0usize);
    eprintln!(
        "perplexity: {} tokens, {n_chunk} chunks of {n_ctx}, scoring positions {first}..{}",
        tokens.len(),
        n_ctx - 1
    );
    let t0 = std::time::Instant::now();
    for i in 0..n_chunk {
        let logits = eval_chunk(&mut ctx, &model, &tokens[i * n_ctx..(i + 1) * n_ctx])?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let target = tokens[i * n_ctx + j + 1] as usize;
            let v = nll(row, target);
            sum += v;
            sum2 += v * v;
            count += 1;
            if let Some(w) = base.as_mut() {
                let r = match a.top_k {
                    Some(k) => BaseRow::top_k(row, target, k),
                    None => BaseRow::quantize(row),
                };
                w.write_row(&r)?;
            }
        }
        print!("[{}]{:.4},", i + 1, (sum / count as f64).exp());
        std::io::stdout().flush()?;
    }
    if let Some(w) = base {
        w.finish()?;
    }
    let mean = sum / count as f64;
    let var = (sum2 / count as f64 - mean * mean).max(0.0);
    let ppl = mean.exp();
    // llama.cpp's uncertainty: ppl · sqrt(var / (n - 1))
    let err = ppl * (var / (count.max(2) - 1) as f64).sqrt();
    println!("\nFinal estimate: PPL = {ppl:.4} +/- {err:.5}");
    if let Some(p) = &a.kl_divergence_base {
        eprintln!("saved the log-probabilities to {}", p.display());
    }
    eprintln!(
        "({count} tokens scored in {:.2} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// `--kl-divergence`: evaluates the base file's tokens and compares.
fn compare(mut a: Args) -> CliResult {
    let path = a
        .kl_divergence_base
        .clone()
        .ok_or("--kl-divergence needs --kl-divergence-base FILE")?;
    let mut reader = BaseReader::open(&path)?;
    let h = reader.header().clone();
    if a.file.is_some() {
        eprintln!(
            "perplexity: --kl-divergence evaluates the tokens saved in {}; -f is ignored",
            path.display()
        );
    }
    // the base's chunking decides the context, as in llama.cpp
    a.model.ctx_size = h.n_ctx;
    a.model.batch_size = a.model.batch_size.min(h.n_ctx);
    let model = a.model.load()?;
    let n_vocab = model.hparams.n_vocab;
    if n_vocab != h.n_vocab {
        return Err(format!(
            "{} was written for a vocabulary of {} tokens; this model has {n_vocab}: compare \
             models that share a tokenizer",
            path.display(),
            h.n_vocab
        )
        .into());
    }
    let n_chunk = a.chunks.map_or(h.n_chunk, |c| c.min(h.n_chunk));
    let mut ctx = a.model.context(model.clone(), true)?;
    let first = h.first();
    eprintln!(
        "kl-divergence: {} ({:?}), {n_chunk} chunks of {}, scoring positions {first}..{}",
        path.display(),
        h.format,
        h.n_ctx,
        h.n_ctx - 1
    );
    println!(
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p"
    );
    let mut stats = KldStats::default();
    let t0 = std::time::Instant::now();
    for i in 0..n_chunk {
        let rows = reader
            .next_chunk()?
            .ok_or_else(|| format!("{}: chunk {i} is missing", path.display()))?;
        let toks = h.chunk_tokens(i);
        let logits = eval_chunk(&mut ctx, &model, toks)?;
        for (j, row) in rows.iter().enumerate() {
            let pos = first + j;
            let target = toks[pos + 1] as usize;
            let p = kld::compare(row, &logits[pos * n_vocab..(pos + 1) * n_vocab], target)?;
            stats.add(p);
        }
        println!("{}", stats.progress_line(i + 1));
        std::io::stdout().flush()?;
    }
    println!();
    print!("{stats}");
    eprintln!(
        "({} positions compared in {:.2} s)",
        stats.count(),
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

//! `strata eval`: raw f32 logits of a prompt (the last position, or all).

use std::io::Write;

use strata_models::Logits;

use crate::common::{CliResult, ModelArgs};

/// Arguments of `strata eval`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Where to write the logits (little-endian f32, row-major [rows, n_vocab], no header).
    #[arg(long)]
    pub logits_out: std::path::PathBuf,
    /// Write every position's logits, not only the last one.
    #[arg(long)]
    pub all_positions: bool,
}

/// Runs `strata eval`.
pub fn run(a: Args) -> CliResult {
    // Opened first: a bad path fails before the model runs, naming the path.
    let file = std::fs::File::create(&a.logits_out).map_err(|e| {
        format!(
            "--logits-out {}: cannot create the file ({e}); give a writable file path",
            a.logits_out.display()
        )
    })?;
    let model = a.model.load()?;
    let tokens = model.tokenizer.encode(&a.prompt, true, true)?;
    if tokens.is_empty() {
        return Err(crate::common::EMPTY_PROMPT.into());
    }
    let mut ctx = a.model.context(model.clone(), a.all_positions)?;
    let want = if a.all_positions {
        Logits::All
    } else {
        Logits::Last
    };
    let logits = ctx.decode(&tokens, want)?;
    let write_err = |e: std::io::Error| {
        format!(
            "--logits-out {}: cannot write the logits ({e})",
            a.logits_out.display()
        )
    };
    let mut f = std::io::BufWriter::new(file);
    for x in &logits {
        f.write_all(&x.to_le_bytes()).map_err(write_err)?;
    }
    f.flush().map_err(write_err)?;
    let n_vocab = model.hparams.n_vocab;
    let last = &logits[logits.len() - n_vocab..];
    let best = strata_models::sample::argmax(last).unwrap_or(0);
    println!(
        "tokens {:?}\nwrote {} x {n_vocab} logits to {}; last position argmax {best} ({:?})",
        tokens,
        logits.len() / n_vocab,
        a.logits_out.display(),
        String::from_utf8_lossy(model.tokenizer.token_to_piece(best)?)
    );
    Ok(0)
}

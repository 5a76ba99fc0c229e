//! `strata chat`: an interactive conversation using the model's chat template.
//! The cache keeps the conversation; each turn only the new tokens are processed.

use std::io::{BufRead, Write};

use strata_models::chat::Message;
use strata_models::session::Session;

use crate::common::{CliResult, ModelArgs};
use crate::run::SampleArgs;

/// Arguments of `strata chat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value = "512", allow_negative_numbers = true,
          value_parser = crate::common::parse_n_predict)]
    pub n_predict: usize,
}

/// Runs `strata chat` (reads user turns from stdin until EOF or `/exit`).
pub fn run(a: Args) -> CliResult {
    let model = a.model.load()?;
    let mut session = Session::from_context(a.model.context(model, false)?);
    let mut messages: Vec<Message> = a
        .system
        .iter()
        .map(|s| Message::new("system", s.clone()))
        .collect();
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let Some(line) = lines.next() else { break };
        let line = line?;
        if line.trim() == "/exit" {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        messages.push(Message::new("user", line));
        let text = session.chat_prompt(&messages, true)?;
        let tokens = session.tokenize(&text)?;
        if tokens.is_empty() {
            return Err("the chat template rendered no tokens".into());
        }
        // reuse the cached prefix; process only what changed
        let keep = cached
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        session.context().truncate(keep)?;
        cached.truncate(keep);
        cached.extend_from_slice(&tokens[keep..]);
        let mut g = session.generate(&tokens[keep..], a.sample.sampler()?, a.n_predict)?;
        let mut answer = String::new();
        let mut out = std::io::stdout().lock();
        let mut generated = Vec::new();
        while let Some(t) = g.next_token()? {
            if !t.is_eog {
                generated.push(t.id);
            }
            out.write_all(t.text.as_bytes())?;
            out.flush()?;
            answer += &t.text;
        }
        writeln!(out)?;
        let st = g.stats();
        drop(g);
        crate::common::notice_if_context_full(&st, a.model.ctx_size);
        // the last generated token was sampled but not decoded into the cache
        let in_cache = session.context().n_past() - cached.len();
        cached.extend_from_slice(&generated[..in_cache.min(generated.len())]);
        eprintln!("[{} tokens, {:.1} tokens/s]", st.n_gen, st.gen_tps());
        messages.push(Message::new("assistant", answer.trim_end().to_string()));
    }
    Ok(0)
}

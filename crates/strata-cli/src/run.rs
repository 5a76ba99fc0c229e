//! `strata run`: generate text from a prompt, streaming tokens, then print
//! prompt and generation speed and the scheduler's split count.

use std::io::Write;

use strata_models::chat::Message;
use strata_models::model::Model;
use strata_models::sample::{Sampler, SamplerConfig};
use strata_models::session::Session;

use crate::chat::TemplateArgs;
use crate::common::{CliResult, ModelArgs};

/// Sampling options.
#[derive(clap::Args, Clone, Debug)]
pub struct SampleArgs {
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// RNG seed (default: from the clock, printed).
    #[arg(long, short = 's')]
    pub seed: Option<u64>,
}

impl SampleArgs {
    /// A sampler for these options.
    pub fn sampler(&self) -> Result<Sampler, strata_models::ModelError> {
        let seed = self.seed.unwrap_or_else(|| {
            let s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            eprintln!("strata: seed {s}");
            s
        });
        Sampler::new(SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed,
        })
    }
}

/// Arguments of `strata run`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Tokens to generate (-1: until the end of the answer or a full context).
    #[arg(short = 'n', long = "n-predict", default_value = "128", allow_negative_numbers = true,
          value_parser = crate::common::parse_n_predict)]
    pub n_predict: usize,
    /// Wrap the prompt as a user message in the model's chat template (or --chat-template's).
    #[arg(long)]
    pub chat: bool,
    #[command(flatten)]
    pub template: TemplateArgs,
    /// Only report where the weights would go and the memory per device (no loading).
    #[arg(long)]
    pub fit: bool,
}

/// Runs `strata run`.
pub fn run(a: Args) -> CliResult {
    if a.fit {
        let path = a.model.model_path()?;
        let r = Model::fit(&path, &a.model.load_options()?, a.model.ctx_size)?;
        print!("{}", r.to_text());
        println!(
            "KV cache: {} cells (-c) shared by up to {} sequences (-np, one unified cache: \
             the cells are the bound, not the sequences)",
            a.model.ctx_size, a.model.n_parallel
        );
        println!(
            "(compute buffers are sized when the context is created: see `strata explain -m`)"
        );
        return Ok(0);
    }
    if a.template.given() && !a.chat {
        return Err("--chat-template and --chat-template-file apply to --chat: add --chat".into());
    }
    let sampler = a.sample.sampler()?; // bad settings fail before loading
    let choice = a.template.choice()?;
    let model = a.model.load()?;
    let template = if a.chat {
        Some(TemplateArgs::template(choice.as_ref(), &model, None)?)
    } else {
        None
    };
    let mut session = Session::from_context(a.model.context(model, false)?);
    let text = match &template {
        Some(t) => t.render(&[Message::new("user", a.prompt.clone())], true)?,
        None => a.prompt.clone(),
    };
    let tokens = session.tokenize(&text)?;
    if tokens.is_empty() {
        return Err(crate::common::EMPTY_PROMPT.into());
    }
    print!("{text}");
    std::io::stdout().flush()?;
    let mut g = session.generate(&tokens, sampler, a.n_predict)?;
    let mut out = std::io::stdout().lock();
    while let Some(t) = g.next_token()? {
        out.write_all(t.text.as_bytes())?;
        out.flush()?;
    }
    writeln!(out)?;
    let st = g.stats();
    drop(g);
    crate::common::notice_if_context_full(&st, a.model.ctx_size);
    eprintln!(
        "\nprompt: {} tokens, {:.2} tokens/s | generation: {} tokens, {:.2} tokens/s | splits: {}",
        st.n_prompt,
        st.prompt_tps(),
        st.n_gen,
        st.gen_tps(),
        session.context().n_splits()
    );
    Ok(0)
}

//! `strata chat`: an interactive conversation using the model's chat template
//! (or `--chat-template NAME|FILE`; chatml, with a warning, for a model that
//! has none). The cache keeps the conversation; each turn only the new tokens
//! are processed. The template is checked before the first prompt; after
//! that an error in one turn (the template failing on it, a decode error) is
//! printed and the conversation goes on without that message.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use strata_models::chat::{Message, Template, TemplateChoice};
use strata_models::model::Model;
use strata_models::session::Session;
use strata_models::ModelError;

use crate::common::{CliResult, ModelArgs};
use crate::run::SampleArgs;

/// The chat template options, shared by `chat` and `run --chat`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TemplateArgs {
    /// Chat template to use instead of the model's: one of llama.cpp's built-in names (chatml,
    /// llama2, llama2-sys, llama3, gemma, phi3, mistral-v1, mistral-v3, mistral-v7, zephyr,
    /// vicuna, deepseek, command-r, ...: an unknown name lists them all) or else the path of a
    /// Jinja template file. A model without a template gets chatml, with a warning.
    #[arg(long = "chat-template", value_name = "NAME|FILE")]
    pub chat_template: Option<String>,
    /// Jinja chat template file to use instead of the model's template.
    #[arg(
        long = "chat-template-file",
        value_name = "FILE",
        conflicts_with = "chat_template"
    )]
    pub chat_template_file: Option<PathBuf>,
}

impl TemplateArgs {
    /// True when either flag is given.
    pub fn given(&self) -> bool {
        self.chat_template.is_some() || self.chat_template_file.is_some()
    }

    /// The chosen template, read before the model is loaded: an unknown
    /// name, an unreadable file or a Jinja syntax error fails here.
    pub fn choice(&self) -> Result<Option<TemplateChoice>, ModelError> {
        TemplateChoice::from_flags(
            self.chat_template.as_deref(),
            self.chat_template_file.as_deref(),
        )
    }

    /// The template for `model`, checked on a test conversation (with the
    /// `system` prompt); prints the chatml fallback warning when the model
    /// has no template.
    pub fn template(
        choice: Option<&TemplateChoice>,
        model: &Model,
        system: Option<&str>,
    ) -> Result<Template, ModelError> {
        let template = Template::for_model(model, choice)?;
        if let Some(notice) = template.notice() {
            eprintln!("strata: {notice}");
        }
        template.check(system)?;
        Ok(template)
    }
}

/// Arguments of `strata chat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
    #[command(flatten)]
    pub template: TemplateArgs,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value = "512", allow_negative_numbers = true,
          value_parser = crate::common::parse_n_predict)]
    pub n_predict: usize,
}

/// Why a turn failed: writing the answer out ends the chat, anything else
/// drops the turn.
enum TurnError {
    /// stdout or stderr failed.
    Io(std::io::Error),
    /// The template, the tokenizer or the model failed on this turn.
    Model(ModelError),
}

impl From<std::io::Error> for TurnError {
    fn from(e: std::io::Error) -> Self {
        TurnError::Io(e)
    }
}

impl From<ModelError> for TurnError {
    fn from(e: ModelError) -> Self {
        TurnError::Model(e)
    }
}

/// The conversation's state across turns.
struct Chat<'a> {
    args: &'a Args,
    session: Session,
    template: Template,
    messages: Vec<Message>,
    /// The tokens in the cache, in order (a prefix of what it holds).
    cached: Vec<u32>,
}

impl Chat<'_> {
    /// Answers the conversation so far (its last message is the user's),
    /// streaming the answer to stdout.
    fn turn(&mut self) -> Result<String, TurnError> {
        let text = self.template.render(&self.messages, true)?;
        let tokens = self.session.tokenize(&text)?;
        if tokens.is_empty() {
            return Err(ModelError::Template {
                name: self.template.name().to_string(),
                msg: "rendered no tokens for this conversation".into(),
            }
            .into());
        }
        // reuse the cached prefix; process only what changed
        let keep = self
            .cached
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        self.session.context().truncate(keep)?;
        self.cached.truncate(keep);
        let sampler = self.args.sample.sampler()?;
        let mut g = self
            .session
            .generate(&tokens[keep..], sampler, self.args.n_predict)?;
        // the prompt is in the cache from here
        self.cached.extend_from_slice(&tokens[keep..]);
        let mut answer = String::new();
        let mut generated = Vec::new();
        let mut out = std::io::stdout().lock();
        loop {
            let t = match g.next_token() {
                Ok(Some(t)) => t,
                Ok(None) => break,
                Err(e) => {
                    writeln!(out)?;
                    return Err(e.into());
                }
            };
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
        crate::common::notice_if_context_full(&st, self.args.model.ctx_size);
        // the last generated token was sampled but not decoded into the cache
        let in_cache = self
            .session
            .context()
            .n_past()
            .saturating_sub(self.cached.len());
        self.cached
            .extend_from_slice(&generated[..in_cache.min(generated.len())]);
        eprintln!("[{} tokens, {:.1} tokens/s]", st.n_gen, st.gen_tps());
        Ok(answer.trim_end().to_string())
    }

    /// After a failed turn: forgets its message and brings the cache back to
    /// the tokens known to be in it.
    fn drop_turn(&mut self) -> Result<(), ModelError> {
        self.messages.pop();
        let n = self.cached.len().min(self.session.context().n_past());
        self.cached.truncate(n);
        self.session.context().truncate(n)
    }
}

/// Runs `strata chat` (reads user turns from stdin until EOF or `/exit`).
pub fn run(a: Args) -> CliResult {
    // bad settings fail before loading (each turn seeds its own sampler)
    SampleArgs {
        seed: Some(0),
        ..a.sample.clone()
    }
    .sampler()?;
    let choice = a.template.choice()?;
    let model = a.model.load()?;
    let template = TemplateArgs::template(choice.as_ref(), &model, a.system.as_deref())?;
    let session = Session::from_context(a.model.context(model, false)?);
    let messages = a
        .system
        .iter()
        .map(|s| Message::new("system", s.clone()))
        .collect();
    let mut chat = Chat {
        args: &a,
        session,
        template,
        messages,
        cached: Vec::new(),
    };
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
        chat.messages.push(Message::new("user", line));
        match chat.turn() {
            Ok(answer) => chat.messages.push(Message::new("assistant", answer)),
            Err(TurnError::Io(e)) => return Err(e.into()),
            Err(TurnError::Model(e)) => {
                eprintln!("error: {e} (message dropped; the conversation goes on)");
                chat.drop_turn()?;
            }
        }
    }
    Ok(0)
}

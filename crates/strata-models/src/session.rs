//! The generation API: load a model, tokenize, process the prompt in
//! batches, then decode token by token, streaming text pieces.
//!
//! ```no_run
//! use strata_models::session::{Session, SessionOptions};
//! use strata_models::sample::{Sampler, SamplerConfig};
//! let mut s = Session::load("model.gguf", &SessionOptions::default(), None)?;
//! let prompt = s.tokenize("The capital of France is")?;
//! let mut g = s.generate(&prompt, Sampler::new(SamplerConfig::greedy())?, 16)?;
//! while let Some(tok) = g.next_token()? {
//!     print!("{}", tok.text);
//! }
//! # Ok::<(), strata_models::ModelError>(())
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chat::{Message, Template};
use crate::context::{Context, ContextOptions, Logits};
use crate::model::{LoadOptions, Model, Progress};
use crate::sample::Sampler;
use crate::Result;

/// Loading and context settings.
#[derive(Clone, Default)]
pub struct SessionOptions {
    /// Devices and placement.
    pub load: LoadOptions,
    /// Context, batch, threads, attention.
    pub context: ContextOptions,
}

/// A model with a context, ready to generate.
pub struct Session {
    ctx: Context,
}

/// One generated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// Token id.
    pub id: u32,
    /// Text completed by this token (UTF-8 sequences split across tokens are
    /// held back until complete, so this may be empty).
    pub text: String,
    /// True for end-of-generation tokens.
    pub is_eog: bool,
}

/// Timings of a generation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenStats {
    /// Prompt tokens processed.
    pub n_prompt: usize,
    /// Time spent on the prompt.
    pub prompt_time: Duration,
    /// Tokens generated.
    pub n_gen: usize,
    /// Time spent generating (sampling and decoding).
    pub gen_time: Duration,
    /// Generation stopped because the context is full (not at an
    /// end-of-generation token or the token budget).
    pub context_full: bool,
}

impl GenStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.n_prompt as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second.
    pub fn gen_tps(&self) -> f64 {
        self.n_gen as f64 / self.gen_time.as_secs_f64().max(1e-9)
    }
}

impl Session {
    /// Loads the model at `path` and creates its context.
    pub fn load(
        path: impl AsRef<Path>,
        opts: &SessionOptions,
        progress: Option<Progress<'_>>,
    ) -> Result<Session> {
        let model = Arc::new(Model::load(path, &opts.load, progress)?);
        Session::from_model(model, opts.context.clone())
    }

    /// A session over an already loaded model.
    pub fn from_model(model: Arc<Model>, opts: ContextOptions) -> Result<Session> {
        Ok(Session::from_context(Context::new(model, opts)?))
    }

    /// A session over an existing context (e.g. one made with
    /// [`Context::with_sched_config`]).
    pub fn from_context(ctx: Context) -> Session {
        Session { ctx }
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        self.ctx.model()
    }

    /// The context.
    pub fn context(&mut self) -> &mut Context {
        &mut self.ctx
    }

    /// Token ids of `text` (special tokens parsed, BOS/EOS as the model asks).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.model().tokenizer.encode(text, true, true)?)
    }

    /// The model's chat template applied to `messages`; a model without
    /// one falls back to chatml, as llama.cpp does
    /// ([`crate::chat::Template::for_model`]).
    pub fn chat_prompt(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        Template::for_model(self.model(), None)?.render(messages, add_generation_prompt)
    }

    /// Processes `prompt` after what is already cached (in `-b` chunks) and
    /// returns a generator of up to `max_tokens` tokens, stopping at an
    /// end-of-generation token.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        mut sampler: Sampler,
        max_tokens: usize,
    ) -> Result<Generator<'_>> {
        let t0 = Instant::now();
        let logits = self.ctx.decode(prompt, Logits::Last)?;
        let prompt_time = t0.elapsed();
        for &t in prompt {
            sampler.accept(t);
        }
        Ok(Generator {
            session: self,
            sampler,
            logits,
            remaining: max_tokens,
            pending: Vec::new(),
            stop_at_eog: true,
            done: false,
            stats: GenStats {
                n_prompt: prompt.len(),
                prompt_time,
                ..GenStats::default()
            },
        })
    }
}

/// Streams generated tokens (see [`Session::generate`]).
pub struct Generator<'a> {
    session: &'a mut Session,
    sampler: Sampler,
    logits: Vec<f32>,
    remaining: usize,
    pending: Vec<u8>,
    stop_at_eog: bool,
    done: bool,
    stats: GenStats,
}

/// Splits off the longest complete UTF-8 prefix of `buf` (invalid bytes are
/// replaced once no continuation can complete them).
fn take_utf8(buf: &mut Vec<u8>, flush: bool) -> String {
    match std::str::from_utf8(buf) {
        Ok(s) => {
            let s = s.to_string();
            buf.clear();
            s
        }
        Err(e) => {
            let valid = e.valid_up_to();
            let incomplete_tail = e.error_len().is_none();
            if incomplete_tail && !flush && buf.len() - valid < 4 {
                let s = String::from_utf8_lossy(&buf[..valid]).into_owned();
                buf.drain(..valid);
                s
            } else {
                let s = String::from_utf8_lossy(buf).into_owned();
                buf.clear();
                s
            }
        }
    }
}

impl Generator<'_> {
    /// Keep going past end-of-generation tokens (as the golden runs do).
    pub fn set_stop_at_eog(&mut self, stop: bool) {
        self.stop_at_eog = stop;
    }

    /// Timings so far.
    pub fn stats(&self) -> GenStats {
        self.stats
    }

    /// Logits the next token will be sampled from.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The next token, or `None` when done (token budget, EOG, or a full context).
    pub fn next_token(&mut self) -> Result<Option<Token>> {
        if self.done || self.remaining == 0 {
            return Ok(None);
        }
        let t0 = Instant::now();
        let id = self.sampler.sample(&self.logits)?;
        self.sampler.accept(id);
        let tok = &self.session.model().tokenizer;
        let is_eog = tok.is_eog(id);
        self.remaining -= 1;
        self.stats.n_gen += 1;
        if is_eog && self.stop_at_eog {
            self.done = true;
            self.stats.gen_time += t0.elapsed();
            return Ok(Some(Token {
                id,
                text: take_utf8(&mut self.pending, true),
                is_eog,
            }));
        }
        self.pending.extend_from_slice(tok.token_to_piece(id)?);
        let ctx = self.session.context();
        if self.remaining > 0 && ctx.n_past() < ctx.options().n_ctx {
            ctx.decode_into(&[id], Logits::Last, &mut self.logits)?;
        } else {
            self.stats.context_full = self.remaining > 0;
            self.done = true;
        }
        self.stats.gen_time += t0.elapsed();
        let text = take_utf8(&mut self.pending, self.done);
        Ok(Some(Token { id, text, is_eog }))
    }
}

#[cfg(test)]
mod tests {
    use super::take_utf8;

    #[test]
    fn utf8_pieces_are_held_until_complete() {
        let mut b = "a€".as_bytes()[..2].to_vec(); // 'a' + first byte of '€'
        assert_eq!(take_utf8(&mut b, false), "a");
        b.extend_from_slice(&"€".as_bytes()[1..]);
        assert_eq!(take_utf8(&mut b, false), "€");
        assert!(b.is_empty());
        let mut bad = vec![0xff, b'x'];
        assert_eq!(take_utf8(&mut bad, false), "\u{fffd}x");
        let mut cut = vec![0xe2, 0x82];
        assert_eq!(take_utf8(&mut cut, true), "\u{fffd}");
    }
}

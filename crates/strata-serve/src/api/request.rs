//! What the endpoints share: the sampling fields of a request, checks
//! against the context, submitting a job and collecting its events.

use std::time::Instant;

use serde::Deserialize;
use strata_models::chat::Message;
use tokio::sync::mpsc;

use super::{ApiError, Ready};
use crate::engine::{Event, FinishReason, Job, Usage};
use crate::grammar::GrammarSpec;
use crate::sampling::{RequestSampler, Sampled, SamplingParams};

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// The sampling fields OpenAI's and llama-server's requests share.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i64>,
    pub ignore_eos: Option<bool>,
}

/// At most this many alternatives per token (OpenAI's `top_logprobs` bound).
pub(crate) const MAX_TOP_LOGPROBS: usize = 20;

impl SamplingFields {
    /// Sampling parameters; `top` is the number of alternatives asked for
    /// (`None`: no log-probabilities).
    pub(crate) fn params(&self, top: Option<usize>) -> Result<SamplingParams, ApiError> {
        let mut p = SamplingParams::default();
        if let Some(t) = self.temperature {
            p.temperature = t;
        }
        if let Some(t) = self.top_p {
            p.top_p = t;
        }
        if let Some(k) = self.top_k {
            // llama-server: 0 or less keeps every token
            p.top_k = usize::try_from(k).unwrap_or(0);
        }
        if let Some(m) = self.min_p {
            p.min_p = m;
        }
        p.seed = match self.seed {
            Some(s) if s >= 0 => s as u64,
            _ => random_seed(),
        };
        if let Some(x) = self.presence_penalty {
            p.presence_penalty = x;
        }
        if let Some(x) = self.frequency_penalty {
            p.frequency_penalty = x;
        }
        if let Some(x) = self.repeat_penalty {
            p.repeat_penalty = x;
        }
        if let Some(n) = self.repeat_last_n {
            p.penalty_last_n =
                usize::try_from(n).map_err(|_| ApiError::bad("repeat_last_n must be 0 or more"))?;
        }
        p.ignore_eos = self.ignore_eos.unwrap_or(false);
        if let Some(n) = top {
            if n > MAX_TOP_LOGPROBS {
                return Err(ApiError::bad(format!(
                    "top_logprobs / logprobs is {n}; at most {MAX_TOP_LOGPROBS} alternatives per \
                     token are returned"
                )));
            }
        }
        p.logprobs = top;
        Ok(p)
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A generation request, ready to check and submit.
pub(crate) struct Gen {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub grammar: Option<GrammarSpec>,
    pub n: i64,
    pub max_tokens: Option<i64>,
    pub stop: Vec<String>,
    pub endpoint: &'static str,
    pub received: Instant,
}

/// Most stop strings per request.
const MAX_STOPS: usize = 16;

/// Checks `g` against the context and submits it.
pub(crate) fn submit(ready: &Ready, g: Gen) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let n_ctx = ready.engine.n_ctx();
    let n_vocab = ready.model.hparams.n_vocab;
    if g.prompt.is_empty() {
        return Err(ApiError::bad(
            "the prompt is empty (no tokens); send some text",
        ));
    }
    if let Some(&t) = g.prompt.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(ApiError::bad(format!(
            "token id {t} is outside the vocabulary ({n_vocab} tokens)"
        )));
    }
    if g.prompt.len() >= n_ctx {
        return Err(ApiError::bad(format!(
            "the prompt has {} tokens, and the context holds {n_ctx} (-c) with room for at \
             least one generated token; shorten the prompt or restart the server with a larger -c",
            g.prompt.len()
        )));
    }
    let room = n_ctx - g.prompt.len();
    let max_tokens = match g.max_tokens {
        None => room,
        Some(m) if m <= 0 => {
            return Err(ApiError::bad(format!(
                "max_tokens is {m}; it must be at least 1"
            )))
        }
        Some(m) => usize::try_from(m).unwrap_or(usize::MAX).min(room),
    };
    let slots = ready.engine.n_slots();
    if g.n < 1 || g.n as u64 > slots as u64 {
        return Err(ApiError::bad(format!(
            "n is {}; it must be between 1 and {slots} (the server's -np slots)",
            g.n
        )));
    }
    if g.stop.len() > MAX_STOPS {
        return Err(ApiError::bad(format!(
            "{} stop strings; at most {MAX_STOPS}",
            g.stop.len()
        )));
    }
    let eog = ready.model.tokenizer.eog_ids();
    let mut samplers = Vec::with_capacity(g.n as usize);
    for c in 0..g.n as u64 {
        let mut p = g.params.clone();
        p.seed = p.seed.wrapping_add(c);
        let constraint = match &g.grammar {
            Some(spec) => Some(
                ready
                    .grammar()?
                    .constraint(spec)
                    .map_err(|e| ApiError::bad(format!("response_format: {e}")))?,
            ),
            None => None,
        };
        samplers.push(
            RequestSampler::new(&p, constraint, eog.clone())
                .map_err(|e| ApiError::bad(e.to_string()))?,
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        prompt: g.prompt,
        samplers,
        max_tokens,
        stop: g.stop,
        events: tx,
        endpoint: g.endpoint,
        received: g.received,
    };
    ready.engine.submit(job).map_err(|e| {
        if matches!(e, crate::engine::SubmitError::QueueFull(_)) {
            // counted here, where the 503 is decided
            tracing::warn!(target: "strata_serve::request", "queue full: 503");
        }
        ApiError::submit(e)
    })?;
    Ok(rx)
}

/// One choice, collected.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    pub text: String,
    pub tokens: Vec<Sampled>,
    pub finish: Option<FinishReason>,
}

/// Waits for every event of a non-streamed request.
pub(crate) async fn collect(
    mut rx: mpsc::UnboundedReceiver<Event>,
    n: usize,
) -> Result<(Vec<Choice>, Usage), ApiError> {
    let mut choices: Vec<Choice> = (0..n).map(|_| Choice::default()).collect();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token {
                choice,
                text,
                sampled,
            } => {
                if let Some(c) = choices.get_mut(choice) {
                    c.text.push_str(&text);
                    c.tokens.push(sampled);
                }
            }
            Event::Done {
                choice,
                reason,
                text,
            } => {
                if let Some(c) = choices.get_mut(choice) {
                    c.text.push_str(&text);
                    c.finish = Some(reason);
                }
            }
            Event::Usage(u) => return Ok((choices, u)),
            Event::Error(e) => return Err(ApiError::server(e)),
        }
    }
    Err(ApiError::server(
        "the engine ended the request without an answer",
    ))
}

/// OpenAI's message content: a string, a list of parts (text only), or null.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part.
#[derive(Debug, Deserialize)]
pub(crate) struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// A chat message as clients send it.
#[derive(Debug, Deserialize)]
pub(crate) struct InMessage {
    pub role: String,
    pub content: Option<Content>,
}

/// Most messages per request.
const MAX_MESSAGES: usize = 4096;

/// The messages for the template; parts other than text are refused.
pub(crate) fn messages(msgs: Vec<InMessage>) -> Result<Vec<Message>, ApiError> {
    if msgs.is_empty() {
        return Err(ApiError::bad(
            "messages is empty; send at least one message",
        ));
    }
    if msgs.len() > MAX_MESSAGES {
        return Err(ApiError::bad(format!(
            "{} messages; at most {MAX_MESSAGES}",
            msgs.len()
        )));
    }
    msgs.into_iter()
        .map(|m| {
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(s)) => s,
                Some(Content::Parts(parts)) => {
                    let mut s = String::new();
                    for p in parts {
                        if p.kind != "text" {
                            return Err(ApiError::bad(format!(
                                "content parts of type {:?} are not supported (text only)",
                                p.kind
                            )));
                        }
                        s.push_str(p.text.as_deref().unwrap_or(""));
                    }
                    s
                }
            };
            Ok(Message::new(m.role, content))
        })
        .collect()
}

/// The templated prompt of `messages`.
pub(crate) fn chat_prompt(ready: &Ready, msgs: &[Message]) -> Result<String, ApiError> {
    ready
        .template
        .render(msgs, true)
        .map_err(|e| ApiError::bad(format!("the chat template failed on these messages: {e}")))
}

/// Token ids of `text` as `strata run` makes them (BOS as the model asks,
/// special tokens parsed).
pub(crate) fn tokenize(ready: &Ready, text: &str) -> Result<Vec<u32>, ApiError> {
    ready
        .model
        .tokenizer
        .encode(text, true, true)
        .map_err(|e| ApiError::bad(format!("tokenizing the prompt failed: {e}")))
}

/// Parses a JSON body into `T`, with a 400 naming what is wrong.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("invalid request body: {e}")))
}

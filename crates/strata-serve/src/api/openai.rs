//! OpenAI's `/v1/chat/completions` and `/v1/completions`, streamed (SSE)
//! and not.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::request::{self, Choice, Gen, InMessage, SamplingFields, Stop};
use super::{stream_body, unix_now, ApiError, AppState, Ready};
use crate::engine::{Event, Usage};
use crate::grammar::{self, GrammarSpec};
use crate::sampling::Sampled;

#[derive(Debug, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    messages: Vec<InMessage>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    n_predict: Option<i64>,
    n: Option<i64>,
    stop: Option<Stop>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<i64>,
    response_format: Option<Value>,
    #[serde(flatten)]
    sampling: SamplingFields,
}

/// The prompt of `/v1/completions`: a string, token ids, or a list of one.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    prompt: Prompt,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<i64>,
    n_predict: Option<i64>,
    n: Option<i64>,
    stop: Option<Stop>,
    logprobs: Option<i64>,
    response_format: Option<Value>,
    #[serde(flatten)]
    sampling: SamplingFields,
}

fn grammar_of(v: &Option<Value>) -> Result<Option<GrammarSpec>, ApiError> {
    match v {
        None => Ok(None),
        Some(v) => grammar::from_response_format(v)
            .map_err(|e| ApiError::bad(format!("response_format: {e}"))),
    }
}

fn top_count(v: Option<i64>, what: &str) -> Result<usize, ApiError> {
    match v {
        None => Ok(0),
        Some(n) => {
            usize::try_from(n).map_err(|_| ApiError::bad(format!("{what} must be 0 or more")))
        }
    }
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": u.cached_tokens },
    })
}

fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{:x}{:04x}",
        unix_now(),
        NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

/// A token's text and bytes for log-probabilities.
fn piece(ready: &Ready, id: u32) -> (String, Vec<u8>) {
    let b = ready
        .model
        .tokenizer
        .token_to_piece(id)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// Chat's `logprobs.content` entry of one token.
fn chat_logprob(ready: &Ready, s: &Sampled) -> Value {
    let (tok, bytes) = piece(ready, s.token);
    let top: Vec<Value> = s
        .top
        .iter()
        .map(|&(id, lp)| {
            let (t, b) = piece(ready, id);
            json!({ "token": t, "logprob": lp, "bytes": b })
        })
        .collect();
    json!({ "token": tok, "logprob": s.logprob.unwrap_or(0.0), "bytes": bytes, "top_logprobs": top })
}

/// Completions' `logprobs` object of `tokens`, offsets from `offset`.
fn completion_logprobs(ready: &Ready, tokens: &[Sampled], mut offset: usize) -> Value {
    let mut toks = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offs = Vec::new();
    for s in tokens {
        let (t, _) = piece(ready, s.token);
        offs.push(offset);
        offset += t.len();
        toks.push(t);
        lps.push(s.logprob.unwrap_or(0.0));
        let mut m = serde_json::Map::new();
        for &(id, lp) in &s.top {
            m.insert(piece(ready, id).0, json!(lp));
        }
        tops.push(Value::Object(m));
    }
    json!({ "tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs })
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let req: ChatRequest = request::parse(&body)?;
    let logprobs = req.logprobs;
    let top = top_count(req.top_logprobs, "top_logprobs")?;
    let params = req.sampling.params(logprobs.then_some(top))?;
    let msgs = request::messages(req.messages)?;
    let grammar = grammar_of(&req.response_format)?;
    let ready = state.get()?;
    let text = request::chat_prompt(ready, &msgs)?;
    let prompt = request::tokenize(ready, &text)?;
    let n = req.n.unwrap_or(1);
    let rx = request::submit(
        ready,
        Gen {
            prompt,
            params,
            grammar,
            n,
            max_tokens: req
                .max_completion_tokens
                .or(req.max_tokens)
                .or(req.n_predict),
            stop: req.stop.map(Stop::into_vec).unwrap_or_default(),
            endpoint: "chat",
            received,
        },
    )?;
    let head = Head::new(&state, "chatcmpl", "chat.completion.chunk");
    if req.stream {
        let usage = include_usage(req.stream_options);
        let first: String = (0..n)
            .map(|i| {
                let c = head.object(json!([{ "index": i,
                    "delta": { "role": "assistant", "content": "" },
                    "logprobs": null, "finish_reason": null }]));
                format!("data: {c}\n\n")
            })
            .collect();
        let s = sse(rx, state.clone(), move |ready, ev| {
            chat_chunks(ready, &ev, &head, usage, logprobs)
        });
        use futures::StreamExt;
        let s = futures::stream::once(async move { first }).chain(s);
        return Ok(stream_body(s, "text/event-stream"));
    }
    whole(rx, n, head.with_object("chat.completion"), |i, c| {
        json!({
            "index": i,
            "message": { "role": "assistant", "content": c.text },
            "logprobs": if logprobs {
                json!({ "content": c.tokens.iter().map(|s| chat_logprob(ready, s)).collect::<Vec<_>>() })
            } else { Value::Null },
            "finish_reason": finish(c),
        })
    })
    .await
}

/// The fields every object of one response carries: its id, the object
/// type, when it was created and the model.
struct Head {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
}

impl Head {
    /// A new response's: an id starting with `prefix`, objects of type
    /// `object`.
    fn new(state: &AppState, prefix: &str, object: &'static str) -> Head {
        Head {
            id: request_id(prefix),
            object,
            created: unix_now(),
            model: state.model_name.clone(),
        }
    }

    /// The same response's objects of another type.
    fn with_object(self, object: &'static str) -> Head {
        Head { object, ..self }
    }

    /// A response object with these `choices`.
    fn object(&self, choices: Value) -> Value {
        json!({ "id": self.id, "object": self.object, "created": self.created,
                "model": self.model, "choices": choices })
    }
}

/// Whether a stream's options ask for the usage chunk.
fn include_usage(o: Option<StreamOptions>) -> bool {
    o.and_then(|o| o.include_usage).unwrap_or(false)
}

/// The answer of a request not streamed: its `n` choices, each as
/// `choice(index, c)` makes it, and the usage.
async fn whole(
    rx: mpsc::UnboundedReceiver<Event>,
    n: i64,
    head: Head,
    choice: impl Fn(usize, &Choice) -> Value,
) -> Result<Response, ApiError> {
    let (choices, usage) = request::collect(rx, n as usize).await?;
    let choices = choices.iter().enumerate().map(|(i, c)| choice(i, c));
    let mut v = head.object(choices.collect());
    v["usage"] = usage_json(&usage);
    Ok(Json(v).into_response())
}

fn finish(c: &Choice) -> &'static str {
    c.finish.map_or("stop", |f| f.as_str())
}

/// The SSE lines of one engine event of a chat stream.
fn chat_chunks(
    ready: &Ready,
    ev: &Event,
    head: &Head,
    include_usage: bool,
    logprobs: bool,
) -> Vec<Value> {
    let chunk = |choices: Value| head.object(choices);
    match ev {
        Event::Token {
            choice,
            text,
            sampled,
        } => {
            let lp = if logprobs {
                json!({ "content": [chat_logprob(ready, sampled)] })
            } else {
                Value::Null
            };
            if text.is_empty() && !logprobs {
                return Vec::new();
            }
            vec![chunk(
                json!([{ "index": choice, "delta": { "content": text },
                                "logprobs": lp, "finish_reason": null }]),
            )]
        }
        Event::Done {
            choice,
            reason,
            text,
        } => {
            let mut v = Vec::new();
            if !text.is_empty() {
                v.push(chunk(
                    json!([{ "index": choice, "delta": { "content": text },
                                      "logprobs": null, "finish_reason": null }]),
                ));
            }
            v.push(chunk(
                json!([{ "index": choice, "delta": {}, "logprobs": null,
                                  "finish_reason": reason.as_str() }]),
            ));
            v
        }
        Event::Usage(_) | Event::Error(_) => last_lines(ev, include_usage, &chunk),
    }
}

/// The SSE lines of a stream's last event: the usage chunk (when asked
/// for, an empty `choices`) or OpenAI's error object.
fn last_lines(ev: &Event, include_usage: bool, chunk: &impl Fn(Value) -> Value) -> Vec<Value> {
    match ev {
        Event::Usage(u) if include_usage => {
            let mut c = chunk(json!([]));
            c["usage"] = usage_json(u);
            vec![c]
        }
        Event::Error(e) => vec![json!({ "error": { "message": e, "type": "server_error",
                                                   "param": null, "code": 500 } })],
        _ => Vec::new(),
    }
}

/// Maps engine events to SSE `data:` lines (none while the model is not
/// ready); ends with `data: [DONE]` after the request's last event (or if
/// the engine drops it).
pub(super) fn sse<F>(
    rx: mpsc::UnboundedReceiver<Event>,
    state: Arc<AppState>,
    f: F,
) -> impl futures::Stream<Item = String> + Send
where
    F: FnMut(&Ready, Event) -> Vec<Value> + Send + 'static,
{
    futures::stream::unfold(Some((rx, state, f)), |st| async move {
        let (mut rx, state, mut f) = st?;
        loop {
            let Some(ev) = rx.recv().await else {
                return Some(("data: [DONE]\n\n".to_string(), None));
            };
            let last = matches!(ev, Event::Usage(_) | Event::Error(_));
            let lines = match state.get() {
                Ok(ready) => f(ready, ev),
                Err(_) => Vec::new(),
            };
            let mut s = String::new();
            for v in lines {
                s.push_str("data: ");
                s.push_str(&v.to_string());
                s.push_str("\n\n");
            }
            if last {
                s.push_str("data: [DONE]\n\n");
                return Some((s, None));
            }
            if !s.is_empty() {
                return Some((s, Some((rx, state, f))));
            }
        }
    })
}

/// `POST /v1/completions`.
pub(super) async fn completions(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let req: CompletionRequest = request::parse(&body)?;
    let logprobs = match req.logprobs {
        None => None,
        Some(n) => Some(top_count(Some(n), "logprobs")?),
    };
    let params = req.sampling.params(logprobs)?;
    let grammar = grammar_of(&req.response_format)?;
    let ready = state.get()?;
    let prompt = match req.prompt {
        Prompt::Text(t) => request::tokenize(ready, &t)?,
        Prompt::Tokens(t) => t,
        Prompt::Texts(mut v) => {
            if v.len() != 1 {
                return Err(ApiError::bad(format!(
                    "prompt is a list of {} strings; send one prompt per request",
                    v.len()
                )));
            }
            request::tokenize(ready, &v.remove(0))?
        }
    };
    let n = req.n.unwrap_or(1);
    let rx = request::submit(
        ready,
        Gen {
            prompt,
            params,
            grammar,
            n,
            max_tokens: req.max_tokens.or(req.n_predict),
            stop: req.stop.map(Stop::into_vec).unwrap_or_default(),
            endpoint: "completions",
            received,
        },
    )?;
    let head = Head::new(&state, "cmpl", "text_completion");
    if req.stream {
        let include_usage = include_usage(req.stream_options);
        let mut offsets = vec![0usize; n as usize];
        let s = sse(rx, state.clone(), move |ready, ev| {
            let chunk = |choices: Value| head.object(choices);
            match ev {
                Event::Token {
                    choice,
                    text,
                    sampled,
                } => {
                    if text.is_empty() && logprobs.is_none() {
                        return Vec::new();
                    }
                    let off = offsets.get(choice).copied().unwrap_or(0);
                    let lp = if logprobs.is_some() {
                        completion_logprobs(ready, std::slice::from_ref(&sampled), off)
                    } else {
                        Value::Null
                    };
                    if let Some(o) = offsets.get_mut(choice) {
                        *o += text.len();
                    }
                    vec![chunk(
                        json!([{ "index": choice, "text": text, "logprobs": lp,
                                        "finish_reason": null }]),
                    )]
                }
                Event::Done {
                    choice,
                    reason,
                    text,
                } => {
                    vec![chunk(
                        json!([{ "index": choice, "text": text, "logprobs": null,
                                        "finish_reason": reason.as_str() }]),
                    )]
                }
                ev @ (Event::Usage(_) | Event::Error(_)) => last_lines(&ev, include_usage, &chunk),
            }
        });
        return Ok(stream_body(s, "text/event-stream"));
    }
    whole(rx, n, head, |i, c| {
        json!({
            "index": i,
            "text": c.text,
            "logprobs": if logprobs.is_some() {
                completion_logprobs(ready, &c.tokens, 0)
            } else { Value::Null },
            "finish_reason": finish(c),
        })
    })
    .await
}

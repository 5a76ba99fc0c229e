//! Ollama's local API: `/api/chat` and `/api/generate` (NDJSON streaming,
//! on by default as in Ollama), `/api/tags` and `/api/version`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use strata_models::chat::Message;
use tokio::sync::mpsc;

use super::request::{self, Gen, InMessage, SamplingFields, Stop};
use super::{stream_body, unix_now, ApiError, AppState};
use crate::engine::{Event, FinishReason, Usage};
use crate::grammar::GrammarSpec;

/// Ollama's `options` (the sampling subset; others are ignored as Ollama
/// ignores unknown ones).
#[derive(Debug, Default, Deserialize)]
struct Options {
    num_predict: Option<i64>,
    stop: Option<Stop>,
    #[serde(flatten)]
    sampling: SamplingFields,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    #[serde(default)]
    messages: Vec<InMessage>,
    stream: Option<bool>,
    format: Option<Value>,
    #[serde(default)]
    options: Options,
}

#[derive(Debug, Deserialize)]
struct GenerateRequest {
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    stream: Option<bool>,
    format: Option<Value>,
    #[serde(default)]
    options: Options,
}

/// `format`: `"json"` or a JSON schema.
fn format_grammar(f: &Option<Value>) -> Result<Option<GrammarSpec>, ApiError> {
    match f {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(GrammarSpec::JsonObject)),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(GrammarSpec::JsonSchema(v.clone()))),
        Some(v) => Err(ApiError::bad(format!(
            "format must be \"json\" or a JSON schema object, not {v}"
        ))),
    }
}

/// RFC 3339 in UTC, as Ollama's `created_at`.
fn rfc3339_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

fn done_fields(v: &mut Value, reason: FinishReason, u: &Usage) {
    let ns = |s: f64| (s * 1e9) as u64;
    v["done"] = json!(true);
    v["done_reason"] = json!(reason.as_str());
    v["total_duration"] = json!(ns(u.total));
    v["load_duration"] = json!(0);
    v["prompt_eval_count"] = json!(u.prompt_tokens);
    v["prompt_eval_duration"] = json!(ns(u.ttft - u.queued));
    v["eval_count"] = json!(u.completion_tokens);
    v["eval_duration"] = json!(ns(u.total - u.ttft));
}

/// The NDJSON body of a streamed Ollama request: `line(text)` builds each
/// object; the last one carries the counts.
fn ndjson(
    rx: mpsc::UnboundedReceiver<Event>,
    line: impl Fn(&str) -> Value + Send + 'static,
) -> Response {
    let s = futures::stream::unfold(Some((rx, line, FinishReason::Stop)), |st| async move {
        let (mut rx, line, mut reason) = st?;
        loop {
            let ev = rx.recv().await?;
            let out = match ev {
                Event::Token { text, .. } if !text.is_empty() => Some(line(&text)),
                Event::Token { .. } => None,
                Event::Done {
                    reason: r, text, ..
                } => {
                    reason = r;
                    (!text.is_empty()).then(|| line(&text))
                }
                Event::Usage(u) => {
                    let mut v = line("");
                    done_fields(&mut v, reason, &u);
                    return Some((format!("{v}\n"), None));
                }
                Event::Error(e) => {
                    return Some((format!("{}\n", json!({ "error": e })), None));
                }
            };
            if let Some(v) = out {
                return Some((format!("{v}\n"), Some((rx, line, reason))));
            }
        }
    });
    stream_body(s, "application/x-ndjson")
}

/// `POST /api/chat`.
pub(super) async fn chat(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let r = async {
        let received = Instant::now();
        let req: ChatRequest = request::parse(&body)?;
        let msgs = request::messages(req.messages)?;
        let ready = state.get()?;
        let text = request::chat_prompt(ready, &msgs)?;
        let rx = submit(ready, &text, req.options, &req.format, "api/chat", received)?;
        let model = state.model_name.clone();
        let line = move |t: &str| {
            json!({ "model": model, "created_at": rfc3339_now(),
                    "message": { "role": "assistant", "content": t }, "done": false })
        };
        respond(rx, line, req.stream.unwrap_or(true)).await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /api/generate`: the prompt goes through the chat template as a
/// user message (with `system` before it), unless `raw`.
pub(super) async fn generate(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let r = async {
        let received = Instant::now();
        let req: GenerateRequest = request::parse(&body)?;
        let ready = state.get()?;
        let text = if req.raw {
            req.prompt
        } else {
            let mut msgs = Vec::new();
            if let Some(s) = req.system {
                msgs.push(Message::new("system", s));
            }
            msgs.push(Message::new("user", req.prompt));
            request::chat_prompt(ready, &msgs)?
        };
        let rx = submit(
            ready,
            &text,
            req.options,
            &req.format,
            "api/generate",
            received,
        )?;
        let model = state.model_name.clone();
        let line = move |t: &str| json!({ "model": model, "created_at": rfc3339_now(), "response": t, "done": false });
        respond(rx, line, req.stream.unwrap_or(true)).await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
}

/// The answer: NDJSON lines while generating (`stream`, Ollama's default),
/// or one object at the end; the last carries the counts.
async fn respond(
    rx: mpsc::UnboundedReceiver<Event>,
    line: impl Fn(&str) -> Value + Send + 'static,
    stream: bool,
) -> Result<Response, ApiError> {
    if stream {
        return Ok(ndjson(rx, line));
    }
    let (choices, usage) = request::collect(rx, 1).await?;
    let c = choices.into_iter().next().unwrap_or_default();
    let mut v = line(&c.text);
    done_fields(&mut v, c.finish.unwrap_or(FinishReason::Stop), &usage);
    Ok(Json(v).into_response())
}

/// Tokenizes the prompt `text` and submits it with the request's options
/// (one choice).
fn submit(
    ready: &super::Ready,
    text: &str,
    o: Options,
    format: &Option<Value>,
    endpoint: &'static str,
    received: Instant,
) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let prompt = request::tokenize(ready, text)?;
    let params = o.sampling.params(None)?;
    // Ollama: num_predict -1 (or absent) generates until the context ends
    let max_tokens = o.num_predict.filter(|&n| n != -1 && n != -2);
    request::submit(
        ready,
        Gen {
            prompt,
            params,
            grammar: format_grammar(format)?,
            n: 1,
            max_tokens,
            stop: o.stop.map(Stop::into_vec).unwrap_or_default(),
            endpoint,
            received,
        },
    )
}

/// `GET /api/tags`: the one model.
pub(super) async fn tags(State(state): State<Arc<AppState>>) -> Response {
    let (size, family, params) = match state.get() {
        Ok(r) => (
            r.model.weight_bytes().iter().sum::<usize>(),
            r.model.hparams.arch.clone(),
            r.model.hparams.n_layer,
        ),
        Err(_) => (0, String::new(), 0),
    };
    Json(json!({ "models": [{
        "name": state.model_name, "model": state.model_name,
        "modified_at": rfc3339_now(), "size": size, "digest": "",
        "details": { "format": "gguf", "family": family, "families": [family],
                     "parameter_size": "", "quantization_level": "", "n_layer": params },
        "created": unix_now(),
    }]}))
    .into_response()
}

/// `GET /api/version`.
pub(super) async fn version() -> Response {
    Json(json!({ "version": env!("CARGO_PKG_VERSION") })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_is_rfc3339() {
        let s = rfc3339_now();
        assert_eq!(s.len(), 30, "{s}");
        assert_eq!(&s[4..5], "-");
        assert_eq!(&s[10..11], "T");
        assert!(s.ends_with('Z'));
        let year: i32 = s[..4].parse().unwrap();
        assert!(year >= 2024, "{s}");
    }
}

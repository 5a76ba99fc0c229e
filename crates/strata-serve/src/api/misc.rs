//! The page, health, models, metrics, and llama-server's tokenizer and
//! template endpoints.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::request::{self, InMessage};
use super::{ApiError, AppState, Ready};

/// The chat page, built into the binary.
const INDEX: &str = include_str!("../web/index.html");

/// `GET /`.
pub(super) async fn index() -> Html<&'static str> {
    Html(INDEX)
}

/// `GET /health`: 200 when serving, 503 while the model loads.
pub(super) async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.get() {
        Ok(_) => Json(json!({ "status": "ok" })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /metrics`: Prometheus' text format.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut r = state.metrics.encode().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

/// `GET /v1/models`.
pub(super) async fn models(State(state): State<Arc<AppState>>) -> Response {
    let meta = state.get().ok().map(|r| {
        json!({
            "n_ctx": r.engine.n_ctx(),
            "n_ctx_train": r.model.hparams.n_ctx_train,
            "n_vocab": r.model.hparams.n_vocab,
            "n_slots": r.engine.n_slots(),
        })
    });
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "strata",
            "meta": meta,
        }]
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

/// A JSON endpoint over the loaded model: the body parsed as an `R`, then
/// `f`'s answer (or the error) as the response.
fn json_endpoint<R: DeserializeOwned>(
    state: &AppState,
    body: &[u8],
    f: impl FnOnce(R, &Ready) -> Result<Value, ApiError>,
) -> Response {
    let r = request::parse(body).and_then(|req| f(req, state.get()?));
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /tokenize` (llama-server's): `{"content"}` → `{"tokens"}`; with
/// `with_pieces`, each token as `{"id", "piece"}`.
pub(super) async fn tokenize(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    json_endpoint(&state, &body, |req: TokenizeRequest, ready| {
        let tok = &ready.model.tokenizer;
        let ids = tok
            .encode(&req.content, req.add_special, req.parse_special)
            .map_err(|e| ApiError::bad(format!("tokenizing failed: {e}")))?;
        if !req.with_pieces {
            return Ok(json!({ "tokens": ids }));
        }
        let pieces: Vec<_> = ids
            .iter()
            .map(|&id| {
                let b = tok.token_to_piece(id).unwrap_or(&[]);
                match std::str::from_utf8(b) {
                    Ok(s) => json!({ "id": id, "piece": s }),
                    Err(_) => json!({ "id": id, "piece": b }),
                }
            })
            .collect();
        Ok(json!({ "tokens": pieces }))
    })
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<i64>,
}

/// `POST /detokenize`: `{"tokens"}` → `{"content"}`.
pub(super) async fn detokenize(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    json_endpoint(&state, &body, |req: DetokenizeRequest, ready| {
        let n_vocab = ready.model.hparams.n_vocab;
        let ids = req
            .tokens
            .iter()
            .map(|&t| {
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < n_vocab)
                    .ok_or_else(|| {
                        ApiError::bad(format!(
                            "token id {t} is outside the vocabulary ({n_vocab} tokens)"
                        ))
                    })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let text = ready
            .model
            .tokenizer
            .decode(&ids, false, true)
            .map_err(|e| ApiError::bad(format!("detokenizing failed: {e}")))?;
        Ok(json!({ "content": text }))
    })
}

#[derive(Debug, Deserialize)]
struct TemplateRequest {
    messages: Vec<InMessage>,
}

/// `POST /apply-template`: `{"messages"}` → `{"prompt"}`, the text a chat
/// request would tokenize.
pub(super) async fn apply_template(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    json_endpoint(&state, &body, |req: TemplateRequest, ready| {
        let msgs = request::messages(req.messages)?;
        Ok(json!({ "prompt": request::chat_prompt(ready, &msgs)? }))
    })
}

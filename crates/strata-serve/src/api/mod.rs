//! The HTTP side: state, routes, errors, the API key, and the accept loop
//! with its connection bound and idle timeout.

mod misc;
mod ollama;
mod openai;
mod request;

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use strata_models::chat::Template;
use strata_models::Model;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;

use crate::engine::{EngineHandle, SubmitError};
use crate::grammar::GrammarTokenizer;
use crate::metrics::Metrics;
use crate::ServeOptions;

/// What the handlers share.
pub struct AppState {
    loaded: OnceLock<Ready>,
    /// The server's metrics.
    pub metrics: Arc<Metrics>,
    api_key: Option<String>,
    model_name: String,
    created: u64,
}

struct Ready {
    model: Arc<Model>,
    template: Template,
    engine: EngineHandle,
    /// Built on the first request with a grammar (it walks the vocabulary).
    grammar: OnceLock<Result<GrammarTokenizer, String>>,
}

impl AppState {
    pub(crate) fn new(opts: &ServeOptions) -> AppState {
        AppState {
            loaded: OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
            api_key: opts.api_key.clone(),
            model_name: opts.model_name.clone(),
            created: unix_now(),
        }
    }

    pub(crate) fn ready(&self, model: Arc<Model>, template: Template, engine: EngineHandle) {
        let _ = self.loaded.set(Ready {
            model,
            template,
            engine,
            grammar: OnceLock::new(),
        });
    }

    fn get(&self) -> Result<&Ready, ApiError> {
        self.loaded.get().ok_or_else(ApiError::loading)
    }
}

impl Ready {
    fn grammar(&self) -> Result<&GrammarTokenizer, ApiError> {
        self.grammar
            .get_or_init(|| GrammarTokenizer::new(&self.model.tokenizer).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ApiError::server(format!("structured output is unavailable: {e}")))
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An error response: OpenAI's error object
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    /// 400: the request is wrong.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            retry_after: None,
        }
    }

    fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            message: "invalid or missing API key: send `Authorization: Bearer KEY` with the key \
                      the server was started with (--api-key)"
                .into(),
            retry_after: None,
        }
    }

    fn loading() -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "unavailable_error",
            message: "the model is loading; retry in a moment".into(),
            retry_after: Some(1),
        }
    }

    fn not_found(what: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            message: format!("no such endpoint: {what}"),
            retry_after: None,
        }
    }

    /// 500: the server failed.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            retry_after: None,
        }
    }

    fn submit(e: SubmitError) -> ApiError {
        match e {
            SubmitError::QueueFull(_) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "unavailable_error",
                message: e.to_string(),
                retry_after: Some(1),
            },
            SubmitError::TooManyChoices { .. } | SubmitError::Invalid(_) => {
                ApiError::bad(e.to_string())
            }
            SubmitError::Stopped(_) => ApiError::server(e.to_string()),
        }
    }

    /// The JSON body.
    fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": null,
                "code": self.status.as_u16(),
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// Paths that need no API key: the page (it asks for the key itself) and
/// the health check.
fn open_path(path: &str) -> bool {
    matches!(path, "/" | "/health" | "/v1/health" | "/index.html")
}

async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        if req.method() != Method::OPTIONS && !open_path(req.uri().path()) {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            let ok: bool = given.as_bytes().ct_eq(key.as_bytes()).into();
            if !ok {
                return ApiError::unauthorized().into_response();
            }
        }
    }
    next.run(req).await
}

async fn fallback(req: Request) -> ApiError {
    ApiError::not_found(&format!("{} {}", req.method(), req.uri().path()))
}

/// The routes.
pub fn router(state: Arc<AppState>, opts: &ServeOptions) -> Router {
    let mut r = Router::new()
        .route("/", get(misc::index))
        .route("/index.html", get(misc::index))
        .route("/health", get(misc::health))
        .route("/v1/health", get(misc::health))
        .route("/metrics", get(misc::metrics))
        .route("/v1/models", get(misc::models))
        .route("/models", get(misc::models))
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/apply-template", post(misc::apply_template))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/completions", post(openai::completions))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/version", get(ollama::version))
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(DefaultBodyLimit::max(opts.body_limit))
        .layer(RequestBodyLimitLayer::new(opts.body_limit));
    if !opts.cors.is_empty() {
        let origins = if opts.cors.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                opts.cors
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok()),
            )
        };
        r = r.layer(
            CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        );
    }
    r.with_state(state)
}

/// Accepts connections until `shutdown`: at most `max_connections` at
/// once (more are closed at once), each closed after `idle_timeout` without
/// a request.
pub(crate) async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    opts: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let app = router(state, opts);
    let slots = Arc::new(Semaphore::new(opts.max_connections));
    let idle = opts.idle_timeout;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => return Ok(()),
        };
        let (stream, _) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // out of descriptors and the like: wait instead of spinning
                tracing::warn!(target: "strata_serve", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(target: "strata_serve", "connection limit reached; closing a new one");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            // a connection that sends nothing is closed after the idle timeout
            // (hyper's header timeout starts only once bytes arrive)
            let mut first = [0u8; 1];
            match tokio::time::timeout(idle, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            b.http1()
                .timer(TokioTimer::new())
                .header_read_timeout(idle)
                .keep_alive(true);
            b.http2().timer(TokioTimer::new()).keep_alive_interval(None);
            let conn = b.serve_connection(TokioIo::new(stream), svc);
            // a connection idle past the timeout (HTTP/2 or between requests) is dropped
            let _ = conn.await;
            drop(permit);
        });
    }
}

/// An SSE or NDJSON body from a stream of lines.
fn stream_body<S>(s: S, content_type: &'static str) -> Response
where
    S: futures::Stream<Item = String> + Send + 'static,
{
    use futures::StreamExt;
    let body = Body::from_stream(s.map(Ok::<_, Infallible>));
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The routes of a server whose model has not loaded: each request is
/// parsed and checked as usual, then answered 503 (what the fuzzer drives).
pub fn unloaded_router(opts: &ServeOptions) -> Router {
    router(Arc::new(AppState::new(opts)), opts)
}

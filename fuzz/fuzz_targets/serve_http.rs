//! The server's request parsing: any method, path, headers and body sent
//! to every route of a server whose model is not loaded. Parsing answers
//! 4xx, a well-formed request 503 (loading); nothing panics, nothing 500s.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/api/chat",
    "/api/generate",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/models",
    "/health",
    "/metrics",
    "/",
    "/api/tags",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let path = PATHS[data[0] as usize % PATHS.len()];
    let method = if data[1] & 1 == 0 { "POST" } else { "GET" };
    let auth = data[1] & 2 != 0;
    let body = data[2..].to_vec();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = strata_serve::ServeOptions {
        api_key: auth.then(|| "k".to_string()),
        body_limit: 1 << 16,
        ..Default::default()
    };
    let app = strata_serve::api::unloaded_router(&opts);
    let req = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let status = rt.block_on(app.oneshot(req)).unwrap().status();
    assert!(status.as_u16() < 500 || status.as_u16() == 503, "{path}: {status}");
});

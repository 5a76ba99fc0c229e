//! `strata serve`: an OpenAI- and Ollama-compatible HTTP server over
//! strata's batched engine.
//!
//! - [`engine`]: continuous batching over one unified KV cache, with a
//!   prefix cache shared across requests;
//! - [`api`]: the HTTP endpoints (OpenAI's `/v1/chat/completions`,
//!   `/v1/completions`, `/v1/models`; llama-server's `/health`, `/tokenize`,
//!   `/detokenize`, `/apply-template`; Ollama's `/api/chat`,
//!   `/api/generate`; `/metrics`; the chat page at `/`);
//! - [`sampling`] and [`grammar`]: per-request sampling and constrained
//!   (JSON) output with llguidance;
//! - [`metrics`]: Prometheus metrics.
//!
//! [`serve`] binds first and answers `/health` with 503 while the model
//! loads.
#![warn(missing_docs)]

pub mod api;
pub mod engine;
pub mod grammar;
pub mod metrics;
pub mod sampling;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strata_models::chat::Template;
use strata_models::{Context, Model};

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to bind (`--host`, `--port`); loopback by default.
    pub addr: SocketAddr,
    /// Bearer token clients must send (`--api-key`), compared in constant time.
    pub api_key: Option<String>,
    /// Slots: requests generating at once (`-np`).
    pub n_slots: usize,
    /// Tokens per engine step (`-b`).
    pub n_batch: usize,
    /// Requests waiting for a slot at most; past it, 503 with `Retry-After`.
    pub queue_max: usize,
    /// Sequences the prefix cache may hold (0: off).
    pub n_holders: usize,
    /// Request bodies larger than this get 413.
    pub body_limit: usize,
    /// Connections open at once at most; more are closed on accept.
    pub max_connections: usize,
    /// A connection that sends no request for this long is closed.
    pub idle_timeout: Duration,
    /// Origins allowed by CORS (`--cors`); empty: CORS off.
    pub cors: Vec<String>,
    /// The name `/v1/models` reports.
    pub model_name: String,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            api_key: None,
            n_slots: 4,
            n_batch: 512,
            queue_max: 256,
            n_holders: 64,
            body_limit: 8 << 20,
            max_connections: 4096,
            idle_timeout: Duration::from_secs(30),
            cors: Vec::new(),
            model_name: "strata".into(),
        }
    }
}

impl ServeOptions {
    /// Sequences the context needs: the slots and the prefix cache's holders.
    pub fn n_seq(&self) -> usize {
        (self.n_slots + self.n_holders).min(strata_models::cells::MAX_SEQ)
    }

    fn engine_config(&self) -> engine::EngineConfig {
        engine::EngineConfig {
            n_slots: self.n_slots,
            n_batch: self.n_batch,
            queue_max: self.queue_max,
            n_holders: self.n_seq() - self.n_slots,
            min_shared: 32,
        }
    }
}

/// What the loader gives: the model, a context made with at least
/// [`ServeOptions::n_seq`] sequences (batch-invariant, so that a request's
/// tokens do not depend on the others), and the chat template.
pub struct Loaded {
    /// The model.
    pub model: Arc<Model>,
    /// The context the engine owns.
    pub context: Context,
    /// The chat template for chat requests.
    pub template: Template,
}

/// Errors of [`serve`].
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding or accepting failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The loader failed.
    #[error("loading the model failed: {0}")]
    Load(String),
    /// A setting is invalid.
    #[error("{0}")]
    Invalid(String),
}

/// Binds `opts.addr`, calls `on_listen` with the bound address, loads the
/// model with `load` (on a blocking thread; `/health` says 503 meanwhile)
/// and serves until `shutdown` completes.
pub async fn serve<L, S>(
    opts: ServeOptions,
    load: L,
    on_listen: impl FnOnce(SocketAddr),
    shutdown: S,
) -> Result<(), ServeError>
where
    L: FnOnce() -> Result<Loaded, String> + Send + 'static,
    S: std::future::Future<Output = ()> + Send,
{
    if opts.n_slots == 0 || opts.n_batch == 0 {
        return Err(ServeError::Invalid("-np and -b must be at least 1".into()));
    }
    let listener = tokio::net::TcpListener::bind(opts.addr).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(api::AppState::new(&opts));
    on_listen(addr);
    let loading = {
        let state = state.clone();
        let cfg = opts.engine_config();
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            let loaded = load()?;
            let n_seq = loaded.context.options().n_seq_max;
            if n_seq < cfg.n_seq() {
                return Err(format!(
                    "the context holds {n_seq} sequences; the server needs {} (slots and prefix \
                     cache)",
                    cfg.n_seq()
                ));
            }
            let model = loaded.model.clone();
            let handle = engine::spawn(loaded.context, cfg, state.metrics.clone())
                .map_err(|e| format!("starting the engine thread: {e}"))?;
            state.ready(model, loaded.template, handle);
            Ok(())
        })
    };
    let server = api::run(listener, state, &opts, shutdown);
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => return r.map_err(ServeError::Io),
        l = loading => match l {
            Ok(Ok(())) => tracing::info!(target: "strata_serve", "model loaded; serving"),
            Ok(Err(e)) => return Err(ServeError::Load(e)),
            Err(e) => return Err(ServeError::Load(e.to_string())),
        },
    }
    server.await.map_err(ServeError::Io)
}

/// Raises this process's open-file limit to its hard limit: every
/// connection is a descriptor, and the usual soft limit (1024) is below
/// [`ServeOptions::max_connections`]. Does nothing where there is no such
/// limit.
pub fn raise_fd_limit() {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit read and write the struct we own.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
                r.rlim_cur = r.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            }
        }
    }
}

//! `strata serve`: the OpenAI- and Ollama-compatible server
//! ([`strata_serve`]) over a model loaded as `run` loads it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use strata_serve::{Loaded, ServeOptions};

use crate::chat::TemplateArgs;
use crate::common::{CliResult, ModelArgs};

/// Serve a model over HTTP: OpenAI's and Ollama's APIs, continuous batching over `-np` slots, a prefix cache, and a chat page at `/`.
#[derive(clap::Args)]
#[command(
    after_help = "Unless given, -np is 4 (llama-server's slots) and -c the model's \
    training context, at most 8192 cells, instead of the defaults listed above."
)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on (loopback by default: use 0.0.0.0 to accept other machines).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0: any free port; the address is printed when listening).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Clients must send `Authorization: Bearer KEY` (also: STRATA_API_KEY).
    #[arg(long = "api-key", env = "STRATA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model name `/v1/models` reports (default: the file's name).
    #[arg(short = 'a', long)]
    pub alias: Option<String>,
    /// Requests waiting for a slot at most; more get 503 with Retry-After.
    #[arg(long = "queue-max", default_value_t = 256)]
    pub queue_max: usize,
    /// Keep no prompts across requests (no prefix cache).
    #[arg(long = "no-prefix-cache")]
    pub no_prefix_cache: bool,
    /// Request bodies larger than this many bytes get 413.
    #[arg(long = "body-limit", default_value_t = 8 << 20)]
    pub body_limit: usize,
    /// Open connections at most; more are closed on accept.
    #[arg(long = "max-connections", default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds a connection may stay idle (no request) before it is closed.
    #[arg(long = "idle-timeout", default_value_t = 30)]
    pub idle_timeout: u64,
    /// Allow these origins (CORS; `*` for any). Off unless given. Repeatable.
    #[arg(long)]
    pub cors: Vec<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
}

/// Whether the user gave `flag` (a long or short spelling) on the command line.
fn given(flags: &[&str]) -> bool {
    std::env::args().skip(1).any(|a| {
        flags
            .iter()
            .any(|f| a == *f || a.starts_with(&format!("{f}=")))
    })
}

/// Descriptors for every connection, and no SIGPIPE death when a client
/// goes away mid-write.
fn raise_fd_limit() {
    strata_serve::raise_fd_limit();
    #[cfg(unix)]
    // SAFETY: installs SIG_IGN, no handler code; tokio's threads write
    // sockets, and an ignored SIGPIPE turns their writes into errors.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Runs the server until Ctrl-C.
pub fn run(mut a: Args) -> CliResult {
    raise_fd_limit();
    // llama-server's defaults where `run`'s differ: 4 slots, and the
    // model's context (at most 8192 cells) unless -c is given
    if !given(&["--np", "-np", "--parallel"]) {
        a.model.n_parallel = 4;
    }
    let ctx_given = given(&["-c", "--ctx-size"]);
    let template_choice = a.template.choice()?;
    let path = a.model.model_path()?;
    let name = a.alias.clone().unwrap_or_else(|| {
        path.file_name()
            .map_or("model".into(), |f| f.to_string_lossy().into_owned())
    });
    let mut opts = ServeOptions {
        addr: SocketAddr::new(a.host, a.port),
        api_key: a.api_key.clone().filter(|k| !k.is_empty()),
        n_slots: a.model.n_parallel,
        n_batch: a.model.batch_size,
        queue_max: a.queue_max,
        body_limit: a.body_limit,
        max_connections: a.max_connections.max(1),
        idle_timeout: Duration::from_secs(a.idle_timeout.max(1)),
        cors: a.cors.clone(),
        model_name: name,
        ..ServeOptions::default()
    };
    if a.no_prefix_cache {
        opts.n_holders = 0;
    }
    let n_seq = opts.n_seq();
    let margs = a.model.clone();
    let load = move || -> Result<Loaded, String> {
        let model = margs.load().map_err(|e| e.to_string())?;
        let mut copts = margs.context_options(false);
        if !ctx_given {
            copts.n_ctx = model.hparams.n_ctx_train.clamp(1, 8192);
        }
        copts.n_seq_max = n_seq;
        // a request's tokens do not depend on the others in its batch
        copts.batch_invariant = true;
        let context = strata_models::Context::with_sched_config(
            model.clone(),
            copts,
            crate::settings::sched_config(),
        )
        .map_err(|e| e.to_string())?;
        let template = TemplateArgs::template(template_choice.as_ref(), &model, None)
            .map_err(|e| e.to_string())?;
        eprintln!(
            "strata: {} slots, {} KV cells shared, prefix cache {}",
            context.options().n_seq_max.min(margs.n_parallel),
            context.options().n_ctx,
            if n_seq > margs.n_parallel {
                "on"
            } else {
                "off"
            }
        );
        Ok(Loaded {
            model,
            context,
            template,
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(strata_serve::serve(
        opts,
        load,
        |addr| eprintln!("strata: listening on http://{addr}"),
        async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("strata: shutting down");
        },
    ))?;
    Ok(0)
}

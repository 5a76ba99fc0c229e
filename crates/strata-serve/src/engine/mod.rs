//! The continuous-batching engine: one thread owns the [`Context`] and
//! loops. Each step it drops cancelled requests, admits queued ones into
//! free slots (sharing any cached prefix of their prompts), and runs one
//! batch: the next token of every generating slot beside prompt chunks of
//! the slots still reading their prompts (chunked prefill, within
//! `n_batch` tokens), then samples each slot's next token and streams it.
//!
//! Slots are sequences `0..n_slots` of the unified KV cache; the prefix
//! cache's holders are the sequences above them ([`prefix`]). A request
//! with `n` choices takes `n` slots: the first reads the prompt, the others
//! share its cells (`seq_cp`) and sample from the same logits.

pub mod prefix;
mod step;
pub mod text;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use strata_models::Context;
use tokio::sync::mpsc::UnboundedSender;

use crate::metrics::Metrics;
use crate::sampling::{RequestSampler, Sampled};
use step::Engine;

/// Why a choice ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token, a stop string, or the grammar's end.
    Stop,
    /// `max_tokens` or the context's end.
    Length,
    /// The client went away.
    Cancelled,
    /// The engine failed (the error was sent).
    Error,
}

impl FinishReason {
    /// OpenAI's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// Token counts and times of a finished request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of those, found in the prefix cache.
    pub cached_tokens: usize,
    /// Generated tokens, over all choices.
    pub completion_tokens: usize,
    /// Seconds from arrival to the first token.
    pub ttft: f64,
    /// Seconds from arrival to the end.
    pub total: f64,
    /// Seconds spent waiting for a slot.
    pub queued: f64,
}

/// What the engine streams back for a request.
#[derive(Debug)]
pub enum Event {
    /// A generated token of choice `choice`, with the text it completes
    /// (may be empty while UTF-8 or a possible stop string is held).
    Token {
        /// Which choice.
        choice: usize,
        /// Text to send.
        text: String,
        /// The token and its log-probabilities (when asked for).
        sampled: Sampled,
    },
    /// Choice `choice` ended; `text` is what was still held.
    Done {
        /// Which choice.
        choice: usize,
        /// Why.
        reason: FinishReason,
        /// Held text released at the end.
        text: String,
    },
    /// Every choice ended: the request's counts (the last event).
    Usage(Usage),
    /// The request failed.
    Error(String),
}

/// One request, as the HTTP layer submits it.
pub struct Job {
    /// Prompt tokens (at least one).
    pub prompt: Vec<u32>,
    /// One sampler per choice (`n` = the length).
    pub samplers: Vec<RequestSampler>,
    /// Generated tokens per choice at most.
    pub max_tokens: usize,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Where events go; the request is cancelled when its receiver is dropped.
    pub events: UnboundedSender<Event>,
    /// For the log line.
    pub endpoint: &'static str,
    /// When the request arrived.
    pub received: Instant,
}

/// Why a job was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue bound is reached.
    #[error("the server is busy: {0} requests are already waiting; retry later")]
    QueueFull(usize),
    /// The engine thread has stopped.
    #[error("the engine has stopped: {0}")]
    Stopped(String),
    /// A job the engine cannot run (no prompt tokens, no choice).
    #[error("{0}")]
    Invalid(&'static str),
    /// More choices than slots.
    #[error("n = {n} choices need {n} slots, but the server has {slots} (-np); ask for fewer")]
    TooManyChoices {
        /// Choices asked for.
        n: usize,
        /// Slots.
        slots: usize,
    },
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Slots (`-np`): requests running at once.
    pub n_slots: usize,
    /// Tokens per step at most (prompt chunks and decode tokens).
    pub n_batch: usize,
    /// Requests waiting for a slot at most; past it, submit fails.
    pub queue_max: usize,
    /// Sequences kept for the prefix cache (0: no prefix cache). The
    /// context needs `n_slots + n_holders` sequences.
    pub n_holders: usize,
    /// A slot waits for another slot that is reading a prompt with at
    /// least this many tokens in common, then shares them, instead of
    /// computing them twice.
    pub min_shared: usize,
}

impl EngineConfig {
    /// Sequences the context must hold.
    pub fn n_seq(&self) -> usize {
        self.n_slots + self.n_holders
    }
}

/// The HTTP side's handle: submits jobs.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Job>,
    waiting: Arc<AtomicUsize>,
    alive: Arc<AtomicBool>,
    queue_max: usize,
    n_slots: usize,
    n_ctx: usize,
}

impl EngineHandle {
    /// Queues a job; fails past the queue bound or after the engine stopped.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        if job.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt has no tokens"));
        }
        if job.samplers.is_empty() {
            return Err(SubmitError::Invalid(
                "a job needs at least one choice (sampler)",
            ));
        }
        if job.samplers.len() > self.n_slots {
            return Err(SubmitError::TooManyChoices {
                n: job.samplers.len(),
                slots: self.n_slots,
            });
        }
        if !self.alive.load(Ordering::Acquire) {
            return Err(SubmitError::Stopped(
                "it failed earlier (see the log)".into(),
            ));
        }
        let n = self.waiting.fetch_add(1, Ordering::AcqRel);
        if n >= self.queue_max {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull(n));
        }
        self.tx.send(job).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            SubmitError::Stopped("its thread has ended".into())
        })
    }

    /// The context's cells.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Slots.
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// Starts the engine thread over `ctx` (made with at least
/// [`EngineConfig::n_seq`] sequences).
pub fn spawn(
    ctx: Context,
    cfg: EngineConfig,
    metrics: Arc<Metrics>,
) -> std::io::Result<EngineHandle> {
    let (tx, rx) = mpsc::channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    let alive = Arc::new(AtomicBool::new(true));
    let handle = EngineHandle {
        tx,
        waiting: waiting.clone(),
        alive: alive.clone(),
        queue_max: cfg.queue_max,
        n_slots: cfg.n_slots,
        n_ctx: ctx.options().n_ctx,
    };
    let mut engine = Engine::new(ctx, cfg, metrics, waiting);
    std::thread::Builder::new()
        .name("strata-engine".into())
        .spawn(move || {
            // a bug in a step must not leave clients waiting forever: their
            // channels close with the engine, and new requests get 500
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run(rx)));
            alive.store(false, Ordering::Release);
            if r.is_err() {
                tracing::error!(target: "strata_serve::engine", "the engine thread panicked");
            }
        })?;
    Ok(handle)
}

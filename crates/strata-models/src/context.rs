//! A running model: scheduler (reserved once for the worst-case batch), KV
//! cache and the decode call that turns tokens into logits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata::backend::Backend;
use strata::cpu::{CpuBackend, KernelClock};
use strata::sched::{Report, SchedConfig, Scheduler};

use crate::graph::{self, Attention, BatchGraph, BatchShape};
use crate::kv::KvCache;
use crate::model::Model;
use crate::{ModelError, Result};

/// Settings of a [`Context`].
#[derive(Clone, Debug)]
pub struct ContextOptions {
    /// KV cache cells (`-c`); 0 means the model's training context.
    pub n_ctx: usize,
    /// Tokens per batch (`-b`); prompts are processed in chunks of this size.
    pub n_batch: usize,
    /// Tokens per graph (`-ub`, llama.cpp's micro-batch; 0: `n_batch`). A
    /// batch runs as graphs of at most this many tokens queued one after
    /// another without waiting in between, so that with the layers over
    /// several devices (pipeline parallelism) they all work at once.
    pub n_ubatch: usize,
    /// CPU threads (`-t`).
    pub n_threads: usize,
    /// Attention implementation.
    pub attention: Attention,
    /// Reserve for logits of every position of a full batch (perplexity, `--all-positions`).
    pub logits_all: bool,
}

impl Default for ContextOptions {
    fn default() -> ContextOptions {
        ContextOptions {
            n_ctx: 2048,
            n_batch: 512,
            n_ubatch: 512,
            n_threads: strata::cpu::default_threads(),
            attention: Attention::Flash,
            logits_all: false,
        }
    }
}

/// Which logits [`Context::decode`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's.
    Last,
    /// Every token's, row after row.
    All,
    /// The rows of tokens `k..` of this call (perplexity scores only the
    /// second half of each chunk).
    From(usize),
}

/// Cache cells attended to are padded to a multiple of this (as llama.cpp
/// does, with at least this many): the decode graph keeps one shape for this
/// many tokens, so the scheduler and memory planner replay their plans
/// instead of re-planning every token. Padding cells are masked (-inf).
pub const KV_PAD: usize = 256;

/// Where [`Context::decode`]'s time went, summed over calls since the
/// context was made or [`Context::reset_timings`].
///
/// `kernels` is the CPU backend's kernel time (its thread pool running,
/// barriers included); the rest of `compute` is the scheduler's work around
/// it (and, with other devices, their time). Everything except `kernels` is
/// time spent outside the CPU kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecodeTimings {
    /// Tokens decoded.
    pub tokens: usize,
    /// Graphs computed (one per batch).
    pub graphs: usize,
    /// Graphs built: the others reused the previous batch's graph.
    pub built: usize,
    /// Building the batch's graph.
    pub build: Duration,
    /// Placing and allocating it (`Scheduler::alloc_graph`).
    pub schedule: Duration,
    /// Writing its inputs (tokens, positions, mask, indices).
    pub inputs: Duration,
    /// `Scheduler::compute` in all.
    pub compute: Duration,
    /// Of which CPU kernels.
    pub kernels: Duration,
    /// Reading the logits back.
    pub outputs: Duration,
}

impl DecodeTimings {
    /// Time outside the CPU kernels.
    pub fn outside_kernels(&self) -> Duration {
        self.build
            + self.schedule
            + self.inputs
            + self.outputs
            + self.compute.saturating_sub(self.kernels)
    }

    /// Time outside the CPU kernels per token (zero before any token).
    pub fn outside_kernels_per_token(&self) -> Duration {
        if self.tokens == 0 {
            return Duration::ZERO;
        }
        self.outside_kernels() / self.tokens as u32
    }
}

/// Pipeline copies when the layers span several devices (ggml's
/// `GGML_SCHED_MAX_COPIES`, what llama.cpp asks for).
pub const PIPELINE_COPIES: usize = 4;

/// A model with a KV cache and a scheduler.
pub struct Context {
    model: Arc<Model>,
    sched: Scheduler,
    kv: KvCache,
    n_past: usize,
    opts: ContextOptions,
    worst: BatchGraph,
    clock: KernelClock,
    timings: DecodeTimings,
    /// The last batch graph: the next batch of the same shape reuses it
    /// (only its inputs change), skipping graph building and scheduling.
    last: Option<BatchGraph>,
}

impl Context {
    /// Creates the backends (the model's devices, the CPU last), the cache,
    /// and reserves the scheduler with the worst-case graph (a full batch
    /// attending over the whole context).
    pub fn new(model: Arc<Model>, opts: ContextOptions) -> Result<Context> {
        Context::with_sched_config(model, opts, SchedConfig::default())
    }

    /// [`Context::new`] with the scheduler's settings given (the CLI passes
    /// its debug level, `STRATA_SCHED_DEBUG`, this way).
    pub fn with_sched_config(
        model: Arc<Model>,
        mut opts: ContextOptions,
        sched_config: SchedConfig,
    ) -> Result<Context> {
        if opts.n_ctx == 0 {
            opts.n_ctx = model.hparams.n_ctx_train;
        }
        if opts.n_batch == 0 || opts.n_threads == 0 {
            return Err(ModelError::Invalid(
                "batch size and thread count must be at least 1".into(),
            ));
        }
        opts.n_batch = opts.n_batch.min(opts.n_ctx);
        if opts.n_ubatch == 0 || opts.n_ubatch > opts.n_batch {
            opts.n_ubatch = opts.n_batch;
        }
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        let devs = model.devices.list();
        for d in &devs[..devs.len() - 1] {
            backends.push(d.init_backend()?);
        }
        // llama.cpp's pipeline parallelism: copies of every split input so
        // one micro-batch's inputs are written while the last one runs
        let mut sched_config = sched_config;
        let evented = devs[..devs.len() - 1]
            .iter()
            .all(|d| d.event_new().is_some());
        if sched_config.n_copies == 1 && evented && model.layer_map.pipelines(model.devices.cpu()) {
            sched_config.n_copies = PIPELINE_COPIES;
        }
        let cpu = CpuBackend::new(opts.n_threads);
        let clock = cpu.kernel_clock();
        backends.push(Box::new(cpu));
        let mut sched = Scheduler::new(backends, None, sched_config)?;
        let kv = KvCache::new(&model, opts.n_ctx)?;
        let shape = BatchShape {
            n_tokens: opts.n_ubatch,
            n_kv: opts.n_ctx,
            n_outputs: if opts.logits_all { opts.n_ubatch } else { 1 },
        };
        let worst = graph::build(&model, &kv, shape, opts.attention)?;
        sched.reserve(&worst.graph)?;
        Ok(Context {
            model,
            sched,
            kv,
            n_past: 0,
            opts,
            worst,
            clock,
            timings: DecodeTimings::default(),
            last: None,
        })
    }

    /// Where decode time went since creation or [`Context::reset_timings`].
    pub fn timings(&self) -> DecodeTimings {
        self.timings
    }

    /// Starts [`Context::timings`] from zero.
    pub fn reset_timings(&mut self) {
        self.timings = DecodeTimings::default();
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The settings in effect (context and batch resolved).
    pub fn options(&self) -> &ContextOptions {
        &self.opts
    }

    /// Positions already in the cache.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Pipeline copies the scheduler keeps (1: no pipeline parallelism;
    /// [`PIPELINE_COPIES`] when the layers span several devices).
    pub fn n_copies(&self) -> usize {
        self.sched.n_copies()
    }

    /// Number of splits of the last graph run (1 when everything is on one backend).
    pub fn n_splits(&self) -> usize {
        self.sched.n_splits()
    }

    /// Compute-buffer bytes per backend (the CPU last).
    pub fn compute_buffer_sizes(&self) -> Vec<usize> {
        (0..self.sched.backends().len())
            .map(|b| self.sched.buffer_size(strata::sched::BackendId(b)))
            .collect()
    }

    /// KV cache bytes.
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// The scheduler's report for the worst-case graph.
    pub fn report(&mut self) -> Result<Report> {
        Ok(self.sched.report_for(&self.worst.graph)?)
    }

    /// Forgets all positions (the cache is rewritten from position 0).
    pub fn clear(&mut self) -> Result<()> {
        self.kv.clear()?;
        self.n_past = 0;
        Ok(())
    }

    /// Keeps the first `n` positions and forgets the rest (they are
    /// overwritten by the next decode and masked until then).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.n_past {
            return Err(ModelError::Invalid(format!(
                "cannot keep {n} positions: only {} are cached",
                self.n_past
            )));
        }
        self.n_past = n;
        Ok(())
    }

    /// Appends `tokens` at the next positions, in graphs of `n_ubatch`
    /// tokens, and returns the wanted logits (`n_vocab` per row). Graphs
    /// whose logits are not wanted are queued without waiting for them.
    pub fn decode(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(ModelError::Invalid(
                "nothing to decode: the prompt has no tokens (an empty prompt, and the model \
                 adds no BOS token); give a non-empty prompt"
                    .into(),
            ));
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::Invalid(format!(
                "token id {bad} is out of range (vocabulary of {n_vocab})"
            )));
        }
        if self.n_past + tokens.len() > self.opts.n_ctx {
            return Err(ModelError::Invalid(format!(
                "context full: {} cached + {} new tokens exceed -c {}; use a larger context",
                self.n_past,
                tokens.len(),
                self.opts.n_ctx
            )));
        }
        let mut out = Vec::new();
        let step = self.opts.n_ubatch;
        let n_chunks = tokens.len().div_ceil(step);
        for (ci, chunk) in tokens.chunks(step).enumerate() {
            let off = ci * step;
            let n = chunk.len();
            let rows: Vec<usize> = match want {
                Logits::Last if ci + 1 == n_chunks => vec![n - 1],
                Logits::Last => Vec::new(),
                Logits::All => (0..n).collect(),
                Logits::From(k) => (k.max(off).min(off + n) - off..n).collect(),
            };
            let read = !rows.is_empty();
            let rows = if read { rows } else { vec![n - 1] }; // logits not wanted
            match self.decode_chunk(chunk, &rows, read) {
                Ok(logits) => out.extend_from_slice(&logits),
                Err(e) => {
                    // queued graphs may still run: let them end before the error
                    let _ = self.sched.synchronize();
                    return Err(e);
                }
            }
        }
        // nothing stays queued past the call (a batch whose logits were not wanted)
        self.sched.synchronize()?;
        Ok(out)
    }

    /// Decodes one micro-batch; with `read`, waits for it and returns the
    /// logits of `rows` (ascending indices into the batch), otherwise
    /// queues it and returns nothing.
    fn decode_chunk(&mut self, tokens: &[u32], rows: &[usize], read: bool) -> Result<Vec<f32>> {
        let n = tokens.len();
        let n_used = self.n_past + n;
        // Attend over a padded number of cells (see KV_PAD); the padding is masked.
        let n_kv = padded_kv(n_used, self.opts.n_ctx);
        let shape = BatchShape {
            n_tokens: n,
            n_kv,
            n_outputs: rows.len(),
        };
        if rows.len() > 1 && !self.opts.logits_all {
            return Err(ModelError::Invalid(
                "logits of several positions need a context made with logits_all".into(),
            ));
        }
        let t0 = Instant::now();
        let g = match self.last.take() {
            Some(g) if g.shape == shape => g,
            _ => {
                self.timings.built += 1;
                graph::build(&self.model, &self.kv, shape, self.opts.attention)?
            }
        };
        let t1 = Instant::now();
        // with pipeline copies every micro-batch takes the next one
        if !self.sched.is_allocated_for(&g.graph) || self.sched.n_copies() > 1 {
            self.sched.alloc_graph(&g.graph)?;
        }
        let t2 = Instant::now();
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        g.tokens.write_i32(&ids)?;
        let pos: Vec<i32> = (self.n_past..n_used).map(|p| p as i32).collect();
        g.positions.write_i32(&pos)?;
        let idx: Vec<u8> = (self.n_past..n_used)
            .flat_map(|p| (p as i64).to_le_bytes())
            .collect();
        g.kv_idx.write_bytes(0, &idx)?;
        g.write_masks(self.model.hparams.swa.as_ref(), self.n_past)?;
        if let Some(o) = &g.out_ids {
            let ids: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
            o.write_i32(&ids)?;
        }
        let t3 = Instant::now();
        let k0 = self.clock.elapsed();
        self.sched.compute_async(&g.graph)?;
        if read {
            self.sched.synchronize()?;
        }
        let t4 = Instant::now();
        let kernels = self.clock.elapsed().saturating_sub(k0);
        self.n_past = n_used;
        let logits = if read {
            g.logits.to_f32_vec()?
        } else {
            Vec::new()
        };
        self.last = Some(g);
        let t = &mut self.timings;
        t.tokens += n;
        t.graphs += 1;
        t.build += t1 - t0;
        t.schedule += t2 - t1;
        t.inputs += t3 - t2;
        t.compute += t4 - t3;
        t.kernels += kernels;
        t.outputs += t4.elapsed();
        Ok(logits)
    }
}

/// Cells attended to for `n_used` cached positions: `n_used` rounded up to a
/// multiple of [`KV_PAD`] (at least `KV_PAD`), at most the cache size.
pub fn padded_kv(n_used: usize, n_ctx: usize) -> usize {
    n_used
        .div_ceil(KV_PAD)
        .max(1)
        .saturating_mul(KV_PAD)
        .min(n_ctx)
        .max(n_used)
}

#[cfg(test)]
mod tests {
    use super::{padded_kv, KV_PAD};

    #[test]
    fn kv_cells_are_padded_like_llama_cpp() {
        assert_eq!(padded_kv(1, 4096), KV_PAD);
        assert_eq!(padded_kv(KV_PAD, 4096), KV_PAD);
        assert_eq!(padded_kv(KV_PAD + 1, 4096), 2 * KV_PAD);
        assert_eq!(padded_kv(700, 4096), 768);
        // never beyond the cache, never below what is used
        assert_eq!(padded_kv(5, 100), 100);
        assert_eq!(padded_kv(300, 300), 300);
        assert_eq!(padded_kv(513, 600), 600);
    }
}

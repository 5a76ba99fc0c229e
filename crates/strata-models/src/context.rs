//! A running model: scheduler (reserved once for the worst-case batch), KV
//! cache and the decode call that turns tokens into logits.

use std::sync::Arc;

use half::f16;
use strata::backend::Backend;
use strata::cpu::CpuBackend;
use strata::sched::{Report, SchedConfig, Scheduler};
use strata::DType;

use crate::graph::{self, Attention, BatchGraph, BatchShape};
use crate::kv::KvCache;
use crate::model::Model;
use crate::{ModelError, Result};

/// Settings of a [`Context`].
#[derive(Clone, Debug)]
pub struct ContextOptions {
    /// KV cache cells (`-c`); 0 means the model's training context.
    pub n_ctx: usize,
    /// Tokens per graph (`-b`); prompts are processed in chunks of this size.
    pub n_batch: usize,
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

/// A model with a KV cache and a scheduler.
pub struct Context {
    model: Arc<Model>,
    sched: Scheduler,
    kv: KvCache,
    n_past: usize,
    opts: ContextOptions,
    worst: BatchGraph,
}

impl Context {
    /// Creates the backends (the model's devices, the CPU last), the cache,
    /// and reserves the scheduler with the worst-case graph (a full batch
    /// attending over the whole context).
    pub fn new(model: Arc<Model>, mut opts: ContextOptions) -> Result<Context> {
        if opts.n_ctx == 0 {
            opts.n_ctx = model.hparams.n_ctx_train;
        }
        if opts.n_batch == 0 || opts.n_threads == 0 {
            return Err(ModelError::Invalid(
                "batch size and thread count must be at least 1".into(),
            ));
        }
        opts.n_batch = opts.n_batch.min(opts.n_ctx);
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        let devs = model.devices.list();
        for d in &devs[..devs.len() - 1] {
            backends.push(d.init_backend()?);
        }
        backends.push(Box::new(CpuBackend::new(opts.n_threads)));
        let mut sched = Scheduler::new(backends, None, SchedConfig::default())?;
        let kv = KvCache::new(&model, opts.n_ctx)?;
        let shape = BatchShape {
            n_tokens: opts.n_batch,
            n_kv: opts.n_ctx,
            n_outputs: if opts.logits_all { opts.n_batch } else { 1 },
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
        })
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

    /// Number of splits of the last graph run (1 when everything is on one backend).
    pub fn n_splits(&self) -> usize {
        self.sched.n_splits()
    }

    /// Compute-buffer bytes per backend (the CPU last).
    pub fn compute_buffer_sizes(&self) -> Vec<usize> {
        (0..self.sched.backends().len())
            .map(|b| self.sched.buffer_size(b))
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

    /// Appends `tokens` at the next positions, in chunks of `n_batch`, and
    /// returns the wanted logits (`n_vocab` per row).
    pub fn decode(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(ModelError::Invalid(
                "decode needs at least one token".into(),
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
        let n_chunks = tokens.len().div_ceil(self.opts.n_batch);
        for (ci, chunk) in tokens.chunks(self.opts.n_batch).enumerate() {
            let off = ci * self.opts.n_batch;
            let n = chunk.len();
            let rows: Vec<usize> = match want {
                Logits::Last if ci + 1 == n_chunks => vec![n - 1],
                Logits::Last => Vec::new(),
                Logits::All => (0..n).collect(),
                Logits::From(k) => (k.max(off).min(off + n) - off..n).collect(),
            };
            if rows.is_empty() {
                self.decode_chunk(chunk, &[n - 1])?; // logits not wanted
            } else {
                out.extend_from_slice(&self.decode_chunk(chunk, &rows)?);
            }
        }
        Ok(out)
    }

    /// Decodes one batch; returns the logits of `rows` (ascending indices into the batch).
    fn decode_chunk(&mut self, tokens: &[u32], rows: &[usize]) -> Result<Vec<f32>> {
        let n = tokens.len();
        let n_kv = self.n_past + n;
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
        let g = graph::build(&self.model, &self.kv, shape, self.opts.attention)?;
        self.sched.alloc_graph(&g.graph)?;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        g.tokens.write_i32(&ids)?;
        let pos: Vec<i32> = (self.n_past..n_kv).map(|p| p as i32).collect();
        g.positions.write_i32(&pos)?;
        let idx: Vec<u8> = (self.n_past..n_kv)
            .flat_map(|p| (p as i64).to_le_bytes())
            .collect();
        g.kv_idx.write_bytes(0, &idx)?;
        let mut mask = Vec::with_capacity(n * n_kv);
        for i in 0..n {
            let p = self.n_past + i;
            mask.extend((0..n_kv).map(|j| if j <= p { 0.0f32 } else { f32::NEG_INFINITY }));
        }
        match g.mask.dtype() {
            DType::F16 => {
                let b: Vec<u8> = mask
                    .iter()
                    .flat_map(|&x| f16::from_f32(x).to_le_bytes())
                    .collect();
                g.mask.write_bytes(0, &b)?;
            }
            _ => g.mask.write_f32(&mask)?,
        }
        if let Some(o) = &g.out_ids {
            let ids: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
            o.write_i32(&ids)?;
        }
        self.sched.compute(&g.graph)?;
        self.n_past = n_kv;
        Ok(g.logits.to_f32_vec()?)
    }
}

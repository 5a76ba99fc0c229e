//! A running model: scheduler (reserved once for the worst-case batch), KV
//! cache and the decode calls that turn tokens into logits.
//!
//! The cache is llama.cpp's unified cache: one pool of cells shared by up to
//! [`ContextOptions::n_seq_max`] sequences ([`crate::cells`]). A
//! [`Batch`] carries tokens of any sequences (prompt chunks beside single
//! decode tokens); [`Context::decode_batch`] places them in free cells, runs
//! them in graphs of at most `n_ubatch` tokens, and returns the logits asked
//! for. [`Context::decode`] is the one-sequence form (sequence 0).
//!
//! **Batch invariance.** With [`ContextOptions::batch_invariant`], a
//! sequence's logits are bit-identical whatever else is in the batch: alone
//! or beside other sequences, at other cell offsets, with another number of
//! cells attended to, in another split into micro-batches, at any thread
//! count. What makes it hold:
//! - every op but attention computes each token's row by the same arithmetic
//!   whatever the other columns of the batch (the matmul kernels give the
//!   scalar reference's bits per column at every ISA level; the norms, RoPE
//!   and element-wise ops are per row; a MoE routes each token alone);
//! - attention takes the two-pass path for every shape
//!   ([`strata::cpu::CpuBackend::set_batch_invariant`]): the row's unmasked
//!   keys in cell order, masked keys skipped, each weight `exp(s − M)` taken
//!   with the row's final maximum and added in f32 in key order;
//! - the cell allocator keeps each sequence's cells in position order
//!   ([`Cells::find_slots`]), so a sequence's keys are visited in the same
//!   order wherever they lie.
//!
//! Where it does not hold: with [`Attention::SoftMax`] (the softmax and the
//! V product sum over every cell, masked ones included, in SIMD lanes that
//! depend on the cells' offsets); on other devices than the CPU; and when the
//! pool is so fragmented that no free cell lies above a sequence's last
//! cell (the token then takes a lower cell, and its keys are visited out of
//! position order). Off (the default), prompts of 64 tokens or more take
//! the tiled attention path and long single-token decodes the split-KV path,
//! as llama.cpp's CPU backend does; their bits depend on the batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata::backend::Backend;
use strata::cpu::{CpuBackend, KernelClock};
use strata::ops;
use strata::sched::{Report, SchedConfig, Scheduler};
use strata::{DType, Graph, Tensor};

use crate::batch::{Batch, BatchLogits};
use crate::cells::{Cells, SeqId, SeqSet};
use crate::graph::{self, Attention, BatchGraph, BatchShape};
use crate::kv::KvCache;
use crate::model::Model;
use crate::{BatchError, ModelError, Result};

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
    /// Sequences the cache holds (`-np`, llama.cpp's `n_seq_max`), 1 to
    /// [`crate::cells::MAX_SEQ`]. All share the `n_ctx` cells.
    pub n_seq_max: usize,
    /// Batch-invariant attention (module docs): a sequence's logits do not
    /// depend on the rest of the batch. Costs prompt speed (no tiled
    /// attention path).
    pub batch_invariant: bool,
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
            n_seq_max: 1,
            batch_invariant: false,
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
    cells: Cells,
    /// Rows of logits a micro-batch may ask for (what the scheduler reserved).
    n_outputs_max: usize,
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
            return Err(ModelError::ZeroBatchOrThreads {
                n_batch: opts.n_batch,
                n_threads: opts.n_threads,
            });
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
        let mut cpu = CpuBackend::new(opts.n_threads);
        cpu.set_batch_invariant(opts.batch_invariant);
        let clock = cpu.kernel_clock();
        backends.push(Box::new(cpu));
        let mut sched = Scheduler::new(backends, None, sched_config)?;
        let cells = Cells::new(opts.n_ctx, opts.n_seq_max)?;
        let kv = KvCache::new(&model, opts.n_ctx)?;
        let n_outputs_max = if opts.logits_all {
            opts.n_ubatch
        } else {
            opts.n_seq_max.min(opts.n_ubatch)
        };
        let shape = BatchShape {
            n_tokens: opts.n_ubatch,
            n_kv: opts.n_ctx,
            n_outputs: n_outputs_max,
        };
        let worst = graph::build(&model, &kv, shape, opts.attention)?;
        sched.reserve(&worst.graph)?;
        Ok(Context {
            model,
            sched,
            kv,
            cells,
            n_outputs_max,
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

    /// Positions of sequence 0 in the cache (its highest position + 1).
    pub fn n_past(&self) -> usize {
        self.cells.seq_pos_max(0).map_or(0, |p| p as usize + 1)
    }

    /// The cells: which positions and sequences the cache holds.
    pub fn cells(&self) -> &Cells {
        &self.cells
    }

    /// Cells in use (a cell shared by several sequences counts once).
    pub fn kv_used(&self) -> usize {
        self.cells.used()
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

    /// Forgets all positions of every sequence (the cache is rewritten from cell 0).
    pub fn clear(&mut self) -> Result<()> {
        self.kv.clear()?;
        self.cells.clear();
        Ok(())
    }

    /// Keeps the first `n` positions of sequence 0 and forgets the rest
    /// (their cells are freed unless another sequence shares them).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        let n_past = self.n_past();
        if n > n_past {
            return Err(ModelError::KeepTooMany {
                keep: n,
                cached: n_past,
            });
        }
        self.cells.seq_rm(Some(0), n as i32..)
    }

    /// Removes sequence `seq` (every sequence for `None`) from its cells
    /// with positions in `range` (llama.cpp's `llama_memory_seq_rm`). Cells
    /// that another sequence shares stay for it.
    pub fn seq_rm(
        &mut self,
        seq: Option<SeqId>,
        range: impl std::ops::RangeBounds<i32>,
    ) -> Result<()> {
        self.cells.seq_rm(seq, range)
    }

    /// Makes `dst` share the cells of `src` with positions in `range`: no
    /// K/V is copied or computed again (llama.cpp's `seq_cp`).
    pub fn seq_cp(
        &mut self,
        src: SeqId,
        dst: SeqId,
        range: impl std::ops::RangeBounds<i32>,
    ) -> Result<()> {
        self.cells.seq_cp(src, dst, range)
    }

    /// Removes every sequence but `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) -> Result<()> {
        self.cells.seq_keep(seq)
    }

    /// Lowest cached position of `seq`.
    pub fn seq_pos_min(&self, seq: SeqId) -> Option<i32> {
        self.cells.seq_pos_min(seq)
    }

    /// Highest cached position of `seq`.
    pub fn seq_pos_max(&self, seq: SeqId) -> Option<i32> {
        self.cells.seq_pos_max(seq)
    }

    /// Adds `delta` to the positions of `seq`'s cells in `range` (llama.cpp's
    /// `seq_add`, the context shift): the cached keys are rotated by `delta`
    /// at once (RoPE is a rotation, so `R(p + δ) = R(δ)·R(p)`). A cell shared
    /// with another sequence moves for it too (cells have one position, as
    /// in llama.cpp); cells whose position would fall below 0 are freed.
    ///
    /// Errors: the sequence is not this context's, a position would
    /// overflow, or the model's RoPE also scales magnitudes (YaRN), which a
    /// second rotation would apply twice; the cache is then unchanged.
    pub fn seq_add(
        &mut self,
        seq: SeqId,
        range: impl std::ops::RangeBounds<i32> + Clone,
        delta: i32,
    ) -> Result<()> {
        self.cells.check_seq(seq)?;
        let hp = &self.model.hparams;
        let rp = hp.rope_params();
        if rp.ext_factor != 0.0
            || rp.attn_factor != 1.0
            || self.model.layers.iter().any(|l| l.rope_long.is_some())
        {
            return Err(ModelError::ShiftUnsupported);
        }
        let mut trial = self.cells.clone();
        let moved = trial.seq_add(seq, range, delta)?;
        if !moved.is_empty() {
            self.shift_keys(&moved)?;
        }
        self.cells = trial;
        Ok(())
    }

    /// Rotates the keys of cells `moved` by their shift, in every layer.
    fn shift_keys(&mut self, moved: &[(usize, i32)]) -> Result<()> {
        let hp = &self.model.hparams;
        let n = moved.len();
        let idx = Tensor::new(DType::I32, &[n])?.with_name("shift_idx");
        let delta = Tensor::new(DType::I32, &[n])?.with_name("shift_pos");
        idx.set_input();
        delta.set_input();
        let mut graph = Graph::new();
        for (il, l) in self.model.layers.iter().enumerate() {
            let k = &self.kv.k[il];
            let rows = ops::get_rows(k, &idx)?; // f32 [dk · n_kv_heads, n]
            let heads = ops::reshape(&rows, &[hp.head_dim_k, hp.n_head_kv, n])?;
            let p = hp.rope_params_for(il);
            let rot = match &l.rope_freqs {
                Some(ff) => ops::rope_ext(&heads, &delta, Some(ff), p)?,
                None => ops::rope(&heads, &delta, p)?,
            };
            let back = ops::reshape(&rot, &[hp.head_dim_k * hp.n_head_kv, n])?;
            let w = ops::set_rows(k, &back, &idx)?.with_name(format!("k_shift_l{il}"));
            graph.expand(&w);
        }
        self.sched.alloc_graph(&graph)?;
        let ids: Vec<i32> = moved.iter().map(|&(c, _)| c as i32).collect();
        idx.write_i32(&ids)?;
        let d: Vec<i32> = moved.iter().map(|&(_, d)| d).collect();
        delta.write_i32(&d)?;
        self.sched.compute(&graph)?;
        // the decode graph's allocation was replaced
        self.last = None;
        Ok(())
    }

    /// Appends `tokens` at the next positions of sequence 0, in graphs of
    /// `n_ubatch` tokens, and returns the wanted logits (`n_vocab` per row).
    /// Graphs whose logits are not wanted are queued without waiting for them.
    pub fn decode(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        self.decode_into(tokens, want, &mut logits)?;
        Ok(logits)
    }

    /// [`Context::decode`] into `logits`, which keeps its memory from call to
    /// call: it is overwritten with the wanted logits (`n_vocab` per row) and
    /// grows only when they need more room than it has (a decode loop that
    /// passes the same vector allocates nothing for them after the first
    /// token, as llama.cpp keeps its logits in the context). After an error
    /// `logits` is empty.
    pub fn decode_into(
        &mut self,
        tokens: &[u32],
        want: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let data = std::mem::take(logits);
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::TokenOutOfVocab {
                token: bad,
                n_vocab,
            });
        }
        let n_past = self.n_past();
        if n_past + tokens.len() > self.opts.n_ctx {
            return Err(ModelError::ContextFull {
                cached: n_past,
                new: tokens.len(),
                n_ctx: self.opts.n_ctx,
            });
        }
        let n = tokens.len();
        let want: Vec<bool> = (0..n)
            .map(|i| match want {
                Logits::Last => i + 1 == n,
                Logits::All => true,
                Logits::From(k) => i >= k,
            })
            .collect();
        let step = self.opts.n_ubatch;
        let per_chunk = want.chunks(step).map(|c| c.iter().filter(|&&w| w).count());
        let wanted = per_chunk.max().unwrap_or(0);
        if wanted > self.n_outputs_max {
            return Err(ModelError::LogitsNotKept {
                wanted,
                reserved: self.n_outputs_max,
            });
        }
        let at: Vec<(i32, SeqSet)> = (0..n)
            .map(|i| ((n_past + i) as i32, SeqSet::one(0)))
            .collect();
        *logits = self.run(tokens, &at, &want, data)?.data;
        Ok(())
    }

    /// Decodes a batch of tokens of any sequences (prompt chunks beside
    /// single decode tokens) and returns the logits it asked for.
    ///
    /// The batch is checked first, and a refused batch leaves the cache
    /// unchanged ([`BatchError`] names the token, sequence or position):
    /// token ids within the vocabulary; every token in at least one
    /// sequence, each below [`ContextOptions::n_seq_max`]; positions in
    /// `0..n_ctx`, each sequence's continuing its cached ones by 1 (any start
    /// for a sequence with no cells); enough free cells; at most the
    /// reserved rows of logits per micro-batch. A token of several
    /// sequences is stored once and attends as its lowest sequence
    /// (llama.cpp reads its first). If computing fails, the batch's cells
    /// are freed again.
    pub fn decode_batch(&mut self, batch: &Batch) -> Result<BatchLogits> {
        self.check_batch(batch)?;
        let at: Vec<(i32, SeqSet)> = batch
            .pos
            .iter()
            .zip(&batch.seqs)
            .map(|(&p, &s)| (p, s))
            .collect();
        self.run(&batch.tokens, &at, &batch.logits, Vec::new())
    }

    fn check_batch(&self, b: &Batch) -> Result<()> {
        if b.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let n_vocab = self.model.hparams.n_vocab;
        let n_ctx = self.opts.n_ctx;
        // each sequence's next position, as the batch goes on
        let mut next: Vec<Option<i64>> = (0..self.cells.n_seq_max() as SeqId)
            .map(|s| self.cells.seq_pos_max(s).map(|p| p as i64 + 1))
            .collect();
        for i in 0..b.len() {
            if b.tokens[i] as usize >= n_vocab {
                return Err(BatchError::TokenOutOfVocab {
                    index: i,
                    token: b.tokens[i],
                    n_vocab,
                }
                .into());
            }
            if let Some(seq) = b.bad_seq[i] {
                return Err(BatchError::SeqOutOfRange {
                    seq,
                    n_seq_max: self.cells.n_seq_max(),
                }
                .into());
            }
            if b.seqs[i].is_empty() {
                return Err(BatchError::NoSequence { index: i }.into());
            }
            let pos = b.pos[i] as i64;
            for s in b.seqs[i].iter() {
                self.cells.check_seq(s)?;
                if pos < 0 || pos >= n_ctx as i64 {
                    return Err(BatchError::PosOutOfRange { seq: s, pos, n_ctx }.into());
                }
                let slot = &mut next[s as usize];
                if let Some(expected) = *slot {
                    if pos != expected {
                        return Err(BatchError::PosNotConsecutive {
                            seq: s,
                            expected,
                            got: pos,
                        }
                        .into());
                    }
                }
                *slot = Some(pos + 1);
            }
        }
        for chunk in b.logits.chunks(self.opts.n_ubatch) {
            let wanted = chunk.iter().filter(|&&w| w).count();
            if wanted > self.n_outputs_max {
                return Err(BatchError::TooManyOutputs {
                    wanted,
                    reserved: self.n_outputs_max,
                }
                .into());
            }
        }
        Ok(())
    }

    /// Places the tokens `at` (position, sequences) in free cells and runs
    /// them in micro-batches; the rows `want` flags are returned, in `data`
    /// (overwritten, its memory reused).
    fn run(
        &mut self,
        tokens: &[u32],
        at: &[(i32, SeqSet)],
        want: &[bool],
        data: Vec<f32>,
    ) -> Result<BatchLogits> {
        let slots = self.cells.place(at)?;
        let n_vocab = self.model.hparams.n_vocab;
        let mut out = BatchLogits {
            n_vocab,
            rows: Vec::new(),
            data,
        };
        // logits written so far (`out.data` beyond them is old memory)
        let mut filled = 0;
        // Attend over the cells the batch's sequences reach, padded (see
        // KV_PAD; the padding is masked). A token sees only cells of its
        // lowest sequence, so cells above those (other sequences', a prefix
        // cache's) need not be in the graph: with many sequences in one
        // cache this keeps each batch's attention to its own span.
        let span = self.cells.span_of(at.iter().filter_map(|(_, s)| s.first()));
        let n_kv = padded_kv(span.max(1), self.opts.n_ctx);
        let step = self.opts.n_ubatch;
        let mut result = Ok(());
        for (ci, chunk) in tokens.chunks(step).enumerate() {
            let off = ci * step;
            let n = chunk.len();
            let rows: Vec<usize> = (0..n).filter(|&i| want[off + i]).collect();
            let read = !rows.is_empty();
            let rows = if read { rows } else { vec![n - 1] }; // logits not wanted
            let r = self.decode_chunk(
                chunk,
                &at[off..off + n],
                &slots[off..off + n],
                &rows,
                read.then_some((&mut out.data, filled)),
                n_kv,
            );
            match r {
                Ok(m) => {
                    if read {
                        out.rows.extend(rows.iter().map(|&r| off + r));
                        filled += m;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // nothing stays queued past the call (a batch whose logits were not
        // wanted), and queued graphs end before an error is returned
        out.data.truncate(filled);
        let synced = self.sched.synchronize();
        if let Err(e) = result.and(synced.map_err(ModelError::from)) {
            self.cells.release(&slots);
            return Err(e);
        }
        Ok(out)
    }

    /// Decodes one micro-batch of tokens at `at` in cells `slots`; with
    /// `read` = (`data`, `from`), waits for it and writes the logits of
    /// `rows` (ascending indices into the micro-batch) into `data` from `from`
    /// (growing it if needed) and returns how many values it wrote;
    /// otherwise queues it and returns 0.
    fn decode_chunk(
        &mut self,
        tokens: &[u32],
        at: &[(i32, SeqSet)],
        slots: &[usize],
        rows: &[usize],
        read: Option<(&mut Vec<f32>, usize)>,
        n_kv: usize,
    ) -> Result<usize> {
        let n = tokens.len();
        let shape = BatchShape {
            n_tokens: n,
            n_kv,
            n_outputs: rows.len(),
        };
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
        let pos: Vec<i32> = at.iter().map(|&(p, _)| p).collect();
        let out_ids: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
        g.write_inputs(
            &ids,
            &pos,
            slots,
            &out_ids,
            &self.cells,
            at,
            self.model.hparams.swa.as_ref(),
        )?;
        let t3 = Instant::now();
        let k0 = self.clock.elapsed();
        self.sched.compute_async(&g.graph)?;
        if read.is_some() {
            self.sched.synchronize()?;
        }
        let t4 = Instant::now();
        let kernels = self.clock.elapsed().saturating_sub(k0);
        let mut written = 0;
        if let Some((data, from)) = read {
            written = g.logits.nelements();
            let end = from + written;
            if data.len() < end {
                data.resize(end, 0.0);
            }
            g.logits.read_f32_into(&mut data[from..end])?;
        }
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
        Ok(written)
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

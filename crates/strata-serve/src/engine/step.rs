//! The engine thread's loop: slots, admission, prompt sharing, the step's
//! batch, sampling and the end of a request (module docs of `engine`).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_models::{Batch, Context, SeqId};
use tokio::sync::mpsc::UnboundedSender;

use super::prefix::PrefixCache;
use super::text::TextStream;
use super::{EngineConfig, Event, FinishReason, Job, Usage};
use crate::metrics::Metrics;
use crate::sampling::RequestSampler;

/// Where a slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading its prompt; `done` tokens are in the cache.
    Prefill { done: usize },
    /// Waits for slot `of` to have read `upto` prompt tokens, then shares them.
    Share { of: usize, upto: usize },
    /// A follower choice: waits for the leader's prompt and logits.
    Follow { leader: usize },
    /// Generating: `pending` is sampled and not yet in the cache.
    Decode { pending: u32 },
}

struct Slot {
    seq: SeqId,
    job: u64,
    choice: usize,
    phase: Phase,
    /// The tokens in the cache for this sequence, positions `0..len`.
    tokens: Vec<u32>,
    prompt: Arc<Vec<u32>>,
    sampler: RequestSampler,
    stream: TextStream,
    n_gen: usize,
    max_tokens: usize,
    admitted: Instant,
    last_token: Option<Instant>,
}

struct JobState {
    events: UnboundedSender<Event>,
    endpoint: &'static str,
    received: Instant,
    admitted: Instant,
    first_token: Option<Instant>,
    open: usize,
    usage: Usage,
}

pub(super) struct Engine {
    ctx: Context,
    cfg: EngineConfig,
    metrics: Arc<Metrics>,
    waiting: Arc<AtomicUsize>,
    queue: VecDeque<Job>,
    slots: Vec<Option<Slot>>,
    jobs: HashMap<u64, JobState>,
    next_job: u64,
    cache: PrefixCache,
    free_holders: Vec<SeqId>,
    n_vocab: usize,
}

impl Engine {
    pub(super) fn new(
        ctx: Context,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
        waiting: Arc<AtomicUsize>,
    ) -> Engine {
        let n_slots = cfg.n_slots;
        let holders = (n_slots..n_slots + cfg.n_holders)
            .rev()
            .map(|s| s as SeqId)
            .collect();
        let n_vocab = ctx.model().hparams.n_vocab;
        Engine {
            ctx,
            metrics,
            waiting,
            queue: VecDeque::new(),
            slots: (0..n_slots).map(|_| None).collect(),
            jobs: HashMap::new(),
            next_job: 0,
            cache: PrefixCache::new(),
            free_holders: holders,
            n_vocab,
            cfg,
        }
    }

    pub(super) fn run(&mut self, rx: mpsc::Receiver<Job>) {
        loop {
            let idle = self.queue.is_empty() && self.slots.iter().all(Option::is_none);
            if idle {
                match rx.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        if self.queue.is_empty() && self.slots.iter().all(Option::is_none) {
                            return;
                        }
                        break;
                    }
                }
            }
            self.step();
            self.update_gauges();
        }
    }

    fn update_gauges(&self) {
        let busy = self.slots.iter().filter(|s| s.is_some()).count();
        self.metrics.busy_slots.set(busy as i64);
        self.metrics.kv_cells_used.set(self.ctx.kv_used() as i64);
        self.metrics.queue_length.set(self.queue.len() as i64);
        self.metrics.prefix_entries.set(self.cache.len() as i64);
    }

    fn step(&mut self) {
        self.drop_cancelled();
        self.admit();
        self.share();
        let Some((batch, rows)) = self.build_batch() else {
            // nothing runnable this step (slots waiting on others): avoid spinning
            if self.slots.iter().any(Option::is_some) {
                std::thread::sleep(Duration::from_millis(1));
            }
            return;
        };
        match self.ctx.decode_batch(&batch) {
            Ok(out) => self.after_decode(&batch, &rows, &out),
            Err(e) => {
                tracing::error!(target: "strata_serve::engine", "decode failed: {e}");
                let msg = format!("computing the batch failed: {e}");
                for (slot, _) in rows {
                    self.fail(slot, &msg);
                }
                // slots in the batch without logits rows (prompt chunks)
                let idx: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.slots[i].is_some())
                    .collect();
                for i in idx {
                    let in_batch = self.slots[i].as_ref().is_some_and(|s| {
                        matches!(s.phase, Phase::Prefill { .. } | Phase::Decode { .. })
                    });
                    if in_batch {
                        self.fail(i, &msg);
                    }
                }
            }
        }
    }

    fn drop_cancelled(&mut self) {
        let before = self.queue.len();
        self.queue.retain(|j| !j.events.is_closed());
        let gone = before - self.queue.len();
        if gone > 0 {
            self.waiting.fetch_sub(gone, Ordering::AcqRel);
        }
        for i in 0..self.slots.len() {
            let closed = self.slots[i]
                .as_ref()
                .and_then(|s| self.jobs.get(&s.job))
                .is_some_and(|j| j.events.is_closed());
            if closed {
                self.finish(i, FinishReason::Cancelled, String::new());
            }
        }
    }

    fn free_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_none())
            .collect()
    }

    fn admit(&mut self) {
        while let Some(job) = self.queue.front() {
            let free = self.free_slots();
            if free.len() < job.samplers.len() {
                return;
            }
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            let now = Instant::now();
            self.metrics
                .queue_time
                .observe(now.duration_since(job.received).as_secs_f64());
            let id = self.next_job;
            self.next_job += 1;
            let prompt = Arc::new(job.prompt);
            let leader = free[0];
            let n = job.samplers.len();
            let mut usage = Usage {
                prompt_tokens: prompt.len(),
                ..Usage::default()
            };
            // the longest cached prefix (one token at least is computed, for its logits)
            let mut done = 0;
            if let Some(m) = self.cache.lookup(&prompt, prompt.len() - 1) {
                let seq = self.slots_seq(leader);
                if self.ctx.seq_cp(m.holder, seq, 0..m.len as i32).is_ok() {
                    done = m.len;
                }
            }
            usage.cached_tokens = done;
            let mut phase = Phase::Prefill { done };
            // or wait for a slot reading the same prompt start
            if let Some((of, upto)) = self.shared_start(&prompt, done) {
                phase = Phase::Share { of, upto };
            }
            for (c, sampler) in job.samplers.into_iter().enumerate() {
                let i = free[c];
                let seq = self.slots_seq(i);
                self.slots[i] = Some(Slot {
                    seq,
                    job: id,
                    choice: c,
                    phase: if c == 0 {
                        phase
                    } else {
                        Phase::Follow { leader }
                    },
                    tokens: if c == 0 {
                        prompt[..done].to_vec()
                    } else {
                        Vec::new()
                    },
                    prompt: prompt.clone(),
                    sampler,
                    stream: TextStream::new(job.stop.clone()),
                    n_gen: 0,
                    max_tokens: job.max_tokens,
                    admitted: now,
                    last_token: None,
                });
            }
            self.jobs.insert(
                id,
                JobState {
                    events: job.events,
                    endpoint: job.endpoint,
                    received: job.received,
                    admitted: now,
                    first_token: None,
                    open: n,
                    usage,
                },
            );
        }
    }

    fn slots_seq(&self, i: usize) -> SeqId {
        i as SeqId
    }

    /// A slot reading a prompt that shares more than `have` (and at least
    /// `min_shared`) leading tokens with `prompt`, not yet past them.
    fn shared_start(&self, prompt: &[u32], have: usize) -> Option<(usize, usize)> {
        if self.cfg.min_shared == 0 {
            return None;
        }
        let mut best: Option<(usize, usize)> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            if !matches!(s.phase, Phase::Prefill { .. }) {
                continue;
            }
            let common = s
                .prompt
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count()
                .min(prompt.len() - 1);
            if common >= self.cfg.min_shared
                && common > have + self.cfg.min_shared / 2
                && best.is_none_or(|(_, u)| common > u)
            {
                best = Some((i, common));
            }
        }
        best
    }

    /// Slots waiting to share another's prompt start: copy the cells once
    /// the other has read them; read the prompt themselves if it is gone.
    fn share(&mut self) {
        for i in 0..self.slots.len() {
            let Some(Phase::Share { of, upto }) = self.slots[i].as_ref().map(|s| s.phase) else {
                continue;
            };
            let other = self.slots[of]
                .as_ref()
                .map(|o| (o.phase, o.seq, o.prompt.clone()));
            let Some(slot) = self.slots[i].as_ref() else {
                continue;
            };
            let same = other
                .as_ref()
                .is_some_and(|(_, _, p)| p.len() >= upto && p[..upto] == slot.prompt[..upto]);
            let ready = match other {
                Some((Phase::Prefill { done }, _, _)) => done >= upto,
                Some((Phase::Decode { .. }, _, _)) => true,
                _ => false,
            };
            let seq = slot.seq;
            let have = slot.tokens.len();
            if same && ready {
                let src = other.map_or(0, |o| o.1);
                let ok = self.ctx.seq_rm(Some(seq), ..).is_ok()
                    && self.ctx.seq_cp(src, seq, 0..upto as i32).is_ok();
                if let Some(s) = self.slots[i].as_mut() {
                    if ok {
                        s.tokens = s.prompt[..upto].to_vec();
                        s.phase = Phase::Prefill { done: upto };
                        if let Some(j) = self.jobs.get_mut(&s.job) {
                            j.usage.cached_tokens = upto;
                        }
                    } else {
                        s.phase = Phase::Prefill { done: have };
                    }
                }
            } else if !same || !matches!(other, Some((Phase::Prefill { .. }, _, _))) {
                if let Some(s) = self.slots[i].as_mut() {
                    s.phase = Phase::Prefill { done: have };
                }
            }
        }
    }

    /// The step's batch: every generating slot's next token, then prompt
    /// chunks in slot order within `n_batch` tokens and the free cells.
    /// `rows` maps the batch rows with logits to their slots.
    fn build_batch(&mut self) -> Option<(Batch, Vec<(usize, usize)>)> {
        let n_ctx = self.ctx.options().n_ctx;
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                matches!(
                    self.slots[i].as_ref().map(|s| s.phase),
                    Some(Phase::Decode { .. })
                )
            })
            .collect();
        let prefilling: Vec<(usize, usize)> = self
            .admission_order()
            .into_iter()
            .filter_map(|i| match self.slots[i].as_ref().map(|s| s.phase) {
                Some(Phase::Prefill { done }) => {
                    let left = self.slots[i].as_ref().map_or(0, |s| s.prompt.len() - done);
                    Some((i, left))
                }
                _ => None,
            })
            .collect();
        let want =
            (decoding.len() + prefilling.iter().map(|p| p.1).sum::<usize>()).min(self.cfg.n_batch);
        if want == 0 {
            return None;
        }
        // make room: evict cached prefixes, least recently used first
        while n_ctx - self.ctx.kv_used() < want {
            let Some(h) = self.cache.evict_lru() else {
                break;
            };
            self.release_holder(h);
        }
        let mut free_cells = n_ctx - self.ctx.kv_used();
        // a full cache: the longest generating requests end first
        let mut decoding = decoding;
        while decoding.len() > free_cells {
            let longest = decoding
                .iter()
                .enumerate()
                .max_by_key(|(_, &i)| self.slots[i].as_ref().map_or(0, |s| s.tokens.len()))
                .map(|(k, &i)| (k, i));
            let Some((k, i)) = longest else { break };
            decoding.remove(k);
            self.finish(i, FinishReason::Length, String::new());
            free_cells = n_ctx - self.ctx.kv_used();
        }
        let mut batch = Batch::new();
        let mut rows = Vec::new();
        for &i in &decoding {
            let Some(s) = self.slots[i].as_ref() else {
                continue;
            };
            let Phase::Decode { pending } = s.phase else {
                continue;
            };
            rows.push((i, batch.len()));
            batch.add(pending, s.tokens.len() as i32, &[s.seq], true);
        }
        let mut budget = self
            .cfg
            .n_batch
            .saturating_sub(batch.len())
            .min(free_cells - batch.len());
        for (i, left) in prefilling {
            if budget == 0 {
                break;
            }
            let Some(s) = self.slots[i].as_ref() else {
                continue;
            };
            let Phase::Prefill { done } = s.phase else {
                continue;
            };
            let take = left.min(budget);
            let last = done + take == s.prompt.len();
            batch.add_seq(&s.prompt[done..done + take], done as i32, s.seq, last);
            if last {
                rows.push((i, batch.len() - 1));
            }
            budget -= take;
        }
        if batch.is_empty() {
            return None;
        }
        Some((batch, rows))
    }

    /// Running slots in the order their jobs came (the oldest reads first).
    fn admission_order(&self) -> Vec<usize> {
        let mut v: Vec<(u64, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (s.job, i)))
            .collect();
        v.sort();
        v.into_iter().map(|(_, i)| i).collect()
    }

    fn after_decode(
        &mut self,
        batch: &Batch,
        rows: &[(usize, usize)],
        out: &strata_models::BatchLogits,
    ) {
        // bookkeeping of what entered the cache
        let mut computed = 0u64;
        for i in 0..batch.len() {
            let Some((tok, _pos, seqs, _)) = batch.get(i) else {
                continue;
            };
            let Some(seq) = seqs.iter().next() else {
                continue;
            };
            let slot = seq as usize;
            if let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) {
                s.tokens.push(tok);
                if let Phase::Prefill { done } = &mut s.phase {
                    *done += 1;
                    computed += 1;
                }
            }
        }
        self.metrics.prompt_tokens_computed.inc_by(computed);
        for &(i, row) in rows {
            let Some(logits) = out.get(row) else {
                self.fail(i, "the batch returned no logits for a request (a bug)");
                continue;
            };
            let leader_done = matches!(
                self.slots[i].as_ref().map(|s| s.phase),
                Some(Phase::Prefill { done }) if self.slots[i].as_ref().is_some_and(|s| s.prompt.len() == done)
            );
            if leader_done {
                self.prompt_read(i, logits);
            }
            self.sample_and_emit(i, logits);
        }
    }

    /// Slot `i` has read its whole prompt: cache it, and start its followers.
    fn prompt_read(&mut self, i: usize, logits: &[f32]) {
        let Some(s) = self.slots[i].as_ref() else {
            return;
        };
        let (seq, job, prompt) = (s.seq, s.job, s.prompt.clone());
        self.cache_tokens(seq, &prompt);
        let followers: Vec<usize> = (0..self.slots.len())
            .filter(|&f| {
                self.slots[f]
                    .as_ref()
                    .is_some_and(|s| s.job == job && s.phase == Phase::Follow { leader: i })
            })
            .collect();
        for f in followers {
            let fseq = self.slots_seq(f);
            if let Err(e) = self.ctx.seq_cp(seq, fseq, ..) {
                self.fail(f, &format!("sharing the prompt failed: {e}"));
                continue;
            }
            if let Some(s) = self.slots[f].as_mut() {
                s.tokens = prompt.to_vec();
                s.phase = Phase::Prefill { done: prompt.len() };
            }
            self.sample_and_emit(f, logits);
        }
    }

    /// Keeps `tokens` (positions `0..len` of `seq`) in the prefix cache.
    fn cache_tokens(&mut self, seq: SeqId, tokens: &[u32]) {
        if self.cfg.n_holders == 0 || tokens.is_empty() {
            return;
        }
        let holder = match self.free_holders.pop() {
            Some(h) => h,
            None => match self.cache.evict_lru() {
                Some(h) => {
                    self.release_holder(h);
                    match self.free_holders.pop() {
                        Some(h) => h,
                        None => return,
                    }
                }
                None => return,
            },
        };
        if self
            .ctx
            .seq_cp(seq, holder, 0..tokens.len() as i32)
            .is_err()
        {
            self.free_holders.push(holder);
            return;
        }
        let r = self.cache.insert(tokens, holder);
        for h in r.free {
            self.release_holder(h);
        }
    }

    fn release_holder(&mut self, h: SeqId) {
        let _ = self.ctx.seq_rm(Some(h), ..);
        self.free_holders.push(h);
    }

    fn sample_and_emit(&mut self, i: usize, logits: &[f32]) {
        let n_ctx = self.ctx.options().n_ctx;
        let model = self.ctx.model().clone();
        let tokenizer = &model.tokenizer;
        let Some(s) = self.slots[i].as_mut() else {
            return;
        };
        let sampled = match s.sampler.sample(&logits[..self.n_vocab.min(logits.len())]) {
            Ok(x) => x,
            Err(e) => {
                let msg = format!("sampling failed: {e}");
                self.fail(i, &msg);
                return;
            }
        };
        let id = sampled.token;
        let now = Instant::now();
        if let Some(t) = s.last_token {
            self.metrics
                .tpot
                .observe(now.duration_since(t).as_secs_f64());
        }
        s.last_token = Some(now);
        s.n_gen += 1;
        let job = s.job;
        let choice = s.choice;
        self.metrics.generated_tokens.inc();
        if let Some(j) = self.jobs.get_mut(&job) {
            j.usage.completion_tokens += 1;
            if j.first_token.is_none() {
                j.first_token = Some(now);
                self.metrics
                    .ttft
                    .observe(now.duration_since(j.received).as_secs_f64());
            }
        }
        if let Err(e) = s.sampler.accept(id) {
            let msg = format!("the grammar refused its own token: {e}");
            self.fail(i, &msg);
            return;
        }
        if tokenizer.is_eog(id) {
            let tail = s.stream.finish();
            self.finish(i, FinishReason::Stop, tail);
            return;
        }
        let piece = tokenizer.token_to_piece(id).unwrap_or(&[]);
        let pushed = s.stream.push(piece);
        let events = self.jobs.get(&job).map(|j| j.events.clone());
        if let Some(ev) = &events {
            let _ = ev.send(Event::Token {
                choice,
                text: pushed.text,
                sampled,
            });
        }
        if pushed.stopped || s.sampler.grammar_finished() {
            self.finish(i, FinishReason::Stop, String::new());
            return;
        }
        if s.n_gen >= s.max_tokens || s.tokens.len() + 1 > n_ctx {
            let tail = s.stream.finish();
            self.finish(i, FinishReason::Length, tail);
            return;
        }
        s.phase = Phase::Decode { pending: id };
    }

    fn fail(&mut self, i: usize, msg: &str) {
        if let Some(s) = self.slots[i].as_ref() {
            if let Some(j) = self.jobs.get(&s.job) {
                let _ = j.events.send(Event::Error(msg.to_string()));
            }
        }
        self.finish(i, FinishReason::Error, String::new());
    }

    /// Ends slot `i`: caches what it computed, frees its sequence and, at
    /// the request's last choice, sends its usage and logs it.
    fn finish(&mut self, i: usize, reason: FinishReason, tail: String) {
        let Some(s) = self.slots[i].take() else {
            return;
        };
        if reason != FinishReason::Cancelled
            && reason != FinishReason::Error
            && !s.tokens.is_empty()
        {
            self.cache_tokens(s.seq, &s.tokens);
        }
        let _ = self.ctx.seq_rm(Some(s.seq), ..);
        // followers of a leader that ends before its prompt is read read it themselves
        for f in 0..self.slots.len() {
            if let Some(o) = self.slots[f].as_mut() {
                if o.phase == (Phase::Follow { leader: i }) {
                    o.phase = Phase::Prefill { done: 0 };
                }
            }
        }
        let Some(j) = self.jobs.get_mut(&s.job) else {
            return;
        };
        let _ = j.events.send(Event::Done {
            choice: s.choice,
            reason,
            text: tail,
        });
        j.open -= 1;
        if j.open > 0 {
            return;
        }
        let Some(j) = self.jobs.remove(&s.job) else {
            return;
        };
        let now = Instant::now();
        let mut usage = j.usage;
        usage.total = now.duration_since(j.received).as_secs_f64();
        usage.queued = j.admitted.duration_since(j.received).as_secs_f64();
        usage.ttft = j
            .first_token
            .map_or(usage.total, |t| t.duration_since(j.received).as_secs_f64());
        // counted before the client can see the end of its request
        self.metrics.requests.inc();
        self.metrics
            .prompt_tokens
            .inc_by(usage.prompt_tokens as u64);
        self.metrics
            .prompt_tokens_cached
            .inc_by(usage.cached_tokens as u64);
        self.update_gauges();
        let _ = j.events.send(Event::Usage(usage));
        let _ = s.admitted;
        tracing::info!(
            target: "strata_serve::request",
            id = s.job,
            endpoint = j.endpoint,
            finish = reason.as_str(),
            prompt_tokens = usage.prompt_tokens,
            cached_tokens = usage.cached_tokens,
            completion_tokens = usage.completion_tokens,
            queue_ms = (usage.queued * 1e3).round() as u64,
            ttft_ms = (usage.ttft * 1e3).round() as u64,
            total_ms = (usage.total * 1e3).round() as u64,
            "request done"
        );
    }
}

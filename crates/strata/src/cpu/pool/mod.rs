//! A persistent thread pool with a barrier, ggml style: every thread walks
//! the whole graph, takes its share of each op's rows, and meets the others
//! at a barrier between ops.
//!
//! **Waiting.** A thread waits in three places: a worker for the next job,
//! the caller for the workers to finish one, and every thread at a barrier.
//! Each wait spins for the pool's [`Poll`] budget (llama.cpp's `--poll`
//! level: 0 sleeps at once, [`Poll::DEFAULT`] spins about 100 µs, 100 about
//! 200 µs), then sleeps on a condition variable until woken, so a thread
//! never burns its core for longer than that budget on one wait. On a quiet
//! machine with a core per thread the threads of one graph reach a barrier
//! within microseconds of each other and nobody sleeps.
//!
//! **Shares.** A pool divides its jobs' work into *shares* (the thread count
//! asked for, `-t`) and runs them on at most as many threads
//! ([`PoolConfig`], [`WorkerCtx::shares`]): kernels whose results depend on
//! how the work is divided divide it by shares, so any number of threads
//! gives the same results. The CPU backend runs no more threads than the
//! cores available to the process ([`available_cores`]): more would only
//! share cores, and every barrier would wait for descheduled ones.
//!
//! **Another process on the cores.** When another process takes a core, a
//! thread of the job is descheduled and the others wait at the next barrier
//! until it runs again (0.5 ms or more: a *long wait*). An adaptive pool
//! ([`PoolConfig::adaptive`], the CPU backend's) then also tries the job on
//! one thread fewer, and keeps running that many while it is faster (one
//! busy process beside a 2-thread pool: one thread has a core to itself,
//! instead of two that keep waiting for each other); now and then (after
//! 64 jobs or 0.4 s of job time, whichever comes first, twice as long
//! after each try that loses) it tries one thread more again, and returns
//! to all its threads once the other process is gone. The threads a job
//! leaves out sleep.
//!
//! **More threads than cores.** A pool may run more threads than the cores
//! available (a [`ThreadPool::new`] of 64 on 2 cores); then at most
//! `cores - 1` waiters spin at a time and the others sleep at once (a
//! spinner would take a core from a thread that still has work).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

mod adapt;
mod poll;
#[cfg(test)]
mod tests;
mod wait;

use adapt::Adapt;
pub use poll::{available_cores, default_poll, set_default_poll, Poll};
pub(crate) use wait::SpinBarrier;
use wait::{Sleep, Waits};

/// What each thread of a parallel job gets: its index, the thread count,
/// the share count and the barrier shared by all of them.
pub struct WorkerCtx<'a> {
    /// This thread's index, 0..nth (0 is the calling thread).
    pub ith: usize,
    /// Number of threads in the job.
    pub nth: usize,
    /// The thread count the job's results are defined for (`-t`), at least
    /// `nth`. Kernels whose arithmetic depends on how the work is divided
    /// (split-KV attention) divide it into this many shares and let the `nth`
    /// threads take them round-robin, so their results are those of `shares`
    /// threads whatever number of threads actually runs them. Kernels whose
    /// results do not depend on the division split by `nth` ([`WorkerCtx::split`]).
    pub shares: usize,
    barrier: &'a SpinBarrier,
    waits: &'a Waits,
}

impl WorkerCtx<'_> {
    /// Waits until every thread of the job reaches this point.
    pub fn barrier(&self) {
        self.barrier.wait(self.nth, self.waits)
    }

    /// This thread's share `start..end` of `n` items (contiguous chunks).
    pub fn split(&self, n: usize) -> std::ops::Range<usize> {
        let per = n.div_ceil(self.nth.max(1));
        let start = (self.ith * per).min(n);
        start..(start + per).min(n)
    }

    /// The shares of [`WorkerCtx::shares`] this thread takes: `ith`,
    /// `ith + nth`, `ith + 2·nth`, ... below `shares`.
    pub fn my_shares(&self) -> std::iter::StepBy<std::ops::Range<usize>> {
        (self.ith..self.shares.max(self.nth)).step_by(self.nth.max(1))
    }
}

type JobRef = *const (dyn Fn(&WorkerCtx<'_>) + Sync);

struct Shared {
    generation: AtomicU64,
    job: Mutex<Option<SendJob>>,
    /// Threads taking part in the current job (1..=n_threads; the others
    /// skip it), set with the job.
    active: AtomicUsize,
    /// Where workers sleep between jobs.
    job_sleep: Sleep,
    done: AtomicUsize,
    /// Where the caller sleeps until the workers are done.
    done_sleep: Sleep,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    barrier: SpinBarrier,
    waits: Waits,
    n_threads: usize,
    shares: usize,
    /// The pool was made adaptive ([`PoolConfig::adaptive`]).
    adaptive: bool,
    /// How many threads the next jobs take part, for an adaptive pool of
    /// more than one thread.
    adapt: Option<Mutex<Adapt>>,
}

#[derive(Clone, Copy)]
struct SendJob(JobRef);
// SAFETY: the pointee is `Sync`, and `ThreadPool::run` keeps it alive until
// every worker has finished with it.
unsafe impl Send for SendJob {}

/// How a [`ThreadPool`] is made: its threads, the shares of work they
/// divide ([`WorkerCtx::shares`]), how they wait ([`Poll`]) and whether a
/// job may leave some out ([`PoolConfig::adaptive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Threads in all, the caller included (1 to [`MAX_THREADS`]; clamped,
    /// and at most `shares`).
    pub threads: usize,
    /// The thread count the jobs' results are defined for (1 to
    /// [`MAX_THREADS`]; clamped).
    pub shares: usize,
    /// How long waiting threads spin before they sleep.
    pub poll: Poll,
    /// Whether the pool may run a job on fewer of its threads while that is
    /// faster (when another process keeps descheduling them; module docs).
    /// Results do not change (the job's `shares` stay), but a job sees
    /// `nth` below `threads`; off, every job runs on every thread.
    pub adaptive: bool,
}

impl PoolConfig {
    /// `n` threads running `n` shares, every job on all of them, at the
    /// [`default_poll`] level.
    pub fn threads(n: usize) -> PoolConfig {
        PoolConfig {
            threads: n,
            shares: n,
            poll: default_poll(),
            adaptive: false,
        }
    }

    /// `shares` shares on as many threads as there are shares, but no more
    /// than the [`available_cores`], adaptive, at the [`default_poll`]
    /// level: what the CPU backend runs for `-t shares`.
    pub fn on_available_cores(shares: usize) -> PoolConfig {
        PoolConfig {
            threads: shares.min(available_cores()),
            shares,
            poll: default_poll(),
            adaptive: true,
        }
    }
}

/// A fixed set of worker threads that run one job at a time with the caller.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use strata::cpu::ThreadPool;
/// let pool = ThreadPool::new(3);
/// let hits = AtomicUsize::new(0);
/// pool.run(&|ctx| {
///     hits.fetch_add(ctx.ith + 1, Ordering::Relaxed);
///     ctx.barrier();
/// });
/// assert_eq!(hits.load(Ordering::Relaxed), 1 + 2 + 3);
/// ```
pub struct ThreadPool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

/// Most threads a pool runs (ggml's `GGML_MAX_N_THREADS`); more are capped.
pub const MAX_THREADS: usize = 512;

impl ThreadPool {
    /// A pool of `n_threads` threads in all (the caller is one of them),
    /// capped at [`MAX_THREADS`], each taking one share of every job, at
    /// the [`default_poll`] level. When the system cannot start that many,
    /// the pool has as many as it could start (at least the caller).
    pub fn new(n_threads: usize) -> ThreadPool {
        ThreadPool::with_config(PoolConfig::threads(n_threads))
    }

    /// A pool as `config` says (clamped: 1 to [`MAX_THREADS`] shares, 1 to
    /// `shares` threads). When the system cannot start that many threads,
    /// the pool has as many as it could start (at least the caller); the
    /// shares, and so the results, stay as asked.
    pub fn with_config(config: PoolConfig) -> ThreadPool {
        let shares = config.shares.clamp(1, MAX_THREADS);
        let mut config = PoolConfig {
            threads: config.threads.clamp(1, shares),
            shares,
            ..config
        };
        loop {
            match ThreadPool::start(config) {
                Ok(pool) => return pool,
                Err(started) => {
                    tracing::warn!(
                        "could start only {started} of {} CPU threads: using {started}",
                        config.threads
                    );
                    config.threads = started.max(1);
                }
            }
        }
    }

    /// Starts the threads, or says how many (the caller included) could be
    /// started before one failed (those are stopped again).
    fn start(c: PoolConfig) -> std::result::Result<ThreadPool, usize> {
        let n_threads = c.threads;
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            active: AtomicUsize::new(n_threads),
            job_sleep: Sleep::new(),
            done: AtomicUsize::new(0),
            done_sleep: Sleep::new(),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            barrier: SpinBarrier::new(),
            waits: Waits::new(c.poll, n_threads, available_cores()),
            n_threads,
            shares: c.shares,
            adaptive: c.adaptive,
            adapt: (c.adaptive && n_threads > 1).then(|| Mutex::new(Adapt::new(n_threads))),
        });
        let mut pool = ThreadPool {
            shared,
            handles: Vec::with_capacity(n_threads - 1),
        };
        for ith in 1..n_threads {
            let s = pool.shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("strata-cpu-{ith}"))
                .spawn(move || worker(s, ith));
            match spawned {
                Ok(h) => pool.handles.push(h),
                // Dropping the pool stops and joins the threads started.
                Err(_) => return Err(ith),
            }
        }
        Ok(pool)
    }

    /// Number of threads, the caller included.
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// The threads the next job runs on: [`ThreadPool::n_threads`], or
    /// fewer in an adaptive pool while that is faster.
    pub fn active_threads(&self) -> usize {
        self.shared
            .adapt
            .as_ref()
            .map_or(self.shared.n_threads, |a| {
                a.lock().unwrap_or_else(|e| e.into_inner()).active
            })
    }

    /// The thread count the jobs' results are defined for
    /// ([`WorkerCtx::shares`]): at least [`ThreadPool::n_threads`].
    pub fn shares(&self) -> usize {
        self.shared.shares
    }

    /// How long waiting threads spin before they sleep.
    pub fn poll(&self) -> Poll {
        self.shared.waits.poll()
    }

    /// The pool's configuration (its threads as started, its current poll level).
    pub fn config(&self) -> PoolConfig {
        PoolConfig {
            threads: self.shared.n_threads,
            shares: self.shared.shares,
            poll: self.poll(),
            adaptive: self.shared.adaptive,
        }
    }

    /// Changes the poll level (from the next wait on).
    pub fn set_poll(&self, poll: Poll) {
        self.shared.waits.set_poll(poll);
    }

    /// Runs `job` on the calling thread alone (thread 0 of 1, the pool's
    /// shares unchanged), waking no worker: for jobs so small that waking
    /// the workers would cost more than they save. Results are those of
    /// [`ThreadPool::run`] (kernels split by `nth` do not depend on the
    /// division; those that do divide by `shares`). Returns `false` if the
    /// job panicked. Like [`ThreadPool::run`], one caller at a time: the
    /// two share the barrier.
    pub fn run_alone(&self, job: &(dyn Fn(&WorkerCtx<'_>) + Sync)) -> bool {
        let s = &*self.shared;
        let ctx = WorkerCtx {
            ith: 0,
            nth: 1,
            shares: s.shares,
            barrier: &s.barrier,
            waits: &s.waits,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&ctx))).is_ok()
    }

    /// Runs `job` on the active threads (the caller as thread 0; all of
    /// them unless the pool is adaptive) and returns when all are done.
    /// Returns `false` if a worker panicked.
    pub fn run(&self, job: &(dyn Fn(&WorkerCtx<'_>) + Sync)) -> bool {
        let s = &*self.shared;
        let mut adapt = s
            .adapt
            .as_ref()
            .map(|a| a.lock().unwrap_or_else(|e| e.into_inner()));
        let n = adapt.as_ref().map_or(s.n_threads, |a| a.active);
        let start = adapt.as_ref().map(|_| {
            let long = s.waits.long_waits.0.load(Ordering::Relaxed);
            (Instant::now(), s.barrier.phase(), long)
        });
        if n > 1 {
            // SAFETY: the lifetime is erased only for the duration of this call:
            // we wait below until all n-1 workers have reported done, after
            // which no worker touches the pointer again.
            let erased: JobRef =
                unsafe { std::mem::transmute::<&(dyn Fn(&WorkerCtx<'_>) + Sync), JobRef>(job) };
            // Every worker of the last job reported done before the last
            // `run` returned: nobody else writes `done` now.
            s.done.store(0, Ordering::Relaxed);
            {
                // The job, its thread count and its generation change
                // together: a worker reads all three under the lock.
                let mut slot = s.job.lock().unwrap_or_else(|e| e.into_inner());
                *slot = Some(SendJob(erased));
                s.active.store(n, Ordering::Relaxed);
                s.generation.fetch_add(1, Ordering::Release);
            }
            s.job_sleep.wake_all();
        }
        let ctx = WorkerCtx {
            ith: 0,
            nth: n,
            shares: s.shares,
            barrier: &s.barrier,
            waits: &s.waits,
        };
        let main_ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&ctx))).is_ok();
        if n > 1 {
            s.waits.wait_until(&s.done_sleep, true, || {
                s.done.load(Ordering::Acquire) >= n - 1
            });
            *s.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        if let (Some(a), Some((t0, phase, long))) = (adapt.as_mut(), start) {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let barriers = s.barrier.phase().wrapping_sub(phase) as u64;
            let long = s.waits.long_waits.0.load(Ordering::Relaxed) - long;
            a.record(ns, barriers, long);
        }
        main_ok && !s.panicked.swap(false, Ordering::AcqRel)
    }
}

fn worker(s: Arc<Shared>, ith: usize) {
    let mut seen = 0u64;
    loop {
        // A thread the last job left out sleeps at once: the next one
        // likely leaves it out too.
        let spin = ith < s.active.load(Ordering::Relaxed);
        s.waits.wait_until(&s.job_sleep, spin, || {
            s.generation.load(Ordering::Acquire) != seen || s.shutdown.load(Ordering::Acquire)
        });
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        let (n, job) = {
            let slot = s.job.lock().unwrap_or_else(|e| e.into_inner());
            seen = s.generation.load(Ordering::Acquire);
            (s.active.load(Ordering::Relaxed), *slot)
        };
        // Left out of this job (or a job already over, which this thread
        // was left out of: the caller waits for the threads it counts).
        if ith >= n || job.is_none() {
            continue;
        }
        if let Some(SendJob(ptr)) = job {
            let ctx = WorkerCtx {
                ith,
                nth: n,
                shares: s.shares,
                barrier: &s.barrier,
                waits: &s.waits,
            };
            // SAFETY: `run` keeps the job alive until `done` reaches n-1.
            let f = unsafe { &*ptr };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ctx))).is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        if s.done.fetch_add(1, Ordering::AcqRel) + 1 == n - 1 {
            s.done_sleep.wake_all();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.job_sleep.wake_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

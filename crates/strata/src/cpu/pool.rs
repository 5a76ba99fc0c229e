//! A persistent thread pool with a spinning barrier, ggml style: every thread
//! walks the whole graph, takes its share of each op's rows, and meets the
//! others at a barrier between ops.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// What each thread of a parallel job gets: its index, the thread count and
/// the barrier shared by all of them.
pub struct WorkerCtx<'a> {
    /// This thread's index, 0..nth (0 is the calling thread).
    pub ith: usize,
    /// Number of threads in the job.
    pub nth: usize,
    barrier: &'a SpinBarrier,
}

impl WorkerCtx<'_> {
    /// Waits until every thread of the job reaches this point.
    pub fn barrier(&self) {
        self.barrier.wait(self.nth)
    }

    /// This thread's share `start..end` of `n` items (contiguous chunks).
    pub fn split(&self, n: usize) -> std::ops::Range<usize> {
        let per = n.div_ceil(self.nth.max(1));
        let start = (self.ith * per).min(n);
        start..(start + per).min(n)
    }
}

/// A value alone on its cache line (the barrier's arrival counter and its
/// phase are written by different threads at different times).
#[repr(align(64))]
struct Line<T>(T);

/// How long a barrier waiter spins before it starts yielding its core, and
/// how long it yields before it parks. Threads of one graph normally arrive
/// within microseconds of each other, so neither limit is reached on a
/// machine with a core per thread. On an oversubscribed machine a waiter
/// that gives up its core early is itself descheduled and must be woken
/// (measured: microseconds to milliseconds per barrier with a 20 us spin,
/// versus ~0.1-1.5 us when spinning as long as the old 16K-pause loop), so
/// the spin is as long as before (~0.3 ms); the park only bounds how long a
/// core can burn on one barrier (the old loop yielded forever).
const SPIN_FOR: std::time::Duration = std::time::Duration::from_micros(300);
const YIELD_FOR: std::time::Duration = std::time::Duration::from_millis(20);

/// A sense-reversing barrier: spins briefly, then yields, then parks on a
/// condition variable (the last arriver wakes parked threads only when
/// there are any, so the fast path takes no lock).
pub(crate) struct SpinBarrier {
    count: Line<AtomicUsize>,
    phase: Line<AtomicUsize>,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl SpinBarrier {
    fn new() -> SpinBarrier {
        SpinBarrier {
            count: Line(AtomicUsize::new(0)),
            phase: Line(AtomicUsize::new(0)),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn wait(&self, n: usize) {
        if n <= 1 {
            return;
        }
        let phase = self.phase.0.load(Ordering::Acquire);
        if self.count.0.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.count.0.store(0, Ordering::Relaxed);
            self.phase.0.fetch_add(1, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                // Taking the lock orders this wake after any waiter's check
                // of the phase under the lock (no lost wake-up).
                drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
                self.cv.notify_all();
            }
            return;
        }
        let passed = || self.phase.0.load(Ordering::Acquire) != phase;
        // Spin (checking the clock every 64 rounds), then yield, then park.
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            for _ in 0..64 {
                if passed() {
                    return;
                }
                std::hint::spin_loop();
            }
            spins += 1;
            if spins.is_multiple_of(4) && start.elapsed() > SPIN_FOR {
                break;
            }
        }
        while start.elapsed() < YIELD_FOR {
            if passed() {
                return;
            }
            std::thread::yield_now();
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while self.phase.0.load(Ordering::SeqCst) == phase {
            guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

type JobRef = *const (dyn Fn(&WorkerCtx<'_>) + Sync);

struct Shared {
    generation: AtomicU64,
    job: Mutex<Option<SendJob>>,
    wake: Condvar,
    done: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    barrier: SpinBarrier,
    n_threads: usize,
}

#[derive(Clone, Copy)]
struct SendJob(JobRef);
// SAFETY: the pointee is `Sync`, and `ThreadPool::run` keeps it alive until
// every worker has finished with it.
unsafe impl Send for SendJob {}

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
    /// capped at [`MAX_THREADS`]. When the system cannot start that many, the
    /// pool has as many as it could start (at least the caller).
    pub fn new(n_threads: usize) -> ThreadPool {
        let mut n = n_threads.clamp(1, MAX_THREADS);
        loop {
            match ThreadPool::start(n) {
                Ok(pool) => return pool,
                Err(started) => {
                    tracing::warn!(
                        "could start only {started} of {n} CPU threads: using {started}"
                    );
                    n = started.max(1);
                }
            }
        }
    }

    /// Starts `n_threads` threads, or says how many (the caller included)
    /// could be started before one failed (those are stopped again).
    fn start(n_threads: usize) -> std::result::Result<ThreadPool, usize> {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            barrier: SpinBarrier::new(),
            n_threads,
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

    /// Runs `job` on every thread (the caller as thread 0) and returns when all
    /// are done. Returns `false` if a worker panicked.
    pub fn run(&self, job: &(dyn Fn(&WorkerCtx<'_>) + Sync)) -> bool {
        let s = &*self.shared;
        let n = s.n_threads;
        if n > 1 {
            // SAFETY: the lifetime is erased only for the duration of this call:
            // we wait below until all n-1 workers have reported done, after
            // which no worker touches the pointer again.
            let erased: JobRef =
                unsafe { std::mem::transmute::<&(dyn Fn(&WorkerCtx<'_>) + Sync), JobRef>(job) };
            s.done.store(0, Ordering::Release);
            {
                let mut slot = s.job.lock().unwrap_or_else(|e| e.into_inner());
                *slot = Some(SendJob(erased));
                s.generation.fetch_add(1, Ordering::AcqRel);
            }
            s.wake.notify_all();
        }
        let ctx = WorkerCtx {
            ith: 0,
            nth: n,
            barrier: &s.barrier,
        };
        let main_ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&ctx))).is_ok();
        if n > 1 {
            let mut spins = 0u32;
            while s.done.load(Ordering::Acquire) < n - 1 {
                spins += 1;
                if spins < 1 << 12 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            *s.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        main_ok && !s.panicked.swap(false, Ordering::AcqRel)
    }
}

fn worker(s: Arc<Shared>, ith: usize) {
    let mut seen = 0u64;
    loop {
        // Spin briefly for the next job, then sleep on the condvar.
        let mut spins = 0u32;
        while s.generation.load(Ordering::Acquire) == seen
            && !s.shutdown.load(Ordering::Acquire)
            && spins < 1 << 12
        {
            spins += 1;
            std::hint::spin_loop();
        }
        let job = {
            let mut slot = s.job.lock().unwrap_or_else(|e| e.into_inner());
            while s.generation.load(Ordering::Acquire) == seen
                && !s.shutdown.load(Ordering::Acquire)
            {
                slot = s.wake.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            seen = s.generation.load(Ordering::Acquire);
            *slot
        };
        if let Some(SendJob(ptr)) = job {
            let ctx = WorkerCtx {
                ith,
                nth: s.n_threads,
                barrier: &s.barrier,
            };
            // SAFETY: `run` keeps the job alive until `done` reaches n-1.
            let f = unsafe { &*ptr };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ctx))).is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        s.done.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let _slot = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 item 9: a thread count past MAX_THREADS is capped, not
    /// spawned (nor a panic when the system refuses threads).
    #[test]
    fn thread_count_is_capped() {
        let pool = ThreadPool::new(100_000);
        assert_eq!(pool.n_threads(), MAX_THREADS);
        let n = AtomicUsize::new(0);
        assert!(pool.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(n.load(Ordering::Relaxed), MAX_THREADS);
        assert_eq!(ThreadPool::new(0).n_threads(), 1);
    }

    #[test]
    fn many_jobs_with_barriers() {
        for n in 1..=4 {
            let pool = ThreadPool::new(n);
            let counter = AtomicUsize::new(0);
            for round in 0..200 {
                pool.run(&|ctx| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    ctx.barrier();
                    // after the barrier everybody sees all increments of this round
                    assert!(counter.load(Ordering::Relaxed) >= (round + 1) * ctx.nth);
                    ctx.barrier();
                });
            }
            assert_eq!(counter.load(Ordering::Relaxed), 200 * n);
        }
    }

    #[test]
    fn split_covers_everything_once() {
        let b = SpinBarrier::new();
        for nth in 1..6 {
            for n in 0..40 {
                let mut seen = vec![0; n];
                for ith in 0..nth {
                    let ctx = WorkerCtx {
                        ith,
                        nth,
                        barrier: &b,
                    };
                    for i in ctx.split(n) {
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1));
            }
        }
    }

    #[test]
    fn a_panicking_job_is_reported_not_hung() {
        let pool = ThreadPool::new(2);
        let ok = pool.run(&|ctx| {
            if ctx.ith == 1 {
                panic!("boom");
            }
        });
        assert!(!ok);
        assert!(pool.run(&|_| {}));
    }
}

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
//! instead of two that keep waiting for each other); now and then it tries
//! one thread more again, and returns to all its threads once the other
//! process is gone. The threads a job leaves out sleep.
//!
//! **More threads than cores.** A pool may run more threads than the cores
//! available (a [`ThreadPool::new`] of 64 on 2 cores); then at most
//! `cores - 1` waiters spin at a time and the others sleep at once (a
//! spinner would take a core from a thread that still has work).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The cores this process may run on: [`std::thread::available_parallelism`],
/// which on Linux honours the calling thread's affinity mask (`taskset`,
/// cpusets) and the cgroup CPU quota (v1 and v2; a quota of 1.5 CPUs counts
/// as 1), and 1 when it cannot tell. It is recomputed at every call (a few
/// file reads): not for hot code.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How long waiting threads spin before they sleep: llama.cpp's `--poll`
/// level, 0 to 100 (0: sleep at once; the default 50 spins about 100 µs;
/// 100 spins longest, about 200 µs). Spinning answers fastest when the
/// awaited thread is running on another core; sleeping leaves the core to
/// other work (another process, or a pool thread the waiter would slow).
///
/// ```
/// use strata::cpu::Poll;
/// let p: Poll = "20".parse().unwrap();
/// assert_eq!(p.level(), 20);
/// assert!("101".parse::<Poll>().is_err());
/// assert_eq!(Poll::default(), Poll::DEFAULT);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Poll(u8);

/// Spin time per poll level.
const SPIN_PER_LEVEL: Duration = Duration::from_micros(2);

impl Poll {
    /// No spinning: a waiter sleeps at once.
    pub const NONE: Poll = Poll(0);
    /// llama.cpp's default level, 50.
    pub const DEFAULT: Poll = Poll(50);
    /// The longest spin, level 100.
    pub const MAX: Poll = Poll(100);

    /// The level `level`.
    ///
    /// Errors: [`crate::Error::BadValue`] above 100.
    pub fn new(level: u64) -> crate::Result<Poll> {
        match u8::try_from(level) {
            Ok(l) if l <= Poll::MAX.0 => Ok(Poll(l)),
            _ => Err(crate::Error::BadValue {
                arg: "--poll".into(),
                value: level.to_string(),
                expected: "a polling level from 0 (sleep at once) to 100 (spin longest)".into(),
            }),
        }
    }

    /// The level, 0 to 100.
    pub fn level(self) -> u8 {
        self.0
    }

    /// How long a waiter spins before it sleeps.
    pub fn spin_time(self) -> Duration {
        SPIN_PER_LEVEL * u32::from(self.0)
    }
}

impl Default for Poll {
    fn default() -> Poll {
        Poll::DEFAULT
    }
}

impl std::fmt::Display for Poll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Poll {
    type Err = crate::Error;

    /// A level written in decimal, 0 to 100.
    fn from_str(s: &str) -> crate::Result<Poll> {
        let level = s
            .trim()
            .parse::<u64>()
            .map_err(|_| crate::Error::BadValue {
                arg: "--poll".into(),
                value: format!("'{s}'"),
                expected: "a polling level from 0 (sleep at once) to 100 (spin longest)".into(),
            })?;
        Poll::new(level)
    }
}

/// The process-wide default level ([`default_poll`]).
static DEFAULT_POLL: AtomicU8 = AtomicU8::new(Poll::DEFAULT.0);

/// The poll level pools start with when none is given ([`ThreadPool::new`],
/// every [`crate::cpu::CpuBackend`]): [`Poll::DEFAULT`] unless changed by
/// [`set_default_poll`].
pub fn default_poll() -> Poll {
    Poll(DEFAULT_POLL.load(Ordering::Relaxed))
}

/// Sets the poll level of the pools created from now on (the CLI's
/// `--poll`); running pools keep theirs ([`ThreadPool::set_poll`] changes one).
pub fn set_default_poll(poll: Poll) {
    DEFAULT_POLL.store(poll.0, Ordering::Relaxed);
}

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

/// A value alone on its cache line (the barrier's arrival counter, its
/// phase and the sleeper count are written by different threads at
/// different times).
#[repr(align(64))]
struct Line<T>(T);

/// A barrier wait at least this long (a *long wait*) means that a thread
/// it waited for was descheduled (another process took its core): threads
/// of one job otherwise arrive within microseconds of each other.
const LONG_WAIT: Duration = Duration::from_micros(500);

/// How the threads of one pool wait: the spin budget (from the poll level)
/// and, when the pool has more threads than cores, how many may spin at once.
struct Waits {
    /// The spin budget in nanoseconds.
    spin_ns: AtomicU64,
    /// The poll level the budget came from.
    poll: AtomicU8,
    /// Waiters spinning now (counted only when `max_spinners` is bounded).
    spinners: Line<AtomicUsize>,
    /// Most waiters spinning at once; `usize::MAX` when every thread has a core.
    max_spinners: usize,
    /// Long barrier waits so far (rare on calm cores).
    long_waits: Line<AtomicU64>,
}

impl Waits {
    fn new(poll: Poll, threads: usize, cores: usize) -> Waits {
        let w = Waits {
            spin_ns: AtomicU64::new(0),
            poll: AtomicU8::new(0),
            spinners: Line(AtomicUsize::new(0)),
            max_spinners: if threads <= cores {
                usize::MAX
            } else {
                cores.saturating_sub(1)
            },
            long_waits: Line(AtomicU64::new(0)),
        };
        w.set_poll(poll);
        w
    }

    fn set_poll(&self, poll: Poll) {
        let ns = u64::try_from(poll.spin_time().as_nanos()).unwrap_or(u64::MAX);
        self.spin_ns.store(ns, Ordering::Relaxed);
        self.poll.store(poll.0, Ordering::Relaxed);
    }

    fn poll(&self) -> Poll {
        Poll(self.poll.load(Ordering::Relaxed))
    }

    /// Records a long barrier wait.
    fn long_wait(&self) {
        self.long_waits.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Returns once `ready()` holds: spins for the budget (when `spin` and
    /// a spin slot is free), then sleeps on `sleep`. Whoever makes `ready()`
    /// true must then call `sleep.wake_all()`. Returns whether the wait
    /// lasted a [`LONG_WAIT`].
    fn wait_until(&self, sleep: &Sleep, spin: bool, ready: impl Fn() -> bool) -> bool {
        if ready() {
            return false;
        }
        let start = Instant::now();
        let budget = Duration::from_nanos(self.spin_ns.load(Ordering::Relaxed));
        if spin && !budget.is_zero() {
            let done = if self.max_spinners == usize::MAX {
                spin_until(&ready, start, budget)
            } else {
                let slot = self.spinners.0.fetch_add(1, Ordering::Relaxed) < self.max_spinners;
                let done = slot && spin_until(&ready, start, budget);
                self.spinners.0.fetch_sub(1, Ordering::Relaxed);
                done
            };
            // A spin is shorter than a long wait (at most 200 µs).
            if done {
                return false;
            }
        }
        sleep.sleep_until(ready);
        start.elapsed() >= LONG_WAIT
    }
}

/// Spins from `start` until `ready()` or until `budget` has passed; returns
/// `ready()`.
fn spin_until(ready: &impl Fn() -> bool, start: Instant, budget: Duration) -> bool {
    loop {
        // Read the clock every 32 rounds (a few microseconds of pauses).
        for _ in 0..32 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= budget {
            return ready();
        }
    }
}

/// Where waiters sleep once they have spun their budget: a condition
/// variable, and a count of sleepers so that waking costs nothing (no lock,
/// no system call) when nobody sleeps.
struct Sleep {
    sleepers: Line<AtomicUsize>,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Sleep {
    fn new() -> Sleep {
        Sleep {
            sleepers: Line(AtomicUsize::new(0)),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Sleeps until `ready()` holds.
    fn sleep_until(&self, ready: impl Fn() -> bool) {
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.0.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `wake_all`: either this check sees the
        // waker's store, or the waker sees this sleeper (and then takes the
        // lock, which it can only get once this thread waits on the condvar).
        fence(Ordering::SeqCst);
        while !ready() {
            guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.sleepers.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Wakes every sleeper; call after the store that makes them ready.
    fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.0.load(Ordering::Relaxed) > 0 {
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.cv.notify_all();
        }
    }
}

/// A sense-reversing barrier whose waiters spin, then sleep ([`Waits`]).
pub(crate) struct SpinBarrier {
    count: Line<AtomicUsize>,
    phase: Line<AtomicUsize>,
    sleep: Sleep,
}

impl SpinBarrier {
    fn new() -> SpinBarrier {
        SpinBarrier {
            count: Line(AtomicUsize::new(0)),
            phase: Line(AtomicUsize::new(0)),
            sleep: Sleep::new(),
        }
    }

    /// How many times the barrier has opened.
    fn phase(&self) -> usize {
        self.phase.0.load(Ordering::Relaxed)
    }

    fn wait(&self, n: usize, waits: &Waits) {
        if n <= 1 {
            // Counted all the same (an adaptive pool compares jobs by their
            // barriers, whatever their threads); nobody else touches it.
            let p = self.phase.0.load(Ordering::Relaxed);
            self.phase.0.store(p.wrapping_add(1), Ordering::Relaxed);
            return;
        }
        let phase = self.phase.0.load(Ordering::Acquire);
        if self.count.0.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.count.0.store(0, Ordering::Relaxed);
            self.phase.0.fetch_add(1, Ordering::Release);
            self.sleep.wake_all();
            return;
        }
        let ready = || self.phase.0.load(Ordering::Acquire) != phase;
        if waits.wait_until(&self.sleep, true, ready) {
            waits.long_wait();
        }
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

/// Jobs after which a thread count's mean job time is no longer compared.
const STALE_JOBS: u64 = 64;
/// A pool's first jobs, not compared (they touch memory for the first time).
const WARM_UP_JOBS: u64 = 2;
/// Jobs between tries of one thread more, at first and at most (doubling
/// in between while the try loses).
const PROBE_MIN: u64 = 64;
const PROBE_MAX: u64 = 1024;

/// The adaptive choice of how many threads take part in a job: the mean
/// time of recent jobs per thread count, compared among jobs of one kind
/// (their barrier count: a graph's decode steps all have the same).
struct Adapt {
    /// Threads for the next job.
    active: usize,
    /// Threads of the last job.
    last: usize,
    /// Whether the last job had a long wait.
    last_long: bool,
    /// Jobs run so far.
    jobs: u64,
    /// Barriers in the jobs measured (a new kind clears the means).
    kind: u64,
    /// Per thread count (index k - 1): mean job nanoseconds (0: none) and
    /// the job that last updated it.
    mean: Vec<(u64, u64)>,
    /// Job at which to try one thread more.
    probe_at: u64,
    /// Jobs between such tries.
    probe_every: u64,
}

impl Adapt {
    fn new(n_threads: usize) -> Adapt {
        Adapt {
            active: n_threads,
            last: n_threads,
            last_long: false,
            jobs: 0,
            kind: u64::MAX,
            mean: vec![(0, 0); n_threads],
            probe_at: PROBE_MIN,
            probe_every: PROBE_MIN,
        }
    }

    /// The mean job time with `k` threads, if measured lately.
    fn fresh(&self, k: usize) -> Option<u64> {
        let (ns, at) = *self.mean.get(k.checked_sub(1)?)?;
        (ns > 0 && self.jobs - at <= STALE_JOBS).then_some(ns)
    }

    /// Records a job of `ns` nanoseconds and `barriers` barriers on
    /// `self.active` threads, `long` of whose barrier waits were long, and
    /// chooses the threads of the next job.
    fn record(&mut self, ns: u64, barriers: u64, long: u64) {
        let n = self.mean.len();
        let k = self.active;
        self.jobs += 1;
        let ns = ns.max(1);
        let mean = self.mean[k - 1].0;
        // Another kind of job (another barrier count, or a time 16 times
        // the mean or a 16th of it: a prompt among decoding steps; a thread
        // descheduled now and then makes a job up to ten times slower): the
        // times measured so far do not compare with it.
        let far = |a: u64, b: u64| a / 16 >= b;
        if self.jobs <= WARM_UP_JOBS
            || barriers != self.kind
            || (mean > 0 && (far(ns, mean) || far(mean, ns)))
        {
            self.kind = barriers;
            self.mean.iter_mut().for_each(|m| *m = (0, 0));
            self.mean[k - 1] = (ns, self.jobs);
            self.last = k;
            self.last_long = long > 0;
            return;
        }
        // A thread descheduled in a job slower than usual, or in two jobs
        // in a row (rare on calm cores).
        let hit = long > 0 && k == self.last && (ns > mean + mean / 4 || self.last_long);
        self.last_long = long > 0;
        // Then try one thread fewer, unless measured lately.
        let try_fewer = hit && k > 1 && self.fresh(k - 1).is_none();
        let m = &mut self.mean[k - 1];
        // The first job after a change of thread count starts the mean
        // afresh (the last one is older than the jobs in between). The job
        // that sends the pool to try fewer threads is left out: fewer
        // threads are compared with the usual time of this many (when the
        // slowness lasts, the next jobs here bring it in).
        if m.0 == 0 || k != self.last {
            m.0 = ns;
        } else if !try_fewer {
            m.0 = (3 * m.0 + ns) / 4;
        }
        m.1 = self.jobs;
        self.last = k;
        let here = m.0;
        // Better by a margin (a job's time is noisy).
        let better = |other: Option<u64>| other.is_some_and(|o| o + o / 16 < here);
        // The next try of one thread more, at least `probe_every` jobs
        // after going down.
        let wait_to_probe = |a: &mut Adapt| a.probe_at = a.probe_at.max(a.jobs + a.probe_every);
        self.active = if k > 1 && better(self.fresh(k - 1)) {
            wait_to_probe(self);
            k - 1
        } else if k < n && better(self.fresh(k + 1)) {
            self.probe_every = PROBE_MIN;
            k + 1
        } else if try_fewer {
            wait_to_probe(self);
            k - 1
        } else if k < n && self.jobs >= self.probe_at {
            self.probe_at = self.jobs + self.probe_every;
            self.probe_every = (self.probe_every * 2).min(PROBE_MAX);
            k + 1
        } else {
            k
        };
    }
}

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

    /// Runs `jobs` jobs of `barriers` barriers each; after every barrier each
    /// thread checks that all threads arrived (so a barrier that let a
    /// thread through early fails, it does not just run slowly).
    fn barrier_jobs(pool: &ThreadPool, jobs: usize, barriers: usize) {
        let n = pool.n_threads();
        let arrived = AtomicUsize::new(0);
        let bad = AtomicUsize::new(0);
        for job in 0..jobs {
            assert!(pool.run(&|ctx| {
                assert_eq!(ctx.nth, n);
                for b in 0..barriers {
                    arrived.fetch_add(1, Ordering::Relaxed);
                    ctx.barrier();
                    let want = (job * barriers + b + 1) * n;
                    if arrived.load(Ordering::Relaxed) < want {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                    // Nobody starts the next round before all have checked.
                    ctx.barrier();
                }
            }));
        }
        assert_eq!(bad.load(Ordering::Relaxed), 0);
        assert_eq!(arrived.load(Ordering::Relaxed), jobs * barriers * n);
    }

    /// [`barrier_jobs`] for a pool whose jobs may run on fewer threads.
    fn barrier_jobs_any(pool: &ThreadPool, jobs: usize, barriers: usize) {
        let arrived = AtomicUsize::new(0);
        let bad = AtomicUsize::new(0);
        for _ in 0..jobs {
            arrived.store(0, Ordering::Relaxed);
            assert!(pool.run(&|ctx| {
                for b in 0..barriers {
                    arrived.fetch_add(1, Ordering::Relaxed);
                    ctx.barrier();
                    if arrived.load(Ordering::Relaxed) < (b + 1) * ctx.nth {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                    ctx.barrier();
                }
            }));
        }
        assert_eq!(bad.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn many_jobs_with_barriers() {
        for n in 1..=4 {
            barrier_jobs(&ThreadPool::new(n), 200, 2);
        }
    }

    /// Poll level 0: every waiter sleeps at once, and no wake-up is lost
    /// (a lost one hangs the test).
    #[test]
    fn barriers_hold_with_poll_0() {
        for n in [2, 3, 5] {
            let pool = ThreadPool::with_config(PoolConfig {
                poll: Poll::NONE,
                ..PoolConfig::threads(n)
            });
            assert_eq!(pool.poll(), Poll::NONE);
            barrier_jobs(&pool, 300, 4);
        }
    }

    /// Issue 47: far more threads than this machine's cores still finish
    /// barrier-heavy jobs (the waiters sleep instead of spinning against
    /// the threads that have work), at every poll level.
    #[test]
    fn sixty_four_threads_finish_barrier_heavy_jobs() {
        let pool = ThreadPool::new(64);
        assert_eq!(pool.n_threads(), 64);
        barrier_jobs(&pool, 30, 10);
        for poll in [Poll::NONE, Poll::MAX] {
            pool.set_poll(poll);
            barrier_jobs(&pool, 10, 10);
        }
    }

    /// A wait that lasts a [`LONG_WAIT`] says so; a short one does not.
    #[test]
    fn long_waits_are_told() {
        let waits = Waits::new(Poll::DEFAULT, 2, 2);
        let sleep = Sleep::new();
        assert!(!waits.wait_until(&sleep, true, || true));
        for spin in [false, true] {
            let flag = AtomicBool::new(false);
            let long = std::thread::scope(|sc| {
                sc.spawn(|| {
                    std::thread::sleep(LONG_WAIT * 2);
                    flag.store(true, Ordering::Release);
                    sleep.wake_all();
                });
                waits.wait_until(&sleep, spin, || flag.load(Ordering::Acquire))
            });
            assert!(long);
        }
    }

    /// Feeds `adapt` jobs whose time (µs) and long waits depend on the
    /// thread count; returns the thread counts it chose, job by job.
    fn drive(adapt: &mut Adapt, jobs: usize, cost: impl Fn(usize) -> (u64, u64)) -> Vec<usize> {
        (0..jobs)
            .map(|_| {
                let k = adapt.active;
                let (us, long) = cost(k);
                adapt.record(us * 1000, 500, long);
                k
            })
            .collect()
    }

    /// The adaptive choice of threads: all of them on calm cores; one fewer
    /// when that is faster because another process keeps descheduling one;
    /// all again once it is gone; a prompt among decoding steps does not
    /// confuse it.
    #[test]
    fn adaptive_pools_leave_out_threads_only_while_faster() {
        let mut a = Adapt::new(2);
        // Calm: 2 threads always (nothing to try: no long waits).
        assert!(drive(&mut a, 500, |_| (2700, 0)).iter().all(|&k| k == 2));
        // Long waits but no slower: a try of 1 thread now and then (at most
        // once per STALE_JOBS), slower, back to 2.
        let ks = drive(&mut a, 100, |k| if k == 2 { (2700, 1) } else { (4300, 0) });
        assert!(ks.iter().filter(|&&k| k == 1).count() <= 2, "{ks:?}");
        assert_eq!(a.active, 2);
        // One busy process: 2 threads wait for each other (8 ms, long
        // waits), 1 thread has a core to itself (4.8 ms).
        let busy = |k: usize| if k == 2 { (8000, 3) } else { (4800, 0) };
        let ks = drive(&mut a, 1000, busy);
        let down = ks.iter().position(|&k| k == 1).expect("went down");
        assert!(down <= 3, "{down} jobs to notice");
        let up = down + ks[down..].iter().position(|&k| k == 2).expect("tried 2");
        assert!(
            up - down >= PROBE_MIN as usize - 1,
            "tried 2 again after {}",
            up - down
        );
        let twos = ks[10..].iter().filter(|&&k| k == 2).count();
        assert!(twos <= 20, "tries of 2 threads back off: {twos}");
        assert_eq!(a.active, 1);
        // It is gone: back to 2 threads at the next try (within PROBE_MAX).
        let ks = drive(&mut a, 2 * PROBE_MAX as usize, |k| {
            if k == 2 {
                (2700, 0)
            } else {
                (4300, 0)
            }
        });
        let back = ks.iter().position(|&k| k == 2).expect("tried 2 again");
        assert!(back <= PROBE_MAX as usize);
        assert!(ks[back..].iter().all(|&k| k == 2), "{ks:?}");
        // A prompt (100 ms) at 2 threads, a long wait in it, then decoding
        // steps: not sent to 1 thread by the prompt's time.
        a.record(100_000_000, 500, 1);
        let ks = drive(&mut a, 100, |k| if k == 2 { (2700, 0) } else { (4300, 0) });
        assert!(ks.iter().all(|&k| k == 2), "{ks:?}");

        // Slow first jobs (memory touched for the first time) with long
        // waits: not taken for contention.
        let mut a = Adapt::new(2);
        a.record(10_000_000, 500, 2);
        a.record(3_000_000, 500, 1);
        let ks = drive(&mut a, 60, |k| if k == 2 { (2700, 0) } else { (4300, 0) });
        assert!(ks.iter().all(|&k| k == 2), "{ks:?}");

        // One thread descheduled once in a calm run (a job twice as long):
        // one try of 1 thread, then 2 again at once.
        let mut a = Adapt::new(2);
        drive(&mut a, 50, |_| (2700, 0));
        a.record(6_000_000, 500, 1);
        let ks = drive(&mut a, 40, |k| if k == 2 { (2700, 0) } else { (4300, 0) });
        assert_eq!(ks.iter().filter(|&&k| k == 1).count(), 1, "{ks:?}");
        assert_eq!(a.active, 2);
    }

    /// An adaptive pool runs a job on the threads its policy chose (tested
    /// above), the others sitting it out, with the same shares; a late
    /// thread (as a descheduled one) gives the others a long wait, counted.
    #[test]
    fn an_adaptive_pool_runs_jobs_on_fewer_threads_with_the_same_shares() {
        let pool = ThreadPool::with_config(PoolConfig {
            threads: 2,
            shares: 5,
            poll: Poll::DEFAULT,
            adaptive: true,
        });
        assert!(pool.run(&|ctx| {
            if ctx.ith == 1 {
                std::thread::sleep(LONG_WAIT * 2);
            }
            ctx.barrier();
        }));
        assert!(pool.shared.waits.long_waits.0.load(Ordering::Relaxed) >= 1);
        let job = |seen: &Mutex<Vec<(usize, usize, usize)>>, hits: &[AtomicUsize]| {
            assert!(pool.run(&|ctx| {
                seen.lock().unwrap().push((ctx.ith, ctx.nth, ctx.shares));
                for j in ctx.my_shares() {
                    hits[j].fetch_add(1, Ordering::Relaxed);
                }
                ctx.barrier();
            }));
        };
        for k in [1, 2, 1] {
            pool.shared.adapt.as_ref().unwrap().lock().unwrap().active = k;
            assert_eq!(pool.active_threads(), k);
            let seen = Mutex::new(Vec::new());
            let hits: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
            let phase = pool.shared.barrier.phase();
            job(&seen, &hits);
            // One barrier, counted on one thread as on two.
            assert_eq!(pool.shared.barrier.phase(), phase + 1);
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            let want: Vec<_> = (0..k).map(|i| (i, k, 5)).collect();
            assert_eq!(seen, want);
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
        // Jobs keep running correctly whatever the threads chosen.
        barrier_jobs_any(&pool, 100, 3);
        // A plain pool runs every job on every thread.
        let plain = ThreadPool::with_config(PoolConfig {
            adaptive: false,
            ..pool.config()
        });
        assert!(plain.shared.adapt.is_none());
        assert_eq!(plain.active_threads(), 2);
    }

    /// The poll level can change between jobs; 1 thread never waits.
    #[test]
    fn poll_changes_between_jobs() {
        let pool = ThreadPool::new(2);
        assert_eq!(pool.poll(), default_poll());
        for level in [0, 1, 50, 100] {
            pool.set_poll(Poll::new(level).unwrap());
            assert_eq!(u64::from(pool.poll().level()), level);
            barrier_jobs(&pool, 20, 3);
        }
        barrier_jobs(&ThreadPool::new(1), 5, 5);
    }

    #[test]
    fn poll_levels_parse_and_bound_the_spin() {
        assert_eq!(Poll::new(0).unwrap(), Poll::NONE);
        assert_eq!(Poll::new(100).unwrap(), Poll::MAX);
        assert!(Poll::new(101).is_err());
        assert!(Poll::new(u64::MAX).is_err());
        assert_eq!(" 7 ".parse::<Poll>().unwrap().level(), 7);
        for bad in ["", "-1", "x", "256", "1e3"] {
            let e = bad.parse::<Poll>().unwrap_err().to_string();
            assert!(
                e.contains("--poll") && e.contains("0 (sleep at once) to 100"),
                "{e}"
            );
        }
        assert_eq!(Poll::NONE.spin_time(), Duration::ZERO);
        assert!(Poll::DEFAULT.spin_time() < Poll::MAX.spin_time());
        assert!(Poll::MAX.spin_time() <= Duration::from_millis(1));
        assert_eq!(Poll::DEFAULT.to_string(), "50");
    }

    /// Shares: a pool of 2 threads running 7 shares gives every share to
    /// exactly one thread, and the threads see the share count.
    #[test]
    fn shares_run_on_fewer_threads() {
        let pool = ThreadPool::with_config(PoolConfig {
            threads: 2,
            shares: 7,
            poll: Poll::DEFAULT,
            adaptive: false,
        });
        assert_eq!((pool.n_threads(), pool.shares()), (2, 7));
        let hits: Vec<AtomicUsize> = (0..7).map(|_| AtomicUsize::new(0)).collect();
        assert!(pool.run(&|ctx| {
            assert_eq!((ctx.nth, ctx.shares), (2, 7));
            for j in ctx.my_shares() {
                hits[j].fetch_add(1, Ordering::Relaxed);
            }
        }));
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        // Threads are clamped to the shares, shares to MAX_THREADS.
        let p = ThreadPool::with_config(PoolConfig {
            threads: 9,
            shares: 3,
            poll: Poll::NONE,
            adaptive: true,
        });
        assert_eq!((p.n_threads(), p.shares(), p.active_threads()), (3, 3, 3));
        let p = ThreadPool::with_config(PoolConfig {
            threads: 1,
            shares: usize::MAX,
            poll: Poll::NONE,
            adaptive: true,
        });
        assert_eq!((p.n_threads(), p.shares()), (1, MAX_THREADS));
        assert!(p.config().adaptive);
        assert!(p.run(&|ctx| assert_eq!((ctx.nth, ctx.shares), (1, MAX_THREADS))));
        let c = PoolConfig::on_available_cores(10_000);
        assert_eq!(
            (c.threads, c.shares),
            (available_cores().min(10_000), 10_000)
        );
    }

    /// The cores counted follow the calling thread's affinity mask (what
    /// `taskset` and cpusets set): pinned to one CPU, one core.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn available_cores_follow_the_affinity_mask() {
        let all = available_cores();
        assert!(all >= 1);
        std::thread::spawn(move || {
            // SAFETY: plain libc calls on a zeroed cpu_set_t owned here, for
            // this thread (pid 0) only.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(
                    libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                    0
                );
                let allowed = libc::CPU_COUNT(&set) as usize;
                // The quota may lower the count below the mask, never above.
                assert!(all <= allowed, "{all} cores counted, {allowed} in the mask");
                let first = (0..libc::CPU_SETSIZE as usize)
                    .find(|&c| libc::CPU_ISSET(c, &set))
                    .expect("some CPU is allowed");
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(first, &mut one);
                assert_eq!(
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
                    0
                );
            }
            assert_eq!(available_cores(), 1);
            // A pool made now sees one core: its two threads are
            // oversubscribed, and still meet at barriers.
            barrier_jobs(&ThreadPool::new(2), 50, 4);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn split_covers_everything_once() {
        let b = SpinBarrier::new();
        let waits = Waits::new(Poll::DEFAULT, 1, 1);
        for nth in 1..6 {
            for n in 0..40 {
                let mut seen = vec![0; n];
                for ith in 0..nth {
                    let ctx = WorkerCtx {
                        ith,
                        nth,
                        shares: nth,
                        barrier: &b,
                        waits: &waits,
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

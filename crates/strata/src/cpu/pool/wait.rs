//! Waiting: the spin-then-sleep primitive, long-wait detection and the barrier.

use std::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Poll;

/// A value alone on its cache line (the barrier's arrival counter, its
/// phase and the sleeper count are written by different threads at
/// different times).
#[repr(align(64))]
pub(super) struct Line<T>(pub(super) T);

/// A barrier wait at least this long (a *long wait*) means that a thread
/// it waited for was descheduled (another process took its core): threads
/// of one job otherwise arrive within microseconds of each other.
pub(super) const LONG_WAIT: Duration = Duration::from_micros(500);

/// How the threads of one pool wait: the spin budget (from the poll level)
/// and, when the pool has more threads than cores, how many may spin at once.
pub(super) struct Waits {
    /// The spin budget in nanoseconds.
    pub(super) spin_ns: AtomicU64,
    /// The poll level the budget came from.
    pub(super) poll: AtomicU8,
    /// Waiters spinning now (counted only when `max_spinners` is bounded).
    pub(super) spinners: Line<AtomicUsize>,
    /// Most waiters spinning at once; `usize::MAX` when every thread has a core.
    pub(super) max_spinners: usize,
    /// Long barrier waits so far (rare on calm cores).
    pub(super) long_waits: Line<AtomicU64>,
}

impl Waits {
    pub(super) fn new(poll: Poll, threads: usize, cores: usize) -> Waits {
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

    pub(super) fn set_poll(&self, poll: Poll) {
        let ns = u64::try_from(poll.spin_time().as_nanos()).unwrap_or(u64::MAX);
        self.spin_ns.store(ns, Ordering::Relaxed);
        self.poll.store(poll.0, Ordering::Relaxed);
    }

    pub(super) fn poll(&self) -> Poll {
        Poll(self.poll.load(Ordering::Relaxed))
    }

    /// Records a long barrier wait.
    pub(super) fn long_wait(&self) {
        self.long_waits.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Returns once `ready()` holds: spins for the budget (when `spin` and
    /// a spin slot is free), then sleeps on `sleep`. Whoever makes `ready()`
    /// true must then call `sleep.wake_all()`. Returns whether the wait
    /// lasted a [`LONG_WAIT`].
    pub(super) fn wait_until(&self, sleep: &Sleep, spin: bool, ready: impl Fn() -> bool) -> bool {
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
pub(super) fn spin_until(ready: &impl Fn() -> bool, start: Instant, budget: Duration) -> bool {
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
pub(super) struct Sleep {
    pub(super) sleepers: Line<AtomicUsize>,
    pub(super) lock: Mutex<()>,
    pub(super) cv: Condvar,
}

impl Sleep {
    pub(super) fn new() -> Sleep {
        Sleep {
            sleepers: Line(AtomicUsize::new(0)),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Sleeps until `ready()` holds.
    pub(super) fn sleep_until(&self, ready: impl Fn() -> bool) {
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
    pub(super) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.0.load(Ordering::Relaxed) > 0 {
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.cv.notify_all();
        }
    }
}

/// A sense-reversing barrier whose waiters spin, then sleep ([`Waits`]).
pub(crate) struct SpinBarrier {
    pub(super) count: Line<AtomicUsize>,
    pub(super) phase: Line<AtomicUsize>,
    pub(super) sleep: Sleep,
}

impl SpinBarrier {
    pub(super) fn new() -> SpinBarrier {
        SpinBarrier {
            count: Line(AtomicUsize::new(0)),
            phase: Line(AtomicUsize::new(0)),
            sleep: Sleep::new(),
        }
    }

    /// How many times the barrier has opened.
    pub(super) fn phase(&self) -> usize {
        self.phase.0.load(Ordering::Relaxed)
    }

    pub(super) fn wait(&self, n: usize, waits: &Waits) {
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

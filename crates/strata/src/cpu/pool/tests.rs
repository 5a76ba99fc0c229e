//! The pool's tests.

use super::adapt::{PROBE_MAX, PROBE_MIN, PROBE_MIN_JOBS, PROBE_NS_MIN};
use super::wait::LONG_WAIT;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
    // (4.8 ms jobs: PROBE_MIN of them before PROBE_NS_MIN)
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

/// A one-job try of 1 thread, then one slow job (another process for a
/// moment) on the first job back at 2 threads: the 2-thread mean measured
/// just before is kept, so the pool stays at 2 instead of going back to
/// 1 thread until the next try (as measured on a 4-sequence decode: 50
/// jobs on one thread).
#[test]
fn one_slow_job_after_a_return_keeps_all_threads() {
    let mut a = Adapt::new(2);
    drive(&mut a, 70, |_| (4300, 0));
    // A long wait in a slower job: one try of 1 thread (slower).
    a.record(5_700_000, 500, 1);
    assert_eq!(a.active, 1);
    a.record(8_000_000, 500, 0);
    assert_eq!(a.active, 2);
    // The first job back: slow, without a long wait.
    a.record(11_000_000, 500, 0);
    let ks = drive(&mut a, 60, |k| if k == 2 { (4300, 0) } else { (8000, 0) });
    assert!(ks.iter().filter(|&&k| k == 1).count() <= 1, "{ks:?}");
    assert_eq!(a.active, 2);
}

/// Long jobs (a batch of 32 decodes, 30 ms each) after a moment of
/// contention: back on 2 threads after PROBE_NS_MIN of job time, not after
/// PROBE_MIN jobs (two seconds); and a prompt run on 1 thread does not
/// keep the decoding steps after it there for PROBE_MIN jobs.
#[test]
fn fewer_threads_are_tried_again_after_enough_job_time() {
    let mut a = Adapt::new(2);
    drive(&mut a, 20, |_| (30_000, 0));
    // Contention for a few jobs: 2 threads wait for each other.
    let ks = drive(
        &mut a,
        6,
        |k| if k == 2 { (50_000, 3) } else { (40_000, 0) },
    );
    assert!(ks.contains(&1), "went down: {ks:?}");
    // Calm again: 2 threads are faster.
    let ks = drive(
        &mut a,
        40,
        |k| if k == 2 { (30_000, 0) } else { (55_000, 0) },
    );
    let back = ks.iter().position(|&k| k == 2).expect("tried 2 again");
    let by_time = (PROBE_NS_MIN / 55_000_000) as usize + 1;
    assert!(back <= by_time.max(PROBE_MIN_JOBS as usize), "{ks:?}");
    assert!(ks[back..].iter().all(|&k| k == 2), "{ks:?}");

    // Down to 1 thread in a prompt (one busy process, 400 ms jobs).
    let mut a = Adapt::new(2);
    drive(&mut a, 10, |_| (300_000, 0));
    let ks = drive(
        &mut a,
        8,
        |k| if k == 2 { (600_000, 4) } else { (420_000, 0) },
    );
    assert_eq!(a.active, 1, "{ks:?}");
    // Then decoding steps (another barrier count, 17 ms on 1 thread) on
    // calm cores: all threads again after PROBE_NS_MIN of them, not
    // PROBE_MIN.
    let mut ks = Vec::new();
    for _ in 0..40 {
        ks.push(a.active);
        let us = if a.active == 2 { 10_000 } else { 17_000 };
        a.record(us * 1000, 450, 0);
    }
    let back = ks.iter().position(|&k| k == 2).expect("tried 2 again");
    assert!(back <= (PROBE_NS_MIN / 17_000_000) as usize + 1, "{ks:?}");
    assert!(back < PROBE_MIN as usize / 2, "{ks:?}");
    assert!(ks[back..].iter().all(|&k| k == 2), "{ks:?}");
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

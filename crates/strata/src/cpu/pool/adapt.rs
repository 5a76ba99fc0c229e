//! The adaptive thread count of a pool that another process contends with.

/// Jobs after which a thread count's mean job time is no longer compared.
pub(super) const STALE_JOBS: u64 = 64;
/// A pool's first jobs, not compared (they touch memory for the first time).
pub(super) const WARM_UP_JOBS: u64 = 2;
/// Jobs between tries of one thread more, at first and at most (doubling
/// in between while the try loses).
pub(super) const PROBE_MIN: u64 = 64;
pub(super) const PROBE_MAX: u64 = 1024;
/// Job time (ns) spent on fewer threads before the next try of one
/// thread more, at first and at most (doubling as [`PROBE_MIN`]'s jobs):
/// whichever of the two comes first. Long jobs (a batch of 32 decodes:
/// 30 ms; a prompt chunk: 300 ms) would otherwise stay on fewer threads
/// for seconds after a moment of contention. Jobs under 6 ms (one
/// sequence's decoding steps) reach [`PROBE_MIN`] first, as before: a try
/// that loses to a busy process costs several such jobs (a 100 ms start
/// measured 16-token runs at 63-86 % of the job-count rule beside `yes`).
pub(super) const PROBE_NS_MIN: u64 = 400_000_000;
pub(super) const PROBE_NS_MAX: u64 = 6_400_000_000;
/// Jobs on fewer threads before a try by time (a prompt chunk's jobs
/// each last longer than [`PROBE_NS_MIN`]).
pub(super) const PROBE_MIN_JOBS: u64 = 8;

/// The adaptive choice of how many threads take part in a job: the mean
/// time of recent jobs per thread count, compared among jobs of one kind
/// (their barrier count: a graph's decode steps all have the same).
pub(super) struct Adapt {
    /// Threads for the next job.
    pub(super) active: usize,
    /// Threads of the last job.
    pub(super) last: usize,
    /// Whether the last job had a long wait.
    pub(super) last_long: bool,
    /// Jobs run so far.
    pub(super) jobs: u64,
    /// Barriers in the jobs measured (a new kind clears the means).
    pub(super) kind: u64,
    /// Per thread count (index k - 1): mean job nanoseconds (0: none) and
    /// the job that last updated it.
    pub(super) mean: Vec<(u64, u64)>,
    /// Job at which to try one thread more.
    pub(super) probe_at: u64,
    /// Jobs between such tries.
    pub(super) probe_every: u64,
    /// Job time and jobs on fewer threads since the last change of thread
    /// count, and the time at which to try one thread more
    /// ([`PROBE_NS_MIN`]).
    pub(super) spent: u64,
    pub(super) held: u64,
    pub(super) probe_ns: u64,
}

impl Adapt {
    pub(super) fn new(n_threads: usize) -> Adapt {
        Adapt {
            active: n_threads,
            last: n_threads,
            last_long: false,
            jobs: 0,
            kind: u64::MAX,
            mean: vec![(0, 0); n_threads],
            probe_at: PROBE_MIN,
            probe_every: PROBE_MIN,
            spent: 0,
            held: 0,
            probe_ns: PROBE_NS_MIN,
        }
    }

    /// The mean job time with `k` threads, if measured lately.
    pub(super) fn fresh(&self, k: usize) -> Option<u64> {
        let (ns, at) = *self.mean.get(k.checked_sub(1)?)?;
        (ns > 0 && self.jobs - at <= STALE_JOBS).then_some(ns)
    }

    /// Records a job of `ns` nanoseconds and `barriers` barriers on
    /// `self.active` threads, `long` of whose barrier waits were long, and
    /// chooses the threads of the next job.
    pub(super) fn record(&mut self, ns: u64, barriers: u64, long: u64) {
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
        // afresh (the last one is older than the jobs in between), unless
        // it was measured lately (a return after a job or a few
        // elsewhere): then this job is blended in, so that one slow job
        // does not send the pool back at once (measured: after a one-job
        // try of one thread, a first two-thread job 2.5 times the mean
        // kept a 4-sequence decode on one thread for 50 jobs). The job
        // that sends the pool to try fewer threads is left out: fewer
        // threads are compared with the usual time of this many (when the
        // slowness lasts, the next jobs here bring it in).
        if m.0 == 0 || k != self.last {
            let lately = m.0 > 0 && self.jobs - m.1 <= STALE_JOBS;
            m.0 = if lately { (3 * m.0 + ns) / 4 } else { ns };
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
        let wait_to_probe = |a: &mut Adapt| {
            a.probe_at = a.probe_at.max(a.jobs + a.probe_every);
            (a.spent, a.held) = (0, 0);
        };
        if k < n {
            self.spent += ns;
            self.held += 1;
        }
        let by_time = self.spent >= self.probe_ns && self.held >= PROBE_MIN_JOBS;
        self.active = if k > 1 && better(self.fresh(k - 1)) {
            wait_to_probe(self);
            k - 1
        } else if k < n && better(self.fresh(k + 1)) {
            self.probe_every = PROBE_MIN;
            self.probe_ns = PROBE_NS_MIN;
            (self.spent, self.held) = (0, 0);
            k + 1
        } else if try_fewer {
            wait_to_probe(self);
            k - 1
        } else if k < n && (self.jobs >= self.probe_at || by_time) {
            self.probe_at = self.jobs + self.probe_every;
            self.probe_every = (self.probe_every * 2).min(PROBE_MAX);
            self.probe_ns = (self.probe_ns * 2).min(PROBE_NS_MAX);
            (self.spent, self.held) = (0, 0);
            k + 1
        } else {
            if k == n {
                // All threads and staying (a try of one more that won, or
                // calm): the next contention's tries start soon again.
                self.probe_every = PROBE_MIN;
                self.probe_ns = PROBE_NS_MIN;
            }
            k
        };
    }
}

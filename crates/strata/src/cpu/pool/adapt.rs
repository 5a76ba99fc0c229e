//! The adaptive thread count of a pool that another process contends with.

/// Jobs after which a thread count's mean job time is no longer compared.
pub(super) const STALE_JOBS: u64 = 64;
/// A pool's first jobs, not compared (they touch memory for the first time).
pub(super) const WARM_UP_JOBS: u64 = 2;
/// Jobs between tries of one thread more, at first and at most (doubling
/// in between while the try loses).
pub(super) const PROBE_MIN: u64 = 64;
pub(super) const PROBE_MAX: u64 = 1024;

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

//! On-CPU time of the calling thread, for the probes that must not count
//! the time other processes on a shared host take from them.

/// This thread's nanoseconds on a CPU so far (`/proc/thread-self/schedstat`).
pub fn cpu_ns() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").map_err(|e| e.to_string())?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("unexpected schedstat {s:?}"))
}

/// Five samples of `iters` calls of `f` (after one call to warm up), each
/// the on-CPU nanoseconds per call ([`cpu_ns`]), and their minimum, the
/// figure to compare between builds.
pub fn time_calls<E: From<String>>(
    iters: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<(f64, Vec<f64>), E> {
    f()?;
    let mut all = Vec::new();
    for _ in 0..5 {
        let c0 = cpu_ns()?;
        for _ in 0..iters {
            f()?;
        }
        all.push((cpu_ns()? - c0) as f64 / iters.max(1) as f64);
    }
    Ok((all.iter().copied().fold(f64::MAX, f64::min), all))
}

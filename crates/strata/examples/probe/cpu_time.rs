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

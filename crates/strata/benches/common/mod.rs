//! Helpers shared by strata's benches.

/// Deterministic values in [-1, 1) (xorshift; the same inputs every run).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    strata::testkit::xorshift(seed)
        .take(n)
        .map(|s| (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

/// A benchmark group `name` for the kernels' long runs: flat sampling, 10
/// samples, 300 ms warm-up, 1 s measurement.
#[allow(dead_code)] // not every bench makes groups
pub fn flat_group<'a>(
    c: &'a mut criterion::Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sampling_mode(criterion::SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    group
}

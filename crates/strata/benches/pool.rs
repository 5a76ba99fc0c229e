//! CPU thread-pool overheads: one empty `ThreadPool::run` (wake the workers,
//! run nothing, wait for them) and one barrier inside a job, with 1 and 2
//! threads. `cargo bench -p strata --bench pool`.
//!
//! `barrier/tN` times a job of 1000 barriers: criterion's "elem/s" is
//! barriers per second, and time / 1000 is the cost of one barrier. A graph
//! pays one barrier per node (plus one for a converted matmul operand) and
//! one `run` per graph.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use strata::cpu::ThreadPool;

const BARRIERS: u64 = 1000;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("run_empty", format!("t{threads}")), |b| {
            b.iter(|| pool.run(&|_| {}))
        });
        group.throughput(Throughput::Elements(BARRIERS));
        group.bench_function(BenchmarkId::new("barrier", format!("t{threads}")), |b| {
            b.iter(|| {
                pool.run(&|ctx| {
                    for _ in 0..BARRIERS {
                        ctx.barrier();
                    }
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! One-row dot products (`vec_dot_fn_for`) per quantized weight type
//! against its `vec_dot_type` partner, at the scalar reference level and at
//! this CPU's best level: the kernel alone, without MUL_MAT's activation
//! quantization, threading or output writes.
//!
//! `cargo bench -p strata --bench vec_dot` (append `-- q2_k` etc. to
//! filter). Rows of 4096 elements (both rows fit in L1/L2); throughput in
//! elements per second. `STRATA_BENCH_ALL_LEVELS=1` adds every supported
//! level (e.g. `avx2` on an AVX-512 machine).

mod common;

use common::values;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use strata::conformance::QUANT_WEIGHTS as TYPES;
use strata::isa::{self, Isa};
use strata::quant::simd;
use strata::quant::{self, QK_K};
use strata::DType;

const N: usize = 16 * QK_K;

fn quantize(t: DType, v: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(v.len())];
    simd::quantize_row_fn_for(Isa::Scalar, t).unwrap()(v, &mut q);
    q
}

fn bench(c: &mut Criterion) {
    let best = isa::detected();
    let all = std::env::var_os("STRATA_BENCH_ALL_LEVELS").is_some();
    let levels: Vec<Isa> = Isa::ALL
        .into_iter()
        .filter(|&i| i.is_supported() && (all || i == Isa::Scalar || i == best))
        .collect();
    let mut group = c.benchmark_group("vec_dot");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N as u64));
    for t in TYPES {
        let x = quantize(t, &values(N, 1));
        let y = quantize(quant::vec_dot_type(t), &values(N, 2));
        for &isa in &levels {
            let dot = simd::vec_dot_fn_for(isa, t).unwrap();
            let id = BenchmarkId::new(format!("{t}"), format!("n{N}/{isa}"));
            group.bench_function(id, |b| b.iter(|| dot(N, black_box(&x), black_box(&y))));
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

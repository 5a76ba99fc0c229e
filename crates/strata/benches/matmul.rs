//! MUL_MAT throughput (GFLOP/s = 2·m·k·n per second) per weight type at
//! SmolLM2-135M's shapes, on the CPU backend, at the scalar reference level
//! and at this CPU's best SIMD level, 1 and 2 threads.
//!
//! `cargo bench -p strata --bench matmul` (append `-- q4_1` etc. to filter).
//!
//! The float weight types (group `matmul_float`) run at the model's five
//! shapes for n = 1 and n = 512 (the 49152-row head at n = 1 only), at this
//! CPU's best level with 1 and 2 threads (the float GEMM / GEMV).
//! The graph is built and allocated once per case; only `graph_compute` is
//! timed. Criterion reports throughput in "elem/s": one element is one
//! flop. `STRATA_BENCH_ALL_LEVELS=1` adds every supported level at 1 thread.
//! "Best level" is the one `STRATA_ISA` names where it is set (e.g.
//! `STRATA_ISA=avx2` for the AVX2 table on an AVX-512 host).
//!
//! The block-quantized types run every SmolLM2 weight shape (m × k = 576 ×
//! 576, 192 × 576, 1536 × 576, 576 × 1536, 49152 × 576) at n = 1 and 512,
//! both with the weight in an ordinary CPU buffer and packed in a
//! `CPU_PACKED` buffer (ids `…/packed_<level>_t<threads>`, at the best level
//! with 1 and 2 threads), so packed and unpacked figures come from one run.
//!
//! The K-quants and IQ4 types (group `matmul_k`) need rows that divide into
//! 256-element super-blocks, which SmolLM2's 576 does not: they run at the
//! projections of a 1024-wide model with an FFN of 2816 (the width of the
//! repository's generated bench models), n = 1 and 512, plain and packed
//! (where the type has packed kernels at this level), 1 and 2 threads.

mod common;

use common::{flat_group, values};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::sync::Arc;
use strata::backend::alloc_tensors;
use strata::backend::{Backend, Buffer};
use strata::cpu::{alloc_graph_host, packed_buffer_type, CpuBackend};
use strata::isa::{self, Isa};
use strata::quant::packed;
use strata::{ops, DType, Graph, Tensor};

use strata::conformance::K_AND_IQ4_QUANTS;
use strata::conformance::LEGACY_QUANTS as TYPES;

const FLOAT_TYPES: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

/// (m, k): SmolLM2-135M's projections: attention q/o, k/v, FFN up/gate,
/// FFN down, output head.
const FLOAT_SHAPES: [(usize, usize); 5] = [
    (576, 576),
    (192, 576),
    (1536, 576),
    (576, 1536),
    (49152, 576),
];

/// (m, k, n): the FFN up/gate (1536 × 576), FFN down (576 × 1536) and the
/// output head (49152 × 576) for one token; the FFN shapes for a 512-token
/// prompt.
const SHAPES: [(usize, usize, usize); 5] = [
    (1536, 576, 1),
    (576, 1536, 1),
    (49152, 576, 1),
    (1536, 576, 512),
    (576, 1536, 512),
];

/// SmolLM2-135M's weight shapes (m, k): attention q / o, k / v, FFN up /
/// gate, FFN down, output head.
const MODEL_MK: [(usize, usize); 5] = [
    (576, 576),
    (192, 576),
    (1536, 576),
    (576, 1536),
    (49152, 576),
];

/// (m, k) for the K-quants and IQ4 types: attention projections, FFN up /
/// gate and FFN down of a 1024-wide model with an FFN of 2816.
const K_MK: [(usize, usize); 3] = [(1024, 1024), (2816, 1024), (1024, 2816)];

/// The (m, k, n) cases of a weight type.
fn shapes(t: DType) -> Vec<(usize, usize, usize)> {
    if !packed::is_packable(t) {
        return SHAPES.to_vec();
    }
    [1, 512]
        .into_iter()
        .flat_map(|n| MODEL_MK.map(|(m, k)| (m, k, n)))
        .collect()
}

/// The graph of `a [k, m]` (type `t`, in a packed buffer when `packed`)
/// times F32 `b [k, n]`, allocated on the host with deterministic inputs;
/// and the buffers, which must outlive it.
fn mul_mat_graph(
    t: DType,
    m: usize,
    k: usize,
    n: usize,
    packed: bool,
) -> (Graph, Vec<Arc<dyn Buffer>>) {
    let a = Tensor::new(t, &[k, m]).unwrap();
    let mut bufs = if packed {
        alloc_tensors(std::slice::from_ref(&a), &packed_buffer_type())
            .unwrap()
            .into_vec()
    } else {
        Vec::new()
    };
    let b = Tensor::new(DType::F32, &[k, n]).unwrap();
    let out = ops::mul_mat(&a, &b).unwrap();
    let graph = Graph::build(&[out]);
    bufs.extend(alloc_graph_host(&graph).unwrap());
    a.write_f32(&values(k * m, 1)).unwrap();
    b.write_f32(&values(k * n, 2)).unwrap();
    (graph, bufs)
}

/// Times `graph_compute` of `graph` on a CPU backend at `isa` with
/// `threads`, as `<t>/m<m>_k<k>_n<n>/<run><isa>_t<threads>`.
fn bench_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    t: DType,
    (m, k, n): (usize, usize, usize),
    run: &str,
    (isa, threads): (Isa, usize),
    graph: &Graph,
) {
    let mut cpu = CpuBackend::new(threads);
    cpu.set_isa(isa).unwrap();
    let id = BenchmarkId::new(
        format!("{t}"),
        format!("m{m}_k{k}_n{n}/{run}{isa}_t{threads}"),
    );
    group.bench_function(id, |bch| bch.iter(|| cpu.graph_compute(graph).unwrap()));
}

fn bench(c: &mut Criterion) {
    let best = isa::active();
    let mut runs: Vec<(Isa, usize)> = vec![(Isa::Scalar, 1), (best, 1), (best, 2)];
    if std::env::var_os("STRATA_BENCH_ALL_LEVELS").is_some() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            if isa != Isa::Scalar && isa != best {
                runs.push((isa, 1));
            }
        }
    }
    let mut group = flat_group(c, "matmul");
    for t in TYPES {
        for (m, k, n) in shapes(t) {
            group.throughput(Throughput::Elements((2 * m * k * n) as u64));
            for packed in [false, true] {
                if packed && !packed::has_kernels(best, t) {
                    continue;
                }
                let (graph, _bufs) = mul_mat_graph(t, m, k, n, packed);
                for &(isa, threads) in &runs {
                    // The scalar level at the output head for a whole prompt takes minutes.
                    if packed && isa != best || isa == Isa::Scalar && m * n > 1 << 22 {
                        continue;
                    }
                    let run = if packed { "packed_" } else { "" };
                    bench_case(&mut group, t, (m, k, n), run, (isa, threads), &graph);
                }
            }
        }
    }
    group.finish();
}

fn bench_float(c: &mut Criterion) {
    let best = isa::active();
    let mut group = flat_group(c, "matmul_float");
    for t in FLOAT_TYPES {
        for (m, k) in FLOAT_SHAPES {
            for n in [1, 512] {
                if m > 4096 && n > 1 {
                    continue;
                }
                let (graph, _bufs) = mul_mat_graph(t, m, k, n, false);
                group.throughput(Throughput::Elements((2 * m * k * n) as u64));
                for threads in [1, 2] {
                    bench_case(&mut group, t, (m, k, n), "", (best, threads), &graph);
                }
            }
        }
    }
    group.finish();
}

fn bench_k(c: &mut Criterion) {
    let best = isa::active();
    let mut group = flat_group(c, "matmul_k");
    for t in K_AND_IQ4_QUANTS {
        for n in [1, 512] {
            for (m, k) in K_MK {
                group.throughput(Throughput::Elements((2 * m * k * n) as u64));
                for packed in [false, true] {
                    if packed && !packed::has_kernels(best, t) {
                        continue;
                    }
                    let (graph, _bufs) = mul_mat_graph(t, m, k, n, packed);
                    for threads in [1, 2] {
                        let run = if packed { "packed_" } else { "" };
                        bench_case(&mut group, t, (m, k, n), run, (best, threads), &graph);
                    }
                }
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench, bench_float, bench_k);
criterion_main!(benches);

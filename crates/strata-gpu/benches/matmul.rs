//! MUL_MAT on the first GPU for SmolLM2-135M's weight shapes (K × M: 576 ×
//! 576, 576 × 1536, 1536 × 576, 576 × 49152) with one token (the
//! matrix-vector kernel) and 512 (the tiled kernel; not for the 49152-row
//! output layer, which a prompt only needs for its last token), for the
//! weight types of the common model files. Throughput is in FLOPs (2 K M N)
//! per second: criterion's "elem/s" reads as FLOP/s. K-quants only have
//! the 1536 × 576 shape (their rows are whole blocks of 256). The 512-column
//! products run once per prompt path the type has (`MatmulPaths`: f32
//! tiles, and int-dot or f16 tiles where they take the type and the device
//! can), each on a backend of its own.
//!
//! `cargo bench -p strata-gpu --bench matmul -- q4_1` runs one type.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata::backend::{alloc_graph, Backend};
use strata::conformance::Rng;
use strata::{ops, DType, Graph, Tensor};
use strata_gpu::MatmulPaths;

const SHAPES: [(usize, usize); 4] = [(576, 576), (576, 1536), (1536, 576), (576, 49152)];
const TYPES: [DType; 4] = [DType::Q4_1, DType::Q4_K, DType::Q6_K, DType::F16];

fn mul_mat(c: &mut Criterion) {
    let dev = match strata_gpu::first_device() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let ctx = dev.context();
    let auto = ctx.matmul_paths();
    let backend = dev.backend();
    let mut rng = Rng::new(3);
    for t in TYPES {
        let mut g = c.benchmark_group(format!("gpu_mul_mat/{}", t.name()));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (k, m) in SHAPES {
            for n in [1, 512] {
                // K-quant rows are whole 256-blocks: K = 576 has none
                if (m > 10_000 && n > 1) || k % t.block_size() != 0 {
                    continue;
                }
                let a = Tensor::new(t, &[k, m]).unwrap();
                let b = Tensor::new(DType::F32, &[k, n]).unwrap();
                let out = ops::mul_mat(&a, &b).unwrap();
                if !backend.supports_op(&out) {
                    eprintln!("{t} {k}x{m} n={n}: not supported");
                    continue;
                }
                let graph = Graph::build(&[out]);
                let _bufs = alloc_graph(&graph, &backend.default_buffer_type()).unwrap();
                a.write_f32(&rng.vec(k * m, -1.0, 1.0)).unwrap();
                b.write_f32(&rng.vec(k * n, -1.0, 1.0)).unwrap();
                g.throughput(Throughput::Elements((2 * k * m * n) as u64));
                let float = t == DType::F16;
                let paths: &[(&str, MatmulPaths)] = match (n, float) {
                    (1, _) => &[("", auto)],
                    (_, false) => &[("/f32 tiles", F32), ("/int-dot", INT)],
                    (_, true) => &[("/f32 tiles", F32), ("/f16 tiles", F16)],
                };
                for &(name, p) in paths {
                    if ctx.set_matmul_paths(p).is_err() {
                        continue; // no SHADER_F16
                    }
                    let mut backend = dev.backend();
                    let id = BenchmarkId::from_parameter(format!("{k}x{m}/n={n}{name}"));
                    g.bench_function(id, |bch| {
                        bch.iter(|| {
                            backend.graph_compute(&graph).unwrap();
                            backend.synchronize().unwrap();
                        })
                    });
                }
                ctx.set_matmul_paths(auto).unwrap();
            }
        }
        g.finish();
    }
}

const F32: MatmulPaths = MatmulPaths::F32_TILES;
const INT: MatmulPaths = MatmulPaths::INT_DOT;
const F16: MatmulPaths = MatmulPaths::F16_TILES;

criterion_group!(benches, mul_mat);
criterion_main!(benches);

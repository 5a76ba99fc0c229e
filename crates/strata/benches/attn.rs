//! FLASH_ATTN_EXT time at SmolLM2-135M's shapes (head dim 64, 9 query heads,
//! 3 KV heads, f16 K/V, llama.cpp's causal f16 mask with -inf above the
//! diagonal): a 512-token prompt against 512 keys (also as the last 512 of
//! 4096 cells, the others another sequence's, and as 16 sequences' prompts
//! added position by position, `prompt16_interleaved`: 32 positions of
//! each, their cells interleaved), and one token against 128, 511 and 2048
//! keys; 1 and 2 threads. Two more are a step of 16
//! sequences decoding together in a 4096-cell cache, each token seeing its
//! own 256 cells: `batch16_interleaved` as a unified cache fills when 16
//! prompts of 128 are followed by 128 decode steps (prompt cells in runs,
//! decode cells interleaved 16 apart), `batch16_runs` with each sequence's
//! cells in one run. `batch16_interleaved_layers30` is that step over the
//! 30 layers' caches in the model's cell layout (from DRAM, not the cache).
//!
//! `cargo bench -p strata --bench attn -- --measurement-time 3`
//!
//! `new` is the CPU backend's kernel at this CPU's best instruction-set level,
//! or the lower one `STRATA_ISA` names (only `graph_compute` is timed: the graph is built and allocated once);
//! `invariant` the same backend with batch-invariant attention (the two-pass path).
//! `old` is a copy of strata's original scalar kernel (row by row, every
//! K/V element converted through `half`, the f16 V accumulator rounded
//! through `half`), run on the same data with the backend's thread pool and
//! row split, so both sides are measured in the same run.

mod common;

use common::{flat_group, values};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use half::f16;
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend, ThreadPool};
use strata::isa;
use strata::testkit::online_softmax_step;
use strata::{ops, DType, Graph, Tensor};

const D: usize = 64;
const H: usize = 9;
const H_KV: usize = 3;

/// The inputs of one case: q [D, n_q, H] f32, k and v [D, n_kv, H_kv] f16,
/// mask [n_kv, n_q] f16 (key j visible to query i iff j <= i + n_kv - n_q).
struct Data {
    n_q: usize,
    n_kv: usize,
    q: Vec<f32>,
    k: Vec<f16>,
    v: Vec<f16>,
    mask: Vec<f16>,
}

impl Data {
    fn new(n_q: usize, n_kv: usize, sees: fn(usize, usize, usize, usize) -> bool) -> Data {
        let h16 = |x: Vec<f32>| x.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        let mut mask = Vec::with_capacity(n_kv * n_q);
        for i in 0..n_q {
            for j in 0..n_kv {
                mask.push(if sees(i, j, n_q, n_kv) {
                    f16::ZERO
                } else {
                    f16::NEG_INFINITY
                });
            }
        }
        Data {
            n_q,
            n_kv,
            q: values(D * n_q * H, 1),
            k: h16(values(D * n_kv * H_KV, 2)),
            v: h16(values(D * n_kv * H_KV, 3)),
            mask,
        }
    }
}

/// The original kernel for output rows `rows` (row r = (head r % H, query r / H)).
fn old_rows(x: &Data, scale: f32, rows: std::ops::Range<usize>, out: *mut f32) {
    let mut qrow = vec![0f32; D];
    let mut acc = vec![0f32; D];
    let mut mrow = vec![0f32; x.n_kv];
    let round = |v: f32| f16::from_f32(v).to_f32();
    for r in rows {
        let (h, iq) = (r % H, r / H);
        let hk = h / (H / H_KV);
        for (o, &v) in qrow.iter_mut().zip(&x.q[(h * x.n_q + iq) * D..]) {
            *o = round(v);
        }
        for (o, m) in mrow.iter_mut().zip(&x.mask[iq * x.n_kv..]) {
            *o = m.to_f32();
        }
        acc.fill(0.0);
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        for (ic, &mv) in mrow.iter().enumerate() {
            if mv == f32::NEG_INFINITY {
                continue;
            }
            let krow = &x.k[(hk * x.n_kv + ic) * D..][..D];
            let mut s = 0.0f32;
            for (a, b) in qrow.iter().zip(krow) {
                s += a * b.to_f32();
            }
            s = s * scale + mv;
            let w = online_softmax_step(&mut max, &mut sum, &mut acc, s, round);
            let vrow = &x.v[(hk * x.n_kv + ic) * D..][..D];
            for (a, b) in acc.iter_mut().zip(vrow) {
                *a = round(*a + w * b.to_f32());
            }
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        for (i, a) in acc.iter().enumerate() {
            // SAFETY: `out` holds H·n_q·D f32 and row r is written by this thread only.
            unsafe { *out.add(r * D + i) = a * inv };
        }
    }
}

/// A raw output pointer shared by the pool's threads (disjoint rows).
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: threads write disjoint rows of the buffer, which outlives the job.
unsafe impl Sync for Out {}
// SAFETY: as Sync.
unsafe impl Send for Out {}

impl Out {
    /// The pointer (a method, so closures capture the whole `Out`).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

fn bench(c: &mut Criterion) {
    let isa = isa::active();
    let mut group = flat_group(c, "attn");
    let scale = 1.0 / (D as f32).sqrt();
    type Sees = fn(usize, usize, usize, usize) -> bool;
    let causal: Sees = |i, j, n_q, n_kv| j <= i + n_kv - n_q;
    let interleaved: Sees = |i, j, _, _| {
        if j < 2048 {
            j / 128 == i
        } else {
            (j - 2048) % 16 == i
        }
    };
    let runs: Sees = |i, j, _, _| j / 256 == i;
    // 16 sequences' prompts added position by position (as older
    // llama-batched-bench did): cell c holds position c / 16 of sequence c % 16; the batch
    // holds positions 256..288, query i position 256 + i / 16 of sequence i % 16
    let prompt16: Sees = |i, j, _, _| j % 16 == i % 16 && j / 16 <= 256 + i / 16;
    let own: Sees = |i, j, n_q, n_kv| j >= n_kv - n_q && j <= i + n_kv - n_q;
    for (name, n_q, n_kv, sees) in [
        ("prompt_q512_kv512", 512, 512, causal),
        ("prompt_q512_kv4096_last512", 512, 4096, own),
        ("prompt16_interleaved_q512_kv4608", 512, 4608, prompt16),
        ("decode_kv128", 1, 128, causal),
        ("decode_kv511", 1, 511, causal),
        ("decode_kv2048", 1, 2048, causal),
        ("batch16_interleaved_kv4096", 16, 4096, interleaved),
        ("batch16_runs_kv4096", 16, 4096, runs),
    ] {
        let x = Data::new(n_q, n_kv, sees);
        let q = Tensor::new(DType::F32, &[D, n_q, H]).unwrap();
        let k = Tensor::new(DType::F16, &[D, n_kv, H_KV]).unwrap();
        let v = Tensor::new(DType::F16, &[D, n_kv, H_KV]).unwrap();
        let m = Tensor::new(DType::F16, &[n_kv, n_q]).unwrap();
        let out = ops::flash_attn_ext(&q, &k, &v, Some(&m), scale, 0.0, 0.0).unwrap();
        let graph = Graph::build(std::slice::from_ref(&out));
        let _bufs = alloc_graph_host(&graph).unwrap();
        q.write_f32(&x.q).unwrap();
        let f = |h: &[f16]| h.iter().map(|v| v.to_f32()).collect::<Vec<_>>();
        k.write_f32(&f(&x.k)).unwrap();
        v.write_f32(&f(&x.v)).unwrap();
        m.write_f32(&f(&x.mask)).unwrap();
        let mut old_out = vec![0f32; H * n_q * D];
        for threads in [1, 2] {
            let mut cpu = CpuBackend::new(threads);
            cpu.set_isa(isa).unwrap();
            group.bench_function(
                BenchmarkId::new(name, format!("new_{isa}_t{threads}")),
                |b| b.iter(|| cpu.graph_compute(&graph).unwrap()),
            );
            cpu.set_batch_invariant(true);
            group.bench_function(
                BenchmarkId::new(name, format!("invariant_{isa}_t{threads}")),
                |b| b.iter(|| cpu.graph_compute(&graph).unwrap()),
            );
            let pool = ThreadPool::new(threads);
            let o = Out(old_out.as_mut_ptr());
            group.bench_function(
                BenchmarkId::new(name, format!("old_scalar_t{threads}")),
                |b| b.iter(|| pool.run(&|w| old_rows(&x, scale, w.split(H * n_q), o.ptr()))),
            );
        }
    }
    layers(&mut group, interleaved);
    group.finish();
}

/// Layers of the 16-sequence step: one graph of [`LAYERS`] attention ops,
/// each over its own 4096-cell K and V caches in the model's layout (a
/// cell's kv heads side by side, 384 bytes per cell row), 94 MB in all, so
/// that the keys come from DRAM as in a decode step, not from the cache.
fn layers(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    sees: fn(usize, usize, usize, usize) -> bool,
) {
    const LAYERS: usize = 30;
    let (n_q, n_kv) = (16, 4096);
    let x = Data::new(n_q, n_kv, sees);
    let m = Tensor::new(DType::F16, &[n_kv, n_q]).unwrap();
    let mut leaves = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..LAYERS {
        let q = Tensor::new(DType::F32, &[D, n_q, H]).unwrap();
        let kc = Tensor::new(DType::F16, &[D * H_KV, n_kv]).unwrap();
        let vc = Tensor::new(DType::F16, &[D * H_KV, n_kv]).unwrap();
        let cells = |c: &Tensor| ops::view(c, &[D, n_kv, H_KV], &[D * H_KV * 2, D * 2], 0).unwrap();
        let scale = 1.0 / (D as f32).sqrt();
        outs.push(
            ops::flash_attn_ext(&q, &cells(&kc), &cells(&vc), Some(&m), scale, 0.0, 0.0).unwrap(),
        );
        leaves.push((q, kc, vc));
    }
    let graph = Graph::build(&outs);
    let _bufs = alloc_graph_host(&graph).unwrap();
    let f = |h: &[f16]| h.iter().map(|v| v.to_f32()).collect::<Vec<_>>();
    m.write_f32(&f(&x.mask)).unwrap();
    for (q, kc, vc) in &leaves {
        q.write_f32(&x.q).unwrap();
        kc.write_f32(&f(&x.k)).unwrap();
        vc.write_f32(&f(&x.v)).unwrap();
    }
    let isa = isa::active();
    for threads in [1, 2] {
        let mut cpu = CpuBackend::new(threads);
        cpu.set_isa(isa).unwrap();
        for invariant in [false, true] {
            cpu.set_batch_invariant(invariant);
            let kind = if invariant { "invariant" } else { "new" };
            group.bench_function(
                BenchmarkId::new(
                    "batch16_interleaved_layers30",
                    format!("{kind}_{isa}_t{threads}"),
                ),
                |b| b.iter(|| cpu.graph_compute(&graph).unwrap()),
            );
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Times one MUL_MAT shape repeatedly (for `perf stat` cycle counts):
//! `mm_probe TYPE M K N THREADS REPS [ISA] [COPIES]` (ISA: a `STRATA_ISA`
//! level name, default the detected one): with COPIES > 1
//! the graph multiplies by that many distinct weight matrices in turn (a
//! working set larger than the caches, as in a model's decode step).
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::{ops, DType, Graph, Tensor};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = match a[1].as_str() {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        _ => DType::F32,
    };
    let p = |i: usize| a[i].parse::<usize>().unwrap();
    let (m, k, n, th, reps) = (p(2), p(3), p(4), p(5), p(6));
    let copies: usize = a.get(8).map_or(1, |c| c.parse().unwrap());
    let ws: Vec<Tensor> = (0..copies)
        .map(|_| Tensor::new(t, &[k, m]).unwrap())
        .collect();
    let x = Tensor::new(DType::F32, &[k, n]).unwrap();
    let outs: Vec<Tensor> = ws.iter().map(|w| ops::mul_mat(w, &x).unwrap()).collect();
    let g = Graph::build(&outs);
    let _b = alloc_graph_host(&g).unwrap();
    let wv: Vec<f32> = (0..k * m)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    for w in &ws {
        w.write_f32(&wv).unwrap();
    }
    x.write_f32(
        &(0..k * n)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let mut cpu = CpuBackend::new(th);
    if let Some(isa) = a.get(7) {
        cpu.set_isa(isa.parse().unwrap()).unwrap();
    }
    cpu.graph_compute(&g).unwrap();
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        cpu.graph_compute(&g).unwrap();
    }
    let s = t0.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{:.2} GFLOP/s ({:.3} ms)",
        2.0 * (m * k * n * copies) as f64 / s / 1e9,
        s * 1e3
    );
}

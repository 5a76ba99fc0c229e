//! FLASH_ATTN_EXT for one step of 16 sequences decoding together at
//! SmolLM2-135M's shapes (head dim 64, 9 query heads, 3 KV heads, f16 K/V):
//! each token sees its own KEYS cells of a 16·KEYS-cell cache (cells in
//! runs), batch-invariant (two-pass) kernel, one thread, at this CPU's
//! best level or the one `STRATA_ISA` names; timed by this thread's
//! on-CPU time: `cargo run --release -p strata --example attn_cycles
//! [ITERS [KEYS]]`. Prints five samples and the time per (key, KV head)
//! pair, the kernel's unit of work.

use half::f16;
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::{ops, DType, Graph, Tensor};

#[path = "probe/cpu_time.rs"]
mod cpu_time;
use cpu_time::cpu_ns;

const D: usize = 64;
const H: usize = 9;
const H_KV: usize = 3;
const N_Q: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args().nth(1).map_or(Ok(2000), |s| s.parse())?;
    let keys: usize = std::env::args().nth(2).map_or(Ok(256), |s| s.parse())?;
    let n_kv = N_Q * keys;
    let mut rng = strata::conformance::Rng::new(1);
    let q = Tensor::new(DType::F32, &[D, N_Q, H])?;
    let k = Tensor::new(DType::F16, &[D, n_kv, H_KV])?;
    let v = Tensor::new(DType::F16, &[D, n_kv, H_KV])?;
    let m = Tensor::new(DType::F16, &[n_kv, N_Q])?;
    let out = ops::flash_attn_ext(&q, &k, &v, Some(&m), 0.125, 0.0, 0.0)?;
    let graph = Graph::build(std::slice::from_ref(&out));
    let _bufs = alloc_graph_host(&graph)?;
    let h16 =
        |x: Vec<f32>| -> Vec<f32> { x.into_iter().map(|v| f16::from_f32(v).to_f32()).collect() };
    q.write_f32(&rng.vec(D * N_Q * H, -1.0, 1.0))?;
    k.write_f32(&h16(rng.vec(D * n_kv * H_KV, -1.0, 1.0)))?;
    v.write_f32(&h16(rng.vec(D * n_kv * H_KV, -1.0, 1.0)))?;
    let mut mask = Vec::with_capacity(n_kv * N_Q);
    for i in 0..N_Q {
        for j in 0..n_kv {
            mask.push(if j / keys == i {
                0.0
            } else {
                f32::NEG_INFINITY
            });
        }
    }
    m.write_f32(&mask)?;
    let mut cpu = CpuBackend::new(1);
    cpu.set_isa(strata::isa::active())?;
    cpu.set_batch_invariant(true);
    cpu.graph_compute(&graph)?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        let c0 = cpu_ns()?;
        for _ in 0..iters {
            cpu.graph_compute(&graph)?;
        }
        samples.push((cpu_ns()? - c0) as f64 / 1e3 / iters as f64);
    }
    let best = samples.iter().copied().fold(f64::MAX, f64::min);
    let per = best * 1e3 / (N_Q * H_KV * keys) as f64;
    println!(
        "{} keys {keys}: best {best:.1} µs, {per:.2} ns per (key, KV head) ({samples:.1?})",
        strata::isa::active()
    );
    Ok(())
}

//! FLASH_ATTN_EXT for one step of 16 sequences decoding together at
//! SmolLM2-135M's shapes (head dim 64, 9 query heads, 3 KV heads, f16 K/V):
//! each token sees its own KEYS cells of a 16·KEYS-cell cache (cells in
//! runs), batch-invariant (two-pass) kernel, one thread, at this CPU's
//! best level or the one `STRATA_ISA` names; timed by this thread's
//! on-CPU time: `cargo run --release -p strata --example attn_cycles
//! [ITERS [KEYS [LAYERS]]]`. With LAYERS > 1 the graph holds that many
//! such ops, each over its own caches in the model's cell layout (a cell's
//! KV heads side by side), so that with enough of them the keys come from
//! DRAM as in a decode step. Prints five samples and the time per (key, KV
//! head) pair, the kernel's unit of work.

use half::f16;
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::{ops, DType, Graph, Tensor};

#[path = "probe/cpu_time.rs"]
mod cpu_time;
use cpu_time::time_calls;

const D: usize = 64;
const H: usize = 9;
const H_KV: usize = 3;
const N_Q: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args().nth(1).map_or(Ok(2000), |s| s.parse())?;
    let keys: usize = std::env::args().nth(2).map_or(Ok(256), |s| s.parse())?;
    let layers: usize = std::env::args().nth(3).map_or(Ok(1), |s| s.parse())?;
    let n_kv = N_Q * keys;
    let mut rng = strata::conformance::Rng::new(1);
    let m = Tensor::new(DType::F16, &[n_kv, N_Q])?;
    let mut leaves = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..layers {
        let q = Tensor::new(DType::F32, &[D, N_Q, H])?;
        let (k, v) = if layers == 1 {
            let kv = || Tensor::new(DType::F16, &[D, n_kv, H_KV]);
            (kv()?, kv()?)
        } else {
            // the cache's layout: [D·H_KV, n_kv], viewed as [D, n_kv, H_KV]
            let cache = || Tensor::new(DType::F16, &[D * H_KV, n_kv]);
            let (kc, vc) = (cache()?, cache()?);
            let cells = |c: &Tensor| ops::view(c, &[D, n_kv, H_KV], &[D * H_KV * 2, D * 2], 0);
            let (k, v) = (cells(&kc)?, cells(&vc)?);
            leaves.push(kc);
            leaves.push(vc);
            (k, v)
        };
        outs.push(ops::flash_attn_ext(&q, &k, &v, Some(&m), 0.125, 0.0, 0.0)?);
        leaves.push(q);
    }
    let graph = Graph::build(&outs);
    let _bufs = alloc_graph_host(&graph)?;
    let h16 =
        |x: Vec<f32>| -> Vec<f32> { x.into_iter().map(|v| f16::from_f32(v).to_f32()).collect() };
    for t in &leaves {
        let n = t.nelements();
        let x = rng.vec(n, -1.0, 1.0);
        t.write_f32(&if t.dtype() == DType::F16 { h16(x) } else { x })?;
    }
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
    let (best, samples) = time_calls::<Box<dyn std::error::Error>>(iters, || {
        cpu.graph_compute(&graph)?;
        Ok(())
    })?;
    let (best, samples): (f64, Vec<f64>) = (best / 1e3, samples.iter().map(|s| s / 1e3).collect());
    let per = best * 1e3 / (N_Q * H_KV * keys * layers) as f64;
    println!(
        "{} keys {keys} layers {layers}: best {best:.1} µs, {per:.2} ns per (key, KV head) ({samples:.1?})",
        strata::isa::active()
    );
    Ok(())
}

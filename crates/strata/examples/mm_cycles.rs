//! One packed MUL_MAT case in a loop, timed by this thread's on-CPU time
//! (`/proc/thread-self/schedstat`, Linux), for kernel A/Bs on a shared host
//! where wall time swings: `cargo run --release -p strata --example
//! mm_cycles -- TYPE M K N ITERS` (TYPE: q4_0, q8_0, iq4_nl, q4_k, …; one
//! thread at the AVX2 level, or the detected level where AVX2 is missing,
//! or the level `STRATA_ISA` names when it is set).
//! Prints five samples of ITERS iterations and their minimum, which is the
//! figure to compare between builds (PERFORMANCE.md), then the cache sizes
//! the matmul blocked for: the host's, or as `STRATA_CACHE` forces them
//! (e.g. `STRATA_CACHE=l1d=32K,l2=512K,l3=32M` blocks as on AMD Zen 3).

use std::sync::Arc;
use strata::backend::{alloc_tensors, Backend, Buffer};
use strata::cpu::{alloc_graph_host, packed_buffer_type, CpuBackend};
use strata::isa::Isa;
use strata::{ops, DType, Graph, Tensor};

#[path = "probe/cpu_time.rs"]
mod cpu_time;
use cpu_time::time_calls;

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [t, m, k, n, iters] = args else {
        return Err("usage: mm_cycles TYPE M K N ITERS".into());
    };
    let t = DType::ALL
        .into_iter()
        .find(|d| d.to_string().eq_ignore_ascii_case(t))
        .ok_or_else(|| format!("unknown type {t:?}"))?;
    let (m, k, n, iters): (usize, usize, usize, usize) =
        (m.parse()?, k.parse()?, n.parse()?, iters.parse()?);
    let a = Tensor::new(t, &[k, m])?;
    let mut bufs: Vec<Arc<dyn Buffer>> =
        alloc_tensors(std::slice::from_ref(&a), &packed_buffer_type())?.into_vec();
    let b = Tensor::new(DType::F32, &[k, n])?;
    let graph = Graph::build(&[ops::mul_mat(&a, &b)?]);
    bufs.extend(alloc_graph_host(&graph)?);
    let mut rng = strata::conformance::Rng::new(1);
    a.write_f32(&rng.vec(k * m, -1.0, 1.0))?;
    b.write_f32(&rng.vec(k * n, -1.0, 1.0))?;
    let mut cpu = CpuBackend::new(1);
    if std::env::var_os("STRATA_ISA").is_none() && Isa::Avx2.is_supported() {
        cpu.set_isa(Isa::Avx2)?;
    }
    let (best, samples) = time_calls::<Box<dyn std::error::Error>>(iters, || {
        cpu.graph_compute(&graph)?;
        Ok(())
    })?;
    let (best, samples): (f64, Vec<f64>) = (best / 1e6, samples.iter().map(|s| s / 1e6).collect());
    let all: Vec<String> = samples.iter().map(|s| format!("{s:.3}")).collect();
    println!(
        "{t} {m}x{k}x{n}: best {best:.3} ms/iter on-CPU ({})",
        all.join(" ")
    );
    println!("  caches: {}", strata::isa::cache::detection());
    println!("  {:?}", strata::isa::cache::Blocking::detected());
    drop(bufs);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("mm_cycles: {e}");
        std::process::exit(2);
    }
}

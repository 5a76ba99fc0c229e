//! SwiGLU and SiLU rows (`cpu::vector::swiglu_row` / `silu_row`) over the
//! FFN activations of SmolLM2-135M for a 512-token prompt (1536 × 512 f32,
//! one row per call as the CPU backend makes them), at the scalar level and
//! at each f32 lane level this CPU runs, timed by this thread's on-CPU time
//! (`/proc/thread-self/schedstat`, Linux: wall time swings on a shared
//! host): `cargo run --release -p strata --example swiglu_cycles [ITERS
//! [ROWS]]` (ROWS = 4 keeps the rows in L1/L2: the kernels without the
//! memory traffic).
//! Prints five samples of ITERS passes per case and their minimum. SiLU
//! runs in place on a fresh copy of the gate each pass (the copy is timed
//! too; repeated SiLU would drift into subnormals).

use strata::cpu::vector;
use strata::isa::Isa;

const ROW: usize = 1536;

#[path = "probe/cpu_time.rs"]
mod cpu_time;
use cpu_time::time_calls;

/// The minimum and all of five samples of `iters` calls of `f`, in ms per call.
fn time(iters: usize, mut f: impl FnMut()) -> Result<(f64, Vec<f64>), String> {
    let (best, all) = time_calls::<String>(iters, || {
        f();
        Ok(())
    })?;
    Ok((best / 1e6, all.iter().map(|s| s / 1e6).collect()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args().nth(1).map_or(Ok(20), |s| s.parse())?;
    let rows: usize = std::env::args().nth(2).map_or(Ok(512), |s| s.parse())?;
    let mut rng = strata::conformance::Rng::new(1);
    let g = rng.vec(ROW * rows, -8.0, 8.0);
    let u = rng.vec(ROW * rows, -1.0, 1.0);
    let mut out = vec![0f32; ROW * rows];
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        if !isa.is_supported() {
            continue;
        }
        let lanes = if vector::libm_exp_in_lanes(isa) {
            "lanes"
        } else {
            "scalar"
        };
        let (best, all) = time(iters, || {
            for ((g, u), o) in g.chunks(ROW).zip(u.chunks(ROW)).zip(out.chunks_mut(ROW)) {
                vector::swiglu_row(isa, g, u, o).expect("one length");
            }
        })?;
        let ns = best * 1e6 / (ROW * rows) as f64;
        println!("swiglu {ROW}x{rows} {isa:>6} ({lanes}): best {best:.3} ms, {ns:.2} ns/elem ({all:.3?})");
        let (best, all) = time(iters, || {
            out.copy_from_slice(&g);
            for o in out.chunks_mut(ROW) {
                vector::silu_row(isa, o);
            }
        })?;
        let ns = best * 1e6 / (ROW * rows) as f64;
        println!("silu   {ROW}x{rows} {isa:>6} ({lanes}): best {best:.3} ms, {ns:.2} ns/elem ({all:.3?})");
    }
    Ok(())
}

//! The seeds' scheduler experiment (seed 000), runnable on any device: A and
//! B live in the device's memory (marked WEIGHTS), C and D in a CPU buffer;
//! the graph is `mul_mat(A, B) + C + D`.
//!
//! * C/D's buffer marked WEIGHTS: the adds are pulled to the CPU → 2 splits.
//! * Unmarked: everything stays on the device, C and D are copied → 1 split.

use crate::backend::{alloc_tensors, Backend, BufferUsage};
use crate::cpu::{cpu_buffer_type, CpuBackend};
use crate::sched::{SchedConfig, Scheduler};
use crate::{ops, DType, Graph, Result, Tensor};

const A: [f32; 8] = [2.0, 8.0, 5.0, 1.0, 4.0, 2.0, 8.0, 6.0];
const B: [f32; 6] = [10.0, 5.0, 9.0, 9.0, 5.0, 4.0];

/// What one run of the experiment found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Splits the scheduler cut the graph into.
    pub splits: usize,
    /// Each node: (name, backend, the placement's cause code).
    pub placement: Vec<(String, String, String)>,
    /// The result `mul_mat(A, B) + C + D`.
    pub result: Vec<f32>,
    /// The scheduler's report (`strata explain`'s text).
    pub report: String,
}

/// Runs the experiment with `device` beside a CPU backend; `cpu_weights`
/// marks C and D's CPU buffer WEIGHTS.
pub fn run(device: Box<dyn Backend>, cpu_weights: bool) -> Result<Outcome> {
    let a = Tensor::new(DType::F32, &[2, 4])?.with_name("a");
    let b = Tensor::new(DType::F32, &[2, 3])?.with_name("b");
    let c = Tensor::new(DType::F32, &[4, 3])?.with_name("c");
    let d = Tensor::new(DType::F32, &[4, 3])?.with_name("d");
    let ab = alloc_tensors(&[a.clone(), b.clone()], &device.default_buffer_type())?;
    ab.set_usage(BufferUsage::Weights);
    let cd = alloc_tensors(&[c.clone(), d.clone()], &cpu_buffer_type())?;
    if cpu_weights {
        cd.set_usage(BufferUsage::Weights);
    }
    a.write_f32(&A)?;
    b.write_f32(&B)?;
    c.write_f32(&(1..=12).map(|x| x as f32).collect::<Vec<_>>())?;
    d.write_f32(&[0.5; 12])?;
    let mm = ops::mul_mat(&a, &b)?.with_name("mul_mat_0");
    let add0 = ops::add(&mm, &c)?.with_name("add_0");
    let add1 = ops::add(&add0, &d)?.with_name("add_1");
    add1.set_output();
    let g = Graph::build(&[add1.clone()]);
    let backends: Vec<Box<dyn Backend>> = vec![device, Box::new(CpuBackend::new(2))];
    let mut sched = Scheduler::new(backends, None, SchedConfig::default())?;
    sched.alloc_graph(&g)?;
    sched.compute(&g)?;
    let report = sched.report_for(&g)?;
    let placement = report
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.backend.clone(), n.cause.clone()))
        .collect();
    Ok(Outcome {
        splits: sched.n_splits(),
        placement,
        result: add1.to_f32_vec()?,
        report: report.to_text(true),
    })
}

/// The result the CPU alone computes (ggml's simple example's numbers plus
/// C = 1..12 and D = 0.5).
pub fn expected() -> Vec<f32> {
    let mm = [
        60.0, 55.0, 50.0, 110.0, 90.0, 54.0, 54.0, 126.0, 42.0, 29.0, 28.0, 64.0,
    ];
    mm.iter()
        .enumerate()
        .map(|(i, v)| v + (i + 1) as f32 + 0.5)
        .collect()
}

/// Prints both runs on the device `make` creates (the examples' output).
pub fn print_both(mut make: impl FnMut() -> Result<Box<dyn Backend>>) -> Result<()> {
    for cpu_weights in [true, false] {
        let o = run(make()?, cpu_weights)?;
        println!(
            "== C, D buffer usage {}: {} split(s)",
            if cpu_weights { "WEIGHTS" } else { "ANY" },
            o.splits
        );
        for (name, backend, cause) in &o.placement {
            println!("   node {name:<10} on {backend:<22} ({cause})");
        }
        print!("{}", o.report);
        println!(
            "   result {:?}  (CPU-only: equal = {})\n",
            o.result,
            o.result == expected()
        );
    }
    Ok(())
}

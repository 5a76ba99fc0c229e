//! The seeds' scheduler experiment on a real remote device: a strata RPC
//! server on a loopback port plays the GPU. A and B live in the device's
//! memory, C and D in a CPU buffer; the graph is mul_mat(A, B) + C + D.
//!
//! * C/D's buffer marked WEIGHTS: the adds are pulled to the CPU → 2 splits.
//! * Unmarked: everything stays on the device, C and D are copied → 1 split.
//!
//! Run: `cargo run --release -p strata-rpc --example sched_priority`

use std::sync::Arc;

use strata::backend::{alloc_tensors, Backend, BufferUsage, Registry};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::sched::{SchedConfig, Scheduler};
use strata::{ops, DType, Graph, Result, Tensor};
use strata_rpc::server::spawn_loopback_cpu;
use strata_rpc::RpcProvider;

const A: [f32; 8] = [2.0, 8.0, 5.0, 1.0, 4.0, 2.0, 8.0, 6.0];
const B: [f32; 6] = [10.0, 5.0, 9.0, 9.0, 5.0, 4.0];

/// The outcome of one run of the experiment.
struct Outcome {
    splits: usize,
    placement: Vec<(String, String, String)>,
    result: Vec<f32>,
    report: String,
}

fn experiment(device: &str, reg: &Registry, cpu_weights: bool) -> Result<Outcome> {
    let dev = reg.backend(device)?;
    let a = Tensor::new(DType::F32, &[2, 4])?.with_name("a");
    let b = Tensor::new(DType::F32, &[2, 3])?.with_name("b");
    let c = Tensor::new(DType::F32, &[4, 3])?.with_name("c");
    let d = Tensor::new(DType::F32, &[4, 3])?.with_name("d");
    let ab = alloc_tensors(&[a.clone(), b.clone()], &dev.default_buffer_type())?;
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
    let backends: Vec<Box<dyn Backend>> = vec![dev, Box::new(CpuBackend::new(2))];
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

fn cpu_only() -> Vec<f32> {
    let mm = [
        60.0, 55.0, 50.0, 110.0, 90.0, 54.0, 54.0, 126.0, 42.0, 29.0, 28.0, 64.0,
    ];
    mm.iter()
        .enumerate()
        .map(|(i, v)| v + (i + 1) as f32 + 0.5)
        .collect()
}

fn main() -> Result<()> {
    let (addr, _server) = spawn_loopback_cpu(1)?;
    let mut reg = Registry::with_defaults();
    reg.register(Arc::new(RpcProvider::new()));
    let device = format!("RPC[{addr}]");
    for cpu_weights in [true, false] {
        let o = experiment(&device, &reg, cpu_weights)?;
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
            o.result == cpu_only()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_mark_decides_the_split_count() {
        let (addr, _server) = spawn_loopback_cpu(2).unwrap();
        let mut reg = Registry::with_defaults();
        reg.register(Arc::new(RpcProvider::new()));
        let device = format!("RPC[{addr}]");
        let marked = experiment(&device, &reg, true).unwrap();
        assert_eq!(marked.splits, 2);
        let on: Vec<&str> = marked.placement.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(on, [device.as_str(), "CPU", "CPU"]);
        assert_eq!(marked.placement[1].2, "1.wgt1");
        assert_eq!(marked.result, cpu_only());
        let unmarked = experiment(&device, &reg, false).unwrap();
        assert_eq!(unmarked.splits, 1);
        assert!(unmarked.placement.iter().all(|p| p.1 == device));
        assert_eq!(unmarked.result, cpu_only());
        assert!(
            unmarked.report.contains("2 inputs"),
            "C and D are copied:\n{}",
            unmarked.report
        );
    }
}

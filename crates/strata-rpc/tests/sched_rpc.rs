//! The scheduler with a real remote device: random element-wise graphs over
//! [RPC device, CPU] with weights on either side, results bit-identical to a
//! CPU-only run, over repeated computes and pipeline copies 1..4.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use strata::backend::{alloc_tensors, Backend, BufferUsage, Registry};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::ops::{self, UnaryOp};
use strata::sched::{SchedConfig, Scheduler};
use strata::{DType, Graph, Tensor};
use strata_rpc::server::Limits;
use strata_rpc::RpcProvider;

fn build(steps: &[(u8, usize, usize)], ins: &[Tensor]) -> Tensor {
    let mut ts = ins.to_vec();
    for &(k, i, j) in steps {
        let (a, b) = (ts[i % ts.len()].clone(), ts[j % ts.len()].clone());
        let t = match k % 5 {
            0 => ops::add(&a, &b),
            1 => ops::mul(&a, &b),
            2 => ops::unary(&a, UnaryOp::Tanh),
            3 => ops::scale(&a, 0.75),
            _ => ops::transpose(&a),
        }
        .unwrap();
        ts.push(t);
    }
    ts.pop().unwrap()
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_over_rpc_match_the_cpu(
        steps in prop::collection::vec((0u8..5, 0usize..32, 0usize..32), 1..16),
        weights_remote in any::<bool>(),
        n_copies in 1usize..5,
        seed in 0u64..1000,
    ) {
        let (addr, _server) = common::cpu_server(2, Limits::default());
        let mut reg = Registry::with_defaults();
        reg.register(Arc::new(RpcProvider::new()));
        let dev = reg.backend(&format!("RPC[{addr}]")).unwrap();
        let w = Tensor::new(DType::F32, &[6, 6]).unwrap().with_name("w");
        let wbuft = if weights_remote { dev.default_buffer_type() } else { cpu_buffer_type() };
        let wb = alloc_tensors(&[w.clone()], &wbuft).unwrap();
        wb[0].set_usage(BufferUsage::Weights);
        w.write_f32(&values(36, seed)).unwrap();
        let x = Tensor::new(DType::F32, &[6, 6]).unwrap().with_name("x");
        x.set_input();
        let out = build(&steps, &[w.clone(), x.clone()]);
        out.set_output();
        let g = Graph::build(&[out.clone()]);
        let backends: Vec<Box<dyn Backend>> = vec![dev, Box::new(CpuBackend::new(1))];
        let mut sched = Scheduler::new(backends, None, SchedConfig { n_copies, ..SchedConfig::default() }).unwrap();
        // CPU-only reference with fresh tensors
        let rw = Tensor::new(DType::F32, &[6, 6]).unwrap();
        let rx = Tensor::new(DType::F32, &[6, 6]).unwrap();
        let rout = build(&steps, &[rw.clone(), rx.clone()]);
        let rg = Graph::build(&[rout.clone()]);
        let _rb = strata::cpu::alloc_graph_host(&rg).unwrap();
        for round in 0..3u64 {
            let vx = values(36, seed + 7 * round);
            sched.alloc_graph(&g).unwrap();
            if g.contains(&x) {
                x.write_f32(&vx).unwrap();
            }
            sched.compute(&g).unwrap();
            if rg.contains(&rw) { rw.write_f32(&values(36, seed)).unwrap(); }
            if rg.contains(&rx) { rx.write_f32(&vx).unwrap(); }
            strata::cpu::compute(&rg, 1).unwrap();
            prop_assert_eq!(out.to_f32_vec().unwrap(), rout.to_f32_vec().unwrap(), "round {}", round);
        }
        prop_assert!(sched.n_splits() <= g.nodes().len());
    }
}

//! The BLAS backend beside the CPU: large matrix products are upgraded to it
//! (pass 3, same buffer type), small ones stay on the CPU, and both backends
//! share one compute buffer.

mod common;

use common::{assert_close, Rng};
use strata::backend::{Backend, BufferUsage};
use strata::blas::BlasBackend;
use strata::cpu::CpuBackend;
use strata::sched::{Assigned, BackendId, Cause, SchedConfig, Scheduler};
use strata::{ops, DType, Graph, Tensor};

fn reference(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            out[j * m + i] = (0..k)
                .map(|p| a[i * k + p] as f64 * b[j * k + p] as f64)
                .sum();
        }
    }
    out
}

#[test]
fn large_matmuls_are_upgraded_to_blas_and_share_the_compute_buffer() {
    let (m, n, k) = (48, 40, 64);
    let x = Tensor::new(DType::F32, &[k, m]).unwrap().with_name("x");
    let y = Tensor::new(DType::F32, &[k, n]).unwrap().with_name("y");
    x.set_input();
    y.set_input();
    // a CPU weight pulls `xs` to the CPU (1.wgt1); expansion then gives the
    // CPU the matmuls (2.sup), and pass 3 upgrades the large one to BLAS.
    let one = Tensor::new(DType::F32, &[1]).unwrap().with_name("one");
    let wb =
        strata::backend::alloc_tensors(&[one.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
    wb[0].set_usage(BufferUsage::Weights);
    one.write_f32(&[1.0]).unwrap();
    let xs = ops::mul(&x, &one).unwrap().with_name("xs");
    let big = ops::mul_mat(&xs, &y).unwrap().with_name("big");
    let small_in = ops::view_2d(&y, k, 2, y.nb()[1], 0).unwrap();
    let small = ops::mul_mat(&xs, &small_in).unwrap().with_name("small");
    big.set_output();
    small.set_output();
    let g = Graph::build(&[big.clone(), small.clone()]);

    let backends: Vec<Box<dyn Backend>> =
        vec![Box::new(BlasBackend::new(32)), Box::new(CpuBackend::new(2))];
    let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
    let p = sched.assign(&g).unwrap();
    let at = |t: &Tensor| p.of(g.slot(t).unwrap());
    assert_eq!(at(&big), on(0, Cause::Upgrade));
    assert_eq!(at(&small), on(1, Cause::Expand), "too small for BLAS");
    assert_eq!(at(&xs), on(1, Cause::Weight(1)));

    sched.alloc_graph(&g).unwrap();
    let mut rng = Rng::new(3);
    let (va, vb) = (rng.vec(m * k, -1.0, 1.0), rng.vec(n * k, -1.0, 1.0));
    x.write_f32(&va).unwrap();
    y.write_f32(&vb).unwrap();
    sched.compute(&g).unwrap();
    assert_close(
        "big",
        &big.to_f32_vec().unwrap(),
        &reference(&va, &vb, m, n, k),
        1e-10,
    );
    assert_close(
        "small",
        &small.to_f32_vec().unwrap(),
        &reference(&va, &vb[..2 * k], m, 2, k),
        1e-10,
    );
    // one buffer type named twice: one compute buffer
    assert_eq!(
        sched.buffer_size(BackendId(0)),
        sched.buffer_size(BackendId(1))
    );
    assert!(sched.buffer_size(BackendId(0)) > 0);
    assert_eq!(sched.n_splits(), 3);
}

#[test]
fn weights_in_host_memory_go_straight_to_blas_when_it_runs_the_op() {
    let (m, n, k) = (64, 33, 96);
    for wt in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_1] {
        let w = Tensor::new(wt, &[k, m]).unwrap().with_name("w");
        let bufs =
            strata::backend::alloc_tensors(&[w.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
        bufs[0].set_usage(BufferUsage::Weights);
        let mut rng = Rng::new(9);
        let vw = rng.vec(m * k, -1.0, 1.0);
        w.write_f32(&vw).unwrap();
        let x = Tensor::new(DType::F32, &[k, n]).unwrap().with_name("x");
        x.set_input();
        let y = ops::mul_mat(&w, &x).unwrap().with_name("y");
        let g = Graph::build(&[y.clone()]);
        let backends: Vec<Box<dyn Backend>> =
            vec![Box::new(BlasBackend::new(32)), Box::new(CpuBackend::new(1))];
        let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
        assert_eq!(sched.assign(&g).unwrap().nodes[0], on(0, Cause::Weight(0)));
        sched.alloc_graph(&g).unwrap();
        let vx = rng.vec(n * k, -1.0, 1.0);
        x.write_f32(&vx).unwrap();
        sched.compute(&g).unwrap();
        // the weights as stored (rounded to their type), then an exact product
        let stored = w.to_f32_vec().unwrap();
        assert_close(
            &format!("{wt}"),
            &y.to_f32_vec().unwrap(),
            &reference(&stored, &vx, m, n, k),
            1e-10,
        );
    }
}

/// Backend `b` for `cause`, as an assignment reads it.
fn on(b: usize, cause: Cause) -> Assigned {
    Assigned {
        backend: BackendId(b),
        cause,
    }
}

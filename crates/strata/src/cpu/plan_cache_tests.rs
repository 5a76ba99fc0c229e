//! The CPU backend's plan cache follows the storage of its own graph's
//! tensors only: placing tensors elsewhere (another graph, another buffer,
//! another backend's work) keeps it; moving one of its graph's tensors drops it.

use super::{alloc_graph_host, CpuBackend};
use crate::backend::Backend;
use crate::{ops, DType, Graph, Tensor};

/// `x * 2 + 1` over 4 values, allocated in fresh host buffers.
fn small_graph() -> (
    Graph,
    Tensor,
    Tensor,
    Vec<std::sync::Arc<dyn crate::backend::Buffer>>,
) {
    let x = Tensor::new(DType::F32, &[4]).unwrap().with_name("x");
    let y = ops::scale_bias(&x, 2.0, 1.0).unwrap().with_name("y");
    let g = Graph::build(&[y.clone()]);
    let bufs = alloc_graph_host(&g).unwrap();
    x.write_f32(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    (g, x, y, bufs)
}

#[test]
fn placing_other_tensors_keeps_the_cached_plan() {
    let (g1, _x1, y1, _b1) = small_graph();
    let mut a = CpuBackend::new(1);
    a.graph_compute(&g1).unwrap();
    a.graph_compute(&g1).unwrap();
    assert_eq!(
        a.plan_resolutions(),
        1,
        "same graph, nothing moved: one resolution"
    );

    // Another graph is placed in its own buffers and run by another backend:
    // with a process-wide storage generation this dropped `a`'s plans.
    let (g2, _x2, y2, _b2) = small_graph();
    let mut b = CpuBackend::new(1);
    b.graph_compute(&g2).unwrap();
    assert_eq!(y2.to_f32_vec().unwrap(), vec![3.0, 5.0, 7.0, 9.0]);
    let loose = Tensor::new(DType::F32, &[8]).unwrap();
    let _b3 = alloc_graph_host(&Graph::build(&[ops::scale(&loose, 1.0).unwrap()])).unwrap();

    a.graph_compute(&g1).unwrap();
    assert_eq!(
        a.plan_resolutions(),
        1,
        "unrelated placements keep the plan"
    );
    assert_eq!(y1.to_f32_vec().unwrap(), vec![3.0, 5.0, 7.0, 9.0]);
}

#[test]
fn moving_the_graphs_own_storage_drops_the_cached_plan() {
    let (g, x, y, _b) = small_graph();
    let mut be = CpuBackend::new(2);
    be.graph_compute(&g).unwrap();
    assert_eq!(be.plan_resolutions(), 1);

    // the input moves to a fresh buffer (the old one stays alive, so a stale
    // plan would silently read the old bytes)
    x.clear_storage();
    let _moved = alloc_graph_host(&g).unwrap();
    x.write_f32(&[10.0, 20.0, 30.0, 40.0]).unwrap();
    be.graph_compute(&g).unwrap();
    assert_eq!(be.plan_resolutions(), 2, "its input moved: resolved again");
    assert_eq!(y.to_f32_vec().unwrap(), vec![21.0, 41.0, 61.0, 81.0]);

    // the output moves too
    y.clear_storage();
    let _moved_out = alloc_graph_host(&g).unwrap();
    be.graph_compute(&g).unwrap();
    assert_eq!(be.plan_resolutions(), 3, "its output moved: resolved again");
    assert_eq!(y.to_f32_vec().unwrap(), vec![21.0, 41.0, 61.0, 81.0]);
}

#[test]
fn a_view_follows_its_base_storage() {
    let x = Tensor::new(DType::F32, &[4]).unwrap().with_name("x");
    let v = ops::view_1d(&x, 2, 8).unwrap();
    let y = ops::scale(&v, 3.0).unwrap();
    let g = Graph::build(&[y.clone()]);
    let _b = alloc_graph_host(&g).unwrap();
    x.write_f32(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    let mut be = CpuBackend::new(1);
    be.graph_compute(&g).unwrap();
    assert_eq!(y.to_f32_vec().unwrap(), vec![9.0, 12.0]);

    // the view's base moves: the plan reading the view is resolved again
    x.clear_storage();
    let _moved = alloc_graph_host(&g).unwrap();
    x.write_f32(&[0.0, 0.0, 5.0, 6.0]).unwrap();
    be.graph_compute(&g).unwrap();
    assert_eq!(be.plan_resolutions(), 2);
    assert_eq!(y.to_f32_vec().unwrap(), vec![15.0, 18.0]);
}

/// Issue 47: the backend computes for the thread count asked (`n_threads`)
/// on at most the available cores (`pool_threads`); the poll level is
/// kept across pool restarts; the init string takes `poll=`.
#[test]
fn thread_counts_above_the_cores_run_on_the_cores() {
    use super::{available_cores, Poll, MAX_THREADS};
    let cores = available_cores();
    let mut cpu = CpuBackend::new(cores + 6);
    assert_eq!(cpu.n_threads(), cores + 6);
    assert_eq!(cpu.pool_threads(), cores);
    cpu.set_poll(Poll::NONE);
    cpu.set_n_threads(10_000);
    assert_eq!(
        (cpu.n_threads(), cpu.pool_threads(), cpu.poll()),
        (MAX_THREADS, cores.min(MAX_THREADS), Poll::NONE)
    );
    cpu.set_pool_threads(usize::MAX);
    assert_eq!(cpu.pool_threads(), MAX_THREADS);
    cpu.set_n_threads(3);
    assert_eq!((cpu.n_threads(), cpu.pool_threads()), (3, cores.min(3)));
    cpu.set_pool_threads(0);
    assert_eq!(cpu.pool_threads(), 1);
    assert_eq!(CpuBackend::new(0).n_threads(), 1);

    // The same graph gives the same values at every split, and its work
    // memory follows the share count.
    let (g, _x, y, _b) = small_graph();
    let mut want = None;
    for (n, active, adaptive) in [(1, 1, true), (64, 2, true), (64, 64, false), (5, 1, true)] {
        let mut cpu = CpuBackend::new(n);
        cpu.set_pool_threads(active);
        cpu.set_adaptive(adaptive);
        assert_eq!(cpu.pool_threads(), active);
        cpu.graph_compute(&g).unwrap();
        let got = y.to_f32_vec().unwrap();
        assert_eq!(got, *want.get_or_insert_with(|| got.clone()));
    }
    assert_eq!(want.unwrap(), vec![3.0, 5.0, 7.0, 9.0]);

    let cpu = CpuBackend::from_params("threads=2,poll=0").unwrap();
    assert_eq!((cpu.n_threads(), cpu.poll()), (2, Poll::NONE));
    assert_eq!(
        CpuBackend::from_params("").unwrap().poll(),
        super::default_poll()
    );
    for bad in ["poll=101", "poll=x", "poll=-1"] {
        let e = CpuBackend::from_params(bad)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("poll=0..100"), "{e}");
    }
}

#[test]
fn small_row_gathers_run_on_the_calling_thread_with_the_same_bits() {
    // a decode step's token embedding: Q8_0 rows gathered into f32
    let rows = |n_rows: usize, n_ids: usize| {
        let w = Tensor::new(DType::Q8_0, &[64, n_rows]).unwrap();
        let ids = Tensor::new(DType::I32, &[n_ids]).unwrap();
        let y = ops::get_rows(&w, &ids).unwrap();
        let g = Graph::build(&[y.clone()]);
        let bufs = alloc_graph_host(&g).unwrap();
        let vals: Vec<f32> = (0..64 * n_rows).map(|i| (i % 29) as f32 - 14.0).collect();
        w.write_f32(&vals).unwrap();
        let idx: Vec<i32> = (0..n_ids).map(|i| ((i * 7) % n_rows) as i32).collect();
        ids.write_i32(&idx).unwrap();
        (g, y, bufs)
    };
    for (n_ids, light) in [(1, true), (256, true), (257, false)] {
        let (g, y, _bufs) = rows(300, n_ids);
        let mut one = CpuBackend::new(1);
        one.graph_compute(&g).unwrap();
        let want = y.to_f32_vec().unwrap();
        let mut two = CpuBackend::new(2);
        two.graph_compute(&g).unwrap();
        assert_eq!(
            two.cache.as_ref().map(|c| c.light),
            Some(light),
            "{n_ids} rows"
        );
        assert_eq!(y.to_f32_vec().unwrap(), want, "{n_ids} rows");
    }
    // a product is never light, however small
    let a = Tensor::new(DType::F32, &[4, 2]).unwrap();
    let b = Tensor::new(DType::F32, &[4, 1]).unwrap();
    let g = Graph::build(&[ops::mul_mat(&a, &b).unwrap()]);
    let _bufs = alloc_graph_host(&g).unwrap();
    let mut be = CpuBackend::new(2);
    be.graph_compute(&g).unwrap();
    assert_eq!(be.cache.as_ref().map(|c| c.light), Some(false));
}

//! The graph-plan API (ggml's `graph_plan_create` / `graph_plan_compute` /
//! `graph_plan_free`, issue #15 item 5): a plan made once computes what
//! `graph_compute` computes, as often as wanted, with new input data each
//! time; a stale plan or one made for another backend is refused, typed.

use std::sync::Arc;

use strata::backend::{Backend, Buffer, GraphPlan};
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::testkit::TestBackend;
use strata::{ops, DType, Error, Graph, Tensor};

/// out = softmax(w · x) + x', with quantized-free F32 data, in host memory
/// (the buffers come last), `w` filled.
fn graph() -> (Graph, Tensor, Tensor, Tensor, Vec<Arc<dyn Buffer>>) {
    let w = Tensor::new(DType::F32, &[8, 8]).unwrap().with_name("w");
    let x = Tensor::new(DType::F32, &[8, 3]).unwrap().with_name("x");
    let m = ops::mul_mat(&w, &x).unwrap().with_name("m");
    let s = ops::soft_max(&m).unwrap().with_name("s");
    let out = ops::add(&s, &x).unwrap().with_name("out");
    let g = Graph::build(&[out.clone()]);
    let bufs = alloc_graph_host(&g).unwrap();
    fill(&w, 0.0);
    (g, w, x, out, bufs)
}

/// A CPU backend of `nth` threads and its plan for `g`.
fn cpu_plan(g: &Graph, nth: usize) -> (CpuBackend, GraphPlan) {
    let mut cpu = CpuBackend::new(nth);
    let plan = cpu.graph_plan_create(g).unwrap();
    (cpu, plan)
}

/// What `out` holds after `compute` runs, with `out` zeroed first (so a
/// compute that writes nothing fails the comparison).
fn computed(out: &Tensor, compute: impl FnOnce()) -> Vec<f32> {
    out.write_f32(&vec![0.0; out.nelements()]).unwrap();
    compute();
    out.to_f32_vec().unwrap()
}

fn fill(t: &Tensor, seed: f32) {
    let v: Vec<f32> = (0..t.nelements())
        .map(|i| ((i as f32 * 0.37 + seed).sin()) * 0.5)
        .collect();
    t.write_f32(&v).unwrap();
}

#[test]
fn a_cpu_plan_computes_what_graph_compute_computes_again_and_again() {
    let (g, _w, x, out, _bufs) = graph();
    let (mut cpu, plan) = cpu_plan(&g, 2);
    assert_eq!(plan.backend(), "CPU");
    assert_eq!(plan.graph().nodes().len(), g.nodes().len());
    for round in 0..3 {
        fill(&x, round as f32);
        cpu.graph_compute(&g).unwrap();
        let want = out.to_f32_vec().unwrap();
        let got = computed(&out, || cpu.graph_plan_compute(&plan).unwrap());
        assert_eq!(got, want, "round {round}");
        // another CPU backend, with another thread count, runs the same plan
        let got = computed(&out, || {
            CpuBackend::new(1).graph_plan_compute(&plan).unwrap()
        });
        assert_eq!(got, want, "round {round}, 1 thread");
    }
    drop(plan); // graph_plan_free
}

#[test]
fn a_plan_whose_tensors_moved_is_refused() {
    let (g, w, x, _out, _bufs) = graph();
    fill(&x, 1.0);
    let (mut cpu, plan) = cpu_plan(&g, 1);
    cpu.graph_plan_compute(&plan).unwrap();
    // place the graph's tensors elsewhere
    for t in g.nodes().iter().chain(g.leafs()) {
        t.clear_storage();
    }
    let _moved = alloc_graph_host(&g).unwrap();
    fill(&w, 0.0);
    fill(&x, 1.0);
    match cpu.graph_plan_compute(&plan) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("stale"), "{msg}"),
        other => panic!("stale plan accepted: {other:?}"),
    }
    // a new plan runs
    let plan = cpu.graph_plan_create(&g).unwrap();
    cpu.graph_plan_compute(&plan).unwrap();
}

#[test]
fn a_plan_runs_only_on_the_backend_kind_that_made_it() {
    let (g, _w, x, out, _bufs) = graph();
    fill(&x, 2.0);
    let (mut cpu, plan) = cpu_plan(&g, 1);
    let mut other = TestBackend::host("HOSTY", |_| true, 1);
    match other.graph_plan_compute(&plan) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("'CPU'") && msg.contains("'HOSTY'"), "{msg}")
        }
        r => panic!("plan of another backend accepted: {r:?}"),
    }
    // the default plan of a backend without one of its own computes the graph
    let own: GraphPlan = other.graph_plan_create(&g).unwrap();
    cpu.graph_compute(&g).unwrap();
    let want = out.to_f32_vec().unwrap();
    let got = computed(&out, || other.graph_plan_compute(&own).unwrap());
    assert_eq!(got, want);
    assert!(cpu.graph_plan_compute(&own).is_err());
}

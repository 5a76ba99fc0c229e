//! The scheduler: ggml's placement rules, splits and copies, checked against
//! the seeds' experiment and against CPU-only runs on random graphs.

mod common;

use std::sync::{Arc, Mutex};

use common::Rng;
use proptest::prelude::*;
use strata::backend::{alloc_tensors, Backend, BufferUsage};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::ops::{self, UnaryOp};
use strata::sched::experiment::expected;
use strata::sched::{Assigned, BackendId, Cause, SchedConfig, Scheduler};
use strata::testkit::TestBackend;
use strata::{DType, Error, Graph, Tensor};

const A: [f32; 8] = [2.0, 8.0, 5.0, 1.0, 4.0, 2.0, 8.0, 6.0];
const B: [f32; 6] = [10.0, 5.0, 9.0, 9.0, 5.0, 4.0];

struct Seed {
    graph: Graph,
    out: Tensor,
    sched: Scheduler,
    _keep: Vec<Arc<dyn strata::backend::Buffer>>,
}

/// The seeds' program: A, B on the device, C, D in a CPU buffer;
/// mul_mat(A, B) + C + D, scheduled over [device, CPU].
fn seed(cpu_weights: bool) -> Seed {
    let dev = TestBackend::device("FAKE0", |_| true, 1);
    let dev_buft = dev.default_buffer_type();
    let a = Tensor::new(DType::F32, &[2, 4]).unwrap().with_name("a");
    let b = Tensor::new(DType::F32, &[2, 3]).unwrap().with_name("b");
    let c = Tensor::new(DType::F32, &[4, 3]).unwrap().with_name("c");
    let d = Tensor::new(DType::F32, &[4, 3]).unwrap().with_name("d");
    let buf_ab = alloc_tensors(&[a.clone(), b.clone()], &dev_buft)
        .unwrap()
        .remove(0);
    buf_ab.set_usage(BufferUsage::Weights);
    let buf_cd = alloc_tensors(&[c.clone(), d.clone()], &cpu_buffer_type())
        .unwrap()
        .remove(0);
    if cpu_weights {
        buf_cd.set_usage(BufferUsage::Weights);
    }
    a.write_f32(&A).unwrap();
    b.write_f32(&B).unwrap();
    c.write_f32(&(1..=12).map(|x| x as f32).collect::<Vec<_>>())
        .unwrap();
    d.write_f32(&[0.5; 12]).unwrap();
    let mm = ops::mul_mat(&a, &b).unwrap().with_name("mul_mat_0");
    let add0 = ops::add(&mm, &c).unwrap().with_name("add_0");
    let add1 = ops::add(&add0, &d).unwrap().with_name("add_1");
    add1.set_output();
    let graph = Graph::build(&[add1.clone()]);
    let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(CpuBackend::new(2))];
    let sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
    Seed {
        graph,
        out: add1,
        sched,
        _keep: vec![buf_ab, buf_cd],
    }
}

#[test]
fn seed_experiment_cpu_weights_pull_the_adds_to_the_cpu() {
    let mut s = seed(true);
    s.sched.alloc_graph(&s.graph).unwrap();
    s.sched.compute(&s.graph).unwrap();
    assert_eq!(s.sched.n_splits(), 2);
    let names: Vec<String> = s.sched.backends().iter().map(|b| b.name()).collect();
    let on = |t: &Tensor| names[s.sched.tensor_backend(t).unwrap().index()].clone();
    let nodes = s.graph.nodes().to_vec();
    assert_eq!(on(&nodes[0]), "FAKE0");
    assert_eq!(on(&nodes[1]), "CPU");
    assert_eq!(on(&nodes[2]), "CPU");
    let p = s.sched.assign(&s.graph).unwrap();
    assert_eq!(p.nodes[0].cause, Cause::Weight(0));
    assert_eq!(p.nodes[1].cause, Cause::Weight(1));
    assert_eq!(
        p.splits[1].inputs.len(),
        1,
        "the mul_mat result is copied to the CPU"
    );
    assert_eq!(s.out.to_f32_vec().unwrap(), expected());
    let report = s.sched.report_for(&s.graph).unwrap();
    assert!(report.to_text(true).contains("1.wgt1"));
    assert!(report.to_json().contains("\"cause\": \"1.wgt0\""));
}

#[test]
fn seed_experiment_unmarked_buffer_keeps_everything_on_the_device() {
    let mut s = seed(false);
    s.sched.compute(&s.graph).unwrap();
    assert_eq!(s.sched.n_splits(), 1);
    let p = s.sched.assign(&s.graph).unwrap();
    assert!(
        p.nodes.iter().all(|a| a.backend == BackendId(0)),
        "{:?}",
        p.nodes
    );
    assert_eq!(p.nodes[1].cause, Cause::Expand);
    assert_eq!(
        p.splits[0].inputs.len(),
        2,
        "C and D are copied to the device"
    );
    assert_eq!(s.out.to_f32_vec().unwrap(), expected());
    let r = s.sched.report_for(&s.graph).unwrap();
    assert_eq!(r.copy_bytes, 2 * 48);
    assert!(r.splits[0].inputs.iter().any(|i| i.copy == "FAKE0#c#0"));
}

/// The ids of every node's sources, node by node.
fn source_ids(g: &Graph) -> Vec<Vec<strata::TensorId>> {
    g.nodes()
        .iter()
        .map(|n| n.srcs().map(Tensor::id).collect())
        .collect()
}

#[test]
fn reserve_is_idempotent_and_does_not_touch_the_graph() {
    let mut s = seed(true);
    let before = source_ids(&s.graph);
    s.sched.reserve(&s.graph).unwrap();
    let sizes: Vec<usize> = (0..2).map(|b| s.sched.buffer_size(BackendId(b))).collect();
    let p1 = format!("{:?}", s.sched.assign(&s.graph).unwrap());
    s.sched.reserve(&s.graph).unwrap();
    assert_eq!(
        sizes,
        (0..2)
            .map(|b| s.sched.buffer_size(BackendId(b)))
            .collect::<Vec<_>>()
    );
    assert_eq!(p1, format!("{:?}", s.sched.assign(&s.graph).unwrap()));
    let after = source_ids(&s.graph);
    assert_eq!(before, after, "sources are never rewritten");
    s.sched.compute(&s.graph).unwrap();
    assert_eq!(s.out.to_f32_vec().unwrap(), expected());
}

#[test]
fn user_assignment_wins_and_is_reported() {
    let mut s = seed(true);
    let add1 = s.graph.nodes()[2].clone();
    s.sched.set_tensor_backend(&add1, BackendId(0)).unwrap();
    s.sched.compute(&s.graph).unwrap();
    assert_eq!(s.sched.tensor_backend(&add1), Some(BackendId(0)));
    let p = s.sched.assign(&s.graph).unwrap();
    assert_eq!(p.nodes[2].cause, Cause::User);
    assert_eq!(s.sched.n_splits(), 3);
    assert_eq!(s.out.to_f32_vec().unwrap(), expected());
    assert!(s.sched.set_tensor_backend(&add1, BackendId(7)).is_err());
}

#[test]
fn preallocated_tensor_on_a_backend_that_cannot_run_it_is_an_error() {
    // the op result lives in a device buffer, but the device refuses ADD
    let dev = TestBackend::device("FAKE0", |t| t.op().name() != "ADD", 1);
    let x = Tensor::new(DType::F32, &[4]).unwrap().with_name("x");
    let y = ops::add(&x, &x).unwrap().with_name("y");
    let _b = alloc_tensors(&[x.clone(), y.clone()], &dev.default_buffer_type()).unwrap();
    let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(CpuBackend::new(1))];
    let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
    let g = Graph::build(&[y]);
    let e = sched.alloc_graph(&g).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("'y'"), "{e}");
}

#[test]
fn scheduler_settings_are_checked() {
    let dev: Vec<Box<dyn Backend>> = vec![Box::new(TestBackend::device("FAKE0", |_| true, 1))];
    assert!(
        Scheduler::new(dev, None, SchedConfig::default()).is_err(),
        "last backend must be the CPU"
    );
    let many: Vec<Box<dyn Backend>> = (0..3)
        .map(|_| Box::new(CpuBackend::new(1)) as Box<dyn Backend>)
        .collect();
    let cfg = SchedConfig {
        max_backends: 2,
        ..SchedConfig::default()
    };
    assert!(matches!(
        Scheduler::new(many, None, cfg),
        Err(Error::Limit { .. })
    ));
}

#[test]
fn eval_callback_sees_exactly_the_requested_nodes() {
    let mut s = seed(false);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    s.sched
        .set_eval_callback(Some(Box::new(move |t: &Tensor, ask: bool| {
            if ask {
                return t.name() == "mul_mat_0" || t.name() == "add_1";
            }
            // data is readable when we are shown the node
            seen2
                .lock()
                .unwrap()
                .push((t.name(), t.to_f32_vec().unwrap()[0]));
            true
        })));
    s.sched.compute(&s.graph).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], ("mul_mat_0".to_string(), 60.0));
    assert_eq!(seen[1], ("add_1".to_string(), expected()[0]));
}

/// `n` F32 vectors of `len`, named `{prefix}0`, `{prefix}1`, ...
fn named_f32s(prefix: &str, n: usize, len: usize) -> Vec<Tensor> {
    (0..n)
        .map(|i| {
            Tensor::new(DType::F32, &[len])
                .unwrap()
                .with_name(format!("{prefix}{i}"))
        })
        .collect()
}

#[test]
fn split_input_limit_starts_new_splits_or_errors() {
    // 5 CPU inputs consumed by device ops: with max 2 inputs per split, more splits
    let dev = TestBackend::device("FAKE0", |_| true, 1);
    let w = Tensor::new(DType::F32, &[4]).unwrap().with_name("w");
    let _bw = alloc_tensors(&[w.clone()], &dev.default_buffer_type()).unwrap();
    _bw[0].set_usage(BufferUsage::Weights);
    let xs = named_f32s("x", 5, 4);
    let _bx = alloc_tensors(&xs, &cpu_buffer_type()).unwrap();
    let mut cur = ops::mul(&w, &w).unwrap();
    for x in &xs {
        cur = ops::add(&cur, x).unwrap();
    }
    let g = Graph::build(&[cur.clone()]);
    let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(CpuBackend::new(1))];
    let cfg = SchedConfig {
        max_split_inputs: 2,
        ..SchedConfig::default()
    };
    let mut sched = Scheduler::new(backends, None, cfg).unwrap();
    w.write_f32(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    for (i, x) in xs.iter().enumerate() {
        x.write_f32(&[i as f32; 4]).unwrap();
    }
    sched.compute(&g).unwrap();
    assert!(sched.splits().iter().all(|s| s.inputs.len() <= 2));
    assert_eq!(sched.n_splits(), 3);
    assert_eq!(cur.to_f32_vec().unwrap(), vec![11.0, 14.0, 19.0, 26.0]);
}

// ---- random graphs on random capability sets -------------------------------

#[derive(Clone, Debug)]
enum Step {
    Unary(usize, UnaryOp),
    Add(usize, usize),
    Mul(usize, usize),
    Scale(usize),
    View(usize),
}

fn build(steps: &[Step], inputs: &[Tensor]) -> Vec<Tensor> {
    let mut ts: Vec<Tensor> = inputs.to_vec();
    for s in steps {
        let pick = |i: usize| ts[i % ts.len()].clone();
        let t = match s {
            Step::Unary(i, u) => ops::unary(&pick(*i), *u).unwrap(),
            Step::Add(i, j) => ops::add(&pick(*i), &pick(*j)).unwrap(),
            Step::Mul(i, j) => ops::mul(&pick(*i), &pick(*j)).unwrap(),
            Step::Scale(i) => ops::scale(&pick(*i), 0.5).unwrap(),
            Step::View(i) => ops::transpose(&pick(*i)).unwrap(),
        };
        ts.push(t);
    }
    ts
}

fn step() -> impl Strategy<Value = Step> {
    let un = prop::sample::select(vec![
        UnaryOp::Neg,
        UnaryOp::Tanh,
        UnaryOp::Abs,
        UnaryOp::Sigmoid,
    ]);
    prop_oneof![
        (0usize..64, un).prop_map(|(i, u)| Step::Unary(i, u)),
        (0usize..64, 0usize..64).prop_map(|(i, j)| Step::Add(i, j)),
        (0usize..64, 0usize..64).prop_map(|(i, j)| Step::Mul(i, j)),
        (0usize..64).prop_map(Step::Scale),
        (0usize..64).prop_map(Step::View),
    ]
}

const OPS: [&str; 4] = ["ADD", "MUL", "UNARY", "SCALE"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_place_validly_and_match_the_cpu(
        steps in prop::collection::vec(step(), 1..24),
        dev_mask in 0u8..16,
        cpu_mask in 0u8..16,
        weights_on_dev in any::<bool>(),
        n_copies in 1usize..4,
        seed in any::<u64>(),
    ) {
        // Inputs: one weight (device or CPU buffer), two graph inputs.
        let dev = TestBackend::device("FAKE0", move |t| OPS.iter().position(|o| *o == t.op().name()).is_some_and(|k| dev_mask >> k & 1 == 1), 1);
        let host = TestBackend::host("CPU", move |t| OPS.iter().position(|o| *o == t.op().name()).is_none_or(|k| cpu_mask >> k & 1 == 1 || k == 0), 2);
        let w = Tensor::new(DType::F32, &[8, 8]).unwrap().with_name("w");
        let wbuft = if weights_on_dev { dev.default_buffer_type() } else { cpu_buffer_type() };
        let _wb = alloc_tensors(&[w.clone()], &wbuft).unwrap();
        _wb[0].set_usage(BufferUsage::Weights);
        let x0 = Tensor::new(DType::F32, &[8, 8]).unwrap().with_name("x0");
        let x1 = Tensor::new(DType::F32, &[8, 8]).unwrap().with_name("x1");
        x0.set_input();
        x1.set_input();
        let ts = build(&steps, &[w.clone(), x0.clone(), x1.clone()]);
        let out = ts.last().unwrap().clone();
        out.set_output();
        let graph = Graph::build(&[out.clone()]);
        let mut rng = Rng::new(seed);
        let (vw, v0, v1) = (rng.vec(64, -1.0, 1.0), rng.vec(64, -1.0, 1.0), rng.vec(64, -1.0, 1.0));
        w.write_f32(&vw).unwrap();

        let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(host)];
        let cfg = SchedConfig { n_copies, ..SchedConfig::default() };
        let mut sched = Scheduler::new(backends, None, cfg).unwrap();
        let placed = sched.assign(&graph);
        let Ok(p) = placed else {
            // only when some op is supported nowhere
            prop_assert!(matches!(placed, Err(Error::Unsupported { .. })), "only unsupported ops may fail placement");
            return Ok(());
        };
        // every compute node on a backend that supports it; splits cover their nodes
        for (i, n) in graph.nodes().iter().enumerate() {
            prop_assert!(sched.backends()[p.nodes[i].backend.index()].supports_op(n), "{} on {}", n.name(), p.nodes[i].backend);
        }
        for s in &p.splits {
            for i in s.start..s.end {
                if !graph.nodes()[i].op().is_view_op() {
                    prop_assert_eq!(p.nodes[i].backend, s.backend);
                }
            }
        }
        // results equal to a CPU-only run, over repeated computes
        let mut results = Vec::new();
        for _ in 0..3 {
            sched.alloc_graph(&graph).unwrap();
            // inputs the random graph does not use have no memory
            for (x, v) in [(&x0, &v0), (&x1, &v1)] {
                if graph.contains(x) {
                    x.write_f32(v).unwrap();
                }
            }
            sched.compute(&graph).unwrap();
            results.push(out.to_f32_vec().unwrap());
        }
        // CPU-only reference on fresh tensors
        let rw = Tensor::new(DType::F32, &[8, 8]).unwrap();
        let r0 = Tensor::new(DType::F32, &[8, 8]).unwrap();
        let r1 = Tensor::new(DType::F32, &[8, 8]).unwrap();
        let rts = build(&steps, &[rw.clone(), r0.clone(), r1.clone()]);
        let rout = rts.last().unwrap().clone();
        let rg = Graph::build(&[rout.clone()]);
        let ins: Vec<(&Tensor, &[f32])> = [(&rw, &vw), (&r0, &v0), (&r1, &v1)]
            .into_iter()
            .filter(|(t, _)| rg.contains(t))
            .map(|(t, v)| (t, v.as_slice()))
            .collect();
        let want = common::run(&[rout], &ins, 1).remove(0);
        for r in &results {
            prop_assert_eq!(r, &want);
        }
    }
}

// ---- policy, offload, fit, smaller graphs ----------------------------------

/// w (CPU weights) · x for a batch of `n` columns, then an add.
fn weights_on_cpu(
    n: usize,
) -> (
    Graph,
    Tensor,
    Tensor,
    Tensor,
    Vec<Arc<dyn strata::backend::Buffer>>,
) {
    let w = Tensor::new(DType::F32, &[16, 8]).unwrap().with_name("w");
    let bufs = alloc_tensors(&[w.clone()], &cpu_buffer_type()).unwrap();
    bufs[0].set_usage(BufferUsage::Weights);
    w.write_f32(&(0..128).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>())
        .unwrap();
    let x = Tensor::new(DType::F32, &[16, n]).unwrap().with_name("x");
    x.set_input();
    let y = ops::mul_mat(&w, &x).unwrap().with_name("ffn_out");
    let z = ops::sqr(&y).unwrap().with_name("attn_sq");
    z.set_output();
    (Graph::build(&[z.clone()]), w, x, z, bufs.into())
}

fn dev_cpu(cfg: SchedConfig) -> Scheduler {
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(TestBackend::device("FAKE0", |_| true, 1).offloading()),
        Box::new(CpuBackend::new(1)),
    ];
    Scheduler::new(backends, None, cfg).unwrap()
}

#[test]
fn offload_threshold_decides_where_cpu_weight_ops_run() {
    let (g, ..) = weights_on_cpu(40);
    let sched = dev_cpu(SchedConfig::default());
    assert_eq!(sched.assign(&g).unwrap().nodes[0], on(0, Cause::Offload));
    let policy = strata::sched::PlacementPolicy::new().offload_min_batch(BackendId(0), 64);
    let sched = dev_cpu(SchedConfig {
        policy,
        ..SchedConfig::default()
    });
    assert_eq!(
        sched.assign(&g).unwrap().nodes[0],
        on(1, Cause::Weight(0)),
        "batch 40 < 64: stays with its weights"
    );
    let sched = dev_cpu(SchedConfig {
        op_offload: false,
        ..SchedConfig::default()
    });
    assert_eq!(sched.assign(&g).unwrap().nodes[0], on(1, Cause::Weight(0)));
}

/// The offload threshold counts a MUL_MAT_ID's tokens (ne[2]), not the
/// experts used per token (ne[1]), as ggml's offload rule does.
#[test]
fn offload_threshold_counts_the_tokens_of_an_expert_matmul() {
    let experts = Tensor::new(DType::F32, &[16, 8, 4])
        .unwrap()
        .with_name("ffn_up_exps");
    let bufs = alloc_tensors(&[experts.clone()], &cpu_buffer_type()).unwrap();
    bufs.set_usage(BufferUsage::Weights);
    let b = Tensor::new(DType::F32, &[16, 1, 40]).unwrap();
    b.set_input();
    let ids = Tensor::new(DType::I32, &[2, 40]).unwrap();
    ids.set_input();
    let y = ops::mul_mat_id(&experts, &b, &ids).unwrap();
    y.set_output();
    assert_eq!(y.ne()[..3], [8, 2, 40]);
    let g = Graph::build(&[y]);
    let with_min = |n: usize| {
        let policy = strata::sched::PlacementPolicy::new().offload_min_batch(BackendId(0), n);
        let sched = dev_cpu(SchedConfig {
            policy,
            ..SchedConfig::default()
        });
        sched.assign(&g).unwrap().nodes[0]
    };
    assert_eq!(with_min(32), on(0, Cause::Offload), "40 tokens >= 32");
    assert_eq!(with_min(64), on(1, Cause::Weight(0)), "40 tokens < 64");
}

#[test]
fn name_rules_place_ops_and_bad_rules_are_errors() {
    let (g, _w, x, z, _b) = weights_on_cpu(4);
    let policy = strata::sched::PlacementPolicy::new()
        .rule("^attn_", BackendId(0))
        .unwrap();
    let mut sched = dev_cpu(SchedConfig {
        policy,
        op_offload: false,
        ..SchedConfig::default()
    });
    let p = sched.assign(&g).unwrap();
    assert_eq!(p.nodes[0], on(1, Cause::Weight(0)));
    assert_eq!(p.nodes[1], on(0, Cause::Policy));
    sched.alloc_graph(&g).unwrap();
    x.write_f32(&[1.0; 64]).unwrap();
    sched.compute(&g).unwrap();
    let want: Vec<f32> = (0..4)
        .flat_map(|_| {
            (0..8).map(|r| {
                ((0..16)
                    .map(|c| ((r * 16 + c) % 7) as f32 - 3.0)
                    .sum::<f32>())
                .powi(2)
            })
        })
        .collect();
    assert_eq!(z.to_f32_vec().unwrap(), want);
    let bad = strata::sched::PlacementPolicy::new()
        .rule("x", BackendId(5))
        .unwrap();
    let backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend::new(1))];
    assert!(Scheduler::new(
        backends,
        None,
        SchedConfig {
            policy: bad,
            ..SchedConfig::default()
        }
    )
    .is_err());
}

#[test]
fn fit_predicts_the_real_buffers_without_allocating() {
    let (g, ..) = weights_on_cpu(8);
    let mut sched = dev_cpu(SchedConfig::default());
    let fit = sched.fit(&g).unwrap();
    assert_eq!(
        sched.buffer_size(BackendId(0)),
        0,
        "nothing allocated by fit"
    );
    assert_eq!(fit.backends[1].weight_bytes, 16 * 8 * 4);
    sched.alloc_graph(&g).unwrap();
    for (i, line) in fit.backends.iter().enumerate() {
        assert!(
            sched.buffer_size(BackendId(i)) >= line.compute_bytes,
            "{line:?}"
        );
        assert!(line.compute_bytes > 0);
    }
    assert_eq!(fit.n_splits, sched.n_splits());
    // after allocation the input lives in our compute buffer: still not a weight
    assert_eq!(sched.fit(&g).unwrap().backends[1].weight_bytes, 16 * 8 * 4);
}

#[test]
fn a_smaller_graph_after_reserve_keeps_the_buffers() {
    let (big, ..) = weights_on_cpu(64);
    let mut sched = dev_cpu(SchedConfig::default());
    sched.reserve(&big).unwrap();
    let sizes: Vec<usize> = (0..2).map(|b| sched.buffer_size(BackendId(b))).collect();
    for n in [1, 7, 64] {
        let (g, _w, x, z, _b) = weights_on_cpu(n);
        sched.alloc_graph(&g).unwrap();
        assert_eq!(
            sizes,
            (0..2)
                .map(|b| sched.buffer_size(BackendId(b)))
                .collect::<Vec<_>>(),
            "batch {n} grew a buffer"
        );
        x.write_f32(&vec![0.5; 16 * n]).unwrap();
        sched.compute(&g).unwrap();
        assert_eq!(z.to_f32_vec().unwrap().len(), 8 * n);
    }
}

/// Backend `b` for `cause`, as an assignment reads it.
fn on(b: usize, cause: Cause) -> Assigned {
    Assigned {
        backend: BackendId(b),
        cause,
    }
}

/// Issue 15 item 2 (seed 004): the scheduler's dependency node for a split
/// input must not count as a view of the input, or the input's memory on
/// its own backend lives to the end of the graph and the compute buffers
/// grow with the number of splits. A chain alternating between a device
/// (SQR only) and the CPU (everything else): each backend's buffer stays a
/// few tensors wide however many splits there are.
#[test]
fn split_inputs_are_freed_after_their_copy_in_many_split_plans() {
    const N: usize = 16 * 1024; // f32 elements per tensor: 64 KiB
    let tensor_bytes = N * 4;
    let plan = |n_pairs: usize| {
        let dev = TestBackend::device("FAKE0", |_| true, 1);
        // weights pull each op to their backend: MULs to the device, ADDs to the CPU
        let wd = Tensor::new(DType::F32, &[N]).unwrap().with_name("wd");
        let wc = Tensor::new(DType::F32, &[N]).unwrap().with_name("wc");
        let mut keep = alloc_tensors(&[wd.clone()], &dev.default_buffer_type()).unwrap();
        keep.extend(alloc_tensors(&[wc.clone()], &cpu_buffer_type()).unwrap());
        keep.iter().for_each(|b| b.set_usage(BufferUsage::Weights));
        let x = Tensor::new(DType::F32, &[N]).unwrap().with_name("x");
        x.set_input();
        let mut cur = x;
        for i in 0..n_pairs {
            cur = ops::mul(&cur, &wd).unwrap().with_name(format!("dev{i}"));
            cur = ops::add(&cur, &wc).unwrap().with_name(format!("cpu{i}"));
        }
        cur.set_output();
        let g = Graph::build(&[cur]);
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(CpuBackend::new(1))];
        let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
        sched.reserve(&g).unwrap();
        let sizes = [0, 1].map(|b| sched.buffer_size(BackendId(b)));
        (sched.n_splits(), sizes)
    };
    let (splits_small, small) = plan(2);
    let (splits_big, big) = plan(12);
    println!("{splits_small} splits: {small:?} bytes; {splits_big} splits: {big:?} bytes");
    assert!(
        splits_big >= 20 && splits_big > splits_small,
        "{splits_big} splits"
    );
    for b in 0..2 {
        assert!(
            big[b] <= 4 * tensor_bytes,
            "backend {b}: {} KiB for {splits_big} splits (2 pairs: {} KiB): split inputs \
             outlive their copies",
            big[b] / 1024,
            small[b] / 1024
        );
        assert_eq!(
            big[b], small[b],
            "backend {b}: the size must not grow with the splits"
        );
    }
}

/// Issue 15 item 4 (seed 001): the split count does not depend on how many
/// buffers the CPU weights needed: one `set_usage` on `alloc_tensors`'
/// handle marks them all, so both CPU-weight ADDs run on the CPU (marking
/// only the first buffer moves the second ADD to the device: 3 splits).
#[test]
fn split_count_does_not_depend_on_how_many_buffers_hold_the_weights() {
    let splits = |max_size: usize| {
        let dev = TestBackend::device("FAKE0", |_| true, 1);
        let wd = Tensor::new(DType::F32, &[16]).unwrap().with_name("wd");
        let wc = named_f32s("wc", 2, 16);
        let bd = alloc_tensors(&[wd.clone()], &dev.default_buffer_type()).unwrap();
        bd.set_usage(BufferUsage::Weights);
        let buft = strata::cpu::HostBufferType::with_max_size(max_size);
        let bc = alloc_tensors(&wc, &buft).unwrap();
        bc.set_usage(BufferUsage::Weights);
        let x = Tensor::new(DType::F32, &[16]).unwrap().with_name("x");
        x.set_input();
        let mut cur = x;
        for w in &wc {
            cur = ops::mul(&cur, &wd).unwrap();
            cur = ops::add(&cur, w).unwrap();
        }
        cur.set_output();
        let g = Graph::build(&[cur]);
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(dev), Box::new(CpuBackend::new(1))];
        let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
        sched.reserve(&g).unwrap();
        (bc.len(), sched.n_splits())
    };
    let (one_buffer, s1) = splits(1 << 20);
    let (two_buffers, s2) = splits(64);
    assert_eq!((one_buffer, two_buffers), (1, 2));
    assert_eq!(s1, 4, "device MUL, CPU ADD, device MUL, CPU ADD");
    assert_eq!(s2, s1);
}

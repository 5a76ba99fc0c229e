//! `graph_copy` and `compare_graph_backend`: a backend that perturbs exactly
//! one op is caught at that op and no earlier one, an identical backend
//! shows no difference, ops the target lacks are reported and bridged, the
//! typed errors, and copies of varied graphs (views, permutes, quantized
//! leafs, a cache written through SET_ROWS) computing the same bytes in
//! memory the CPU cannot see.

use std::sync::Arc;

use proptest::prelude::*;
use strata::backend::{
    alloc_graph, compare_graph_backend, compare_graph_backend_with, graph_copy, Backend, Buffer,
    BufferType, CompareError, CompareOptions, Comparison, Device, MultiBuffer, NodeOutcome,
};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::testkit::TestBackend;
use strata::{ops, DType, Graph, Result, Tensor};

/// Which node a [`Perturb`] backend gets wrong.
enum Which {
    /// The first node of this op it computes.
    FirstOp(&'static str),
    /// Every node of this name.
    Named(&'static str),
}

/// The CPU backend, except that `delta` is added to every element of one
/// node's result.
struct Perturb {
    cpu: CpuBackend,
    which: Which,
    delta: f32,
    hits: usize,
}

impl Perturb {
    fn new(which: Which, delta: f32) -> Perturb {
        Perturb {
            cpu: CpuBackend::new(2),
            which,
            delta,
            hits: 0,
        }
    }
}

impl Backend for Perturb {
    fn name(&self) -> String {
        "PERTURB".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.cpu.device()
    }
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.cpu.graph_compute(graph)?;
        for n in graph.nodes() {
            let hit = match self.which {
                Which::FirstOp(op) => self.hits == 0 && n.op().name() == op,
                Which::Named(name) => n.name() == name,
            };
            if hit {
                self.hits += 1;
                let v: Vec<f32> = n.to_f32_vec()?.iter().map(|x| x + self.delta).collect();
                n.write_f32(&v)?;
            }
        }
        Ok(())
    }
}

/// A small block in the shape of a transformer layer: RMS norm, MUL by a
/// norm weight, a Q8_0 matmul, bias, SiLU, a transpose made contiguous,
/// SOFT_MAX, a view, a second MUL and SUM_ROWS. Allocated on the CPU with
/// its leafs written.
fn block() -> (Graph, MultiBuffer) {
    let x = Tensor::new(DType::F32, &[64, 5]).unwrap().with_name("x");
    let nw = Tensor::new(DType::F32, &[64]).unwrap().with_name("norm_w");
    let w = Tensor::new(DType::Q8_0, &[64, 32]).unwrap().with_name("w");
    let b = Tensor::new(DType::F32, &[32]).unwrap().with_name("b");
    let norm = ops::rms_norm(&x, 1e-5).unwrap().with_name("norm");
    let normed = ops::mul(&norm, &nw).unwrap().with_name("attn_norm");
    let proj = ops::mul_mat(&w, &normed).unwrap().with_name("proj");
    let biased = ops::add(&proj, &b).unwrap().with_name("proj_b");
    let act = ops::silu(&biased).unwrap().with_name("act");
    let t = ops::cont(&ops::transpose(&act).unwrap())
        .unwrap()
        .with_name("act_t");
    let probs = ops::soft_max(&t).unwrap().with_name("probs");
    let rows = ops::view_2d(&probs, 5, 16, probs.nb()[1], probs.nb()[1] * 8)
        .unwrap()
        .with_name("rows");
    let gate = ops::mul(&rows, &rows).unwrap().with_name("gate");
    let out = ops::sum_rows(&gate).unwrap().with_name("out");
    out.set_output();
    let g = Graph::build(&[out]);
    let bufs = alloc_graph(&g, &cpu_buffer_type()).unwrap();
    let vals = |n: usize, k: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * k).sin() * 1.5 + 0.1).clamp(-2.0, 2.0))
            .collect()
    };
    x.write_f32(&vals(64 * 5, 0.37)).unwrap();
    nw.write_f32(&vals(64, 1.3)).unwrap();
    w.write_f32(&vals(64 * 32, 0.11)).unwrap();
    b.write_f32(&vals(32, 2.9)).unwrap();
    (g, bufs)
}

/// [`block`] on the CPU (one thread) and on `target`.
fn compare_with(target: &mut dyn Backend, opts: CompareOptions) -> Comparison {
    let (g, _bufs) = block();
    compare_graph_backend(&mut CpuBackend::new(1), target, &g, &opts).unwrap()
}

fn compare(target: &mut dyn Backend, tolerance: f64) -> Comparison {
    let opts = CompareOptions {
        tolerance,
        ..CompareOptions::default()
    };
    compare_with(target, opts)
}

fn names(c: &Comparison) -> Vec<&str> {
    c.nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn an_identical_backend_shows_no_difference() {
    let c = compare(&mut CpuBackend::new(2), 0.0);
    // views (the transpose, the row view) compute nothing and are not listed
    assert_eq!(
        names(&c),
        [
            "norm",
            "attn_norm",
            "proj",
            "proj_b",
            "act",
            "act_t",
            "probs",
            "gate",
            "out"
        ]
    );
    for n in &c.nodes {
        let NodeOutcome::Compared(f) = n.outcome else {
            panic!("{} not compared", n.name)
        };
        assert_eq!((f.nmse, f.max_abs, f.nonfinite_mismatches), (0.0, 0.0, 0));
        assert_eq!(f.elements, n.ne.iter().product::<usize>(), "{}", n.name);
    }
    assert!(c.first_beyond().is_none());
    assert!(c.to_text().contains("no node differs beyond the tolerance"));
    assert!(c.check().is_ok());
}

#[test]
fn the_first_perturbed_mul_is_named_and_nothing_before_it() {
    let mut target = Perturb::new(Which::FirstOp("MUL"), 1e-2);
    let c = compare(&mut target, 1e-6);
    assert_eq!(target.hits, 1);
    let first = c.first_beyond().expect("the perturbation is found");
    assert_eq!((first.name.as_str(), first.op), ("attn_norm", "MUL"));
    assert_eq!(first.index, 1);
    assert_eq!(first.ne, [64, 5, 1, 1]);
    assert_eq!(first.src_ne, [[64, 5, 1, 1], [64, 1, 1, 1]]);
    let NodeOutcome::Compared(f) = first.outcome else {
        panic!("compared")
    };
    assert!((f.max_abs - 1e-2).abs() < 1e-4, "{f:?}");
    assert!(f.nmse > 1e-6, "{f:?}");
    // every node before it agrees exactly; the error then travels on
    let at = c.nodes.iter().position(|n| n.name == "attn_norm").unwrap();
    assert!(c.nodes[..at].iter().all(|n| !n.beyond(0.0)));
    assert!(c.nodes[at + 1].beyond(0.0), "proj reads the perturbed MUL");
    let text = c.to_text();
    assert!(
        text.contains("node 1 'attn_norm' (MUL, f32 [64, 5])"),
        "{text}"
    );
    let e = c.check().unwrap_err();
    assert!(
        matches!(&e, CompareError::Diverged { node, .. } if node.name == "attn_norm"),
        "{e}"
    );
    assert!(e.to_string().contains("'attn_norm' (MUL"), "{e}");
}

#[test]
fn isolated_nodes_show_only_their_own_error() {
    let isolate = CompareOptions {
        isolate: true,
        ..CompareOptions::default()
    };
    let c = compare_with(&mut Perturb::new(Which::FirstOp("MUL"), 1e-2), isolate);
    // the nodes after the perturbed one get the reference's inputs: exact
    let off: Vec<&str> = c
        .nodes
        .iter()
        .filter(|n| n.beyond(0.0))
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(off, ["attn_norm"]);
    // without isolation the error travels to every later node
    let c = compare(&mut Perturb::new(Which::FirstOp("MUL"), 1e-2), 1e-6);
    assert!(
        c.nodes[1..].iter().all(|n| n.beyond(0.0)),
        "{}",
        c.to_text()
    );
}

#[test]
fn a_perturbed_node_late_in_the_graph_is_named() {
    let mut target = Perturb::new(Which::Named("probs"), 1e-2);
    let c = compare(&mut target, 1e-6);
    let first = c.first_beyond().unwrap();
    assert_eq!((first.name.as_str(), first.op), ("probs", "SOFT_MAX"));
    let at = names(&c).iter().position(|&n| n == "probs").unwrap();
    assert!(c.nodes[..at].iter().all(|n| !n.beyond(0.0)));
    // a difference within the tolerance is no finding
    let mut small = Perturb::new(Which::Named("probs"), 1e-6);
    assert!(compare(&mut small, 1e-3).first_beyond().is_none());
}

#[test]
fn stop_at_first_and_the_callback_end_the_comparison() {
    let first = CompareOptions {
        stop_at_first: true,
        ..CompareOptions::default()
    };
    let c = compare_with(&mut Perturb::new(Which::Named("act"), 1e-2), first);
    assert_eq!(c.nodes.last().unwrap().name, "act");
    let (g, _bufs) = block();
    let mut seen = Vec::new();
    let c = compare_graph_backend_with(
        &mut CpuBackend::new(1),
        &mut CpuBackend::new(1),
        &g,
        &CompareOptions::default(),
        |r| {
            seen.push(r.name.clone());
            seen.len() < 3
        },
    )
    .unwrap();
    assert_eq!(seen, ["norm", "attn_norm", "proj"]);
    assert_eq!(c.nodes.len(), 3);
}

#[test]
fn an_op_the_target_lacks_is_reported_and_bridged() {
    let mut target = TestBackend::host("NO_SOFT_MAX", |t| t.op().name() != "SOFT_MAX", 1);
    let c = compare(&mut target, 0.0);
    let missing: Vec<&str> = c.unsupported().map(|n| n.name.as_str()).collect();
    assert_eq!(missing, ["probs"]);
    // the reference's result stands in: the nodes after it agree exactly
    assert!(c.first_beyond().is_none());
    assert!(c.to_text().contains("not supported by NO_SOFT_MAX"));
    // a target that runs nothing leaves nothing to compare
    let mut none = TestBackend::host("NOTHING", |_| false, 1);
    let (g, _bufs) = block();
    let e = compare_graph_backend(
        &mut CpuBackend::new(1),
        &mut none,
        &g,
        &CompareOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            CompareError::NothingToCompare {
                unsupported: 9,
                views: 2,
                ..
            }
        ),
        "{e}"
    );
    // and a reference that cannot run an op is refused, naming it
    let mut reference = TestBackend::host("REF", |t| t.op().name() != "MUL_MAT", 1);
    let e = compare_graph_backend(
        &mut reference,
        &mut CpuBackend::new(1),
        &g,
        &CompareOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, CompareError::ReferenceUnsupported { node, op: "MUL_MAT", .. } if node == "proj"),
        "{e}"
    );
}

#[test]
fn graphs_with_nothing_to_compute_are_refused() {
    let a = Tensor::new(DType::F32, &[4, 6]).unwrap().with_name("a");
    let r = ops::reshape(&a, &[6, 4]).unwrap();
    let p = ops::transpose(&r).unwrap();
    for g in [Graph::new(), Graph::build(&[p])] {
        let _bufs = alloc_graph(&g, &cpu_buffer_type()).unwrap();
        let e = compare_graph_backend(
            &mut CpuBackend::new(1),
            &mut CpuBackend::new(1),
            &g,
            &CompareOptions::default(),
        )
        .unwrap_err();
        assert!(
            matches!(e, CompareError::NothingToCompare { nodes, views, unsupported: 0, .. } if nodes == views),
            "{e}"
        );
        assert!(e.to_string().contains("nothing to compare"), "{e}");
    }
}

/// Host memory whose buffers hold at most 64 bytes.
struct Tiny;

impl BufferType for Tiny {
    fn name(&self) -> String {
        "TINY".into()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        cpu_buffer_type().alloc_buffer(size)
    }
    fn alignment(&self) -> usize {
        64
    }
    fn max_size(&self) -> usize {
        64
    }
    fn is_host(&self) -> bool {
        true
    }
}

#[test]
fn allocation_failures_and_unallocated_graphs_are_typed_errors() {
    let (g, _bufs) = block();
    let tiny: Arc<dyn BufferType> = Arc::new(Tiny);
    let e = graph_copy(&g, &tiny).err().unwrap();
    assert!(
        matches!(&e, CompareError::Alloc { buffer_type, .. } if buffer_type == "TINY"),
        "{e}"
    );
    let mut target = TestBackend::host("SMALL", |_| true, 1).with_buffer_type(tiny);
    let e = compare_graph_backend(
        &mut CpuBackend::new(1),
        &mut target,
        &g,
        &CompareOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, CompareError::Alloc { .. }), "{e}");
    // a graph whose leafs have no buffer cannot be copied: the error names one
    let a = Tensor::new(DType::F32, &[4]).unwrap().with_name("loose");
    let g = Graph::build(&[ops::sqr(&a).unwrap()]);
    let e = graph_copy(&g, &cpu_buffer_type()).err().unwrap();
    assert!(
        matches!(&e, CompareError::Copy { tensor, .. } if tensor == "loose"),
        "{e}"
    );
}

/// A graph over a weight of type `wt` (`k` × `n`) and activations `k` × `m`:
/// a matmul, its transpose made contiguous, a strided view of that, a
/// permuted 3-d reshape, and the matmul's rows written into an f16 cache
/// leaf with SET_ROWS and read back through a view of the write and GET_ROWS.
fn varied(wt: DType, k: usize, n: usize, m: usize, seed: u64) -> (Graph, MultiBuffer) {
    let w = Tensor::new(wt, &[k, n]).unwrap().with_name("w");
    let a = Tensor::new(DType::F32, &[k, m]).unwrap().with_name("a");
    let cache = Tensor::new(DType::F16, &[n, m + 3])
        .unwrap()
        .with_name("cache");
    let idx = Tensor::new(DType::I64, &[m]).unwrap().with_name("idx");
    let idx32 = Tensor::new(DType::I32, &[m]).unwrap().with_name("idx32");
    let mm = ops::mul_mat(&w, &a).unwrap().with_name("mm"); // [n, m]
    let tc = ops::cont(&ops::transpose(&mm).unwrap()).unwrap(); // [m, n]
    let v = ops::view_2d(&tc, m, n / 2, tc.nb()[1] * 2, tc.nb()[1]).unwrap();
    let sq = ops::sqr(&v).unwrap().with_name("sq");
    let r3 = ops::reshape(&mm, &[n, 1, m]).unwrap();
    let perm = ops::cont(&ops::permute(&r3, [0, 2, 1, 3]).unwrap()).unwrap();
    let written = ops::set_rows(&cache, &mm, &idx).unwrap();
    let seen = ops::view_2d(&written, n, m, written.nb()[1], written.nb()[1] * 3).unwrap();
    let seen = ops::cont(&seen).unwrap().with_name("seen");
    let read = ops::get_rows(&written, &idx32).unwrap();
    let back = ops::add(&read, &mm).unwrap().with_name("back");
    let g = Graph::build(&[sq, perm, seen, back]);
    let bufs = alloc_graph(&g, &cpu_buffer_type()).unwrap();
    let mut s = seed | 1;
    let mut rnd = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    };
    w.write_f32(&rnd(k * n)).unwrap();
    a.write_f32(&rnd(k * m)).unwrap();
    cache.write_f32(&rnd(n * (m + 3))).unwrap();
    let rows: Vec<i32> = (0..m as i32).map(|i| i + 3).collect();
    idx.write_i32(&rows).unwrap();
    idx32.write_i32(&rows).unwrap();
    (g, bufs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_copy_in_other_memory_computes_the_same_bytes(
        wt in prop::sample::select(vec![DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K]),
        blocks in 1usize..3,
        n in 1usize..5,
        m in 1usize..6,
        seed in any::<u64>(),
        isolate in any::<bool>(),
    ) {
        let k = blocks * wt.block_size().max(32);
        let n = 2 * n;
        let (g, _bufs) = varied(wt, k, n, m, seed);
        let mut fake = TestBackend::device("FAKE0", |_| true, 1);
        let copy = graph_copy(&g, &fake.default_buffer_type()).unwrap();
        prop_assert_eq!(copy.graph().nodes().len(), g.nodes().len());
        prop_assert_eq!(copy.graph().leafs().len(), g.leafs().len());
        for (t, c) in g.leafs().iter().chain(g.nodes()).zip(copy.graph().leafs().iter().chain(copy.graph().nodes())) {
            prop_assert!(copy.twin(t) == Some(c));
            prop_assert!(t.same_layout(c) && t.op() == c.op() && t.name() == c.name());
            prop_assert!(!c.ptr_eq(t));
            prop_assert_eq!(c.buffer().unwrap().buffer_type().name(), "FAKE0");
            match (t.view_of(), c.view_of()) {
                (Some(tv), Some(cv)) => {
                    prop_assert!(copy.twin(&tv.src) == Some(&cv.src));
                    prop_assert_eq!(tv.offset, cv.offset);
                }
                (None, None) => {}
                _ => prop_assert!(false, "{} lost or gained a view", t.name()),
            }
            for (ts, cs) in t.srcs().zip(c.srcs()) {
                prop_assert!(copy.twin(ts) == Some(cs));
            }
        }
        // leafs arrive with their bytes (the quantized weight's included)
        for (t, c) in g.leafs().iter().zip(copy.graph().leafs()) {
            prop_assert_eq!(t.read_bytes().unwrap(), c.read_bytes().unwrap());
        }
        CpuBackend::new(1).graph_compute(&g).unwrap();
        fake.graph_compute(copy.graph()).unwrap();
        for (t, c) in g.nodes().iter().zip(copy.graph().nodes()) {
            prop_assert_eq!(t.read_bytes().unwrap(), c.read_bytes().unwrap(), "node {}", t.name());
        }
        // and node by node: no difference at all
        let (g, _bufs) = varied(wt, k, n, m, seed);
        let opts = CompareOptions { tolerance: 0.0, isolate, ..CompareOptions::default() };
        let cmp = compare_graph_backend(&mut CpuBackend::new(1), &mut fake, &g, &opts).unwrap();
        prop_assert!(cmp.first_beyond().is_none(), "{}", cmp.to_text());
    }
}

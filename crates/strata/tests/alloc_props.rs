//! Property tests of the graph memory planner on random DAGs with random
//! element-wise ops, views, outputs, pre-placed weights and nodes, and
//! buffer splits over two buffer types:
//! (a) no two tensors needed at the same time overlap in memory, (b) planned
//! memory computes bit-identical results to one-tensor-per-allocation memory
//! (1 to 3 threads),
//! (c) every buffer's peak is at least its live-set lower bound, (d) reserving
//! twice gives the same plan.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::Rng;
use proptest::prelude::*;
use strata::alloc::{GraphAllocator, Strategy as Fit};
use strata::backend::{alloc_tensors, Backend, Buffer, BufferType};
use strata::cpu::{cpu_buffer_type, cpu_device, CpuBackend, HostBufferType};
use strata::ops::{self, UnaryOp};
use strata::{DType, Graph, Tensor};

/// One random graph, described so it can be built twice identically.
#[derive(Clone, Debug)]
struct Recipe {
    /// Per leaf: true = graph input (planner-owned), false = pre-placed weight.
    leafs: Vec<bool>,
    /// (op, source a, source b, flags)
    steps: Vec<(u8, u16, u16, u8)>,
    seed: u64,
    two_buffers: bool,
    strategy: Fit,
    nth: usize,
}

struct Case {
    graph: Graph,
    inputs: Vec<(Tensor, Vec<f32>)>,
    /// Tensors whose final value the graph must keep: outputs and unconsumed nodes.
    kept: Vec<Tensor>,
    node_ids: Vec<usize>,
    leaf_ids: Vec<usize>,
    _weights: Vec<Arc<dyn Buffer>>,
}

fn recipe() -> impl proptest::strategy::Strategy<Value = Recipe> {
    (
        prop::collection::vec(any::<bool>(), 1..4),
        prop::collection::vec((0u8..14, any::<u16>(), any::<u16>(), any::<u8>()), 1..24),
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
        1usize..4,
    )
        .prop_map(|(leafs, steps, seed, two_buffers, greedy, nth)| Recipe {
            leafs,
            steps,
            seed,
            two_buffers,
            strategy: if greedy {
                Fit::GreedyBySize
            } else {
                Fit::BestFit
            },
            nth,
        })
}

fn try_op(op: u8, a: &Tensor, b: &Tensor, fl: u8) -> strata::Result<Tensor> {
    let n = a.nelements();
    match op {
        0 => ops::add(a, b),
        1 => ops::sub(a, b),
        2 => ops::mul(a, b),
        3 => ops::div(a, b),
        4 => ops::scale_bias(a, 0.75, 0.25),
        5 => ops::sqr(a),
        6 => ops::sqrt(a),
        7 => ops::unary(a, UnaryOp::ALL[fl as usize % UnaryOp::ALL.len()]),
        8 => ops::swiglu_split(a, b),
        9 if a.is_contiguous() && n >= 2 => {
            let half = n / 2;
            let off = if fl & 4 != 0 { (n - half) * 4 } else { 0 };
            ops::view_1d(a, half, off)
        }
        10 if a.is_contiguous() => ops::reshape(a, &[n]),
        10 if a.is_contiguous() && n.is_multiple_of(4) => ops::reshape(a, &[4, n / 4]),
        11 => ops::permute(a, [1, 0, 2, 3]),
        12 => ops::transpose(a),
        13 if a.is_contiguous() && a.ne()[1] > 1 => {
            // one row of a, broadcast over b
            let row = ops::view_1d(a, a.ne()[0], 0)?;
            ops::add(b, &row)
        }
        _ => ops::scale(a, -1.5),
    }
}

fn build(r: &Recipe) -> Case {
    let mut rng = Rng::new(r.seed);
    let cpu = cpu_device();
    let mut pool = Vec::new();
    let mut inputs = Vec::new();
    let mut weights = Vec::new();
    for (i, &is_input) in r.leafs.iter().enumerate() {
        let t = Tensor::new(DType::F32, &[8, 3])
            .unwrap()
            .with_name(format!("leaf{i}"));
        let data = rng.vec(24, 0.25, 2.0);
        if is_input {
            t.set_input();
            inputs.push((t.clone(), data));
        } else {
            weights.extend(alloc_tensors(&[t.clone()], &cpu_buffer_type()).unwrap());
            t.write_f32(&data).unwrap();
        }
        pool.push(t);
    }
    let mut outs = Vec::new();
    for (k, &(op, ia, ib, fl)) in r.steps.iter().enumerate() {
        let a = pool[ia as usize % pool.len()].clone();
        let b = pool[ib as usize % pool.len()].clone();
        let Ok(t) = try_op(op, &a, &b, fl) else {
            continue;
        };
        if !cpu.supports_op(&t) {
            continue;
        }
        let t = t.with_name(format!("t{k}"));
        if fl & 0x18 == 0x18 && !t.is_view() {
            // placed by the user: the planner must neither own nor reuse it
            weights.extend(alloc_tensors(&[t.clone()], &cpu_buffer_type()).unwrap());
        }
        if fl & 1 != 0 {
            t.set_output();
            outs.push(t.clone());
        }
        pool.push(t);
    }
    outs.push(pool.last().unwrap().clone());
    let graph = Graph::build(&outs);
    let mut consumers: HashMap<strata::TensorId, usize> = HashMap::new();
    for n in graph.nodes() {
        for s in n.srcs() {
            *consumers.entry(s.id()).or_default() += 1;
        }
    }
    let kept = graph
        .nodes()
        .iter()
        .filter(|n| n.is_output() || !consumers.contains_key(&n.id()))
        .cloned()
        .collect();
    let two = r.two_buffers as usize;
    let node_ids = graph.nodes().iter().map(|_| rng.below(1 + two)).collect();
    let leaf_ids = graph.leafs().iter().map(|_| rng.below(1 + two)).collect();
    Case {
        graph,
        inputs,
        kept,
        node_ids,
        leaf_ids,
        _weights: weights,
    }
}

fn allocator(r: &Recipe) -> GraphAllocator {
    let bufts: Vec<Arc<dyn BufferType>> = if r.two_buffers {
        vec![
            HostBufferType::with_max_size(1 << 30),
            HostBufferType::with_max_size(1 << 30),
        ]
    } else {
        vec![cpu_buffer_type()]
    };
    GraphAllocator::new_n(&bufts)
        .unwrap()
        .with_strategy(r.strategy)
}

fn compute(c: &Case, nth: usize) -> Vec<Vec<u32>> {
    for (t, v) in c.inputs.iter().filter(|(t, _)| c.graph.contains(t)) {
        t.write_f32(v).unwrap();
    }
    CpuBackend::new(nth).graph_compute(&c.graph).unwrap();
    c.kept
        .iter()
        .map(|t| {
            t.to_f32_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

fn planned(r: &Recipe) -> (Case, GraphAllocator) {
    let c = build(r);
    let mut ga = allocator(r);
    ga.reserve_n(&c.graph, &c.node_ids, &c.leaf_ids).unwrap();
    ga.alloc_graph(&c.graph).unwrap();
    (c, ga)
}

/// (buffer address, start, end) of a tensor's bytes.
fn range(t: &Tensor) -> (usize, usize, usize) {
    let st = t.storage().expect("placed");
    let b = Arc::as_ptr(&st.buffer) as *const u8 as usize;
    (b, st.offset, st.offset + t.nbytes())
}

/// Checks, from the graph alone, that no two tensors whose values are
/// still needed share bytes, and that a node overlaps a source it reads
/// only when it is exactly in place over it.
fn check_no_overlap(c: &Case, ga: &GraphAllocator) {
    let g = &c.graph;
    let n = g.nodes().len();
    let ours = |t: &Tensor| {
        let b = t.buffer().unwrap();
        (0..2).any(|i| ga.buffer(i).is_some_and(|x| Arc::ptr_eq(&x, &b)))
    };
    // step each tensor's value is produced, and the last step that needs it
    let mut produced: HashMap<strata::TensorId, (Tensor, usize)> = HashMap::new();
    for l in g.leafs() {
        if !l.is_view() && ours(l) {
            produced.insert(l.id(), (l.clone(), 0));
        }
    }
    for (i, t) in g.nodes().iter().enumerate() {
        if !t.is_view() && ours(t) {
            produced.insert(t.id(), (t.clone(), i + 1));
        }
    }
    let mut need: HashMap<strata::TensorId, usize> = HashMap::new();
    for (i, t) in g.nodes().iter().enumerate() {
        for s in t.srcs() {
            let e = need.entry(s.storage_owner().id()).or_default();
            *e = (*e).max(i + 1);
        }
    }
    for t in &c.kept {
        need.insert(t.storage_owner().id(), usize::MAX);
    }
    for s in 0..=n {
        let mut live: Vec<(usize, usize, usize, String)> = produced
            .values()
            .filter(|(t, p)| *p <= s && need.get(&t.id()).is_some_and(|&l| l > s))
            .map(|(t, _)| {
                let (b, o, e) = range(t);
                (b, o, e, t.name())
            })
            .collect();
        live.sort();
        for w in live.windows(2) {
            assert!(
                w[0].0 != w[1].0 || w[0].2 <= w[1].1,
                "step {s}: '{}' {}..{} and '{}' {}..{} overlap\n{}{:?}kept {:?}",
                w[0].3,
                w[0].1,
                w[0].2,
                w[1].3,
                w[1].1,
                w[1].2,
                ga.plan().unwrap(),
                g,
                c.kept
                    .iter()
                    .map(|t| (t.name(), t.is_output()))
                    .collect::<Vec<_>>()
            );
        }
        if s == 0 {
            continue;
        }
        let node = &g.nodes()[s - 1];
        if node.is_view() || !ours(node) {
            continue;
        }
        let wr = range(node);
        for src in node.srcs() {
            let sr = range(src);
            if sr.0 == wr.0 && sr.1 < wr.2 && wr.1 < sr.2 {
                assert!(
                    sr == wr && src.same_layout(node),
                    "step {s}: '{}' partly overwrites its source '{}'",
                    node.name(),
                    src.name()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_live_tensors_never_overlap(r in recipe()) {
        let (c, ga) = planned(&r);
        check_no_overlap(&c, &ga);
    }

    #[test]
    fn b_planned_memory_computes_bit_identical_results(r in recipe()) {
        let reference = build(&r);
        let all: Vec<Tensor> = reference.graph.leafs().iter().chain(reference.graph.nodes()).cloned().collect();
        let _bufs = alloc_tensors(&all, &cpu_buffer_type()).unwrap();
        let want = compute(&reference, r.nth);
        let (c, _ga) = planned(&r);
        let got = compute(&c, r.nth);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn c_peak_is_at_least_the_lower_bound(r in recipe()) {
        let c = build(&r);
        for s in [Fit::BestFit, Fit::GreedyBySize] {
            let mut ga = allocator(&r).with_strategy(s);
            let plan = ga.reserve_n(&c.graph, &c.node_ids, &c.leaf_ids).unwrap();
            for b in plan.buffers() {
                prop_assert!(b.peak >= b.lower_bound, "{}", plan);
                prop_assert_eq!(b.peak % b.alignment, 0);
            }
        }
    }

    #[test]
    fn d_reserving_twice_gives_the_same_plan(r in recipe()) {
        let c = build(&r);
        let mut ga = allocator(&r);
        let p1 = ga.reserve_n(&c.graph, &c.node_ids, &c.leaf_ids).unwrap().clone();
        let sizes: Vec<usize> = (0..2).map(|i| ga.buffer_size(i)).collect();
        let p2 = ga.reserve_n(&c.graph, &c.node_ids, &c.leaf_ids).unwrap().clone();
        prop_assert_eq!(&p1, &p2);
        prop_assert_eq!(p1.to_string(), p2.to_string());
        let sizes2: Vec<usize> = (0..2).map(|i| ga.buffer_size(i)).collect();
        prop_assert_eq!(sizes, sizes2);
        // and placing the graph does not change what reserve plans
        ga.alloc_graph(&c.graph).unwrap();
        let p3 = ga.reserve_n(&c.graph, &c.node_ids, &c.leaf_ids).unwrap().clone();
        prop_assert_eq!(&p1, &p3);
    }
}

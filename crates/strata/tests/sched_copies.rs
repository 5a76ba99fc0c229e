//! Pipeline copies (issue #15 item 3): `alloc_graph` waits for running work
//! only when it must re-plan memory, and with `n_copies > 1` each allocation
//! takes the next copy: the graph's INPUT leafs move between that many
//! places, so a batch's inputs are written where the previous batch (maybe
//! still running on an asynchronous backend) does not read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use strata::backend::{alloc_tensors, Backend, BufferUsage, Device};
use strata::cpu::CpuBackend;
use strata::sched::{SchedConfig, Scheduler};
use strata::testkit::TestBackend;
use strata::{ops, DType, Graph, Tensor};

/// A backend that counts its `synchronize` calls.
struct Counting {
    inner: Box<dyn Backend>,
    syncs: Arc<AtomicUsize>,
}

impl Backend for Counting {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.inner.device()
    }
    fn graph_compute(&mut self, graph: &Graph) -> strata::Result<()> {
        self.inner.graph_compute(graph)
    }
    fn synchronize(&mut self) -> strata::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.synchronize()
    }
}

struct Setup {
    graph: Graph,
    x: Tensor,
    y: Tensor,
    sched: Scheduler,
    syncs: Arc<AtomicUsize>,
    _weights: strata::backend::MultiBuffer,
}

/// y = w · relu(x) + 1 with the weight w on a device (FAKE0) and the
/// input x read by the CPU (relu) and by the device (the matmul, through a
/// split input copy).
fn setup(n_copies: usize) -> Setup {
    let dev = TestBackend::device("FAKE0", |_| true, 1);
    let w = Tensor::new(DType::F32, &[4, 3]).unwrap().with_name("w");
    let wb = alloc_tensors(&[w.clone()], &dev.default_buffer_type()).unwrap();
    wb.set_usage(BufferUsage::Weights);
    w.write_f32(&(0..12).map(|i| i as f32).collect::<Vec<_>>())
        .unwrap();
    let x = Tensor::new(DType::F32, &[4, 2]).unwrap().with_name("x");
    x.set_input();
    let r = ops::relu(&x).unwrap().with_name("r");
    let m = ops::mul_mat(&w, &r).unwrap().with_name("m");
    let y = ops::scale_bias(&m, 1.0, 1.0).unwrap().with_name("y");
    y.set_output();
    let graph = Graph::build(&[y.clone()]);
    let syncs = Arc::new(AtomicUsize::new(0));
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(Counting {
            inner: Box::new(dev),
            syncs: syncs.clone(),
        }),
        Box::new(Counting {
            inner: Box::new(CpuBackend::new(1)),
            syncs: syncs.clone(),
        }),
    ];
    let sched = Scheduler::new(
        backends,
        None,
        SchedConfig {
            n_copies,
            ..SchedConfig::default()
        },
    )
    .unwrap();
    Setup {
        graph,
        x,
        y,
        sched,
        syncs,
        _weights: wb,
    }
}

/// What `y` must be for input `xs`.
fn expected(xs: &[f32]) -> Vec<f32> {
    let w: Vec<f32> = (0..12).map(|i| i as f32).collect();
    (0..2)
        .flat_map(|col| {
            let w = &w;
            (0..3).map(move |row| {
                (0..4)
                    .map(|k| w[row * 4 + k] * xs[col * 4 + k].max(0.0))
                    .sum::<f32>()
                    + 1.0
            })
        })
        .collect()
}

fn input(batch: usize) -> Vec<f32> {
    (0..8)
        .map(|i| (i as f32 - 3.0) * (batch + 1) as f32)
        .collect()
}

#[test]
fn alloc_graph_waits_only_when_it_must_replan() {
    for n_copies in [1, 2] {
        waits_only_to_replan(n_copies);
    }
}

fn waits_only_to_replan(n_copies: usize) {
    let mut s = setup(n_copies);
    s.sched.alloc_graph(&s.graph).unwrap();
    // the first allocation plans the buffers: everything was waited for
    assert!(s.syncs.load(Ordering::SeqCst) > 0);
    s.x.write_f32(&input(0)).unwrap();
    s.sched.compute(&s.graph).unwrap();
    assert_eq!(s.y.to_f32_vec().unwrap(), expected(&input(0)));
    for batch in 1..4 {
        let before = s.syncs.load(Ordering::SeqCst);
        s.sched.alloc_graph(&s.graph).unwrap();
        assert_eq!(
            s.syncs.load(Ordering::SeqCst),
            before,
            "batch {batch}: alloc_graph waited for the backends without re-planning"
        );
        s.x.write_f32(&input(batch)).unwrap();
        s.sched.compute(&s.graph).unwrap();
        assert_eq!(s.y.to_f32_vec().unwrap(), expected(&input(batch)));
    }
}

#[test]
fn graph_inputs_rotate_through_the_pipeline_copies() {
    for n_copies in [1, 2, 3] {
        let mut s = setup(n_copies);
        let mut places = Vec::new();
        for batch in 0..2 * n_copies {
            s.sched.alloc_graph(&s.graph).unwrap();
            let st = s.x.storage().unwrap();
            places.push((st.buffer.base(), st.offset));
            s.x.write_f32(&input(batch)).unwrap();
            s.sched.compute(&s.graph).unwrap();
            assert_eq!(
                s.y.to_f32_vec().unwrap(),
                expected(&input(batch)),
                "{n_copies} copies, batch {batch}"
            );
        }
        // n_copies distinct places, taken in turn
        let distinct: std::collections::HashSet<_> = places.iter().collect();
        assert_eq!(distinct.len(), n_copies, "{n_copies} copies: {places:?}");
        for (i, p) in places.iter().enumerate() {
            assert_eq!(*p, places[i % n_copies], "{n_copies} copies: {places:?}");
        }
    }
}

#[test]
fn each_copy_of_an_input_is_kept_for_the_whole_graph() {
    // With two copies the input's other place stays reserved while the
    // graph runs: no node of the graph is placed over either copy.
    let mut s = setup(2);
    let mut places = Vec::new();
    for _ in 0..2 {
        s.sched.alloc_graph(&s.graph).unwrap();
        let st = s.x.storage().unwrap();
        places.push((st.buffer.base(), st.offset));
    }
    for node in s.graph.nodes() {
        let Some(st) = node.storage() else { continue };
        if node.is_view() {
            continue;
        }
        let (base, off) = (st.buffer.base(), st.offset);
        for &(pb, po) in &places {
            let overlap = base == pb && off < po + s.x.nbytes() && po < off + node.nbytes();
            assert!(
                !overlap,
                "node '{}' overlaps a copy of the input",
                node.name()
            );
        }
    }
}

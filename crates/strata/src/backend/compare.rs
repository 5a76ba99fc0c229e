//! One graph on two backends, node by node: ggml's `ggml_backend_graph_copy`
//! ([`graph_copy`]) and `ggml_backend_compare_graph_backend`
//! ([`compare_graph_backend`]) — the tool a backend author debugs with.
//!
//! [`graph_copy`] gives every tensor a graph reads or computes a twin (same
//! type, shape, strides, op, name and flags) in another buffer type: views
//! stay views of their base's twin, sources point at twins, the source
//! substitutions follow, and the data of everything the graph does not
//! compute (leafs: weights, inputs, caches) is copied over.
//! [`compare_graph_backend`] then computes node `i` of the graph on the
//! reference backend and node `i` of the copy on the target, each from its
//! own earlier results, reads both back and measures the difference
//! (test-backend-ops' NMSE, the largest absolute difference, and
//! disagreeing NaN / inf values). Nodes that only re-describe memory
//! (VIEW, RESHAPE, PERMUTE, TRANSPOSE) compute nothing and are not
//! reported, as in ggml.
//!
//! With [`CompareOptions::isolate`], the target's copy of every computed
//! source gets the reference's result before a node runs, so each node's
//! figures measure its own op (test-backend-ops' situation, whose graphs
//! read only leafs) instead of everything accumulated before it.
//!
//! A node the target cannot compute (`Backend::supports_op` of its twin is
//! false) is not an error: it is reported as [`NodeOutcome::Unsupported`]
//! and the reference's result is copied into its twin, so the nodes after
//! it are still compared from equal inputs. Only a graph in which no node
//! is left to compare is refused ([`CompareError::NothingToCompare`]).
//!
//! ```
//! use strata::backend::{alloc_graph, compare_graph_backend, CompareOptions};
//! use strata::cpu::{cpu_buffer_type, CpuBackend};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let a = Tensor::new(DType::F32, &[4, 2]).unwrap().with_name("a");
//! let y = ops::sqr(&ops::add(&a, &a).unwrap()).unwrap().with_name("y");
//! let g = Graph::build(&[y]);
//! let _bufs = alloc_graph(&g, &cpu_buffer_type()).unwrap();
//! a.write_f32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).unwrap();
//! let (mut cpu, mut other) = (CpuBackend::new(1), CpuBackend::new(2));
//! let cmp = compare_graph_backend(&mut cpu, &mut other, &g, &CompareOptions::default()).unwrap();
//! assert_eq!(cmp.nodes.len(), 2);
//! assert!(cmp.first_beyond().is_none());
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

use super::{alloc_tensors, tensor_copy, Backend, BufferType, MultiBuffer};
use crate::graph::{Graph, IdMap, Slot};
use crate::tensor::{DType, Tensor, TensorId, ViewOf, MAX_DIMS};
use crate::Error;

/// Why a graph could not be copied or compared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// The graph has no node whose result can be compared: it is empty, its
    /// nodes only re-describe memory (views), or the target can compute
    /// none of the others.
    #[error(
        "nothing to compare: of the graph's {nodes} nodes, {views} only re-describe memory (views) \
         and {unsupported} are ops the target '{target}' cannot compute; give a graph with an op \
         the target runs"
    )]
    NothingToCompare {
        /// Nodes in the graph.
        nodes: usize,
        /// Nodes that compute nothing (VIEW, RESHAPE, PERMUTE, TRANSPOSE).
        views: usize,
        /// Nodes the target does not support.
        unsupported: usize,
        /// The target backend.
        target: String,
    },
    /// The reference backend cannot compute a node, so there is nothing to
    /// compare the target with.
    #[error(
        "the reference backend '{backend}' cannot compute node {index} '{node}' ({op}): use a \
         reference that runs every op of the graph (the CPU)"
    )]
    ReferenceUnsupported {
        /// The reference backend.
        backend: String,
        /// Index of the node in the graph.
        index: usize,
        /// Name of the node.
        node: String,
        /// Its op.
        op: &'static str,
    },
    /// The twins could not be allocated in the target's memory.
    #[error(
        "allocating the copy of the graph ({tensors} tensors) in buffer type '{buffer_type}' \
         failed: {source}; free memory on the target or compare a smaller graph"
    )]
    Alloc {
        /// The target's buffer type.
        buffer_type: String,
        /// Tensors that needed memory.
        tensors: usize,
        /// The allocator's error.
        source: Box<Error>,
    },
    /// A tensor's data could not be copied to its twin (a tensor of the graph
    /// has no buffer, or the target refused the write).
    #[error("copying tensor '{tensor}' into the graph's copy failed: {source}")]
    Copy {
        /// The tensor copied.
        tensor: String,
        /// The error underneath.
        source: Box<Error>,
    },
    /// A backend failed to compute a node.
    #[error("backend '{backend}' failed to compute node {index} '{node}' ({op}): {source}")]
    Compute {
        /// The backend.
        backend: String,
        /// Index of the node in the graph.
        index: usize,
        /// Name of the node.
        node: String,
        /// Its op.
        op: &'static str,
        /// The backend's error.
        source: Box<Error>,
    },
    /// A node's result could not be read back.
    #[error("reading node '{node}' back from backend '{backend}' failed: {source}")]
    Read {
        /// The backend.
        backend: String,
        /// Name of the node.
        node: String,
        /// The error underneath.
        source: Box<Error>,
    },
    /// A node's result differs beyond the tolerance ([`Comparison::check`]).
    #[error("{}", diverged_message(.node, *.tolerance))]
    Diverged {
        /// The first node beyond the tolerance.
        node: Box<NodeReport>,
        /// The tolerance (largest NMSE accepted).
        tolerance: f64,
    },
}

fn diverged_message(node: &NodeReport, tolerance: f64) -> String {
    let mut s = format!(
        "node {} '{}' ({}, {} {}) is the first to differ beyond the tolerance",
        node.index,
        node.name,
        node.op,
        node.dtype,
        shape(&node.ne)
    );
    if let NodeOutcome::Compared(f) = &node.outcome {
        let _ = write!(
            s,
            ": NMSE {:.3e} > {tolerance:.1e}, max |Δ| {:.3e}",
            f.nmse, f.max_abs
        );
        if f.nonfinite_mismatches > 0 {
            let _ = write!(
                s,
                ", {} values NaN or infinite on one side only",
                f.nonfinite_mismatches
            );
        }
    }
    let srcs: Vec<String> = node.src_ne.iter().map(shape).collect();
    let _ = write!(
        s,
        " (sources {}); the nodes before it agree, so look at this op",
        srcs.join(", ")
    );
    s
}

/// A graph copied into another buffer type ([`graph_copy`]).
pub struct GraphCopy {
    graph: Graph,
    twins: IdMap<TensorId, Tensor>,
    buffers: MultiBuffer,
}

impl GraphCopy {
    /// The copy: node `i` is the twin of the original's node `i`, leaf `j`
    /// the twin of leaf `j`.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The twin of `t` (a node, leaf, source or view base of the original).
    pub fn twin(&self, t: &Tensor) -> Option<&Tensor> {
        self.twins.get(&t.id())
    }

    /// The buffers holding the twins (freed when the copy is dropped, unless
    /// cloned out).
    pub fn buffers(&self) -> &MultiBuffer {
        &self.buffers
    }
}

/// Every tensor `graph` touches (nodes, leafs, their sources and view bases,
/// substituted sources), each after what it depends on.
fn dependency_order(graph: &Graph) -> Vec<Tensor> {
    let mut seen: IdMap<TensorId, ()> = IdMap::default();
    let mut order = Vec::new();
    let roots = graph
        .leafs()
        .iter()
        .chain(graph.nodes())
        .chain(graph.overrides().values());
    for root in roots {
        // iterative DFS: (tensor, dependencies pushed)
        let mut stack = vec![(root.clone(), false)];
        while let Some((t, expanded)) = stack.pop() {
            if seen.contains_key(&t.id()) {
                continue;
            }
            if expanded {
                seen.insert(t.id(), ());
                order.push(t);
                continue;
            }
            let deps: Vec<Tensor> = t
                .srcs()
                .chain(t.view_of().map(|v| &v.src))
                .filter(|d| !seen.contains_key(&d.id()))
                .cloned()
                .collect();
            stack.push((t, true));
            stack.extend(deps.into_iter().rev().map(|d| (d, false)));
        }
    }
    order
}

/// A twin of `t` (type, shape, strides, op, name, flags) whose sources and
/// view base are the twins in `twins` (all present: `t` comes after them in
/// [`dependency_order`]).
fn make_twin(t: &Tensor, twins: &IdMap<TensorId, Tensor>) -> Tensor {
    // every source and view base has its twin already (dependency order);
    // the fallback to the original is unreachable
    let twin_of = |s: &Tensor| twins.get(&s.id()).cloned().unwrap_or_else(|| s.clone());
    let src = t
        .src_slots()
        .iter()
        .map(|s| s.as_ref().map(twin_of))
        .collect();
    let view = t.view_of().map(|v| ViewOf {
        src: twin_of(&v.src),
        offset: v.offset,
    });
    let twin = Tensor::from_parts(t.dtype(), t.ne(), t.nb(), t.op().clone(), src, view);
    twin.set_name(t.name());
    twin.set_flags(t.flags());
    twin
}

/// Copies `graph` into memory of `buft` (ggml_backend_graph_copy): every
/// tensor it reads or computes gets a twin allocated there (views stay views
/// of their base's twin), and the bytes of every tensor the graph does not
/// compute — leafs, and sources or view bases outside the graph — are
/// copied into its twin. Nodes are left to be computed. The original must
/// be allocated (a tensor without a buffer is [`CompareError::Copy`]).
pub fn graph_copy(graph: &Graph, buft: &Arc<dyn BufferType>) -> Result<GraphCopy, CompareError> {
    let order = dependency_order(graph);
    let mut twins: IdMap<TensorId, Tensor> = IdMap::default();
    let mut all = Vec::with_capacity(order.len());
    for t in &order {
        let twin = make_twin(t, &twins);
        twins.insert(t.id(), twin.clone());
        all.push(twin);
    }
    let buffers = alloc_tensors(&all, buft).map_err(|source| CompareError::Alloc {
        buffer_type: buft.name(),
        tensors: all.iter().filter(|t| !t.is_view()).count(),
        source: Box::new(source),
    })?;
    for (t, twin) in order.iter().zip(&all) {
        let computed = matches!(graph.slot(t), Some(Slot::Node(_))) && !t.op().is_none_op();
        if t.is_view() || computed {
            continue;
        }
        tensor_copy(t, twin).map_err(|source| CompareError::Copy {
            tensor: t.name(),
            source: Box::new(source),
        })?;
    }
    let pick = |ts: &[Tensor]| -> Vec<Tensor> {
        ts.iter()
            .filter_map(|t| twins.get(&t.id()).cloned())
            .collect()
    };
    let nodes = pick(graph.nodes());
    let leafs = pick(graph.leafs());
    let overrides = graph
        .overrides()
        .iter()
        .filter_map(|((n, s), t)| {
            let key = (twins.get(n)?.id(), twins.get(s)?.id());
            Some((key, twins.get(&t.id())?.clone()))
        })
        .collect();
    Ok(GraphCopy {
        graph: Graph::from_parts(nodes, leafs, overrides),
        twins,
        buffers,
    })
}

/// Settings of [`compare_graph_backend`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompareOptions {
    /// The largest NMSE a node may show (test-backend-ops' `max_err`, whose
    /// default is 1e-7 per op; errors grow along a graph, so a whole model
    /// needs more: see `strata compare`).
    pub tolerance: f64,
    /// Stop after the first node beyond the tolerance (the later ones then
    /// go unreported).
    pub stop_at_first: bool,
    /// Before the target computes a node, give the twins of its computed
    /// sources the reference's results, so each node's figures are its own
    /// op's error rather than the error accumulated along the graph (ggml
    /// compares accumulated errors: `false`).
    pub isolate: bool,
}

impl Default for CompareOptions {
    fn default() -> CompareOptions {
        CompareOptions {
            tolerance: 1e-7,
            stop_at_first: false,
            isolate: false,
        }
    }
}

/// The difference between a node's result on the two backends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// Σ(target − reference)² / Σ reference² over the positions where both
    /// are finite (the plain sum of squares when the reference is all zero):
    /// test-backend-ops' NMSE.
    pub nmse: f64,
    /// The largest |target − reference| over those positions.
    pub max_abs: f64,
    /// Positions where either side is NaN, or one side infinite and the
    /// other not (or of the other sign): any is a difference beyond every
    /// tolerance, as test-backend-ops has it.
    pub nonfinite_mismatches: usize,
    /// Elements compared.
    pub elements: usize,
}

impl Figures {
    /// The figures for `target` against `reference` (element by element; a
    /// length mismatch counts the missing elements as non-finite mismatches).
    pub fn measure(reference: &[f32], target: &[f32]) -> Figures {
        let (mut err, mut norm, mut max_abs, mut bad) = (0.0f64, 0.0f64, 0.0f64, 0usize);
        for (&r, &t) in reference.iter().zip(target) {
            if r.is_finite() && t.is_finite() {
                let d = f64::from(t) - f64::from(r);
                err += d * d;
                norm += f64::from(r) * f64::from(r);
                max_abs = max_abs.max(d.abs());
            } else if r != t {
                bad += 1; // NaN on either side, or infinities that disagree
            }
        }
        bad += reference.len().abs_diff(target.len());
        Figures {
            nmse: if norm > 0.0 { err / norm } else { err },
            max_abs,
            nonfinite_mismatches: bad,
            elements: reference.len().min(target.len()),
        }
    }

    /// True when these figures are beyond `tolerance`.
    pub fn beyond(&self, tolerance: f64) -> bool {
        self.nonfinite_mismatches > 0 || self.nmse.is_nan() || self.nmse > tolerance
    }
}

/// What comparing one node gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NodeOutcome {
    /// Both backends computed it.
    Compared(Figures),
    /// The target cannot compute it; the reference's result was copied
    /// into its twin so that later nodes start from equal inputs.
    Unsupported,
}

/// One compared node of a [`Comparison`].
#[derive(Clone, Debug, PartialEq)]
pub struct NodeReport {
    /// Index of the node in the graph's nodes.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its op.
    pub op: &'static str,
    /// Its type.
    pub dtype: DType,
    /// Its shape.
    pub ne: [usize; MAX_DIMS],
    /// The shapes of its present sources, in order.
    pub src_ne: Vec<[usize; MAX_DIMS]>,
    /// The difference, or why there is none.
    pub outcome: NodeOutcome,
}

impl NodeReport {
    /// True when the node was compared and differs beyond `tolerance`.
    pub fn beyond(&self, tolerance: f64) -> bool {
        matches!(&self.outcome, NodeOutcome::Compared(f) if f.beyond(tolerance))
    }
}

/// The result of [`compare_graph_backend`]: every node compared, in graph
/// order, and the first beyond the tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The reference backend's name.
    pub reference: String,
    /// The target backend's name.
    pub target: String,
    /// The tolerance applied.
    pub tolerance: f64,
    /// Nodes of the graph that compute something, in graph order (views
    /// are left out).
    pub nodes: Vec<NodeReport>,
}

impl Comparison {
    /// The first node beyond the tolerance, if any.
    pub fn first_beyond(&self) -> Option<&NodeReport> {
        self.nodes.iter().find(|n| n.beyond(self.tolerance))
    }

    /// The nodes the target could not compute.
    pub fn unsupported(&self) -> impl Iterator<Item = &NodeReport> {
        self.nodes
            .iter()
            .filter(|n| n.outcome == NodeOutcome::Unsupported)
    }

    /// The comparison when no node is beyond the tolerance, else
    /// [`CompareError::Diverged`] naming the first.
    pub fn check(self) -> Result<Comparison, CompareError> {
        match self.first_beyond() {
            Some(n) => Err(CompareError::Diverged {
                node: Box::new(n.clone()),
                tolerance: self.tolerance,
            }),
            None => Ok(self),
        }
    }

    /// A table, one line per node (index, name, op, shape, NMSE, max|Δ|),
    /// then a line naming the first node beyond the tolerance or saying
    /// there is none.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{:>5}  {:<28} {:<14} {:<22} {:>10} {:>10}\n",
            "node", "name", "op", "shape", "NMSE", "max|Δ|"
        );
        for n in &self.nodes {
            let figures = match &n.outcome {
                NodeOutcome::Compared(f) => {
                    let mut v = format!("{:>10.3e} {:>10.3e}", f.nmse, f.max_abs);
                    if f.nonfinite_mismatches > 0 {
                        let _ = write!(v, "  {} NaN/inf mismatches", f.nonfinite_mismatches);
                    }
                    if f.beyond(self.tolerance) {
                        v.push_str("  <<");
                    }
                    v
                }
                NodeOutcome::Unsupported => {
                    format!(
                        "not supported by {}: the reference's result is used",
                        self.target
                    )
                }
            };
            let _ = writeln!(
                s,
                "{:>5}  {:<28} {:<14} {:<22} {figures}",
                n.index,
                n.name,
                n.op,
                shape(&n.ne)
            );
        }
        let unsupported = self.unsupported().count();
        let _ = write!(
            s,
            "{} nodes compared ({} against {}), {unsupported} not supported by {}; ",
            self.nodes.len() - unsupported,
            self.target,
            self.reference,
            self.target
        );
        match self.first_beyond() {
            Some(n) => {
                let _ = writeln!(s, "{}", diverged_message(n, self.tolerance));
            }
            None => {
                let _ = writeln!(
                    s,
                    "no node differs beyond the tolerance {:.1e}",
                    self.tolerance
                );
            }
        }
        s
    }
}

/// `[a, b, c, d]` without the trailing ones (at least one dimension).
fn shape(ne: &[usize; MAX_DIMS]) -> String {
    let n = (1..MAX_DIMS)
        .rev()
        .find(|&i| ne[i] > 1)
        .map_or(1, |i| i + 1);
    let dims: Vec<String> = ne[..n].iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

/// [`compare_graph_backend_with`] with no per-node callback.
pub fn compare_graph_backend(
    reference: &mut dyn Backend,
    target: &mut dyn Backend,
    graph: &Graph,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    compare_graph_backend_with(reference, target, graph, opts, |_| true)
}

/// Runs `graph` (allocated where `reference` computes it, its inputs
/// written) on `reference` and a [`graph_copy`] of it in `target`'s default
/// buffer type on `target`, one node at a time, and measures each node's
/// difference (ggml_backend_compare_graph_backend). `on_node` sees each
/// report as it is made; returning false stops the comparison there (as
/// does `opts.stop_at_first` after the first node beyond the tolerance).
/// The reference's graph is computed for real: its nodes hold its results
/// afterwards.
pub fn compare_graph_backend_with(
    reference: &mut dyn Backend,
    target: &mut dyn Backend,
    graph: &Graph,
    opts: &CompareOptions,
    mut on_node: impl FnMut(&NodeReport) -> bool,
) -> Result<Comparison, CompareError> {
    let computing: Vec<usize> = (0..graph.nodes().len())
        .filter(|&i| !graph.nodes()[i].op().is_view_op())
        .collect();
    let target_name = target.name();
    let nothing = |unsupported| CompareError::NothingToCompare {
        nodes: graph.nodes().len(),
        views: graph.nodes().len() - computing.len(),
        unsupported,
        target: target_name.clone(),
    };
    if computing.is_empty() {
        return Err(nothing(0));
    }
    if let Some(&i) = computing
        .iter()
        .find(|&&i| !reference.supports_op(&graph.nodes()[i]))
    {
        let n = &graph.nodes()[i];
        return Err(CompareError::ReferenceUnsupported {
            backend: reference.name(),
            index: i,
            node: n.name(),
            op: n.op().name(),
        });
    }
    let copy = graph_copy(graph, &target.default_buffer_type())?;
    let twins = copy.graph().nodes();
    let unsupported = computing
        .iter()
        .filter(|&&i| !target.supports_op(&twins[i]))
        .count();
    if unsupported == computing.len() {
        return Err(nothing(unsupported));
    }
    let mut cmp = Comparison {
        reference: reference.name(),
        target: target_name.clone(),
        tolerance: opts.tolerance,
        nodes: Vec::with_capacity(computing.len()),
    };
    // memory the graph writes: node results and the bases of views written
    // through (a cache written by SET_ROWS)
    let written: IdMap<TensorId, ()> = computing
        .iter()
        .map(|&i| (graph.nodes()[i].storage_owner().id(), ()))
        .collect();
    for &i in &computing {
        let (node, twin) = (&graph.nodes()[i], &twins[i]);
        compute_one(reference, graph, i)?;
        let outcome = if target.supports_op(twin) {
            if opts.isolate {
                for s in graph.srcs(node) {
                    let owner = s.storage_owner();
                    if written.contains_key(&owner.id()) {
                        bridge(owner, &copy)?;
                    }
                }
            }
            compute_one(target, copy.graph(), i)?;
            let want = read(&*reference, node)?;
            let got = read(&*target, twin)?;
            NodeOutcome::Compared(Figures::measure(&want, &got))
        } else {
            bridge(node, &copy)?;
            NodeOutcome::Unsupported
        };
        let report = NodeReport {
            index: i,
            name: node.name(),
            op: node.op().name(),
            dtype: node.dtype(),
            ne: node.ne(),
            src_ne: graph.srcs(node).map(|s| s.ne()).collect(),
            outcome,
        };
        let go_on = on_node(&report);
        let stop = opts.stop_at_first && report.beyond(opts.tolerance);
        cmp.nodes.push(report);
        if !go_on || stop {
            break;
        }
    }
    Ok(cmp)
}

/// Copies the reference's bytes of `t` into its twin.
fn bridge(t: &Tensor, copy: &GraphCopy) -> Result<(), CompareError> {
    let twin = copy.twin(t).ok_or_else(|| CompareError::Copy {
        tensor: t.name(),
        source: Box::new(Error::BadValue {
            arg: "tensor".into(),
            value: t.name(),
            expected: "a tensor of the copied graph".into(),
        }),
    })?;
    tensor_copy(t, twin).map_err(|source| CompareError::Copy {
        tensor: t.name(),
        source: Box::new(source),
    })
}

/// Computes node `i` of `graph` alone on `backend` and waits for it.
fn compute_one(backend: &mut dyn Backend, graph: &Graph, i: usize) -> Result<(), CompareError> {
    let one = graph.view(i, i + 1);
    backend
        .graph_compute(&one)
        .and_then(|()| backend.synchronize())
        .map_err(|source| {
            let n = &graph.nodes()[i];
            CompareError::Compute {
                backend: backend.name(),
                index: i,
                node: n.name(),
                op: n.op().name(),
                source: Box::new(source),
            }
        })
}

/// A node's result as f32 values in logical order.
fn read(backend: &dyn Backend, t: &Tensor) -> Result<Vec<f32>, CompareError> {
    t.to_f32_vec().map_err(|source| CompareError::Read {
        backend: backend.name(),
        node: t.name(),
        source: Box::new(source),
    })
}

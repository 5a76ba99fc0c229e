//! Backend assignment: ggml's five scheduler passes as a pure function of a
//! graph, the backends' capabilities and the user's forced assignments. The
//! result ([`Assignment`]) is a value: which backend runs each node, why, and how the
//! graph is cut into splits with which inputs to copy. The caller's graph is
//! never modified.

use crate::graph::{IdMap, IdSet};
use std::fmt;
use std::sync::Arc;

use crate::backend::{same_buffer_type, Backend, BufferType, BufferUsage};
use crate::graph::{Graph, Slot};
use crate::tensor::{Flags, Tensor, TensorId};
use crate::{Error, Result};

/// Why a tensor was assigned to its backend (ggml's debug causes, always kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// `1.dst`: the tensor is already in a buffer of that backend.
    Dst,
    /// `1.vsrc`: the tensor is a view of a tensor in a buffer of that backend.
    ViewSrc,
    /// `1.inp`: graph input, placed on the last (CPU) backend.
    Input,
    /// `1.wgt<i>`: source `i` is a weight in a buffer of that backend.
    Weight(usize),
    /// `1.off`: weights are on the CPU but a higher-priority backend asked for the op.
    Offload,
    /// `2.sup`: expanded from a neighbour on that backend.
    Expand,
    /// `3.upg`: upgraded to a higher-priority backend sharing the buffer type.
    Upgrade,
    /// `3.best`: the backend with the most supported inputs.
    Best,
    /// `4.vsrc`: a source that is a view follows its base.
    SrcView,
    /// `4.cur`: a source follows the node that uses it.
    SrcCur,
    /// `4.def`: nothing decided; the fallback (last) backend.
    Default,
    /// `usr`: forced by the user.
    User,
    /// `pol`: a name rule of the placement policy.
    Policy,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Dst => f.write_str("1.dst"),
            Cause::ViewSrc => f.write_str("1.vsrc"),
            Cause::Input => f.write_str("1.inp"),
            Cause::Weight(i) => write!(f, "1.wgt{i}"),
            Cause::Offload => f.write_str("1.off"),
            Cause::Expand => f.write_str("2.sup"),
            Cause::Upgrade => f.write_str("3.upg"),
            Cause::Best => f.write_str("3.best"),
            Cause::SrcView => f.write_str("4.vsrc"),
            Cause::SrcCur => f.write_str("4.cur"),
            Cause::Default => f.write_str("4.def"),
            Cause::User => f.write_str("usr"),
            Cause::Policy => f.write_str("pol"),
        }
    }
}

crate::tensor::id_newtype! {
    /// A scheduler backend: its index in the priority order the
    /// [`Scheduler`](super::Scheduler) was built with (the last is the CPU
    /// fallback).
    pub struct BackendId(pub usize);
    /// The index into the scheduler's backends.
    fn index;
}

/// Where one tensor runs, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Assigned {
    /// The backend that runs (or holds) the tensor.
    pub backend: BackendId,
    /// The pass and rule that decided it.
    pub cause: Cause,
}

/// A contiguous range of nodes computed on one backend, and the tensors it
/// needs copied in from other backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The backend that runs the split.
    pub backend: BackendId,
    /// First node index.
    pub start: usize,
    /// One past the last node index.
    pub end: usize,
    /// Tensors (graph slots) to copy to this split's backend before it runs.
    pub inputs: Vec<Slot>,
}

/// Which backend runs every tensor of a graph, why, and the splits (the
/// scheduler's result; memory placement is [`crate::alloc::Placement`]).
#[derive(Clone, Debug)]
pub struct Assignment {
    /// Backend and cause per node (same order as `Graph::nodes`).
    pub nodes: Vec<Assigned>,
    /// Backend and cause per leaf.
    pub leafs: Vec<Assigned>,
    /// The splits, in execution order.
    pub splits: Vec<Split>,
    /// Graph inputs that get one copy per pipeline slot (n_copies > 1).
    pub graph_inputs: Vec<Slot>,
}

impl Assignment {
    /// Backend and cause of the tensor in `slot`.
    pub fn of(&self, slot: Slot) -> Assigned {
        match slot {
            Slot::Node(i) => self.nodes[i],
            Slot::Leaf(i) => self.leafs[i],
        }
    }
}

/// What the passes need to know about the backends.
pub(crate) struct Env<'a> {
    /// Compute buffers the scheduler itself allocated: tensors in them are
    /// not "pre-allocated", so planning an allocated graph again gives the
    /// same placement.
    pub own_buffers: Vec<Arc<dyn crate::backend::Buffer>>,
    pub backends: &'a [Box<dyn Backend>],
    pub bufts: &'a [Arc<dyn BufferType>],
    pub user: &'a IdMap<TensorId, BackendId>,
    pub op_offload: bool,
    pub policy: &'a super::PlacementPolicy,
    pub max_split_inputs: usize,
    pub max_splits: usize,
    pub n_copies: usize,
}

struct State<'a> {
    env: &'a Env<'a>,
    graph: &'a Graph,
    ids: IdMap<TensorId, Option<(usize, Cause)>>,
}

impl State<'_> {
    fn get(&self, t: &Tensor) -> Option<usize> {
        self.ids.get(&t.id()).copied().flatten().map(|(b, _)| b)
    }
    fn set(&mut self, t: &Tensor, b: usize, cause: Cause) {
        self.ids.insert(t.id(), Some((b, cause)));
    }
    fn last(&self) -> usize {
        self.env.backends.len() - 1
    }

    /// `t`'s buffer unless it is one of the scheduler's own compute buffers.
    fn user_buffer(&self, t: &Tensor) -> Option<Arc<dyn crate::backend::Buffer>> {
        let buf = t.buffer()?;
        let ours = self
            .env
            .own_buffers
            .iter()
            .any(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&buf)));
        (!ours).then_some(buf)
    }

    /// Highest-priority backend that can use `t`'s buffer and run `op`.
    fn backend_from_buffer(&self, t: &Tensor, op: &Tensor) -> Option<usize> {
        let buf = self.user_buffer(t)?;
        let buft = buf.buffer_type();
        self.env
            .backends
            .iter()
            .position(|b| b.supports_buft(&buft) && b.supports_op(op))
    }

    /// Pass 1 for one tensor (ggml_backend_sched_backend_id_from_cur).
    fn backend_id_from_cur(&self, t: &Tensor) -> Result<Option<(usize, Cause)>> {
        if let Some(b) = self.backend_from_buffer(t, t) {
            return Ok(Some((b, Cause::Dst)));
        }
        if let Some(v) = t.view_of() {
            if let Some(b) = self.backend_from_buffer(&v.src, t) {
                return Ok(Some((b, Cause::ViewSrc)));
            }
        }
        if self.user_buffer(t.storage_owner()).is_some() {
            let buf = t.buffer().map(|b| b.name()).unwrap_or_default();
            return Err(Error::Unsupported {
                backend: "any scheduler backend".into(),
                what: format!(
                    "op {} of pre-allocated tensor '{}' in buffer '{buf}': no backend that can use that \
                     buffer can run the op; allocate the tensor elsewhere or add a backend that supports it",
                    t.op().name(),
                    t.name()
                ),
            });
        }
        if t.flags().contains(Flags::INPUT) {
            return Ok(Some((self.last(), Cause::Input)));
        }
        if let Some(b) = self.env.policy.backend_for(t) {
            if !t.op().is_none_op() && self.env.backends[b].supports_op(t) {
                return Ok(Some((b, Cause::Policy)));
            }
        }
        for (i, src) in t.src_slots().iter().enumerate() {
            let Some(src) = src else { continue };
            let Some(buf) = src.buffer() else { continue };
            if buf.usage() != BufferUsage::Weights {
                continue;
            }
            let sb = self.backend_from_buffer(src, t);
            if sb == Some(self.last()) && self.env.op_offload {
                let last = self.last();
                if let Some(b) = (0..last).find(|&b| {
                    let be = &self.env.backends[b];
                    be.supports_op(t) && be.offload_op(t) && self.env.policy.batch_allows(b, t)
                }) {
                    return Ok(Some((b, Cause::Offload)));
                }
            }
            return Ok(sb.map(|b| (b, Cause::Weight(i))));
        }
        Ok(None)
    }

    /// ggml_backend_sched_buffer_supported: can backend `b` read `t` where it is (or will be)?
    fn buffer_supported(&self, t: &Tensor, b: usize) -> bool {
        let owner = t.storage_owner();
        let buft = match self.user_buffer(owner) {
            Some(buf) => Some(buf.buffer_type()),
            None => self
                .get(t)
                .or_else(|| t.view_of().and_then(|v| self.get(&v.src)))
                .map(|i| self.env.bufts[i].clone()),
        };
        buft.is_some_and(|buft| self.env.backends[b].supports_buft(&buft))
    }

    fn expand(&mut self, down: bool, skip_last: bool) {
        let n = self.graph.nodes().len();
        let mut cur: Option<usize> = None;
        for k in 0..n {
            let i = if down { k } else { n - 1 - k };
            let node = &self.graph.nodes()[i];
            if node.op().is_view_op() {
                continue;
            }
            match self.get(node) {
                Some(b) => {
                    cur = if skip_last && b == self.last() {
                        None
                    } else {
                        Some(b)
                    }
                }
                None => {
                    if let Some(c) = cur {
                        if self.env.backends[c].supports_op(node) {
                            let node = node.clone();
                            self.set(&node, c, Cause::Expand);
                        }
                    }
                }
            }
        }
    }
}

/// Runs the five passes over `graph`.
pub(crate) fn assign(graph: &Graph, env: &Env<'_>) -> Result<Assignment> {
    if env.backends.is_empty() {
        return Err(Error::BadValue {
            arg: "scheduler: backends".into(),
            value: "an empty list".into(),
            expected: "at least one backend, the CPU last".into(),
        });
    }
    let mut st = State {
        env,
        graph,
        ids: IdMap::default(),
    };
    st.assign_user();
    st.assign_from_buffers()?;
    st.expand_assignments();
    st.upgrade_or_pick_best()?;
    st.assign_sources();
    st.assign_remaining();
    let nodes: Vec<Assigned> = graph.nodes().iter().map(|t| st.at(t)).collect();
    let leafs: Vec<Assigned> = graph.leafs().iter().map(|t| st.at(t)).collect();
    let (splits, graph_inputs) = st.split_graph(&nodes)?;
    Ok(Assignment {
        nodes,
        leafs,
        splits,
        graph_inputs,
    })
}

impl State<'_> {
    /// The user's forced assignments (`Scheduler::set_tensor_backend`) come first.
    fn assign_user(&mut self) {
        for (id, &b) in self.env.user {
            self.ids.insert(*id, Some((b.0, Cause::User)));
        }
    }

    /// Pass 1: pre-allocated tensors, view sources, inputs, weights.
    fn assign_from_buffers(&mut self) -> Result<()> {
        let graph = self.graph;
        for t in graph.leafs().iter().chain(graph.nodes()) {
            if self.get(t).is_none() {
                if let Some((b, c)) = self.backend_id_from_cur(t)? {
                    self.set(t, b, c);
                }
            }
        }
        Ok(())
    }

    /// Pass 2: expand non-CPU assignments down and up, then all of them.
    fn expand_assignments(&mut self) {
        self.expand(true, true);
        self.expand(false, true);
        self.expand(true, false);
        self.expand(false, false);
    }

    /// Pass 3: upgrade to higher-priority backends with the same buffer type;
    /// unassigned nodes go where most of their inputs can be read.
    fn upgrade_or_pick_best(&mut self) -> Result<()> {
        let graph = self.graph;
        for node in graph.nodes() {
            if node.op().is_view_op() {
                continue;
            }
            match self.get(node) {
                None => {
                    let b = self.best_backend(node)?;
                    self.set(node, b, Cause::Best);
                }
                Some(cur) => {
                    if let Some(b) = self.upgrade(node, cur) {
                        self.set(node, b, Cause::Upgrade);
                    }
                }
            }
        }
        Ok(())
    }

    /// Pass 3 for an unassigned node: the first backend that runs it with the
    /// most sources it can read where they are.
    fn best_backend(&self, node: &Tensor) -> Result<usize> {
        let mut best: Option<(usize, usize)> = None;
        for b in 0..self.env.backends.len() {
            if !self.env.backends[b].supports_op(node) {
                continue;
            }
            let n_sup = node
                .srcs()
                .filter(|s| {
                    (self.get(s).is_some()
                        || s.view_of().is_some_and(|v| self.get(&v.src).is_some()))
                        && self.buffer_supported(s, b)
                })
                .count();
            if best.is_none_or(|(_, n)| n_sup > n) {
                best = Some((b, n_sup));
            }
        }
        best.map(|(b, _)| b).ok_or_else(|| Error::Unsupported {
            backend: self
                .env
                .backends
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", "),
            what: format!(
                "op {} on {} (tensor '{}')",
                node.op().name(),
                node.dtype(),
                node.name()
            ),
        })
    }

    /// Pass 3 for an assigned node: a higher-priority backend than `cur`
    /// sharing its buffer type that runs the node and reads all its sources.
    fn upgrade(&self, node: &Tensor, cur: usize) -> Option<usize> {
        let bufts = self.env.bufts;
        (0..cur).find(|&b| {
            same_buffer_type(&bufts[b], &bufts[cur])
                && self.env.backends[b].supports_op(node)
                && node.srcs().all(|s| self.buffer_supported(s, b))
        })
    }

    /// Pass 4: views follow their base, sources follow their user.
    fn assign_sources(&mut self) {
        let graph = self.graph;
        for node in graph.nodes() {
            if self.get(node).is_none() {
                if let Some(b) = node.view_of().and_then(|v| self.get(&v.src)) {
                    self.set(node, b, Cause::SrcView);
                }
            }
            let cur = self.get(node);
            for src in node.srcs() {
                if self.get(src).is_some() {
                    continue;
                }
                if let Some(v) = src.view_of() {
                    if let Some(b) = self.get(&v.src) {
                        self.set(src, b, Cause::SrcView);
                        continue;
                    }
                }
                if let Some(c) = cur {
                    self.set(src, c, Cause::SrcCur);
                }
            }
        }
    }

    /// Anything still open (views of unassigned leafs): follow the base, else the fallback.
    fn assign_remaining(&mut self) {
        let graph = self.graph;
        for t in graph.leafs().iter().chain(graph.nodes()) {
            if self.get(t).is_none() {
                match t.view_of().and_then(|v| self.get(&v.src)) {
                    Some(b) => self.set(t, b, Cause::SrcView),
                    None => self.set(t, self.last(), Cause::Default),
                }
            }
        }
    }

    /// Backend and cause of `t` once every pass ran.
    fn at(&self, t: &Tensor) -> Assigned {
        let (b, cause) = self.ids[&t.id()].expect("every tensor assigned by the passes");
        Assigned {
            backend: BackendId(b),
            cause,
        }
    }

    /// Pass 5: cuts the nodes into splits (`nodes`: each node's backend) and
    /// lists the inputs each split copies in, and the graph inputs that get
    /// pipeline copies.
    fn split_graph(&self, nodes: &[Assigned]) -> Result<(Vec<Split>, Vec<Slot>)> {
        let (graph, env) = (self.graph, self.env);
        let mut splits: Vec<Split> = Vec::new();
        let mut graph_inputs: Vec<Slot> = Vec::new();
        let mut copied: IdSet<(TensorId, BackendId)> = IdSet::default();
        let slot_of = |t: &Tensor| {
            graph
                .slot(t)
                .expect("sources of graph nodes are in the graph")
        };
        for (i, node) in graph.nodes().iter().enumerate() {
            if node.op().is_view_op() {
                continue;
            }
            let nb = nodes[i].backend;
            let need_new = match splits.last() {
                None => true,
                Some(s) if s.backend != nb => true,
                Some(s) => !s.inputs.is_empty() && self.breaks_split(node, s, &copied),
            };
            if need_new {
                if let Some(s) = splits.last_mut() {
                    s.end = i;
                }
                if splits.len() >= env.max_splits {
                    return Err(Error::Limit {
                        what: "splits",
                        value: splits.len() + 1,
                        limit: env.max_splits,
                        knob: "SchedConfig::max_splits",
                    });
                }
                splits.push(Split {
                    backend: nb,
                    start: if splits.is_empty() { 0 } else { i },
                    end: graph.nodes().len(),
                    inputs: Vec::new(),
                });
            }
            let split = splits.last_mut().expect("pushed above");
            for src in node.srcs() {
                let src_b = self.at(src).backend;
                if src.flags().contains(Flags::INPUT) && env.n_copies > 1 {
                    let s = slot_of(src);
                    if !graph_inputs.contains(&s) {
                        graph_inputs.push(s);
                    }
                }
                if src_b != split.backend
                    && !self.buffer_supported(src, split.backend.0)
                    && !copied.contains(&(src.id(), split.backend))
                {
                    copied.insert((src.id(), split.backend));
                    if split.inputs.len() >= env.max_split_inputs {
                        return Err(Error::Limit {
                            what: "inputs of one split",
                            value: split.inputs.len() + 1,
                            limit: env.max_split_inputs,
                            knob: "SchedConfig::max_split_inputs",
                        });
                    }
                    split.inputs.push(slot_of(src));
                }
            }
        }
        if let Some(s) = splits.last_mut() {
            s.end = graph.nodes().len();
        }
        Ok((splits, graph_inputs))
    }

    /// Pass 5: whether `node`, on the backend of split `s`, must start a new
    /// split: a source is a weight on another backend, or copying one more
    /// input would pass the split-input limit.
    fn breaks_split(
        &self,
        node: &Tensor,
        s: &Split,
        copied: &IdSet<(TensorId, BackendId)>,
    ) -> bool {
        node.srcs().any(|src| {
            let src_b = self.at(src).backend;
            let weight_elsewhere = src
                .buffer()
                .is_some_and(|b| b.usage() == BufferUsage::Weights)
                && src_b != s.backend;
            let would_overflow = s.inputs.len() >= self.env.max_split_inputs
                && src_b != s.backend
                && !copied.contains(&(src.id(), s.backend))
                && !self.buffer_supported(src, s.backend.0);
            weight_elsewhere || would_overflow
        })
    }
}

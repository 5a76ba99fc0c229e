//! Per-run scheduler state: copies of split inputs, the allocation graph
//! handed to the memory planner, per-backend split graphs, and the compute
//! loop with copies and events. Everything here is derived from a
//! [`Assignment`] and rebuilt when the graph or the assignment changes.

use crate::graph::IdMap;
use std::sync::Arc;

use super::assign::{Assignment, BackendId, Split};
use super::{EvalCallback, SchedConfig};
use crate::alloc::GraphAllocator;
use crate::backend::{tensor_copy, Backend, Buffer, BufferType, Event};
use crate::graph::{Graph, Slot};
use crate::ops::Op;
use crate::tensor::{Flags, Tensor, TensorId, ViewOf};
use crate::{Error, Result, ResultExt};

/// Identity of a graph: its node and leaf ids (tensors are unique objects).
fn graph_ids(graph: &Graph) -> impl Iterator<Item = TensorId> + '_ {
    graph.nodes().iter().chain(graph.leafs()).map(Tensor::id)
}

fn slot_tensor(graph: &Graph, slot: Slot) -> &Tensor {
    match slot {
        Slot::Node(i) => &graph.nodes()[i],
        Slot::Leaf(i) => &graph.leafs()[i],
    }
}

/// A buffer of pipeline copies and the aligned sizes it was laid out for.
type PipeBuffer = (Arc<dyn Buffer>, Vec<usize>);

pub(crate) struct RunState {
    galloc: GraphAllocator,
    assignment: Option<Assignment>,
    key: Vec<TensorId>,
    /// The [`Graph::id`] `key` was taken from (0: none).
    key_graph: u64,
    allocated: bool,
    /// Copies of split inputs: (source id, backend) → one tensor per pipeline copy.
    copies: IdMap<(TensorId, BackendId), Vec<Tensor>>,
    assigned: IdMap<TensorId, BackendId>,
    prev_ids: Option<(Vec<usize>, Vec<usize>)>,
    /// With pipeline copies, the places of each INPUT leaf (ggml's graph
    /// inputs): one per copy on the leaf's backend, the leaf itself in slot
    /// `cur_copy` (see [`rotated_inputs`]).
    rotated: Vec<(BackendId, Vec<Tensor>)>,
    /// The layout duplicates standing in the other slots, per input leaf
    /// (kept across allocations, as are the split-input copies, so their
    /// ids and places stay put).
    dups: IdMap<TensorId, Vec<Tensor>>,
    /// With pipeline copies, per backend: the buffer holding its copies and
    /// input places, and the aligned sizes it was laid out for (kept while
    /// they stay the same, see [`RunState::place_pipeline`]).
    pipe: Vec<Option<PipeBuffer>>,
    /// The pipeline copy the allocated graph uses (chosen by `install`).
    cur_copy: usize,
    /// The copy the next allocation takes.
    next_copy: usize,
    /// The graph each backend runs for (split index, pipeline copy), built at
    /// the first compute after an assignment is adopted and reused until the
    /// next one (a reused decode graph costs no rebuilding per token).
    split_graphs: IdMap<(usize, usize), Graph>,
}

impl RunState {
    pub(crate) fn new(bufts: &[Arc<dyn BufferType>]) -> Result<RunState> {
        Ok(RunState {
            galloc: GraphAllocator::new_n(bufts)?,
            assignment: None,
            key: Vec::new(),
            key_graph: 0,
            allocated: false,
            copies: IdMap::default(),
            assigned: IdMap::default(),
            prev_ids: None,
            rotated: Vec::new(),
            dups: IdMap::default(),
            pipe: Vec::new(),
            cur_copy: 0,
            next_copy: 0,
            split_graphs: IdMap::default(),
        })
    }

    pub(crate) fn invalidate(&mut self) {
        self.allocated = false;
        self.assignment = None;
        self.split_graphs.clear();
        self.key.clear();
        self.key_graph = 0;
    }

    pub(crate) fn assignment(&self) -> Option<&Assignment> {
        self.assignment.as_ref()
    }

    pub(crate) fn assigned(&self, t: &Tensor) -> Option<BackendId> {
        self.assigned.get(&t.id()).copied()
    }

    pub(crate) fn is_planned_for(&self, graph: &Graph) -> bool {
        // the same graph as planned (its id), or compared in place: called
        // every step, a collected key would be an allocation of a thousand
        // ids each time
        self.assignment.is_some() && (self.key_graph == graph.id() || self.key_matches(graph))
    }

    fn key_matches(&self, graph: &Graph) -> bool {
        graph_ids(graph).eq(self.key.iter().copied())
    }

    pub(crate) fn is_allocated_for(&self, graph: &Graph) -> bool {
        self.allocated && self.is_planned_for(graph)
    }

    /// The compute buffers allocated so far.
    pub(crate) fn own_buffers(&self) -> Vec<Arc<dyn crate::backend::Buffer>> {
        (0..self.galloc.planner().buffer_types().len())
            .filter_map(|i| self.galloc.buffer(i))
            .collect()
    }

    /// Compute bytes of backend `backend`: its planned buffer and, with
    /// pipeline copies, the buffer holding them.
    pub(crate) fn buffer_size(&self, backend: usize) -> usize {
        let pipe = self
            .pipe
            .get(backend)
            .and_then(Option::as_ref)
            .map_or(0, |(b, _)| b.size());
        self.galloc.buffer_size(backend) + pipe
    }

    /// Creates the copies of every split input (and pipeline copies), and
    /// the pipeline places of the graph's inputs.
    fn make_copies(
        &mut self,
        graph: &Graph,
        p: &Assignment,
        backends: &[Box<dyn Backend>],
        n_copies: usize,
    ) {
        let mut fresh = make_copies(graph, p, backends, n_copies);
        // the same input on the same backend keeps its copies (stable ids:
        // plan caches and RPC graph re-runs keep hitting)
        for (k, v) in fresh.iter_mut() {
            if let Some(old) = self.copies.get(k) {
                if old.len() == v.len() && old[0].same_layout(&v[0]) {
                    *v = old.clone();
                }
            }
        }
        self.copies = fresh;
        let pipe: Vec<Arc<dyn Buffer>> =
            self.pipe.iter().flatten().map(|(b, _)| b.clone()).collect();
        // inputs the caller placed in memory of its own stay where they are
        let managed = |t: &Tensor| {
            t.storage().is_none_or(|st| {
                pipe.iter()
                    .any(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&st.buffer)))
            })
        };
        self.rotated = rotated_inputs(
            graph,
            p,
            backends,
            n_copies,
            self.cur_copy,
            &managed,
            &mut self.dups,
        );
        self.split_graphs.clear();
    }

    /// With pipeline copies, places every split-input copy and every input
    /// place in one buffer per backend, in a fixed order, so each keeps its
    /// place from one allocation to the next and the memory planner, seeing
    /// them as memory it does not own, keeps one plan whatever the current
    /// copy (ggml's allocator plans them with the graph; here a plan is
    /// replayed only for a graph of the same structure). The buffer is kept
    /// while the sizes stay the same; a new one is made, after waiting for
    /// running work, when they change (another batch shape).
    fn place_pipeline(
        &mut self,
        graph: &Graph,
        p: &Assignment,
        backends: &mut [Box<dyn Backend>],
    ) -> Result<()> {
        let bufts: Vec<Arc<dyn BufferType>> = self.galloc.planner().buffer_types().to_vec();
        let mut lists: Vec<Vec<Tensor>> = vec![Vec::new(); bufts.len()];
        for split in &p.splits {
            for &slot in &split.inputs {
                let input = slot_tensor(graph, slot);
                lists[split.backend.index()]
                    .extend(self.copies[&(input.id(), split.backend)].iter().cloned());
            }
        }
        for (b, places) in &self.rotated {
            lists[b.index()].extend(places.iter().cloned());
        }
        self.pipe.resize(bufts.len(), None);
        let mut waited = false;
        for (bi, list) in lists.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let buft = &bufts[bi];
            let align = buft.alignment().max(1);
            let sizes: Vec<usize> = list
                .iter()
                .map(|t| buft.alloc_size(t).div_ceil(align) * align)
                .collect();
            if !matches!(&self.pipe[bi], Some((_, s)) if *s == sizes) {
                if !waited {
                    synchronize_all(backends)?;
                    waited = true;
                }
                self.pipe[bi] = None;
                let total = sizes.iter().sum::<usize>().max(align);
                let buf = buft
                    .clone()
                    .alloc_buffer(total)
                    .with_context(|| format!("pipeline copies on backend {bi}"))?;
                self.pipe[bi] = Some((buf, sizes.clone()));
            }
            let buf = match &self.pipe[bi] {
                Some((b, _)) => b.clone(),
                None => continue,
            };
            let mut off = 0;
            for (t, sz) in list.iter().zip(&sizes) {
                let there = t.storage().is_some_and(|st| {
                    std::ptr::addr_eq(Arc::as_ptr(&st.buffer), Arc::as_ptr(&buf))
                        && st.offset == off
                });
                if !there {
                    t.set_storage(buf.clone(), off)?;
                    buf.init_tensor(t)?;
                }
                off += sz;
            }
        }
        Ok(())
    }

    /// Planned compute bytes per buffer id for `graph` under `p`, without
    /// allocating anything (the fit dry run).
    pub(crate) fn dry_run(
        &self,
        graph: &Graph,
        p: &Assignment,
        backends: &[Box<dyn Backend>],
        n_copies: usize,
    ) -> Result<Vec<usize>> {
        let probe = RunState {
            galloc: GraphAllocator::from_planner(self.galloc.planner().clone()),
            assignment: None,
            key: Vec::new(),
            key_graph: 0,
            allocated: false,
            copies: make_copies(graph, p, backends, n_copies),
            assigned: IdMap::default(),
            prev_ids: None,
            rotated: rotated_inputs(
                graph,
                p,
                backends,
                n_copies,
                0,
                &|t: &Tensor| !t.is_allocated(),
                &mut IdMap::default(),
            ),
            dups: IdMap::default(),
            pipe: Vec::new(),
            cur_copy: 0,
            next_copy: 0,
            split_graphs: IdMap::default(),
        };
        let (ag, node_ids, leaf_ids) = probe.alloc_graph(graph, p, n_copies, false)?;
        let ours = self.own_buffers();
        let external = |t: &Tensor| {
            t.storage_owner().buffer().is_some_and(|b| {
                !ours
                    .iter()
                    .any(|o| std::ptr::addr_eq(Arc::as_ptr(o), Arc::as_ptr(&b)))
            })
        };
        let planner = self.galloc.planner();
        let plan = planner.plan_n(&ag, Some(&node_ids), Some(&leaf_ids), &external)?;
        Ok((0..planner.buffer_types().len())
            .map(|id| {
                plan.buffer_of_id(id)
                    .and_then(|a| plan.buffers().get(a))
                    .map_or(0, |b| b.peak)
            })
            .collect())
    }

    /// Substitutions for the nodes of `split` with pipeline copy `copy`.
    fn overrides(
        &self,
        graph: &Graph,
        split: &Split,
        copy: usize,
    ) -> IdMap<(TensorId, TensorId), Tensor> {
        let mut o = IdMap::default();
        for node in &graph.nodes()[split.start..split.end] {
            for src in node.srcs() {
                if let Some(v) = self.copies.get(&(src.id(), split.backend)) {
                    o.insert((node.id(), src.id()), v[copy].clone());
                }
            }
        }
        o
    }

    /// The graph the memory planner sees (ggml's `sched->graph`): per split,
    /// a dependency on each input (so it stays alive until copied), the
    /// input's copy (allocated at the split's start), then the split's nodes
    /// reading the copies; leafs last. Returns it with per-node and per-leaf
    /// backend ids.
    /// With `pipelined`, the pipeline copies live in [`RunState::pipe`]
    /// (memory the planner does not own) and are left out; otherwise, with
    /// `n_copies > 1` (the fit dry run), they are planned as leafs.
    fn alloc_graph(
        &self,
        graph: &Graph,
        p: &Assignment,
        n_copies: usize,
        pipelined: bool,
    ) -> Result<(Graph, Vec<usize>, Vec<usize>)> {
        let mut nodes = Vec::new();
        let mut node_ids = Vec::new();
        let mut leafs = Vec::new();
        let mut leaf_ids = Vec::new();
        let mut overrides = IdMap::default();
        for split in &p.splits {
            for &slot in &split.inputs {
                let input = slot_tensor(graph, slot);
                nodes.push(input_dependency(input));
                node_ids.push(p.of(slot).backend.index());
                if n_copies == 1 {
                    nodes.push(self.copies[&(input.id(), split.backend)][0].clone());
                    node_ids.push(split.backend.index());
                }
            }
            for (i, node) in graph.nodes()[split.start..split.end].iter().enumerate() {
                nodes.push(node.clone());
                node_ids.push(p.nodes[split.start + i].backend.index());
            }
            overrides.extend(self.overrides(graph, split, self.cur_copy));
        }
        // the pipeline places come first, so they take the same offsets at
        // every allocation and the inputs move between them
        let mut placed = crate::graph::IdSet::default();
        for (backend, places) in self.rotated.iter().filter(|_| !pipelined) {
            for t in places {
                placed.insert(t.id());
                leafs.push(t.clone());
                leaf_ids.push(backend.index());
            }
        }
        if n_copies > 1 && !pipelined {
            for split in &p.splits {
                for &slot in &split.inputs {
                    for c in &self.copies[&(slot_tensor(graph, slot).id(), split.backend)] {
                        leafs.push(c.clone());
                        leaf_ids.push(split.backend.index());
                    }
                }
            }
        }
        for (i, leaf) in graph.leafs().iter().enumerate() {
            if placed.contains(&leaf.id()) {
                continue;
            }
            leafs.push(leaf.clone());
            leaf_ids.push(p.leafs[i].backend.index());
        }
        Ok((
            Graph::from_parts(nodes, leafs, overrides),
            node_ids,
            leaf_ids,
        ))
    }

    fn adopt(&mut self, graph: &Graph, p: Assignment) {
        self.assigned.clear();
        for (t, a) in graph
            .nodes()
            .iter()
            .zip(&p.nodes)
            .chain(graph.leafs().iter().zip(&p.leafs))
        {
            self.assigned.insert(t.id(), a.backend);
        }
        self.key = graph_ids(graph).collect();
        self.key_graph = graph.id();
        self.assignment = Some(p);
        self.split_graphs.clear();
    }

    /// Adopts `p`: makes its split-input copies and plans memory for the
    /// graph the planner sees. With `allocate`, also places every tensor in
    /// the next pipeline copy, re-planning when a tensor moved to a backend
    /// with another buffer type (ggml's backend_ids_changed) or the graph no
    /// longer fits; otherwise only reserves (sizes the buffers).
    ///
    /// Backends are waited for only before a re-plan (which may move memory
    /// that queued work still uses), as ggml does: placing a graph in the
    /// buffers as planned leaves running work alone, since every split input
    /// and graph input of this allocation has its own pipeline copy.
    pub(crate) fn install(
        &mut self,
        graph: &Graph,
        p: Assignment,
        backends: &mut [Box<dyn Backend>],
        config: &SchedConfig,
        allocate: bool,
    ) -> Result<()> {
        let n_copies = config.n_copies.max(1);
        if allocate {
            self.cur_copy = self.next_copy % n_copies;
            self.next_copy = (self.cur_copy + 1) % n_copies;
        }
        self.make_copies(graph, &p, backends, config.n_copies);
        let pipelined = n_copies > 1;
        if pipelined {
            self.place_pipeline(graph, &p, backends)?;
        }
        let (ag, node_ids, leaf_ids) = self.alloc_graph(graph, &p, config.n_copies, pipelined)?;
        if !allocate {
            synchronize_all(backends)?;
            self.galloc.reserve_n(&ag, &node_ids, &leaf_ids)?;
        } else if self.moved(&node_ids, &leaf_ids) || self.galloc.alloc_graph(&ag).is_err() {
            synchronize_all(backends)?;
            self.galloc.reserve_n(&ag, &node_ids, &leaf_ids)?;
            self.galloc.alloc_graph(&ag)?;
        }
        self.prev_ids = Some((node_ids, leaf_ids));
        self.adopt(graph, p);
        self.allocated = allocate;
        Ok(())
    }

    /// Whether any tensor moved to a backend with another buffer type since
    /// the last plan (true when there is none).
    fn moved(&self, node_ids: &[usize], leaf_ids: &[usize]) -> bool {
        let bufts = self.galloc.planner().buffer_types();
        let moved = |prev: &[usize], now: &[usize]| {
            prev.len() != now.len()
                || prev.iter().zip(now).any(|(&a, &b)| {
                    a != b && !crate::backend::same_buffer_type(&bufts[a], &bufts[b])
                })
        };
        match &self.prev_ids {
            Some((pn, pl)) => moved(pn, node_ids) || moved(pl, leaf_ids),
            None => true,
        }
    }

    pub(crate) fn compute(
        &mut self,
        graph: &Graph,
        backends: &mut [Box<dyn Backend>],
        events: &[Vec<Option<Arc<dyn Event>>>],
        mut eval: Option<&mut EvalCallback>,
    ) -> Result<()> {
        let n_copies = events.first().map_or(1, Vec::len).max(1);
        // the copy chosen when the graph was allocated (a graph computed again
        // without a new allocation uses the same one)
        let copy = self.cur_copy % n_copies;
        let p = self
            .assignment
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("compute before alloc_graph".into()))?;
        for (si, split) in p.splits.iter().enumerate() {
            let sb = split.backend;
            let sbi = sb.index();
            let event = events[sbi].get(copy).cloned().flatten();
            for &slot in &split.inputs {
                let input = slot_tensor(graph, slot);
                let ib = p.of(slot).backend.index();
                let cpy = self.copies[&(input.id(), sb)][copy].clone();
                if input.flags().contains(Flags::INPUT) {
                    // user inputs are copied at once, so the user may overwrite them afterwards
                    if !backends[sbi].copies_are_ordered() {
                        match &event {
                            Some(e) => e.synchronize()?,
                            None => backends[sbi].synchronize()?,
                        }
                    }
                    copy_input(input, &cpy, si)?;
                } else {
                    match &event {
                        Some(e) => backends[sbi].event_wait(e)?,
                        None => backends[sbi].synchronize()?,
                    }
                    let queued = backends[sbi]
                        .cpy_tensor_async(input, &cpy)
                        .with_context(|| copy_context(input, &cpy, si))?;
                    if !queued {
                        backends[ib].synchronize()?;
                        if let Some(e) = event
                            .as_ref()
                            .filter(|_| !backends[sbi].copies_are_ordered())
                        {
                            e.synchronize()?;
                        }
                        copy_input(input, &cpy, si)?;
                    }
                }
            }
            // View nodes of tensors that live on another backend fall inside the
            // range but are no-ops there; the backend gets only its own nodes.
            if !self.split_graphs.contains_key(&(si, copy)) {
                let nodes: Vec<Tensor> = (split.start..split.end)
                    .filter(|&i| p.nodes[i].backend == sb || !graph.nodes()[i].op().is_view_op())
                    .map(|i| graph.nodes()[i].clone())
                    .collect();
                let sg = Graph::from_parts(nodes, Vec::new(), self.overrides(graph, split, copy));
                self.split_graphs.insert((si, copy), sg);
            }
            let sg = &self.split_graphs[&(si, copy)];
            match eval.as_deref_mut() {
                None => backends[sbi].graph_compute(sg)?,
                Some(cb) => {
                    if !compute_with_callback(sg, &mut backends[sbi], cb)? {
                        return Ok(());
                    }
                }
            }
            if !split.inputs.is_empty() {
                if let Some(e) = &event {
                    backends[sbi].event_record(e)?;
                }
            }
        }
        Ok(())
    }
}

/// Waits for every backend.
pub(crate) fn synchronize_all(backends: &mut [Box<dyn Backend>]) -> Result<()> {
    for b in backends {
        b.synchronize()?;
    }
    Ok(())
}

/// What a failed copy of a split input was doing.
fn copy_context(input: &Tensor, cpy: &Tensor, split: usize) -> String {
    format!(
        "split {split}: copying input '{}' to '{}'",
        input.name(),
        cpy.name()
    )
}

/// Copies split input `input` into its copy `cpy`, naming both on error.
fn copy_input(input: &Tensor, cpy: &Tensor, split: usize) -> Result<()> {
    tensor_copy(input, cpy).with_context(|| copy_context(input, cpy, split))
}

/// Computes `g` in ranges ending at each node the callback wants to see,
/// showing it those nodes; `Ok(false)` when the callback asked to stop.
fn compute_with_callback(
    g: &Graph,
    backend: &mut Box<dyn Backend>,
    cb: &mut EvalCallback,
) -> Result<bool> {
    let n = g.nodes().len();
    let mut j0 = 0;
    while j0 < n {
        let mut j1 = j0;
        let mut need = cb(&g.nodes()[j1], true);
        while !need && j1 + 1 < n {
            j1 += 1;
            need = cb(&g.nodes()[j1], true);
        }
        backend.graph_compute(&g.view(j0, j1 + 1))?;
        backend.synchronize()?;
        if need && !cb(&g.nodes()[j1], false) {
            return Ok(false);
        }
        j0 = j1 + 1;
    }
    Ok(true)
}

/// One copy tensor per split input and pipeline slot, named `<backend>#<tensor>#<copy>`.
fn make_copies(
    graph: &Graph,
    p: &Assignment,
    backends: &[Box<dyn Backend>],
    n_copies: usize,
) -> IdMap<(TensorId, BackendId), Vec<Tensor>> {
    let mut copies = IdMap::default();
    for split in &p.splits {
        let bname = backends[split.backend.index()].name();
        for &slot in &split.inputs {
            let src = slot_tensor(graph, slot);
            let v: Vec<Tensor> = (0..n_copies)
                .map(|c| {
                    let t = src
                        .dup_layout()
                        .with_name(format!("{bname}#{}#{c}", src.name()));
                    if n_copies > 1 {
                        // persist across the whole graph: never reused by the planner
                        t.set_flags(Flags(Flags::INPUT.0 | Flags::OUTPUT.0));
                    }
                    t
                })
                .collect();
            copies.insert((src.id(), split.backend), v);
        }
    }
    copies
}

/// The pipeline places of `graph`'s INPUT leafs (ggml's graph inputs,
/// pass 6 of its split): with `n_copies > 1`, `n_copies` tensors per input
/// leaf on the leaf's backend, the leaf itself in slot `cur` and layout
/// duplicates named `<backend>#<leaf>#<copy>` elsewhere, all kept for the
/// whole graph. Allocated first, in slot order, they take the same places at
/// every allocation, so the leaf moves from one to the next as the copies
/// rotate: the caller writes the next batch's inputs into memory the
/// previous batch (maybe still running on an asynchronous backend) does not
/// read. Every INPUT leaf counts, consumed or not, so the planned graph does
/// not depend on which inputs a batch uses. None with one copy.
fn rotated_inputs(
    graph: &Graph,
    p: &Assignment,
    backends: &[Box<dyn Backend>],
    n_copies: usize,
    cur: usize,
    managed: &dyn Fn(&Tensor) -> bool,
    dups: &mut IdMap<TensorId, Vec<Tensor>>,
) -> Vec<(BackendId, Vec<Tensor>)> {
    if n_copies <= 1 {
        return Vec::new();
    }
    let keep = Flags(Flags::INPUT.0 | Flags::OUTPUT.0);
    let mut out = Vec::new();
    let mut kept = IdMap::default();
    for (leaf, a) in graph.leafs().iter().zip(&p.leafs) {
        if !leaf.flags().contains(Flags::INPUT) || leaf.is_view() || !managed(leaf) {
            continue;
        }
        let bname = backends[a.backend.index()].name();
        let d = match dups.remove(&leaf.id()) {
            Some(d) if d.len() == n_copies && d[0].same_layout(leaf) => d,
            _ => (0..n_copies)
                .map(|c| {
                    leaf.dup_layout()
                        .with_name(format!("{bname}#{}#{c}", leaf.name()))
                })
                .collect(),
        };
        let places = (0..n_copies)
            .map(|c| {
                let t = if c == cur { leaf.clone() } else { d[c].clone() };
                t.set_flags(Flags(t.flags().0 | keep.0));
                t
            })
            .collect();
        kept.insert(leaf.id(), d);
        out.push((a.backend, places));
    }
    *dups = kept;
    out
}

/// The planner's dependency node for a split input (ggml's `input_dep`,
/// seed 004): it reads the input, so the input lives until its copy is
/// made, and it aliases the input's memory. It is an OP_NONE node, not a
/// VIEW: the planner counts the views of a tensor and keeps it until every
/// view's consumers ran, and nothing consumes the dependency, so a VIEW here
/// would keep every split input alive to the end of the graph.
fn input_dependency(input: &Tensor) -> Tensor {
    Tensor::from_parts(
        input.dtype(),
        input.ne(),
        input.nb(),
        Op::None,
        vec![Some(input.clone())],
        Some(ViewOf::alias_of(input)),
    )
    .with_name(format!("{}#dep", input.name()))
}

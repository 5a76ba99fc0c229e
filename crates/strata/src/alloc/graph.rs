//! The planner (graph → [`Plan`]) and the graph allocator (ggml's
//! `ggml_gallocr`): plans, owns one buffer per buffer type, places tensors.

use std::sync::{Arc, Weak};

use super::lifetimes::{analyze, How, Rules};
use super::plan::{fingerprint, BufferPlan, Placement, Plan, TensorPlan};
use super::strategy::{assign, lower_bounds};
use super::Strategy;
use crate::backend::{align_up, same_buffer_type, Buffer, BufferType, BufferUsage};
use crate::tensor::Tensor;
use crate::{Error, Graph, Result};

/// Plans the memory of graphs over one or several buffer types without
/// allocating anything: the pure half of [`GraphAllocator`].
#[derive(Clone)]
pub struct Planner {
    /// Buffer type of each buffer id.
    bufts: Vec<Arc<dyn BufferType>>,
    /// Arena of each buffer id (a buffer type named twice shares one arena).
    arena_of: Vec<usize>,
    /// One buffer type per arena.
    arenas: Vec<Arc<dyn BufferType>>,
    strategy: Strategy,
}

impl Planner {
    /// A planner over `buffer_types` (buffer id i = `buffer_types[i]`), with
    /// the default [`Strategy`].
    pub fn new(buffer_types: &[Arc<dyn BufferType>]) -> Result<Planner> {
        if buffer_types.is_empty() {
            return Err(Error::BadValue {
                arg: "Planner::new: buffer types".into(),
                value: "an empty list".into(),
                expected: "at least one buffer type".into(),
            });
        }
        let mut arenas: Vec<Arc<dyn BufferType>> = Vec::new();
        let mut arena_of = Vec::with_capacity(buffer_types.len());
        for b in buffer_types {
            match arenas.iter().position(|a| same_buffer_type(a, b)) {
                Some(i) => arena_of.push(i),
                None => {
                    arena_of.push(arenas.len());
                    arenas.push(b.clone());
                }
            }
        }
        Ok(Planner {
            bufts: buffer_types.to_vec(),
            arena_of,
            arenas,
            strategy: Strategy::default(),
        })
    }

    /// Buffer type of each buffer id.
    pub fn buffer_types(&self) -> &[Arc<dyn BufferType>] {
        &self.bufts
    }

    /// The same planner with another strategy.
    pub fn with_strategy(mut self, strategy: Strategy) -> Planner {
        self.strategy = strategy;
        self
    }

    /// The offset strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Number of buffer ids.
    pub fn n_buffer_ids(&self) -> usize {
        self.bufts.len()
    }

    /// Number of distinct buffer types (buffers the plan needs).
    pub fn n_arenas(&self) -> usize {
        self.arenas.len()
    }

    /// Plans `graph` entirely in buffer id 0; tensors that already have
    /// storage are external.
    pub fn plan(&self, graph: &Graph) -> Result<Plan> {
        self.plan_n(graph, None, None, &|t: &Tensor| {
            t.storage_owner().is_allocated()
        })
    }

    /// Plans `graph` with a buffer id per node and per leaf (all 0 when
    /// `None`); `external` says which tensors the planner must not own
    /// (it is asked about non-view tensors only).
    pub fn plan_n(
        &self,
        graph: &Graph,
        node_buffer_ids: Option<&[usize]>,
        leaf_buffer_ids: Option<&[usize]>,
        external: &dyn Fn(&Tensor) -> bool,
    ) -> Result<Plan> {
        let node_ids = self.ids("node", node_buffer_ids, graph.nodes().len())?;
        let leaf_ids = self.ids("leaf", leaf_buffer_ids, graph.leafs().len())?;
        let node_arena: Vec<usize> = node_ids.iter().map(|&i| self.arena_of[i]).collect();
        let leaf_arena: Vec<usize> = leaf_ids.iter().map(|&i| self.arena_of[i]).collect();
        let aligns: Vec<usize> = self
            .arenas
            .iter()
            .map(|b| b.alignment().max(1).next_power_of_two())
            .collect();
        let size_of = |a: usize, t: &Tensor| align_up(self.arenas[a].alloc_size(t), aligns[a]);
        let an = analyze(
            graph,
            &Rules {
                leaf_arena: &leaf_arena,
                node_arena: &node_arena,
                size_of: &size_of,
                external,
            },
        );
        for inf in &an.infos {
            if let How::Own(b) = inf.how {
                let buft = &self.arenas[an.blocks[b].arena];
                let need = buft.alloc_size(&inf.tensor);
                if need > buft.max_size() {
                    return Err(Error::OutOfMemory {
                        buffer_type: buft.name(),
                        requested: need,
                        msg: format!(
                            "tensor '{}' ({} bytes) is larger than the buffer type's max size {}; \
                             split it or use a buffer type with larger buffers",
                            inf.tensor.name(),
                            need,
                            buft.max_size()
                        ),
                    });
                }
            }
        }
        let (offsets, peaks) = assign(
            self.strategy,
            &an.blocks,
            &an.events,
            self.arenas.len(),
            &aligns,
        )?;
        let lbs = lower_bounds(&an.blocks, self.arenas.len(), an.n_steps);
        let mut buffers = Vec::with_capacity(self.arenas.len());
        for (a, buft) in self.arenas.iter().enumerate() {
            if peaks[a] > buft.max_size() {
                return Err(Error::OutOfMemory {
                    buffer_type: buft.name(),
                    requested: peaks[a],
                    msg: format!(
                        "the graph's plan needs {} bytes in one buffer, more than the max size {}; \
                         split the graph over several buffers",
                        peaks[a],
                        buft.max_size()
                    ),
                });
            }
            buffers.push(BufferPlan {
                name: buft.name(),
                alignment: aligns[a],
                peak: peaks[a],
                lower_bound: lbs[a],
            });
        }
        let mut tensors = Vec::with_capacity(an.infos.len());
        for inf in &an.infos {
            let placement = match inf.how {
                How::Own(b) => Placement::Own {
                    buffer: an.blocks[b].arena,
                    offset: offsets[b],
                    size: an.blocks[b].size,
                },
                How::InPlace(b, p) => Placement::InPlace {
                    buffer: an.blocks[b].arena,
                    offset: offsets[b],
                    size: an.blocks[b].size,
                    parent: an.infos[p].tensor.name(),
                },
                How::View(b) => Placement::View {
                    base: an.infos[b].tensor.name(),
                },
                How::External => Placement::External,
                How::Unplaced => continue,
            };
            tensors.push(TensorPlan {
                locator: inf.loc.clone(),
                name: inf.tensor.name(),
                placement,
                first: inf.first,
                last: inf.last,
            });
        }
        let (fp, item_hashes) = fingerprint(graph, &node_ids, &leaf_ids, external);
        Ok(Plan {
            fingerprint: fp,
            strategy: self.strategy,
            n_steps: an.n_steps,
            buffers,
            arena_of: self.arena_of.clone(),
            node_buffer_ids: node_ids,
            leaf_buffer_ids: leaf_ids,
            tensors,
            item_hashes,
        })
    }

    fn ids(&self, what: &str, ids: Option<&[usize]>, n: usize) -> Result<Vec<usize>> {
        let Some(ids) = ids else {
            return Ok(vec![0; n]);
        };
        if ids.len() != n {
            return Err(Error::Length {
                what: format!("graph planner: {what} buffer ids (one per {what})"),
                expected: n,
                got: ids.len(),
            });
        }
        if let Some((i, &id)) = ids
            .iter()
            .enumerate()
            .find(|(_, &id)| id >= self.bufts.len())
        {
            return Err(Error::index(
                format!("graph planner: buffer id of {what} {i} (a buffer type)"),
                id,
                self.bufts.len(),
            ));
        }
        Ok(ids.to_vec())
    }
}

/// The graph allocator: plans graphs with a [`Planner`], keeps one buffer
/// per distinct buffer type (usage [`BufferUsage::Compute`]), grows it only
/// when a plan needs more, and places graph tensors from the plan.
///
/// Tensors without storage, or stored in a buffer this allocator made, are
/// its own; every other tensor (weights, user-placed tensors) is external:
/// never placed, reused or freed.
///
/// ```
/// use strata::alloc::GraphAllocator;
/// use strata::cpu::cpu_buffer_type;
/// use strata::{ops, DType, Graph, Tensor};
///
/// let a = Tensor::new(DType::F32, &[16]).unwrap().with_name("a");
/// a.set_input();
/// let b = ops::sqr(&a).unwrap().with_name("b"); // can take a's memory
/// let c = ops::scale(&b, 2.0).unwrap().with_name("c"); // and so on
/// c.set_output();
/// let g = Graph::build(&[c.clone()]);
/// let mut ga = GraphAllocator::new(cpu_buffer_type());
/// let plan = ga.reserve(&g).unwrap();
/// assert_eq!(plan.buffers()[0].peak, 64);
/// ga.alloc_graph(&g).unwrap();
/// assert_eq!(c.storage().unwrap().offset, a.storage().unwrap().offset);
/// ```
pub struct GraphAllocator {
    planner: Planner,
    buffers: Vec<Option<Arc<dyn Buffer>>>,
    plan: Option<Plan>,
    /// Every buffer this allocator made that something still holds:
    /// tensors stored in them are the allocator's own, never external.
    made: Vec<Weak<dyn Buffer>>,
}

impl GraphAllocator {
    /// A graph allocator over one buffer type.
    pub fn new(buft: Arc<dyn BufferType>) -> GraphAllocator {
        GraphAllocator::from_planner(Planner::new(&[buft]).expect("one buffer type"))
    }

    /// A graph allocator over several buffer types (buffer id i = `bufts[i]`;
    /// a buffer type named twice shares one buffer).
    pub fn new_n(bufts: &[Arc<dyn BufferType>]) -> Result<GraphAllocator> {
        Ok(GraphAllocator::from_planner(Planner::new(bufts)?))
    }

    /// A graph allocator using `planner`'s buffer types and strategy.
    pub fn from_planner(planner: Planner) -> GraphAllocator {
        let n = planner.n_arenas();
        GraphAllocator {
            planner,
            buffers: vec![None; n],
            plan: None,
            made: Vec::new(),
        }
    }

    /// The same allocator with another offset strategy.
    pub fn with_strategy(mut self, strategy: Strategy) -> GraphAllocator {
        self.planner = self.planner.with_strategy(strategy);
        self
    }

    /// The planner.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// The current plan (from the last reserve).
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// Size of the buffer behind buffer id `id` (0 before the first reserve
    /// or for an unknown id).
    pub fn buffer_size(&self, id: usize) -> usize {
        self.buffer(id).map_or(0, |b| b.size())
    }

    /// The buffer behind buffer id `id`.
    pub fn buffer(&self, id: usize) -> Option<Arc<dyn Buffer>> {
        let a = *self.planner.arena_of.get(id)?;
        self.buffers[a].clone()
    }

    fn is_external(&self, t: &Tensor) -> bool {
        match t.storage_owner().storage() {
            None => false,
            Some(st) => !self
                .made
                .iter()
                .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(&st.buffer))),
        }
    }

    /// Plans `graph` in buffer id 0 and (re)allocates buffers that must grow.
    pub fn reserve(&mut self, graph: &Graph) -> Result<&Plan> {
        let n = vec![0; graph.nodes().len()];
        let l = vec![0; graph.leafs().len()];
        self.reserve_n(graph, &n, &l)
    }

    /// Plans `graph` with a buffer id per node and per leaf, and
    /// (re)allocates each buffer only when the plan needs it larger. Does
    /// not touch the graph's tensors; reserving twice gives the same plan.
    pub fn reserve_n(
        &mut self,
        graph: &Graph,
        node_buffer_ids: &[usize],
        leaf_buffer_ids: &[usize],
    ) -> Result<&Plan> {
        let plan = self.planner.plan_n(
            graph,
            Some(node_buffer_ids),
            Some(leaf_buffer_ids),
            &|t: &Tensor| self.is_external(t),
        )?;
        for (a, bp) in plan.buffers.iter().enumerate() {
            let cur = self.buffers[a].as_ref().map(|b| b.size());
            // Even an empty plan gets a buffer, so views can be initialized.
            if cur.is_none_or(|c| c < bp.peak) {
                tracing::debug!(
                    "graph allocator: {} buffer {} -> {} bytes",
                    bp.name,
                    cur.unwrap_or(0),
                    bp.peak
                );
                self.buffers[a] = None;
                let buf = self.planner.arenas[a].clone().alloc_buffer(bp.peak)?;
                buf.set_usage(BufferUsage::Compute);
                self.made.retain(|w| w.strong_count() > 0);
                self.made.push(Arc::downgrade(&buf));
                self.buffers[a] = Some(buf);
            }
        }
        Ok(self.plan.insert(plan))
    }

    /// Places every tensor of `graph` the planner owns. When the graph is not
    /// the one planned, re-plans by itself if there is one buffer; with
    /// several buffers returns [`Error::PlanMismatch`] naming the first
    /// tensor that does not fit the plan (call [`GraphAllocator::reserve_n`]).
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<()> {
        let fits = self.plan.as_ref().is_some_and(|p| {
            p.node_buffer_ids.len() == graph.nodes().len()
                && p.leaf_buffer_ids.len() == graph.leafs().len()
                && fingerprint(
                    graph,
                    &p.node_buffer_ids,
                    &p.leaf_buffer_ids,
                    &|t: &Tensor| self.is_external(t),
                )
                .0 == p.fingerprint
        });
        if !fits {
            if self.planner.n_arenas() == 1 {
                tracing::debug!("graph allocator: re-planning automatically");
                self.reserve(graph)?;
            } else {
                return Err(self.first_mismatch(graph));
            }
        }
        let plan = self.plan.take().expect("planned above");
        let r = self.place(&plan, graph);
        self.plan = Some(plan);
        r
    }

    /// Places `graph`'s tensors from an explicit `plan` (made by this
    /// allocator's planner). A plan made for another graph is
    /// [`Error::StalePlan`]; a plan larger than the buffers is
    /// [`Error::PlanMismatch`] (reserve with it first).
    pub fn apply(&mut self, plan: &Plan, graph: &Graph) -> Result<()> {
        let (fp, _) = fingerprint(
            graph,
            &plan.node_buffer_ids,
            &plan.leaf_buffer_ids,
            &|t: &Tensor| self.is_external(t),
        );
        if fp != plan.fingerprint
            || plan.node_buffer_ids.len() != graph.nodes().len()
            || plan.leaf_buffer_ids.len() != graph.leafs().len()
        {
            return Err(Error::StalePlan {
                planned: plan.fingerprint,
                found: fp,
            });
        }
        self.place(plan, graph)
    }

    fn first_mismatch(&self, graph: &Graph) -> Error {
        let n = self.planner.n_arenas();
        let what = format!(
            "cannot re-plan a graph over {n} buffers automatically: call reserve_n with this graph"
        );
        let Some(p) = &self.plan else {
            let t = graph.nodes().first().or(graph.leafs().first());
            return Error::PlanMismatch {
                tensor: t.map_or("<empty graph>".into(), |t| t.name()),
                msg: format!("has no plan yet; {what}"),
            };
        };
        let pad = |ids: &[usize], n: usize| -> Vec<usize> {
            (0..n).map(|i| ids.get(i).copied().unwrap_or(0)).collect()
        };
        let (_, items) = fingerprint(
            graph,
            &pad(&p.node_buffer_ids, graph.nodes().len()),
            &pad(&p.leaf_buffer_ids, graph.leafs().len()),
            &|t: &Tensor| self.is_external(t),
        );
        let all: Vec<&Tensor> = graph.leafs().iter().chain(graph.nodes()).collect();
        let nl = graph.leafs().len();
        let pl = p.leaf_buffer_ids.len();
        for (i, t) in all.iter().enumerate() {
            // Compare leafs with leafs and nodes with nodes.
            let old = if i < nl {
                (i < pl).then(|| p.item_hashes[i])
            } else {
                p.item_hashes.get(pl + i - nl).copied()
            };
            if old != Some(items[i]) {
                return Error::PlanMismatch {
                    tensor: t.name(),
                    msg: format!(
                        "does not fit the plan of the last reserve (new, or its shape, type, \
                         flags, sources or placement changed); {what}"
                    ),
                };
            }
        }
        Error::PlanMismatch {
            tensor: all.last().map_or("<empty graph>".into(), |t| t.name()),
            msg: format!(
                "the graph has fewer tensors than the plan ({} leafs, {} nodes; planned {} and {}); {what}",
                nl,
                graph.nodes().len(),
                pl,
                p.node_buffer_ids.len()
            ),
        }
    }

    fn place(&mut self, plan: &Plan, graph: &Graph) -> Result<()> {
        if plan.buffers.len() != self.buffers.len() {
            return Err(Error::Length {
                what: "graph allocator: buffers of the plan (one per allocator buffer)".into(),
                expected: self.buffers.len(),
                got: plan.buffers.len(),
            });
        }
        for (a, bp) in plan.buffers.iter().enumerate() {
            let size = self.buffers[a].as_ref().map(|b| b.size());
            if size.is_none_or(|s| s < bp.peak) {
                return Err(Error::PlanMismatch {
                    tensor: bp.name.clone(),
                    msg: format!(
                        "buffer {a} holds {} bytes but the plan needs {}; call reserve with the graph",
                        size.unwrap_or(0),
                        bp.peak
                    ),
                });
            }
        }
        for b in self.buffers.iter().flatten() {
            b.reset();
        }
        let mut views = Vec::new();
        for tp in &plan.tensors {
            let t = tp
                .locator
                .resolve(graph)
                .ok_or_else(|| Error::PlanMismatch {
                    tensor: tp.name.clone(),
                    msg: format!("is not found at {} in this graph; call reserve", tp.locator),
                })?;
            match &tp.placement {
                Placement::Own { buffer, offset, .. }
                | Placement::InPlace { buffer, offset, .. } => {
                    let buf = self.buffers[*buffer].clone().expect("checked above");
                    t.set_storage(buf.clone(), *offset)?;
                    buf.init_tensor(&t)?;
                }
                Placement::View { .. } => views.push(t),
                Placement::External => {}
            }
        }
        for v in views {
            if let Some(st) = v.storage() {
                st.buffer.init_tensor(&v)?;
            }
        }
        Ok(())
    }
}

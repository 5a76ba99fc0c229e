//! Lifetime analysis: ggml's placement rules applied to a graph without
//! choosing offsets. The result is a list of memory blocks (one per tensor
//! the planner owns, shared along in-place chains) with the steps they live
//! and the alloc/free events in ggml's order; the strategies then only
//! choose offsets.
//!
//! Steps: 0 is the set-up phase (leafs and INPUT tensors), node `i` runs at
//! step `i + 1`. A block allocated at step `s` and freed at step `e` is live
//! during `s..=e` (a node's sources are freed after the node is placed).

use crate::graph::IdMap;

use super::plan::Locator;
use crate::tensor::Tensor;
use crate::Graph;

/// A piece of memory the planner owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// Arena (one per distinct buffer type).
    pub arena: usize,
    /// Bytes, rounded up to the arena's alignment.
    pub size: usize,
    /// Step of allocation.
    pub start: usize,
    /// Step of release (the last step for blocks never freed).
    pub end: usize,
}

/// Alloc/free events in the order ggml's online allocator sees them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Alloc(usize),
    Free(usize),
}

/// How a tensor gets its memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// A fresh block.
    Own(usize),
    /// The block of the source tensor `info` index (in-place reuse).
    InPlace(usize, usize),
    /// A view of the tensor at `info` index.
    View(usize),
    /// Memory the planner does not own.
    External,
    /// Seen but never needed memory (an unplaced view base outside the planner's reach).
    Unplaced,
}

pub(crate) struct Info {
    pub tensor: Tensor,
    pub loc: Locator,
    pub how: How,
    n_children: usize,
    n_views: usize,
    /// Responsible for freeing its block (ggml's `allocated`).
    holds: bool,
    /// Kept to the end like an output: the base of an output view.
    /// (ggml frees such a base after the view's last consumer.)
    pinned: bool,
    /// A view already counted in its base's `n_views`.
    counted: bool,
    pub first: usize,
    pub last: usize,
}

pub(crate) struct Analysis {
    pub infos: Vec<Info>,
    pub blocks: Vec<Block>,
    pub events: Vec<Event>,
    pub n_steps: usize,
}

/// What the analysis needs to know about buffers and ownership.
pub(crate) struct Rules<'a> {
    /// Arena of each leaf / node.
    pub leaf_arena: &'a [usize],
    pub node_arena: &'a [usize],
    /// Aligned bytes a tensor needs in an arena.
    pub size_of: &'a dyn Fn(usize, &Tensor) -> usize,
    /// True for tensors whose memory the planner must not own.
    pub external: &'a dyn Fn(&Tensor) -> bool,
}

struct State<'a> {
    graph: &'a Graph,
    rules: &'a Rules<'a>,
    index: IdMap<crate::tensor::TensorId, usize>,
    a: Analysis,
    step: usize,
}

impl State<'_> {
    fn info(&mut self, t: &Tensor, loc: impl FnOnce() -> Locator) -> usize {
        if let Some(&i) = self.index.get(&t.id()) {
            return i;
        }
        let i = self.a.infos.len();
        let how = if t.is_view() {
            How::Unplaced
        } else if (self.rules.external)(t) {
            How::External
        } else {
            How::Unplaced
        };
        self.a.infos.push(Info {
            tensor: t.clone(),
            loc: loc(),
            how,
            n_children: 0,
            n_views: 0,
            holds: false,
            pinned: false,
            counted: false,
            first: self.step,
            last: self.step,
        });
        self.index.insert(t.id(), i);
        i
    }

    /// The info index of `t`'s view base (registering it).
    fn base(&mut self, i: usize) -> Option<usize> {
        let t = self.a.infos[i].tensor.clone();
        let v = t.view_of()?;
        let loc = self.a.infos[i].loc.clone();
        Some(self.info(&v.src, || Locator::Base(Box::new(loc))))
    }

    /// True when the planner may reuse `i`'s memory (it or its base is owned).
    fn owned(&mut self, i: usize) -> bool {
        let j = self.base(i).unwrap_or(i);
        !matches!(self.a.infos[j].how, How::External)
    }

    fn new_block(&mut self, i: usize, arena: usize) {
        let size = (self.rules.size_of)(arena, &self.a.infos[i].tensor);
        let b = self.a.blocks.len();
        self.a.blocks.push(Block {
            arena,
            size,
            start: self.step,
            end: usize::MAX,
        });
        self.a.events.push(Event::Alloc(b));
        let inf = &mut self.a.infos[i];
        inf.how = How::Own(b);
        inf.holds = true;
        inf.first = self.step;
    }

    /// ggml_gallocr_allocate_node, with views placing their base first.
    fn allocate(&mut self, i: usize, arena: usize) {
        if self.a.infos[i].tensor.is_view() {
            if let Some(b) = self.base(i) {
                if matches!(self.a.infos[b].how, How::Unplaced) {
                    self.allocate(b, arena);
                }
                if matches!(self.a.infos[i].how, How::Unplaced) {
                    self.a.infos[i].how = How::View(b);
                    self.a.infos[i].first = self.step;
                }
            }
            return;
        }
        if !matches!(self.a.infos[i].how, How::Unplaced) {
            return;
        }
        let t = self.a.infos[i].tensor.clone();
        if t.op().can_run_in_place() {
            let graph = self.graph;
            for parent in graph.srcs(&t) {
                // Sources of tensors outside the graph are not registered: skip them.
                let Some(&p) = self.index.get(&parent.id()) else {
                    continue;
                };
                if !self.owned(p) {
                    continue; // weights and user-placed tensors are never reused
                }
                let pbase = self.base(p);
                let kept = |i: usize| self.a.infos[i].tensor.is_output() || self.a.infos[i].pinned;
                let output = kept(p) || pbase.is_some_and(kept);
                if output || !t.same_layout(parent) {
                    continue;
                }
                let pi = &self.a.infos[p];
                if pi.n_children != 1 || pi.n_views != 0 {
                    continue;
                }
                match pbase {
                    Some(b) => {
                        let bi = &self.a.infos[b];
                        let at_start = parent.view_of().is_some_and(|v| v.offset == 0);
                        if bi.n_views == 1 && bi.n_children == 0 && at_start && bi.holds {
                            if let How::Own(blk) | How::InPlace(blk, _) = bi.how {
                                self.a.infos[b].holds = false;
                                self.take(i, blk, p);
                                return;
                            }
                        }
                    }
                    None => {
                        if pi.holds {
                            if let How::Own(blk) | How::InPlace(blk, _) = pi.how {
                                self.a.infos[p].holds = false;
                                self.take(i, blk, p);
                                return;
                            }
                        }
                    }
                }
            }
        }
        self.new_block(i, arena);
    }

    fn take(&mut self, i: usize, blk: usize, parent: usize) {
        let inf = &mut self.a.infos[i];
        inf.how = How::InPlace(blk, parent);
        inf.holds = true;
        inf.first = self.step;
    }

    /// ggml_gallocr_free_node: outputs are never freed.
    fn free(&mut self, i: usize) {
        let inf = &mut self.a.infos[i];
        inf.holds = false;
        if inf.tensor.is_output() || inf.pinned {
            return;
        }
        if let How::Own(b) | How::InPlace(b, _) = inf.how {
            self.a.blocks[b].end = self.step;
            self.a.events.push(Event::Free(b));
        }
    }

    /// Counts view `i` once in its base's views.
    fn count_view(&mut self, i: usize) {
        if self.a.infos[i].counted {
            return;
        }
        if let Some(b) = self.base(i) {
            self.a.infos[i].counted = true;
            self.a.infos[b].n_views += 1;
        }
    }

    /// An output that is a view keeps its base to the end.
    fn pin_base_of_output_view(&mut self, i: usize) {
        if self.a.infos[i].tensor.is_output() {
            if let Some(b) = self.base(i) {
                self.a.infos[b].pinned = true;
            }
        }
    }

    fn read(&mut self, i: usize) {
        self.a.infos[i].last = self.step;
        if let Some(b) = self.base(i) {
            self.a.infos[b].last = self.step;
        }
    }
}

/// Applies ggml's placement rules to `graph`.
pub(crate) fn analyze(graph: &Graph, rules: &Rules<'_>) -> Analysis {
    let mut s = State {
        graph,
        rules,
        index: IdMap::default(),
        a: Analysis {
            infos: Vec::new(),
            blocks: Vec::new(),
            events: Vec::new(),
            n_steps: graph.nodes().len(),
        },
        step: 0,
    };
    // Leafs first: they may be inputs the application writes before compute.
    for (i, leaf) in graph.leafs().iter().enumerate() {
        let li = s.info(leaf, || Locator::Leaf(i));
        s.allocate(li, rules.leaf_arena[i]);
        s.pin_base_of_output_view(li);
    }
    // Register every tensor with the place it is first found at.
    for (i, node) in graph.nodes().iter().enumerate() {
        s.info(node, || Locator::Node(i));
        for j in 0..node.src_slots().len() {
            if let Some(src) = graph.src(node, j) {
                s.info(src, || Locator::Src { node: i, src: j });
            }
        }
    }
    // Count children and views; place graph inputs before any node runs.
    for (i, node) in graph.nodes().iter().enumerate() {
        let ni = s.info(node, || unreachable!());
        if !node.op().is_none_op() {
            s.count_view(ni);
        }
        s.pin_base_of_output_view(ni);
        if node.is_input() {
            s.allocate(ni, rules.node_arena[i]);
        }
        for j in 0..node.src_slots().len() {
            let Some(src) = graph.src(node, j) else {
                continue;
            };
            let si = s.info(src, || Locator::Src { node: i, src: j });
            s.a.infos[si].n_children += 1;
            // a view from outside the graph (graph views) counts like a node
            s.count_view(si);
            if src.is_input() {
                s.allocate(si, rules.node_arena[i]);
            }
        }
    }
    for (i, node) in graph.nodes().iter().enumerate() {
        s.step = i + 1;
        let arena = rules.node_arena[i];
        let ni = s.info(node, || unreachable!());
        let srcs: Vec<usize> = graph
            .srcs(node)
            .map(|t| s.info(t, || unreachable!()))
            .collect();
        for &p in &srcs {
            s.allocate(p, arena);
        }
        s.allocate(ni, arena);
        for &p in &srcs {
            s.read(p);
            s.a.infos[p].n_children -= 1;
            let pi = &s.a.infos[p];
            if pi.n_children != 0 || pi.n_views != 0 {
                continue;
            }
            if let Some(b) = s.base(p).filter(|_| s.a.infos[p].counted) {
                s.a.infos[b].n_views -= 1;
                let bi = &s.a.infos[b];
                if bi.n_views == 0 && bi.n_children == 0 && bi.holds {
                    s.free(b);
                }
            } else if s.a.infos[p].holds {
                s.free(p);
            }
        }
    }
    let last = s.a.n_steps;
    for b in &mut s.a.blocks {
        if b.end == usize::MAX {
            b.end = last;
        }
    }
    for inf in &mut s.a.infos {
        if inf.tensor.is_output() || inf.pinned || inf.holds {
            inf.last = last;
        }
    }
    s.a
}

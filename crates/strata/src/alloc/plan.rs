//! The plan as a value: where every tensor of a graph lives, for how long,
//! what it costs, and which graph it was made for (a fingerprint).

use std::fmt;

use crate::graph::Slot;
use crate::tensor::Tensor;
use crate::Graph;

use super::Strategy;

/// Where a planned tensor is found in its graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Locator {
    /// `graph.leafs()[i]`.
    Leaf(usize),
    /// `graph.nodes()[i]`.
    Node(usize),
    /// Source `src` of `graph.nodes()[node]` (a tensor outside the graph).
    Src {
        /// Node index.
        node: usize,
        /// Source slot.
        src: usize,
    },
    /// The view base of the tensor found at the inner locator.
    Base(Box<Locator>),
}

impl Locator {
    /// The tensor this locator names in `graph`, if any.
    pub fn resolve(&self, graph: &Graph) -> Option<Tensor> {
        match self {
            Locator::Leaf(i) => graph.leafs().get(*i).cloned(),
            Locator::Node(i) => graph.nodes().get(*i).cloned(),
            Locator::Src { node, src } => graph.src(graph.nodes().get(*node)?, *src).cloned(),
            Locator::Base(inner) => inner.resolve(graph)?.view_of().map(|v| v.src.clone()),
        }
    }
}

impl fmt::Display for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Locator::Leaf(i) => write!(f, "leaf {i}"),
            Locator::Node(i) => write!(f, "node {i}"),
            Locator::Src { node, src } => write!(f, "node {node} src {src}"),
            Locator::Base(inner) => write!(f, "base of {inner}"),
        }
    }
}

/// How a tensor gets its memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Its own block in planner buffer `buffer` (an arena index).
    Own {
        /// Planner buffer (arena) index.
        buffer: usize,
        /// Byte offset.
        offset: usize,
        /// Bytes reserved (aligned).
        size: usize,
    },
    /// Written over the memory of its source `parent` (in-place reuse).
    InPlace {
        /// Planner buffer (arena) index.
        buffer: usize,
        /// Byte offset.
        offset: usize,
        /// Bytes of the shared block.
        size: usize,
        /// Name of the source whose memory it takes.
        parent: String,
    },
    /// A view: uses its base's memory.
    View {
        /// Name of the base tensor.
        base: String,
    },
    /// Memory the planner does not own (weights, user-placed tensors).
    External,
}

/// One tensor of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// Where the tensor is in the graph.
    pub locator: Locator,
    /// Its name when planned.
    pub name: String,
    /// Where its bytes go.
    pub placement: Placement,
    /// Step from which it holds memory (0 = before the first node, node i = step i+1).
    pub first: usize,
    /// Last step that reads it (the last step for outputs and never-freed tensors).
    pub last: usize,
}

/// One planner buffer (one per distinct buffer type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferPlan {
    /// Buffer type name.
    pub name: String,
    /// Alignment of offsets and sizes.
    pub alignment: usize,
    /// Peak: the buffer size the plan needs.
    pub peak: usize,
    /// Live-set lower bound: the most bytes live at one step for this
    /// execution order (in-place reuse counted); no placement needs less.
    pub lower_bound: usize,
}

impl BufferPlan {
    /// peak / lower bound (1.0 when both are zero).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            if self.peak == 0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            self.peak as f64 / self.lower_bound as f64
        }
    }
}

/// A memory plan for one graph: every tensor's buffer, offset and lifetime.
///
/// Plans compare equal when they place the same graph the same way; the
/// [`Plan::fingerprint`] identifies the graph (its structure, shapes, flags,
/// which tensors are pre-placed, and the buffer ids asked for), so replaying
/// a plan on a different graph is detected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub(crate) fingerprint: u64,
    pub(crate) strategy: Strategy,
    pub(crate) n_steps: usize,
    pub(crate) buffers: Vec<BufferPlan>,
    /// Planner buffer of each graph buffer id.
    pub(crate) arena_of: Vec<usize>,
    pub(crate) node_buffer_ids: Vec<usize>,
    pub(crate) leaf_buffer_ids: Vec<usize>,
    pub(crate) tensors: Vec<TensorPlan>,
    /// Structure hash of each leaf, then each node (to name the first change).
    pub(crate) item_hashes: Vec<u64>,
}

impl Plan {
    /// Fingerprint of the graph the plan was made for.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
    /// The strategy that chose the offsets.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }
    /// Number of execution steps (graph nodes).
    pub fn n_steps(&self) -> usize {
        self.n_steps
    }
    /// The planner buffers (one per distinct buffer type).
    pub fn buffers(&self) -> &[BufferPlan] {
        &self.buffers
    }
    /// The planner buffer used for graph buffer id `id`.
    pub fn buffer_of_id(&self, id: usize) -> Option<usize> {
        self.arena_of.get(id).copied()
    }
    /// Every tensor the plan knows: leafs, nodes and sources from outside the graph.
    pub fn tensors(&self) -> &[TensorPlan] {
        &self.tensors
    }
    /// The plan entry of the tensor at `locator`.
    pub fn get(&self, locator: &Locator) -> Option<&TensorPlan> {
        self.tensors.iter().find(|t| &t.locator == locator)
    }
    /// Sum of the peaks of all buffers.
    pub fn total_peak(&self) -> usize {
        self.buffers.iter().map(|b| b.peak).sum()
    }
    /// Sum of the lower bounds of all buffers.
    pub fn total_lower_bound(&self) -> usize {
        self.buffers.iter().map(|b| b.lower_bound).sum()
    }
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "memory plan {:016x}: {} steps, strategy {}",
            self.fingerprint, self.n_steps, self.strategy
        )?;
        for (i, b) in self.buffers.iter().enumerate() {
            writeln!(
                f,
                "  buffer {i} ({}, align {}): peak {} B ({:.2} MiB), lower bound {} B ({:.2} MiB), ratio {:.3}",
                b.name,
                b.alignment,
                b.peak,
                mib(b.peak),
                b.lower_bound,
                mib(b.lower_bound),
                b.ratio()
            )?;
        }
        for t in &self.tensors {
            let place = match &t.placement {
                Placement::Own {
                    buffer,
                    offset,
                    size,
                } => format!("buf {buffer} @ {offset:>10} +{size}"),
                Placement::InPlace {
                    buffer,
                    offset,
                    size,
                    parent,
                } => format!("buf {buffer} @ {offset:>10} +{size} in place of '{parent}'"),
                Placement::View { base } => format!("view of '{base}'"),
                Placement::External => "external".to_string(),
            };
            writeln!(
                f,
                "  {:<18} {:<24} steps {:>4}..={:<4} {place}",
                t.locator.to_string(),
                t.name,
                t.first,
                t.last
            )?;
        }
        Ok(())
    }
}

/// FNV-1a, 64 bit: stable across runs and platforms.
pub(crate) struct Fnv(u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn finish(&self) -> u64 {
        self.0
    }
}

fn hash_layout(h: &mut Fnv, t: &Tensor, external: &dyn Fn(&Tensor) -> bool) {
    h.bytes(t.op().name().as_bytes());
    h.u64(t.dtype().ggml_id() as u64);
    for i in 0..4 {
        h.u64(t.ne()[i] as u64);
        h.u64(t.nb()[i] as u64);
    }
    h.u64(t.flags().0 as u64);
    h.u64(t.op().can_run_in_place() as u64);
    h.u64(external(t.storage_owner()) as u64);
    if let Some(v) = t.view_of() {
        h.u64(1 + v.offset as u64);
    }
}

fn hash_ref(h: &mut Fnv, graph: &Graph, t: &Tensor, external: &dyn Fn(&Tensor) -> bool) {
    match graph.slot(t) {
        Some(Slot::Leaf(i)) => {
            h.u64(1);
            h.u64(i as u64)
        }
        Some(Slot::Node(i)) => {
            h.u64(2);
            h.u64(i as u64)
        }
        None => {
            h.u64(3);
            hash_layout(h, t, external);
        }
    }
}

/// Structure hash of each leaf then each node, and the graph fingerprint.
pub(crate) fn fingerprint(
    graph: &Graph,
    node_buffer_ids: &[usize],
    leaf_buffer_ids: &[usize],
    external: &dyn Fn(&Tensor) -> bool,
) -> (u64, Vec<u64>) {
    let mut items = Vec::with_capacity(graph.leafs().len() + graph.nodes().len());
    for (i, t) in graph.leafs().iter().enumerate() {
        let mut h = Fnv::new();
        h.u64(0x4c);
        hash_layout(&mut h, t, external);
        h.u64(leaf_buffer_ids.get(i).copied().unwrap_or(0) as u64);
        if let Some(v) = t.view_of() {
            hash_ref(&mut h, graph, &v.src, external);
        }
        items.push(h.finish());
    }
    for (i, t) in graph.nodes().iter().enumerate() {
        let mut h = Fnv::new();
        h.u64(0x4e);
        hash_layout(&mut h, t, external);
        h.u64(node_buffer_ids.get(i).copied().unwrap_or(0) as u64);
        for j in 0..t.src_slots().len() {
            match graph.src(t, j) {
                Some(s) => {
                    hash_ref(&mut h, graph, s, external);
                    if let Some(v) = s.view_of() {
                        hash_ref(&mut h, graph, &v.src, external);
                    }
                }
                None => h.u64(0),
            }
        }
        if let Some(v) = t.view_of() {
            hash_ref(&mut h, graph, &v.src, external);
        }
        items.push(h.finish());
    }
    let mut h = Fnv::new();
    h.u64(graph.leafs().len() as u64);
    h.u64(graph.nodes().len() as u64);
    for &x in &items {
        h.u64(x);
    }
    (h.finish(), items)
}

//! Compute graphs (ggml's `ggml_cgraph`): nodes in execution order and leafs.

/// A hash map keyed by tensor ids (integers the crate hands out in
/// sequence): FxHash instead of SipHash, which showed up in per-token
/// scheduling profiles; the keys are not attacker-chosen.
pub type IdMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
/// A hash set of tensor ids (see [`IdMap`]).
pub type IdSet<K> = std::collections::HashSet<K, rustc_hash::FxBuildHasher>;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::tensor::{Flags, Tensor, TensorId};

/// A tensor's place in a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Index into [`Graph::nodes`].
    Node(usize),
    /// Index into [`Graph::leafs`].
    Leaf(usize),
}

/// A compute graph: the nodes (results of ops) in a valid execution order
/// and the leafs (tensors with no op) they read.
///
/// ```
/// use strata::{ops, DType, Graph, Tensor};
/// let a = Tensor::new(DType::F32, &[4]).unwrap().with_name("a");
/// let b = Tensor::new(DType::F32, &[4]).unwrap().with_name("b");
/// let c = ops::add(&ops::mul(&a, &b).unwrap(), &a).unwrap();
/// let g = Graph::build(&[c.clone()]);
/// assert_eq!(g.nodes().len(), 2);
/// assert_eq!(g.leafs().len(), 2);
/// assert!(g.nodes().last().unwrap() == &c);
/// assert!(g.to_dot().contains("MUL"));
/// ```
#[derive(Clone)]
pub struct Graph {
    nodes: Vec<Tensor>,
    leafs: Vec<Tensor>,
    index: IdMap<TensorId, Slot>,
    /// Source substitutions: node `n` reading tensor `s` reads
    /// `overrides[(n, s)]` instead (the scheduler's copies of split inputs).
    /// Backends, the memory planner and serializers read sources through
    /// [`Graph::src`].
    overrides: IdMap<(TensorId, TensorId), Tensor>,
    /// Drawn from [`GRAPH_IDS`] whenever the contents are made or changed.
    id: u64,
}

/// The source of [`Graph::id`]s (0 is never drawn).
static GRAPH_IDS: AtomicU64 = AtomicU64::new(1);

fn next_graph_id() -> u64 {
    GRAPH_IDS.fetch_add(1, Ordering::Relaxed)
}

/// A graph's [`Graph::storage_key`] kept from call to call: recomputed only
/// when the graph handed in has another [`Graph::storage_stamp`] than the
/// one the key was computed for (a backend that replays a graph's plan
/// while its tensors stay in place asks for it every step).
///
/// ```
/// use strata::graph::StorageKey;
/// use strata::{ops, DType, Graph, Tensor};
/// let a = Tensor::new(DType::F32, &[4]).unwrap();
/// let g = Graph::build(&[ops::scale(&a, 2.0).unwrap()]);
/// let mut cache = StorageKey::default();
/// let mut fresh = Vec::new();
/// g.storage_key(&mut fresh);
/// assert_eq!(cache.of(&g), &fresh[..]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct StorageKey {
    key: Vec<u64>,
    stamp: Option<(u64, u64)>,
}

impl StorageKey {
    /// `graph`'s storage key (recomputed if its stamp changed since the
    /// last call).
    pub fn of(&mut self, graph: &Graph) -> &[u64] {
        let stamp = graph.storage_stamp();
        if self.stamp != Some(stamp) {
            graph.storage_key(&mut self.key);
            self.stamp = Some(stamp);
        }
        &self.key
    }
}

impl Default for Graph {
    fn default() -> Graph {
        Graph {
            nodes: Vec::new(),
            leafs: Vec::new(),
            index: IdMap::default(),
            overrides: IdMap::default(),
            id: next_graph_id(),
        }
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// The graph computing `outputs` (ggml_build_forward_expand on each in turn).
    pub fn build(outputs: &[Tensor]) -> Graph {
        let mut g = Graph::new();
        for t in outputs {
            g.expand(t);
        }
        g
    }

    /// Adds `t` and everything it depends on that is not in the graph yet:
    /// depth first, sources in order, so every node comes after its sources.
    pub fn expand(&mut self, t: &Tensor) {
        self.id = next_graph_id();
        // Iterative DFS (deep graphs must not overflow the stack).
        let mut stack: Vec<(Tensor, usize)> = vec![(t.clone(), 0)];
        while let Some((cur, next_src)) = stack.pop() {
            if next_src == 0 && self.index.contains_key(&cur.id()) {
                continue;
            }
            let srcs = cur.src_slots();
            let mut i = next_src;
            while i < srcs.len()
                && srcs[i]
                    .as_ref()
                    .is_none_or(|s| self.index.contains_key(&s.id()))
            {
                i += 1;
            }
            if i < srcs.len() {
                let s = srcs[i].clone().expect("checked above");
                stack.push((cur, i + 1));
                stack.push((s, 0));
                continue;
            }
            if self.index.contains_key(&cur.id()) {
                continue;
            }
            if cur.op().is_none_op() && !cur.flags().contains(Flags::PARAM) {
                self.index.insert(cur.id(), Slot::Leaf(self.leafs.len()));
                self.leafs.push(cur);
            } else {
                self.index.insert(cur.id(), Slot::Node(self.nodes.len()));
                self.nodes.push(cur);
            }
        }
    }

    /// A graph from explicit node and leaf lists (already in execution order)
    /// and source substitutions. Used by the scheduler to describe what one
    /// backend runs without touching the caller's tensors.
    pub fn from_parts(
        nodes: Vec<Tensor>,
        leafs: Vec<Tensor>,
        overrides: IdMap<(TensorId, TensorId), Tensor>,
    ) -> Graph {
        let mut index =
            IdMap::with_capacity_and_hasher(nodes.len() + leafs.len(), Default::default());
        for (i, t) in leafs.iter().enumerate() {
            index.insert(t.id(), Slot::Leaf(i));
        }
        for (i, t) in nodes.iter().enumerate() {
            index.insert(t.id(), Slot::Node(i));
        }
        Graph {
            nodes,
            leafs,
            index,
            overrides,
            id: next_graph_id(),
        }
    }

    /// Source `i` of `node` as this graph computes it (after substitutions).
    pub fn src<'a>(&'a self, node: &'a Tensor, i: usize) -> Option<&'a Tensor> {
        node.src(i).map(|s| self.effective(node, s))
    }

    /// The present sources of `node` as this graph computes them.
    pub fn srcs<'a>(&'a self, node: &'a Tensor) -> impl Iterator<Item = &'a Tensor> + 'a {
        node.srcs().map(move |s| self.effective(node, s))
    }

    /// The tensor `node` reads in place of its source `src` (`src` unless substituted).
    pub fn effective<'a>(&'a self, node: &Tensor, src: &'a Tensor) -> &'a Tensor {
        if self.overrides.is_empty() {
            return src;
        }
        self.overrides.get(&(node.id(), src.id())).unwrap_or(src)
    }

    /// The source substitutions, keyed by (node id, source id).
    pub fn overrides(&self) -> &IdMap<(TensorId, TensorId), Tensor> {
        &self.overrides
    }

    /// Writes the graph's storage key into `key`: every node and every
    /// source it reads (after substitutions), each as its id and the storage
    /// version of the memory it uses (bumped whenever that memory is placed
    /// or unplaced). Equal keys mean the same computation over the same
    /// memory, so a backend may reuse what it derived from the graph before
    /// (a CPU plan, an RPC message the server already holds). Names and
    /// flags are not part of the key.
    ///
    /// ```
    /// use strata::{cpu, ops, DType, Graph, Tensor};
    /// let a = Tensor::new(DType::F32, &[4]).unwrap();
    /// let g = Graph::build(&[ops::scale(&a, 2.0).unwrap()]);
    /// let (mut before, mut after) = (Vec::new(), Vec::new());
    /// g.storage_key(&mut before);
    /// let _bufs = cpu::alloc_graph_host(&g).unwrap(); // places the tensors
    /// g.storage_key(&mut after);
    /// assert_ne!(before, after);
    /// ```
    pub fn storage_key(&self, key: &mut Vec<u64>) {
        key.clear();
        for t in &self.nodes {
            key.extend([t.id().get(), t.storage_version()]);
            for i in 0..t.src_slots().len() {
                let s = self.src(t, i);
                key.extend([
                    s.map_or(0, |s| s.id().get()),
                    s.map_or(0, Tensor::storage_version),
                ]);
            }
        }
    }

    /// The graph's storage key stamp: equal stamps from two calls mean
    /// [`Graph::storage_key`] would write equal keys, so a backend that kept
    /// the key (and what it derived from it) can skip recomputing it. It is
    /// this graph's [`Graph::id`] and [`Tensor::placements`]; read it before
    /// computing the key it stands for.
    ///
    /// ```
    /// use strata::{cpu, ops, DType, Graph, Tensor};
    /// let a = Tensor::new(DType::F32, &[4]).unwrap();
    /// let g = Graph::build(&[ops::scale(&a, 2.0).unwrap()]);
    /// let before = g.storage_stamp();
    /// let _bufs = cpu::alloc_graph_host(&g).unwrap(); // places the tensors
    /// assert_ne!(before, g.storage_stamp());
    /// ```
    pub fn storage_stamp(&self) -> (u64, u64) {
        (self.id, Tensor::placements())
    }

    /// Identifies the graph's contents: graphs with equal ids have the same
    /// nodes, leafs and substitutions (a clone keeps the id; building,
    /// expanding or viewing a graph draws a new one, never 0).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Nodes in execution order.
    pub fn nodes(&self) -> &[Tensor] {
        &self.nodes
    }

    /// Leafs (inputs, weights, constants).
    pub fn leafs(&self) -> &[Tensor] {
        &self.leafs
    }

    /// Where `t` is in the graph.
    pub fn slot(&self, t: &Tensor) -> Option<Slot> {
        self.index.get(&t.id()).copied()
    }

    /// True when `t` is a node or leaf of the graph.
    pub fn contains(&self, t: &Tensor) -> bool {
        self.index.contains_key(&t.id())
    }

    /// A graph of nodes `start..end` (ggml_graph_view): no leafs; sources
    /// outside the range are treated as already computed.
    pub fn view(&self, start: usize, end: usize) -> Graph {
        let end = end.min(self.nodes.len());
        let start = start.min(end);
        let nodes: Vec<Tensor> = self.nodes[start..end].to_vec();
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id(), Slot::Node(i)))
            .collect();
        Graph {
            nodes,
            leafs: Vec::new(),
            index,
            overrides: self.overrides.clone(),
            id: next_graph_id(),
        }
    }

    /// Graphviz DOT text: nodes as boxes with op and shape, leafs as ellipses.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph strata {\n  rankdir=TB;\n");
        for t in &self.leafs {
            let _ = writeln!(
                s,
                "  t{} [shape=ellipse,label=\"{}\\n{} {:?}\"];",
                t.id(),
                t.name(),
                t.dtype(),
                t.ne()
            );
        }
        for t in &self.nodes {
            let _ = writeln!(
                s,
                "  t{} [shape=box,label=\"{}\\n{} {} {:?}\"];",
                t.id(),
                t.name(),
                t.op().name(),
                t.dtype(),
                t.ne()
            );
            for (i, src) in t.src_slots().iter().enumerate() {
                if let Some(src) = src {
                    let _ = writeln!(
                        s,
                        "  t{} -> t{} [label=\"{i}\"];",
                        self.effective(t, src).id(),
                        t.id()
                    );
                }
            }
        }
        s.push_str("}\n");
        s
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "graph: {} nodes, {} leafs",
            self.nodes.len(),
            self.leafs.len()
        )?;
        for (i, t) in self.nodes.iter().enumerate() {
            let srcs: Vec<String> = t.srcs().map(|s| s.name()).collect();
            writeln!(f, "  node {i:3}: {:?} <- [{}]", t, srcs.join(", "))?;
        }
        for (i, t) in self.leafs.iter().enumerate() {
            writeln!(f, "  leaf {i:3}: {t:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ops, DType};

    #[test]
    fn a_graph_keeps_its_id_until_its_contents_or_placements_change() {
        let a = Tensor::new(DType::F32, &[2]).unwrap();
        let x = ops::scale(&a, 2.0).unwrap();
        let mut g = Graph::build(&[x.clone()]);
        let (id, stamp) = (g.id(), g.storage_stamp());
        assert_ne!(id, 0);
        assert_eq!(g.clone().id(), id, "a clone has the same contents");
        assert_ne!(Graph::build(&[x.clone()]).id(), id, "another graph");
        assert_ne!(g.view(0, 1).id(), id);
        let (mut k1, mut k2) = (Vec::new(), Vec::new());
        g.storage_key(&mut k1);
        let _bufs = crate::cpu::alloc_graph_host(&g).unwrap();
        assert_ne!(g.storage_stamp(), stamp, "its tensors were placed");
        g.storage_key(&mut k2);
        assert_ne!(k1, k2);
        g.expand(&ops::scale(&x, 3.0).unwrap());
        assert_ne!(g.id(), id, "expanded");
    }

    #[test]
    fn depth_first_sources_in_order() {
        let a = Tensor::new(DType::F32, &[2]).unwrap().with_name("a");
        let b = Tensor::new(DType::F32, &[2]).unwrap().with_name("b");
        let x = ops::add(&a, &b).unwrap().with_name("x");
        let y = ops::mul(&b, &a).unwrap().with_name("y");
        let z = ops::sub(&x, &y).unwrap().with_name("z");
        let g = Graph::build(&[z.clone()]);
        let names: Vec<String> = g.nodes().iter().map(|t| t.name()).collect();
        assert_eq!(names, ["x", "y", "z"]);
        let leafs: Vec<String> = g.leafs().iter().map(|t| t.name()).collect();
        assert_eq!(leafs, ["a", "b"]);
        assert_eq!(g.slot(&y), Some(Slot::Node(1)));
        let v = g.view(1, 3);
        assert_eq!(v.nodes().len(), 2);
        assert!(v.leafs().is_empty());
        // expanding again adds nothing
        let mut g2 = g.clone();
        g2.expand(&z);
        assert_eq!(g2.nodes().len(), 3);
    }

    #[test]
    fn deep_chain_does_not_overflow() {
        let mut t = Tensor::new(DType::F32, &[1]).unwrap();
        for _ in 0..100_000 {
            t = ops::sqr(&t).unwrap();
        }
        let g = Graph::build(&[t]);
        assert_eq!(g.nodes().len(), 100_000);
    }
}

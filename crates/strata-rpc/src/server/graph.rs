//! Rebuilding a received graph with strata's own graph construction, so
//! every node is re-checked by the same shape inference the graph builder
//! uses, and refusing any message that disagrees with it.

use std::collections::HashMap;

use strata::ops::{self, Op};
use strata::{Graph, Tensor};

use super::validate::{place, tensor_of, Refusal, RemoteBuf};
use super::Limits;
use crate::proto::{GraphView, RpcTensor, FLAG_COMPUTE};

struct Builder<'a> {
    buffers: &'a HashMap<u64, RemoteBuf>,
    view: GraphView<'a>,
    /// Wire id → index of its (first) record in the message.
    recs: HashMap<u64, usize>,
    node_pos: HashMap<u64, usize>,
    built: HashMap<u64, Tensor>,
    /// strata tensor id → wire id, for finding view bases.
    wire_of: HashMap<strata::TensorId, u64>,
}

impl<'a> Builder<'a> {
    /// The record of wire id `id`, decoded from the message.
    fn rec(&self, id: u64, user: &str) -> Result<RpcTensor, Refusal> {
        self.recs
            .get(&id)
            .map(|&i| self.view.tensor(i))
            .ok_or_else(|| Refusal::MissingRecord {
                user: user.to_string(),
                id,
            })
    }

    fn remember(&mut self, wire: u64, t: &Tensor) {
        self.built.insert(wire, t.clone());
        self.wire_of.insert(t.id(), wire);
    }

    /// Checks the `view_src`/`view_offs` pair of a record resolves and agrees
    /// with its data address.
    fn check_view_src(&self, rec: &RpcTensor) -> Result<(), Refusal> {
        if rec.view_src == 0 {
            return Ok(());
        }
        let name = rec.name_str();
        let v = self.rec(rec.view_src, &format!("view of '{name}'"))?;
        let at = v.data.checked_add(rec.view_offs);
        if v.buffer != rec.buffer || at != Some(rec.data) {
            return Err(Refusal::BadGraph(format!(
                "tensor '{name}': view_src '{}' data {:#x} + view_offs {} does not give its data {:#x}",
                v.name_str(),
                v.data,
                rec.view_offs,
                rec.data
            )));
        }
        Ok(())
    }

    /// A tensor the graph reads but does not compute: its bytes are already
    /// in this connection's buffers.
    fn leaf(&mut self, id: u64, user: &str) -> Result<Tensor, Refusal> {
        if let Some(t) = self.built.get(&id) {
            return Ok(t.clone());
        }
        if self.node_pos.contains_key(&id) {
            return Err(Refusal::BadGraph(format!(
                "{user} reads node {id:#x} before it is computed (cycle or bad node order)"
            )));
        }
        let rec = self.rec(id, user)?;
        for &s in rec.src.iter().filter(|&&s| s != 0) {
            self.rec(s, &format!("source of '{}'", rec.name_str()))?;
        }
        self.check_view_src(&rec)?;
        let t = tensor_of(&rec)?;
        place(self.buffers, &rec, &t)?;
        self.remember(id, &t);
        Ok(t)
    }

    fn node(&mut self, rec: &RpcTensor) -> Result<Option<Tensor>, Refusal> {
        let name = rec.name_str();
        let user = format!("node '{name}'");
        if rec.flags & FLAG_COMPUTE == 0 {
            // ggml backends skip such nodes: their bytes are data, like a leaf.
            self.node_pos.remove(&rec.id);
            self.leaf(rec.id, &user)?;
            return Ok(None);
        }
        // The layout the message claims must itself be sane (bounded element
        // count, non-overflowing span) before inference computes with it.
        claimed_layout_ok(rec)?;
        let op = Op::from_ggml(rec.op, &rec.op_params)
            .map_err(|e| Refusal::BadGraph(format!("{user}: {e}")))?;
        if op == Op::None {
            return Err(Refusal::BadGraph(format!(
                "{user} has op NONE: leaves are not nodes"
            )));
        }
        let mut src: Vec<Option<Tensor>> = Vec::with_capacity(rec.src.len());
        let mut self_dst = None;
        for (k, &sid) in rec.src.iter().enumerate() {
            if sid == 0 {
                src.push(None);
            } else if sid == rec.id {
                // ggml's type cast: CPY whose destination is the result itself.
                if !(op == Op::Cpy && k == 1) {
                    return Err(Refusal::BadGraph(format!("{user} is its own source {k}")));
                }
                let dst = tensor_of(rec)?;
                place(self.buffers, rec, &dst)?;
                self_dst = Some(dst.clone());
                src.push(Some(dst));
            } else if let Some(t) = self.built.get(&sid) {
                src.push(Some(t.clone()));
            } else {
                src.push(Some(self.leaf(sid, &user)?));
            }
        }
        self.check_view_src(rec)?;
        let ne = rec.ne.map(|v| v as usize);
        let nb = rec.nb.map(|v| v as usize);
        let layout = op.takes_layout().then_some((ne, nb));
        // ggml's in-place ops: a view of source 0 with its layout.
        let in_place = rec.view_src != 0
            && op.can_run_in_place()
            && src
                .first()
                .and_then(|s| s.as_ref())
                .is_some_and(|a| a.dtype().ggml_id() == rec.dtype && a.ne() == ne && a.nb() == nb);
        let t = if in_place {
            ops::make_inplace(op, src)
        } else {
            ops::make(op, src, layout)
        }
        .map_err(|e| Refusal::BadGraph(format!("{user}: {e}")))?;
        t.set_name(&name);
        if t.dtype().ggml_id() != rec.dtype || t.ne() != ne || t.nb() != nb {
            return Err(Refusal::BadGraph(format!(
                "{user}: the message says type {} ne {:?} nb {:?}, but {} infers {} {:?} {:?}",
                rec.dtype,
                rec.ne,
                rec.nb,
                t.op().name(),
                t.dtype(),
                t.ne(),
                t.nb()
            )));
        }
        match t.view_of() {
            Some(v) => {
                // The result lives in its base's memory: the address the message
                // gives must be the one inference computes.
                let base_id = self
                    .wire_of
                    .get(&v.src.id())
                    .copied()
                    .or_else(|| {
                        self_dst
                            .as_ref()
                            .filter(|d| d.ptr_eq(&v.src))
                            .map(|_| rec.id)
                    })
                    .ok_or_else(|| Refusal::BadGraph(format!("{user}: view base not found")))?;
                let base = self.rec(base_id, &user)?;
                let want = base.data.checked_add(v.offset as u64);
                if base.buffer != rec.buffer || want != Some(rec.data) {
                    return Err(Refusal::BadGraph(format!(
                        "{user}: data {:#x} is not its view base '{}' at {:#x} + offset {}",
                        rec.data,
                        base.name_str(),
                        base.data,
                        v.offset
                    )));
                }
            }
            None => {
                place(self.buffers, rec, &t)?;
            }
        }
        self.remember(rec.id, &t);
        Ok(Some(t))
    }
}

/// A node's claimed shape and strides, checked for overflow only (view
/// results may have any stride order, so no contiguity rule applies).
fn claimed_layout_ok(rec: &RpcTensor) -> Result<(), Refusal> {
    let mut elems: u64 = 1;
    let mut span: u64 = 0;
    for k in 0..4 {
        let (ne, nb) = (rec.ne[k] as u64, rec.nb[k] as u64);
        elems = elems
            .checked_mul(ne)
            .filter(|&e| e <= (isize::MAX as u64) / 16)
            .ok_or_else(|| {
                Refusal::BadGraph(format!(
                    "node '{}': shape {:?} is too large",
                    rec.name_str(),
                    rec.ne
                ))
            })?;
        if ne > 0 {
            span = span.checked_add((ne - 1) * nb).ok_or_else(|| {
                Refusal::BadGraph(format!(
                    "node '{}': strides {:?} overflow",
                    rec.name_str(),
                    rec.nb
                ))
            })?;
        }
    }
    Ok(())
}

/// Rebuilds `msg` into a strata graph over this connection's buffers, or
/// says why it is refused.
pub(crate) fn rebuild(
    msg: &GraphView<'_>,
    buffers: &HashMap<u64, RemoteBuf>,
    limits: &Limits,
) -> Result<Graph, Refusal> {
    let (n_nodes, n_tensors) = (msg.n_nodes(), msg.n_tensors());
    if n_nodes > limits.max_graph_nodes || n_tensors > limits.max_graph_tensors {
        return Err(Refusal::GraphTooLarge {
            nodes: n_nodes,
            tensors: n_tensors,
            max_nodes: limits.max_graph_nodes,
            max_tensors: limits.max_graph_tensors,
        });
    }
    let mut recs = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let id = msg.tensor_id(i);
        if id == 0 {
            return Err(Refusal::BadGraph(
                "a tensor record has id 0 (the null tensor)".into(),
            ));
        }
        recs.entry(id).or_insert(i); // first record wins, as in ggml
    }
    let mut node_pos = HashMap::with_capacity(n_nodes);
    for (i, id) in msg.nodes().enumerate() {
        if id == 0 {
            return Err(Refusal::BadGraph(format!("node {i} has id 0")));
        }
        if !recs.contains_key(&id) {
            return Err(Refusal::BadGraph(format!(
                "node {i} id {id:#x} has no tensor record"
            )));
        }
        if node_pos.insert(id, i).is_some() {
            return Err(Refusal::BadGraph(format!(
                "node id {id:#x} is listed twice"
            )));
        }
    }
    let mut b = Builder {
        buffers,
        view: *msg,
        recs,
        node_pos,
        built: HashMap::new(),
        wire_of: HashMap::new(),
    };
    let mut graph = Graph::new();
    for id in msg.nodes() {
        let rec = msg.tensor(b.recs[&id]);
        if let Some(t) = b.node(&rec)? {
            graph.expand(&t);
        }
        b.node_pos.remove(&id);
    }
    Ok(graph)
}

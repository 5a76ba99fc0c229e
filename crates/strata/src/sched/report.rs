//! The scheduler's explanation of an assignment: splits, nodes with backend
//! and cause, copied inputs and their bytes, buffer sizes per backend — as a
//! value that renders as text (like `GGML_SCHED_DEBUG`), JSON or Graphviz DOT.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Serialize;

use super::assign::{Assigned, Assignment, BackendId};
use crate::backend::{Backend, BufferType};
use crate::graph::{Graph, Slot};
use crate::tensor::Tensor;

/// A copied split input.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportInput {
    /// The tensor copied.
    pub name: String,
    /// Bytes copied per compute.
    pub bytes: usize,
    /// Backend it comes from.
    pub from: String,
    /// Name of the copy (`<backend>#<tensor>#<copy>`).
    pub copy: String,
}

/// A source of a node.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportSrc {
    /// Tensor name.
    pub name: String,
    /// Its backend.
    pub backend: String,
    /// Why it is there.
    pub cause: String,
    /// Bytes.
    pub bytes: usize,
}

/// A node: where it runs and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportNode {
    /// Position in the graph.
    pub index: usize,
    /// Tensor name.
    pub name: String,
    /// Op name.
    pub op: String,
    /// Backend.
    pub backend: String,
    /// Cause of the assignment (`1.dst`, `2.sup`, ...).
    pub cause: String,
    /// Result bytes.
    pub bytes: usize,
    /// Sources.
    pub srcs: Vec<ReportSrc>,
}

/// A split.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportSplit {
    /// Split number.
    pub index: usize,
    /// Backend.
    pub backend: String,
    /// Node range start.
    pub start: usize,
    /// Node range end (exclusive).
    pub end: usize,
    /// Inputs copied in.
    pub inputs: Vec<ReportInput>,
}

/// A backend's line of the report.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportBackend {
    /// Backend name.
    pub name: String,
    /// Compute buffer type.
    pub buffer_type: String,
    /// Compute buffer bytes reserved.
    pub compute_buffer_bytes: usize,
    /// Nodes assigned.
    pub n_nodes: usize,
}

/// The whole explanation.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Backends in priority order.
    pub backends: Vec<ReportBackend>,
    /// Splits in execution order.
    pub splits: Vec<ReportSplit>,
    /// Every node (views included).
    pub nodes: Vec<ReportNode>,
    /// Total bytes copied between backends per compute.
    pub copy_bytes: usize,
}

fn fmt_size(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{}M", n >> 20)
    } else {
        format!("{}K", n >> 10)
    }
}

impl Report {
    pub(crate) fn new(
        graph: &Graph,
        p: &Assignment,
        backends: &[Box<dyn Backend>],
        bufts: &[Arc<dyn BufferType>],
        buffer_size: impl Fn(usize) -> usize,
    ) -> Report {
        let bname = |b: BackendId| backends[b.index()].name();
        let where_is = |t: &Tensor| graph.slot(t).map(|s| p.of(s));
        let nodes: Vec<ReportNode> = graph
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, t)| ReportNode {
                index: i,
                name: t.name(),
                op: t.op().name().into(),
                backend: bname(p.nodes[i].backend),
                cause: p.nodes[i].cause.to_string(),
                bytes: t.nbytes(),
                srcs: t
                    .srcs()
                    .map(|s| {
                        let (b, c) = where_is(s)
                            .map_or((String::from("?"), String::new()), |a: Assigned| {
                                (bname(a.backend), a.cause.to_string())
                            });
                        ReportSrc {
                            name: s.name(),
                            backend: b,
                            cause: c,
                            bytes: s.nbytes(),
                        }
                    })
                    .collect(),
            })
            .collect();
        let splits: Vec<ReportSplit> = p
            .splits
            .iter()
            .enumerate()
            .map(|(k, s)| ReportSplit {
                index: k,
                backend: bname(s.backend),
                start: s.start,
                end: s.end,
                inputs: s
                    .inputs
                    .iter()
                    .map(|&slot| {
                        let t = match slot {
                            Slot::Node(i) => &graph.nodes()[i],
                            Slot::Leaf(i) => &graph.leafs()[i],
                        };
                        ReportInput {
                            name: t.name(),
                            bytes: t.nbytes(),
                            from: bname(p.of(slot).backend),
                            copy: format!("{}#{}#0", bname(s.backend), t.name()),
                        }
                    })
                    .collect(),
            })
            .collect();
        let copy_bytes = splits.iter().flat_map(|s| &s.inputs).map(|i| i.bytes).sum();
        let backends = (0..backends.len())
            .map(|b| ReportBackend {
                name: bname(BackendId(b)),
                buffer_type: bufts[b].name(),
                compute_buffer_bytes: buffer_size(b),
                n_nodes: p.nodes.iter().filter(|a| a.backend.index() == b).count(),
            })
            .collect();
        Report {
            backends,
            splits,
            nodes,
            copy_bytes,
        }
    }

    /// Text like `GGML_SCHED_DEBUG`: every split with its inputs, and with
    /// `verbose` every node with backend, cause and sources.
    pub fn to_text(&self, verbose: bool) -> String {
        let mut s = String::new();
        for sp in &self.splits {
            let _ = write!(
                s,
                "## SPLIT #{}: {} # {} inputs:",
                sp.index,
                sp.backend,
                sp.inputs.len()
            );
            for i in &sp.inputs {
                let _ = write!(
                    s,
                    " [{} ({:>5}) from {}]",
                    i.name,
                    fmt_size(i.bytes),
                    i.from
                );
            }
            s.push('\n');
            if verbose {
                for n in &self.nodes[sp.start..sp.end] {
                    if matches!(
                        n.op.as_str(),
                        "VIEW" | "RESHAPE" | "PERMUTE" | "TRANSPOSE" | "NONE"
                    ) {
                        continue;
                    }
                    let _ = write!(
                        s,
                        "node #{:3} ({:>10}): {:>20} ({:>5}) [{:>5} {:>8}]:",
                        n.index,
                        n.op,
                        n.name,
                        fmt_size(n.bytes),
                        n.backend,
                        n.cause
                    );
                    for src in &n.srcs {
                        let _ = write!(
                            s,
                            " {:>20} ({:>5}) [{:>5} {:>8}]",
                            src.name,
                            fmt_size(src.bytes),
                            src.backend,
                            src.cause
                        );
                    }
                    s.push('\n');
                }
            }
        }
        for b in &self.backends {
            let _ = writeln!(
                s,
                "backend {}: {} nodes, compute buffer {} ({} bytes)",
                b.name, b.n_nodes, b.buffer_type, b.compute_buffer_bytes
            );
        }
        let _ = writeln!(
            s,
            "{} splits, {} bytes copied per compute",
            self.splits.len(),
            self.copy_bytes
        );
        s
    }

    /// JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Graphviz DOT with one cluster per split.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph strata_sched {\n  rankdir=TB;\n");
        for sp in &self.splits {
            let _ = writeln!(
                s,
                "  subgraph cluster_{} {{\n    label=\"split {} on {}\";",
                sp.index, sp.index, sp.backend
            );
            for n in &self.nodes[sp.start..sp.end] {
                let _ = writeln!(
                    s,
                    "    n{} [shape=box,label=\"{}\\n{} [{}]\"];",
                    n.index, n.name, n.op, n.cause
                );
            }
            s.push_str("  }\n");
        }
        let index: std::collections::HashMap<&str, usize> = self
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.index))
            .collect();
        for n in &self.nodes {
            for src in &n.srcs {
                match index.get(src.name.as_str()) {
                    Some(i) => {
                        let _ = writeln!(s, "  n{i} -> n{};", n.index);
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "  \"{}\" [shape=ellipse]; \"{}\" -> n{};",
                            src.name, src.name, n.index
                        );
                    }
                }
            }
        }
        s.push_str("}\n");
        s
    }
}

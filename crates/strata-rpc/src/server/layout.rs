//! Lazy repacking of received weights: before a graph runs, the tensors it
//! reads only as MUL_MAT / MUL_MAT_ID weights are packed in place in their
//! (lazy `CPU_PACKED`) buffers, so the CPU runs its packed kernels on them;
//! any other use of packed bytes (written by a node, read by another op,
//! read through a view or an overlapping tensor) unpacks them first.
//!
//! Packing never changes what a client reads: `CPU_PACKED` buffers unpack
//! on read and pack on write (GET_TENSOR, SET_TENSOR, SET_TENSOR_HASH,
//! COPY_TENSOR, MEMSET and BUFFER_CLEAR all see ggml's bytes).

use std::collections::HashMap;
use std::sync::Arc;

use strata::cpu::PackedBuffer;
use strata::ops::Op;
use strata::{Graph, Tensor};

use super::validate::RemoteBuf;

/// The lazy packed buffers among `buffers`, by buffer address.
fn packers(buffers: &HashMap<u64, RemoteBuf>) -> HashMap<usize, &Arc<PackedBuffer>> {
    buffers
        .values()
        .filter_map(|b| b.packer.as_ref())
        .map(|p| (Arc::as_ptr(p) as *const u8 as usize, p))
        .collect()
}

/// Sum of the layout changes of `buffers` (see [`PackedBuffer::changes`]).
pub(crate) fn changes(buffers: &HashMap<u64, RemoteBuf>) -> u64 {
    buffers
        .values()
        .filter_map(|b| b.packer.as_ref())
        .map(|p| p.changes())
        .fold(0, u64::wrapping_add)
}

/// A use of bytes of a lazy packed buffer: `off..end` in buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    buf: usize,
    off: usize,
    end: usize,
}

fn span(t: &Tensor) -> Option<Span> {
    let st = t.storage()?;
    Some(Span {
        buf: Arc::as_ptr(&st.buffer) as *const u8 as usize,
        off: st.offset,
        end: st.offset + t.nbytes().max(1),
    })
}

/// Packs the MUL_MAT weights of `graph` that nothing else in it touches and
/// unpacks packed bytes it uses otherwise. Returns how many tensors were
/// packed.
pub(crate) fn prepare(graph: &Graph, buffers: &HashMap<u64, RemoteBuf>) -> strata::Result<usize> {
    let packers = packers(buffers);
    if packers.is_empty() {
        return Ok(0);
    }
    // Uses that allow packed bytes (whole weights read as source 0 of a
    // matmul, or a GET_ROWS table), and every other use.
    let mut weights: Vec<(Span, Tensor, bool)> = Vec::new();
    let mut other: Vec<Span> = Vec::new();
    for node in graph.nodes() {
        other.extend(span(node).filter(|s| packers.contains_key(&s.buf)));
        for (i, s) in node.src_slots().iter().enumerate() {
            let Some(s) = s.as_ref().map(|s| graph.effective(node, s)) else {
                continue;
            };
            let Some(sp) = span(s).filter(|sp| packers.contains_key(&sp.buf)) else {
                continue;
            };
            let reads_weight =
                i == 0 && matches!(node.op(), Op::MulMat | Op::MulMatId | Op::GetRows);
            if reads_weight && !s.is_view() && s.is_contiguous() {
                weights.push((sp, s.clone(), *node.op() != Op::GetRows));
            } else {
                other.push(sp);
            }
        }
    }
    // A weight overlapping a tensor of another range or layout is "other".
    let key = |t: &Tensor| (t.dtype().ggml_id(), t.ne());
    let mut all: Vec<(Span, (u32, [usize; 4]))> =
        weights.iter().map(|w| (w.0, key(&w.1))).collect();
    all.sort_by_key(|(s, k)| (s.buf, s.off, s.end, *k));
    all.dedup();
    other.sort_by_key(|s| (s.buf, s.off, s.end));
    let hits_other = |sp: &Span| {
        let lo = other.partition_point(|s| s.buf < sp.buf);
        let hi = other.partition_point(|s| (s.buf, s.off) < (sp.buf, sp.end));
        other[lo..hi].iter().any(|s| s.end > sp.off)
    };
    let hits_weight = |sp: &Span, k: (u32, [usize; 4])| {
        let lo = all.partition_point(|(s, _)| s.buf < sp.buf);
        let hi = all.partition_point(|(s, _)| (s.buf, s.off) < (sp.buf, sp.end));
        all[lo..hi]
            .iter()
            .any(|(s, sk)| s.end > sp.off && (s != sp || *sk != k))
    };
    let mut unpack = Vec::new();
    let mut keep = Vec::with_capacity(weights.len());
    for (sp, t, pack) in weights {
        if hits_other(&sp) || hits_weight(&sp, key(&t)) {
            unpack.push(sp);
        } else {
            keep.push((sp, t, pack));
        }
    }
    for sp in other.iter().chain(&unpack) {
        packers[&sp.buf].unpack_range(sp.off, sp.end - sp.off)?;
    }
    let mut packed = 0;
    for (sp, t, pack) in keep {
        if pack && packers[&sp.buf].pack_tensor(&t)? {
            packed += 1;
        }
    }
    Ok(packed)
}

/// Places every tensor of `graph` that owns storage where it already is, so
/// that backends rebuild plans they resolved before a layout change.
pub(crate) fn replace_storage(graph: &Graph) -> strata::Result<()> {
    let mut seen = std::collections::HashSet::new();
    let mut todo: Vec<Tensor> = graph.nodes().to_vec();
    for n in graph.nodes() {
        todo.extend(graph.srcs(n).cloned());
    }
    while let Some(t) = todo.pop() {
        if !seen.insert(t.id()) {
            continue;
        }
        if let Some(v) = t.view_of() {
            todo.push(v.src.clone());
        } else if let Some(st) = t.storage() {
            t.set_storage(st.buffer, st.offset)?;
        }
    }
    Ok(())
}

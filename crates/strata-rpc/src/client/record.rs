//! strata tensors → wire records.

use strata::{Error, Graph, Result, Tensor};

use super::conn::Conn;
use crate::proto::{RpcTensor, FLAG_COMPUTE};

fn u32_field(t: &Tensor, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::BadValue {
        arg: format!("RPC: tensor '{}': {what}", t.name()),
        value: v.to_string(),
        expected: format!("at most {} (the protocol's fields are 32-bit)", u32::MAX),
    })
}

/// The record of `t`: buffer handle and address when its storage is a
/// buffer of `conn`, zero otherwise (storage elsewhere is never sent).
/// Sources are named as `graph` computes them (after the scheduler's
/// substitutions) when a graph is given.
pub(crate) fn record(
    conn: &Conn,
    t: &Tensor,
    node: bool,
    graph: Option<&Graph>,
) -> Result<RpcTensor> {
    let mut r = RpcTensor {
        id: t.id().get(),
        dtype: t.dtype().ggml_id(),
        op: t.op().ggml_id(),
        op_params: t.op().to_ggml_params(),
        flags: t.flags().0 as i32 | if node { FLAG_COMPUTE } else { 0 },
        ..RpcTensor::default()
    };
    for k in 0..4 {
        r.ne[k] = u32_field(t, "ne", t.ne()[k])?;
        r.nb[k] = u32_field(t, "nb", t.nb()[k])?;
    }
    for k in 0..t.src_slots().len().min(r.src.len()) {
        let s = match graph {
            Some(g) => g.src(t, k),
            None => t.src(k),
        };
        r.src[k] = s.map_or(0, |s| s.id().get());
    }
    if let Some(v) = t.view_of() {
        r.view_src = v.src.id().get();
        r.view_offs = v.offset as u64;
    }
    if let Some(st) = t.storage() {
        let addr = std::sync::Arc::as_ptr(&st.buffer) as *const () as usize;
        if let Some(handle) = conn.handle_of(addr) {
            r.buffer = handle;
            r.data = st.buffer.base() + st.offset as u64;
        }
    }
    r.set_name(&t.name());
    Ok(r)
}

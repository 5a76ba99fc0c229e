//! Turning received tensor records into strata tensors placed in this
//! connection's buffers, refusing anything that does not fit.
//!
//! Addresses on the wire are synthetic (`base + offset` in an address space
//! the server invents per buffer): they are only ever translated back to a
//! (buffer, offset) pair after bounds checks, never dereferenced.

use std::sync::Arc;

use strata::backend::Buffer;
use strata::{DType, Tensor};

use crate::proto::RpcTensor;

pub(crate) use super::refusal::Refusal;

/// A buffer this connection allocated.
pub(crate) struct RemoteBuf {
    pub buffer: Arc<dyn Buffer>,
    /// The same buffer when it is a lazy `CPU_PACKED` one (see `layout`).
    pub packer: Option<Arc<strata::cpu::PackedBuffer>>,
    pub base: u64,
    pub size: u64,
}

/// Type, shape and strides of a record as a strata tensor (not placed).
pub(crate) fn tensor_of(rec: &RpcTensor) -> Result<Tensor, Refusal> {
    let dtype = DType::from_ggml_id(rec.dtype).ok_or_else(|| Refusal::UnsupportedType {
        tensor: rec.name_str().to_string(),
        dtype: rec.dtype,
    })?;
    let ne = rec.ne.map(|v| v as usize);
    let nb = rec.nb.map(|v| v as usize);
    let t = Tensor::with_layout(dtype, ne, nb).map_err(|e| Refusal::BadTensor {
        tensor: rec.name_str().to_string(),
        why: e.to_string(),
    })?;
    t.set_name(rec.name_str());
    Ok(t)
}

/// Looks up `handle` among this connection's buffers.
pub(crate) fn lookup<'a>(
    buffers: &'a std::collections::HashMap<u64, RemoteBuf>,
    handle: u64,
    what: &str,
) -> Result<&'a RemoteBuf, Refusal> {
    buffers.get(&handle).ok_or_else(|| Refusal::UnknownBuffer {
        what: what.to_string(),
        handle,
    })
}

/// Places `t` (built from `rec`) at the record's address: the buffer must be
/// this connection's and the tensor's whole byte span inside it.
/// Returns the byte offset of the tensor in its buffer.
pub(crate) fn place(
    buffers: &std::collections::HashMap<u64, RemoteBuf>,
    rec: &RpcTensor,
    t: &Tensor,
) -> Result<usize, Refusal> {
    let name = rec.name_str();
    if rec.buffer == 0 {
        return Err(Refusal::NoStorage {
            tensor: name.to_string(),
            data: rec.data,
        });
    }
    let b = lookup(buffers, rec.buffer, &format!("tensor '{name}'"))?;
    let off = rec
        .data
        .checked_sub(b.base)
        .filter(|&o| o <= b.size)
        .ok_or_else(|| Refusal::OutsideBuffer {
            tensor: name.to_string(),
            data: rec.data,
            base: b.base,
            end: b.base.saturating_add(b.size),
        })?;
    let end = off.checked_add(t.nbytes() as u64);
    if end.is_none_or(|e| e > b.size) {
        return Err(Refusal::PastBufferEnd {
            tensor: name.to_string(),
            bytes: t.nbytes(),
            offset: off,
            size: b.size,
        });
    }
    t.set_storage(b.buffer.clone(), off as usize)
        .map_err(|e| Refusal::BadTensor {
            tensor: name.to_string(),
            why: e.to_string(),
        })?;
    Ok(off as usize)
}

/// A record that must name a placed tensor (SET/GET/MEMSET/COPY).
pub(crate) fn placed(
    buffers: &std::collections::HashMap<u64, RemoteBuf>,
    rec: &RpcTensor,
) -> Result<Tensor, Refusal> {
    let t = tensor_of(rec)?;
    place(buffers, rec, &t)?;
    Ok(t)
}

/// Checks `offset..offset+len` lies inside the tensor; returns the end.
pub(crate) fn range_in_tensor(t: &Tensor, offset: u64, len: u64) -> Result<(), Refusal> {
    let end = offset.checked_add(len);
    if end.is_none_or(|e| e > t.nbytes() as u64) {
        return Err(Refusal::RangeOutsideTensor {
            tensor: t.name(),
            offset,
            len,
            size: t.nbytes(),
        });
    }
    Ok(())
}

/// A placed tensor (see [`placed`]) and a byte range `offset..offset+len`
/// inside it (see [`range_in_tensor`]).
pub(crate) fn placed_range(
    buffers: &std::collections::HashMap<u64, RemoteBuf>,
    rec: &RpcTensor,
    offset: u64,
    len: u64,
) -> Result<Tensor, Refusal> {
    let t = placed(buffers, rec)?;
    range_in_tensor(&t, offset, len)?;
    Ok(t)
}

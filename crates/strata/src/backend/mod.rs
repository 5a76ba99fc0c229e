//! The backend interface: buffer types, buffers, backends, devices, events,
//! the registry, and the operations on tensors that go through them.
//!
//! ```
//! use strata::backend::{alloc_tensors, tensor_get, tensor_set};
//! use strata::cpu::cpu_buffer_type;
//! use strata::{DType, Tensor};
//!
//! let a = Tensor::new(DType::F32, &[3]).unwrap().with_name("a");
//! // writing before allocation is a typed error naming the tensor
//! assert!(tensor_set(&a, 0, &[0u8; 12]).is_err());
//! let bufs = alloc_tensors(&[a.clone()], &cpu_buffer_type()).unwrap();
//! assert_eq!(bufs.len(), 1);
//! a.write_f32(&[1.0, 2.0, 3.0]).unwrap();
//! assert_eq!(a.to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0]);
//! let mut first = [0u8; 4];
//! tensor_get(&a, 0, &mut first).unwrap();
//! assert_eq!(f32::from_le_bytes(first), 1.0);
//! ```

mod buffer;
mod compare;
mod device;

use std::sync::Arc;

pub use buffer::{same_buffer_type, Buffer, BufferType, BufferUsage, TensorLayout};
pub use compare::{
    compare_graph_backend, compare_graph_backend_with, graph_copy, CompareError, CompareOptions,
    Comparison, Figures, GraphCopy, NodeOutcome, NodeReport,
};
pub use device::{
    split_spec, AbortCallback, Backend, Device, DeviceMemory, DeviceProvider, DeviceType, Event,
    GraphPlan, Registry,
};

use crate::error::{Operand, ShapeProblem};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Checks `offset..offset+len` lies inside the tensor and the tensor inside its
/// buffer; returns the storage and the absolute buffer offset (what
/// [`tensor_set`] / [`tensor_get`] check, for backends writing their own way).
pub fn checked_range(
    tensor: &Tensor,
    offset: usize,
    len: usize,
) -> Result<(crate::tensor::Storage, usize)> {
    let st = tensor.storage_or_err()?;
    let nbytes = tensor.nbytes();
    let end = offset.saturating_add(len);
    if end > nbytes {
        return Err(Error::OutOfBounds {
            what: format!("tensor '{}'", tensor.name()),
            offset,
            end,
            size: nbytes,
        });
    }
    let buf_end = st.offset.saturating_add(nbytes);
    if buf_end > st.buffer.size() {
        return Err(Error::OutOfBounds {
            what: format!(
                "tensor '{}' in buffer '{}'",
                tensor.name(),
                st.buffer.name()
            ),
            offset: st.offset,
            end: buf_end,
            size: st.buffer.size(),
        });
    }
    let abs = st.offset + offset;
    Ok((st, abs))
}

/// Writes `data` into `tensor` starting `offset` bytes into it (ggml_backend_tensor_set).
pub fn tensor_set(tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
    let (st, abs) = checked_range(tensor, offset, data.len())?;
    if data.is_empty() {
        return Ok(());
    }
    st.buffer.write(tensor, abs, data)
}

/// Reads `out.len()` bytes of `tensor` starting `offset` bytes into it (ggml_backend_tensor_get).
pub fn tensor_get(tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
    let (st, abs) = checked_range(tensor, offset, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    st.buffer.read(tensor, abs, out)
}

/// Sets `len` bytes of `tensor` from `offset` to `value` (ggml_backend_tensor_memset).
pub fn tensor_memset(tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
    let (st, abs) = checked_range(tensor, offset, len)?;
    if len == 0 {
        return Ok(());
    }
    st.buffer.fill(tensor, abs, len, value)
}

/// Copies the bytes of `src` into `dst` between any two buffers
/// (ggml_backend_tensor_copy): same layout required; host fast path when
/// either side is host memory in ggml's layout ([`TensorLayout::Plain`]),
/// buffer-to-buffer when the destination's buffer can do it, otherwise
/// through a staging vector. Within one buffer the two byte ranges may
/// overlap: the result is then that of `memmove` (the destination holds the
/// source's bytes as they were before the copy).
pub fn tensor_copy(src: &Tensor, dst: &Tensor) -> Result<()> {
    // ggml_are_same_layout: type, shape and strides. Equal shapes with other
    // strides (a transposed view) would copy the bytes, not the elements.
    if src.dtype() != dst.dtype()
        || src.ne() != dst.ne()
        || src.nb() != dst.nb()
        || src.nbytes() != dst.nbytes()
    {
        return Err(Error::shape(
            "tensor_copy",
            ShapeProblem::LayoutMismatch {
                src: Operand::of("src", src),
                src_nb: src.nb(),
                dst: Operand::of("dst", dst),
                dst_nb: dst.nb(),
            },
        ));
    }
    let n = src.nbytes();
    let (sst, sabs) = checked_range(src, 0, n)?;
    let (dst_st, dabs) = checked_range(dst, 0, n)?;
    if n == 0 {
        return Ok(());
    }
    if std::ptr::addr_eq(Arc::as_ptr(&sst.buffer), Arc::as_ptr(&dst_st.buffer)) {
        // One buffer: the ranges may overlap, so never hold a slice of one
        // while writing the other (that aliasing let the compiler turn the
        // host buffer's memmove into a memcpy). The buffer copies in place
        // with memmove semantics, or the bytes go through a staging vector.
        if dst_st.buffer.copy_from(src, dst)? {
            return Ok(());
        }
        let mut staging = vec![0u8; n];
        sst.buffer.read(src, sabs, &mut staging)?;
        return dst_st.buffer.write(dst, dabs, &staging);
    }
    let plain = |b: &Arc<dyn Buffer>, t: &Tensor| b.tensor_layout(t) == TensorLayout::Plain;
    if let Some(p) = sst.buffer.host_ptr().filter(|_| plain(&sst.buffer, src)) {
        // SAFETY: checked_range proved sabs..sabs+n lies inside the source
        // buffer, which is not the destination's (handled above).
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr().add(sabs), n) };
        return dst_st.buffer.write(dst, dabs, bytes);
    }
    if let Some(p) = dst_st
        .buffer
        .host_ptr()
        .filter(|_| plain(&dst_st.buffer, dst))
    {
        // SAFETY: checked_range proved dabs..dabs+n lies inside the destination
        // buffer, which is not the source's (handled above): no other reference
        // to those bytes is alive during the read.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().add(dabs), n) };
        return sst.buffer.read(src, sabs, bytes);
    }
    if dst_st.buffer.copy_from(src, dst)? {
        return Ok(());
    }
    let mut staging = vec![0u8; n];
    sst.buffer.read(src, sabs, &mut staging)?;
    dst_st.buffer.write(dst, dabs, &staging)
}

/// Rounds `x` up to a multiple of `align` (a power of two).
pub fn align_up(x: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    (x + align - 1) & !(align - 1)
}

/// [`alloc_tensors`] for every leaf and node of `graph` (leafs first), into
/// buffers of `buft`. Sources outside the graph (graph views) are the
/// caller's business.
pub fn alloc_graph(graph: &crate::Graph, buft: &Arc<dyn BufferType>) -> Result<MultiBuffer> {
    let all: Vec<Tensor> = graph.leafs().iter().chain(graph.nodes()).cloned().collect();
    alloc_tensors(&all, buft)
}

/// Allocates every tensor of `tensors` that has no storage and is not a view
/// into as few buffers of `buft` as its max size allows
/// (ggml_backend_alloc_ctx_tensors_from_buft). Views are skipped (they follow
/// their base). A tensor larger than the max size is an error naming it.
pub fn alloc_tensors(tensors: &[Tensor], buft: &Arc<dyn BufferType>) -> Result<MultiBuffer> {
    let align = buft.alignment().max(1);
    let max = buft.max_size();
    let todo: Vec<&Tensor> = tensors
        .iter()
        .filter(|t| !t.is_view() && !t.is_allocated())
        .collect();
    // Group tensors greedily in order into chunks that fit max_size.
    let mut chunks: Vec<(usize, usize, usize)> = Vec::new(); // (first, last_excl, size)
    let mut start = 0;
    let mut size = 0;
    for (i, t) in todo.iter().enumerate() {
        let sz = align_up(buft.alloc_size(t), align);
        if sz > max {
            return Err(Error::OutOfMemory {
                buffer_type: buft.name(),
                requested: sz,
                msg: format!(
                    "tensor '{}' is larger than the buffer type's max size {max}",
                    t.name()
                ),
            });
        }
        if size + sz > max {
            chunks.push((start, i, size));
            start = i;
            size = 0;
        }
        size += sz;
    }
    if start < todo.len() {
        chunks.push((start, todo.len(), size));
    }
    let mut buffers = Vec::with_capacity(chunks.len());
    for (first, last, size) in chunks {
        let buf = buft.clone().alloc_buffer(size)?;
        let mut off = 0;
        for t in &todo[first..last] {
            t.set_storage(buf.clone(), off)?;
            buf.init_tensor(t)?;
            off += align_up(buft.alloc_size(t), align);
        }
        buffers.push(buf);
    }
    // Views of tensors in the set get initialized on their buffers too.
    for t in tensors.iter().filter(|t| t.is_view()) {
        if let Some(st) = t.storage() {
            st.buffer.init_tensor(t)?;
        }
    }
    Ok(MultiBuffer(buffers))
}

/// The buffers [`alloc_tensors`] made, as one handle (ggml's multi-buffer):
/// [`MultiBuffer::set_usage`] marks every one of them, so marking a model's
/// weights does not depend on how many buffers their size needed (seed 001:
/// the scheduler's split count must not change with the weights' size). It
/// dereferences to the `Vec` of buffers, in allocation order.
#[derive(Clone, Default)]
pub struct MultiBuffer(Vec<Arc<dyn Buffer>>);

impl MultiBuffer {
    /// Sets the usage of every buffer (e.g. [`BufferUsage::Weights`]).
    pub fn set_usage(&self, usage: BufferUsage) {
        self.0.iter().for_each(|b| b.set_usage(usage));
    }

    /// The usage all buffers share, or `None` when they differ or there are
    /// none.
    pub fn usage(&self) -> Option<BufferUsage> {
        let first = self.0.first()?.usage();
        self.0.iter().all(|b| b.usage() == first).then_some(first)
    }

    /// Total bytes over all buffers.
    pub fn size(&self) -> usize {
        self.0.iter().map(|b| b.size()).sum()
    }

    /// The buffers.
    pub fn into_vec(self) -> Vec<Arc<dyn Buffer>> {
        self.0
    }
}

impl std::fmt::Debug for MultiBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|b| (b.name(), b.size())))
            .finish()
    }
}

impl std::ops::Deref for MultiBuffer {
    type Target = Vec<Arc<dyn Buffer>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for MultiBuffer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl IntoIterator for MultiBuffer {
    type Item = Arc<dyn Buffer>;
    type IntoIter = std::vec::IntoIter<Arc<dyn Buffer>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a MultiBuffer {
    type Item = &'a Arc<dyn Buffer>;
    type IntoIter = std::slice::Iter<'a, Arc<dyn Buffer>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl From<MultiBuffer> for Vec<Arc<dyn Buffer>> {
    fn from(m: MultiBuffer) -> Self {
        m.0
    }
}

//! Buffer types and buffers (ggml's `ggml_backend_buffer_type` / `ggml_backend_buffer`).

use std::sync::Arc;

use crate::tensor::Tensor;
use crate::Result;

/// What a buffer holds; the scheduler moves ops to where WEIGHTS buffers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BufferUsage {
    /// Unspecified.
    #[default]
    Any,
    /// Model weights: ops using them are pulled to the buffer's backend.
    Weights,
    /// Intermediate results of a compute graph (graph allocator buffers).
    Compute,
}

impl BufferUsage {
    /// Encodes the usage in a byte (for atomics).
    pub fn to_u8(self) -> u8 {
        self as u8
    }
    /// Decodes [`BufferUsage::to_u8`].
    pub fn from_u8(v: u8) -> BufferUsage {
        match v {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }
}

/// How a buffer stores a tensor's bytes ([`Buffer::tensor_layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TensorLayout {
    /// ggml's layout: the memory holds the tensor's bytes as they are.
    #[default]
    Plain,
    /// The whole tensor, in the repacked layout of
    /// [`crate::quant::packed`]; reads and writes through the buffer still
    /// see ggml's layout, only kernels that know the layout may address it.
    Packed,
    /// Part of a packed tensor (a view that is not the whole of it): its
    /// memory is not in ggml's layout and no kernel can address it.
    PackedPart,
}

/// A kind of memory a device can allocate (ggml's buffer type).
///
/// Optional capabilities have defaults: no size limit, `nbytes` per tensor,
/// not host-accessible.
pub trait BufferType: Send + Sync {
    /// Name, e.g. `"CPU"` or `"RPC[127.0.0.1:50052]"`.
    fn name(&self) -> String;
    /// Allocates a buffer of `size` bytes.
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>>;
    /// Alignment of tensor offsets in this memory (a power of two).
    fn alignment(&self) -> usize;
    /// Largest single buffer this type can allocate.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// Bytes a tensor needs in this memory (may exceed `nbytes` for padded layouts).
    fn alloc_size(&self, tensor: &Tensor) -> usize {
        tensor.nbytes()
    }
    /// True when the CPU can address this memory directly.
    fn is_host(&self) -> bool {
        false
    }
}

/// True when `a` and `b` are the same buffer type object.
pub fn same_buffer_type(a: &Arc<dyn BufferType>, b: &Arc<dyn BufferType>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// A block of device memory holding tensors (ggml's buffer).
///
/// Offsets are byte offsets inside the buffer; the free functions in
/// [`crate::backend`] validate tensor ranges before calling these.
pub trait Buffer: Send + Sync {
    /// The buffer type that allocated it.
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    /// Size in bytes.
    fn size(&self) -> usize;
    /// Device address of the first byte (informational; remote for RPC).
    fn base(&self) -> u64;
    /// Pointer to the bytes when the CPU can address them.
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }
    /// True when the memory must not be written (a read-only mapped file);
    /// backends refuse to compute into it.
    fn is_read_only(&self) -> bool {
        false
    }
    /// Current usage.
    fn usage(&self) -> BufferUsage;
    /// Sets the usage.
    fn set_usage(&self, usage: BufferUsage);
    /// How the buffer stores `tensor` (which lives in it): [`TensorLayout::Plain`]
    /// unless the buffer repacks tensors (the CPU's `CPU_PACKED` buffers).
    /// Code that addresses a host buffer's memory directly must check it.
    fn tensor_layout(&self, _tensor: &Tensor) -> TensorLayout {
        TensorLayout::Plain
    }
    /// Called when a tensor is placed in the buffer (remote buffers register it).
    fn init_tensor(&self, _tensor: &Tensor) -> Result<()> {
        Ok(())
    }
    /// Writes `data` at byte `offset` of the buffer; `tensor` is the tensor written.
    fn write(&self, tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes at byte `offset` of the buffer.
    fn read(&self, tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()>;
    /// Copies `src` into `dst` (which lives in this buffer) when it can do so
    /// without going through the host; returns `Ok(false)` when it cannot.
    fn copy_from(&self, _src: &Tensor, _dst: &Tensor) -> Result<bool> {
        Ok(false)
    }
    /// Sets every byte of the buffer to `value`.
    fn clear(&self, value: u8) -> Result<()>;
    /// Forgets per-tensor state (remote buffers).
    fn reset(&self) {}
    /// Display name (the buffer type's name).
    fn name(&self) -> String {
        self.buffer_type().name()
    }
    /// True when the CPU can address the bytes.
    fn is_host(&self) -> bool {
        self.buffer_type().is_host()
    }
}

//! The linear allocator (ggml's `ggml_tallocr`): aligned bump allocation of
//! tensors into one buffer, for weights and other tensors that live as long
//! as the buffer.

use std::sync::Arc;

use crate::backend::{align_up, Buffer};
use crate::error::TensorProblem;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Places tensors one after the other in a buffer, each at an offset aligned
/// to the buffer type's alignment. Nothing is ever freed.
///
/// ```
/// use strata::alloc::LinearAllocator;
/// use strata::backend::BufferType;
/// use strata::cpu::cpu_buffer_type;
/// use strata::{DType, Tensor};
///
/// let buf = cpu_buffer_type().alloc_buffer(128).unwrap();
/// let mut lin = LinearAllocator::new(buf);
/// let a = Tensor::new(DType::F32, &[3]).unwrap().with_name("a");
/// let b = Tensor::new(DType::F32, &[16]).unwrap().with_name("b");
/// lin.alloc(&a).unwrap();
/// lin.alloc(&b).unwrap(); // at 64: the CPU alignment
/// assert_eq!(b.storage().unwrap().offset, 64);
/// let c = Tensor::new(DType::F32, &[1]).unwrap().with_name("c");
/// let err = lin.alloc(&c).unwrap_err().to_string(); // 128 + 64 > 128
/// assert!(err.contains("'c'"), "{err}");
/// ```
pub struct LinearAllocator {
    buffer: Arc<dyn Buffer>,
    alignment: usize,
    offset: usize,
}

impl LinearAllocator {
    /// A linear allocator over all of `buffer`.
    pub fn new(buffer: Arc<dyn Buffer>) -> LinearAllocator {
        let alignment = buffer.buffer_type().alignment().max(1);
        LinearAllocator {
            buffer,
            alignment,
            offset: 0,
        }
    }

    /// The buffer tensors are placed in.
    pub fn buffer(&self) -> &Arc<dyn Buffer> {
        &self.buffer
    }

    /// Bytes handed out so far (the next tensor goes at this offset).
    pub fn used(&self) -> usize {
        self.offset
    }

    /// Bytes still free.
    pub fn remaining(&self) -> usize {
        self.buffer.size().saturating_sub(self.offset)
    }

    /// Places `tensor` at the next aligned offset and initializes it in the buffer.
    ///
    /// Errors (ggml aborts instead): the tensor is a view (place its base),
    /// already has storage, or does not fit in what is left of the buffer.
    pub fn alloc(&mut self, tensor: &Tensor) -> Result<()> {
        tensor.check_not_view("linear allocator")?;
        if tensor.is_allocated() {
            return Err(Error::BadTensor {
                op: "linear allocator",
                tensor: tensor.name(),
                problem: TensorProblem::HasBuffer,
            });
        }
        let buft = self.buffer.buffer_type();
        let size = align_up(buft.alloc_size(tensor), self.alignment);
        let end = self.offset.saturating_add(size);
        if end > self.buffer.size() {
            return Err(Error::OutOfMemory {
                buffer_type: buft.name(),
                requested: size,
                msg: format!(
                    "tensor '{}' does not fit in the linear allocator's buffer: {} of {} bytes \
                     used, {} free; allocate a larger buffer",
                    tensor.name(),
                    self.offset,
                    self.buffer.size(),
                    self.remaining()
                ),
            });
        }
        tensor.set_storage(self.buffer.clone(), self.offset)?;
        self.buffer.init_tensor(tensor)?;
        self.offset = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::cpu_buffer_type;
    use crate::{ops, DType};

    #[test]
    fn views_and_placed_tensors_are_refused_by_name() {
        let mut lin = LinearAllocator::new(cpu_buffer_type().alloc_buffer(256).unwrap());
        let a = Tensor::new(DType::F32, &[8]).unwrap().with_name("a");
        lin.alloc(&a).unwrap();
        let e = lin.alloc(&a).unwrap_err();
        assert!(
            matches!(&e, Error::BadTensor { op: "linear allocator", tensor, problem: TensorProblem::HasBuffer }
                if tensor == "a"),
            "{e}"
        );
        let v = ops::view_1d(&a, 4, 0).unwrap().with_name("v");
        let e = lin.alloc(&v).unwrap_err();
        assert!(
            matches!(&e, Error::BadTensor { op: "linear allocator", tensor, problem: TensorProblem::View { base } }
                if tensor == "v" && base == "a"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "linear allocator: tensor 'v' is a view: use its base tensor 'a' instead"
        );
        assert_eq!(lin.used(), 64, "nothing placed by the refusals");
    }
}

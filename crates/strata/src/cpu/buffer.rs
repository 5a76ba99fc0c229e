//! Host memory: the CPU buffer type and buffers over owned or caller-owned memory.

use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Alignment of host buffers and of tensor offsets in them (one cache line,
/// enough for AVX-512 loads).
pub const HOST_ALIGNMENT: usize = 64;

/// The CPU's buffer type: aligned host memory.
#[derive(Debug)]
pub struct HostBufferType {
    max_size: usize,
}

/// The process-wide CPU buffer type (one object, so buffer types compare by identity).
pub fn cpu_buffer_type() -> Arc<dyn BufferType> {
    static BUFT: OnceLock<Arc<HostBufferType>> = OnceLock::new();
    BUFT.get_or_init(|| {
        Arc::new(HostBufferType {
            max_size: isize::MAX as usize,
        })
    })
    .clone()
}

impl HostBufferType {
    /// A host buffer type with a custom max buffer size (tests of multi-buffer allocation).
    pub fn with_max_size(max_size: usize) -> Arc<dyn BufferType> {
        Arc::new(HostBufferType {
            max_size: max_size.max(1),
        })
    }
}

impl BufferType for HostBufferType {
    fn name(&self) -> String {
        "CPU".into()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        if size > self.max_size {
            return Err(Error::OutOfMemory {
                buffer_type: self.name(),
                requested: size,
                msg: format!("larger than the max buffer size {}", self.max_size),
            });
        }
        Ok(Arc::new(HostBuffer::alloc(self, size)?))
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// Buffers of at least this many bytes are anonymous mappings: the kernel
/// zero-fills their pages on first touch, so memory is committed as it is
/// written rather than at allocation (as ggml's malloc'd buffers are), and
/// returned to the system when the buffer is dropped.
pub const LAZY_COMMIT_MIN: usize = 1 << 20;

/// Anonymous mappings of at least this many bytes ask for transparent huge
/// pages (one 2 MiB page).
const HUGE_PAGE_MIN: usize = 2 << 20;

enum Owner {
    /// Memory from the global allocator with this layout.
    Alloc(Layout),
    /// An anonymous mapping (zero-filled lazily by the kernel).
    Map(#[allow(dead_code)] memmap2::MmapMut),
    /// Caller-owned memory (an mmap, a Vec) kept alive by this value.
    External(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
    /// Nothing to free (zero-size buffer).
    Empty,
}

/// A buffer of host memory.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    size: usize,
    owner: Owner,
    read_only: bool,
    usage: AtomicU8,
    buft: Arc<dyn BufferType>,
}

// SAFETY: the buffer owns (or keeps alive through `owner`) the memory at `ptr`;
// all access goes through raw pointers with ranges validated by callers, and
// concurrent writers write disjoint ranges (one tensor row per thread), as in ggml.
unsafe impl Send for HostBuffer {}
// SAFETY: see Send; the struct's own fields are immutable or atomic.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    fn alloc(buft: Arc<HostBufferType>, size: usize) -> Result<HostBuffer> {
        let oom = |msg: String| Error::OutOfMemory {
            buffer_type: "CPU".into(),
            requested: size,
            msg,
        };
        if size == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                size: 0,
                owner: Owner::Empty,
                read_only: false,
                usage: AtomicU8::new(0),
                buft,
            });
        }
        if size >= LAZY_COMMIT_MIN {
            let mut map = memmap2::MmapMut::map_anon(size)
                .map_err(|e| oom(format!("cannot map {size} bytes of anonymous memory: {e}")))?;
            // Huge pages where the kernel offers them only on request
            // (transparent_hugepage=madvise): ask (a hint; refused is fine).
            #[cfg(target_os = "linux")]
            if size >= HUGE_PAGE_MIN {
                let _ = map.advise(memmap2::Advice::HugePage);
            }
            // Page-aligned, hence HOST_ALIGNMENT-aligned; the mapping does not
            // move when moved into `owner`.
            let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| oom("null mapping".into()))?;
            return Ok(HostBuffer {
                ptr,
                size,
                owner: Owner::Map(map),
                read_only: false,
                usage: AtomicU8::new(0),
                buft,
            });
        }
        let layout =
            Layout::from_size_align(size, HOST_ALIGNMENT).map_err(|e| oom(e.to_string()))?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| oom("the system allocator failed".into()))?;
        Ok(HostBuffer {
            ptr,
            size,
            owner: Owner::Alloc(layout),
            read_only: false,
            usage: AtomicU8::new(0),
            buft,
        })
    }

    /// Wraps caller-owned bytes (e.g. a read-only mmap of a model file) without
    /// copying. Writes to a read-only buffer are errors.
    ///
    /// # Safety
    /// `ptr..ptr+size` must be valid for reads (and writes unless `read_only`)
    /// for as long as `owner` lives, and not be accessed elsewhere mutably.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        size: usize,
        owner: Box<dyn Any + Send + Sync>,
        read_only: bool,
    ) -> HostBuffer {
        HostBuffer {
            ptr,
            size,
            owner: Owner::External(owner),
            read_only,
            usage: AtomicU8::new(0),
            buft: cpu_buffer_type(),
        }
    }

    /// Wraps a `Vec<u8>` (moved in, not copied) as a writable host buffer.
    pub fn from_vec(mut bytes: Vec<u8>) -> HostBuffer {
        let size = bytes.len();
        let ptr = NonNull::new(bytes.as_mut_ptr()).unwrap_or(NonNull::dangling());
        // SAFETY: the Vec's heap allocation does not move when the Vec is moved
        // into the box, and lives as long as the buffer.
        unsafe { HostBuffer::from_raw_parts(ptr, size, Box::new(bytes), false) }
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        let end = offset.saturating_add(len);
        if end > self.size {
            return Err(Error::OutOfBounds {
                what: "host buffer".into(),
                offset,
                end,
                size: self.size,
            });
        }
        Ok(())
    }

    fn check_writable(&self, tensor: &Tensor) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                buffer: self.name(),
                what: format!("writing tensor '{}'", tensor.name()),
            });
        }
        Ok(())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Owner::Alloc(layout) = self.owner {
            // SAFETY: ptr was returned by alloc_zeroed with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl Buffer for HostBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn size(&self) -> usize {
        self.size
    }
    fn base(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::from_u8(self.usage.load(Ordering::Relaxed))
    }
    fn set_usage(&self, usage: BufferUsage) {
        // A compute buffer is replaced by a larger one whenever a graph
        // outgrows it (a context's KV span grows as it decodes); huge pages
        // would make each new one zero whole 2 MiB pages it barely touches.
        #[cfg(target_os = "linux")]
        if let (BufferUsage::Compute, Owner::Map(map)) = (usage, &self.owner) {
            let _ = map.advise(memmap2::Advice::NoHugePage);
        }
        self.usage.store(usage.to_u8(), Ordering::Relaxed)
    }
    fn write(&self, tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        self.check_writable(tensor)?;
        self.check(offset, data.len())?;
        // SAFETY: range checked above. `data` is a shared borrow, so it cannot
        // be this buffer's memory (safe code only reaches that memory through
        // `host_ptr`, and `tensor_copy` copies within a buffer with
        // `copy_from`, never through a slice of it).
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) }
        Ok(())
    }
    /// Copies within this buffer only (`src` stored here too), in place with
    /// memmove semantics: the two ranges may overlap.
    fn copy_from(&self, src: &Tensor, dst: &Tensor) -> Result<bool> {
        let (Some(s), Some(d)) = (src.storage(), dst.storage()) else {
            return Ok(false);
        };
        let me = self as *const HostBuffer as *const ();
        let mine = |b: &Arc<dyn Buffer>| std::ptr::addr_eq(Arc::as_ptr(b), me);
        if !mine(&s.buffer) || !mine(&d.buffer) {
            return Ok(false);
        }
        let n = src.nbytes();
        if dst.nbytes() != n {
            return Ok(false);
        }
        self.check_writable(dst)?;
        self.check(s.offset, n)?;
        self.check(d.offset, n)?;
        // SAFETY: both ranges were checked to lie inside this buffer; no
        // reference to either is created, and `ptr::copy` is memmove, so
        // overlapping ranges are well defined.
        unsafe {
            std::ptr::copy(
                self.ptr.as_ptr().add(s.offset),
                self.ptr.as_ptr().add(d.offset),
                n,
            )
        }
        Ok(true)
    }
    fn read(&self, _tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        // SAFETY: range checked above.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) }
        Ok(())
    }
    fn fill(&self, tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check_writable(tensor)?;
        self.check(offset, len)?;
        // SAFETY: range checked above.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), value, len) }
        Ok(())
    }
    fn clear(&self, value: u8) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                buffer: self.name(),
                what: "clear".into(),
            });
        }
        // SAFETY: the whole buffer is ours.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), value, self.size) }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    /// Mapped buffers (huge pages asked for, then refused for compute
    /// buffers) start zeroed and keep what is written, whatever the kernel
    /// made of the advice.
    #[test]
    fn large_mapped_buffers_are_zeroed_and_writable_in_every_usage() {
        for usage in [BufferUsage::Any, BufferUsage::Weights, BufferUsage::Compute] {
            let buf = cpu_buffer_type()
                .alloc_buffer(HUGE_PAGE_MIN + 4096)
                .unwrap();
            buf.set_usage(usage);
            assert_eq!(buf.usage(), usage);
            let t = Tensor::new(DType::F32, &[1024]).unwrap();
            t.set_storage(buf.clone(), HUGE_PAGE_MIN).unwrap();
            assert!(t.to_f32_vec().unwrap().iter().all(|&x| x == 0.0));
            let v: Vec<f32> = (0..1024).map(|i| i as f32).collect();
            t.write_f32(&v).unwrap();
            assert_eq!(t.to_f32_vec().unwrap(), v);
        }
    }

    #[test]
    fn read_only_buffers_name_the_refused_write() {
        let keep = vec![0u8; 64];
        let ptr = NonNull::new(keep.as_ptr() as *mut u8).unwrap();
        // SAFETY: `keep` is moved into the buffer as its owner and never written.
        let buf: Arc<dyn Buffer> =
            Arc::new(unsafe { HostBuffer::from_raw_parts(ptr, 64, Box::new(keep), true) });
        let w = Tensor::new(DType::F32, &[4]).unwrap().with_name("w");
        w.set_storage(buf.clone(), 0).unwrap();
        let e = w.write_bytes(0, &[0u8; 16]).unwrap_err();
        assert!(
            matches!(&e, Error::ReadOnly { buffer, what }
                if *buffer == buf.name() && what == "writing tensor 'w'"),
            "{e}"
        );
        let e = buf.clear(0).unwrap_err();
        assert!(
            matches!(&e, Error::ReadOnly { buffer, what } if *buffer == buf.name() && what == "clear"),
            "{e}"
        );
    }
}

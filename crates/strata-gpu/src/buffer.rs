//! Device memory: the GPU's buffer type and buffers. Tensor reads, writes,
//! fills and copies go through the queue (staging buffers for reads).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use strata::backend::{Buffer, BufferType, BufferUsage};
use strata::{Error, Result, Tensor};

use crate::context::GpuContext;

/// Device memory of one GPU (`is_host` false; alignment and max size from the
/// adapter's limits).
pub struct GpuBufferType {
    pub(crate) ctx: Arc<GpuContext>,
}

impl GpuBufferType {
    /// The device this memory belongs to.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }
}

impl BufferType for GpuBufferType {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        let (base, buf) = self.ctx.create_buffer(size, "strata tensors")?;
        Ok(Arc::new(GpuBuffer {
            ctx: self.ctx.clone(),
            buft: self,
            base,
            buf,
            size,
            usage: AtomicU8::new(BufferUsage::Any.to_u8()),
        }))
    }

    fn alignment(&self) -> usize {
        // tensors start on storage-offset boundaries (and at least 16 bytes,
        // so vector loads of a tensor's first words are aligned)
        (self.ctx.limits.min_storage_buffer_offset_alignment as usize).max(16)
    }

    fn max_size(&self) -> usize {
        self.ctx.max_buffer_size()
    }

    fn is_host(&self) -> bool {
        false
    }
}

/// A buffer of device memory.
pub struct GpuBuffer {
    ctx: Arc<GpuContext>,
    buft: Arc<GpuBufferType>,
    base: u64,
    buf: wgpu::Buffer,
    size: usize,
    usage: AtomicU8,
}

impl GpuBuffer {
    fn check(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        let end = offset.saturating_add(len);
        if end > self.size {
            return Err(Error::OutOfBounds {
                what: format!("{what} of buffer '{}'", self.ctx.name),
                offset,
                end,
                size: self.size,
            });
        }
        Ok(())
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.ctx.release_buffer(self.base);
    }
}

impl Buffer for GpuBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn size(&self) -> usize {
        self.size
    }

    fn base(&self) -> u64 {
        self.base
    }

    fn usage(&self) -> BufferUsage {
        BufferUsage::from_u8(self.usage.load(Ordering::Relaxed))
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.usage.store(usage.to_u8(), Ordering::Relaxed);
    }

    fn write(&self, _tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        self.check("write", offset, data.len())?;
        self.ctx.forget_reads_of(self.base);
        self.ctx.write(&self.buf, offset as u64, data)
    }

    fn read(&self, _tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check("read", offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.ctx.read(self.base, &self.buf, offset as u64, out)
    }

    fn fill(&self, _tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check("fill", offset, len)?;
        self.ctx.forget_reads_of(self.base);
        fill(&self.ctx, &self.buf, offset, len, value)
    }

    fn copy_from(&self, src: &Tensor, dst: &Tensor) -> Result<bool> {
        let (Some(s), Some(d)) = (src.storage(), dst.storage()) else {
            return Ok(false);
        };
        let Some(sbuf) = self.ctx.buffer(s.buffer.base()) else {
            return Ok(false);
        };
        if !std::ptr::addr_eq(
            Arc::as_ptr(&s.buffer.buffer_type()),
            Arc::as_ptr(&self.buffer_type()),
        ) {
            return Ok(false);
        }
        let n = src.nbytes() as u64;
        let (so, doff) = (s.offset as u64, d.offset as u64);
        if so % 4 != 0 || doff % 4 != 0 || !n.is_multiple_of(4) {
            return Ok(false);
        }
        let mut enc = self.ctx.device.create_command_encoder(&Default::default());
        if sbuf == self.buf && so.max(doff) < so.min(doff) + n {
            // overlapping ranges of one buffer: through a scratch buffer
            let tmp = self.ctx.new_buffer(&wgpu::BufferDescriptor {
                label: Some("strata copy"),
                size: n,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            enc.copy_buffer_to_buffer(&sbuf, so, &tmp, 0, n);
            enc.copy_buffer_to_buffer(&tmp, 0, &self.buf, doff, n);
            self.ctx.submit([enc.finish()]);
            return Ok(true);
        }
        enc.copy_buffer_to_buffer(&sbuf, so, &self.buf, doff, n);
        self.ctx.submit([enc.finish()]);
        Ok(true)
    }

    fn clear(&self, value: u8) -> Result<()> {
        self.ctx.forget_reads_of(self.base);
        fill(&self.ctx, &self.buf, 0, self.size, value)
    }

    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn is_host(&self) -> bool {
        false
    }
}

/// Sets `len` bytes from `offset` to `value`: a clear command for aligned
/// zeroes, otherwise written from the host in bounded pieces.
fn fill(ctx: &GpuContext, buf: &wgpu::Buffer, offset: usize, len: usize, value: u8) -> Result<()> {
    ctx.check_alive()?;
    if len == 0 {
        return Ok(());
    }
    if value == 0 && offset.is_multiple_of(4) && len.is_multiple_of(4) {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        enc.clear_buffer(buf, offset as u64, Some(len as u64));
        ctx.submit([enc.finish()]);
        return Ok(());
    }
    const PIECE: usize = 1 << 22;
    let piece = vec![value; len.min(PIECE)];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(PIECE);
        ctx.write(buf, (offset + done) as u64, &piece[..n])?;
        done += n;
    }
    Ok(())
}

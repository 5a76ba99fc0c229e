//! `CPU_PACKED`: host buffers that store eligible quantized weights in the
//! repacked layout of [`crate::quant::packed`] (ggml's CPU "repack" extra
//! buffer type).
//!
//! A tensor placed in such a buffer through [`alloc_tensors`](crate::backend::alloc_tensors)
//! (or any allocator that calls [`Buffer::init_tensor`]) is stored packed
//! when it is [`packed::eligible`] and contiguous; every other tensor stays
//! plain. The packing is invisible through the buffer interface:
//! [`Buffer::write`] packs, [`Buffer::read`] unpacks, and a write or read of
//! part of a packed tensor touches only the 16-row groups it overlaps
//! (a partial group is unpacked, patched and repacked), so
//! [`Tensor::to_f32_vec`](crate::Tensor::to_f32_vec), tensor copies, the
//! RPC protocol and GGUF writing all see ggml's bytes. Kernels learn a
//! source is packed from [`Buffer::tensor_layout`]; the CPU backend runs
//! MUL_MAT (as `src0`) and GET_ROWS (as the table) on packed weights and
//! refuses every other op that reads one, and any view of part of one.
//!
//! ```
//! use strata::backend::{alloc_tensors, Buffer, TensorLayout};
//! use strata::cpu::packed_buffer_type;
//! use strata::{DType, Tensor};
//!
//! let w = Tensor::new(DType::Q8_0, &[64, 32]).unwrap();
//! let bufs = alloc_tensors(&[w.clone()], &packed_buffer_type()).unwrap();
//! assert_eq!(bufs[0].tensor_layout(&w), TensorLayout::Packed);
//! // Every block holds ±127, so Q8_0 stores these values exactly.
//! let v: Vec<f32> = (0..64 * 32).map(|i| ((i % 3) as f32 - 1.0) * 127.0).collect();
//! w.write_f32(&v).unwrap();
//! // the same weights in an ordinary buffer read back identically
//! let plain = Tensor::new(DType::Q8_0, &[64, 32]).unwrap();
//! let _b = alloc_tensors(&[plain.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
//! plain.write_f32(&v).unwrap();
//! assert_eq!(w.to_f32_vec().unwrap(), plain.to_f32_vec().unwrap());
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use super::buffer::{cpu_buffer_type, HOST_ALIGNMENT};
use crate::backend::{Buffer, BufferType, BufferUsage, TensorLayout};
use crate::quant::packed::{self, ROWS};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// The buffer type of [`packed_buffer_type`].
#[derive(Debug)]
pub struct PackedBufferType;

/// The process-wide `CPU_PACKED` buffer type (host memory; eligible
/// quantized tensors stored packed).
pub fn packed_buffer_type() -> Arc<dyn BufferType> {
    static BUFT: OnceLock<Arc<PackedBufferType>> = OnceLock::new();
    BUFT.get_or_init(|| Arc::new(PackedBufferType)).clone()
}

impl BufferType for PackedBufferType {
    fn name(&self) -> String {
        "CPU_PACKED".into()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(PackedBuffer::alloc(self, size, false)?)
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// `packed::pack` or `packed::unpack`: (type, shape, from, to).
type Convert = fn(DType, [usize; 4], &[u8], &mut [u8]) -> Result<()>;

/// A packed tensor's place in the buffer.
#[derive(Clone, Copy, Debug)]
struct Entry {
    dtype: DType,
    ne: [usize; 4],
    len: usize,
}

impl Entry {
    /// Bytes of one 16-row group.
    fn group(&self) -> usize {
        ROWS * self.dtype.row_size(self.ne[0])
    }
}

/// A `CPU_PACKED` buffer: host memory plus the offsets of its packed tensors.
///
/// Buffers of [`packed_buffer_type`] pack every eligible tensor placed in
/// them ([`Buffer::init_tensor`]). A *lazy* one ([`PackedBuffer::lazy`],
/// what the RPC server allocates) stores everything plain until its owner
/// packs a tensor in place ([`PackedBuffer::pack_tensor`]) and converts it
/// back ([`PackedBuffer::unpack_range`]) when it is used otherwise; reads
/// and writes see ggml's bytes either way.
pub struct PackedBuffer {
    inner: Arc<dyn Buffer>,
    /// Packed tensors by buffer offset (disjoint ranges).
    packed: RwLock<BTreeMap<usize, Entry>>,
    buft: Arc<PackedBufferType>,
    /// Packs only on request (see the type's docs).
    lazy: bool,
    /// Counts the tensors packed or unpacked in place (lazy buffers).
    changes: AtomicU64,
}

/// One piece of a byte range: plain bytes, or bytes `lo..hi` of one group.
enum Piece {
    Plain {
        at: usize,
        len: usize,
    },
    Group {
        entry: Entry,
        start: usize,
        lo: usize,
        hi: usize,
    },
}

impl PackedBuffer {
    fn alloc(buft: Arc<PackedBufferType>, size: usize, lazy: bool) -> Result<Arc<PackedBuffer>> {
        let inner = cpu_buffer_type().alloc_buffer(size).map_err(|e| match e {
            Error::OutOfMemory { requested, msg, .. } => Error::OutOfMemory {
                buffer_type: "CPU_PACKED".into(),
                requested,
                msg,
            },
            e => e,
        })?;
        Ok(Arc::new(PackedBuffer {
            inner,
            packed: RwLock::new(BTreeMap::new()),
            buft,
            lazy,
            changes: AtomicU64::new(0),
        }))
    }

    /// A lazy `CPU_PACKED` buffer of `size` bytes: every tensor stays plain
    /// until [`pack_tensor`](Self::pack_tensor) packs it in place.
    pub fn lazy(size: usize) -> Result<Arc<PackedBuffer>> {
        static BUFT: OnceLock<Arc<PackedBufferType>> = OnceLock::new();
        let buft = BUFT.get_or_init(|| Arc::new(PackedBufferType)).clone();
        PackedBuffer::alloc(buft, size, true)
    }

    /// Packs `tensor` (placed in this buffer) in place when it is a whole,
    /// contiguous, [`packed::eligible`] weight whose type has packed kernels
    /// at the active level; packed tensors it overlaps are unpacked first.
    /// Returns whether its layout changed. Its bytes read back unchanged.
    pub fn pack_tensor(&self, tensor: &Tensor) -> Result<bool> {
        let (dtype, ne) = (tensor.dtype(), tensor.ne());
        let Some(st) = tensor.storage() else {
            return Ok(false);
        };
        if tensor.is_view()
            || !tensor.is_contiguous()
            || !packed::eligible(dtype, ne)
            || !packed::has_kernels(crate::isa::active(), dtype)
        {
            return Ok(false);
        }
        let len = tensor.nbytes();
        self.check(st.offset, len)?;
        let entry = Entry { dtype, ne, len };
        {
            let map = self.packed.read().unwrap_or_else(|e| e.into_inner());
            if map
                .get(&st.offset)
                .is_some_and(|e| e.dtype == dtype && e.ne == ne && e.len == len)
            {
                return Ok(false);
            }
        }
        self.unpack_range(st.offset, len)?;
        let mut map = self.packed.write().unwrap_or_else(|e| e.into_inner());
        self.convert(st.offset, &entry, packed::pack)?;
        map.insert(st.offset, entry);
        self.changes.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// Unpacks in place every packed tensor overlapping `offset..offset +
    /// len` (their bytes read back unchanged); returns whether any was.
    pub fn unpack_range(&self, offset: usize, len: usize) -> Result<bool> {
        let end = offset.saturating_add(len.max(1));
        let mut map = self.packed.write().unwrap_or_else(|e| e.into_inner());
        let hit: Vec<(usize, Entry)> = map
            .range(..end)
            .filter(|(&k, e)| k + e.len > offset)
            .map(|(&k, &e)| (k, e))
            .collect();
        for (start, e) in &hit {
            self.convert(*start, e, packed::unpack)?;
            map.remove(start);
        }
        if !hit.is_empty() {
            self.changes.fetch_add(1, Ordering::AcqRel);
        }
        Ok(!hit.is_empty())
    }

    /// How many times tensors of this buffer were packed or unpacked in
    /// place: plans resolved before a change must be rebuilt.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Bytes of this buffer stored packed now.
    pub fn packed_bytes(&self) -> usize {
        let map = self.packed.read().unwrap_or_else(|e| e.into_inner());
        map.values().map(|e| e.len).sum()
    }

    /// Rewrites the groups of the tensor at `start` group by group with
    /// `f(dtype, shape, from, to)` (pack or unpack), through one group of scratch.
    fn convert(&self, start: usize, e: &Entry, f: Convert) -> Result<()> {
        let gs = e.group();
        let mut tmp = vec![0u8; gs];
        for g in (start..start + e.len).step_by(gs) {
            // SAFETY: g..g + gs is a whole group of a tensor inside the buffer
            // (bounds checked when it was placed or registered); the caller
            // holds the map's write lock, so no reader or writer of this
            // buffer's packed bytes runs meanwhile.
            let group = unsafe { std::slice::from_raw_parts_mut(self.base().add(g), gs) };
            tmp.copy_from_slice(group);
            f(e.dtype, [e.ne[0], ROWS, 1, 1], &tmp, group)?;
        }
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        let end = offset.saturating_add(len);
        if end > self.inner.size() {
            return Err(Error::OutOfBounds {
                what: "CPU_PACKED buffer".into(),
                offset,
                end,
                size: self.inner.size(),
            });
        }
        Ok(())
    }

    /// Splits `offset..offset + len` into plain bytes and packed-group pieces, in order.
    fn pieces(&self, offset: usize, len: usize) -> Vec<Piece> {
        if len == 0 {
            return Vec::new();
        }
        let end = offset + len;
        let map = self.packed.read().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        let mut pos = offset;
        // The entry that may start before `offset`, then those inside the range.
        let first = map.range(..=offset).next_back().map(|(&k, &e)| (k, e));
        let rest = map.range(offset + 1..end).map(|(&k, &e)| (k, e));
        for (start, e) in first.into_iter().chain(rest) {
            let e_end = start + e.len;
            if e_end <= pos || start >= end {
                continue;
            }
            if start > pos {
                out.push(Piece::Plain {
                    at: pos,
                    len: start - pos,
                });
                pos = start;
            }
            let stop = end.min(e_end);
            let gs = e.group();
            while pos < stop {
                let g0 = start + (pos - start) / gs * gs;
                let hi = stop.min(g0 + gs);
                out.push(Piece::Group {
                    entry: e,
                    start: g0,
                    lo: pos - g0,
                    hi: hi - g0,
                });
                pos = hi;
            }
        }
        if pos < end {
            out.push(Piece::Plain {
                at: pos,
                len: end - pos,
            });
        }
        out
    }

    fn base(&self) -> *mut u8 {
        self.inner
            .host_ptr()
            .expect("CPU buffers are host memory")
            .as_ptr()
    }

    /// Checks `offset..offset + len` and walks its pieces with the buffer's
    /// base pointer and `state`: `plain(at, len)` for plain bytes,
    /// `group(entry, start, lo, hi)` for the bytes `lo..hi` (ggml layout) of
    /// the packed group at `start` (`entry.group()` bytes).
    fn walk<S>(
        &self,
        offset: usize,
        len: usize,
        state: &mut S,
        mut plain: impl FnMut(&mut S, *mut u8, usize, usize),
        mut group: impl FnMut(&mut S, *mut u8, &Entry, usize, (usize, usize)) -> Result<()>,
    ) -> Result<()> {
        self.check(offset, len)?;
        let base = self.base();
        for piece in self.pieces(offset, len) {
            match piece {
                Piece::Plain { at, len } => plain(state, base, at, len),
                Piece::Group {
                    entry,
                    start,
                    lo,
                    hi,
                } => group(state, base, &entry, start, (lo, hi))?,
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`, packing the bytes that fall in packed tensors.
    fn write_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.walk(
            offset,
            data.len(),
            &mut Vec::new(),
            // SAFETY: at..at + len is inside the buffer (checked by walk) and
            // cannot overlap `data` (a shared borrow).
            |_, base, at, len| unsafe {
                std::ptr::copy(data[at - offset..].as_ptr(), base.add(at), len)
            },
            |tmp, base, entry, start, (lo, hi)| {
                let gs = entry.group();
                // SAFETY: the group start..start + gs lies inside a registered
                // packed tensor, inside the buffer; writers of one tensor's bytes
                // are serialized by the caller as for any buffer write.
                let group = unsafe { std::slice::from_raw_parts_mut(base.add(start), gs) };
                let shape = [entry.ne[0], ROWS, 1, 1];
                let src = &data[start + lo - offset..start + hi - offset];
                if hi - lo == gs {
                    packed::pack(entry.dtype, shape, src, group)
                } else {
                    tmp.resize(gs, 0);
                    packed::unpack(entry.dtype, shape, group, tmp)?;
                    tmp[lo..hi].copy_from_slice(src);
                    packed::pack(entry.dtype, shape, tmp, group)
                }
            },
        )
    }

    /// Reads `out.len()` bytes at `offset` in ggml's layout.
    fn read_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.walk(
            offset,
            out.len(),
            &mut (out, Vec::new()),
            // SAFETY: range checked by walk; `out` is a distinct exclusive borrow.
            |(out, _), base, at, len| unsafe {
                std::ptr::copy(base.add(at), out[at - offset..].as_mut_ptr(), len)
            },
            |(out, tmp), base, entry, start, (lo, hi)| {
                let gs = entry.group();
                // SAFETY: as in write_bytes; only read here.
                let group = unsafe { std::slice::from_raw_parts(base.add(start), gs) };
                let shape = [entry.ne[0], ROWS, 1, 1];
                let dst = &mut out[start + lo - offset..start + hi - offset];
                if hi - lo == gs {
                    packed::unpack(entry.dtype, shape, group, dst)
                } else {
                    tmp.resize(gs, 0);
                    packed::unpack(entry.dtype, shape, group, tmp)?;
                    dst.copy_from_slice(&tmp[lo..hi]);
                    Ok(())
                }
            },
        )
    }
}

impl Buffer for PackedBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn base(&self) -> u64 {
        self.inner.base()
    }
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        self.inner.host_ptr()
    }
    fn usage(&self) -> BufferUsage {
        self.inner.usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.inner.set_usage(usage)
    }
    fn tensor_layout(&self, tensor: &Tensor) -> TensorLayout {
        let Some(st) = tensor.storage() else {
            return TensorLayout::Plain;
        };
        let (start, end) = (st.offset, st.offset + tensor.nbytes());
        let map = self.packed.read().unwrap_or_else(|e| e.into_inner());
        let hit = map
            .range(..end)
            .next_back()
            .filter(|(&k, e)| k + e.len > start && end > k);
        match hit {
            None => TensorLayout::Plain,
            Some((&k, e))
                if k == start
                    && e.dtype == tensor.dtype()
                    && e.ne == tensor.ne()
                    && tensor.is_contiguous() =>
            {
                TensorLayout::Packed
            }
            Some(_) => TensorLayout::PackedPart,
        }
    }
    fn init_tensor(&self, tensor: &Tensor) -> Result<()> {
        if self.lazy {
            // Only the owner packs; bytes under a new tensor stay as written.
            return match tensor.storage() {
                Some(st) => self.unpack_range(st.offset, tensor.nbytes()).map(|_| ()),
                None => Ok(()),
            };
        }
        if tensor.is_view() {
            return Ok(());
        }
        let Some(st) = tensor.storage() else {
            return Ok(());
        };
        let len = tensor.nbytes();
        let mut map = self.packed.write().unwrap_or_else(|e| e.into_inner());
        // A tensor placed over earlier ones replaces them.
        let stale: Vec<usize> = map
            .range(..st.offset + len.max(1))
            .filter(|(&k, e)| k + e.len > st.offset)
            .map(|(&k, _)| k)
            .collect();
        for k in stale {
            map.remove(&k);
        }
        if tensor.is_contiguous() && packed::eligible(tensor.dtype(), tensor.ne()) {
            map.insert(
                st.offset,
                Entry {
                    dtype: tensor.dtype(),
                    ne: tensor.ne(),
                    len,
                },
            );
        }
        Ok(())
    }
    fn write(&self, _tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        self.write_bytes(offset, data)
    }
    fn read(&self, _tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.read_bytes(offset, out)
    }
    fn fill(&self, _tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check(offset, len)?;
        self.write_bytes(offset, &vec![value; len])
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.inner.clear(value)?;
        let entries: Vec<(usize, Entry)> = self
            .packed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&k, &e)| (k, e))
            .collect();
        // Packed tensors read back as `value` everywhere, as plain bytes do.
        for (start, e) in entries {
            let gs = e.group();
            let plain = vec![value; gs];
            let mut group = vec![0u8; gs];
            packed::pack(e.dtype, [e.ne[0], ROWS, 1, 1], &plain, &mut group)?;
            for g in (start..start + e.len).step_by(gs) {
                // SAFETY: g..g + gs is a group of a registered tensor inside the buffer.
                unsafe { std::ptr::copy_nonoverlapping(group.as_ptr(), self.base().add(g), gs) }
            }
        }
        Ok(())
    }
    fn reset(&self) {
        if self.lazy {
            // Keep the bytes as they read: unpack before forgetting.
            let _ = self.unpack_range(0, self.inner.size());
        }
        self.packed
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner.reset()
    }
}

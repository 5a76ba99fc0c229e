//! Resolved tensor memory for kernels: a raw pointer plus shape and strides,
//! validated once per graph so kernels index without re-checking buffers.

use half::{bf16, f16};

use crate::backend::TensorLayout;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// A tensor's memory as the kernels see it.
#[derive(Clone, Copy, Debug)]
pub struct TView {
    ptr: *mut u8,
    /// Element type.
    pub dtype: DType,
    /// Elements per dimension.
    pub ne: [usize; 4],
    /// Byte strides.
    pub nb: [usize; 4],
    /// True when the memory holds the whole tensor in the packed layout of
    /// [`crate::quant::packed`] (a weight in a `CPU_PACKED` buffer): only
    /// kernels that know the layout may address it; [`TView::load_row`]
    /// handles it, [`TView::row_bytes`] must not be used.
    pub packed: bool,
}

// SAFETY: a TView is only created by `TView::resolve`, which proves the whole
// strided span lies inside a live host buffer kept alive by the graph's tensors
// for the duration of the compute; threads write disjoint rows.
unsafe impl Send for TView {}
// SAFETY: see Send.
unsafe impl Sync for TView {}

impl TView {
    /// Resolves `t` to host memory, checking that its whole span is inside its buffer.
    pub fn resolve(t: &Tensor, backend: &str, writable: bool) -> Result<TView> {
        let st = t.storage_or_err()?;
        let base = st.buffer.host_ptr().ok_or_else(|| Error::Unsupported {
            backend: backend.into(),
            what: format!(
                "tensor '{}' in non-host buffer '{}'",
                t.name(),
                st.buffer.name()
            ),
        })?;
        if writable && st.buffer.is_read_only() {
            return Err(Error::ReadOnly {
                buffer: st.buffer.name(),
                what: format!("computing tensor '{}'", t.name()),
            });
        }
        let packed = match st.buffer.tensor_layout(t) {
            TensorLayout::Plain => false,
            TensorLayout::Packed if !writable => true,
            layout => {
                let what = if layout == TensorLayout::Packed {
                    "is a packed weight; it cannot be computed into"
                } else {
                    "is a view of part of a packed weight; only whole packed weights \
                     can be read (by MUL_MAT and GET_ROWS)"
                };
                return Err(Error::Unsupported {
                    backend: backend.into(),
                    what: format!(
                        "tensor '{}' in buffer '{}' {what}",
                        t.name(),
                        st.buffer.name()
                    ),
                });
            }
        };
        let end = st.offset.saturating_add(t.nbytes());
        if end > st.buffer.size() {
            return Err(Error::OutOfBounds {
                what: format!("tensor '{}' in buffer '{}'", t.name(), st.buffer.name()),
                offset: st.offset,
                end,
                size: st.buffer.size(),
            });
        }
        // SAFETY: offset..end is inside the buffer (checked above).
        let ptr = unsafe { base.as_ptr().add(st.offset) };
        Ok(TView {
            ptr,
            dtype: t.dtype(),
            ne: t.ne(),
            nb: t.nb(),
            packed,
        })
    }

    /// A view over memory owned by the caller (work buffers, tests).
    ///
    /// # Safety
    /// `ptr` must be valid for the span described by `ne`/`nb`/`dtype` while the view is used.
    pub unsafe fn from_raw(ptr: *mut u8, dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> TView {
        TView {
            ptr,
            dtype,
            ne,
            nb,
            packed: false,
        }
    }

    /// The addresses the view spans, `ggml_nbytes` from its first byte (empty
    /// when a dimension is 0): the CPU backend compares spans to find nodes
    /// that touch disjoint memory.
    pub(crate) fn span(&self) -> std::ops::Range<usize> {
        let start = self.ptr as usize;
        if self.ne.contains(&0) {
            return start..start;
        }
        let bs = self.dtype.block_size();
        let first = if bs == 1 {
            self.dtype.type_size() + (self.ne[0] - 1) * self.nb[0]
        } else {
            self.ne[0] / bs * self.nb[0]
        };
        let rest: usize = (1..4).map(|i| (self.ne[i] - 1) * self.nb[i]).sum();
        start..start + first + rest
    }

    /// Whether `other` is this view: the same memory, type, shape and strides.
    pub(crate) fn same_view(&self, other: &TView) -> bool {
        self.ptr == other.ptr
            && self.dtype == other.dtype
            && self.ne == other.ne
            && self.nb == other.nb
            && self.packed == other.packed
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// (i1, i2, i3) of row number `r`.
    pub fn row_coords(&self, r: usize) -> (usize, usize, usize) {
        let i1 = r % self.ne[1];
        let i2 = (r / self.ne[1]) % self.ne[2];
        let i3 = r / (self.ne[1] * self.ne[2]);
        (i1, i2, i3)
    }

    #[inline]
    fn check(&self, i0: usize, i1: usize, i2: usize, i3: usize) {
        assert!(
            i0 < self.ne[0].max(1) && i1 < self.ne[1] && i2 < self.ne[2] && i3 < self.ne[3],
            "kernel index ({i0},{i1},{i2},{i3}) outside {:?}",
            self.ne
        );
    }

    /// Pointer to the start of row (i1, i2, i3).
    #[inline]
    pub fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        self.check(0, i1, i2, i3);
        // SAFETY: indices checked against ne; resolve() proved the span in bounds.
        unsafe {
            self.ptr
                .add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
        }
    }

    /// Pointer to element (i0, i1, i2, i3) of a non-quantized tensor.
    #[inline]
    pub fn elem_ptr(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        self.check(i0, i1, i2, i3);
        // SAFETY: as row_ptr.
        unsafe {
            self.ptr
                .add(i0 * self.nb[0] + i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
        }
    }

    /// True when rows are contiguous.
    pub fn rows_contiguous(&self) -> bool {
        self.ne[0] <= 1 || self.nb[0] == self.dtype.type_size()
    }

    /// The bytes of row (i1, i2, i3), for row-contiguous tensors.
    ///
    /// # Safety
    /// No thread may write this row while the slice is alive.
    pub unsafe fn row_bytes<'a>(&self, i1: usize, i2: usize, i3: usize) -> &'a [u8] {
        debug_assert!(self.rows_contiguous());
        debug_assert!(!self.packed, "row_bytes of a packed tensor");
        std::slice::from_raw_parts(self.row_ptr(i1, i2, i3), self.dtype.row_size(self.ne[0]))
    }

    /// Reads element (i0..i3) as f32 (float and integer types).
    #[inline]
    pub fn get_f32(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
        let p = self.elem_ptr(i0, i1, i2, i3);
        // SAFETY: p points inside the validated span at an element of self.dtype.
        unsafe {
            match self.dtype {
                DType::F32 => p.cast::<f32>().read_unaligned(),
                DType::F16 => f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
                DType::BF16 => bf16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
                DType::I8 => p.cast::<i8>().read() as f32,
                DType::I16 => p.cast::<i16>().read_unaligned() as f32,
                DType::I32 => p.cast::<i32>().read_unaligned() as f32,
                DType::I64 => p.cast::<i64>().read_unaligned() as f32,
                t => panic!("get_f32 on block type {t}"),
            }
        }
    }

    /// Reads element (i0..i3) of an integer tensor as i64.
    #[inline]
    pub fn get_i64(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> i64 {
        let p = self.elem_ptr(i0, i1, i2, i3);
        // SAFETY: as get_f32.
        unsafe {
            match self.dtype {
                DType::I8 => p.cast::<i8>().read() as i64,
                DType::I16 => p.cast::<i16>().read_unaligned() as i64,
                DType::I32 => p.cast::<i32>().read_unaligned() as i64,
                DType::I64 => p.cast::<i64>().read_unaligned(),
                _ => self.get_f32(i0, i1, i2, i3) as i64,
            }
        }
    }

    /// Writes element (i0..i3) from f32 (float and integer types).
    #[inline]
    pub fn set_f32(&self, i0: usize, i1: usize, i2: usize, i3: usize, v: f32) {
        let p = self.elem_ptr(i0, i1, i2, i3);
        // SAFETY: p points inside the validated span; this thread owns the element.
        unsafe {
            match self.dtype {
                DType::F32 => p.cast::<f32>().write_unaligned(v),
                DType::F16 => p.cast::<u16>().write_unaligned(f16::from_f32(v).to_bits()),
                DType::BF16 => p.cast::<u16>().write_unaligned(bf16::from_f32(v).to_bits()),
                DType::I8 => p.cast::<i8>().write(v as i8),
                DType::I16 => p.cast::<i16>().write_unaligned(v as i16),
                DType::I32 => p.cast::<i32>().write_unaligned(v as i32),
                DType::I64 => p.cast::<i64>().write_unaligned(v as i64),
                t => panic!("set_f32 on block type {t}"),
            }
        }
    }

    /// Writes element (i0..i3) of an I32 tensor.
    #[inline]
    pub fn set_i32(&self, i0: usize, i1: usize, i2: usize, i3: usize, v: i32) {
        assert_eq!(self.dtype, DType::I32);
        let p = self.elem_ptr(i0, i1, i2, i3);
        // SAFETY: as set_f32.
        unsafe { p.cast::<i32>().write_unaligned(v) }
    }

    /// Loads row (i1, i2, i3) into `out` (ne0 values) as f32, converting from
    /// any type (block types are dequantized; strided rows are gathered).
    pub fn load_row(&self, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
        let n = self.ne[0];
        let out = &mut out[..n];
        if self.packed {
            let rows = crate::quant::packed::ROWS;
            let group_bytes = rows * self.dtype.row_size(n);
            let g = self.row_ptr(i1 / rows * rows, i2, i3);
            // SAFETY: packed tensors are whole, contiguous tensors with ne1 a
            // multiple of ROWS, so the group holding row i1 is in bounds; sources
            // are read-only during the op.
            let group = unsafe { std::slice::from_raw_parts(g, group_bytes) };
            crate::quant::packed::dequantize_group_row(self.dtype, n, group, i1 % rows, out);
            return;
        }
        if self.dtype.is_quantized() {
            // SAFETY: reading a row nobody writes during this op (sources are read-only).
            let bytes = unsafe { self.row_bytes(i1, i2, i3) };
            crate::quant::dequantize_row(self.dtype, bytes, out)
                .expect("row length validated by infer");
            return;
        }
        if self.dtype == DType::F32 && self.rows_contiguous() {
            let p = self.row_ptr(i1, i2, i3);
            // SAFETY: n f32 values of the row are in bounds; copy handles any alignment.
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr().cast::<u8>(), n * 4) };
            return;
        }
        if matches!(self.dtype, DType::F16 | DType::BF16) && self.rows_contiguous() && n > 0 {
            // SAFETY: reading a row nobody writes during this op (sources are read-only).
            let bytes = unsafe { self.row_bytes(i1, i2, i3) };
            // Widening is exact at every level, so the process-wide level is fine.
            let isa = crate::isa::active();
            let (widen, _) = super::vector::half_rows(self.dtype);
            widen(isa, bytes, out).expect(super::vector::SIZED);
            return;
        }
        for (i0, o) in out.iter_mut().enumerate() {
            *o = self.get_f32(i0, i1, i2, i3);
        }
    }

    /// Stores `src` (ne0 values) into row (i1, i2, i3), converting to the
    /// tensor's type (block types are quantized).
    pub fn store_row(&self, i1: usize, i2: usize, i3: usize, src: &[f32]) {
        let n = self.ne[0];
        let src = &src[..n];
        if self.dtype.is_quantized() {
            debug_assert!(self.rows_contiguous());
            let p = self.row_ptr(i1, i2, i3);
            // SAFETY: the row is in bounds and written by this thread only.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, self.dtype.row_size(n)) };
            // The unchecked quantizer: the checked one refuses NaN / inf for
            // the K-quant and IQ4 formats, and a kernel has no way to report
            // that; the unchecked ones store such blocks as NaN (ne0 is a
            // whole number of blocks, validated by infer).
            let quantize = crate::quant::quantize_row_fn(self.dtype).expect("block types quantize");
            quantize(src, bytes);
            return;
        }
        if self.dtype == DType::F32 && self.rows_contiguous() {
            let p = self.row_ptr(i1, i2, i3);
            // SAFETY: as load_row; this thread owns the row.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().cast::<u8>(), p, n * 4) };
            return;
        }
        if matches!(self.dtype, DType::F16 | DType::BF16) && self.rows_contiguous() && n > 0 {
            let p = self.row_ptr(i1, i2, i3);
            // SAFETY: the row's 2n bytes are in bounds and written by this thread only.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, 2 * n) };
            // Bit-identical to the scalar rounding at every level.
            let isa = crate::isa::active();
            let (_, round) = super::vector::half_rows(self.dtype);
            round(isa, src, bytes).expect(super::vector::SIZED);
            return;
        }
        for (i0, &v) in src.iter().enumerate() {
            self.set_f32(i0, i1, i2, i3, v);
        }
    }
}

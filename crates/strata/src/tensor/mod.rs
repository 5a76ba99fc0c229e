//! Tensors: element types, shapes and strides, views and storage.
//!
//! A [`Tensor`] is a cheap-to-clone handle (an `Arc`) around an immutable
//! descriptor (type, shape, strides, the op that computes it and its sources,
//! the tensor it is a view of) plus a storage slot that allocators fill.
//! Like ggml's `no_alloc` tensors, a new tensor has no storage; reading or
//! writing it is a typed error ([`Error::Unallocated`]) until a buffer holds it.

mod access;
mod dtype;
mod id;

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use dtype::DType;
pub(crate) use id::id_newtype;
pub use id::TensorId;

use crate::backend::Buffer;
use crate::error::{ShapeProblem, TensorProblem};
use crate::ops::Op;
use crate::{Error, Result};

/// Maximum number of dimensions (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Maximum number of sources of an op (ggml's `GGML_MAX_SRC`).
pub const MAX_SRC: usize = 10;

/// Tensor flag bits, with ggml's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u32);

impl Flags {
    /// Graph input: placed before everything else by the allocator.
    pub const INPUT: Flags = Flags(1);
    /// Graph output: never freed or reused by the allocator.
    pub const OUTPUT: Flags = Flags(2);
    /// Trainable parameter.
    pub const PARAM: Flags = Flags(4);
    /// True when every bit of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Where a tensor's bytes live: a buffer and a byte offset in it.
#[derive(Clone)]
pub struct Storage {
    /// The buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset of the tensor's first element inside the buffer.
    pub offset: usize,
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.buffer.name(), self.offset)
    }
}

/// The tensor another tensor is a view of (always the base, never a view).
#[derive(Clone, Debug)]
pub struct ViewOf {
    /// The base tensor whose storage the view shares.
    pub src: Tensor,
    /// Byte offset of the view inside the base tensor.
    pub offset: usize,
}

impl ViewOf {
    /// What a tensor aliasing all of `t` is a view of: `t`'s own base and
    /// offset when `t` is a view, else `t` itself at offset 0.
    pub fn alias_of(t: &Tensor) -> ViewOf {
        match t.view_of() {
            Some(v) => ViewOf {
                src: v.src.clone(),
                offset: v.offset,
            },
            None => ViewOf {
                src: t.clone(),
                offset: 0,
            },
        }
    }
}

pub(crate) struct Inner {
    id: u64,
    dtype: DType,
    ne: [usize; MAX_DIMS],
    nb: [usize; MAX_DIMS],
    op: Op,
    src: Vec<Option<Tensor>>,
    view: Option<ViewOf>,
    name: Mutex<String>,
    flags: AtomicU32,
    storage: Mutex<Option<Storage>>,
    /// Bumped whenever this tensor's own storage is set or cleared.
    storage_version: AtomicU64,
}

/// Bumped after every storage version of every tensor ([`Tensor::placements`]).
static PLACEMENTS: AtomicU64 = AtomicU64::new(0);

/// A tensor handle: cheap to clone, shared between graphs, allocators and backends.
///
/// ```
/// use strata::{DType, Tensor};
/// let t = Tensor::new(DType::F32, &[4, 3]).unwrap().with_name("x");
/// assert_eq!(t.ne(), [4, 3, 1, 1]);
/// assert_eq!(t.nb(), [4, 16, 48, 48]);
/// assert!(t.is_contiguous());
/// // no buffer yet: reading is a typed error, not an abort
/// assert!(t.to_f32_vec().is_err());
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<Inner>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Contiguous strides for `ne` in type `dtype`.
pub fn contiguous_strides(dtype: DType, ne: [usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0; MAX_DIMS];
    nb[0] = dtype.type_size();
    nb[1] = dtype.row_size(ne[0]);
    for i in 2..MAX_DIMS {
        // Saturates instead of overflowing: shapes built by strata are
        // bounded, and a saturated stride never matches a described one.
        nb[i] = nb[i - 1].saturating_mul(ne[i - 1]);
    }
    nb
}

/// Pads a 1..4-dim shape to 4 dims and checks it.
pub(crate) fn shape4(op: &'static str, dims: &[usize]) -> Result<[usize; MAX_DIMS]> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(Error::shape(
            op,
            ShapeProblem::OutOfRange {
                what: "number of dimensions",
                value: dims.len(),
                min: 1,
                max: MAX_DIMS,
            },
        ));
    }
    let mut ne = [1; MAX_DIMS];
    ne[..dims.len()].copy_from_slice(dims);
    let mut total: usize = 1;
    for &d in &ne {
        total = total
            .checked_mul(d)
            .filter(|&t| t <= isize::MAX as usize / 16)
            .ok_or_else(|| Error::shape(op, ShapeProblem::Overflow { ne, nb: None }))?;
    }
    Ok(ne)
}

impl Tensor {
    /// A new tensor of type `dtype` and shape `dims` (1 to 4 dims, ggml order:
    /// `dims[0]` is the contiguous row length). It has no storage yet.
    pub fn new(dtype: DType, dims: &[usize]) -> Result<Tensor> {
        let ne = shape4("new_tensor", dims)?;
        if ne[0] % dtype.block_size() != 0 {
            return Err(Error::dtype(
                "new_tensor",
                dtype,
                format!(
                    "row length {} is not a multiple of the block size {}",
                    ne[0],
                    dtype.block_size()
                ),
            ));
        }
        Ok(Tensor::from_parts(
            dtype,
            ne,
            contiguous_strides(dtype, ne),
            Op::None,
            vec![],
            None,
        ))
    }

    /// A new leaf tensor with explicit strides (a tensor described by someone
    /// else, e.g. a record received over RPC). It has no storage yet.
    ///
    /// Checked: `ne[0]` is a multiple of the block size, block types keep
    /// `nb[0]` = the block size (scalar types may have any element stride,
    /// as ggml's permuted tensors do), the element count is bounded and the
    /// byte span the strides describe does not overflow.
    ///
    /// ```
    /// use strata::{DType, Tensor};
    /// let t = Tensor::with_layout(DType::F32, [2, 3, 1, 1], [4, 16, 48, 48]).unwrap();
    /// assert_eq!(t.nbytes(), 4 + 4 + 2 * 16); // rows 16 bytes apart, 8 used
    /// let p = Tensor::with_layout(DType::F32, [3, 2, 1, 1], [8, 4, 24, 24]).unwrap(); // transposed
    /// assert_eq!(p.nbytes(), 4 + 2 * 8 + 4);
    /// assert!(Tensor::with_layout(DType::Q8_0, [32, 1, 1, 1], [2, 34, 34, 34]).is_err());
    /// assert!(Tensor::with_layout(DType::F32, [2, 1, 1, 1], [4, 1 << 62, 0, 0]).is_ok()); // ne1 = 1
    /// assert!(Tensor::with_layout(DType::F32, [2, 3, 1, 1], [4, usize::MAX / 2, 0, 0]).is_err());
    /// ```
    pub fn with_layout(
        dtype: DType,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
    ) -> Result<Tensor> {
        let op = "new_tensor";
        shape4(op, &ne)?;
        if !ne[0].is_multiple_of(dtype.block_size()) {
            return Err(Error::dtype(
                op,
                dtype,
                format!(
                    "row length {} is not a multiple of the block size {}",
                    ne[0],
                    dtype.block_size()
                ),
            ));
        }
        if dtype.is_quantized() && nb[0] != dtype.type_size() {
            return Err(Error::shape(
                op,
                ShapeProblem::BlockStride {
                    nb0: nb[0],
                    block_bytes: dtype.type_size(),
                },
            ));
        }
        if crate::ops::span(dtype, &ne, &nb).is_none_or(|s| s > isize::MAX as usize) {
            return Err(Error::shape(
                op,
                ShapeProblem::Overflow { ne, nb: Some(nb) },
            ));
        }
        Ok(Tensor::from_parts(dtype, ne, nb, Op::None, vec![], None))
    }

    /// Builds a tensor from already-validated parts (used by op constructors).
    pub(crate) fn from_parts(
        dtype: DType,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        op: Op,
        mut src: Vec<Option<Tensor>>,
        view: Option<ViewOf>,
    ) -> Tensor {
        while matches!(src.last(), Some(None)) {
            src.pop();
        }
        Tensor(Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            dtype,
            ne,
            nb,
            op,
            src,
            view,
            name: Mutex::new(String::new()),
            flags: AtomicU32::new(0),
            storage: Mutex::new(None),
            storage_version: AtomicU64::new(0),
        }))
    }

    /// A new leaf tensor with this one's type, shape and strides (ggml_dup_tensor_layout);
    /// no op, no storage.
    pub fn dup_layout(&self) -> Tensor {
        Tensor::from_parts(self.0.dtype, self.0.ne, self.0.nb, Op::None, vec![], None)
    }

    /// Sets the name and returns the tensor (builder style).
    pub fn with_name(self, name: impl Into<String>) -> Tensor {
        self.set_name(name);
        self
    }

    /// Sets the name (ggml truncates at 63 bytes; strata keeps it whole).
    pub fn set_name(&self, name: impl Into<String>) {
        *self.0.name.lock().unwrap_or_else(|e| e.into_inner()) = name.into();
    }

    /// The name; unnamed tensors are called `"<op>#<id>"`.
    pub fn name(&self) -> String {
        let n = self.0.name.lock().unwrap_or_else(|e| e.into_inner());
        if n.is_empty() {
            format!("{}#{}", self.0.op.name().to_ascii_lowercase(), self.0.id)
        } else {
            n.clone()
        }
    }

    /// A process-unique id (stable for the tensor's life).
    pub fn id(&self) -> TensorId {
        TensorId(self.0.id)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Number of elements per dimension.
    pub fn ne(&self) -> [usize; MAX_DIMS] {
        self.0.ne
    }

    /// Byte stride per dimension.
    pub fn nb(&self) -> [usize; MAX_DIMS] {
        self.0.nb
    }

    /// Number of dimensions ignoring trailing ones (at least 1).
    pub fn n_dims(&self) -> usize {
        (1..MAX_DIMS)
            .rev()
            .find(|&i| self.0.ne[i] > 1)
            .map_or(1, |i| i + 1)
    }

    /// Total number of elements.
    pub fn nelements(&self) -> usize {
        self.0.ne.iter().product()
    }

    /// Number of rows (elements / ne0).
    pub fn nrows(&self) -> usize {
        self.0.ne[1] * self.0.ne[2] * self.0.ne[3]
    }

    /// Bytes of one contiguous row.
    pub fn row_size(&self) -> usize {
        self.0.dtype.row_size(self.0.ne[0])
    }

    /// Bytes spanned by the tensor in memory (ggml's `ggml_nbytes`).
    pub fn nbytes(&self) -> usize {
        if self.0.ne.contains(&0) {
            return 0;
        }
        let bs = self.0.dtype.block_size();
        let mut bytes = if bs == 1 {
            self.0.dtype.type_size()
        } else {
            self.row_size()
        };
        let start = if bs == 1 { 0 } else { 1 };
        for i in start..MAX_DIMS {
            bytes += (self.0.ne[i] - 1) * self.0.nb[i];
        }
        bytes
    }

    /// The op that computes this tensor ([`Op::None`] for leafs).
    pub fn op(&self) -> &Op {
        &self.0.op
    }

    /// Sources, with `None` where ggml has a null source.
    pub fn src_slots(&self) -> &[Option<Tensor>] {
        &self.0.src
    }

    /// Source `i`, if present.
    pub fn src(&self, i: usize) -> Option<&Tensor> {
        self.0.src.get(i).and_then(|s| s.as_ref())
    }

    /// The present sources, in order.
    pub fn srcs(&self) -> impl Iterator<Item = &Tensor> {
        self.0.src.iter().flatten()
    }

    /// The base tensor this one is a view of, and the byte offset.
    pub fn view_of(&self) -> Option<&ViewOf> {
        self.0.view.as_ref()
    }

    /// True when this tensor is a view of another.
    pub fn is_view(&self) -> bool {
        self.0.view.is_some()
    }

    /// Flags.
    pub fn flags(&self) -> Flags {
        Flags(self.0.flags.load(Ordering::Relaxed))
    }

    /// Sets flag bits.
    pub fn set_flags(&self, f: Flags) {
        self.0.flags.fetch_or(f.0, Ordering::Relaxed);
    }

    /// Marks the tensor a graph input.
    pub fn set_input(&self) {
        self.set_flags(Flags::INPUT)
    }

    /// Marks the tensor a graph output.
    pub fn set_output(&self) {
        self.set_flags(Flags::OUTPUT)
    }

    /// Marks the tensor a trainable parameter.
    pub fn set_param(&self) {
        self.set_flags(Flags::PARAM)
    }

    /// True when the tensor is a graph input.
    pub fn is_input(&self) -> bool {
        self.flags().contains(Flags::INPUT)
    }

    /// True when the tensor is a graph output.
    pub fn is_output(&self) -> bool {
        self.flags().contains(Flags::OUTPUT)
    }

    /// True when the elements are laid out contiguously in row-major ggml order.
    pub fn is_contiguous(&self) -> bool {
        // Like ggml_is_contiguous: any stride is fine on dims of size 1.
        let mut next = self.0.dtype.type_size();
        for i in 0..MAX_DIMS {
            if self.0.ne[i] != 1 {
                if self.0.nb[i] != next {
                    return false;
                }
                next = if i == 0 {
                    self.row_size()
                } else {
                    next * self.0.ne[i]
                };
            } else if i == 0 {
                next = self.row_size();
            }
        }
        true
    }

    /// True when each row is contiguous (rows may be strided).
    pub fn is_contiguous_rows(&self) -> bool {
        self.0.ne[0] == 1 || self.0.nb[0] == self.0.dtype.type_size()
    }

    /// True when dims 1.. are permuted relative to the contiguous layout (nb not increasing).
    pub fn is_permuted(&self) -> bool {
        let nb = self.0.nb;
        nb[0] > nb[1] || nb[1] > nb[2] || nb[2] > nb[3]
    }

    /// True when dim 0 and 1 are swapped (ggml_is_transposed).
    pub fn is_transposed(&self) -> bool {
        self.0.nb[0] > self.0.nb[1]
    }

    /// True when both tensors have the same shape.
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.0.ne == other.0.ne
    }

    /// True when both tensors have the same type, shape and strides.
    pub fn same_layout(&self, other: &Tensor) -> bool {
        self.0.dtype == other.0.dtype && self.0.ne == other.0.ne && self.0.nb == other.0.nb
    }

    /// The tensor whose storage this one uses (itself, or its view's base).
    pub fn storage_owner(&self) -> &Tensor {
        match &self.0.view {
            Some(v) => &v.src,
            None => self,
        }
    }

    /// Where the bytes live: the tensor's own storage, or its view base's storage
    /// plus the view offset. `None` when nothing has allocated it.
    pub fn storage(&self) -> Option<Storage> {
        match &self.0.view {
            Some(v) => v.src.storage().map(|s| Storage {
                buffer: s.buffer,
                offset: s.offset + v.offset,
            }),
            None => self
                .0
                .storage
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// The storage, or [`Error::Unallocated`] naming the tensor.
    pub fn storage_or_err(&self) -> Result<Storage> {
        self.storage().ok_or_else(|| Error::Unallocated {
            tensor: self.name(),
        })
    }

    /// True when the tensor (or its view base) has storage.
    pub fn is_allocated(&self) -> bool {
        self.storage().is_some()
    }

    /// The buffer holding the tensor, if any.
    pub fn buffer(&self) -> Option<Arc<dyn Buffer>> {
        self.storage().map(|s| s.buffer)
    }

    /// Refuses to place a view (`op`: what tried to): a view follows its
    /// base.
    pub(crate) fn check_not_view(&self, op: &'static str) -> Result<()> {
        if self.is_view() {
            return Err(Error::BadTensor {
                op,
                tensor: self.name(),
                problem: TensorProblem::View {
                    base: self.storage_owner().name(),
                },
            });
        }
        Ok(())
    }

    /// Places the tensor in `buffer` at `offset` (allocators call this).
    ///
    /// Views cannot be placed (they follow their base); the range must fit the buffer.
    pub fn set_storage(&self, buffer: Arc<dyn Buffer>, offset: usize) -> Result<()> {
        self.check_not_view("set_storage")?;
        let end = offset.saturating_add(self.nbytes());
        if end > buffer.size() {
            return Err(Error::OutOfBounds {
                what: format!(
                    "placing tensor '{}' in buffer '{}'",
                    self.name(),
                    buffer.name()
                ),
                offset,
                end,
                size: buffer.size(),
            });
        }
        *self.0.storage.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Storage { buffer, offset });
        self.0.storage_version.fetch_add(1, Ordering::AcqRel);
        PLACEMENTS.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Removes the tensor's own storage (allocators call this before re-planning).
    pub fn clear_storage(&self) {
        *self.0.storage.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.0.storage_version.fetch_add(1, Ordering::AcqRel);
        PLACEMENTS.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times any tensor's storage has been placed or removed in
    /// this process (bumped after the tensor's own storage version): while
    /// it stays the same, no tensor's storage has moved.
    pub fn placements() -> u64 {
        PLACEMENTS.load(Ordering::Acquire)
    }

    /// How many times the memory this tensor reads and writes (its storage
    /// owner's: the view base for a view) has been placed or unplaced. With
    /// the tensor's id, equal values mean its storage has not moved since:
    /// a backend may keep memory it resolved for a graph while every tensor
    /// of that graph keeps its version (placing unrelated tensors, in this
    /// or another buffer, changes nothing).
    pub(crate) fn storage_version(&self) -> u64 {
        self.storage_owner()
            .0
            .storage_version
            .load(Ordering::Acquire)
    }

    /// True when both handles are the same tensor.
    pub fn ptr_eq(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Drop for Inner {
    /// Drops long source chains iteratively: a graph of 100k ops must not
    /// overflow the stack when its last handle goes away.
    fn drop(&mut self) {
        let mut stack: Vec<Tensor> = self.src.drain(..).flatten().collect();
        stack.extend(self.view.take().map(|v| v.src));
        while let Some(t) = stack.pop() {
            if let Ok(mut inner) = Arc::try_unwrap(t.0) {
                stack.extend(inner.src.drain(..).flatten());
                stack.extend(inner.view.take().map(|v| v.src));
            }
        }
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.ptr_eq(other)
    }
}
impl Eq for Tensor {}
impl std::hash::Hash for Tensor {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {:?} op={}",
            self.name(),
            self.0.dtype,
            self.0.ne,
            self.0.op.name()
        )
    }
}

//! GGUF v2/v3 files: a hardened zero-copy reader and a writer.
//!
//! [`GgufFile::open`] maps a file read-only and validates everything the
//! header, metadata and tensor infos say against the bytes present (counts,
//! lengths, dims, types, alignment, offsets, overlaps, duplicates, UTF-8):
//! a bad file gives [`crate::Error::Format`] naming the file
//! and the field, never a panic. Tensor data is then borrowed straight from
//! the mapping with [`GgufFile::tensor_data`].
//!
//! [`GgufWriter`] builds v3 files with any metadata and tensors.
//!
//! ```
//! use strata::gguf::{GgufFile, GgufWriter};
//! use strata::DType;
//!
//! let mut w = GgufWriter::new();
//! w.add_metadata("general.architecture", "llama")?;
//! w.add_metadata("llama.block_count", 2u32)?;
//! let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! w.add_tensor("norm.weight", DType::F32, &[4], data.as_slice())?;
//! let bytes = w.to_bytes()?;
//!
//! let f = GgufFile::from_bytes(bytes)?;
//! assert_eq!(f.metadata().get_u32("llama.block_count")?, 2);
//! let t = f.tensor("norm.weight").unwrap();
//! assert_eq!(t.shape(), [4, 1, 1, 1]);
//! assert_eq!(f.tensor_data(t), data.as_slice());
//! # Ok::<(), strata::Error>(())
//! ```

pub mod limits;
mod reader;
mod value;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

pub use value::{Array, Metadata, Value, ValueType};
pub use writer::{GgufStream, GgufWriter};

use crate::error::{Error, Result};
use crate::tensor::DType;

/// The bytes of a GGUF file: a read-only memory map or bytes in memory.
/// Dereferences to `[u8]`.
pub struct GgufBytes(BytesInner);

enum BytesInner {
    Mmap(memmap2::Mmap),
    Vec(Vec<u8>),
    Arc(Arc<[u8]>),
    Static(&'static [u8]),
}

impl GgufBytes {
    /// True if the bytes are a memory map of a file.
    pub fn is_mmap(&self) -> bool {
        matches!(self.0, BytesInner::Mmap(_))
    }

    /// Tells the OS that the bytes in `range` are not needed for now (e.g.
    /// tensor data copied elsewhere): for a memory map, the whole pages inside
    /// the range leave the process's resident set (they stay in the page
    /// cache, and are read back from the file if touched again); bytes in
    /// memory are left alone. Best effort: errors are ignored.
    pub fn release(&self, range: Range<usize>) {
        const PAGE: usize = 4096;
        #[cfg(unix)]
        if let BytesInner::Mmap(m) = &self.0 {
            let start = range.start.next_multiple_of(PAGE);
            let end = (range.end.min(m.len()) / PAGE) * PAGE;
            if start < end {
                // SAFETY: the map is read-only and the file is not modified
                // while mapped (as every reader of it assumes), so dropping the
                // pages changes no byte anyone can observe: they are faulted
                // back in from the file on the next access.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (range, PAGE);
    }
}

impl Deref for GgufBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            BytesInner::Mmap(m) => m,
            BytesInner::Vec(v) => v,
            BytesInner::Arc(a) => a,
            BytesInner::Static(s) => s,
        }
    }
}

impl AsRef<[u8]> for GgufBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for GgufBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.0 {
            BytesInner::Mmap(_) => "mmap",
            BytesInner::Vec(_) => "vec",
            BytesInner::Arc(_) => "arc",
            BytesInner::Static(_) => "static",
        };
        write!(f, "GgufBytes({kind}, {} bytes)", self.len())
    }
}

impl From<Vec<u8>> for GgufBytes {
    fn from(v: Vec<u8>) -> GgufBytes {
        GgufBytes(BytesInner::Vec(v))
    }
}

impl From<Arc<[u8]>> for GgufBytes {
    fn from(v: Arc<[u8]>) -> GgufBytes {
        GgufBytes(BytesInner::Arc(v))
    }
}

impl From<&'static [u8]> for GgufBytes {
    fn from(v: &'static [u8]) -> GgufBytes {
        GgufBytes(BytesInner::Static(v))
    }
}

impl From<memmap2::Mmap> for GgufBytes {
    fn from(m: memmap2::Mmap) -> GgufBytes {
        GgufBytes(BytesInner::Mmap(m))
    }
}

/// One tensor of a GGUF file, as its info section says (validated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    dtype: DType,
    n_dims: usize,
    shape: [usize; 4],
    offset: usize,
    size: usize,
}

impl TensorInfo {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of dimensions in the file (0..=4).
    pub fn n_dims(&self) -> usize {
        self.n_dims
    }

    /// Shape in ggml `ne` order (GGUF dims order: `ne[0]` is the row
    /// length), unused dimensions set to 1.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// The `n_dims` dimensions stored in the file.
    pub fn dims(&self) -> &[usize] {
        &self.shape[..self.n_dims]
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Offset of the data, relative to the data section, in bytes.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Size of the data in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Byte range of the data within the data section.
    pub fn data_range(&self) -> Range<usize> {
        self.offset..self.offset + self.size
    }
}

/// A validated GGUF v2/v3 file whose tensor data is borrowed zero-copy from
/// the file bytes (normally a read-only memory map).
#[derive(Debug)]
pub struct GgufFile {
    source: String,
    bytes: Arc<GgufBytes>,
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps the file at `path` read-only and parses it.
    ///
    /// The mapping assumes the file is not modified while it is open (as
    /// every mmap-based model loader does, llama.cpp included).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let source = path.display().to_string();
        let file =
            std::fs::File::open(path).map_err(|e| Error::io(format!("opening {source}"), e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("reading metadata of {source}"), e))?;
        if !meta.is_file() {
            // Mapping a directory fails with "No such device (os error 19)".
            return Err(Error::BadValue {
                arg: "GgufFile::open: path".into(),
                value: format!(
                    "{source} (it is {})",
                    if meta.is_dir() {
                        "a directory"
                    } else {
                        "not a regular file"
                    }
                ),
                expected: "the path of a .gguf file".into(),
            });
        }
        let len = meta.len();
        let bytes = if len == 0 {
            // Mapping an empty file fails on some systems; parse an empty
            // buffer instead so the error says what is wrong.
            GgufBytes::from(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this process. The
            // only hazard is another process truncating or rewriting the
            // file while it is mapped, which the caller rules out (see the
            // doc above); memmap2 documents the same contract.
            let map = unsafe { memmap2::Mmap::map(&file) }
                .map_err(|e| Error::io(format!("mapping {source}"), e))?;
            GgufBytes::from(map)
        };
        GgufFile::from_bytes_named(source, bytes)
    }

    /// Parses a GGUF file held in memory (named `"<memory>"` in errors).
    pub fn from_bytes(bytes: impl Into<GgufBytes>) -> Result<GgufFile> {
        GgufFile::from_bytes_named("<memory>", bytes)
    }

    /// Parses a GGUF file held in memory; `source` names it in errors.
    pub fn from_bytes_named(
        source: impl Into<String>,
        bytes: impl Into<GgufBytes>,
    ) -> Result<GgufFile> {
        let source = source.into();
        let bytes = Arc::new(bytes.into());
        let p = reader::parse(&bytes, &source)?;
        Ok(GgufFile {
            source,
            bytes,
            version: p.version,
            alignment: p.alignment,
            data_offset: p.data_offset,
            metadata: p.metadata,
            tensors: p.tensors,
            by_name: p.by_name,
        })
    }

    /// The file's name as used in errors (the path, or `"<memory>"`).
    pub fn source_name(&self) -> &str {
        &self.source
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of the data section and of tensor offsets
    /// (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of the tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor, borrowed from the file.
    ///
    /// # Panics
    ///
    /// If `info` comes from another file and lies outside this one.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        &self.data_section()[info.data_range()]
    }

    /// Offset of the data section from the start of the file: aligned to
    /// [`alignment`](Self::alignment), except in a file without tensors that
    /// ends before the padding, where it is the file length.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// The data section: every tensor's bytes, at [`TensorInfo::offset`].
    pub fn data_section(&self) -> &[u8] {
        &self.bytes[self.data_offset..]
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The owner of the file bytes, to share the mapping (e.g. to wrap the
    /// data section in a host buffer that outlives this `GgufFile`).
    pub fn bytes(&self) -> &Arc<GgufBytes> {
        &self.bytes
    }
}

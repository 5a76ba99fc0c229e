//! Builds GGUF v3 files.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use super::limits::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, WRITE_VERSION,
};
use super::value::{Array, Metadata, Value};
use crate::error::{Error, Result};
use crate::tensor::DType;

struct PendingTensor<'a> {
    name: String,
    dtype: DType,
    dims: Vec<usize>,
    size: usize,
    /// `None` for a tensor declared with [`GgufWriter::add_tensor_info`],
    /// whose bytes come through a [`GgufStream`].
    data: Option<Cow<'a, [u8]>>,
}

/// Builds a GGUF v3 file: metadata of any value type and tensors, each
/// tensor's data aligned to the alignment (`general.alignment`, default 32).
/// Tensor bytes are borrowed until written.
///
/// A file too large to hold in memory is streamed: declare its tensors with
/// [`add_tensor_info`](Self::add_tensor_info), write the header with
/// [`stream_to`](Self::stream_to), then hand each tensor's bytes, in order
/// and in pieces of any size, to the returned [`GgufStream`].
///
/// ```
/// use strata::gguf::{GgufFile, GgufWriter};
/// use strata::DType;
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_tensor_info("a", DType::F32, &[4])?;
/// w.add_tensor_info("b", DType::F32, &[2])?;
/// let mut s = w.stream_to(Vec::new())?;
/// assert_eq!(s.current_tensor(), Some("a"));
/// s.write_data(&[0u8; 8])?; // half of "a"
/// s.write_data(&[0u8; 8])?;
/// s.write_data(&1f32.to_le_bytes())?;
/// s.write_data(&2f32.to_le_bytes())?;
/// let f = GgufFile::from_bytes(s.finish()?)?;
/// assert_eq!(f.tensor_data(f.tensor("b").unwrap()), [1f32.to_le_bytes(), 2f32.to_le_bytes()].concat());
/// # Ok::<(), strata::Error>(())
/// ```
pub struct GgufWriter<'a> {
    alignment: usize,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
    names: HashSet<String>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        GgufWriter::new()
    }
}

/// A value the writer refuses: it would make a malformed file. `field`
/// names the key or tensor as the reader's errors do.
fn invalid(field: impl Into<String>, msg: impl Into<String>) -> Error {
    Error::Format {
        source_name: "GGUF writer".into(),
        field: field.into(),
        msg: msg.into(),
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty writer with the default alignment (32).
    pub fn new() -> GgufWriter<'a> {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Metadata::new("<gguf writer>"),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// Sets the alignment (a power of two that fits `u32`) and records it as
    /// `general.alignment`.
    pub fn set_alignment(&mut self, alignment: usize) -> Result<()> {
        let a = u32::try_from(alignment)
            .ok()
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| {
                invalid(
                    "alignment",
                    format!("{alignment} is not a u32 power of two"),
                )
            })?;
        self.alignment = alignment;
        self.metadata
            .insert(ALIGNMENT_KEY.to_owned(), Value::U32(a), true)
    }

    /// The alignment in use.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Adds a key/value pair. Keys must be unique, arrays nested at most
    /// [`MAX_ARRAY_DEPTH`] deep; `general.alignment` must be a `u32` power
    /// of two and sets the alignment.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let key = key.into();
        let value = value.into();
        if self.metadata.contains_key(&key) {
            return Err(invalid(format!("metadata key '{key}'"), "added twice"));
        }
        if let Value::Array(a) = &value {
            if array_depth(a) > MAX_ARRAY_DEPTH {
                return Err(invalid(
                    format!("metadata key '{key}'"),
                    format!(
                        "arrays nested deeper than {MAX_ARRAY_DEPTH} levels cannot be read back"
                    ),
                ));
            }
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a as usize,
                _ => {
                    return Err(invalid(
                        format!("metadata key '{ALIGNMENT_KEY}'"),
                        format!("must be a u32 power of two, got {}", value.summary()),
                    ))
                }
            }
        }
        self.metadata.insert(key, value, false)
    }

    /// The metadata added so far.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Adds a tensor of type `dtype` and shape `dims` (ggml `ne` order, 1 to
    /// 4 non-zero dimensions, `dims[0]` a multiple of the block size) whose
    /// bytes are `data` (exactly the tensor's size).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        dims: &[usize],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let name = name.into();
        let data = data.into();
        let size = self.check_tensor(&name, dtype, dims)?;
        if data.len() != size {
            return Err(invalid(
                format!("tensor '{name}'"),
                format!(
                    "{} bytes given, a {dtype} tensor of shape {dims:?} takes {size}",
                    data.len()
                ),
            ));
        }
        self.push_tensor(name, dtype, dims, size, Some(data));
        Ok(())
    }

    /// Declares a tensor (same rules as [`add_tensor`](Self::add_tensor))
    /// whose bytes are written later through the [`GgufStream`] that
    /// [`stream_to`](Self::stream_to) returns. A writer holding such a
    /// tensor can only be streamed: [`write_to`](Self::write_to) and the
    /// other whole-file methods refuse it.
    pub fn add_tensor_info(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        dims: &[usize],
    ) -> Result<()> {
        let name = name.into();
        let size = self.check_tensor(&name, dtype, dims)?;
        self.push_tensor(name, dtype, dims, size, None);
        Ok(())
    }

    fn push_tensor(
        &mut self,
        name: String,
        dtype: DType,
        dims: &[usize],
        size: usize,
        data: Option<Cow<'a, [u8]>>,
    ) {
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dtype,
            dims: dims.to_vec(),
            size,
            data,
        });
    }

    /// Checks a new tensor's name, shape and type; returns its byte size.
    fn check_tensor(&self, name: &str, dtype: DType, dims: &[usize]) -> Result<usize> {
        if name.is_empty() {
            return Err(invalid("tensor name", "empty: give every tensor a name"));
        }
        if self.names.contains(name) {
            return Err(invalid(format!("tensor '{name}'"), "added twice"));
        }
        if dims.is_empty() || dims.len() > MAX_DIMS || dims.contains(&0) {
            return Err(invalid(
                format!("tensor '{name}'"),
                format!("shape {dims:?} must have 1 to {MAX_DIMS} non-zero dimensions"),
            ));
        }
        if !dims[0].is_multiple_of(dtype.block_size()) {
            return Err(invalid(
                format!("tensor '{name}'"),
                format!(
                    "ne[0] = {} is not a multiple of the {dtype} block size {}",
                    dims[0],
                    dtype.block_size()
                ),
            ));
        }
        let size = dims[1..]
            .iter()
            .try_fold(dims[0] / dtype.block_size(), |acc, &d| acc.checked_mul(d))
            .and_then(|blocks| blocks.checked_mul(dtype.type_size()))
            .ok_or_else(|| {
                invalid(
                    format!("tensor '{name}'"),
                    format!("size of {dims:?} overflows"),
                )
            })?;
        Ok(size)
    }

    /// Refuses a writer with tensors declared without bytes.
    fn check_complete(&self) -> Result<()> {
        match self.tensors.iter().find(|t| t.data.is_none()) {
            Some(t) => Err(invalid(
                format!("tensor '{}'", t.name),
                "declared without its bytes (add_tensor_info): stream the file with stream_to",
            )),
            None => Ok(()),
        }
    }

    /// Writes the file to `w`.
    pub fn write_to<W: Write>(&self, mut w: W) -> Result<()> {
        self.check_complete()?;
        self.write_inner(&mut w)
            .map_err(|e| Error::io("writing GGUF", e))
    }

    /// Writes the header (metadata, tensor infos, padding) to `w` and
    /// returns the stream that writes the tensors' bytes after it, in the
    /// order the tensors were added. Tensors added with their bytes
    /// ([`add_tensor`](Self::add_tensor)) are written as soon as the stream
    /// reaches them; the others take theirs from [`GgufStream::write_data`].
    /// Nothing is buffered beyond what `w` buffers.
    pub fn stream_to<W: Write>(self, mut w: W) -> Result<GgufStream<'a, W>> {
        let pos = self
            .write_header(&mut w)
            .map_err(|e| Error::io("writing GGUF", e))?;
        let mut s = GgufStream {
            w,
            alignment: self.alignment,
            tensors: self.tensors,
            current: 0,
            written: 0,
            pos,
        };
        s.write_ready()?;
        Ok(s)
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<()> {
        self.check_complete()?;
        let path = path.as_ref();
        let ctx = || format!("writing {}", path.display());
        let file = std::fs::File::create(path).map_err(|e| Error::io(ctx(), e))?;
        let mut w = std::io::BufWriter::new(file);
        self.write_inner(&mut w).map_err(|e| Error::io(ctx(), e))?;
        w.into_inner()
            .map_err(|e| Error::io(ctx(), e.into_error()))?
            .sync_all()
            .map_err(|e| Error::io(ctx(), e))
    }

    /// The file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    fn write_inner(&self, w: &mut dyn Write) -> std::io::Result<()> {
        self.write_header(w)?;
        let zeros = vec![0u8; self.alignment];
        for t in &self.tensors {
            let data = t.data.as_deref().unwrap_or_default();
            w.write_all(data)?;
            let pad = align_up(data.len(), self.alignment) - data.len();
            w.write_all(&zeros[..pad])?;
        }
        w.flush()
    }

    /// Writes everything before the data section (padding included);
    /// returns the bytes written.
    fn write_header(&self, w: &mut dyn Write) -> std::io::Result<usize> {
        let mut pos = 0usize;
        let mut infos_end;
        let mut put = |w: &mut dyn Write, b: &[u8]| -> std::io::Result<usize> {
            pos += b.len();
            w.write_all(b)?;
            Ok(pos)
        };
        put(w, &MAGIC)?;
        // `put` returns the bytes written so far.
        put(w, &WRITE_VERSION.to_le_bytes())?;
        put(w, &(self.tensors.len() as u64).to_le_bytes())?;
        infos_end = put(w, &(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in self.metadata.iter() {
            let mut buf = Vec::new();
            put_str(&mut buf, key);
            buf.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut buf, value);
            infos_end = put(w, &buf)?;
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            let mut buf = Vec::new();
            put_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                buf.extend_from_slice(&(d as u64).to_le_bytes());
            }
            buf.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            buf.extend_from_slice(&(offset as u64).to_le_bytes());
            infos_end = put(w, &buf)?;
            offset = align_up(offset + t.size, self.alignment);
        }
        let zeros = vec![0u8; self.alignment];
        let pad = align_up(infos_end, self.alignment) - infos_end;
        put(w, &zeros[..pad])
    }
}

/// The data section of a GGUF file being streamed (from
/// [`GgufWriter::stream_to`]): takes each tensor's bytes in order, pads
/// each tensor to the alignment when its last byte arrives.
pub struct GgufStream<'a, W: Write> {
    w: W,
    alignment: usize,
    tensors: Vec<PendingTensor<'a>>,
    /// Index of the tensor being written.
    current: usize,
    /// Bytes of the current tensor written so far.
    written: usize,
    /// Bytes of the file written so far.
    pos: usize,
}

impl<'a, W: Write> GgufStream<'a, W> {
    /// The name of the tensor whose bytes [`write_data`](Self::write_data)
    /// takes next, or `None` once every tensor is written.
    pub fn current_tensor(&self) -> Option<&str> {
        self.tensors.get(self.current).map(|t| t.name.as_str())
    }

    /// Bytes of the current tensor still to be written (0 when all are).
    pub fn remaining(&self) -> usize {
        self.tensors
            .get(self.current)
            .map_or(0, |t| t.size - self.written)
    }

    /// Bytes of the file written so far (header included).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Appends `bytes` to the current tensor's data; when that completes the
    /// tensor, writes its padding and moves to the next one. A piece may not
    /// run past the end of the current tensor.
    pub fn write_data(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(t) = self.tensors.get(self.current) else {
            return Err(invalid(
                "tensor data",
                format!(
                    "{} bytes given after the last tensor was written",
                    bytes.len()
                ),
            ));
        };
        if bytes.len() > t.size - self.written {
            return Err(invalid(
                format!("tensor '{}'", t.name),
                format!(
                    "{} bytes given, {} of its {} bytes are left",
                    bytes.len(),
                    t.size - self.written,
                    t.size
                ),
            ));
        }
        self.w
            .write_all(bytes)
            .map_err(|e| Error::io("writing GGUF", e))?;
        self.written += bytes.len();
        self.pos += bytes.len();
        self.write_ready()
    }

    /// Pads a completed tensor, then writes every following tensor whose
    /// bytes the writer already holds.
    fn write_ready(&mut self) -> Result<()> {
        let zeros = [0u8; 64];
        while let Some(t) = self.tensors.get(self.current) {
            if self.written < t.size {
                match &t.data {
                    None => return Ok(()),
                    Some(d) => {
                        self.w
                            .write_all(d)
                            .map_err(|e| Error::io("writing GGUF", e))?;
                        self.pos += d.len();
                    }
                }
            }
            let mut pad = align_up(t.size, self.alignment) - t.size;
            while pad > 0 {
                let n = pad.min(zeros.len());
                self.w
                    .write_all(&zeros[..n])
                    .map_err(|e| Error::io("writing GGUF", e))?;
                pad -= n;
                self.pos += n;
            }
            self.current += 1;
            self.written = 0;
        }
        Ok(())
    }

    /// Checks that every tensor was written, flushes and returns the
    /// underlying writer.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.current) {
            return Err(invalid(
                format!("tensor '{}'", t.name),
                format!(
                    "{} of its {} bytes written when the stream was finished",
                    self.written, t.size
                ),
            ));
        }
        self.w.flush().map_err(|e| Error::io("writing GGUF", e))?;
        Ok(self.w)
    }
}

/// Nesting depth of an array: 1 for an array of scalars or strings.
fn array_depth(a: &Array) -> usize {
    match a {
        Array::Array(v) => 1 + v.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn align_up(x: usize, alignment: usize) -> usize {
    x.div_ceil(alignment) * alignment
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::Array(a) => put_array(buf, a),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &Array) {
    buf.extend_from_slice(&a.elem_type().id().to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => buf.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => buf.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(buf, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(buf, a)),
    }
}

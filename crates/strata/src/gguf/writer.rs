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
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF v3 file: metadata of any value type and tensors, each
/// tensor's data aligned to the alignment (`general.alignment`, default 32).
/// Tensor bytes are borrowed until written.
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

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
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
            .ok_or_else(|| invalid(format!("alignment {alignment} is not a u32 power of two")))?;
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
            return Err(invalid(format!("metadata key '{key}' added twice")));
        }
        if let Value::Array(a) = &value {
            if array_depth(a) > MAX_ARRAY_DEPTH {
                return Err(invalid(format!(
                    "metadata key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH} levels \
                     cannot be read back"
                )));
            }
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a as usize,
                _ => {
                    return Err(invalid(format!(
                        "{ALIGNMENT_KEY} must be a u32 power of two, got {}",
                        value.summary()
                    )))
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
        if name.is_empty() {
            return Err(invalid("tensor name is empty".into()));
        }
        if self.names.contains(&name) {
            return Err(invalid(format!("tensor '{name}' added twice")));
        }
        if dims.is_empty() || dims.len() > MAX_DIMS || dims.contains(&0) {
            return Err(invalid(format!(
                "tensor '{name}': shape {dims:?} must have 1 to {MAX_DIMS} non-zero dimensions"
            )));
        }
        if !dims[0].is_multiple_of(dtype.block_size()) {
            return Err(invalid(format!(
                "tensor '{name}': ne[0] = {} is not a multiple of the {dtype} block size {}",
                dims[0],
                dtype.block_size()
            )));
        }
        let size = dims[1..]
            .iter()
            .try_fold(dims[0] / dtype.block_size(), |acc, &d| acc.checked_mul(d))
            .and_then(|blocks| blocks.checked_mul(dtype.type_size()))
            .ok_or_else(|| invalid(format!("tensor '{name}': size of {dims:?} overflows")))?;
        if data.len() != size {
            return Err(invalid(format!(
                "tensor '{name}': {} bytes given, a {dtype} tensor of shape {dims:?} takes {size}",
                data.len()
            )));
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dtype,
            dims: dims.to_vec(),
            data,
        });
        Ok(())
    }

    /// Writes the file to `w`.
    pub fn write_to<W: Write>(&self, mut w: W) -> Result<()> {
        self.write_inner(&mut w)
            .map_err(|e| Error::io("writing GGUF", e))
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<()> {
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
            offset = align_up(offset + t.data.len(), self.alignment);
        }
        let zeros = vec![0u8; self.alignment];
        let pad = align_up(infos_end, self.alignment) - infos_end;
        put(w, &zeros[..pad])?;
        for t in &self.tensors {
            put(w, &t.data)?;
            let pad = align_up(t.data.len(), self.alignment) - t.data.len();
            put(w, &zeros[..pad])?;
        }
        w.flush()
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

//! The GGUF parser: header, metadata, tensor infos, all checked against the
//! bytes actually present before anything sized by the file is allocated.

use std::collections::HashMap;

use super::limits::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MIN_KV_SIZE,
    MIN_TENSOR_INFO_SIZE, SUPPORTED_VERSIONS,
};
use super::value::{Array, Metadata, Value, ValueType};
use super::TensorInfo;
use crate::error::{Error, Result};
use crate::tensor::DType;

/// Everything the header and info sections say, validated.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: usize,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub by_name: HashMap<String, usize>,
    pub data_offset: usize,
}

pub(crate) fn format_err(src: &str, field: impl Into<String>, msg: impl Into<String>) -> Error {
    Error::Format {
        source_name: src.to_owned(),
        field: field.into(),
        msg: msg.into(),
    }
}

/// A bounds-checked little-endian reader over the file bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    src: &'a str,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn err(&self, field: &str, msg: impl Into<String>) -> Error {
        format_err(self.src, field, msg)
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(
                field,
                format!(
                    "truncated: needs {n} bytes at offset {}, the file has {} left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A count of items of at least `min_size` bytes each, checked against
    /// the bytes left so that allocating `count` items is bounded by the file.
    fn count(&mut self, field: &str, what: &str, min_size: usize) -> Result<usize> {
        let n = self.u64(field)?;
        let need = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_size));
        match need {
            Some(need) if need <= self.remaining() => Ok(n as usize),
            _ => Err(self.err(
                field,
                format!(
                    "{what} {n} cannot fit: needs at least {n} x {min_size} bytes, the file has {} \
                     left",
                    self.remaining()
                ),
            )),
        }
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let n = self.count(field, "string length", 1)?;
        let bytes = self.take(n, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.err(
                field,
                format!("invalid UTF-8 in string at byte {} of {n}", e.valid_up_to()),
            )),
        }
    }

    fn value_type(&mut self, field: &str) -> Result<ValueType> {
        let id = self.u32(field)?;
        ValueType::from_id(id)
            .ok_or_else(|| self.err(field, format!("unknown value type id {id} (known: 0..=12)")))
    }

    fn value(&mut self, ty: ValueType, field: &str) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(field)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(field)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(field)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(field)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(field)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(field)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(field)?)),
            ValueType::Bool => Value::Bool(self.bool(field)?),
            ValueType::String => Value::String(self.string(field)?),
            ValueType::Array => Value::Array(self.array_value(field, 1)?),
        })
    }

    fn bool(&mut self, field: &str) -> Result<bool> {
        match self.array::<1>(field)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(field, format!("bool byte is {b}, expected 0 or 1"))),
        }
    }

    fn array_value(&mut self, field: &str, depth: usize) -> Result<Array> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(self.err(
                field,
                format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels"),
            ));
        }
        let elem = self.value_type(field)?;
        let n = self.count(field, "array length", elem.min_encoded_size())?;

        /// Decodes `n` fixed-size little-endian scalars (length already checked).
        macro_rules! scalars {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take(n * W, field)?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| {
                            let mut a = [0u8; W];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }

        Ok(match elem {
            ValueType::U8 => scalars!(U8, u8),
            ValueType::I8 => scalars!(I8, i8),
            ValueType::U16 => scalars!(U16, u16),
            ValueType::I16 => scalars!(I16, i16),
            ValueType::U32 => scalars!(U32, u32),
            ValueType::I32 => scalars!(I32, i32),
            ValueType::F32 => scalars!(F32, f32),
            ValueType::U64 => scalars!(U64, u64),
            ValueType::I64 => scalars!(I64, i64),
            ValueType::F64 => scalars!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool(field)?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(field)?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(field, depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }
}

fn align_up(x: usize, alignment: usize) -> Option<usize> {
    // `alignment` is a non-zero power of two.
    Some(x.checked_add(alignment - 1)? & !(alignment - 1))
}

/// Parses and validates a whole GGUF file held in `buf`; `src` names it in
/// errors. The stages run in file order: header, metadata (key/value
/// section), tensor infos, data section.
pub(crate) fn parse(buf: &[u8], src: &str) -> Result<Parsed> {
    let mut cur = Cursor { buf, pos: 0, src };
    let (version, n_tensors, n_kv) = read_header(&mut cur)?;
    let metadata = read_metadata(&mut cur, n_kv)?;
    let alignment = read_alignment(&cur, &metadata)?;
    let (tensors, by_name) = read_tensor_infos(&mut cur, n_tensors, alignment)?;
    let data_offset = find_data_offset(&cur, &tensors, alignment)?;
    check_tensor_ranges(&cur, &tensors, buf.len() - data_offset)?;
    Ok(Parsed {
        version,
        alignment,
        metadata,
        tensors,
        by_name,
        data_offset,
    })
}

/// The header: magic, a supported version, and the tensor and key/value
/// counts (checked against the bytes left). Returns (version, n_tensors, n_kv).
fn read_header(cur: &mut Cursor<'_>) -> Result<(u32, usize, usize)> {
    let magic: [u8; 4] = cur.array("magic")?;
    if magic != MAGIC {
        return Err(cur.err(
            "magic",
            format!(
                "expected \"GGUF\", found {:?}: not a GGUF file",
                String::from_utf8_lossy(&magic)
            ),
        ));
    }
    let version = cur.u32("version")?;
    match version {
        v if SUPPORTED_VERSIONS.contains(&v) => {}
        1 => {
            return Err(cur.err(
                "version",
                "GGUF v1 is not supported (it used 32-bit counts and lengths); re-convert the \
                 model with a current llama.cpp to get v3",
            ))
        }
        v if (1..=3).contains(&v.swap_bytes()) => {
            return Err(cur.err(
                "version",
                format!(
                    "big-endian GGUF (version {} byte-swapped) is not supported",
                    v.swap_bytes()
                ),
            ))
        }
        v => {
            return Err(cur.err(
                "version",
                format!("unsupported version {v} (strata reads 2 and 3)"),
            ))
        }
    }
    let n_tensors = cur.count("tensor_count", "tensor count", MIN_TENSOR_INFO_SIZE)?;
    let n_kv = cur.count("kv_count", "key/value count", MIN_KV_SIZE)?;
    let need = n_tensors * MIN_TENSOR_INFO_SIZE + n_kv * MIN_KV_SIZE; // each term <= remaining
    if need > cur.remaining() {
        return Err(cur.err(
            "kv_count",
            format!(
                "{n_tensors} tensor infos and {n_kv} key/value pairs cannot fit in the {} bytes \
                 left",
                cur.remaining()
            ),
        ));
    }
    Ok((version, n_tensors, n_kv))
}

/// The key/value section: `n_kv` typed values, keys unique.
fn read_metadata(cur: &mut Cursor<'_>, n_kv: usize) -> Result<Metadata> {
    let mut metadata = Metadata::new(cur.src);
    for i in 0..n_kv {
        let key = cur.string(&format!("metadata key #{i}"))?;
        let field = format!("metadata key '{key}'");
        let ty = cur.value_type(&field)?;
        let value = cur.value(ty, &field)?;
        metadata.insert(key, value, false)?;
    }
    Ok(metadata)
}

/// `general.alignment`: a non-zero power of two, or the default.
fn read_alignment(cur: &Cursor<'_>, metadata: &Metadata) -> Result<usize> {
    Ok(match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.to_u64().and_then(|a| usize::try_from(a).ok());
            match a {
                Some(a) if a.is_power_of_two() => a,
                _ => {
                    return Err(cur.err(
                        &format!("metadata key '{ALIGNMENT_KEY}'"),
                        format!(
                            "alignment must be a non-zero power of two, found {}",
                            v.summary()
                        ),
                    ))
                }
            }
        }
    })
}

/// Tensor infos: `n_tensors` of them, names unique.
fn read_tensor_infos(
    cur: &mut Cursor<'_>,
    n_tensors: usize,
    alignment: usize,
) -> Result<(Vec<TensorInfo>, HashMap<String, usize>)> {
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut by_name = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let info = read_tensor_info(cur, i, alignment)?;
        if by_name.contains_key(&info.name) {
            return Err(cur.err(
                &format!("tensor '{}' name", info.name),
                "duplicate tensor name",
            ));
        }
        by_name.insert(info.name.clone(), tensors.len());
        tensors.push(info);
    }
    Ok((tensors, by_name))
}

/// Tensor info #`i`: name, shape, type and offset, each checked (the shape's
/// byte size must not overflow, the offset must be aligned).
fn read_tensor_info(cur: &mut Cursor<'_>, i: usize, alignment: usize) -> Result<TensorInfo> {
    let name = cur.string(&format!("tensor #{i} name"))?;
    if name.is_empty() {
        return Err(cur.err(&format!("tensor #{i} name"), "empty tensor name"));
    }
    let field = |what: &str| format!("tensor '{name}' {what}");
    let n_dims = cur.u32(&field("n_dims"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(cur.err(&field("n_dims"), format!("{n_dims} > {MAX_DIMS}")));
    }
    let n_dims = n_dims as usize;
    let mut shape = [1usize; MAX_DIMS];
    for (d, slot) in shape.iter_mut().enumerate().take(n_dims) {
        let f = field("dims");
        let v = cur.u64(&f)?;
        if v == 0 {
            return Err(cur.err(&f, format!("dimension {d} is zero")));
        }
        *slot = usize::try_from(v)
            .map_err(|_| cur.err(&f, format!("dimension {d} = {v} overflows usize")))?;
    }
    let n_elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| {
            cur.err(
                &field("dims"),
                format!("element count of {shape:?} overflows"),
            )
        })?;
    let type_id = cur.u32(&field("type"))?;
    let dtype = DType::from_ggml_id(type_id).ok_or_else(|| {
        cur.err(
            &field("type"),
            format!("unknown or unsupported ggml type id {type_id}"),
        )
    })?;
    if !shape[0].is_multiple_of(dtype.block_size()) {
        return Err(cur.err(
            &field("row length"),
            format!(
                "ne[0] = {} is not a multiple of the {dtype} block size {}",
                shape[0],
                dtype.block_size()
            ),
        ));
    }
    let size = (shape[0] / dtype.block_size())
        .checked_mul(dtype.type_size())
        .and_then(|row| row.checked_mul(n_elements / shape[0]))
        .ok_or_else(|| cur.err(&field("size"), format!("byte size of {shape:?} overflows")))?;
    let offset = cur.u64(&field("offset"))?;
    let offset = usize::try_from(offset)
        .map_err(|_| cur.err(&field("offset"), format!("{offset} overflows usize")))?;
    if !offset.is_multiple_of(alignment) {
        return Err(cur.err(
            &field("offset"),
            format!("{offset} is not a multiple of the alignment {alignment}"),
        ));
    }
    Ok(TensorInfo {
        name,
        dtype,
        n_dims,
        shape,
        offset,
        size,
    })
}

/// Where the data section starts: after the tensor infos, aligned; a file
/// without tensors may end before it.
fn find_data_offset(cur: &Cursor<'_>, tensors: &[TensorInfo], alignment: usize) -> Result<usize> {
    let data_offset = align_up(cur.pos, alignment).unwrap_or(usize::MAX);
    let data_offset = if data_offset > cur.buf.len() {
        if !tensors.is_empty() {
            return Err(cur.err(
                "data section",
                format!(
                    "starts at {data_offset} (tensor infos end at {}, aligned to {alignment}), \
                     past the end of the {}-byte file",
                    cur.pos,
                    cur.buf.len()
                ),
            ));
        }
        cur.buf.len()
    } else {
        data_offset
    };
    Ok(data_offset)
}

/// Every tensor's bytes lie inside the `data_len`-byte data section and no
/// two overlap.
fn check_tensor_ranges(cur: &Cursor<'_>, tensors: &[TensorInfo], data_len: usize) -> Result<()> {
    for t in tensors {
        match t.offset.checked_add(t.size) {
            Some(end) if end <= data_len => {}
            _ => {
                return Err(cur.err(
                    &format!("tensor '{}' offset", t.name),
                    format!(
                        "data at {} + {} bytes lies outside the {data_len}-byte data section",
                        t.offset, t.size
                    ),
                ))
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for w in order.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.offset + a.size > b.offset {
            return Err(cur.err(
                &format!("tensor '{}' offset", b.name),
                format!(
                    "data {}..{} overlaps tensor '{}' at {}..{}",
                    b.offset,
                    b.offset + b.size,
                    a.name,
                    a.offset,
                    a.offset + a.size
                ),
            ));
        }
    }
    Ok(())
}

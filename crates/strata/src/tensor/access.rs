//! Typed reads and writes of tensor data through its buffer.

use half::{bf16, f16};

use super::{DType, Tensor};
use crate::backend::{tensor_get, tensor_set};
use crate::error::TensorProblem;
use crate::{Error, Result, ResultExt};

impl Tensor {
    /// Writes raw bytes at byte `offset` of the tensor (see [`crate::backend::tensor_set`]).
    pub fn write_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        tensor_set(self, offset, data)
    }

    /// Reads the whole tensor's bytes (`nbytes()` of them, strides included).
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.nbytes()];
        tensor_get(self, 0, &mut out)?;
        Ok(out)
    }

    fn check_contiguous_len(&self, op: &'static str, n: usize) -> Result<()> {
        if !self.is_contiguous() {
            return Err(Error::BadTensor {
                op,
                tensor: self.name(),
                problem: TensorProblem::NotContiguous,
            });
        }
        if n != self.nelements() {
            return Err(Error::Length {
                what: format!("{op}: values for tensor '{}'", self.name()),
                expected: self.nelements(),
                got: n,
            });
        }
        Ok(())
    }

    /// Writes `values` converted to the tensor's type (F32, F16, BF16 or a
    /// block-quantized type); the tensor must be contiguous.
    pub fn write_f32(&self, values: &[f32]) -> Result<()> {
        self.check_contiguous_len("write_f32", values.len())?;
        let bytes = encode_f32(self.dtype(), values)
            .with_context(|| format!("write_f32: tensor '{}'", self.name()))?;
        tensor_set(self, 0, &bytes)
    }

    /// Writes i32 values; the tensor must be a contiguous I32 tensor.
    pub fn write_i32(&self, values: &[i32]) -> Result<()> {
        self.check_contiguous_len("write_i32", values.len())?;
        let bytes: Vec<u8> = match self.dtype() {
            DType::I32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::I64 => values
                .iter()
                .flat_map(|&v| (v as i64).to_le_bytes())
                .collect(),
            t => {
                return Err(Error::dtype(
                    "write_i32",
                    t,
                    format!("tensor '{}' must be I32 or I64", self.name()),
                ))
            }
        };
        tensor_set(self, 0, &bytes)
    }

    /// Reads the tensor as f32 in logical order into `out`, which must hold
    /// exactly `nelements()` values (the logits of every decode step are read
    /// like this into memory the caller keeps: no allocation). Same values as
    /// [`Tensor::to_f32_vec`].
    pub fn read_f32_into(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.nelements() {
            return Err(Error::Length {
                what: format!("read_f32_into: f32 values of tensor '{}'", self.name()),
                expected: self.nelements(),
                got: out.len(),
            });
        }
        if self.dtype() == DType::F32 && self.is_contiguous() && cfg!(target_endian = "little") {
            // straight into the output: one copy (tensor bytes are little-endian)
            return tensor_get(self, 0, bytemuck::cast_slice_mut(out));
        }
        out.copy_from_slice(&self.to_f32_vec()?);
        Ok(())
    }

    /// Reads the tensor as f32 in logical order (ne0 fastest), converting from
    /// its type; works for strided views too.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let dt = self.dtype();
        if dt == DType::F32 && self.is_contiguous() && cfg!(target_endian = "little") {
            // straight into the result: one buffer, one copy
            let mut out = vec![0f32; self.nelements()];
            self.read_f32_into(&mut out)?;
            return Ok(out);
        }
        let ne = self.ne();
        let nb = self.nb();
        let raw = self.read_bytes()?;
        let row = self.row_size();
        let mut out = Vec::with_capacity(self.nelements());
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    let base = i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
                    if self.is_contiguous_rows() {
                        decode_row(dt, &raw[base..base + row], &mut out)?;
                    } else {
                        for i0 in 0..ne[0] {
                            let o = base + i0 * nb[0];
                            decode_row(dt, &raw[o..o + dt.type_size()], &mut out)?;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Reads an I32 tensor in logical order.
    pub fn to_i32_vec(&self) -> Result<Vec<i32>> {
        if self.dtype() != DType::I32 {
            return Err(Error::dtype(
                "to_i32_vec",
                self.dtype(),
                format!("tensor '{}' must be I32", self.name()),
            ));
        }
        Ok(self
            .to_f32_or_int_bytes()?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn to_f32_or_int_bytes(&self) -> Result<Vec<u8>> {
        let ne = self.ne();
        let nb = self.nb();
        let ts = self.dtype().type_size();
        let raw = self.read_bytes()?;
        let mut out = Vec::with_capacity(self.nelements() * ts);
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    for i0 in 0..ne[0] {
                        let o = i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
                        out.extend_from_slice(&raw[o..o + ts]);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Encodes f32 values in `dtype`: an error for integer types, and for NaN /
/// inf in the formats whose quantizers refuse them (see
/// [`crate::quant::quantize_row`]).
pub(crate) fn encode_f32(dtype: DType, values: &[f32]) -> Result<Vec<u8>> {
    Ok(match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect(),
        t if t.is_quantized() => {
            let mut out = vec![0u8; t.row_size(values.len())];
            crate::quant::quantize_row(t, values, &mut out)?;
            out
        }
        t => {
            return Err(Error::dtype(
                "write_f32",
                t,
                "expected a float or block-quantized type",
            ))
        }
    })
}

/// Decodes one row (or one element) of `dtype` bytes, appending f32 values.
pub(crate) fn decode_row(dtype: DType, bytes: &[u8], out: &mut Vec<f32>) -> Result<()> {
    match dtype {
        DType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        DType::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        DType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        DType::I8 => out.extend(bytes.iter().map(|&b| b as i8 as f32)),
        DType::I16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32),
        ),
        DType::I32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32),
        ),
        DType::I64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32),
        ),
        t => {
            let n = bytes.len() / t.type_size() * t.block_size();
            let start = out.len();
            out.resize(start + n, 0.0);
            crate::quant::dequantize_row(t, bytes, &mut out[start..])?;
        }
    }
    Ok(())
}

//! GGUF block formats (placeholder until the block-format module lands).

use crate::{DType, Error, Result};

/// Quantizes one row of f32 values into `dtype` blocks.
pub fn quantize_row(dtype: DType, _src: &[f32], _dst: &mut [u8]) -> Result<()> {
    Err(Error::InvalidArgument(format!("quantize to {dtype} not available yet")))
}

/// Dequantizes one row of `dtype` blocks into f32 values.
pub fn dequantize_row(dtype: DType, _src: &[u8], _dst: &mut [f32]) -> Result<()> {
    Err(Error::InvalidArgument(format!("dequantize from {dtype} not available yet")))
}

//! GGUF block formats: row quantize / dequantize and the scalar dot products
//! quantized matmul is built on.
//!
//! Every format is bit-compatible with ggml's byte layout (and so with GGUF
//! files): a row of `n` elements is `n / block_size` blocks laid end to end,
//! each block little-endian and unpadded.
//!
//! | type | bytes | block layout (32 elements)                               |
//! |------|-------|----------------------------------------------------------|
//! | Q4_0 | 18    | f16 `d`, 16 B nibbles                                    |
//! | Q4_1 | 20    | f16 `d`, f16 `m`, 16 B nibbles                           |
//! | Q5_0 | 22    | f16 `d`, u32 `qh`, 16 B nibbles                          |
//! | Q5_1 | 24    | f16 `d`, f16 `m`, u32 `qh`, 16 B nibbles                 |
//! | Q8_0 | 34    | f16 `d`, 32 × i8                                         |
//! | Q8_1 | 36    | f16 `d`, f16 `s` (= `d` × Σ quants), 32 × i8             |
//! | IQ4_NL | 18  | f16 `d`, 16 B indices into a 16-value table              |
//!
//! Nibble byte `j` holds element `j` in its low half and element `j + 16` in
//! its high half; bit `j` of `qh` is the fifth bit of element `j`.
//!
//! The K-quants and IQ4_XS use super-blocks of [`QK_K`] = 256 elements made
//! of sub-blocks with their own quantized scales (each file documents its
//! bit layout):
//!
//! | type   | bytes | super-block layout (256 elements)                      |
//! |--------|-------|--------------------------------------------------------|
//! | Q2_K   | 84    | 16 B 4-bit scales + mins, 64 B 2-bit quants, f16 `d`, f16 `dmin` |
//! | Q3_K   | 110   | 32 B high bits, 64 B low 2 bits, 12 B 6-bit scales, f16 `d` |
//! | Q4_K   | 144   | f16 `d`, f16 `dmin`, 12 B 6-bit scales + mins, 128 B nibbles |
//! | Q5_K   | 176   | as Q4_K plus 32 B fifth bits before the nibbles        |
//! | Q6_K   | 210   | 128 B low nibbles, 64 B high 2 bits, 16 × i8 scales, f16 `d` |
//! | Q8_K   | 292   | f32 `d`, 256 × i8, 16 × i16 sums of 16 quants          |
//! | IQ4_XS | 136   | f16 `d`, u16 + 4 B 6-bit scales, 128 B table indices   |
//!
//! Their quantizers are ggml's reference ones (without an importance
//! matrix) and give the same bytes. The checked [`quantize_row`] refuses
//! NaN / ±inf input for them (their scale searches have no meaningful
//! answer); the unchecked functions write such super-blocks with a NaN scale
//! so they dequantize to NaN.
//!
//! Two API levels:
//!
//! * [`quantize_row`] / [`dequantize_row`] / [`vec_dot`]: dispatch on a
//!   [`DType`], check every length and return [`Error`] instead of panicking.
//! * the per-type functions (`quantize_row_q8_0`, `vec_dot_q4_0_q8_0`, ...) and
//!   the function-pointer getters ([`quantize_row_fn`], [`vec_dot_fn`], ...):
//!   for kernels that have already checked shapes and call them in a hot loop.
//!   They only `debug_assert!` their length preconditions; in release builds a
//!   mismatch processes the whole blocks that fit or panics on a slice bound,
//!   never reads out of bounds.
//!
//! ```
//! use strata::{quant, DType};
//! let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
//! let mut q = vec![0u8; DType::Q8_0.row_size(x.len())];
//! quant::quantize_row(DType::Q8_0, &x, &mut q)?;
//! let mut y = vec![0f32; x.len()];
//! quant::dequantize_row(DType::Q8_0, &q, &mut y)?;
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.02));
//! assert!(quant::quantize_row(DType::Q8_0, &x[..33], &mut q).is_err());
//! # Ok::<(), strata::Error>(())
//! ```

mod dot;
mod dot_k;
mod float;
mod iq4;
mod k_search;
pub mod packed;
mod q2_k;
mod q3_k;
mod q4;
mod q4_k;
mod q5;
mod q6_k;
mod q8;
mod q8_k;
// Public for the kernel tests and benchmarks, not part of the API: the
// matmul reaches these kernels through `vec_dot_fn` and the CPU backend.
#[doc(hidden)]
pub mod simd;

pub use dot::{
    vec_dot_bf16, vec_dot_f16, vec_dot_f32, vec_dot_q4_0_q8_0, vec_dot_q4_1_q8_1,
    vec_dot_q5_0_q8_0, vec_dot_q5_1_q8_1, vec_dot_q8_0_q8_0,
};
pub use dot_k::{
    vec_dot_iq4_nl_q8_0, vec_dot_iq4_xs_q8_k, vec_dot_q2_k_q8_k, vec_dot_q3_k_q8_k,
    vec_dot_q4_k_q8_k, vec_dot_q5_k_q8_k, vec_dot_q6_k_q8_k,
};
pub use float::{
    bf16_to_f32, dequantize_row_bf16, dequantize_row_f16, dequantize_row_f32, f32_to_bf16,
    quantize_row_bf16, quantize_row_f16, quantize_row_f32,
};
pub use iq4::{
    dequantize_row_iq4_nl, dequantize_row_iq4_xs, quantize_row_iq4_nl, quantize_row_iq4_nl_search,
    quantize_row_iq4_xs, IQ4_NL_VALUES,
};
pub use k_search::QK_K;
pub use q2_k::{dequantize_row_q2_k, quantize_row_q2_k};
pub use q3_k::{dequantize_row_q3_k, quantize_row_q3_k};
pub use q4::{dequantize_row_q4_0, dequantize_row_q4_1, quantize_row_q4_0, quantize_row_q4_1};
pub use q4_k::{dequantize_row_q4_k, dequantize_row_q5_k, quantize_row_q4_k, quantize_row_q5_k};
pub use q5::{dequantize_row_q5_0, dequantize_row_q5_1, quantize_row_q5_0, quantize_row_q5_1};
pub use q6_k::{dequantize_row_q6_k, quantize_row_q6_k};
pub use q8::{dequantize_row_q8_0, dequantize_row_q8_1, quantize_row_q8_0, quantize_row_q8_1};
pub use q8_k::{dequantize_row_q8_k, quantize_row_q8_k};

use crate::{DType, Error, Result};

/// Elements per block of the Q4 / Q5 / Q8_0 / Q8_1 / IQ4_NL formats.
pub const QK: usize = 32;

/// Unchecked row quantizer: `src.len()` a multiple of the block size,
/// `dst.len() == dtype.row_size(src.len())`.
pub type QuantizeRowFn = fn(src: &[f32], dst: &mut [u8]);

/// Unchecked row dequantizer: `dst.len()` a multiple of the block size,
/// `src.len() == dtype.row_size(dst.len())`.
pub type DequantizeRowFn = fn(src: &[u8], dst: &mut [f32]);

/// Unchecked dot product of `n` elements: `x` in the weight type, `y` in its
/// [`vec_dot_type`], both exactly `row_size(n)` bytes long.
pub type VecDotFn = fn(n: usize, x: &[u8], y: &[u8]) -> f32;

/// Unchecked dot products of one `x` row with four `y` rows (as four
/// [`VecDotFn`] calls, bit for bit, but decoding `x` once): `out[j] = x · ys[j]`.
pub type VecDot4Fn = fn(n: usize, x: &[u8], ys: [&[u8]; 4], out: &mut [f32; 4]);

/// The unchecked row quantizer for `dtype` at the [`crate::isa::active`]
/// instruction-set level (bit-identical to the scalar reference), or `None`
/// if `dtype` cannot be quantized to (the integer types).
pub fn quantize_row_fn(dtype: DType) -> Option<QuantizeRowFn> {
    simd::quantize_row_fn_for(crate::isa::active(), dtype)
}

/// The scalar reference row quantizer ([`quantize_row_fn`]'s contract).
fn scalar_quantize_row_fn(dtype: DType) -> Option<QuantizeRowFn> {
    row_fns(dtype).map(|f| f.0)
}

/// The unchecked row dequantizer for `dtype`, or `None` for the integer types.
pub fn dequantize_row_fn(dtype: DType) -> Option<DequantizeRowFn> {
    row_fns(dtype).map(|f| f.1)
}

/// The scalar row functions of `dtype`, quantizer and dequantizer in one
/// table, or `None` for the integer types.
fn row_fns(dtype: DType) -> Option<(QuantizeRowFn, DequantizeRowFn)> {
    let fns: (QuantizeRowFn, DequantizeRowFn) = match dtype {
        DType::F32 => (quantize_row_f32, dequantize_row_f32),
        DType::F16 => (quantize_row_f16, dequantize_row_f16),
        DType::BF16 => (quantize_row_bf16, dequantize_row_bf16),
        DType::Q4_0 => (quantize_row_q4_0, dequantize_row_q4_0),
        DType::Q4_1 => (quantize_row_q4_1, dequantize_row_q4_1),
        DType::Q5_0 => (quantize_row_q5_0, dequantize_row_q5_0),
        DType::Q5_1 => (quantize_row_q5_1, dequantize_row_q5_1),
        DType::Q8_0 => (quantize_row_q8_0, dequantize_row_q8_0),
        DType::Q8_1 => (quantize_row_q8_1, dequantize_row_q8_1),
        DType::Q2_K => (quantize_row_q2_k, dequantize_row_q2_k),
        DType::Q3_K => (quantize_row_q3_k, dequantize_row_q3_k),
        DType::Q4_K => (quantize_row_q4_k, dequantize_row_q4_k),
        DType::Q5_K => (quantize_row_q5_k, dequantize_row_q5_k),
        DType::Q6_K => (quantize_row_q6_k, dequantize_row_q6_k),
        DType::Q8_K => (quantize_row_q8_k, dequantize_row_q8_k),
        DType::IQ4_NL => (quantize_row_iq4_nl, dequantize_row_iq4_nl),
        DType::IQ4_XS => (quantize_row_iq4_xs, dequantize_row_iq4_xs),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => return None,
    };
    Some(fns)
}

/// The type activations are quantized to before a dot product with a row of
/// `dtype` (ggml's `vec_dot_type`): Q4_0 / Q5_0 / Q8_0 / IQ4_NL → Q8_0,
/// Q4_1 / Q5_1 → Q8_1, Q2_K .. Q6_K / IQ4_XS → Q8_K, and the float types
/// pair with themselves.
///
/// Q8_1, Q8_K and the integer types have no dot product; they map to
/// themselves and [`vec_dot_fn`] returns `None` for them.
pub const fn vec_dot_type(dtype: DType) -> DType {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL => DType::Q8_0,
        DType::Q4_1 | DType::Q5_1 => DType::Q8_1,
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
            DType::Q8_K
        }
        other => other,
    }
}

/// The unchecked dot product of a `dtype` row with a [`vec_dot_type`]`(dtype)`
/// row at the [`crate::isa::active`] instruction-set level, or `None` if there is
/// none (Q8_1, Q8_K, integer types). See [`simd`] for how far it may differ from
/// the scalar reference (the per-type `vec_dot_*` functions).
pub fn vec_dot_fn(dtype: DType) -> Option<VecDotFn> {
    simd::vec_dot_fn_for(crate::isa::active(), dtype)
}

/// The scalar reference dot product ([`vec_dot_fn`]'s contract).
fn scalar_vec_dot_fn(dtype: DType) -> Option<VecDotFn> {
    Some(match dtype {
        DType::F32 => vec_dot_f32,
        DType::F16 => vec_dot_f16,
        DType::BF16 => vec_dot_bf16,
        DType::Q4_0 => vec_dot_q4_0_q8_0,
        DType::Q4_1 => vec_dot_q4_1_q8_1,
        DType::Q5_0 => vec_dot_q5_0_q8_0,
        DType::Q5_1 => vec_dot_q5_1_q8_1,
        DType::Q8_0 => vec_dot_q8_0_q8_0,
        DType::Q2_K => vec_dot_q2_k_q8_k,
        DType::Q3_K => vec_dot_q3_k_q8_k,
        DType::Q4_K => vec_dot_q4_k_q8_k,
        DType::Q5_K => vec_dot_q5_k_q8_k,
        DType::Q6_K => vec_dot_q6_k_q8_k,
        DType::IQ4_NL => vec_dot_iq4_nl_q8_0,
        DType::IQ4_XS => vec_dot_iq4_xs_q8_k,
        DType::Q8_1 | DType::Q8_K | DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
            return None
        }
    })
}

/// True if `n` elements are whole blocks of `dtype`.
// `usize::is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.80.
#[allow(clippy::manual_is_multiple_of)]
#[inline(always)]
fn whole_blocks(dtype: DType, n: usize) -> bool {
    n % dtype.block_size() == 0
}

/// Checks that `n` elements fit whole blocks of `dtype` and that a buffer of
/// `bytes` bytes is exactly one row of them.
fn check_row(op: &'static str, dtype: DType, n: usize, bytes: usize) -> Result<()> {
    let bs = dtype.block_size();
    if !whole_blocks(dtype, n) {
        return Err(Error::BadValue {
            arg: format!("{op} {dtype}: element count"),
            value: n.to_string(),
            expected: format!("a multiple of the block size {bs}"),
        });
    }
    let want = dtype.row_size(n);
    if bytes != want {
        return Err(Error::Length {
            what: format!("{op} {dtype}: bytes for {n} elements"),
            expected: want,
            got: bytes,
        });
    }
    Ok(())
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::dtype(
        op,
        dtype,
        "expected a float or block-quantized type (f32, f16, bf16, q4_0 .. q8_1, \
         q2_K .. q8_K, iq4_nl, iq4_xs)",
    )
}

/// True for the formats whose quantizers search for scales (the super-block
/// formats: the K-quants, Q8_K and IQ4_XS; and IQ4_NL): [`quantize_row`]
/// refuses non-finite input for them.
const fn searches_scales(dtype: DType) -> bool {
    dtype.block_size() == QK_K || matches!(dtype, DType::IQ4_NL)
}

/// Quantizes (or converts) the f32 row `src` into `dst` in `dtype`'s layout
/// with the active level's quantizer, which gives the bytes of ggml's
/// reference quantizer (what `ggml_quantize_chunk` and `llama-quantize` use)
/// on every CPU.
///
/// Accepts F32 (a little-endian copy), F16, BF16 and every block format.
/// Errors: [`Error::Type`] for the integer types, [`Error::BadValue`] if
/// `src.len()` is not a multiple of the block size or (K-quants, Q8_K,
/// IQ4_NL, IQ4_XS) `src` holds a NaN or an infinity, [`Error::Length`] if
/// `dst.len() != dtype.row_size(src.len())`; `dst` is left untouched on
/// error.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let f = quantize_row_fn(dtype).ok_or_else(|| unsupported("quantize_row", dtype))?;
    check_row("quantize_row", dtype, src.len(), dst.len())?;
    if searches_scales(dtype) {
        if let Some(i) = src.iter().position(|v| !v.is_finite()) {
            return Err(Error::BadValue {
                arg: format!("quantize_row {dtype}: element {i}"),
                value: src[i].to_string(),
                expected: format!(
                    "a finite value ({dtype} searches its scales from the values and cannot \
                     represent NaN or infinity)"
                ),
            });
        }
    }
    f(src, dst);
    Ok(())
}

/// Dequantizes (or converts) the `dtype` row `src` into the f32 row `dst`.
///
/// `dst.len()` is the element count. Errors: [`Error::Type`] for the integer
/// types, [`Error::BadValue`] if `dst.len()` is not a multiple of the block
/// size, [`Error::Length`] if `src.len() != dtype.row_size(dst.len())`.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let f = dequantize_row_fn(dtype).ok_or_else(|| unsupported("dequantize_row", dtype))?;
    check_row("dequantize_row", dtype, dst.len(), src.len())?;
    f(src, dst);
    Ok(())
}

/// Dot product of `n` elements: `x` a `dtype` row, `y` a
/// [`vec_dot_type`]`(dtype)` row, computed by [`vec_dot_fn`]`(dtype)` (the
/// active SIMD level; the scalar reference computes it the way ggml's
/// generic code does: integer block sums scaled in f32 for quantized types,
/// f32 products summed in f64 for the float types).
///
/// Errors: [`Error::Type`] if `dtype` has no dot product (Q8_1, Q8_K,
/// integer types), [`Error::BadValue`] if `n` is not a multiple of the block
/// size, [`Error::Length`] if a row's bytes do not match `n`.
pub fn vec_dot(dtype: DType, n: usize, x: &[u8], y: &[u8]) -> Result<f32> {
    let f = vec_dot_fn(dtype).ok_or_else(|| {
        Error::dtype(
            "vec_dot",
            dtype,
            "expected f32, f16, bf16, a Q4 / Q5 / Q8_0 / K-quant (not q8_K) or IQ4 type",
        )
    })?;
    check_row("vec_dot", dtype, n, x.len())?;
    check_row("vec_dot", vec_dot_type(dtype), n, y.len())?;
    Ok(f(n, x, y))
}

/// Reads the little-endian f16 at `b[off..off + 2]` as f32.
#[inline(always)]
fn get_f16(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

/// Writes `v` rounded to f16 (nearest, ties to even) at `b[off..off + 2]`.
#[inline(always)]
fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Debug-checks the length contract of an unchecked row function.
#[inline(always)]
fn debug_check_row(dtype: DType, n: usize, bytes: usize) {
    debug_assert!(
        whole_blocks(dtype, n) && bytes == dtype.row_size(n),
        "{dtype} row: {n} elements vs {bytes} bytes"
    );
}

/// The element with the largest magnitude, keeping its sign (first one on
/// ties; NaNs are skipped), as ggml's Q4_0 / Q5_0 quantizers pick it.
#[inline(always)]
fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `(min, max)` of a non-empty block.
#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    for &v in &x[1..] {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// The scale header of a symmetric block (Q4_0, Q5_0) of `x`: writes
/// `d = max / div`, `max` the element of largest magnitude with its sign
/// ([`signed_absmax`]), as the f16 at `y[0..2]` and returns `1 / d` in f32
/// (0 for an all-zero block).
#[inline(always)]
fn put_signed_header(x: &[f32], y: &mut [u8], div: f32) -> f32 {
    let d = signed_absmax(x) / div;
    put_f16(y, 0, d);
    inv_or_zero(d)
}

/// The scale header of a min-offset block (Q4_1, Q5_1) of `x` with quants
/// `0..=nmax`: writes `d = (max - min) / nmax` and `min` as the f16 at
/// `y[0..4]` and returns `(min, 1 / d)` in f32 (0 for an all-equal block).
#[inline(always)]
fn put_min_header(x: &[f32], y: &mut [u8], nmax: f32) -> (f32, f32) {
    let (min, max) = min_max(x);
    let d = (max - min) / nmax;
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    (min, inv_or_zero(d))
}

/// `1 / d`, or 0 when `d` is 0 (an all-zero block).
#[inline(always)]
fn inv_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The K-quant types with a dot product (Q8_K is their activation).
    const K_TYPES: [DType; 5] = [
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];

    #[test]
    fn function_tables_cover_exactly_the_float_and_block_types() {
        for t in DType::ALL {
            let supported = t.is_float() || t.is_quantized();
            assert_eq!(quantize_row_fn(t).is_some(), supported, "{t}");
            assert_eq!(dequantize_row_fn(t).is_some(), supported, "{t}");
            assert_eq!(
                vec_dot_fn(t).is_some(),
                supported && t != DType::Q8_1 && t != DType::Q8_K,
                "{t}"
            );
            if vec_dot_fn(t).is_some() {
                let vt = vec_dot_type(t);
                assert_eq!(vt.block_size(), t.block_size(), "{t}");
                assert!(quantize_row_fn(vt).is_some(), "{t}");
            }
        }
        for t in K_TYPES {
            assert_eq!(vec_dot_type(t), DType::Q8_K);
        }
        assert_eq!(vec_dot_type(DType::IQ4_XS), DType::Q8_K);
        assert_eq!(vec_dot_type(DType::IQ4_NL), DType::Q8_0);
        assert_eq!(vec_dot_type(DType::Q4_0), DType::Q8_0);
        assert_eq!(vec_dot_type(DType::Q5_0), DType::Q8_0);
        assert_eq!(vec_dot_type(DType::Q8_0), DType::Q8_0);
        assert_eq!(vec_dot_type(DType::Q4_1), DType::Q8_1);
        assert_eq!(vec_dot_type(DType::Q5_1), DType::Q8_1);
        assert_eq!(vec_dot_type(DType::F16), DType::F16);
        assert_eq!(vec_dot_type(DType::BF16), DType::BF16);
        assert_eq!(vec_dot_type(DType::F32), DType::F32);
    }

    #[test]
    fn checked_api_rejects_bad_types_and_lengths() {
        let x = [0.5f32; 64];
        let mut b = [0u8; 256];
        let mut y = [0f32; 64];
        assert!(matches!(
            quantize_row(DType::I32, &x, &mut b[..256]),
            Err(Error::Type { .. })
        ));
        assert!(matches!(
            dequantize_row(DType::I8, &b[..64], &mut y),
            Err(Error::Type { .. })
        ));
        match quantize_row(DType::Q4_0, &x[..40], &mut b[..18]) {
            Err(Error::BadValue {
                arg,
                value,
                expected,
            }) => {
                assert_eq!(arg, "quantize_row q4_0: element count");
                assert_eq!(value, "40");
                assert_eq!(expected, "a multiple of the block size 32");
            }
            r => panic!("{r:?}"),
        }
        assert!(matches!(
            quantize_row(DType::Q4_0, &x, &mut b[..35]),
            Err(Error::Length { what, expected: 36, got: 35 })
                if what == "quantize_row q4_0: bytes for 64 elements"
        ));
        assert!(matches!(
            dequantize_row(DType::Q8_0, &b[..67], &mut y),
            Err(Error::Length {
                expected: 68,
                got: 67,
                ..
            })
        ));
        assert!(matches!(
            vec_dot(DType::Q8_1, 64, &b[..72], &b[..72]),
            Err(Error::Type { .. })
        ));
        assert!(matches!(
            vec_dot(DType::Q4_1, 64, &b[..40], &b[..68]),
            Err(Error::Length { what, expected: 72, got: 68 })
                if what == "vec_dot q8_1: bytes for 64 elements"
        ));
        quantize_row(DType::Q4_0, &x, &mut b[..36]).unwrap();
        assert_eq!(vec_dot(DType::F32, 0, &[], &[]).unwrap(), 0.0);
        assert!(matches!(
            vec_dot(DType::Q8_K, 256, &b[..0], &b[..0]),
            Err(Error::Type { .. })
        ));
    }

    #[test]
    fn scale_searching_formats_refuse_non_finite_input() {
        for t in DType::QUANTIZED {
            let n = t.block_size() * 2;
            let mut x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut q = vec![0u8; t.row_size(n)];
            quantize_row(t, &x, &mut q).unwrap();
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                x[n - 3] = bad;
                let before = q.clone();
                let r = quantize_row(t, &x, &mut q);
                if searches_scales(t) {
                    let e = r.unwrap_err();
                    let Error::BadValue { arg, value, .. } = &e else {
                        panic!("{t}: {e}");
                    };
                    assert_eq!(arg, &format!("quantize_row {t}: element {}", n - 3));
                    assert_eq!(value, &bad.to_string());
                    assert_eq!(q, before, "{t}: dst untouched");
                } else {
                    r.unwrap();
                }
            }
        }
        // Unchecked: NaN super-blocks, never a panic.
        for t in K_TYPES {
            let mut x = vec![0.5f32; 512];
            x[300] = f32::NAN;
            let mut q = vec![0u8; t.row_size(512)];
            quantize_row_fn(t).unwrap()(&x, &mut q);
            let mut y = vec![0f32; 512];
            dequantize_row(t, &q, &mut y).unwrap();
            assert!(y[..256].iter().all(|v| (v - 0.5).abs() < 0.05), "{t}");
            assert!(y[256..].iter().all(|v| v.is_nan()), "{t}");
        }
    }
}

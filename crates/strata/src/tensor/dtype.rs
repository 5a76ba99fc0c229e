//! Element types: plain scalars and GGUF block-quantized formats.
//!
//! The numeric ids, block sizes and byte sizes are ggml's (`enum ggml_type`),
//! so they can be written to GGUF files and sent over ggml's RPC protocol
//! unchanged.

use std::fmt;

/// The element type of a tensor.
///
/// Block-quantized types store `block_size()` elements in `type_size()` bytes;
/// a row's length must be a multiple of the block size.
///
/// ```
/// use strata::DType;
/// assert_eq!(DType::Q4_0.block_size(), 32);
/// assert_eq!(DType::Q4_0.type_size(), 18);
/// assert_eq!(DType::Q4_0.row_size(64), 36);
/// assert_eq!(DType::from_ggml_id(8), Some(DType::Q8_0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer (row indices of SET_ROWS).
    I64,
    /// 4-bit, 32 per block, f16 scale.
    Q4_0,
    /// 4-bit, 32 per block, f16 scale and min.
    Q4_1,
    /// 5-bit, 32 per block, f16 scale.
    Q5_0,
    /// 5-bit, 32 per block, f16 scale and min.
    Q5_1,
    /// 8-bit, 32 per block, f16 scale.
    Q8_0,
    /// 8-bit, 32 per block, f16 scale and f16 scaled sum (matmul partner of Q4_1/Q5_1).
    Q8_1,
}

impl DType {
    /// Every type strata knows, in ggml id order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::BF16,
    ];

    /// The block-quantized types.
    pub const QUANTIZED: [DType; 6] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
    ];

    /// ggml's numeric type id (`enum ggml_type`).
    pub const fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q8_1 => 9,
            DType::I8 => 24,
            DType::I16 => 25,
            DType::I32 => 26,
            DType::I64 => 27,
            DType::BF16 => 30,
        }
    }

    /// The type with ggml id `id`, or `None` for ids strata does not support.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DType::ALL.iter().copied().find(|t| t.ggml_id() == id)
    }

    /// Elements per block (1 for scalar types).
    pub const fn block_size(self) -> usize {
        match self {
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::Q8_1 => 32,
            _ => 1,
        }
    }

    /// Bytes per block (bytes per element for scalar types).
    pub const fn type_size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 => 1,
            DType::I64 => 8,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
        }
    }

    /// True for block-quantized types.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for F32, F16 and BF16.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// True for the integer types.
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Bytes taken by a row of `n` elements (`n` should be a multiple of the block size).
    pub const fn row_size(self, n: usize) -> usize {
        self.type_size() * (n / self.block_size())
    }

    /// ggml's lower-case name ("f32", "q4_0", ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q8_0 => "q8_0",
            DType::Q8_1 => "q8_1",
        }
    }

    /// Parses a name as printed by [`DType::name`] (case-insensitive).
    pub fn from_name(s: &str) -> Option<DType> {
        let l = s.to_ascii_lowercase();
        DType::ALL.iter().copied().find(|t| t.name() == l)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sizes_match_ggml() {
        for t in DType::ALL {
            assert_eq!(DType::from_ggml_id(t.ggml_id()), Some(t));
            assert_eq!(DType::from_name(t.name()), Some(t));
        }
        assert_eq!(DType::from_ggml_id(4), None);
        assert_eq!(DType::from_ggml_id(10), None);
        let expect = [
            (DType::Q4_0, 2, 32, 18),
            (DType::Q4_1, 3, 32, 20),
            (DType::Q5_0, 6, 32, 22),
            (DType::Q5_1, 7, 32, 24),
            (DType::Q8_0, 8, 32, 34),
            (DType::Q8_1, 9, 32, 36),
            (DType::BF16, 30, 1, 2),
            (DType::I32, 26, 1, 4),
        ];
        for (t, id, bs, ts) in expect {
            assert_eq!(
                (t.ggml_id(), t.block_size(), t.type_size()),
                (id, bs, ts),
                "{t}"
            );
        }
    }
}

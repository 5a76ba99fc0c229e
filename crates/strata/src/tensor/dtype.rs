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
/// assert_eq!(DType::Q4_K.block_size(), 256);
/// assert_eq!(DType::Q4_K.row_size(512), 288);
/// assert_eq!(DType::from_ggml_id(12), Some(DType::Q4_K));
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
    /// K-quant, 2-bit, 256 per super-block: 16 sub-blocks of 16 with 4-bit
    /// scales and mins, f16 super-block scale and min.
    Q2_K,
    /// K-quant, 3-bit, 256 per super-block: 16 sub-blocks of 16 with 6-bit
    /// scales, f16 super-block scale.
    Q3_K,
    /// K-quant, 4-bit, 256 per super-block: 8 sub-blocks of 32 with 6-bit
    /// scales and mins, f16 super-block scale and min.
    Q4_K,
    /// K-quant, 5-bit, 256 per super-block: as Q4_K plus a fifth bit per quant.
    Q5_K,
    /// K-quant, 6-bit, 256 per super-block: 16 sub-blocks of 16 with 8-bit
    /// scales, f16 super-block scale.
    Q6_K,
    /// 8-bit, 256 per block, f32 scale and 16 i16 sums of 16 quants (matmul
    /// partner of the K-quants and IQ4_XS).
    Q8_K,
    /// 4-bit non-linear (a fixed 16-value table), 32 per block, f16 scale.
    IQ4_NL,
    /// 4-bit non-linear, 256 per super-block: 8 sub-blocks of 32 with 6-bit
    /// scales, f16 super-block scale.
    IQ4_XS,
}

impl DType {
    /// Every type strata knows, in ggml id order: F32, F16, the
    /// [`QUANTIZED`](Self::QUANTIZED) types, the integer types, BF16.
    pub const ALL: [DType; 21] = {
        let head = [DType::F32, DType::F16];
        let tail = [DType::I8, DType::I16, DType::I32, DType::I64, DType::BF16];
        let mut all = [DType::F32; 21];
        let mut i = 0;
        while i < all.len() {
            all[i] = if i < head.len() {
                head[i]
            } else if i < head.len() + Self::QUANTIZED.len() {
                Self::QUANTIZED[i - head.len()]
            } else {
                tail[i - head.len() - Self::QUANTIZED.len()]
            };
            i += 1;
        }
        all
    };

    /// The block-quantized types, in ggml id order.
    pub const QUANTIZED: [DType; 14] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
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
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::Q8_K => 15,
            DType::IQ4_NL => 20,
            DType::IQ4_XS => 23,
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
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4_NL => 32,
            DType::Q2_K
            | DType::Q3_K
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q8_K
            | DType::IQ4_XS => 256,
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
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::Q8_K => 292,
            DType::IQ4_NL => 18,
            DType::IQ4_XS => 136,
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

    /// ggml's name ("f32", "q4_0", "q4_K", "iq4_xs", ...; ggml spells the
    /// K-quants with a capital K).
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
            DType::Q2_K => "q2_K",
            DType::Q3_K => "q3_K",
            DType::Q4_K => "q4_K",
            DType::Q5_K => "q5_K",
            DType::Q6_K => "q6_K",
            DType::Q8_K => "q8_K",
            DType::IQ4_NL => "iq4_nl",
            DType::IQ4_XS => "iq4_xs",
        }
    }

    /// Parses a name as printed by [`DType::name`] (case-insensitive).
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
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
        assert_eq!(DType::from_ggml_id(16), None);
        assert_eq!(DType::from_name("Q4_K"), Some(DType::Q4_K));
        assert_eq!(DType::from_name("IQ4_XS"), Some(DType::IQ4_XS));
        assert!(DType::ALL
            .windows(2)
            .all(|w| w[0].ggml_id() < w[1].ggml_id()));
        assert!(DType::QUANTIZED.iter().all(|t| t.is_quantized()));
        let n_quantized = DType::ALL.iter().filter(|t| t.is_quantized()).count();
        assert_eq!(n_quantized, DType::QUANTIZED.len());
        let expect = [
            (DType::Q4_0, 2, 32, 18),
            (DType::Q4_1, 3, 32, 20),
            (DType::Q5_0, 6, 32, 22),
            (DType::Q5_1, 7, 32, 24),
            (DType::Q8_0, 8, 32, 34),
            (DType::Q8_1, 9, 32, 36),
            (DType::Q2_K, 10, 256, 84),
            (DType::Q3_K, 11, 256, 110),
            (DType::Q4_K, 12, 256, 144),
            (DType::Q5_K, 13, 256, 176),
            (DType::Q6_K, 14, 256, 210),
            (DType::Q8_K, 15, 256, 292),
            (DType::IQ4_NL, 20, 32, 18),
            (DType::IQ4_XS, 23, 256, 136),
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

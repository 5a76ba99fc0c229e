//! Constants of the GGUF format and the reader's safety limits.

/// The four magic bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The version [`GgufWriter`](super::GgufWriter) writes.
pub const WRITE_VERSION: u32 = 3;

/// Versions the reader accepts (v1 used 32-bit counts and is rejected).
pub const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];

/// Alignment of the data section and of every tensor offset when the file
/// has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// The metadata key holding the alignment (a `u32` power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// Deepest nesting of arrays of arrays the reader accepts (a value at
/// depth 1 is a plain array). Bounds the reader's recursion on hostile files.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Fewest bytes one tensor info can take: name length (8), `n_dims` (4),
/// type (4), offset (8).
pub const MIN_TENSOR_INFO_SIZE: usize = 24;

/// Fewest bytes one key/value pair can take: key length (8), value type (4),
/// a one-byte value.
pub const MIN_KV_SIZE: usize = 13;

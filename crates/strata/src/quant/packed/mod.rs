//! The repacked weight layout for quantized matmul (ggml's CPU "repack"
//! idea), and the kernels over it.
//!
//! A weight of type Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K,
//! Q5_K, Q6_K or IQ4_XS whose rows come in whole groups of [`ROWS`] (`ne[1] % 16 == 0`,
//! contiguous) can be stored *packed*: the bytes of every 16-row group are
//! permuted so that one
//! 64-byte load feeds sixteen rows at once (one row per 32-bit lane of a
//! 512-bit register; at AVX2, the first and last 32 bytes of a line are
//! rows 0–7 and 8–15 in two ymm registers, see `x86_avx2.rs`; at NEON,
//! its four 16-byte quarters are rows `4q .. 4q + 4`, four i32 lanes each,
//! the operand shape of `sdot`, see `aarch64_neon.rs`; with `i8mm`, `zip`s
//! of two such registers are `smmla`'s 2-row operands, see
//! `aarch64_i8mm.rs`). The packed
//! tensor has exactly ggml's size, and every
//! 16-row group occupies the same bytes as in ggml's layout, so sizes,
//! offsets and allocators are unchanged; only the order of the bytes inside a
//! group differs. [`pack`] and [`unpack`] are exact inverses for any bytes.
//!
//! Inside a group, the data is a sequence of *chunks*, one per block `b`
//! (32 elements; 256 for the K-quants; in block order); chunk `b` holds
//! block `b` of the 16 rows (`16 × type_size` bytes):
//!
//! | type | chunk bytes | contents, in order |
//! |------|-------------|--------------------|
//! | Q4_0 | 288 | `d` × 16 (f16), quants 256 B (`b` even: quants, then `d`) |
//! | Q4_1 | 320 | `d` × 16, `m` × 16, quants 256 B |
//! | Q5_0 | 352 | `d` × 16, fifth bits 64 B, quants 256 B (`b` even: fifth bits, quants, `d`) |
//! | Q5_1 | 384 | `d` × 16, `m` × 16, fifth bits 64 B, quants 256 B |
//! | Q8_0 | 544 | `d` × 16, quants 512 B (`b` even: quants, then `d`) |
//! | IQ4_NL | 288 | as Q4_0 (the nibbles index `IQ4_NL_VALUES`) |
//! | Q4_K | 2304 | `d` × 16, `dmin` × 16, 35 dword lines of 64 B: 3 of the 12-byte 6-bit scales / mins, 32 of `qs` |
//! | Q5_K | 2816 | `d` × 16, `dmin` × 16, 43 dword lines: 3 of scales / mins, 8 of `qh`, 32 of `qs` |
//! | Q6_K | 3360 | 52 dword lines: 32 of `ql`, 16 of `qh`, 4 of the i8 `scales`; then `d` × 16 |
//! | Q2_K | 1344 | 20 dword lines: 4 of the 4-bit scale / min bytes, 16 of `qs`; then `d` × 16, `dmin` × 16 |
//! | Q3_K | 1760 | 27 dword lines: 8 of `hmask`, 16 of `qs`, 3 of the 12-byte 6-bit scales; then `d` × 16 |
//! | IQ4_XS | 2176 | `d` × 16, `scales_h` × 16 (u16), 33 dword lines: 1 of `scales_l`, 32 of `qs` |
//!
//! (K-quant dword lines: byte `64 w + 4 r + t` of the lines is byte
//! `4 w + t` of row `r`'s super-block after its header f16, ggml's bytes in
//! ggml's order; see `k.rs`.)
//!
//! (The chunks of 32 mod 64 bytes move their scales behind the quants in
//! even chunks, so that in a 64-byte aligned group every 64-byte quant load
//! is aligned to a cache line.)
//!
//! Row `r`'s scale is f16 number `r` (one `vcvtph2ps` gives all sixteen).
//! 4/5-bit quants: byte `64 i + 4 r + t` (`i < 4`, `t < 4`) holds quant
//! `4 i + t` of row `r` in its low nibble and quant `16 + 4 i + t` in its high
//! nibble — ggml's nibble byte `4 i + t` of row `r`, so a 64-byte load split
//! into nibbles gives two registers whose lane `r` holds quants `4j..4j+4` of
//! row `r` for `j = i` and `j = i + 4`. Fifth bits (Q5): eight little-endian
//! u64 masks; bit `4 r + t` of mask `j` is the fifth bit of quant `4 j + t` of
//! row `r` (a `k` register for byte-masked AVX-512 ops on the register of
//! group `j`; at NEON, the u16 of quarter `q` spread to bytes). Q8_0: byte
//! `64 j + 4 r + t` is quant `4 j + t` of row `r` XOR 0x80 (biased to
//! unsigned, for `vpdpbusd`; the AVX2 and NEON kernels un-bias it, the
//! AVX-512 VNNI and AVX-VNNI kernels take it as it is).
//!
//! Kernels (see `kernels_for`) multiply packed weights with activations
//! quantized to Q8_0 / Q8_1 and re-laid out per block as [`ACT_BLOCK`]
//! bytes (`prepare_activation`): 32 × i8 quants, the f32 scale, and an
//! i32 `-offset · Σ quants` (offset 8 / 16 / 128 for Q4_0 / Q5_0 / Q8_0,
//! 128 for IQ4_NL: the AVX-VNNI kernel biases its signed table values by
//! 128, the others ignore the term) or, for Q8_1, its stored
//! sum term `s` as f32. Every block's integer sum
//! `Σ q_w a - offset Σ a` is exact; per output, the block terms
//! `(d_w d_a) · isum` (+ `m_w s_a`) are accumulated in f32 with fused
//! multiply-adds in block order, so the result differs from the scalar
//! reference ([`super::vec_dot_fn`]) only by the f32 rounding of that
//! accumulation (within the bound [`super::simd`] documents), and does not
//! depend on how many columns or threads share the work.
//!
//! IQ4_NL (ggml's `d`, then 16 bytes of 4-bit indices into the signed
//! table [`crate::quant::IQ4_NL_VALUES`], in Q4_0's nibble order) is packed
//! exactly as Q4_0, and its kernels (AVX2 and AVX-VNNI, in `x86_avx2.rs`)
//! follow the legacy contract above: exact block sums of table value ×
//! activation, then the same f32 accumulation and bound.
//!
//! The K-quants Q2_K .. Q6_K and IQ4_XS (rows a multiple of 256) are packed the same
//! way per 256-element super-block (`k.rs`: the header f16 of the 16 rows
//! side by side, the rest of each row's super-block as 64-byte dword
//! lines). Their activations are Q8_K rows as the Q8_K quantizer writes them
//! (f32 `d`, 256 × i8, 16 × i16 sums of 16; `prepare_activation` is the
//! identity but for IQ4_XS, whose sums become i32 bias terms), and their
//! kernels (AVX2: `x86_avx2_k.rs`, Q2_K / Q3_K in
//! `x86_avx2_k23.rs`, also run at AVX-VNNI; AVX-512 and VNNI: `x86_k.rs`,
//! sixteen rows per zmm register, except IQ4_XS at AVX-512 without VNNI,
//! which runs the AVX2 tiles; NEON with `dotprod`:
//! `aarch64_neon_k.rs`, quarters of four rows and `sdot` by element) form
//! every super-block's integer sums exactly and then the scalar reference's
//! f32 term in its order, so they return [`super::vec_dot_fn`]'s scalar
//! result bit for bit.

use crate::isa::Isa;
use crate::tensor::DType;
use crate::{Error, Result};

#[cfg(target_arch = "aarch64")]
mod aarch64_i8mm;
#[cfg(target_arch = "aarch64")]
mod aarch64_neon;
#[cfg(target_arch = "aarch64")]
mod aarch64_neon_k;
mod k;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod tags;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_k;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_k23;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_kw;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_lw;
#[cfg(target_arch = "x86_64")]
mod x86_k;
#[cfg(target_arch = "x86_64")]
mod x86_kshared;

/// Rows per packed group.
pub const ROWS: usize = 16;

/// Bytes per block of a prepared activation column: 32 × i8 quants, f32
/// scale, and an i32 `-offset · Σq` (offset types) or f32 `s` (Q8_1). (The
/// K-quants' activations are Q8_K blocks, `act_bytes`.)
pub const ACT_BLOCK: usize = 40;

const QK: usize = crate::quant::QK;

/// The packable K-quants: 256-element super-blocks, Q8_K activations, the
/// chunk layout of `k.rs`.
pub const K_TYPES: [DType; 6] = [
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_XS,
];

/// True for the types that have a packed layout.
pub const fn is_packable(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::IQ4_NL
    ) || k::layout(dtype).is_some()
}

/// True when a contiguous tensor of `dtype` and shape `ne` can be stored
/// packed: a packable type with rows in whole groups of [`ROWS`] (and whole
/// blocks, 256 elements for the K-quants).
pub fn eligible(dtype: DType, ne: [usize; 4]) -> bool {
    is_packable(dtype)
        && ne[0] > 0
        && ne[0].is_multiple_of(dtype.block_size())
        && ne[1] > 0
        && ne[1].is_multiple_of(ROWS)
        && ne[2] > 0
        && ne[3] > 0
}

/// True when `isa` has kernels over the packed layout of `dtype`: at AVX2
/// every packable type; at AVX-VNNI the same, its own `vpdpbusd` tiles for
/// the legacy types and IQ4_NL and AVX2's for the K-quants; at AVX-512 and VNNI the same types, the
/// level's own 512-bit tiles where it has them (the legacy 4/5-bit types;
/// VNNI also Q8_0) and the AVX2 tiles for the rest (Q8_0 without VNNI, the
/// K-quants and IQ4_NL: every AVX-512 CPU runs AVX2 code, and these tiles
/// beat the per-block dot products they would otherwise take); NEON on a
/// CPU with `dotprod`: the legacy 32-element types (`aarch64_neon.rs`;
/// where the CPU also has `i8mm`, tiles of two or more columns take their
/// column pairs with `smmla`, `aarch64_i8mm.rs`, same bits; both detected at
/// run time, both under the one `neon` level) and the K-quants
/// (`aarch64_neon_k.rs`), every packable type but IQ4_NL. Packed weights
/// also work at the other levels and types (scalar, NEON without
/// `dotprod`: Cortex-A53 / A72-class cores, which lack `sdot`; and IQ4_NL
/// on Arm), through a slower path that unpacks each group.
pub fn has_kernels(isa: Isa, dtype: DType) -> bool {
    if !is_packable(dtype) || !isa.is_supported() {
        return false;
    }
    match isa {
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Vnni | Isa::Amx => true,
        Isa::Neon => dtype != DType::IQ4_NL && neon_dotprod(),
        Isa::Scalar => false,
    }
}

/// True when the NEON kernels can run: they need `dotprod` (`sdot`).
fn neon_dotprod() -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        aarch64_neon::available()
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
}

/// Byte layout of one chunk (16 rows × one block).
#[derive(Clone, Copy)]
struct Chunk {
    /// `type_size` of one block.
    ts: usize,
    /// Offset of the `d` scales.
    d: usize,
    /// Offset of the `m` scales (0 when none).
    m: usize,
    /// Offset of the fifth-bit masks (0 when none).
    qh: usize,
    /// Offset of the quants.
    qs: usize,
}

impl Chunk {
    /// The layout of chunk `b` of a group: chunks of 32 mod 64 bytes (Q4_0,
    /// Q5_0, Q8_0, IQ4_NL) put their scales last when `b` is even, so that in a
    /// 64-byte aligned group every 64-byte quant load is aligned.
    fn of(dtype: DType, b: usize) -> Chunk {
        let even = b.is_multiple_of(2);
        let (d, m, qh, qs) = match dtype {
            DType::Q4_0 | DType::IQ4_NL if even => (256, 0, 0, 0),
            DType::Q4_0 | DType::IQ4_NL => (0, 0, 0, 32),
            DType::Q4_1 => (0, 32, 0, 64),
            DType::Q5_0 if even => (320, 0, 0, 64),
            DType::Q5_0 => (0, 0, 32, 96),
            DType::Q5_1 => (0, 32, 64, 128),
            DType::Q8_0 if even => (512, 0, 0, 0),
            DType::Q8_0 => (0, 0, 0, 32),
            t => unreachable!("{t} has no packed layout"),
        };
        Chunk {
            ts: dtype.type_size(),
            d,
            m,
            qh,
            qs,
        }
    }

    /// True when the chunk has fifth-bit masks.
    fn has_qh(dtype: DType) -> bool {
        matches!(dtype, DType::Q5_0 | DType::Q5_1)
    }

    /// Offsets inside a ggml block: (m, qh, nibbles or i8 quants).
    fn block_offsets(dtype: DType) -> (usize, usize, usize) {
        match dtype {
            DType::Q4_0 | DType::Q8_0 | DType::IQ4_NL => (0, 0, 2),
            DType::Q4_1 => (2, 0, 4),
            DType::Q5_0 => (0, 2, 6),
            DType::Q5_1 => (2, 4, 8),
            t => unreachable!("{t} has no packed layout"),
        }
    }

    #[cfg(test)]
    fn size(&self) -> usize {
        ROWS * self.ts
    }
}

/// Bytes of one chunk (16 rows × one block) of a packable type.
fn chunk_bytes(dtype: DType) -> usize {
    ROWS * dtype.type_size()
}

/// Packs block `b` of the 16 ggml rows of `group` (row stride `rs`) into `chunk`.
fn pack_chunk(dtype: DType, group: &[u8], rs: usize, b: usize, chunk: &mut [u8]) {
    if let Some(l) = k::layout(dtype) {
        return k::pack_chunk(l, group, rs, b, chunk);
    }
    let c = Chunk::of(dtype, b);
    let (bm, bqh, bqs) = Chunk::block_offsets(dtype);
    let mut masks = [0u64; 8];
    for r in 0..ROWS {
        let blk = &group[r * rs + b * c.ts..][..c.ts];
        chunk[c.d + 2 * r..c.d + 2 * r + 2].copy_from_slice(&blk[..2]);
        if c.m != 0 {
            chunk[c.m + 2 * r..c.m + 2 * r + 2].copy_from_slice(&blk[bm..bm + 2]);
        }
        if Chunk::has_qh(dtype) {
            let qh = u32::from_le_bytes(blk[bqh..bqh + 4].try_into().expect("4 bytes"));
            for (j, mask) in masks.iter_mut().enumerate() {
                let bits = u64::from((qh >> (4 * j)) & 0xf);
                *mask |= bits << (4 * r);
            }
        }
        let words = if dtype == DType::Q8_0 { 8 } else { 4 };
        for i in 0..words {
            let src = &blk[bqs + 4 * i..bqs + 4 * i + 4];
            let dst = &mut chunk[c.qs + 64 * i + 4 * r..][..4];
            dst.copy_from_slice(src);
            if dtype == DType::Q8_0 {
                for x in dst {
                    *x ^= 0x80;
                }
            }
        }
    }
    if Chunk::has_qh(dtype) {
        for (j, mask) in masks.iter().enumerate() {
            chunk[c.qh + 8 * j..c.qh + 8 * j + 8].copy_from_slice(&mask.to_le_bytes());
        }
    }
}

/// Extracts row `r`'s block from chunk `b` of a group into the ggml block `blk`.
fn unpack_block(dtype: DType, chunk: &[u8], b: usize, r: usize, blk: &mut [u8]) {
    if let Some(l) = k::layout(dtype) {
        return k::unpack_block(l, chunk, r, blk);
    }
    let c = Chunk::of(dtype, b);
    let (bm, bqh, bqs) = Chunk::block_offsets(dtype);
    blk[..2].copy_from_slice(&chunk[c.d + 2 * r..c.d + 2 * r + 2]);
    if c.m != 0 {
        blk[bm..bm + 2].copy_from_slice(&chunk[c.m + 2 * r..c.m + 2 * r + 2]);
    }
    if Chunk::has_qh(dtype) {
        let mut qh = 0u32;
        for j in 0..8 {
            let mask = u64::from_le_bytes(
                chunk[c.qh + 8 * j..c.qh + 8 * j + 8]
                    .try_into()
                    .expect("8 bytes"),
            );
            qh |= (((mask >> (4 * r)) & 0xf) as u32) << (4 * j);
        }
        blk[bqh..bqh + 4].copy_from_slice(&qh.to_le_bytes());
    }
    let words = if dtype == DType::Q8_0 { 8 } else { 4 };
    for i in 0..words {
        let src = &chunk[c.qs + 64 * i + 4 * r..][..4];
        let dst = &mut blk[bqs + 4 * i..bqs + 4 * i + 4];
        dst.copy_from_slice(src);
        if dtype == DType::Q8_0 {
            for x in dst {
                *x ^= 0x80;
            }
        }
    }
}

fn check(what: &str, dtype: DType, ne: [usize; 4], src: usize, dst: usize) -> Result<()> {
    if !eligible(dtype, ne) {
        return Err(Error::BadValue {
            arg: format!("{what}: tensor"),
            value: format!("{dtype} {ne:?}"),
            expected: format!(
                "a tensor with a packed layout: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL or a K-quant \
                 (Q2_K..Q6_K, IQ4_XS) in whole blocks, with ne[1] a multiple of {ROWS}"
            ),
        });
    }
    let want = dtype.row_size(ne[0]) * ne[1] * ne[2] * ne[3];
    for (side, got) in [("input", src), ("output", dst)] {
        if got != want {
            return Err(Error::Length {
                what: format!("{what}: {side} bytes of a {dtype} {ne:?} tensor"),
                expected: want,
                got,
            });
        }
    }
    Ok(())
}

/// Packs the contiguous ggml-layout tensor `src` (type `dtype`, shape `ne`)
/// into `dst` (same size).
///
/// Errors: [`Error::BadValue`] if the tensor is not [`eligible`],
/// [`Error::Length`] if a buffer is not exactly the tensor's size.
pub fn pack(dtype: DType, ne: [usize; 4], src: &[u8], dst: &mut [u8]) -> Result<()> {
    check("pack", dtype, ne, src.len(), dst.len())?;
    let rs = dtype.row_size(ne[0]);
    let nb = ne[0] / dtype.block_size();
    let cs = chunk_bytes(dtype);
    for (g, d) in src
        .chunks_exact(ROWS * rs)
        .zip(dst.chunks_exact_mut(ROWS * rs))
    {
        for (b, chunk) in d.chunks_exact_mut(cs).enumerate().take(nb) {
            pack_chunk(dtype, g, rs, b, chunk);
        }
    }
    Ok(())
}

/// Unpacks `src` (packed by [`pack`] with the same `dtype` and `ne`) into
/// ggml's layout in `dst`: `unpack(pack(x)) == x` for any bytes.
///
/// Errors: as [`pack`].
pub fn unpack(dtype: DType, ne: [usize; 4], src: &[u8], dst: &mut [u8]) -> Result<()> {
    check("unpack", dtype, ne, src.len(), dst.len())?;
    let rs = dtype.row_size(ne[0]);
    for (g, d) in src
        .chunks_exact(ROWS * rs)
        .zip(dst.chunks_exact_mut(ROWS * rs))
    {
        unpack_group(dtype, ne[0], g, d);
    }
    Ok(())
}

/// Unpacks one 16-row group (`16 · row_size(k)` bytes each side).
pub(crate) fn unpack_group(dtype: DType, k: usize, group: &[u8], dst: &mut [u8]) {
    let rs = dtype.row_size(k);
    for (r, row) in dst.chunks_exact_mut(rs).enumerate().take(ROWS) {
        unpack_group_row(dtype, k, group, r, row);
    }
}

/// Row `r` of a packed 16-row group, in ggml's layout.
fn unpack_group_row(dtype: DType, k: usize, group: &[u8], r: usize, dst: &mut [u8]) {
    for (b, (chunk, blk)) in group
        .chunks_exact(chunk_bytes(dtype))
        .zip(dst.chunks_exact_mut(dtype.type_size()))
        .take(k / dtype.block_size())
        .enumerate()
    {
        unpack_block(dtype, chunk, b, r, blk);
    }
}

/// Extracts row `row` (counting rows over dims 1–3) of the packed tensor
/// `src` (type `dtype`, shape `ne`) into `dst` in ggml's layout (one row,
/// `row_size(ne[0])` bytes) — GET_ROWS from packed weights.
///
/// Errors: [`Error::BadValue`] for a non-[`eligible`] shape,
/// [`Error::Length`] for a wrong buffer size, [`Error::IndexOutOfRange`] for
/// a row out of range.
pub fn unpack_row(
    dtype: DType,
    ne: [usize; 4],
    src: &[u8],
    row: usize,
    dst: &mut [u8],
) -> Result<()> {
    let rs = dtype.row_size(ne[0]);
    check("unpack_row", dtype, ne, src.len(), src.len())?;
    let rows = ne[1] * ne[2] * ne[3];
    if row >= rows {
        return Err(Error::index(
            format!("unpack_row: row of a {dtype} {ne:?} tensor"),
            row,
            rows,
        ));
    }
    if dst.len() != rs {
        return Err(Error::Length {
            what: "unpack_row: output bytes (one row)".into(),
            expected: rs,
            got: dst.len(),
        });
    }
    let g = &src[row / ROWS * ROWS * rs..][..ROWS * rs];
    unpack_group_row(dtype, ne[0], g, row % ROWS, dst);
    Ok(())
}

/// Dequantizes row `r` of the packed 16-row `group` (`k` elements per row)
/// into `out[..k]`.
pub(crate) fn dequantize_group_row(
    dtype: DType,
    k: usize,
    group: &[u8],
    r: usize,
    out: &mut [f32],
) {
    let ts = dtype.type_size();
    let deq = crate::quant::dequantize_row_fn(dtype).expect("packable types dequantize");
    let mut blk = [0u8; DType::Q6_K.type_size()];
    for (b, (chunk, o)) in group
        .chunks_exact(chunk_bytes(dtype))
        .zip(out[..k].chunks_exact_mut(dtype.block_size()))
        .enumerate()
    {
        unpack_block(dtype, chunk, b, r, &mut blk[..ts]);
        deq(&blk[..ts], o);
    }
}

/// The operands of one tile kernel call: 16 rows (one packed group at `w`,
/// `nb` blocks of the weight type) times `nr` prepared activation columns (column `j` at
/// `a + j · a_stride`, see [`prepare_activation`]); row `r` of column `j`
/// goes to `out + j · out_stride + 4 r` (f32; strides in bytes).
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// The packed group.
    pub w: *const u8,
    /// Blocks (chunks) per row.
    pub nb: usize,
    /// The first prepared activation column.
    pub a: *const u8,
    /// Bytes from one activation column to the next.
    pub a_stride: usize,
    /// The first output column's 16 f32.
    pub out: *mut u8,
    /// Bytes from one output column to the next.
    pub out_stride: usize,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl Tile {
    /// Chunk `b` of the group for the 32-element type tag `T`, and its
    /// field offsets `(d, qh, qs)` (`tags::offsets`): where every tile
    /// kernel's block loop starts.
    ///
    /// # Safety
    /// `b < nb` (the group holds `nb` chunks).
    #[inline(always)]
    pub(super) unsafe fn chunk<const T: u8>(self, b: usize) -> (*const u8, (usize, usize, usize)) {
        // SAFETY: chunk b < nb is inside the group (contract).
        let c = unsafe { self.w.add(b * tags::chunk_size(T)) };
        (c, tags::offsets(T, b))
    }

    /// Block `b` of activation column `i`: its [`ACT_BLOCK`] bytes.
    ///
    /// # Safety
    /// Column `i` is one of the tile's and `b < nb`.
    #[inline(always)]
    pub(super) unsafe fn act(self, i: usize, b: usize) -> *const u8 {
        // SAFETY: the contract: inside column i's prepared blocks.
        unsafe { self.a.add(i * self.a_stride + b * ACT_BLOCK) }
    }

    /// Output column `i`'s 16 f32.
    ///
    /// # Safety
    /// Column `i` is one of the tile's.
    #[inline(always)]
    pub(super) unsafe fn out(self, i: usize) -> *mut u8 {
        // SAFETY: the contract: column i's output is writable.
        unsafe { self.out.add(i * self.out_stride) }
    }
}

/// A tile kernel: computes `nr` columns of a [`Tile`].
///
/// # Safety
/// The CPU must support the kernel's level; `w` must hold `nb` chunks, each
/// column its [`act_bytes`], each output 16 writable f32.
pub(crate) type TileFn = unsafe fn(t: Tile);

/// An activation quantizer: `nb` blocks of the weight type (32 f32, or 256
/// for the K-quants) at `x` into prepared blocks at `out`, bit-identical to
/// quantizing with the scalar Q8_0 / Q8_1 / Q8_K quantizer and
/// [`prepare_activation`].
///
/// # Safety
/// The CPU must support the level; the `nb` blocks' f32 readable at `x` and
/// their [`act_bytes`] writable at `out`.
pub(crate) type QuantizeFn = unsafe fn(x: *const f32, nb: usize, out: *mut u8);

/// The kernels of one level for one type.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    /// The activation quantizer for this weight type.
    pub quantize: QuantizeFn,
    /// `tiles[j - 1]` computes `j` columns (1 ..= [`Kernels::NR`]).
    pub tiles: [TileFn; Kernels::NR],
    /// A kernel for any multiple of [`Kernels::WIDE`] columns at once,
    /// with the same results as the tiles (the AMX level's K-quants).
    pub wide: Option<WideFn>,
}

impl Kernels {
    /// Columns per register tile of the widest kernel.
    pub const NR: usize = 8;
    /// Columns per step of a [`WideFn`]: its column counts are multiples.
    pub const WIDE: usize = 16;
}

/// A many-column kernel: `n` columns (a multiple of [`Kernels::WIDE`]) of
/// a [`Tile`], every output bit-identical to the tile kernels'.
///
/// # Safety
/// As [`TileFn`], for `n` columns.
pub(crate) type WideFn = unsafe fn(t: Tile, n: usize);

/// One level's packed kernels, per type: the level's own or, where it has
/// none, the next lower level's (its [`crate::isa::Table`] entry).
#[derive(Clone, Copy)]
pub(crate) struct Table([Option<Kernels>; DType::ALL.len()]);

impl Table {
    /// No kernels.
    #[allow(dead_code)] // unused on architectures without packed kernels
    const EMPTY: Table = Table([None; DType::ALL.len()]);

    /// The kernels `f` gives for each type: a level's own entries.
    #[allow(dead_code)] // unused on architectures without packed kernels
    fn from_fn(f: impl Fn(DType) -> Option<Kernels>) -> Table {
        let mut table = Table::EMPTY;
        for t in DType::ALL {
            table.0[t as usize] = f(t);
        }
        table
    }

    /// The kernels for `dtype`, if any.
    pub(crate) fn get(&self, dtype: DType) -> Option<Kernels> {
        self.0[dtype as usize]
    }

    /// These kernels, with `lower`'s for the types these have none for.
    pub(crate) fn over(mut self, lower: &Table) -> Table {
        for (own, lower) in self.0.iter_mut().zip(&lower.0) {
            *own = own.or(*lower);
        }
        self
    }
}

/// Level `isa`'s own packed kernels, without the fallback: each level's
/// entries are declared by its module's `*_table` function.
pub(crate) fn own(isa: Isa) -> Table {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_avx2::avx2_table(),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => x86_avx2::avx_vnni_table(),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::avx512_table(),
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => x86::vnni_table(),
        #[cfg(target_arch = "x86_64")]
        Isa::Amx => x86::amx_table(),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => aarch64_neon::neon_table(),
        #[allow(unreachable_patterns)]
        _ => Table::EMPTY,
    }
}

/// The packed kernels of `isa` for `dtype`, if it has them ([`has_kernels`]):
/// a lookup in the level's [`crate::isa::Table`].
pub(crate) fn kernels_for(isa: Isa, dtype: DType) -> Option<Kernels> {
    crate::isa::table(isa)?.packed.get(dtype)
}

/// Bytes of one prepared activation column of `k` elements for weights of
/// `dtype`: `k / 32` blocks of [`ACT_BLOCK`], or for the K-quants the Q8_K
/// row (`k / 256` blocks of 292 bytes).
pub(crate) fn act_bytes(dtype: DType, k: usize) -> usize {
    if k::layout(dtype).is_some() {
        DType::Q8_K.row_size(k)
    } else {
        k / QK * ACT_BLOCK
    }
}

/// The offset whose `-offset · Σq` term the per-block activation layout of
/// a legacy type carries (0 for the types with a Q8_1 sum or none); 128
/// for IQ4_XS, whose Q8_K rows carry `-128 ·` the 32-element sums in place
/// of the bsums ([`prepare_activation`]), so no other K type shares them.
pub(crate) fn act_offset(dtype: DType) -> i32 {
    match dtype {
        DType::Q4_0 => 8,
        DType::Q5_0 => 16,
        DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS => 128,
        _ => 0,
    }
}

/// Converts one activation row quantized to `vec_dot_type(dtype)` (Q8_0 or
/// Q8_1 bytes `q`) into the kernels' per-block layout in `out`
/// ([`act_bytes`]): the definition the kernels' own quantizers
/// ([`Kernels::quantize`]) are tested against. For the K-quants the layout
/// is the Q8_K row itself (a copy), except that IQ4_XS's bsums are
/// replaced by its bias terms (`k::iq4_xs_bias_terms`).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn prepare_activation(dtype: DType, q: &[u8], out: &mut [u8]) {
    if k::layout(dtype).is_some() {
        out.copy_from_slice(q);
        if dtype == DType::IQ4_XS {
            k::iq4_xs_bias_terms(out);
        }
        return;
    }
    let off = act_offset(dtype);
    let min = crate::quant::vec_dot_type(dtype) == DType::Q8_1;
    let ts = if min { 36 } else { 34 };
    let qo = if min { 4 } else { 2 };
    for (blk, o) in q.chunks_exact(ts).zip(out.chunks_exact_mut(ACT_BLOCK)) {
        let quants = &blk[qo..qo + QK];
        o[..QK].copy_from_slice(quants);
        let d = crate::quant::simd::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        o[32..36].copy_from_slice(&d.to_le_bytes());
        let tail = if min {
            crate::quant::simd::f16_to_f32(u16::from_le_bytes([blk[2], blk[3]])).to_bits()
        } else {
            let sum: i32 = quants.iter().map(|&x| i32::from(x as i8)).sum();
            (-off * sum) as u32
        };
        o[36..40].copy_from_slice(&tail.to_le_bytes());
    }
}

#[cfg(test)]
mod tests;

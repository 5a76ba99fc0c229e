//! What every level's packed kernels share: the type tags their const
//! generics take, the chunk geometry of [`super::Chunk::of`] as `const fn`s
//! the compiler folds per instantiation, the activation quantizer's loop
//! ([`quantize_blocks`], around a level's block quantizer), and
//! [`kernel_table`], which fills a level's [`super::Kernels`] table from its
//! `quantize::<T>` and `tile::<T, NR>` functions.

use super::ACT_BLOCK;
use crate::tensor::DType;

/// Type tag: Q4_0.
pub(super) const Q4_0: u8 = 0;
/// Type tag: Q4_1.
pub(super) const Q4_1: u8 = 1;
/// Type tag: Q5_0.
pub(super) const Q5_0: u8 = 2;
/// Type tag: Q5_1.
pub(super) const Q5_1: u8 = 3;
/// Type tag: Q8_0.
pub(super) const Q8_0: u8 = 4;
/// Type tag: Q4_K (AVX2: `x86_avx2_k.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const Q4_K: u8 = 5;
/// Type tag: Q6_K (AVX2: `x86_avx2_k.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const Q6_K: u8 = 6;
/// Type tag: Q5_K (AVX2: `x86_avx2_k.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const Q5_K: u8 = 7;

/// Type tag: Q2_K (AVX2: `x86_avx2_k23.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const Q2_K: u8 = 8;
/// Type tag: Q3_K (AVX2: `x86_avx2_k23.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const Q3_K: u8 = 9;
/// Type tag: IQ4_XS (AVX2: `x86_avx2_k.rs`; NEON: `aarch64_neon_k.rs`).
pub(super) const IQ4_XS: u8 = 10;

/// Type tag: IQ4_NL (AVX2 only: Q4_0's chunks, table values; `x86_avx2.rs`).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const IQ4_NL: u8 = 11;

/// True for the K-quant tags (the types with Q8_K activations).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const fn is_k(t: u8) -> bool {
    matches!(t, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS)
}

/// Chunk bytes of type `t`.
pub(super) const fn chunk_size(t: u8) -> usize {
    match t {
        Q4_0 | IQ4_NL => 288,
        Q4_1 => 320,
        Q5_0 => 352,
        Q5_1 => 384,
        _ => 544,
    }
}

/// Chunk bytes of the K type `t` (16 super-blocks, one per row).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const fn k_chunk_size(t: u8) -> usize {
    16 * match t {
        Q2_K => DType::Q2_K,
        Q3_K => DType::Q3_K,
        Q4_K => DType::Q4_K,
        Q5_K => DType::Q5_K,
        IQ4_XS => DType::IQ4_XS,
        _ => DType::Q6_K,
    }
    .type_size()
}

/// Activation dwords per sub-block of the K type `t`: 4 for the
/// 16-element sub-blocks (Q2_K, Q3_K, Q6_K), 8 for the 32-element ones.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const fn k_sub_dwords(t: u8) -> usize {
    match t {
        Q2_K | Q3_K | Q6_K => 4,
        _ => 8,
    }
}

/// Offsets of (scales, fifth-bit masks, quants) inside chunk `b` of a group
/// of type `t` (the layout of `super::Chunk::of`: chunks of 32 mod 64 bytes
/// put their scales last when `b` is even). Masks: Q5 only.
#[inline(always)]
pub(super) fn offsets(t: u8, b: usize) -> (usize, usize, usize) {
    let even = b.is_multiple_of(2);
    match t {
        Q4_0 | IQ4_NL if even => (256, 0, 0),
        Q4_0 | IQ4_NL => (0, 0, 32),
        Q4_1 => (0, 0, 64),
        Q5_0 if even => (320, 0, 64),
        Q5_0 => (0, 32, 96),
        Q5_1 => (0, 64, 128),
        _ if even => (512, 0, 0),
        _ => (0, 0, 32),
    }
}

/// The offset `OFF` of type `t`'s quants (its weights are `q - OFF`), whose
/// sum term `-OFF · Σ a` the prepared activations carry: 8 / 16 / 128 for
/// Q4_0 / Q5_0 / Q8_0; 128 for IQ4_NL, whose table values are signed but
/// which the AVX-VNNI kernels take biased by 128 (the kernels that use the
/// signed values ignore its sum term); 0 for the types with a minimum
/// (their sum term is Q8_1's `s` instead, [`has_min`]).
pub(super) const fn act_offset(t: u8) -> i32 {
    match t {
        Q4_0 => 8,
        Q5_0 => 16,
        Q8_0 | IQ4_NL => 128,
        _ => 0,
    }
}

/// True for the types with a minimum (`m`) per block.
pub(super) const fn has_min(t: u8) -> bool {
    t == Q4_1 || t == Q5_1
}

/// True for the 5-bit types (fifth-bit masks).
pub(super) const fn is_q5(t: u8) -> bool {
    t == Q5_0 || t == Q5_1
}

/// The activation quantizer of every level, around its block quantizer:
/// for each of the `nb` blocks of 32 f32 at `x`, `block(x, o)` quantizes the
/// block to Q8 (the 32 i8 quants written at `o`, the prepared block's bytes
/// 0..32) and returns `(d, Σq)`; then the scale and the sum term of
/// [`super::prepare_activation`]'s layout for weights of type tag `T`
/// follow: `d` rounded to f16 by `round` (and back to f32), and
/// `-OFF · Σq` as i32 (`OFF` = [`act_offset`]) or, for the types with a
/// minimum (Q8_1 activations), `round(Σq · d)`.
///
/// # Safety
/// `nb · 32` f32 readable at `x`, `nb · ACT_BLOCK` bytes writable at `out`;
/// `block` is only called with 32 readable f32 at its first argument and 32
/// writable bytes at its second, and may rely on that.
#[inline(always)]
pub(super) unsafe fn quantize_blocks<const T: u8>(
    x: *const f32,
    nb: usize,
    out: *mut u8,
    block: impl Fn(*const f32, *mut u8) -> (f32, i32),
    round: impl Fn(f32) -> f32,
) {
    for b in 0..nb {
        // SAFETY: block b's 32 f32 are readable and its ACT_BLOCK bytes
        // writable (contract).
        let (xb, o) = unsafe { (x.add(32 * b), out.add(b * ACT_BLOCK)) };
        let (d, sum) = block(xb, o);
        let tail = if has_min(T) {
            round(sum as f32 * d).to_bits()
        } else {
            (-act_offset(T) * sum) as u32
        };
        // SAFETY: scale at 32..36, sum term at 36..40 of the block.
        unsafe {
            o.add(32).cast::<f32>().write_unaligned(round(d));
            o.add(36).cast::<u32>().write_unaligned(tail);
        }
    }
}

/// Defines, in a level's module, `unsafe fn quantize<const T: u8>(x, nb,
/// out)` with `#[target_feature(enable = $features)]`: the level's
/// activation quantizer, [`quantize_blocks`] around the block quantizer
/// `$block` (`unsafe fn(*const f32, *mut u8) -> (f32, i32)`, the level's
/// Q8 rule) with the f16 rounding `$round` (`fn(f32) -> f32`).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_macros)
)]
macro_rules! block_quantizer {
    ($features:literal, $block:path, $round:path) => {
        /// Quantizes `nb` blocks of 32 f32 at `x` to Q8_0 or (types with a
        /// minimum) Q8_1 exactly as the level's row quantizer, straight
        /// into the prepared layout of [`super::prepare_activation`] for
        /// weights of type tag `T` (Q8_0 weights ignore the offset term; it
        /// is written all the same, so the layout is the one every level
        /// shares).
        ///
        /// # Safety
        /// `nb · 32` f32 readable at `x`, `nb · ACT_BLOCK` bytes writable
        /// at `out`; the CPU supports the level's features.
        #[target_feature(enable = $features)]
        unsafe fn quantize<const T: u8>(x: *const f32, nb: usize, out: *mut u8) {
            // SAFETY: the contract, forwarded; `quantize_blocks` hands the
            // block quantizer 32 readable f32 and 32 writable bytes.
            unsafe { quantize_blocks::<T>(x, nb, out, |x, q| $block(x, q), |v| $round(v)) }
        }
    };
}
pub(super) use block_quantizer;

/// Defines, in a level's module, `fn table<const T: u8>() -> Kernels`
/// (quantizer `$quantize`, an expression in `T`, and `tile::<T, 1..=8>`)
/// and `pub(super) fn kernels(dtype: DType) -> Option<Kernels>`, the
/// level's kernels for the types named (each a `DType` variant with a type
/// tag of the same name): what [`kernel_table`] and [`k_kernel_table`]
/// share. The caller's scope provides `tile`, `Kernels`, `TileFn`, `DType`
/// and the type tags.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_macros)
)]
macro_rules! level_table {
    ($quantize:expr; $($t:ident),*) => {
        /// The kernels of type tag `T`.
        fn table<const T: u8>() -> Kernels {
            Kernels {
                quantize: $quantize,
                tiles: tiles!(tile, T),
                wide: None,
            }
        }

        /// This module's kernels for `dtype`, or `None` for a type not
        /// named (its level's table function takes them from here).
        pub(super) fn kernels(dtype: DType) -> Option<Kernels> {
            Some(match dtype {
                $(DType::$t => table::<$t>(),)*
                _ => return None,
            })
        }
    };
}
pub(super) use level_table;

/// Defines, in a level's module, `fn table<const T: u8>() -> Kernels` (its
/// `quantize::<T>` and `tile::<T, 1..=8>`) and `pub(super) fn
/// kernels(dtype: DType) -> Option<Kernels>`, the level's kernels for
/// `dtype`: the five legacy types and the extra types named in the call
/// (each a `DType` variant with a type tag of the same name). The caller's
/// scope provides `quantize`, `tile`, `Kernels`, `TileFn`, `DType` and the
/// type tags.
macro_rules! kernel_table {
    ($($extra:ident),*) => {
        crate::quant::packed::tags::level_table!(quantize::<T>; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 $(, $extra)*);
    };
}
pub(super) use kernel_table;

/// The array of `$tile::<$t, 1>` ..= `$tile::<$t, 8>` as [`super::TileFn`]s
/// (`Kernels::tiles`).
macro_rules! tiles {
    ($tile:ident, $t:ident) => {
        [
            $tile::<$t, 1> as TileFn,
            $tile::<$t, 2>,
            $tile::<$t, 3>,
            $tile::<$t, 4>,
            $tile::<$t, 5>,
            $tile::<$t, 6>,
            $tile::<$t, 7>,
            $tile::<$t, 8>,
        ]
    };
}
pub(super) use tiles;

/// Defines, in a K-quant tile module, `quantize_q8_k` (the Q8_K row
/// quantizer of level `$isa`, bit-identical to the scalar one, which stands
/// in where the level has none), `table::<T>()` and `pub(super) fn
/// kernels(dtype: DType) -> Option<Kernels>` for the six packable K types.
/// The caller's scope provides `tile`, `Kernels`, `TileFn`, `DType`, `Isa`
/// and the K type tags.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_macros)
)]
macro_rules! k_kernel_table {
    ($isa:expr) => {
        /// Quantizes `nb` blocks of 256 f32 at `x` to Q8_K at `out` with
        /// the level's row quantizer: the K kernels' columns.
        ///
        /// # Safety
        /// `nb · 256` f32 readable at `x`, `nb · 292` bytes writable at
        /// `out`; the CPU runs the level.
        unsafe fn quantize_q8_k(x: *const f32, nb: usize, out: *mut u8) {
            // SAFETY: the contract.
            let (x, out) = unsafe {
                (
                    std::slice::from_raw_parts(x, 256 * nb),
                    std::slice::from_raw_parts_mut(out, DType::Q8_K.type_size() * nb),
                )
            };
            match crate::quant::simd::quantize_row_fn_for($isa, DType::Q8_K) {
                Some(q) => q(x, out),
                None => crate::quant::quantize_row_q8_k(x, out),
            }
        }

        /// [`quantize_q8_k`], then IQ4_XS's bias terms in place of the
        /// bsums (`k::iq4_xs_bias_terms`): IQ4_XS's prepared columns.
        ///
        /// # Safety
        /// As [`quantize_q8_k`].
        unsafe fn quantize_iq4_xs(x: *const f32, nb: usize, out: *mut u8) {
            // SAFETY: the contract, forwarded; then the `nb` blocks just
            // written, writable (the contract).
            unsafe {
                quantize_q8_k(x, nb, out);
                crate::quant::packed::k::iq4_xs_bias_terms(std::slice::from_raw_parts_mut(
                    out,
                    DType::Q8_K.type_size() * nb,
                ));
            }
        }

        crate::quant::packed::tags::level_table!(
            if T == IQ4_XS {
                quantize_iq4_xs
            } else {
                quantize_q8_k
            };
            Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS
        );
    };
}
pub(super) use k_kernel_table;

//! Runtime-dispatched SIMD kernels for the matmul inner loop: the dot
//! products of every weight type with its [`vec_dot_type`](super::vec_dot_type)
//! partner, and the activation conversions (f32 → Q8_0 / Q8_1 / F16).
//!
//! The levels are [`crate::isa::Isa`]'s. Each level's file declares its own
//! kernels in one `table!` list (type → kernel, for the one-column dot
//! products, the four-column ones and the quantizers). A level's
//! [`Kernels`] are this family's part of its one kernel table (the `isa`
//! module's docs: built once per level, from the level's own list and, for
//! the types it has none for, the next lower level's, [`Isa::lower`]);
//! [`kernels_for`] returns them. [`super::vec_dot_fn`] and [`super::quantize_row_fn`] look up the
//! [`crate::isa::active`] level's table; [`vec_dot_fn_for`],
//! [`quantize_row_fn_for`] and [`vec_dot4_fn_for`] (a one-row × four-column
//! kernel, where the level has one) a given level's (for the matmul, tests
//! and benchmarks).
//!
//! | level | CPU features | file | own kernels |
//! |-------|--------------|------|-------------|
//! | `Scalar` | — | `quant/dot*.rs`, `quant/q*.rs` | every dot product and quantizer (the reference) |
//! | `Avx2` | AVX2, FMA, F16C | `x86_avx2.rs`, `x86_avx2_k.rs` | the Q4_0 .. Q8_0, Q2_K .. Q6_K, IQ4_NL / IQ4_XS and float dot products, Q8_0 / Q8_1 / Q8_K / F16 quantize |
//! | `AvxVnni` | AVX2 level + AVX-VNNI | — | none: the AVX2 dot products (its own kernels are the packed tiles, `quant/packed/x86_avx2.rs`) |
//! | `Avx512` | + AVX-512 F, BW, VL | `x86_avx512.rs` | the Q4_0 .. Q8_0 and float dot products (two blocks per register, masked float tails); four-column Q4/Q5 dots |
//! | `Vnni` | + AVX-512 VNNI | `x86_vnni.rs` | the Q4_0 .. Q8_0 dot products (`vpdpbusd`), one- and four-column |
//! | `Neon` | aarch64 NEON (+ `dotprod` where present) | `aarch64_neon/` | the Q4_0 .. Q8_0, Q2_K .. Q6_K, IQ4_NL / IQ4_XS and float dot products, Q8_0 / Q8_1 / Q8_K quantize |
//!
//! A level without its own kernel for a type uses the next lower level's
//! (the AVX-512 and VNNI levels use the AVX2 K-quant and IQ4 dot products),
//! and then that level's four-column kernel
//! too, so the two stay bit-identical. The AVX-512 and VNNI 4/5-bit kernels
//! are one macro (`x86_avx512.rs`'s `nibble_dots`) instantiated per level
//! with its integer-sum primitive (`vpmaddubsw` + `vpmaddwd`, or `vpdpbusd`).
//!
//! Semantics against the scalar reference ([`super::vec_dot_q4_0_q8_0`], ...):
//!
//! * Quantizers are bit-identical (same scale arithmetic, same rounding:
//!   `roundf` for Q8_0 / Q8_1, ties to even for Q8_K; the same f16 rounding).
//! * The K-quant and IQ4 dot products are bit-identical: they compute each
//!   super-block's (IQ4_NL: block's) integer sums exactly and add the scalar
//!   reference's f32 term in its order (a NaN result is NaN on every level,
//!   its payload unspecified).
//! * The other quantized dot products compute every block's integer sum
//!   exactly (for any input bytes); only the f32 accumulation of the
//!   per-block terms `t_b = d_x d_y Σq_x q_y` (+ `m_x s_y`) is reordered
//!   (partial sums of four quant products per lane, lanes, then a tree).
//!   With `u = 2^-24` and `nb` blocks, `|simd - scalar| <= (nb + 8) · 2u · M` where
//!   `M = Σ_b (|d_x d_y| Σ_j |q_x,j q_y,j| + |m_x s_y|)`.
//! * Float dot products accumulate f32 products in f32 lanes (the scalar
//!   reference sums in f64): `|simd - scalar| <= (n / 16 + 16) · 2u · Σ |x_i y_i|`
//!   (each lane sums at most `n / 16` products for the 512-bit kernels,
//!   `n / 32` products in four accumulators of eight for AVX2, plus the tree).

use super::{DType, QuantizeRowFn, VecDot4Fn, VecDotFn};
use crate::isa::Isa;

#[cfg(target_arch = "aarch64")]
mod aarch64_neon;
#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64_neon::quantize_block_q8 as quantize_block_q8_neon;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_avx2::quantize_block_q8 as quantize_block_q8_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx2_k;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_vnni;

/// Number of [`DType`]s: the length of a [`Kernels`] column.
const TYPES: usize = DType::ALL.len();

/// One level's kernels, indexed by type: a slot holds the level's own kernel
/// or, where it has none, the one of the next lower level
/// ([`Isa::lower`]) that has one. Built once per level, in the level's
/// kernel table ([`kernels_for`]).
#[derive(Clone, Copy)]
pub struct Kernels {
    vec_dot: [Option<VecDotFn>; TYPES],
    vec_dot4: [Option<VecDot4Fn>; TYPES],
    quantize_row: [Option<QuantizeRowFn>; TYPES],
}

impl Kernels {
    /// No kernels at all.
    const EMPTY: Kernels = Kernels {
        vec_dot: [None; TYPES],
        vec_dot4: [None; TYPES],
        quantize_row: [None; TYPES],
    };

    /// The dot product of a `dtype` row with a `vec_dot_type(dtype)` row,
    /// or `None` if the type has none.
    pub fn vec_dot(&self, dtype: DType) -> Option<VecDotFn> {
        self.vec_dot[dtype as usize]
    }

    /// The four-column dot product for `dtype`, bit-identical to four calls
    /// of [`Kernels::vec_dot`], or `None` where the level has none.
    pub fn vec_dot4(&self, dtype: DType) -> Option<VecDot4Fn> {
        self.vec_dot4[dtype as usize]
    }

    /// The row quantizer (f32 → `dtype`), or `None` if `dtype` cannot be
    /// quantized to.
    pub fn quantize_row(&self, dtype: DType) -> Option<QuantizeRowFn> {
        self.quantize_row[dtype as usize]
    }

    /// These kernels, with `lower`'s in the slots these leave empty. A
    /// four-column kernel comes from the level whose one-column kernel is
    /// used, so that the two stay bit-identical.
    pub(crate) fn over(mut self, lower: &Kernels) -> Kernels {
        for t in 0..TYPES {
            if self.vec_dot[t].is_none() {
                self.vec_dot[t] = lower.vec_dot[t];
                self.vec_dot4[t] = lower.vec_dot4[t];
            }
            if self.quantize_row[t].is_none() {
                self.quantize_row[t] = lower.quantize_row[t];
            }
        }
        self
    }
}

/// Declares a level's own kernels as `pub(super) fn own() -> Kernels`:
///
/// * `dot: [T => imp, ...]`: `unsafe fn imp(nb, x, y) -> f32` over `nb`
///   blocks (elements for the float types) of `DType::T` rows, wrapped in a
///   safe [`VecDotFn`] that checks the row lengths first ([`dot_blocks`]);
/// * `dot: all`: the same for every type with a dot product, each by the
///   level's `dot_<type>_imp`;
/// * `dot4: [T => imp_n, ...]`: `unsafe fn imp_n::<C>(nb, x, [y; C]) -> [f32; C]`,
///   wrapped likewise as a [`VecDot4Fn`] with `C = 4`;
/// * `quantize: [T => f, ...]`: safe [`QuantizeRowFn`]s, as they are.
///
/// The wrapped `unsafe fn`s may assume the level's CPU features: [`own`]
/// tables are only reached through the level's kernel table, which exists
/// only for a level this CPU runs.
macro_rules! table {
    // `dot: all`: every type with a dot product, each by this level's
    // `dot_<type>_imp` (the levels that implement them all).
    (dot: all, $($rest:tt)*) => {
        super::table! {
            dot: [
                Q4_0 => dot_q4_0_imp, Q4_1 => dot_q4_1_imp, Q5_0 => dot_q5_0_imp,
                Q5_1 => dot_q5_1_imp, Q8_0 => dot_q8_0_imp,
                F32 => dot_f32_imp, F16 => dot_f16_imp, BF16 => dot_bf16_imp,
                Q2_K => dot_q2_k_imp, Q3_K => dot_q3_k_imp, Q4_K => dot_q4_k_imp,
                Q5_K => dot_q5_k_imp, Q6_K => dot_q6_k_imp,
                IQ4_NL => dot_iq4_nl_imp, IQ4_XS => dot_iq4_xs_imp,
            ],
            $($rest)*
        }
    };
    (
        dot: [$($dt:ident => $dimp:ident),* $(,)?],
        dot4: [$($ft:ident => $fimp:ident),* $(,)?],
        quantize: [$($qt:ident => $qf:ident),* $(,)?] $(,)?
    ) => {
        /// This level's own kernels (the fallback is added by the caller).
        pub(super) fn own() -> super::Kernels {
            #[allow(unused_imports)]
            use super::super::{DType, VecDot4Fn, VecDotFn};
            let mut k = super::Kernels::EMPTY;
            $(
                k.vec_dot[DType::$dt as usize] = Some({
                    fn dot(n: usize, x: &[u8], y: &[u8]) -> f32 {
                        let nb = super::dot_blocks(DType::$dt, n, x, y);
                        // SAFETY: only handed out once the CPU was checked for
                        // this level's features; both rows hold `nb` whole
                        // blocks (elements for the float types).
                        unsafe { $dimp(nb, x.as_ptr(), y.as_ptr()) }
                    }
                    dot as VecDotFn
                });
            )*
            $(
                k.vec_dot4[DType::$ft as usize] = Some({
                    fn dot4(n: usize, x: &[u8], ys: [&[u8]; 4], out: &mut [f32; 4]) {
                        let nb = ys.map(|y| super::dot_blocks(DType::$ft, n, x, y));
                        // SAFETY: only handed out once the CPU was checked for
                        // this level's features; all rows hold `nb` whole blocks.
                        *out = unsafe { $fimp::<4>(nb[0], x.as_ptr(), ys.map(|y| y.as_ptr())) };
                    }
                    dot4 as VecDot4Fn
                });
            )*
            $(
                k.quantize_row[DType::$qt as usize] = Some($qf);
            )*
            k
        }
    };
}
use table;

/// Level `isa`'s own kernels, without the fallback (the level's file's
/// `table!` list; its entry in [`crate::isa::Table`]).
pub(crate) fn own(isa: Isa) -> Kernels {
    match isa {
        Isa::Scalar => {
            let mut k = Kernels::EMPTY;
            for t in DType::ALL {
                k.vec_dot[t as usize] = super::scalar_vec_dot_fn(t);
                k.quantize_row[t as usize] = super::scalar_quantize_row_fn(t);
            }
            k
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_avx2::own(),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86_avx512::own(),
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => x86_vnni::own(),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => aarch64_neon::own(),
        #[allow(unreachable_patterns)]
        _ => Kernels::EMPTY,
    }
}

/// The kernels of level `isa` (with the fallback to the lower levels
/// resolved): those of its kernel table (`isa::Table`), built on first
/// use; `None` if this CPU cannot run `isa`.
pub fn kernels_for(isa: Isa) -> Option<&'static Kernels> {
    crate::isa::table(isa).map(|t| &t.quant)
}

/// The dot product of a `dtype` row with a `vec_dot_type(dtype)` row at
/// level `isa` (falling back to the next lower level's kernel for a type it
/// has none of its own for), or `None` if this CPU cannot run `isa` or the
/// type has no dot product.
pub fn vec_dot_fn_for(isa: Isa, dtype: DType) -> Option<VecDotFn> {
    kernels_for(isa)?.vec_dot(dtype)
}

/// The four-column dot product of level `isa` for `dtype`, bit-identical to
/// four calls of [`vec_dot_fn_for`]`(isa, dtype)`, or `None` where the level
/// has none (then call the one-column kernel four times). Present for the
/// quantized types at the AVX-512 (4/5-bit) and VNNI (all) levels.
pub fn vec_dot4_fn_for(isa: Isa, dtype: DType) -> Option<VecDot4Fn> {
    kernels_for(isa)?.vec_dot4(dtype)
}

/// The row quantizer (f32 → `dtype`) at level `isa`, with the same fallback
/// as [`vec_dot_fn_for`]; `None` if this CPU cannot run `isa` or `dtype`
/// cannot be quantized to.
pub fn quantize_row_fn_for(isa: Isa, dtype: DType) -> Option<QuantizeRowFn> {
    kernels_for(isa)?.quantize_row(dtype)
}

/// Little-endian f16 bits → f32, exactly (normals, subnormals, ±inf; NaNs stay
/// NaN with their payload), without a table or a runtime feature check.
///
/// No f32 subnormal is ever an operand: LLVM vectorizes this with unused
/// lanes holding other bits, and a subnormal operand costs a ~150-cycle
/// microcode assist on x86 (measured: 3× slower dot products).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let em = h & 0x7fff;
    let bits = if em < 0x0400 {
        // Subnormal or zero: em · 2^-24, exact (em < 2^10), a normal result.
        (em as f32 * f32::from_bits(0x3380_0000)).to_bits()
    } else if em >= 0x7c00 {
        (em << 13) | 0x7f80_0000
    } else {
        // Rebias the exponent from 15 to 127.
        (em << 13) + (112 << 23)
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// The f16 scale stored at `p` (2 bytes, any alignment) as f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
#[allow(dead_code)] // unused on architectures without SIMD kernels
unsafe fn scale_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes.
    f16_to_f32(u16::from_le_bytes(unsafe { [*p, *p.add(1)] }))
}

/// The block loop of the SIMD K-quant dot products: `Σ_b term(x_b, y_b)`
/// over the `nb` blocks of `XB` bytes of `x` and `YB` bytes of `y`, added
/// in block order from 0 as the scalar reference adds its block terms.
///
/// # Safety
/// `nb` blocks of both rows are readable; `term` may rely on being called
/// with in-bounds blocks only.
#[inline(always)]
#[allow(dead_code)] // unused on architectures without SIMD kernels
unsafe fn sum_blocks<const XB: usize, const YB: usize>(
    nb: usize,
    x: *const u8,
    y: *const u8,
    mut term: impl FnMut(*const u8, *const u8) -> f32,
) -> f32 {
    let mut sumf = 0.0f32;
    for i in 0..nb {
        // SAFETY: block i < nb of both rows (contract).
        let (bx, by) = unsafe { (x.add(i * XB), y.add(i * YB)) };
        sumf += term(bx, by);
    }
    sumf
}

/// Checks the length contract every SIMD dot product relies on for its
/// raw-pointer reads: whole blocks of `n`, and both rows at least that long.
/// Returns the number of blocks (elements for float types).
#[inline(always)]
#[allow(dead_code)] // unused on architectures without SIMD kernels
fn dot_blocks(wt: DType, n: usize, x: &[u8], y: &[u8]) -> usize {
    let yt = super::vec_dot_type(wt);
    let nb = n / wt.block_size();
    debug_assert!(super::whole_blocks(wt, n), "{wt} dot: n = {n}");
    assert!(
        x.len() >= nb * wt.type_size() && y.len() >= nb * yt.type_size(),
        "{wt} dot of {n}: rows of {} and {} bytes are too short",
        x.len(),
        y.len()
    );
    nb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_matches_half_for_every_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
                assert_eq!(got.to_bits() >> 31, want.to_bits() >> 31, "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }
}

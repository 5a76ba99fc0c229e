//! The integer vector operations of both x86 widths ([`IntLanes`], on
//! `__m512i` and `__m256i` themselves, so that generic helpers take the
//! width from their arguments), which the K-quant kernels of both widths
//! share their helpers over, as the f32 kernels do over [`Lanes`].

use super::{Lanes, L256, L512};
use std::arch::x86_64::*;

/// Integer vector operations of one width (the vector is `Self`: 32-bit
/// lanes, taken as bytes, i16 or i32 by the operation), with the f32 lanes
/// of the same width ([`IntLanes::F`]). Every function requires the
/// width's CPU features (AVX2 or AVX-512F + BW); pointer arguments must be
/// readable for what they read.
pub(crate) trait IntLanes: Copy {
    /// The f32 lanes of the same width.
    type F: Lanes;
    unsafe fn zero() -> Self;
    /// The 4 bytes at `p` (any alignment), as an i32, in every lane.
    unsafe fn bcast(p: *const u8) -> Self;
    /// `x` in every byte.
    unsafe fn splat8(x: i8) -> Self;
    unsafe fn and(a: Self, b: Self) -> Self;
    unsafe fn or(a: Self, b: Self) -> Self;
    /// i16 lanes shifted left by `n` (the count in a register, constant-folded
    /// to an immediate where `n` is a constant).
    unsafe fn shl16(a: Self, n: usize) -> Self;
    /// i16 lanes shifted right (logical) by `n`, as [`IntLanes::shl16`].
    unsafe fn shr16(a: Self, n: usize) -> Self;
    /// i32 lanes converted to f32 (round to nearest even).
    unsafe fn to_f32(v: Self) -> <Self::F as Lanes>::V;
    /// `v` through an empty `asm!` statement that may read and write
    /// memory: work that `v` sums is done before it, loads after it come
    /// after it (the K kernels' step fences).
    unsafe fn fence(v: Self) -> Self;
}

/// Implements [`IntLanes`] for the integer vector `$i` with the f32 lanes
/// `$f` (vectors `$fv`) from that width's intrinsics (the same operations at both widths, so
/// written once; generics cannot pick an intrinsic by width). `$reg` is the
/// width's `asm!` register class and `$feat` the target feature it needs.
macro_rules! ints {
    ($i:ty, $f:ty, $fv:ty, $reg:ident, $feat:literal,
     [$zero:ident, $set1_32:ident, $set1_8:ident, $and:ident, $or:ident],
     [$sll16:ident, $srl16:ident, $cvt:ident]) => {
        impl IntLanes for $i {
            type F = $f;
            #[inline(always)]
            unsafe fn zero() -> $i {
                $zero()
            }
            #[inline(always)]
            unsafe fn bcast(p: *const u8) -> $i {
                // SAFETY: forwarded contract (4 readable bytes).
                $set1_32(unsafe { p.cast::<i32>().read_unaligned() })
            }
            #[inline(always)]
            unsafe fn splat8(x: i8) -> $i {
                $set1_8(x)
            }
            #[inline(always)]
            unsafe fn and(a: $i, b: $i) -> $i {
                $and(a, b)
            }
            #[inline(always)]
            unsafe fn or(a: $i, b: $i) -> $i {
                $or(a, b)
            }
            #[inline(always)]
            unsafe fn shl16(a: $i, n: usize) -> $i {
                $sll16(a, _mm_cvtsi32_si128(n as i32))
            }
            #[inline(always)]
            unsafe fn shr16(a: $i, n: usize) -> $i {
                $srl16(a, _mm_cvtsi32_si128(n as i32))
            }
            #[inline(always)]
            unsafe fn to_f32(v: $i) -> $fv {
                $cvt(v)
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fence(v: $i) -> $i {
                let mut x = v;
                // SAFETY: no instructions; `x` stays in its register.
                unsafe {
                    std::arch::asm!("/* {0} */", inout($reg) x, options(nostack, preserves_flags))
                };
                x
            }
        }
    };
}

// AVX-512.
ints! {
    __m512i, L512, __m512, zmm_reg, "avx512f",
    [_mm512_setzero_si512, _mm512_set1_epi32, _mm512_set1_epi8, _mm512_and_si512, _mm512_or_si512],
    [_mm512_sll_epi16, _mm512_srl_epi16, _mm512_cvtepi32_ps]
}

// AVX2.
ints! {
    __m256i, L256, __m256, ymm_reg, "avx",
    [_mm256_setzero_si256, _mm256_set1_epi32, _mm256_set1_epi8, _mm256_and_si256, _mm256_or_si256],
    [_mm256_sll_epi16, _mm256_srl_epi16, _mm256_cvtepi32_ps]
}

//! The aarch64 integer dot-product instructions the kernels use, as inline
//! assembly: their intrinsics (`vdotq_s32`, `vdotq_laneq_s32`,
//! `vmmlaq_s32`) are not stable Rust. Each is a safe function with its
//! extension's `#[target_feature]`, so a caller compiled with the same
//! features (and only such a caller, which checked the CPU) calls and
//! inlines it.

use std::arch::aarch64::*;
use std::arch::asm;

/// Defines `$name(acc, w, a) -> acc` (with a `const L` lane index where
/// the instruction takes one) over the three-register instruction `$ins`
/// (operands `{acc}`, `{w}`, `{a}`, and `{L}`), enabling `$features`. The
/// instructions differ only in their text and feature, which generics
/// cannot pick (`asm!` needs a literal).
macro_rules! i8_dot {
    ($(#[$doc:meta])* $name:ident $(<$l:ident>)?, $features:literal, $ins:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        #[inline]
        pub(crate) fn $name$(<const $l: i32>)?(
            acc: int32x4_t,
            w: int8x16_t,
            a: int8x16_t,
        ) -> int32x4_t {
            let mut acc = acc;
            // SAFETY: the instruction reads and writes only these three
            // vector registers; the function enables its extension, so its
            // callers checked the CPU.
            unsafe {
                asm!(
                    $ins,
                    acc = inout(vreg) acc,
                    w = in(vreg) w,
                    a = in(vreg) a,
                    $($l = const $l,)?
                    options(pure, nomem, nostack, preserves_flags),
                )
            };
            acc
        }
    };
}

i8_dot!(
    /// `acc` plus, per lane `r`, `Σ_{t<4} w[4 r + t] · a[4 r + t]` (i8 × i8
    /// → i32, exact): `sdot`.
    sdot,
    "neon,dotprod",
    "sdot {acc:v}.4s, {w:v}.16b, {a:v}.16b"
);

i8_dot!(
    /// `acc` plus, per lane `r`, `Σ_{t<4} w[4 r + t] · a[4 L + t]` (i8 × i8
    /// → i32, exact): `sdot` by element.
    sdot_lane<L>,
    "neon,dotprod",
    "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{L}]"
);

i8_dot!(
    /// `acc` plus the 2 × 2 i32 product `w · aᵀ` of two 2 × 8 i8 matrices
    /// (rows of 8 bytes): lane `2 i + j` adds `Σ_{t<8} w[8 i + t] · a[8 j +
    /// t]` (exact): `smmla`.
    smmla,
    "neon,i8mm",
    "smmla {acc:v}.4s, {w:v}.16b, {a:v}.16b"
);

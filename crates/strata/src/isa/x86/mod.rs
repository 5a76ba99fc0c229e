//! x86-64 f32 vector code shared by every kernel family: the lane
//! abstraction ([`Lanes`], one implementation per level: [`L512`] for
//! AVX-512 F/BW/VL, [`L256`] for AVX2 + FMA + F16C), the crate's two
//! vectorized exponentials ([`exp`], fast and within 2 ulp; [`expf`],
//! bit-identical to libm's), and row helpers written once over the lanes.
//!
//! A kernel is a generic `unsafe fn k<L: Lanes>(..)` marked
//! `#[inline(always)]`; [`per_level!`] instantiates it per level inside
//! `#[target_feature]` functions (modules `avx512` and `avx2`), and the
//! family's file declares each level's table entries from those instances
//! (consts `AVX2` and `AVX512`, one entry per instantiation of a generic
//! kernel), which the level's kernel table holds (the `isa` module's docs:
//! the VNNI and AMX levels take AVX-512's, AVX-VNNI AVX2's). Every
//! function here requires its level's CPU features (a kernel table exists
//! only for a level the CPU runs) and raw pointers that cover the element
//! counts given.
//!
//! **exp.** `e^x` is Cephes' `expf` scheme: `n = round(x · log2 e)`, `r = x
//! − n · ln 2` (Cody–Waite split of ln 2), `e^r = 1 + r + r² · P(r)` with a
//! degree-5 `P` (Cephes' coefficients), summed as `(r² · P(r) + r) + 1` — one
//! rounding at the scale of 1 instead of two for `r² · P(r) + (r + 1)` —
//! times `2^n`. Relative error within
//! 2 ulp of the correctly rounded value for `x` in [−87.3, 88.3] (tested
//! against f64); 0 below [`EXP_LO`] (where e^x is subnormal) and for −∞;
//! +∞ above [`EXP_HI`]; NaN for NaN. soft_max and FLASH_ATTN_EXT both use
//! it at the SIMD levels (the scalar level uses libm's `exp` everywhere);
//! FLASH_ATTN_EXT's `x − max ≤ 0` take [`exp_bounded`], the same without
//! the overflow check. The lanes below `EXP_LO` run the polynomial on 0
//! ([`exp_arg`]), never on `EXP_LO`, whose product would be subnormal.
//!
//! **expf.** [`expf`] returns exactly `f32::exp`'s bits (glibc's `expf`
//! recomputed in f64 lanes, module [`expf`](mod@expf)): for SiLU and
//! SwiGLU, whose model-level results moved with a 4-ulp exp.

pub(crate) mod amx;
pub(crate) mod expf;
mod ints;
mod lanes;

pub(crate) use ints::IntLanes;
pub(crate) use lanes::{Lanes, L256, L512};

use std::arch::x86_64::*;

/// An all-ones mask of the low `n` lanes (n <= 16).
#[inline(always)]
pub(crate) fn mask16(n: usize) -> __mmask16 {
    if n >= 16 {
        !0
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// Below this, e^x is subnormal: [`exp`] returns 0.
pub(crate) const EXP_LO: f32 = -87.336_55;
/// Above this, e^x overflows f32: [`exp`] returns +inf.
pub(crate) const EXP_HI: f32 = 88.722_84;
/// ln 2 in two parts (Cody–Waite): `LN2_HI` has few enough bits that
/// `n · LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// e^r − 1 − r = r² · P(r), Cephes expf's coefficients (highest first).
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `e^x` per lane (module docs: error and range).
#[inline(always)]
pub(crate) unsafe fn exp<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: only lane arithmetic; the caller has the level's features.
    unsafe { L::exp_above(x, exp_bounded::<L>(x)) }
}

/// [`exp`] for lanes at most [`Lanes::EXP_FAST_HI`] (or NaN), such as a
/// softmax's `x - max`: the same bits there, without
/// [`Lanes::exp_above`]'s check of the larger lanes. At AVX2 that check is
/// a branch to libm calls, whose register clobbers kept the callers' sums
/// in memory (FLASH_ATTN_EXT's softmax). A larger lane gives e^`EXP_FAST_HI`
/// (the clamp): finite and wrong, never UB.
#[inline(always)]
pub(crate) unsafe fn exp_bounded<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: only lane arithmetic; the caller has the level's features.
    unsafe {
        let lo = L::splat(EXP_LO);
        let xc = exp_arg::<L>(x);
        let n = L::round_int(L::mul(xc, L::splat(std::f32::consts::LOG2_E)));
        let r = L::fma(n, L::splat(-LN2_HI), xc);
        let r = L::fma(n, L::splat(-LN2_LO), r);
        let mut p = L::splat(EXP_P[0]);
        for &c in &EXP_P[1..] {
            p = L::fma(p, r, L::splat(c));
        }
        let e = L::add(L::fma(p, L::mul(r, r), r), L::splat(1.0));
        L::select_lt(x, lo, L::zero(), L::pow2(e, n))
    }
}

/// The argument [`exp_bounded`]'s polynomial takes for `x`: `x` at most
/// [`Lanes::EXP_FAST_HI`], and 0 for the lanes below [`EXP_LO`] (−∞
/// included: masked scores), whose result is replaced by 0 anyway. Not
/// `EXP_LO` itself: e^`EXP_LO`'s last multiply by 2⁻¹²⁶ gives a subnormal,
/// which costs a microcode assist per vector at AVX2 (FLASH_ATTN_EXT's
/// masked tiles ran 2× slower). NaN compares false and passes, as does
/// min(hi, NaN).
#[inline(always)]
pub(crate) unsafe fn exp_arg<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: only lane arithmetic; the caller has the level's features.
    unsafe {
        let xc = L::select_lt(x, L::splat(EXP_LO), L::zero(), x);
        L::min(L::splat(L::EXP_FAST_HI), xc)
    }
}

/// `f32::exp` per lane, bit for bit where this process's libm is glibc's
/// (module [`expf`](mod@expf)); lanes with `|x| >= 88` or NaN are computed
/// by `f32::exp` itself.
#[inline(always)]
pub(crate) unsafe fn expf<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: lane arithmetic, and stores and loads of W <= 16 f32 to and
    // from 16-element arrays; the caller has the level's features.
    unsafe {
        let y = L::expf_fast(x);
        let slow = L::abs_not_below(x, expf::SLOW);
        if slow == 0 {
            return y;
        }
        let (mut xs, mut ys) = ([0f32; 16], [0f32; 16]);
        L::store(xs.as_mut_ptr(), x);
        L::store(ys.as_mut_ptr(), y);
        expf::patch(&xs, &mut ys, slow);
        L::load(ys.as_ptr())
    }
}

/// The first `n < W` f32 at `p` (any alignment), zeros after.
#[inline(always)]
pub(crate) unsafe fn load_part<L: Lanes>(p: *const f32, n: usize) -> L::V {
    let mut b = [0f32; 16];
    // SAFETY: the caller guarantees n readable f32 at p; n < W <= 16; a
    // byte copy needs no alignment.
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr().cast::<u8>(), 4 * n);
        L::load(b.as_ptr())
    }
}

/// Stores the first `n < W` lanes of `v` at `p`.
#[inline(always)]
pub(crate) unsafe fn store_part<L: Lanes>(p: *mut f32, v: L::V, n: usize) {
    let mut b = [0f32; 16];
    // SAFETY: the caller guarantees n writable f32 at p; n < W <= 16.
    unsafe {
        L::store(b.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(b.as_ptr(), p, n);
    }
}

/// `W` 16-bit values at `p` (any alignment) widened to f32: bf16 when
/// `BF` ([`Lanes::load_bf16`]), else f16 ([`Lanes::load_h`]).
#[inline(always)]
pub(crate) unsafe fn load16<L: Lanes, const BF: bool>(p: *const u16) -> L::V {
    // SAFETY: the caller guarantees W readable values at p.
    unsafe {
        if BF {
            L::load_bf16(p)
        } else {
            L::load_h(p)
        }
    }
}

/// The first `n < W` 16-bit values at `p` (any alignment) as [`load16`],
/// zeros after.
#[inline(always)]
pub(crate) unsafe fn load16_part<L: Lanes, const BF: bool>(p: *const u16, n: usize) -> L::V {
    let mut b = [0u16; 16];
    // SAFETY: the caller guarantees n readable values at p; n < W <= 16; a
    // byte copy needs no alignment.
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr().cast::<u8>(), 2 * n);
        load16::<L, BF>(b.as_ptr())
    }
}

/// Widens `n` 16-bit values at `src` (any alignment; bf16 when `BF`, else
/// f16) to f32 at `dst`, exactly: whole vectors, then the partial one.
#[inline(always)]
pub(crate) unsafe fn widen16<L: Lanes, const BF: bool>(src: *const u16, n: usize, dst: *mut f32) {
    // SAFETY: the caller guarantees n source values and n destination f32.
    unsafe {
        let mut i = 0;
        while i + L::W <= n {
            L::store(dst.add(i), load16::<L, BF>(src.add(i)));
            i += L::W;
        }
        if i < n {
            let v = load16_part::<L, BF>(src.add(i), n - i);
            store_part::<L>(dst.add(i), v, n - i);
        }
    }
}

/// Instantiates generic kernels per level: for each listed
/// `fn name<...>(args) -> ret`, the modules `avx512` and `avx2` get a
/// `#[target_feature]` function `name` calling `super::name::<L512, ..>` /
/// `super::name::<L256, ..>` (the generic's first parameter is the lanes),
/// for the level's table entries to point to. Attributes written before
/// an entry (`#[cfg(test)]`) go on both instances.
///
/// # Safety (of the generated functions)
/// The caller has checked the level's CPU features and meets the generic
/// kernel's own contract.
macro_rules! per_level {
    ($($(#[$at:meta])* fn $name:ident $(<$(const $c:ident: $ct:ty),*>)? ($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)?;)*) => {
        $crate::isa::x86::per_level!(@level avx512, $crate::isa::x86::L512, "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
            $($(#[$at])* fn $name $(<$(const $c: $ct),*>)? ($($a: $t),*) $(-> $r)?;)*);
        $crate::isa::x86::per_level!(@level avx2, $crate::isa::x86::L256, "avx2,fma,f16c",
            $($(#[$at])* fn $name $(<$(const $c: $ct),*>)? ($($a: $t),*) $(-> $r)?;)*);
    };
    (@level $m:ident, $l:ty, $feat:literal, $($(#[$at:meta])* fn $name:ident $(<$(const $c:ident: $ct:ty),*>)? ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {
        /// The kernels instantiated at one level (see `per_level!`).
        pub(crate) mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                /// The level's instance of the generic kernel of the same name.
                ///
                /// # Safety
                /// The level's CPU features; the generic kernel's contract.
                $(#[$at])*
                #[target_feature(enable = $feat)]
                #[allow(clippy::too_many_arguments)]
                pub(crate) unsafe fn $name $(<$(const $c: $ct),*>)? ($($a: $t),*) $(-> $r)? {
                    // SAFETY: forwarded contract.
                    unsafe { super::$name::<$l $($(, $c)*)?>($($a),*) }
                }
            )*
        }
    };
}
pub(crate) use per_level;

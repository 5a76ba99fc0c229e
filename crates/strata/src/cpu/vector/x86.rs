//! x86-64 bodies of [`super`]'s helpers, written once over
//! [`Lanes`] and instantiated per level by [`per_level!`] (modules
//! `avx512` and `avx2`), and the two AVX-512-only helpers (bf16 rounding,
//! the f64 sum of squares); [`AVX2`] and [`AVX512`] are the levels' table
//! entries. Every function is `unsafe` for two reasons only: the caller
//! must run on a CPU with its level's features (the table's kernels do),
//! and the raw pointers must cover the element counts given.

use super::Kernels;
use crate::isa::x86::{exp, expf, load_part, mask16, per_level, store_part, widen16, Lanes};
use std::arch::x86_64::*;

per_level! {
    fn f16_to_f32(n: usize, src: *const u8, dst: *mut f32);
    fn bf16_to_f32(n: usize, src: *const u8, dst: *mut f32);
    fn f32_to_f16(n: usize, src: *const f32, dst: *mut u8) -> usize;
    fn round_f16(n: usize, x: *mut f32) -> usize;
    fn exp_shifted(n: usize, x: *mut f32, shift: f32) -> usize;
    fn exp_libm(n: usize, x: *mut f32) -> usize;
    fn silu(n: usize, x: *mut f32) -> usize;
    fn swiglu(n: usize, g: *const f32, u: *const f32, out: *mut f32) -> usize;
}

/// The vector kernels of the lanes level whose `per_level!` module is `$l`.
macro_rules! lanes_kernels {
    ($l:ident) => {
        Kernels {
            f16_to_f32: Some($l::f16_to_f32),
            bf16_to_f32: Some($l::bf16_to_f32),
            f32_to_f16: Some($l::f32_to_f16),
            round_f16: Some($l::round_f16),
            exp_shifted: Some($l::exp_shifted),
            exp_libm: Some($l::exp_libm),
            silu: Some($l::silu),
            swiglu: Some($l::swiglu),
            ..Kernels::NONE
        }
    };
}

/// The AVX2 level's vector kernels (AVX-VNNI's too, through the fallback).
pub(super) const AVX2: Kernels = lanes_kernels!(avx2);

/// The AVX-512 level's vector kernels (VNNI's and AMX's too): its lanes'
/// and the two AVX-512-only ones.
pub(super) const AVX512: Kernels = Kernels {
    f32_to_bf16: Some(f32_to_bf16_avx512),
    sum_squares: Some(sum_sq_avx512),
    ..lanes_kernels!(avx512)
};

/// f16 → f32 (exact), a vector at a time, then the partial one.
///
/// # Safety
/// The level's features; `src` holds `n` f16, `dst` room for `n` f32.
#[inline(always)]
unsafe fn f16_to_f32<L: Lanes>(n: usize, src: *const u8, dst: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe { widen16::<L, false>(src.cast(), n, dst) }
}

/// bf16 → f32 (a shift), as [`f16_to_f32`].
///
/// # Safety
/// The level's features; `src` holds `n` bf16, `dst` room for `n` f32.
#[inline(always)]
unsafe fn bf16_to_f32<L: Lanes>(n: usize, src: *const u8, dst: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe { widen16::<L, true>(src.cast(), n, dst) }
}

/// f32 → f16 with `vcvtps2ph` (round to nearest even), a vector at a time;
/// a vector holding a NaN is converted by `half` (payload match). Returns
/// the number converted (all but a tail of fewer than `W`).
///
/// # Safety
/// The level's features; `src` holds `n` f32, `dst` room for `n` f16.
#[inline(always)]
unsafe fn f32_to_f16<L: Lanes>(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + L::W <= n {
        // SAFETY: elements i .. i + W <= n of both rows are in bounds.
        unsafe {
            let v = L::load(src.add(i));
            if L::any_nan(v) {
                for j in i..i + L::W {
                    let h = half::f16::from_f32(*src.add(j)).to_bits();
                    dst.add(2 * j).cast::<u16>().write_unaligned(h);
                }
            } else {
                L::store_h(dst.add(2 * i).cast(), v);
            }
        }
        i += L::W;
    }
    i
}

/// x = f32(f16(x)) in place, a vector at a time (NaN vectors left to the
/// caller's scalar loop: returns the index of the first unconverted value).
///
/// # Safety
/// The level's features; `x` holds `n` f32.
#[inline(always)]
unsafe fn round_f16<L: Lanes>(n: usize, x: *mut f32) -> usize {
    let mut i = 0;
    while i + L::W <= n {
        // SAFETY: elements i .. i + W <= n are in bounds.
        unsafe {
            let v = L::load(x.add(i));
            if L::any_nan(v) {
                return i;
            }
            L::store(x.add(i), L::round_h(v));
        }
        i += L::W;
    }
    i
}

/// `x = e^(x - shift)` in place, a vector at a time, and the last partial
/// vector when [`Lanes::TAIL`]; returns the count done.
///
/// # Safety
/// The level's features; `x` covers n f32.
#[inline(always)]
unsafe fn exp_shifted<L: Lanes>(n: usize, x: *mut f32, shift: f32) -> usize {
    let mut i = 0;
    // SAFETY: every access is to elements below n.
    unsafe {
        let s = L::splat(shift);
        while i + L::W <= n {
            let p = x.add(i);
            L::store(p, exp::<L>(L::sub(L::load(p), s)));
            i += L::W;
        }
        if L::TAIL && i < n {
            let p = x.add(i);
            let v = exp::<L>(L::sub(load_part::<L>(p, n - i), s));
            store_part::<L>(p, v, n - i);
            i = n;
        }
    }
    i
}

/// SiLU per lane in the scalar code's operations and order,
/// `x / (1 + e^(-x))` in f32 with [`expf`], so bit-identical to it.
///
/// # Safety
/// The level's features.
#[inline(always)]
unsafe fn silu_lanes<L: Lanes>(x: L::V) -> L::V {
    // SAFETY: lane arithmetic at this level.
    unsafe { L::div(x, L::add(L::splat(1.0), expf::<L>(L::neg(x)))) }
}

/// [`silu_lanes`] when `SILU`, else [`expf`].
///
/// # Safety
/// The level's features.
#[inline(always)]
unsafe fn silu_or_exp<L: Lanes, const SILU: bool>(x: L::V) -> L::V {
    // SAFETY: lane arithmetic at this level.
    unsafe {
        if SILU {
            silu_lanes::<L>(x)
        } else {
            expf::<L>(x)
        }
    }
}

/// `x = silu(x)` when `SILU`, else `x = e^x` (both bit-identical to the
/// scalar code), in place, a vector at a time, and the last partial vector
/// when [`Lanes::TAIL`]; returns the count done. (A const parameter, not a
/// closure: a closure not inlined is compiled without the level's
/// features, and calls every intrinsic.)
///
/// # Safety
/// The level's features; `x` covers n f32.
#[inline(always)]
unsafe fn map<L: Lanes, const SILU: bool>(n: usize, x: *mut f32) -> usize {
    let mut i = 0;
    // SAFETY: lane arithmetic at this level; every access is to elements
    // below n.
    unsafe {
        while i + L::W <= n {
            let p = x.add(i);
            L::store(p, silu_or_exp::<L, SILU>(L::load(p)));
            i += L::W;
        }
        if L::TAIL && i < n {
            let p = x.add(i);
            let v = silu_or_exp::<L, SILU>(load_part::<L>(p, n - i));
            store_part::<L>(p, v, n - i);
            i = n;
        }
    }
    i
}

/// `x = e^x` in place, bit-identical to `f32::exp` ([`expf`]); returns the
/// count done (as [`map`]).
///
/// # Safety
/// The level's features; `x` covers n f32.
#[inline(always)]
unsafe fn exp_libm<L: Lanes>(n: usize, x: *mut f32) -> usize {
    // SAFETY: forwarded contract.
    unsafe { map::<L, false>(n, x) }
}

/// `x = silu(x)` in place (as [`map`]); returns the count done.
///
/// # Safety
/// The level's features; `x` covers n f32.
#[inline(always)]
unsafe fn silu<L: Lanes>(n: usize, x: *mut f32) -> usize {
    // SAFETY: forwarded contract.
    unsafe { map::<L, true>(n, x) }
}

/// `out = silu(g) · u`, a vector at a time, and the last partial vector
/// when [`Lanes::TAIL`]; returns the count done.
///
/// # Safety
/// The level's features; `g` and `u` hold n f32, `out` room for n (it may
/// be either source: each vector is read before it is written).
#[inline(always)]
unsafe fn swiglu<L: Lanes>(n: usize, g: *const f32, u: *const f32, out: *mut f32) -> usize {
    let mut i = 0;
    // SAFETY: every access is to elements below n.
    unsafe {
        while i + L::W <= n {
            let y = L::mul(silu_lanes::<L>(L::load(g.add(i))), L::load(u.add(i)));
            L::store(out.add(i), y);
            i += L::W;
        }
        if L::TAIL && i < n {
            let k = n - i;
            let y = L::mul(
                silu_lanes::<L>(load_part::<L>(g.add(i), k)),
                load_part::<L>(u.add(i), k),
            );
            store_part::<L>(out.add(i), y, k);
            i = n;
        }
    }
    i
}

/// f32 → bf16 with ggml's rounding (NaN: truncate and set the quiet bit;
/// otherwise round to nearest even), sixteen at a time; returns the count converted.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` holds `n` f32, `dst` room for `n` bf16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn f32_to_bf16_avx512(n: usize, src: *const f32, dst: *mut u8) -> usize {
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i .. i + 16 <= n of both rows are in bounds.
        unsafe {
            let u = _mm512_loadu_si512(src.add(i).cast());
            let abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fff_ffff));
            let nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
            let lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            let bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
            let rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
            let quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
            let r = _mm512_mask_blend_epi32(nan, rounded, quiet);
            _mm256_storeu_si256(dst.add(2 * i).cast(), _mm512_cvtepi32_epi16(r));
        }
        i += 16;
    }
    i
}

/// Σ x² in f64: eight f64 lanes, two accumulators, then a fixed tree.
///
/// # Safety
/// AVX-512 F/BW/VL; `x` covers n f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn sum_sq_avx512(n: usize, x: *const f32) -> f64 {
    let mut a0 = _mm512_setzero_pd();
    let mut a1 = _mm512_setzero_pd();
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: lanes in m are elements i .. min(i + 16, n).
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.add(i)) };
        let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
            _mm512_castps_pd(v),
        )));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
        i += 16;
    }
    _mm512_reduce_add_pd(_mm512_add_pd(a0, a1))
}

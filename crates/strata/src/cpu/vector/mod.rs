//! Runtime-dispatched vector helpers for the CPU kernels other than the dot
//! products: f16 / bf16 ↔ f32 row conversions and the element-wise math of
//! the "rest of the token" (norms, activations, soft_max, rope).
//!
//! Every function takes the instruction-set level to run at ([`Isa`]; the
//! CPU backend passes its own, see [`crate::cpu::CpuBackend::set_isa`]) and
//! calls that level's kernel from its table (the `vector` entries of
//! `isa::Table`: the x86 levels' are in `x86.rs`). Where it has none
//! (scalar, NEON, a level this CPU cannot run, and the AVX-512-only kernels
//! at AVX2) the portable loops run, which LLVM auto-vectorizes for the
//! build's baseline.
//!
//! Exactness: the conversions are bit-identical at every level (f16 / bf16
//! widening is exact; narrowing rounds to nearest even exactly as
//! `half::f16::from_f32` and [`crate::quant::f32_to_bf16`], NaNs included).
//! The math functions state their own bounds.

use crate::isa::Isa;
use crate::DType;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Declares [`Kernels`] from its entries: each an optional kernel, with
/// `NONE` and the per-entry fallback `over`.
macro_rules! kernels {
    ($($(#[$doc:meta])* $f:ident: $t:ty,)*) => {
        /// The f32 row kernels of one level (its table's `vector` entries):
        /// `None` where neither the level nor one below it has the kernel,
        /// and the portable loop runs. Every kernel takes raw pointers that
        /// cover the element count given, and needs its level's CPU
        /// features (a table exists only for a level this CPU runs).
        #[derive(Clone, Copy)]
        pub(crate) struct Kernels {
            $($(#[$doc])* pub(crate) $f: Option<$t>,)*
        }

        impl Kernels {
            /// No kernels: the portable loops.
            pub(crate) const NONE: Kernels = Kernels { $($f: None,)* };

            /// These kernels, with `lower`'s where these have none.
            pub(crate) fn over(self, lower: &Kernels) -> Kernels {
                Kernels { $($f: self.$f.or(lower.$f),)* }
            }
        }
    };
}

kernels! {
    /// `(n, src, dst)`: `n` f16 → f32, exactly.
    f16_to_f32: unsafe fn(usize, *const u8, *mut f32),
    /// `(n, src, dst)`: `n` bf16 → f32, exactly.
    bf16_to_f32: unsafe fn(usize, *const u8, *mut f32),
    /// `(n, src, dst)`: f32 → f16 as [`f32_to_f16_row`]; returns the count
    /// converted (a prefix).
    f32_to_f16: unsafe fn(usize, *const f32, *mut u8) -> usize,
    /// `(n, src, dst)`: f32 → bf16 as [`f32_to_bf16_row`]; returns the
    /// count converted.
    f32_to_bf16: unsafe fn(usize, *const f32, *mut u8) -> usize,
    /// `(n, x)`: [`round_to_f16`]; returns the first index not rounded.
    round_f16: unsafe fn(usize, *mut f32) -> usize,
    /// `(n, x, shift)`: [`exp_shifted_row`]; returns the count done.
    exp_shifted: unsafe fn(usize, *mut f32, f32) -> usize,
    /// `(n, x)`: glibc's `expf` recomputed in lanes ([`exp_row`]); returns
    /// the count done.
    exp_libm: unsafe fn(usize, *mut f32) -> usize,
    /// `(n, x)`: [`silu_row`]'s lanes; returns the count done.
    silu: unsafe fn(usize, *mut f32) -> usize,
    /// `(n, g, u, out)`: [`swiglu_row`]'s lanes; returns the count done.
    swiglu: unsafe fn(usize, *const f32, *const f32, *mut f32) -> usize,
    /// `(n, x)`: [`sum_squares_f64`].
    sum_squares: unsafe fn(usize, *const f32) -> f64,
}

/// Level `isa`'s own vector kernels, without the fallback (its entries in
/// `isa::Table`).
pub(crate) fn own(isa: Isa) -> Kernels {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::AVX2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::AVX512,
        _ => Kernels::NONE,
    }
}

/// Level `isa`'s vector kernels (none for a level this CPU cannot run).
#[inline]
fn kernels(isa: Isa) -> &'static Kernels {
    crate::isa::table(isa).map_or(&Kernels::NONE, |t| &t.vector)
}

/// The message for row conversions whose two slices the caller sized from
/// one count (so a length error would be a bug in strata, not the caller's).
pub(crate) const SIZED: &str = "row slices sized from one count";

/// `Ok` when a slice has the length its partner needs, else a typed error
/// naming both (the row functions below are public: bad lengths are a
/// caller's mistake, not a panic).
fn check_len(what: &str, got: usize, want: usize) -> crate::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(crate::Error::Length {
            what: format!("{what}: 16-bit row bytes (two per f32)"),
            expected: want,
            got,
        })
    }
}

/// Widens little-endian f16 values (`src.len() == 2 * dst.len()`) to f32, exactly.
///
/// Errors: [`crate::Error::Length`] when the lengths disagree.
pub fn f16_to_f32_row(isa: Isa, src: &[u8], dst: &mut [f32]) -> crate::Result<()> {
    check_len("f16_to_f32_row", src.len(), 2 * dst.len())?;
    match kernels(isa).f16_to_f32 {
        // SAFETY: the table's kernel runs on this CPU; the lengths match
        // (checked).
        Some(k) => unsafe { k(dst.len(), src.as_ptr(), dst.as_mut_ptr()) },
        None => {
            for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
                *d = crate::quant::simd::f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
            }
        }
    }
    Ok(())
}

/// Widens little-endian bf16 values (`src.len() == 2 * dst.len()`) to f32, exactly.
pub fn bf16_to_f32_row(isa: Isa, src: &[u8], dst: &mut [f32]) -> crate::Result<()> {
    check_len("bf16_to_f32_row", src.len(), 2 * dst.len())?;
    match kernels(isa).bf16_to_f32 {
        // SAFETY: the table's kernel runs on this CPU; the lengths match
        // (checked).
        Some(k) => unsafe { k(dst.len(), src.as_ptr(), dst.as_mut_ptr()) },
        None => {
            for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
                *d = crate::quant::bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
            }
        }
    }
    Ok(())
}

/// A row conversion from 16-bit floats to f32 ([`f16_to_f32_row`]).
pub(crate) type WidenRow = fn(Isa, &[u8], &mut [f32]) -> crate::Result<()>;
/// A row conversion from f32 to 16-bit floats ([`f32_to_f16_row`]).
pub(crate) type RoundRow = fn(Isa, &[f32], &mut [u8]) -> crate::Result<()>;

/// The row conversions of the 16-bit float type `dtype`: the F16 ones for
/// F16, else the BF16 ones.
pub(crate) fn half_rows(dtype: DType) -> (WidenRow, RoundRow) {
    if dtype == DType::F16 {
        (f16_to_f32_row, f32_to_f16_row)
    } else {
        (bf16_to_f32_row, f32_to_bf16_row)
    }
}

/// Rounds f32 values to little-endian f16 (`dst.len() == 2 * src.len()`),
/// bit-identical to `half::f16::from_f32` (round to nearest even; a group
/// holding a NaN goes through `half` so NaN payloads match it too).
pub fn f32_to_f16_row(isa: Isa, src: &[f32], dst: &mut [u8]) -> crate::Result<()> {
    check_len("f32_to_f16_row", dst.len(), 2 * src.len())?;
    let done = match kernels(isa).f32_to_f16 {
        // SAFETY: the table's kernel runs on this CPU; the lengths match
        // (checked).
        Some(k) => unsafe { k(src.len(), src.as_ptr(), dst.as_mut_ptr()) },
        None => 0,
    };
    crate::quant::quantize_row_f16(&src[done..], &mut dst[2 * done..]);
    Ok(())
}

/// Rounds f32 values to little-endian bf16 (`dst.len() == 2 * src.len()`),
/// bit-identical to [`crate::quant::f32_to_bf16`] (ggml's rounding).
pub fn f32_to_bf16_row(isa: Isa, src: &[f32], dst: &mut [u8]) -> crate::Result<()> {
    check_len("f32_to_bf16_row", dst.len(), 2 * src.len())?;
    let done = match kernels(isa).f32_to_bf16 {
        // SAFETY: the table's kernel runs on this CPU; the lengths match
        // (checked).
        Some(k) => unsafe { k(src.len(), src.as_ptr(), dst.as_mut_ptr()) },
        None => 0,
    };
    crate::quant::quantize_row_bf16(&src[done..], &mut dst[2 * done..]);
    Ok(())
}

/// Replaces every value by its f16 rounding widened back (`x = f32(f16(x))`),
/// as [`f32_to_f16_row`] then [`f16_to_f32_row`].
pub fn round_to_f16(isa: Isa, x: &mut [f32]) {
    let done = match kernels(isa).round_f16 {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // x.len() values.
        Some(k) => unsafe { k(x.len(), x.as_mut_ptr()) },
        None => 0,
    };
    for v in &mut x[done..] {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

/// Replaces every value by its bf16 rounding ([`crate::quant::f32_to_bf16`]) widened back.
pub fn round_to_bf16(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = crate::quant::bf16_to_f32(crate::quant::f32_to_bf16(*v));
    }
}

// ---- element-wise math ----
//
// The exponential of the SIMD levels is the crate's one vectorized exp
// (`isa::x86::exp`, Cephes' `expf` scheme; FLASH_ATTN_EXT uses it too):
// relative error <= 2 ulp against the correctly rounded value for x in
// [-87.3, 88.3] (checked against f64 by the tests), exact 0 below -87.34
// (where the true value is subnormal, < 1.2e-38), +inf above 88.73, NaN for
// NaN. The portable level uses libm's `exp`.

/// `x[i] = e^(x[i] - shift)`.
pub fn exp_shifted_row(isa: Isa, x: &mut [f32], shift: f32) {
    let done = match kernels(isa).exp_shifted {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // x.len() values.
        Some(k) => unsafe { k(x.len(), x.as_mut_ptr(), shift) },
        None => 0,
    };
    for v in &mut x[done..] {
        *v = (*v - shift).exp();
    }
}

// SiLU and SwiGLU need libm's bits: a 4-ulp vectorized exp in SiLU moved
// SmolLM2's perplexity (PERFORMANCE.md), through the 8-bit quantization of
// the FFN down projection's activations. So their lanes recompute glibc's
// expf exactly (`isa::x86::expf`), and are used only where they reproduce
// this process's `f32::exp` (checked once, [`libm_exp_in_lanes`]).

/// SiLU, `x / (1 + e^-x)` in f32 with libm's `expf` (`f32::exp`): the
/// definition [`silu_row`] and [`swiglu_row`] reproduce bit for bit.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// True when [`exp_row`], [`silu_row`] and [`swiglu_row`] run in SIMD lanes
/// at `isa` on this machine: the level has f32 lanes here, and their
/// recomputation of glibc's `expf` gave `f32::exp`'s bits on a probe set
/// (run once per process; another libm, e.g. musl's or another OS's, or
/// another glibc `expf`, fails it and the rows stay scalar). Always false
/// off x86-64.
pub fn libm_exp_in_lanes(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static SAME: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        kernels(isa).exp_libm.is_some() && *SAME.get_or_init(lanes_match_libm)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

/// The bits of arguments where another `expf` is likely to differ from
/// glibc's FMA build, found by a search of all 2^32 (`tests/vector_kernels.rs`
/// says how): where its result hinges on the fused `r` (the one of its five
/// contractions that moves any f32 result) or on the last bit of `N / ln 2`
/// (1-ulp changes of the polynomial's coefficients move none), at a tie, and
/// where it is not the correctly rounded result (spread over the range).
#[cfg(target_arch = "x86_64")]
const PROBE_WITNESSES: [u32; 24] = [
    // fused r
    0x4202_422f,
    0xc27c_65d9,
    // N / ln 2
    0xc1d2_107a,
    0xc27f_1f83,
    0x4197_276c,
    0xc263_3f4c,
    0xc23d_d581,
    // the f64 result on an f32 rounding midpoint
    0x3e73_ade2,
    // not correctly rounded
    0xc2a5_59c0,
    0xc298_2714,
    0xc277_a817,
    0xc245_5526,
    0xc211_7d15,
    0xc1db_1430,
    0xc132_0bee,
    0xc085_e1d2,
    0x4001_4e2c,
    0x4192_89f5,
    0x41d2_a112,
    0x4214_4cfb,
    0x4243_855c,
    0x427f_0629,
    0x4294_0fc4,
    0x429f_2d8b,
];

/// The probe of [`libm_exp_in_lanes`]: the AVX2 lanes (which every CPU
/// with a lane level runs) against `f32::exp`, bit for bit, on
/// [`PROBE_WITNESSES`] and an even spread over glibc's fast path (4096 in
/// all, whole vectors).
#[cfg(target_arch = "x86_64")]
fn lanes_match_libm() -> bool {
    let mut args: Vec<f32> = PROBE_WITNESSES.iter().map(|&b| f32::from_bits(b)).collect();
    let (lo, hi, n) = (-87.9f32, 87.9f32, 4096 - args.len());
    args.extend((0..n).map(|i| lo + (hi - lo) * i as f32 / n as f32));
    let mut y = args.clone();
    let done = match kernels(Isa::Avx2).exp_libm {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // y.len() values.
        Some(k) => unsafe { k(y.len(), y.as_mut_ptr()) },
        None => 0,
    };
    done == args.len()
        && args
            .iter()
            .zip(&y)
            .all(|(x, y)| x.exp().to_bits() == y.to_bits())
}

/// `x[i] = e^x[i]`, bit-identical to `f32::exp` at every level (lanes only
/// where [`libm_exp_in_lanes`]).
pub fn exp_row(isa: Isa, x: &mut [f32]) {
    let done = match kernels(isa).exp_libm {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // x.len() values.
        Some(k) if libm_exp_in_lanes(isa) => unsafe { k(x.len(), x.as_mut_ptr()) },
        _ => 0,
    };
    for v in &mut x[done..] {
        *v = v.exp();
    }
}

/// `x[i] = silu(x[i])` ([`silu`]), bit-identical to it at every level
/// (lanes only where [`libm_exp_in_lanes`]).
pub fn silu_row(isa: Isa, x: &mut [f32]) {
    let done = match kernels(isa).silu {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // x.len() values.
        Some(k) if libm_exp_in_lanes(isa) => unsafe { k(x.len(), x.as_mut_ptr()) },
        _ => 0,
    };
    for v in &mut x[done..] {
        *v = silu(*v);
    }
}

/// SwiGLU, `out[i] = silu(g[i]) * u[i]` in f32, bit-identical to that
/// expression ([`silu`]) at every level (lanes only where
/// [`libm_exp_in_lanes`]).
///
/// Errors: [`crate::Error::Length`] unless the three slices have one length.
pub fn swiglu_row(isa: Isa, g: &[f32], u: &[f32], out: &mut [f32]) -> crate::Result<()> {
    for (what, got) in [("up", u.len()), ("out", out.len())] {
        if got != g.len() {
            return Err(crate::Error::Length {
                what: format!("swiglu_row: {what} values (one per gate value)"),
                expected: g.len(),
                got,
            });
        }
    }
    let n = g.len();
    let done = match kernels(isa).swiglu {
        // SAFETY: the table's kernel runs on this CPU; all three pointers
        // cover n values (checked).
        Some(k) if libm_exp_in_lanes(isa) => unsafe {
            k(n, g.as_ptr(), u.as_ptr(), out.as_mut_ptr())
        },
        _ => 0,
    };
    for i in done..n {
        out[i] = silu(g[i]) * u[i];
    }
    Ok(())
}

/// `Σ x[i]²` accumulated in f64 (each square exact in f64; the sum's
/// rounding is the only error, relative <= n · 2^-53).
pub fn sum_squares_f64(isa: Isa, x: &[f32]) -> f64 {
    match kernels(isa).sum_squares {
        // SAFETY: the table's kernel runs on this CPU; the pointer covers
        // x.len() values.
        Some(k) => unsafe { k(x.len(), x.as_ptr()) },
        None => {
            let mut acc = [0f64; 4];
            let chunks = x.chunks_exact(4);
            let rest = chunks.remainder();
            for c in chunks {
                for k in 0..4 {
                    acc[k] += c[k] as f64 * c[k] as f64;
                }
            }
            let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            for &v in rest {
                s += v as f64 * v as f64;
            }
            s
        }
    }
}

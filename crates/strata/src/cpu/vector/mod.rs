//! Runtime-dispatched vector helpers for the CPU kernels other than the dot
//! products: f16 / bf16 ↔ f32 row conversions and the element-wise math of
//! the "rest of the token" (norms, activations, soft_max, rope).
//!
//! Every function takes the instruction-set level to run at ([`Isa`]; the
//! CPU backend passes its own, see [`crate::cpu::CpuBackend::set_isa`]).
//! Levels this module has no code for (scalar, NEON, or a level this CPU
//! cannot run) use the portable loops, which LLVM auto-vectorizes for the
//! build's baseline.
//!
//! Exactness: the conversions are bit-identical at every level (f16 / bf16
//! widening is exact; narrowing rounds to nearest even exactly as
//! `half::f16::from_f32` and [`crate::quant::f32_to_bf16`], NaNs included).
//! The math functions state their own bounds.

use crate::isa::{simd, Isa};
use crate::DType;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

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
    // The kernel's extents: the lengths match (checked).
    simd!(
        isa,
        x86::f16_to_f32(dst.len(), src.as_ptr(), dst.as_mut_ptr()),
        for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
            *d = crate::quant::simd::f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
        }
    );
    Ok(())
}

/// Widens little-endian bf16 values (`src.len() == 2 * dst.len()`) to f32, exactly.
pub fn bf16_to_f32_row(isa: Isa, src: &[u8], dst: &mut [f32]) -> crate::Result<()> {
    check_len("bf16_to_f32_row", src.len(), 2 * dst.len())?;
    // The kernel's extents: the lengths match (checked).
    simd!(
        isa,
        x86::bf16_to_f32(dst.len(), src.as_ptr(), dst.as_mut_ptr()),
        for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
            *d = crate::quant::bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
        }
    );
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
    // The kernel's extents: the lengths match (checked).
    let done = simd!(
        isa,
        x86::f32_to_f16(src.len(), src.as_ptr(), dst.as_mut_ptr()),
        0
    );
    crate::quant::quantize_row_f16(&src[done..], &mut dst[2 * done..]);
    Ok(())
}

/// Rounds f32 values to little-endian bf16 (`dst.len() == 2 * src.len()`),
/// bit-identical to [`crate::quant::f32_to_bf16`] (ggml's rounding).
pub fn f32_to_bf16_row(isa: Isa, src: &[f32], dst: &mut [u8]) -> crate::Result<()> {
    check_len("f32_to_bf16_row", dst.len(), 2 * src.len())?;
    let done = match isa.f32_level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: f32_level() checked AVX-512; the lengths match (checked).
        Isa::Avx512 => unsafe {
            x86::f32_to_bf16_avx512(src.len(), src.as_ptr(), dst.as_mut_ptr())
        },
        _ => 0,
    };
    crate::quant::quantize_row_bf16(&src[done..], &mut dst[2 * done..]);
    Ok(())
}

/// Replaces every value by its f16 rounding widened back (`x = f32(f16(x))`),
/// as [`f32_to_f16_row`] then [`f16_to_f32_row`].
pub fn round_to_f16(isa: Isa, x: &mut [f32]) {
    // The kernel's extents: the pointer covers x.len() values.
    let done = simd!(isa, x86::round_f16(x.len(), x.as_mut_ptr()), 0);
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
    // The kernel's extents: the pointer covers x.len() values.
    let done = simd!(isa, x86::exp_shifted(x.len(), x.as_mut_ptr(), shift), 0);
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
        isa.f32_level() != Isa::Scalar && *SAME.get_or_init(lanes_match_libm)
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

/// The probe of [`libm_exp_in_lanes`]: the AVX2 lanes (which every lane
/// level here runs) against `f32::exp`, bit for bit, on
/// [`PROBE_WITNESSES`] and an even spread over glibc's fast path (4096 in
/// all, whole vectors).
#[cfg(target_arch = "x86_64")]
fn lanes_match_libm() -> bool {
    let mut args: Vec<f32> = PROBE_WITNESSES.iter().map(|&b| f32::from_bits(b)).collect();
    let (lo, hi, n) = (-87.9f32, 87.9f32, 4096 - args.len());
    args.extend((0..n).map(|i| lo + (hi - lo) * i as f32 / n as f32));
    let mut y = args.clone();
    // The kernel's extents: the pointer covers y.len() values.
    let done = simd!(Isa::Avx2, x86::exp_libm(y.len(), y.as_mut_ptr()), 0);
    done == args.len()
        && args
            .iter()
            .zip(&y)
            .all(|(x, y)| x.exp().to_bits() == y.to_bits())
}

/// `x[i] = e^x[i]`, bit-identical to `f32::exp` at every level (lanes only
/// where [`libm_exp_in_lanes`]).
pub fn exp_row(isa: Isa, x: &mut [f32]) {
    let done = if libm_exp_in_lanes(isa) {
        // The kernel's extents: the pointer covers x.len() values.
        simd!(isa, x86::exp_libm(x.len(), x.as_mut_ptr()), 0)
    } else {
        0
    };
    for v in &mut x[done..] {
        *v = v.exp();
    }
}

/// `x[i] = silu(x[i])` ([`silu`]), bit-identical to it at every level
/// (lanes only where [`libm_exp_in_lanes`]).
pub fn silu_row(isa: Isa, x: &mut [f32]) {
    let done = if libm_exp_in_lanes(isa) {
        // The kernel's extents: the pointer covers x.len() values.
        simd!(isa, x86::silu(x.len(), x.as_mut_ptr()), 0)
    } else {
        0
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
    let done = if libm_exp_in_lanes(isa) {
        // The kernel's extents: all three pointers cover n values (checked).
        simd!(
            isa,
            x86::swiglu(n, g.as_ptr(), u.as_ptr(), out.as_mut_ptr()),
            0
        )
    } else {
        0
    };
    for i in done..n {
        out[i] = silu(g[i]) * u[i];
    }
    Ok(())
}

/// `Σ x[i]²` accumulated in f64 (each square exact in f64; the sum's
/// rounding is the only error, relative <= n · 2^-53).
pub fn sum_squares_f64(isa: Isa, x: &[f32]) -> f64 {
    match isa.f32_level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: f32_level() checked AVX-512; the pointer covers x.len() values.
        Isa::Avx512 => unsafe { x86::sum_sq_avx512(x.len(), x.as_ptr()) },
        _ => {
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

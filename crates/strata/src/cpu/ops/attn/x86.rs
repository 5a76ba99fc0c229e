//! AVX-512 (sixteen f32 lanes) and AVX2 + FMA + F16C (eight lanes) kernels
//! of FLASH_ATTN_EXT, written once over [`Lanes`] and instantiated per level
//! inside `#[target_feature]` functions: here the tiled path's GEMMs and
//! column softmax, in `x86/chunk.rs` the one-chunk path (a few rows sharing
//! K/V, ggml's per-key f16 roundings), in `x86/two_pass.rs` the two-pass
//! path (batch-invariant attention; its q·k sums are the one-chunk path's,
//! `W` keys' lane sums taken together by `Lanes::hsum_lanes`).
//!
//! * f16 → f32 is `vcvtph2ps` (exact); the f16 rounding of the one-chunk V
//!   accumulator is `vcvtps2ph` with round to nearest even and back, the
//!   same bits as `half::f16::from_f32(x).to_f32()` for every non-NaN x.
//! * The exponential is the crate's one vectorized `e^x`
//!   (`crate::isa::x86::exp`, the one soft_max uses) as [`exp_bounded`]:
//!   the same bits for the `x ≤ 0` the kernels take, without the check for
//!   overflowing lanes. Relative error within 2 ulp for `x ≥ EXP_LO`
//!   (tested on a dense sweep); 0 below `EXP_LO` (results under 2⁻¹²⁶,
//!   where f32 turns subnormal) and for −∞; NaN stays NaN.
//! * The GEMMs of the tiled path compute every output element as one f32
//!   FMA chain in order of the inner index (as ggml's `simd_gemm`), whatever
//!   the register block it falls in, so results do not depend on the tile
//!   shapes or on which thread computes them.
//!
//! Every `unsafe fn` here requires the CPU features of its level; the
//! generic kernels are instantiated per level by `per_level!` (modules
//! `avx512` and `avx2`), and the levels' table entries ([`AVX2`],
//! [`AVX512`]: one [`SimdKernels`] each) are reached only through
//! [`Simd`], which holds the table of a level this CPU runs and whose
//! safe [`Kernels`] methods check slice lengths and row bounds before any
//! raw access.

use super::{ChunkJob, Kernels, PvCols, RowState, Scalar, SoftmaxCols, GROUP};
#[cfg(test)]
use crate::isa::x86::exp_arg;
use crate::isa::x86::{exp_bounded, per_level, widen16, Lanes, L256, L512};
use crate::isa::Isa;
use crate::tensor::DType;

mod chunk;
mod two_pass;

use chunk::{chunk_args, one_chunk, ChunkArgs};
use two_pass::two_pass;

/// Converts `n` f16 (`half`) or f32 values at `src` (any alignment) to f32 at `dst`.
#[inline(always)]
unsafe fn to_f32<L: Lanes>(src: *const u8, half: bool, n: usize, dst: *mut f32) {
    // SAFETY: the caller guarantees n source values and n destination f32.
    unsafe {
        if half {
            widen16::<L, false>(src.cast(), n, dst);
        } else {
            std::ptr::copy_nonoverlapping(src, dst.cast::<u8>(), 4 * n);
        }
    }
}

/// [`super::mask::vis_words_f16`] for `n` f16 values at `raw` (any
/// alignment) into `n.div_ceil(64)` words at `out`: whole words by
/// [`vis64_f16`] (the compiler did not vectorize the portable fold), the
/// last partial one by the fold.
#[inline(always)]
unsafe fn vis_f16<L: Lanes>(raw: *const u8, n: usize, out: *mut u64) {
    // SAFETY: the caller guarantees 2·n bytes at raw and the words at out.
    let (raw, out) = unsafe {
        (
            std::slice::from_raw_parts(raw, 2 * n),
            std::slice::from_raw_parts_mut(out, n.div_ceil(64)),
        )
    };
    // Whole words 64 values at a time (both levels run AVX2): four compares
    // of 16 values, packed to bytes and their sign bits gathered.
    let whole = n / 64;
    for (w, word) in out[..whole].iter_mut().enumerate() {
        // SAFETY: values 64·w .. 64·w + 64 lie within the n.
        *word = unsafe { vis64_f16(raw.as_ptr().add(128 * w)) };
    }
    super::mask::vis_words_f16(&raw[128 * whole..], &mut out[whole..]);
}

/// Bit `i` set where f16 value `i` of the 64 at `p` is not -inf (0xfc00).
///
/// # Safety
/// 128 readable bytes at `p`; AVX2 (every x86 level of this module).
#[inline(always)]
unsafe fn vis64_f16(p: *const u8) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        use std::arch::x86_64::*;
        // (no closures: one would be compiled without AVX2, every
        // intrinsic a call)
        let ninf = _mm256_set1_epi16(0xfc00u16 as i16);
        let mut eq = [_mm256_setzero_si256(); 4];
        for (i, e) in eq.iter_mut().enumerate() {
            *e = _mm256_cmpeq_epi16(_mm256_loadu_si256(p.add(32 * i).cast()), ninf);
        }
        // packs works per 128-bit lane ([a0..8 b0..8 | a8..16 b8..16]): the
        // 64-bit permute 0, 2, 1, 3 puts the bytes back in value order.
        let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi16(eq[0], eq[1]));
        let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi16(eq[2], eq[3]));
        let lo = _mm256_movemask_epi8(lo) as u32;
        let hi = _mm256_movemask_epi8(hi) as u32;
        !(u64::from(lo) | u64::from(hi) << 32)
    }
}

/// A GEMM's operands: element (r, k) of A at `a[r·a_rs + k·a_ks]`, row k
/// of B at `b + k·ldb`, row r of C at `c + r·ldc`, and one scale per row
/// of C at `cs` (`C = diag(cs)·C + A·B`), or null (`C = A·B`).
#[derive(Clone, Copy)]
struct Gemm {
    a: *const f32,
    a_rs: usize,
    a_ks: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cs: *const f32,
}

impl Gemm {
    /// The operands from row `i` of A and C (and its scale) on.
    #[inline(always)]
    fn at_row(self, i: usize) -> Gemm {
        Gemm {
            a: self.a.wrapping_add(i * self.a_rs),
            c: self.c.wrapping_add(i * self.ldc),
            cs: if self.cs.is_null() {
                self.cs
            } else {
                self.cs.wrapping_add(i)
            },
            ..self
        }
    }

    /// The operands from vector `v` (of `W` lanes) of B's and C's rows on.
    #[inline(always)]
    fn at_vector(self, v: usize, w: usize) -> Gemm {
        Gemm {
            b: self.b.wrapping_add(v * w),
            c: self.c.wrapping_add(v * w),
            ..self
        }
    }
}

/// One register block of a GEMM: `C[RM × RN·W] = A·B` (or with the row
/// scales, layout as [`Gemm`]) over `kd` steps, each output an FMA chain
/// in order of k.
#[inline(always)]
unsafe fn block<L: Lanes, const RM: usize, const RN: usize>(kd: usize, g: Gemm) {
    let Gemm {
        a,
        a_rs,
        a_ks,
        b,
        ldb,
        c,
        ldc,
        cs,
    } = g;
    // SAFETY: the caller guarantees the A, B and C extents above, and RM
    // row scales at cs unless null.
    unsafe {
        let mut acc = [[L::zero(); RN]; RM];
        if !cs.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                let f = L::splat(*cs.add(r));
                for (v, x) in row.iter_mut().enumerate() {
                    *x = L::mul(L::load(c.add(r * ldc + v * L::W)), f);
                }
            }
        }
        for k in 0..kd {
            let mut bv = [L::zero(); RN];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = L::load(b.add(k * ldb + v * L::W));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = L::splat(*a.add(r * a_rs + k * a_ks));
                for (x, &bb) in row.iter_mut().zip(&bv) {
                    *x = L::fma(av, bb, *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, &x) in row.iter().enumerate() {
                L::store(c.add(r * ldc + v * L::W), x);
            }
        }
    }
}

/// `C[m × nv·W] (+)= A·B` in blocks of RM rows × RN vectors (layout as
/// [`Gemm`]): whole blocks first, then the remaining rows and vectors one
/// at a time.
#[inline(always)]
unsafe fn gemm<L: Lanes, const RM: usize, const RN: usize>(
    m: usize,
    nv: usize,
    kd: usize,
    g: Gemm,
) {
    // SAFETY: the caller guarantees the extents; blocks stay inside them.
    unsafe {
        let mut i = 0;
        while i < m {
            let rows = i + RM <= m;
            let mut v = 0;
            while v < nv {
                let g = g.at_row(i).at_vector(v, L::W);
                let cols = v + RN <= nv;
                match (rows, cols) {
                    (true, true) => block::<L, RM, RN>(kd, g),
                    (false, true) => block::<L, 1, RN>(kd, g),
                    (true, false) => block::<L, RM, 1>(kd, g),
                    (false, false) => block::<L, 1, 1>(kd, g),
                }
                v += if cols { RN } else { 1 };
            }
            i += if rows { RM } else { 1 };
        }
    }
}

/// The column softmax of [`Kernels::softmax_cols`] over `kvn` × `np`
/// (`mt` null: no mask), four register widths of columns at a time while
/// they last, then two, then one: each column's `e^x` is one long
/// dependent chain, and two independent chains per step measured faster
/// than one (AVX2, the Q6_K file's pp512 on two threads: FLASH_ATTN_EXT
/// 191 → 179–181 ms), four than two once the exponentials stopped
/// branching ([`exp_bounded`]; AVX2, one FLASH_ATTN_EXT of 512 × 512, one
/// thread: 4.54–4.58 → 4.39–4.47 ms).
#[inline(always)]
unsafe fn softmax_cols<L: Lanes>(a: Softmax) {
    let mut c = 0;
    // SAFETY (both calls): the caller's extents, columns c .. c + K·W.
    unsafe {
        while c + 4 * L::W <= a.np {
            softmax_step::<L, 4>(&a, c);
            c += 4 * L::W;
        }
        while c + 2 * L::W <= a.np {
            softmax_step::<L, 2>(&a, c);
            c += 2 * L::W;
        }
        while c < a.np {
            softmax_step::<L, 1>(&a, c);
            c += L::W;
        }
    }
}

/// The operands of [`softmax_cols`]: `kvn` × `np` scores at `kq` (and
/// mask values at `mt` unless null), `np` running maxima at `m`, sums at
/// `s` and rescale factors at `ms`.
#[derive(Clone, Copy)]
pub(crate) struct Softmax {
    kq: *mut f32,
    kvn: usize,
    np: usize,
    scale: f32,
    mt: *const f32,
    m: *mut f32,
    s: *mut f32,
    ms: *mut f32,
}

/// Columns `c .. c + K·W` of [`softmax_cols`], `K` chunks side by side.
#[inline(always)]
unsafe fn softmax_step<L: Lanes, const K: usize>(a: &Softmax, c: usize) {
    let (kq, kvn, np, mt, m, s, ms) = (a.kq, a.kvn, a.np, a.mt, a.m, a.s, a.ms);
    // SAFETY: the caller guarantees kvn·np values at kq (and mt unless
    // null) and np at m, s, ms, with c + K·W ≤ np.
    unsafe {
        let ninf = L::splat(f32::NEG_INFINITY);
        let (one, zero, sc) = (L::splat(1.0), L::zero(), L::splat(a.scale));
        let mut t = [ninf; K];
        for j in 0..kvn {
            for (i, t) in t.iter_mut().enumerate() {
                let at = j * np + c + i * L::W;
                let mut x = L::mul(L::load(kq.add(at)), sc);
                if !mt.is_null() {
                    x = L::add(x, L::load(mt.add(at)));
                }
                L::store(kq.add(at), x);
                *t = L::max(*t, x);
            }
        }
        // The new maxima; the old ones stay in `m` until the end.
        let mnew: [L::V; K] = std::array::from_fn(|i| L::max(L::load(m.add(c + i * L::W)), t[i]));
        let mut sum = [zero; K];
        for j in 0..kvn {
            for i in 0..K {
                let p = kq.add(j * np + c + i * L::W);
                let e = exp_bounded::<L>(L::sub(L::load(p), mnew[i]));
                let e = L::select_gt(t[i], ninf, e, zero);
                L::store(p, e);
                sum[i] = L::add(sum[i], e);
            }
        }
        // The rescale factor of the earlier sums, then the new state.
        for i in 0..K {
            let at = c + i * L::W;
            let mold = L::load(m.add(at));
            let f = L::select_gt(mnew[i], mold, exp_bounded::<L>(L::sub(mold, mnew[i])), one);
            L::store(ms.add(at), f);
            L::store(s.add(at), L::add(L::mul(L::load(s.add(at)), f), sum[i]));
            L::store(m.add(at), mnew[i]);
        }
    }
}

/// `C = A·B` (or `diag(cs)·C + A·B`) with the level's register block
/// ([`gemm`]): 4 rows × 4 vectors at AVX-512, 4 × 2 at AVX2 — the QK and
/// PV products alike.
#[inline(always)]
unsafe fn gemm_level<L: Lanes>(m: usize, nv: usize, kd: usize, g: Gemm) {
    // SAFETY: forwarded contract.
    unsafe {
        if L::W == 16 {
            gemm::<L, 4, 4>(m, nv, kd, g)
        } else {
            gemm::<L, 4, 2>(m, nv, kd, g)
        }
    }
}

/// [`Kernels::qk`] on raw pointers: `kq = kf · qt`.
#[inline(always)]
unsafe fn qk<L: Lanes>(
    kf: *const f32,
    d: usize,
    kvn: usize,
    qt: *const f32,
    np: usize,
    kq: *mut f32,
) {
    let g = Gemm {
        a: kf,
        a_rs: d,
        a_ks: 1,
        b: qt,
        ldb: np,
        c: kq,
        ldc: np,
        cs: std::ptr::null(),
    };
    // SAFETY: forwarded contract: A = kf (kvn × d), B = qt (d × np), C = kq (kvn × np).
    unsafe { gemm_level::<L>(kvn, np / L::W, d, g) }
}

/// [`Kernels::pv`] on raw pointers: `vkq = diag(ms)·vkq + pᵀ·vf`.
#[inline(always)]
unsafe fn pv<L: Lanes>(a: Pv) {
    let g = Gemm {
        a: a.p,
        a_rs: 1,
        a_ks: a.np,
        b: a.vf,
        ldb: a.dvp,
        c: a.vkq,
        ldc: a.dvp,
        cs: a.ms,
    };
    // SAFETY: forwarded contract: A = pᵀ (rows × kvn, stride np), B = vf (kvn × dvp), C = vkq, rows scales ms.
    unsafe { gemm_level::<L>(a.rows, a.dvp / L::W, a.kvn, g) }
}

/// The operands of [`pv`]: `kvn` × `np` probabilities at `p`, `kvn` V rows
/// of `dvp` at `vf`, `rows` scales at `ms` and accumulator rows at `vkq`.
#[derive(Clone, Copy)]
pub(crate) struct Pv {
    p: *const f32,
    np: usize,
    rows: usize,
    kvn: usize,
    vf: *const f32,
    dvp: usize,
    ms: *const f32,
    vkq: *mut f32,
}

/// Which exponential [`exp_k`] runs (tests): `crate::isa::x86::exp`.
#[cfg(test)]
const EXP: u8 = 0;
/// [`exp_bounded`].
#[cfg(test)]
const EXP_BOUNDED: u8 = 1;
/// [`exp_arg`], the argument `exp_bounded`'s polynomial takes.
#[cfg(test)]
const EXP_ARG: u8 = 2;

/// Exponential `F` in place for the leading multiple of the width of the
/// `n` f32 at `x` (tests).
#[cfg(test)]
#[inline(always)]
unsafe fn exp_k<L: Lanes, const F: u8>(x: *mut f32, n: usize) {
    let mut i = 0;
    while i + L::W <= n {
        // SAFETY: n f32 at x (forwarded contract).
        unsafe {
            let p = x.add(i);
            let v = L::load(p);
            let y = match F {
                EXP => crate::isa::x86::exp::<L>(v),
                EXP_BOUNDED => exp_bounded::<L>(v),
                _ => exp_arg::<L>(v),
            };
            L::store(p, y);
        }
        i += L::W;
    }
}

/// The f16 round trip in place for the leading multiple of the width of
/// the `n` f32 at `x`.
#[inline(always)]
unsafe fn round_h_k<L: Lanes>(x: *mut f32, n: usize) {
    let mut i = 0;
    while i + L::W <= n {
        // SAFETY: n f32 at x (forwarded contract).
        unsafe {
            let p = x.add(i);
            L::store(p, L::round_h(L::load(p)));
        }
        i += L::W;
    }
}

per_level! {
    fn to_f32(src: *const u8, half: bool, n: usize, dst: *mut f32);
    fn vis_f16(raw: *const u8, n: usize, out: *mut u64);
    fn qk(kf: *const f32, d: usize, kvn: usize, qt: *const f32, np: usize, kq: *mut f32);
    fn pv(a: Pv);
    fn softmax_cols(a: Softmax);
    fn one_chunk<const H: bool, const G: usize>(a: &mut ChunkArgs<G>);
    fn two_pass<const H: bool, const G: usize>(a: &mut ChunkArgs<G>);
    #[cfg(test)]
    fn exp_k<const F: u8>(x: *mut f32, n: usize);
    fn round_h_k(x: *mut f32, n: usize);
}

/// A group kernel: a level's [`one_chunk`] or [`two_pass`] for one group of
/// rows with its arguments built and its row state written back
/// ([`chunk_groups`]).
///
/// # Safety
/// The level's features; the group of 1 ..= [`GROUP`] rows (the entry's
/// `G`), for which [`Simd`]'s `groups` checked every extent (queries,
/// masks, accumulators, score buffers, K/V rows `c0..c1` from the two
/// pointers).
type ChunkGroupFn = unsafe fn(&ChunkJob<'_>, &mut [RowState<'_>], *const u8, *const u8);

/// The group kernels `$k` ([`one_chunk`] or [`two_pass`]) of the lanes
/// level whose `per_level!` module is `$l`, per K/V type (f32, f16) and
/// group size: a wrapper per instantiation that builds the group's arguments
/// and writes back its running maximum and sum outside the kernel.
macro_rules! chunk_groups {
    ($l:ident, $k:ident) => {{
        /// The level's kernel `$k` on a group of `G` rows ([`ChunkGroupFn`]).
        ///
        /// # Safety
        /// As [`ChunkGroupFn`].
        unsafe fn group<const H: bool, const G: usize>(
            job: &ChunkJob<'_>,
            rows: &mut [RowState<'_>],
            k: *const u8,
            v: *const u8,
        ) {
            let mut a = chunk_args::<G>(job, rows, k, v);
            // SAFETY: forwarded contract.
            unsafe { $l::$k::<H, G>(&mut a) };
            a.write_back(rows);
        }
        [
            [
                group::<false, 1>,
                group::<false, 2>,
                group::<false, 3>,
                group::<false, 4>,
            ],
            [
                group::<true, 1>,
                group::<true, 2>,
                group::<true, 3>,
                group::<true, 4>,
            ],
        ]
    }};
}

/// FLASH_ATTN_EXT's kernels at one x86 level (its `isa::Table` entry): the
/// level's `per_level!` instances, one entry per instantiation, and its
/// width; each needs the level's CPU features and the extents its generic
/// kernel states.
#[derive(Clone, Copy)]
pub(crate) struct SimdKernels {
    /// f32 lanes per vector.
    width: usize,
    to_f32: unsafe fn(*const u8, bool, usize, *mut f32),
    vis_f16: unsafe fn(*const u8, usize, *mut u64),
    qk: unsafe fn(*const f32, usize, usize, *const f32, usize, *mut f32),
    pv: unsafe fn(Pv),
    softmax_cols: unsafe fn(Softmax),
    /// `chunk_group[H][G - 1]`: f16 (`H`) or f32 K/V, groups of `G` rows.
    chunk_group: [[ChunkGroupFn; GROUP]; 2],
    /// `two_pass_group[H][G - 1]`: the same for the two-pass kernel.
    two_pass_group: [[ChunkGroupFn; GROUP]; 2],
    /// `exp_k::<F>` (tests).
    #[cfg(test)]
    exp_k: [unsafe fn(*mut f32, usize); 3],
    /// `round_h_k`.
    round_h_k: unsafe fn(*mut f32, usize),
}

/// The attention kernels of the lanes level whose `per_level!` module is
/// `$l`, `$w` lanes wide.
macro_rules! simd_kernels {
    ($l:ident, $w:expr) => {
        SimdKernels {
            width: $w,
            to_f32: $l::to_f32,
            vis_f16: $l::vis_f16,
            qk: $l::qk,
            pv: $l::pv,
            softmax_cols: $l::softmax_cols,
            chunk_group: chunk_groups!($l, one_chunk),
            two_pass_group: chunk_groups!($l, two_pass),
            #[cfg(test)]
            exp_k: [
                $l::exp_k::<EXP>,
                $l::exp_k::<EXP_BOUNDED>,
                $l::exp_k::<EXP_ARG>,
            ],
            round_h_k: $l::round_h_k,
        }
    };
}

/// The AVX2 level's attention kernels (AVX-VNNI's too, through the fallback).
const AVX2: SimdKernels = simd_kernels!(avx2, L256::W);

/// The AVX-512 level's attention kernels (VNNI's and AMX's too).
const AVX512: SimdKernels = simd_kernels!(avx512, L512::W);

/// Level `isa`'s own attention kernels, without the fallback (its entry
/// in `isa::Table`).
pub(crate) fn own(isa: Isa) -> Option<SimdKernels> {
    match isa {
        Isa::Avx2 => Some(AVX2),
        Isa::Avx512 => Some(AVX512),
        _ => None,
    }
}

/// The attention kernels of one x86 level, from the level's table: only
/// made for a level this CPU runs (the scalar kernels stand in otherwise).
#[derive(Clone, Copy)]
pub(crate) struct Simd(&'static SimdKernels);

impl Simd {
    /// The kernels running `isa`, if it has f32 lanes on this CPU.
    pub(crate) fn new(isa: Isa) -> Option<Simd> {
        crate::isa::table(isa)?.attn.as_ref().map(Simd)
    }

    /// Exponential `F` ([`exp_k`]) in place for the leading multiple of
    /// the width (tests).
    #[cfg(test)]
    fn exp_k_in_place<const F: u8>(self, x: &mut [f32]) {
        // SAFETY: the table's kernel runs on this CPU; x.len() f32 at x.
        unsafe { (self.0.exp_k[F as usize])(x.as_mut_ptr(), x.len()) };
    }

    /// `e^x` in place for the leading multiple of the width (tests).
    #[cfg(test)]
    pub(super) fn exp_in_place(self, x: &mut [f32]) {
        self.exp_k_in_place::<EXP>(x);
    }

    /// [`exp_bounded`] in place for the leading multiple of the width (tests).
    #[cfg(test)]
    pub(super) fn exp_bounded_in_place(self, x: &mut [f32]) {
        self.exp_k_in_place::<EXP_BOUNDED>(x);
    }

    /// [`exp_arg`] in place for the leading multiple of the width (tests).
    #[cfg(test)]
    pub(super) fn exp_arg_in_place(self, x: &mut [f32]) {
        self.exp_k_in_place::<EXP_ARG>(x);
    }
}

impl Kernels for Simd {
    fn width(self) -> usize {
        self.0.width
    }

    fn round_h(self, x: &mut [f32]) {
        let whole = x.len() - x.len() % self.0.width;
        // SAFETY: the table's kernel runs on this CPU; it rounds the
        // leading `whole` (a multiple of the width) of the x.len() f32.
        unsafe { (self.0.round_h_k)(x.as_mut_ptr(), whole) };
        x[whole..]
            .iter_mut()
            .for_each(|v| *v = super::half_round(*v));
    }

    fn to_f32(self, src: &[u8], dt: DType, dst: &mut [f32]) {
        let n = src.len() / dt.type_size();
        assert!(n <= dst.len() && matches!(dt, DType::F16 | DType::F32));
        // SAFETY: the table's kernel runs on this CPU; n values in src and dst.
        unsafe { (self.0.to_f32)(src.as_ptr(), dt == DType::F16, n, dst.as_mut_ptr()) };
        dst[n..].fill(0.0);
    }

    fn vis_f16(self, raw: &[u8], out: &mut [u64]) {
        let n = raw.len() / 2;
        assert!(out.len() >= n.div_ceil(64));
        // SAFETY: the table's kernel runs on this CPU; 2·n bytes in raw, the words in out.
        unsafe { (self.0.vis_f16)(raw.as_ptr(), n, out.as_mut_ptr()) };
    }

    fn qk(self, kf: &[f32], d: usize, qt: &[f32], np: usize, kq: &mut [f32]) {
        assert!(np > 0 && np.is_multiple_of(self.width()) && kq.len().is_multiple_of(np));
        let kvn = kq.len() / np;
        assert!(kf.len() >= kvn * d && qt.len() >= d * np);
        // SAFETY: the table's kernel runs on this CPU; extents checked above.
        unsafe { (self.0.qk)(kf.as_ptr(), d, kvn, qt.as_ptr(), np, kq.as_mut_ptr()) }
    }

    fn softmax_cols(self, a: SoftmaxCols<'_>) {
        let np = a.np;
        assert!(np > 0 && np.is_multiple_of(self.width()) && a.kq.len().is_multiple_of(np));
        assert!(a.m.len() >= np && a.s.len() >= np && a.ms.len() >= np);
        assert!(a.mt.is_none_or(|t| t.len() >= a.kq.len()));
        let raw = Softmax {
            kq: a.kq.as_mut_ptr(),
            kvn: a.kq.len() / np,
            np,
            scale: a.scale,
            mt: a.mt.map_or(std::ptr::null(), |t| t.as_ptr()),
            m: a.m.as_mut_ptr(),
            s: a.s.as_mut_ptr(),
            ms: a.ms.as_mut_ptr(),
        };
        // SAFETY: the table's kernel runs on this CPU; extents checked above.
        unsafe { (self.0.softmax_cols)(raw) }
    }

    fn pv(self, a: PvCols<'_>) {
        let (np, dvp, rows) = (a.np, a.dvp, a.rows);
        if dvp == 0 {
            return;
        }
        assert!(dvp.is_multiple_of(self.width()) && a.vf.len().is_multiple_of(dvp) && rows <= np);
        let kvn = a.vf.len() / dvp;
        assert!(a.p.len() >= kvn * np && a.vkq.len() >= rows * dvp && a.ms.len() >= rows);
        let raw = Pv {
            p: a.p.as_ptr(),
            np,
            rows,
            kvn,
            vf: a.vf.as_ptr(),
            dvp,
            ms: a.ms.as_ptr(),
            vkq: a.vkq.as_mut_ptr(),
        };
        // SAFETY: the table's kernel runs on this CPU; extents checked above.
        unsafe { (self.0.pv)(raw) }
    }

    fn one_chunk(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
        self.groups(job, rows, false);
    }

    fn two_pass(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
        self.groups(job, rows, true);
    }
}

impl Simd {
    /// Runs the one-chunk or (`two`) the two-pass group kernel over `rows`
    /// in groups of up to [`GROUP`], after checking every extent the
    /// kernels read or write; K and V of different types go to [`Scalar`].
    fn groups(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>], two: bool) {
        let (kt, vt) = (job.k.dtype, job.v.dtype);
        if kt != vt || !matches!(kt, DType::F16 | DType::F32) {
            return match two {
                true => Scalar.two_pass(job, rows),
                false => Scalar.one_chunk(job, rows),
            };
        }
        if job.c0 >= job.c1 || rows.is_empty() {
            return;
        }
        let (d, dv, n) = (job.k.ne[0], job.v.ne[0], job.c1 - job.c0);
        let w = self.width();
        for r in rows.iter() {
            assert!(r.q.len() >= d.next_multiple_of(w) && r.acc.len() >= dv.next_multiple_of(w));
            assert!(r
                .mask
                .is_none_or(|m| m.vals.len() >= n && m.vis.len() >= n.div_ceil(64)));
            if two {
                // the scores of up to n keys, whole vectors
                assert!(r
                    .sc
                    .as_ref()
                    .is_some_and(|s| s.len() >= n.next_multiple_of(w)));
                assert!(
                    r.m == f32::NEG_INFINITY && r.s == 0.0,
                    "two-pass rows start fresh"
                );
            }
        }
        assert!(job.k.rows_contiguous() && job.v.rows_contiguous());
        // Rows c0 and c1 - 1 in bounds (row_ptr checks), hence all between.
        let k = job.k.row_ptr(job.c0, job.ik2, job.ik3).cast_const();
        let v = job.v.row_ptr(job.c0, job.ik2, job.ik3).cast_const();
        job.k.row_ptr(job.c1 - 1, job.ik2, job.ik3);
        job.v.row_ptr(job.c1 - 1, job.ik2, job.ik3);
        let table = match two {
            true => &self.0.two_pass_group,
            false => &self.0.chunk_group,
        };
        let kernels = &table[usize::from(kt == DType::F16)];
        for group in rows.chunks_mut(GROUP) {
            // SAFETY: the table's kernel runs on this CPU; the group has
            // 1 ..= GROUP rows, every extent checked above.
            unsafe { kernels[group.len() - 1](job, group, k, v) };
        }
    }
}

#[cfg(test)]
mod tests;

//! AVX-512 (F, BW, VL) kernels: two 32-element blocks per 512-bit register
//! for the quantized types, sixteen f32 lanes with masked tails for the
//! float types.
//!
//! Integer block sums stay exact for any input bytes (as in
//! [`super::x86_avx2`], whose block helpers are reused). The 4/5-bit dot
//! products are written once ([`nibble_dots`]) over a level's integer-sum
//! primitive: `vpmaddubsw` + `vpmaddwd` here, `vpdpbusd` at the VNNI level
//! ([`super::x86_vnni`]). Every `unsafe fn` here requires AVX2, FMA, F16C
//! and AVX-512 F/BW/VL; this level's table is only reached through
//! [`super::kernels_for`] after it checked them, and the safe wrappers it
//! holds check the row lengths before any raw read.

use super::super::DType;
use super::x86_avx2::{high_bits, hsum_ps, nibbles, scale_product, sum_u8_i8};
use std::arch::x86_64::*;

super::table! {
    dot: [
        Q4_0 => dot_q4_0_imp, Q4_1 => dot_q4_1_imp, Q5_0 => dot_q5_0_imp,
        Q5_1 => dot_q5_1_imp, Q8_0 => dot_q8_0_imp,
        F32 => dot_f32_imp, F16 => dot_f16_imp, BF16 => dot_bf16_imp,
    ],
    dot4: [Q4_0 => dot_q4_0_n, Q4_1 => dot_q4_1_n, Q5_0 => dot_q5_0_n, Q5_1 => dot_q5_1_n],
    quantize: [Q8_K => quantize_q8_k],
}

/// f32 → Q8_K, bit-identical to the scalar `quantize_row_q8_k` (and to
/// the AVX2 quantizer, whose rules it follows sixteen lanes at a time).
fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    super::super::debug_check_row(DType::Q8_K, src.len(), dst.len());
    let q8k = DType::Q8_K.type_size();
    let nb = (src.len() / super::super::QK_K).min(dst.len() / q8k);
    // SAFETY: only handed out once the CPU was checked for this level's
    // features; nb whole blocks fit both slices.
    unsafe { quantize_q8_k_imp(nb, src.as_ptr(), dst.as_mut_ptr()) };
}

/// Where the AVX-512 Q8_K quantizer's bsum `g` sits among the 32 words of
/// its combined sums: word `8 (g % 4) + g / 4` (the upper half unused).
const BSUM_WORDS: [u16; 32] = {
    let mut w = [0u16; 32];
    let mut g = 0;
    while g < 16 {
        w[g] = (8 * (g % 4) + g / 4) as u16;
        g += 1;
    }
    w
};

/// Per block: the absolute maximum (NaNs skipped) and the first element
/// of that magnitude, `iscale = -127 / it`, `q = min(127,
/// round_ties_even(x · iscale))` with non-finite products giving 0, the
/// sums of sixteen, and `d = 1 / iscale`; an all-zero block is zero bytes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn quantize_q8_k_imp(nb: usize, src: *const f32, dst: *mut u8) {
    const QK_K: usize = super::super::QK_K;
    let q8k = DType::Q8_K.type_size();
    for b in 0..nb {
        // SAFETY: block b of both rows is in bounds (nb from the slice lengths).
        let (x, y) = unsafe { (src.add(b * QK_K), dst.add(b * q8k)) };
        // SAFETY: the block's 256 f32 are readable.
        let ld = |k: usize| _mm512_abs_ps(unsafe { _mm512_loadu_ps(x.add(16 * k)) });
        // Four independent chains (one chain of sixteen maxps was the
        // block's critical path), then their maximum: the same value, as
        // none of them is NaN.
        let mut m = [_mm512_setzero_ps(); 4];
        for k in 0..QK_K / 16 {
            // maxps returns its second operand when either is NaN: NaNs are
            // skipped, as the scalar `>` comparison skips them.
            m[k % 4] = _mm512_max_ps(ld(k), m[k % 4]);
        }
        let m = _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3]));
        let amax = _mm512_reduce_max_ps(m);
        if amax == 0.0 {
            // SAFETY: the block's Q8_K bytes are writable and only written here.
            unsafe { std::ptr::write_bytes(y, 0, q8k) };
            continue;
        }
        // The first element whose magnitude is amax keeps its sign.
        let av = _mm512_set1_ps(amax);
        let first = (0..QK_K / 16)
            .find_map(|k| {
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(ld(k), av);
                (hit != 0).then(|| 16 * k + hit.trailing_zeros() as usize)
            })
            .unwrap_or(0);
        // SAFETY: first < 256.
        let iscale = -127.0 / unsafe { *x.add(first) };
        let iv = _mm512_set1_ps(iscale);
        let inf = _mm512_set1_ps(f32::INFINITY);
        // Sixteen quants as i32 lanes: NaN and ±inf → 0, then round half
        // to even (the default MXCSR mode, as ggml's nearest_int) and cap
        // at 127.
        let quants = |g: usize| {
            // SAFETY: the block's 256 f32 are readable (g < 16).
            let r = _mm512_mul_ps(iv, unsafe { _mm512_loadu_ps(x.add(16 * g)) });
            let finite = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_abs_ps(r), inf);
            _mm512_min_epi32(
                _mm512_cvtps_epi32(_mm512_maskz_mov_ps(finite, r)),
                _mm512_set1_epi32(127),
            )
        };
        // Dword m of the packed bytes comes from dword 4 (m % 4) + m / 4:
        // the two packs interleave four groups per 128-bit lane.
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let mut sums = _mm512_setzero_si512();
        for quad in 0..4 {
            let g = 4 * quad;
            // |q| ≤ 127, so the saturating packs keep every value.
            let bytes = _mm512_permutexvar_epi32(
                order,
                _mm512_packs_epi16(
                    _mm512_packs_epi32(quants(g), quants(g + 1)),
                    _mm512_packs_epi32(quants(g + 2), quants(g + 3)),
                ),
            );
            // SAFETY: quants 64 quad .. 64 quad + 64 of the block are writable.
            unsafe { _mm512_storeu_si512(y.add(4 + 64 * quad).cast(), bytes) };
            // Group g + L is 128-bit lane L: its bytes biased to u8 summed
            // in two qwords, added into qword 2L (at most 16 · 255), which
            // takes word `quad` of that qword in `sums`.
            let s = _mm512_sad_epu8(
                _mm512_xor_si512(bytes, _mm512_set1_epi8(-128)),
                _mm512_setzero_si512(),
            );
            let s = _mm512_add_epi64(s, _mm512_bsrli_epi128::<8>(s));
            sums = _mm512_or_si512(
                sums,
                _mm512_sll_epi64(
                    _mm512_and_si512(s, _mm512_set1_epi64(0xffff)),
                    _mm_cvtsi32_si128(16 * quad as i32),
                ),
            );
        }
        // bsum g = 4 quad + L is word 8L + quad of `sums` (BSUM_WORDS),
        // less the bias 16 · 128.
        // SAFETY: BSUM_WORDS is 32 readable u16.
        let at = unsafe { _mm512_loadu_si512(BSUM_WORDS.as_ptr().cast()) };
        let bsums = _mm256_sub_epi16(
            _mm512_castsi512_si256(_mm512_permutexvar_epi16(at, sums)),
            _mm256_set1_epi16(16 * 128),
        );
        // SAFETY: the 16 i16 bsums are bytes 260 .. 292 of the block.
        unsafe { _mm256_storeu_si256(y.add(4 + QK_K).cast(), bsums) };
        // SAFETY: d is the block's first four bytes.
        unsafe {
            y.cast::<[u8; 4]>()
                .write_unaligned((1.0 / iscale).to_le_bytes())
        };
    }
}

/// Two 256-bit halves as one 512-bit register (`lo` in the low half).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// Sixteen f32 lanes: `a` in the low eight, `b` in the high eight.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn halves(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// Σ q_j y_j − offset Σ y_j for two blocks (eight exact i32 lanes each).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
fn sum2_u8_i8(q: __m512i, y: __m512i, offset: i8) -> __m512i {
    let mut p = _mm512_maddubs_epi16(q, y);
    if offset != 0 {
        p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(_mm512_set1_epi8(offset), y));
    }
    _mm512_madd_epi16(p, _mm512_set1_epi16(1))
}

/// Quantized dot products over pairs of blocks, one per row of the table:
/// type `$xt` times its [`vec_dot_type`](super::super::vec_dot_type)
/// (Q8_0 or Q8_1, whose i8 quants follow its scale and, for Q8_1, sum);
/// `$q(bx)` gives a block's 32 unsigned quants (256 bits), `$off` their
/// offset; `$sum2`
/// combines two blocks' quants into sixteen exact i32 lanes and `$sum1` does
/// one block (the odd last one) in eight. With a Q8_1 partner, `m_x s_y`
/// is added per block.
///
/// `$impn::<C>` computes one `x` row against `C` partner rows, decoding each
/// `x` block once; every column goes through exactly the operations of the
/// one-column `$imp`, so the results are bit-identical to it.
macro_rules! pair_dot {
    ($feat:literal, $sum2:ident, $sum1:ident;
     $($imp:ident, $impn:ident, $xt:ident, $off:expr, |$bx:ident| $q:expr);+ $(;)?) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { $impn::<1>(nb, x, [y])[0] }
        }

        #[target_feature(enable = $feat)]
        unsafe fn $impn<const C: usize>(nb: usize, x: *const u8, ys: [*const u8; C]) -> [f32; C] {
            const YT: DType = super::super::vec_dot_type(DType::$xt);
            const MIN: bool = matches!(YT, DType::Q8_1);
            const XB: usize = DType::$xt.type_size();
            const YB: usize = YT.type_size();
            let quants = |$bx: *const u8| -> __m256i {
                // SAFETY: only called with in-bounds block pointers below.
                unsafe { $q }
            };
            // The partner's 32 quants, after its f16 `d` (and Q8_1's `s`).
            let partner = |by: *const u8| -> __m256i {
                // SAFETY: as above.
                unsafe { _mm256_loadu_si256(by.add(if MIN { 4 } else { 2 }).cast()) }
            };
            let mut acc = [_mm512_setzero_ps(); C];
            let mut mins = [0.0f32; C];
            let mut i = 0;
            while i + 2 <= nb {
                // SAFETY: blocks i and i + 1 < nb of all rows are in bounds.
                let (x0, x1) = unsafe { (x.add(i * XB), x.add((i + 1) * XB)) };
                let qx = join(quants(x0), quants(x1));
                for j in 0..C {
                    // SAFETY: as above.
                    let (y0, y1) = unsafe { (ys[j].add(i * YB), ys[j].add((i + 1) * YB)) };
                    let sumi = $sum2(qx, join(partner(y0), partner(y1)), $off);
                    // SAFETY: the scales are the first bytes of in-bounds blocks.
                    let d = unsafe { halves(scale_product(x0, y0), scale_product(x1, y1)) };
                    acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc[j]);
                    if MIN {
                        // SAFETY: the `_1` blocks store m / s at byte 2.
                        mins[j] += unsafe {
                            scale_product(x0.add(2), y0.add(2))
                                + scale_product(x1.add(2), y1.add(2))
                        };
                    }
                }
                i += 2;
            }
            let mut out = [0.0f32; C];
            for j in 0..C {
                let mut sum = _mm512_reduce_add_ps(acc[j]);
                if i < nb {
                    // SAFETY: block i < nb of all rows is in bounds.
                    let (x0, y0) = unsafe { (x.add(i * XB), ys[j].add(i * YB)) };
                    let sumi = $sum1(quants(x0), partner(y0), $off);
                    // SAFETY: as above.
                    let d = unsafe { scale_product(x0, y0) };
                    sum += hsum_ps(_mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi)));
                    if MIN {
                        // SAFETY: as above.
                        mins[j] += unsafe { scale_product(x0.add(2), y0.add(2)) };
                    }
                }
                out[j] = sum + mins[j];
            }
            out
        }
    )+};
}
pub(super) use pair_dot;

/// The Q4_0, Q4_1, Q5_0 and Q5_1 dot products of a 512-bit level (one
/// column: `dot_q4_0_imp`, ...; `C` columns: `dot_q4_0_n`, ...) with the
/// feature list `$feat` and the level's exact integer sums of two blocks
/// (`$sum2`) and of one (`$sum1`): `Σ q y − offset Σ y`.
macro_rules! nibble_dots {
    ($feat:literal, $sum2:ident, $sum1:ident) => {
        pair_dot! {
            $feat, $sum2, $sum1;
            dot_q4_0_imp, dot_q4_0_n, Q4_0, 8, |bx| nibbles(bx.add(2));
            dot_q4_1_imp, dot_q4_1_n, Q4_1, 0, |bx| nibbles(bx.add(4));
            dot_q5_0_imp, dot_q5_0_n, Q5_0, 16, |bx| _mm256_or_si256(nibbles(bx.add(6)), high_bits(bx.add(2)));
            dot_q5_1_imp, dot_q5_1_n, Q5_1, 0, |bx| _mm256_or_si256(nibbles(bx.add(8)), high_bits(bx.add(4)));
        }
    };
}
pub(super) use nibble_dots;

nibble_dots!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    sum2_u8_i8,
    sum_u8_i8
);

/// Q8_0 · Q8_0: one block per register, both sides widened to i16 (exact).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn dot_q8_0_imp(nb: usize, x: *const u8, y: *const u8) -> f32 {
    const Q8_0: usize = DType::Q8_0.type_size();
    let mut acc = _mm512_setzero_ps();
    for i in 0..nb {
        // SAFETY: block i < nb of both rows is in bounds.
        let (bx, by) = unsafe { (x.add(i * Q8_0), y.add(i * Q8_0)) };
        // SAFETY: as above (32 quants at byte 2).
        let (qx, qy) = unsafe {
            (
                _mm256_loadu_si256(bx.add(2).cast()),
                _mm256_loadu_si256(by.add(2).cast()),
            )
        };
        let sumi = _mm512_madd_epi16(_mm512_cvtepi8_epi16(qx), _mm512_cvtepi8_epi16(qy));
        // SAFETY: as above.
        let d = unsafe { scale_product(bx, by) };
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    _mm512_reduce_add_ps(acc)
}

/// A float dot product: `$load(p, mask)` reads up to sixteen elements (the
/// lanes set in `mask`, zeros elsewhere) as f32; four accumulators of
/// sixteen lanes, then one masked step for the tail.
macro_rules! float_dot {
    ($imp:ident, $es:expr, |$p:ident, $m:ident| $load:expr) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        unsafe fn $imp(n: usize, x: *const u8, y: *const u8) -> f32 {
            let ld = |$p: *const u8, $m: __mmask16| -> __m512 {
                // SAFETY: callers pass pointers whose masked-in elements are in
                // bounds; masked-out lanes are not accessed.
                unsafe { $load }
            };
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= n {
                for (k, a) in acc.iter_mut().enumerate() {
                    let o = (i + 16 * k) * $es;
                    // SAFETY: elements i + 16k .. + 16 <= n are in bounds.
                    let (px, py) = unsafe { (x.add(o), y.add(o)) };
                    *a = _mm512_fmadd_ps(ld(px, !0), ld(py, !0), *a);
                }
                i += 64;
            }
            while i < n {
                let m: __mmask16 = if n - i >= 16 {
                    !0
                } else {
                    (1u16 << (n - i)) - 1
                };
                // SAFETY: the lanes in m are elements i .. min(i + 16, n).
                let (px, py) = unsafe { (x.add(i * $es), y.add(i * $es)) };
                acc[0] = _mm512_fmadd_ps(ld(px, m), ld(py, m), acc[0]);
                i += 16;
            }
            let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            _mm512_reduce_add_ps(s)
        }
    };
}

float_dot!(dot_f32_imp, 4, |p, m| _mm512_maskz_loadu_ps(m, p.cast()));
float_dot!(dot_f16_imp, 2, |p, m| _mm512_cvtph_ps(
    _mm256_maskz_loadu_epi16(m, p.cast())
));
float_dot!(dot_bf16_imp, 2, |p, m| _mm512_castsi512_ps(
    _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p.cast())),
        16
    )
));

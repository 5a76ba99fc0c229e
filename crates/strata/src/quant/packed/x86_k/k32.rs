//! The K tiles of 32-element sub-blocks (eight activation dwords each):
//! Q4_K and Q5_K (`q45_k`, one step per sub-block) and IQ4_XS (`iq4_xs`).

/// Defines the functions below, each with `#[target_feature(enable =
/// $features)]`, in a level's module of `x86_k.rs`, which provides `dot`,
/// `wdot`, `SPLIT` and the imports (and, for the tiles, `sums.rs`'s
/// helpers).
macro_rules! k32_tiles {
    ($features:literal) => {
        /// Dword `t` of sub-block `j` of the Q4_K (`Q5` false) or Q5_K
        /// super-block (chunk) at `c`, per lane: the low nibbles of quant
        /// line `qs + 8 (j / 2) + t` for even `j`, the high ones for odd
        /// `j` (Q5_K: bit `j` of fifth-bit line `3 + t` as bit 4).
        ///
        /// # Safety
        /// The chunk is readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q45_quant<const Q5: bool>(c: *const u8, j: usize, t: usize) -> __m512i {
            let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
            let qs = if Q5 { 11 } else { 3 };
            let m4 = _mm512_set1_epi8(0x0f);
            // SAFETY: quant line qs + 8 (j / 2) + t (< 35 / 43) is
            // inside the chunk.
            let x = unsafe { load(c.add(lines + 64 * (qs + 8 * (j / 2) + t))) };
            let x = if j % 2 == 0 {
                x
            } else {
                _mm512_srli_epi16::<4>(x)
            };
            let q = _mm512_and_si512(x, m4);
            if Q5 {
                // SAFETY: fifth-bit line 3 + t is inside the chunk; the
                // level's features.
                unsafe { fifth_bit(q, load(c.add(lines + 64 * (3 + t))), j) }
            } else {
                q
            }
        }

        /// The scales and mins of the Q4_K / Q5_K super-block at `c`:
        /// lane bytes of `[0]` and `[1]` are the row's scales 0..4 and
        /// 4..8, of `[2]` and `[3]` its mins 0..4 and 4..8 (ggml's
        /// 12-byte form: sc0..3 | top bits, m0..3 | top bits, low
        /// nibbles of sc4..7 | m4..7).
        ///
        /// # Safety
        /// The chunk is readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q45_scales<const Q5: bool>(c: *const u8) -> [__m512i; 4] {
            let lines = if Q5 { Q5_K_LINES } else { Q4_K_LINES };
            // SAFETY: the three scale lines are inside the chunk.
            let (a, b, cc) = unsafe {
                (
                    load(c.add(lines)),
                    load(c.add(lines + 64)),
                    load(c.add(lines + 128)),
                )
            };
            let (m4, m6, top) = (
                _mm512_set1_epi8(0x0f),
                _mm512_set1_epi8(0x3f),
                _mm512_set1_epi8(0x30),
            );
            [
                _mm512_and_si512(a, m6),
                _mm512_or_si512(
                    _mm512_and_si512(cc, m4),
                    _mm512_and_si512(_mm512_srli_epi32::<2>(a), top),
                ),
                _mm512_and_si512(b, m6),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32::<4>(cc), m4),
                    _mm512_and_si512(_mm512_srli_epi32::<2>(b), top),
                ),
            ]
        }

        /// Sub-block `j`'s scale (u8 per lane) of [`q45_scales`]' `sc`.
        #[target_feature(enable = $features)]
        #[inline]
        fn q45_scale(sc: &[__m512i; 4], j: usize) -> __m512i {
            byte(sc[j / 4], j % 4)
        }

        /// The i16 pair `(m_j, m_j)` per lane: sub-block `j`'s min (of
        /// [`q45_scales`]' `sc`) twice, for its bsums dword `j`.
        #[target_feature(enable = $features)]
        #[inline]
        fn q45_min_pair(sc: &[__m512i; 4], j: usize) -> __m512i {
            let m = byte(sc[2 + j / 4], j % 4);
            _mm512_or_si512(m, _mm512_slli_epi32::<16>(m))
        }

        /// Sub-block `J` of a Q4_K (`Q5` false) or Q5_K super-block
        /// for every column: its quants ([`q45_quant`]) times activation
        /// dwords `8J ..+ 8`, scaled by the sub-block's scale.
        ///
        /// # Safety
        /// The chunk at `c` and the Q8_K blocks `cols` are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q45_step<const Q5: bool, const J: usize, const N: usize>(
            quant: &impl Fn(usize, usize) -> __m512i,
            cols: &[*const u8; N],
            scale: __m512i,
            isum: &mut [__m512i; N],
        ) {
            let quant = |t: usize| quant(J, t);
            if SPLIT && !Q5 {
                for t0 in [0, 4] {
                    // SAFETY: the contract, forwarded.
                    let s = unsafe {
                        sub_sums::<N, 4>(cols, quant, 8 * J, t0, [_mm512_setzero_si512(); N])
                    };
                    for (acc, s) in isum.iter_mut().zip(s) {
                        *acc = wdot(*acc, s, scale);
                    }
                }
            } else {
                // SAFETY: the contract, forwarded.
                let s =
                    unsafe { sub_sums::<N, 8>(cols, quant, 8 * J, 0, [_mm512_setzero_si512(); N]) };
                scale_into(isum, s, scale);
            }
            // SAFETY: the level's features.
            unsafe { fence(isum) };
        }

        /// One Q4_K / Q5_K super-block (chunk at `c`) against the Q8_K
        /// blocks `cols`: per column the sixteen rows' f32 terms.
        ///
        /// # Safety
        /// The chunk and the 292-byte blocks are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q45_k<const Q5: bool, const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
        ) -> [__m512; N] {
            // SAFETY: the chunk is readable (contract).
            let quant = |j: usize, t: usize| unsafe { q45_quant::<Q5>(c, j, t) };
            // SAFETY: the contract, forwarded.
            let sc = unsafe { q45_scales::<Q5>(c) };
            // SAFETY: the contract, forwarded.
            unsafe {
                q45_k_with::<Q5, N>(
                    c,
                    cols,
                    quant,
                    |j| q45_scale(&sc, j),
                    |j| q45_min_pair(&sc, j),
                )
            }
        }

        /// [`q45_k`] with the quants from `quant`, the sub-block scales
        /// (u8 per lane) from `scale` and the min pairs from `mins`
        /// ([`q45_quant`]'s, [`q45_scales`]' and [`q45_min_pair`]'s, or a
        /// decoded copy of them).
        ///
        /// # Safety
        /// As [`q45_k`].
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q45_k_with<const Q5: bool, const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
            scale: impl Fn(usize) -> __m512i,
            mins: impl Fn(usize) -> __m512i,
        ) -> [__m512; N] {
            let mut isum = [_mm512_setzero_si512(); N];
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 0, N>(&quant, &cols, scale(0), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 1, N>(&quant, &cols, scale(1), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 2, N>(&quant, &cols, scale(2), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 3, N>(&quant, &cols, scale(3), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 4, N>(&quant, &cols, scale(4), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 5, N>(&quant, &cols, scale(5), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 6, N>(&quant, &cols, scale(6), &mut isum) };
            // SAFETY: the contract, forwarded.
            unsafe { q45_step::<Q5, 7, N>(&quant, &cols, scale(7), &mut isum) };
            // summs = Σ_j m_j (bsums_2j + bsums_2j+1): the pair
            // (m_j, m_j) with bsums dword j.
            // SAFETY: the contract, forwarded.
            let summs = unsafe { bsums_dot(&cols, mins) };
            // SAFETY: the 16 f16 `d` at 0 and `dmin` at 32 are inside
            // the chunk.
            unsafe { min_terms(c, c.add(32), &cols, isum, summs) }
        }

        /// The decoders of the IQ4_XS super-block (chunk) at `c`:
        /// `quant(j, t)`, dword `t` of sub-block `j` as table values
        /// biased by 128 (u8 1 ..= 241): the 4-bit indices of quant line
        /// `1 + 4j + t % 4` (low nibbles for `t < 4`: activation dword
        /// `8j + t`; high ones: `8j + 4 + t`) through one `vpshufb`;
        /// `scale(j)`, the signed scale `s_j` (−32 ..= 31) per lane.
        ///
        /// # Safety
        /// The closures read the chunk: it stays readable while they
        /// are called.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn iq4_xs_dec(
            c: *const u8,
        ) -> (impl Fn(usize, usize) -> __m512i, impl Fn(usize) -> __m512i) {
            let line = move |w: usize| c.wrapping_add(IQ4_XS_LINES + 64 * w);
            // SAFETY: the 16 bytes of the biased table are readable.
            let table = _mm512_broadcast_i32x4(unsafe {
                _mm_loadu_si128(
                    crate::quant::packed::x86_avx2::IQ4_NL_BIASED
                        .as_ptr()
                        .cast(),
                )
            });
            let m4 = _mm512_set1_epi8(0x0f);
            // SAFETY: line 0 (scales_l) and the 16 u16 scales_h are
            // inside the chunk.
            let (lo, hi) = unsafe {
                (
                    load(line(0)),
                    _mm512_cvtepu16_epi32(_mm256_loadu_si256(c.add(32).cast())),
                )
            };
            let scale = move |j: usize| {
                let s = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srl_epi32(lo, count(4 * j)), _mm512_set1_epi32(15)),
                    _mm512_slli_epi32::<4>(_mm512_and_si512(
                        _mm512_srl_epi32(hi, count(2 * j)),
                        _mm512_set1_epi32(3),
                    )),
                );
                _mm512_sub_epi32(s, _mm512_set1_epi32(32))
            };
            let quant = move |j: usize, t: usize| {
                // SAFETY: quant line 1 + 4j + t % 4 (< 33) is inside the chunk.
                let x = unsafe { load(line(1 + 4 * j + t % 4)) };
                let x = if t < 4 { x } else { _mm512_srli_epi16::<4>(x) };
                _mm512_shuffle_epi8(table, _mm512_and_si512(x, m4))
            };
            (quant, scale)
        }

        /// One IQ4_XS super-block (chunk at `c`) against the prepared
        /// IQ4_XS columns `cols` (Q8_K blocks with bias terms,
        /// `k::iq4_xs_bias_terms`): per column the sixteen rows' f32
        /// terms. With the biased values of [`iq4_xs_dec`], sub-block
        /// `j`'s chain starts at the bias term `-128 Σ a` and adds `Σ (v +
        /// 128) a`, ending at `Σ v a` (at most 32 · 128 · 128 in magnitude
        /// on the way), which `vpmulld` scales by `s_j` (−32 ..= 31).
        /// Before the bias terms, the bias was taken off per column and
        /// super-block by eight `wdot`s of scale pairs with the bsums:
        /// dropping them measured 2–4 % at 1024² × 512 (one thread).

        /// The values come from `quant` and the scales from `scale`
        /// ([`iq4_xs_dec`]'s, or a decoded copy of them).
        ///
        /// # Safety
        /// The chunk and the 292-byte blocks are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn iq4_xs_with<const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
            scale: impl Fn(usize) -> __m512i,
        ) -> [__m512; N] {
            let mut isum = [_mm512_setzero_si512(); N];
            for j in 0..8 {
                // Each chain starts at the column's bias term j, `-128 ·`
                // the sub-block's activation sum, and so ends at `Σ v a`.
                // SAFETY: bias term j of each block (the prepared IQ4_XS
                // columns of the contract).
                let init = std::array::from_fn(|i| unsafe { bcast(cols[i], BSUMS, j) });
                // SAFETY: the contract, forwarded.
                let s = unsafe { sub_sums::<N, 8>(&cols, |t| quant(j, t), 8 * j, 0, init) };
                scale_into(&mut isum, s, scale(j));
                // SAFETY: the level's features.
                unsafe { fence(&mut isum) };
            }
            // SAFETY: the 16 f16 `d` are inside the chunk.
            unsafe { terms(c, &cols, isum) }
        }
    };
}
pub(super) use k32_tiles;

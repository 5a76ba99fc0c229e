//! The K tiles of 16-element sub-blocks in ggml's Q6_K element order (four
//! activation dwords each): Q2_K, Q3_K and Q6_K, over one straight-code
//! `sums16` of sixteen `step16`s.

/// Defines the functions below, each with `#[target_feature(enable =
/// $features)]`, in a level's module of `x86_k.rs`, which provides `dot`,
/// `wdot`, `SPLIT` and the imports (and, for the tiles, `sums.rs`'s
/// helpers).
macro_rules! k16_tiles {
    ($features:literal) => {
        /// Sub-block `J` (16 elements, four dwords) for every column:
        /// `isum += scale · Σ_t dot(quant(J, t), activation dword
        /// 4J + t)`, by `vpmulld` (`MUL`: Q6_K, whose sums of up to
        /// 16 · 63 · 128 need it) or by [`wdot`] with `(s_J, 0)` (Q2_K,
        /// Q3_K: sums of at most 16 · 7 · 128 = 14336, an i16).
        ///
        /// # Safety
        /// The Q8_K blocks `cols` are readable, and what `quant` reads.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn step16<const J: usize, const N: usize, const MUL: bool>(
            cols: &[*const u8; N],
            quant: &impl Fn(usize, usize) -> __m512i,
            scale: __m512i,
            isum: &mut [__m512i; N],
        ) {
            // SAFETY: the contract, forwarded.
            let s = unsafe {
                sub_sums::<N, 4>(cols, |t| quant(J, t), 4 * J, 0, [_mm512_setzero_si512(); N])
            };
            if MUL {
                scale_into(isum, s, scale);
            } else {
                for (acc, s) in isum.iter_mut().zip(s) {
                    *acc = wdot(*acc, s, scale);
                }
            }
            // SAFETY: the level's features.
            unsafe { fence(isum) };
        }

        /// The scaled sums `Σ_j scale(j) Σ_{e in j} q(e) a(e)` of one
        /// super-block of 16-element sub-blocks (Q2_K, Q3_K, Q6_K, whose
        /// quants share ggml's Q6_K element order) per column, with
        /// `quant(j, t)` the unsigned quants of elements
        /// `16 j + 4 t .. 16 j + 4 t + 4` (lane `r`: row `r`) and
        /// `scale(j)` as [`step16`] takes it; straight code with constant
        /// sub-block indices.
        ///
        /// # Safety
        /// As [`step16`].
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn sums16<const N: usize, const MUL: bool>(
            cols: &[*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
            scale: impl Fn(usize) -> __m512i,
        ) -> [__m512i; N] {
            let mut isum = [_mm512_setzero_si512(); N];
            // SAFETY: the contract, forwarded.
            unsafe {
                step16::<0, N, MUL>(cols, &quant, scale(0), &mut isum);
                step16::<1, N, MUL>(cols, &quant, scale(1), &mut isum);
                step16::<2, N, MUL>(cols, &quant, scale(2), &mut isum);
                step16::<3, N, MUL>(cols, &quant, scale(3), &mut isum);
                step16::<4, N, MUL>(cols, &quant, scale(4), &mut isum);
                step16::<5, N, MUL>(cols, &quant, scale(5), &mut isum);
                step16::<6, N, MUL>(cols, &quant, scale(6), &mut isum);
                step16::<7, N, MUL>(cols, &quant, scale(7), &mut isum);
                step16::<8, N, MUL>(cols, &quant, scale(8), &mut isum);
                step16::<9, N, MUL>(cols, &quant, scale(9), &mut isum);
                step16::<10, N, MUL>(cols, &quant, scale(10), &mut isum);
                step16::<11, N, MUL>(cols, &quant, scale(11), &mut isum);
                step16::<12, N, MUL>(cols, &quant, scale(12), &mut isum);
                step16::<13, N, MUL>(cols, &quant, scale(13), &mut isum);
                step16::<14, N, MUL>(cols, &quant, scale(14), &mut isum);
                step16::<15, N, MUL>(cols, &quant, scale(15), &mut isum);
            }
            isum
        }

        /// The decoders of the Q6_K super-block (chunk) at `c`:
        /// `quant(j, t)`, the unsigned quants (0 ..= 63, the real quant
        /// plus 32) of sub-block `j`'s dword `t` (lane `r`: row `r`), and
        /// `scale(j)`, its signed scale per lane (i32). Sub-block
        /// `j = 8hh + 2k + e`, dword `t` (element `128hh + 32k + 4tq ..`,
        /// `tq = 4e + t`), in the re-coded form of `k.rs`: for `k < 2`
        /// the whole quant is bits 0..6 of line `16hh + 8k + tq`; for
        /// `k ≥ 2` its nibble is the low (`k = 2`) or high (`k = 3`)
        /// half of line `32 + 8hh + tq` and its top pair bits 6, 7 of
        /// line `16hh + 8(k - 2) + tq`.
        ///
        /// # Safety
        /// The closures read the chunk: it stays readable while they
        /// are called.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q6_dec(
            c: *const u8,
        ) -> (impl Fn(usize, usize) -> __m512i, impl Fn(usize) -> __m512i) {
            let line = move |w: usize| c.wrapping_add(64 * w);
            let (m4, m30, m3f) = (
                _mm512_set1_epi8(0x0f),
                _mm512_set1_epi8(0x30),
                _mm512_set1_epi8(0x3f),
            );
            let quant = move |j: usize, t: usize| {
                let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
                // SAFETY: line 16hh + 8(k % 2) + tq (< 32) is inside the chunk.
                let pq = unsafe { load(line(16 * hh + 8 * (k % 2) + tq)) };
                if k < 2 {
                    return _mm512_and_si512(pq, m3f);
                }
                // SAFETY: line 32 + 8hh + tq (< 48) is inside the chunk.
                let r = unsafe { load(line(32 + 8 * hh + tq)) };
                let lo = if k == 2 { r } else { _mm512_srli_epi16::<4>(r) };
                // Bits 6, 7 to bits 4, 5; the 16-bit shift's carry from
                // the next byte lands in bits 6, 7 and is masked off.
                let hi = _mm512_srli_epi16::<2>(pq);
                _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_and_si512(hi, m30))
            };
            // SAFETY: scale line 48 + j / 4 is inside the chunk.
            let scale = move |j: usize| sbyte(unsafe { load(line(48 + j / 4)) }, j % 4);
            (quant, scale)
        }

        /// The scale pairs `(s_2i, s_2i+1)` (i16, per lane) of the Q6_K
        /// super-block (chunk) at `c`, for its bsums dword `i` (0 ..= 7).
        ///
        /// # Safety
        /// As [`q6_dec`].
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q6_pairs(c: *const u8) -> impl Fn(usize) -> __m512i {
            // SAFETY: scale line 48 + i / 2 is inside the chunk.
            move |i: usize| {
                spair(
                    unsafe { load(c.wrapping_add(64 * (48 + i / 2))) },
                    2 * (i % 2),
                )
            }
        }

        /// One Q6_K super-block (chunk at `c`) against the Q8_K blocks
        /// `cols`: per column the sixteen rows' f32 terms, with the quants
        /// from `quant`, the scales from `scale` and the scale pairs from
        /// `pairs` ([`q6_dec`]'s and [`q6_pairs`]', or a decoded copy of
        /// them).
        ///
        /// # Safety
        /// The chunk and the 292-byte blocks are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q6_k_with<const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
            scale: impl Fn(usize) -> __m512i,
            pairs: impl Fn(usize) -> __m512i,
        ) -> [__m512; N] {
            // SAFETY: the contract, forwarded.
            let isum = unsafe { sums16::<N, true>(&cols, quant, scale) };
            // The `-32` offset: `32 · Σ_j s_j bsums_j`, from the scale
            // pairs (s_2i, s_2i+1) and bsums dword i.
            // SAFETY: the contract, forwarded.
            let corr = unsafe { bsums_dot(&cols, pairs) };
            let isum: [__m512i; N] =
                std::array::from_fn(|i| _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<5>(corr[i])));
            // SAFETY: the 16 f16 `d` are inside the chunk.
            unsafe { terms(c.add(Q6_K_D), &cols, isum) }
        }

        /// The decoders of the Q2_K super-block (chunk) at `c`:
        /// `quant(j, t)` (0 ..= 3), `scale(j)` (0 ..= 15 per lane) and
        /// `mins(i)`, the i16 pair of sub-blocks `2i`, `2i + 1`'s mins.
        /// Sub-block `j = 8hh + 2k + e`, dword `t`: bits `2k` of `qs`
        /// line `4 + 8hh + 4e + t`; scale line `w`: lane bytes are the
        /// scale / min bytes `4w .. 4w + 4` of the row (scale in the
        /// low nibble, min in the high one).
        ///
        /// # Safety
        /// As [`q6_dec`].
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q2_dec(
            c: *const u8,
        ) -> (
            impl Fn(usize, usize) -> __m512i,
            impl Fn(usize) -> __m512i,
            impl Fn(usize) -> __m512i,
        ) {
            let line = move |w: usize| c.wrapping_add(64 * w);
            let m3 = _mm512_set1_epi8(3);
            let quant = move |j: usize, t: usize| {
                // SAFETY: qs line 4 + 8 (j / 8) + 4 (j % 2) + t < 20 is
                // inside the chunk.
                let x = unsafe { load(line(4 + 8 * (j / 8) + 4 * (j % 2) + t)) };
                _mm512_and_si512(_mm512_srl_epi16(x, count(j / 2 % 4 * 2)), m3)
            };
            let scale = move |j: usize| {
                // SAFETY: scale line j / 4 (< 4) is inside the chunk.
                let v = unsafe { load(line(j / 4)) };
                _mm512_and_si512(byte(v, j % 4), _mm512_set1_epi32(15))
            };
            // summs = Σ_j m_j bsums_j: the pair (m_2i, m_2i+1) (the
            // high nibbles of scale bytes 2i, 2i + 1) with bsums dword i.
            let mins = move |i: usize| {
                // SAFETY: scale line i / 2 (< 4) is inside the chunk.
                let v = unsafe { load(line(i / 2)) };
                _mm512_srli_epi16::<4>(upair(v, 2 * (i % 2)))
            };
            (quant, scale, mins)
        }

        /// One Q2_K super-block (chunk at `c`) against the Q8_K blocks
        /// `cols`: per column the sixteen rows' f32 terms, with the quants
        /// from `quant` ([`q2_dec`]'s, or a decoded copy of them).
        ///
        /// # Safety
        /// The chunk and the 292-byte blocks are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q2_k_with<const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
        ) -> [__m512; N] {
            // SAFETY: the contract, forwarded.
            let (_, scale, mins) = unsafe { q2_dec(c) };
            // SAFETY: the contract, forwarded.
            let isum = unsafe { sums16::<N, false>(&cols, quant, scale) };
            // SAFETY: the contract, forwarded.
            let summs = unsafe { bsums_dot(&cols, mins) };
            // SAFETY: the 16 f16 `d` and `dmin` are inside the chunk.
            unsafe { min_terms(c.add(Q2_K_D), c.add(Q2_K_D + 32), &cols, isum, summs) }
        }

        /// The decoders of the Q3_K super-block (chunk) at `c`:
        /// `quant(j, t)`, the unsigned `q' = q2 | hbit << 2 ≤ 7` (the
        /// real quant is `q' - 4`), and the signed scales (−32 ..= 31):
        /// lane bytes `4w .. 4w + 4` of line `w` are the row's scales
        /// `4w .. 4w + 4`. The scales (`a`, `b`, `c` = bytes 0..4, 4..8,
        /// 8..12 of the 12-byte packing, lines 24..27) are decoded for
        /// the sixteen rows as at AVX2 (`x86_avx2_k23.rs`).
        ///
        /// # Safety
        /// As [`q6_dec`].
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q3_dec(c: *const u8) -> (impl Fn(usize, usize) -> __m512i, [__m512i; 4]) {
            let line = move |w: usize| c.wrapping_add(64 * w);
            let (m15, m48) = (_mm512_set1_epi8(15), _mm512_set1_epi8(48));
            // SAFETY: the scale lines 24, 25, 26 are inside the chunk.
            let (a, b, cc) = unsafe { (load(line(24)), load(line(25)), load(line(26))) };
            let lo = |x: __m512i, shift: bool| {
                _mm512_and_si512(if shift { _mm512_srli_epi16::<4>(x) } else { x }, m15)
            };
            let top = |x: __m512i| _mm512_and_si512(x, m48);
            let m32 = _mm512_set1_epi8(32);
            // Lane bytes: the signed scales 4w .. 4w + 4 of the lane's row.
            let sc = [
                _mm512_or_si512(lo(a, false), top(_mm512_slli_epi16::<4>(cc))),
                _mm512_or_si512(lo(b, false), top(_mm512_slli_epi16::<2>(cc))),
                _mm512_or_si512(lo(a, true), top(cc)),
                _mm512_or_si512(lo(b, true), top(_mm512_srli_epi16::<2>(cc))),
            ]
            .map(|s| _mm512_sub_epi8(s, m32));
            // Sub-block j = 8hh + 2k + e, dword t: qs line 8 + 8hh + tq,
            // bits 2k, and bit 4hh + k of hmask line tq (tq = 4e + t).
            let quant = move |j: usize, t: usize| {
                let (hh, k, tq) = (j / 8, j / 2 % 4, 4 * (j % 2) + t);
                // SAFETY: qs line 8 + 8hh + tq (< 24) and hmask line tq
                // (< 8) are inside the chunk.
                let (x, hm) = unsafe { (load(line(8 + 8 * hh + tq)), load(line(tq))) };
                // SAFETY: the level's features.
                unsafe { q3_bits(x, hm, hh, k) }
            };
            (quant, sc)
        }

        /// One Q3_K super-block (chunk at `c`) against the Q8_K blocks
        /// `cols`: per column the sixteen rows' f32 terms, from the
        /// unsigned `q'` of `quant` ([`q3_dec`]'s, or a decoded copy of
        /// them), the `-4` taken off once per super-block as `4 · Σ_j s_j
        /// bsums_j`.
        ///
        /// # Safety
        /// The chunk and the 292-byte blocks are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn q3_k_with<const N: usize>(
            c: *const u8,
            cols: [*const u8; N],
            quant: impl Fn(usize, usize) -> __m512i,
        ) -> [__m512; N] {
            // SAFETY: the contract, forwarded.
            let (_, sc) = unsafe { q3_dec(c) };
            // (s_j, 0) per lane: the sign-extended scale's low i16.
            let scale =
                |j: usize| _mm512_and_si512(sbyte(sc[j / 4], j % 4), _mm512_set1_epi32(0xffff));
            // SAFETY: the contract, forwarded.
            let isum = unsafe { sums16::<N, false>(&cols, quant, scale) };
            let pairs = |i: usize| spair(sc[i / 2], 2 * (i % 2));
            // SAFETY: the contract, forwarded.
            let corr = unsafe { bsums_dot(&cols, pairs) };
            let isum: [__m512i; N] =
                std::array::from_fn(|i| _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<2>(corr[i])));
            // SAFETY: the 16 f16 `d` are inside the chunk.
            unsafe { terms(c.add(Q3_K_D), &cols, isum) }
        }
    };
}
pub(super) use k16_tiles;

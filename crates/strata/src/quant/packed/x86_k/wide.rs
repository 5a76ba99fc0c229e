//! The AVX-512 levels' decode-once K kernel ([`super::super::WideFn`]):
//! the tiles decode every quant line of a super-block again for each pass
//! of eight columns; this kernel decodes the super-block once into 64
//! lines of scratch (line `SUB j + t`: dword `t` of sub-block `j`, sixteen
//! rows) and runs the tiles' own sums (`*_with`) over the copy for every
//! eight columns, adding the terms to the outputs in super-block order
//! from zero: the tiles' (and the scalar reference's) bits.

/// Defines `wide_dec::<T>` in a level's module of `x86_k.rs` (its decoders
/// and `*_with` sums in scope).
macro_rules! k_wide {
    ($features:literal) => {
        /// Writes line `sub j + t` of `buf` as `quant(j, t)`, all 64.
        #[target_feature(enable = $features)]
        #[inline]
        fn fill(buf: &mut Lines, sub: usize, quant: impl Fn(usize, usize) -> __m512i) {
            for (l, line) in buf.0.chunks_exact_mut(64).enumerate() {
                // SAFETY: the line is 64 writable bytes, 64-aligned (Lines).
                unsafe { _mm512_store_si512(line.as_mut_ptr().cast(), quant(l / sub, l % sub)) };
            }
        }

        /// `n` columns (a multiple of 16) of one 16-row K-quant group of
        /// type `T` (the [`WideFn`](super::super::WideFn) contract), each
        /// super-block decoded once for all of them.
        ///
        /// # Safety
        /// As [`WideFn`](super::super::WideFn); the CPU runs the level.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn wide_dec<const T: u8>(t: Tile, n: usize) {
            let cs = chunk(T);
            let sub = k_sub_dwords(T);
            let mut buf = Lines([0; 4096]);
            // The sub-block scales and the pairs the bsums term takes (Q6_K:
            // sixteen scales, eight scale pairs; IQ4_XS: eight scales;
            // Q4_K / Q5_K: eight scales and min pairs),
            // decoded once per super-block too: each pass decoding them
            // again measured 4–8 % slower at n = 512.
            let mut sc = [_mm512_setzero_si512(); 16];
            let mut pr = [_mm512_setzero_si512(); 8];
            for b in 0..t.nb {
                // SAFETY: chunk b of the group is readable (contract).
                let c = unsafe { t.w.add(b * cs) };
                // SAFETY (each arm): the chunk is readable.
                unsafe {
                    match T {
                        Q2_K => fill(&mut buf, sub, q2_dec(c).0),
                        Q3_K => fill(&mut buf, sub, q3_dec(c).0),
                        Q4_K | Q5_K => {
                            let s = if T == Q5_K {
                                fill(&mut buf, sub, |j, t| q45_quant::<true>(c, j, t));
                                q45_scales::<true>(c)
                            } else {
                                fill(&mut buf, sub, |j, t| q45_quant::<false>(c, j, t));
                                q45_scales::<false>(c)
                            };
                            for j in 0..8 {
                                (sc[j], pr[j]) = (q45_scale(&s, j), q45_min_pair(&s, j));
                            }
                        }
                        IQ4_XS => {
                            let (quant, scale) = iq4_xs_dec(c);
                            fill(&mut buf, sub, quant);
                            for (j, sc) in sc[..8].iter_mut().enumerate() {
                                *sc = scale(j);
                            }
                        }
                        _ => {
                            let (quant, scale) = q6_dec(c);
                            fill(&mut buf, sub, quant);
                            sc = std::array::from_fn(scale);
                            pr = std::array::from_fn(q6_pairs(c));
                        }
                    }
                }
                // SAFETY: line sub j + d < 64 of the copy.
                let copy =
                    |j: usize, d: usize| unsafe { load(buf.0.as_ptr().add(64 * (sub * j + d))) };
                for c0 in (0..n).step_by(8) {
                    let cols: [*const u8; 8] =
                        std::array::from_fn(|i| t.a.wrapping_add((c0 + i) * t.a_stride + b * Q8K));
                    // SAFETY (each arm): the chunk and the columns' blocks
                    // b are readable (contract).
                    let terms = unsafe {
                        match T {
                            Q2_K => q2_k_with(c, cols, copy),
                            Q3_K => q3_k_with(c, cols, copy),
                            Q4_K => q45_k_with::<false, 8>(c, cols, copy, |j| sc[j], |j| pr[j]),
                            Q5_K => q45_k_with::<true, 8>(c, cols, copy, |j| sc[j], |j| pr[j]),
                            IQ4_XS => iq4_xs_with(c, cols, copy, |j| sc[j]),
                            _ => q6_k_with(c, cols, copy, |j| sc[j], |i| pr[i]),
                        }
                    };
                    for (i, term) in terms.into_iter().enumerate() {
                        // SAFETY: the 16 rows of column c0 + i are writable
                        // (contract), holding the earlier blocks' sum from
                        // block 1 on.
                        unsafe {
                            let o = t.out.add((c0 + i) * t.out_stride).cast::<f32>();
                            let prev = if b == 0 {
                                _mm512_setzero_ps()
                            } else {
                                _mm512_loadu_ps(o)
                            };
                            _mm512_storeu_ps(o, _mm512_add_ps(prev, term));
                        }
                    }
                }
            }
        }
    };
}
pub(super) use k_wide;

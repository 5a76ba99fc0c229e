//! The AMX level's many-column K kernel ([`super::super::WideFn`]): per
//! super-block the group's weights are decoded once into two byte planes of
//! `v = s_j · (q − off)`, then every 16 columns take one AMX product.
//!
//! - `v`, a quant less its type's offset times its sub-block's scale, is
//!   exactly the integer the VNNI tiles scale and correct by parts:
//!   `Σ_e v_e a_e = Σ_j s_j Σ_{e in j} (q_e − off) a_e` (Q6_K: `off` 32,
//!   Q3_K: 4, IQ4_XS: its biased table values less 128; Q2_K, Q4_K, Q5_K:
//!   0, their mins going through the bsums as in the tiles). `|v| ≤ 128 ·
//!   128`, so `v = 256 hi + lo` with `lo` the unsigned low byte and `hi`
//!   the signed high one.
//! - The planes have the packed layout's line shape (64 lines of 16 rows ×
//!   4 elements), which is the B operand of a tile product as it is:
//!   `tdpbsud` (signed activations × unsigned `lo`) and `tdpbssd` (× signed
//!   `hi`) over the super-block's 256 elements give, per column and row,
//!   `Σ lo a` and `Σ hi a` exactly in i32, and `isum = Σ lo a + 256 Σ hi a`.
//! - The f32 epilogue is the tiles' (`terms`, `min_terms`), added to the
//!   output in super-block order from zero, so every output is the tiles'
//!   (and the scalar reference's) bits.
//!
//! The decode costs about as much as one 16-column product and is shared
//! by every column of the call, which is why the kernel takes all of a
//! unit's columns (the tiles re-decode every super-block per 8 columns).

/// Defines `wide::<T>` in the VNNI level's module of `x86_k.rs` (its
/// decoders, `terms`, `min_terms`, `bsums_dot`, `Lines` and the tags in
/// scope).
macro_rules! k_amx {
    ($features:literal) => {
        /// The low i16 of each lane of `s` in both i16 halves of the lane:
        /// a signed scale as the pair `vpmullw` takes.
        #[target_feature(enable = $features)]
        #[inline]
        fn dup16(s: __m512i) -> __m512i {
            _mm512_or_si512(
                _mm512_and_si512(s, _mm512_set1_epi32(0xffff)),
                _mm512_slli_epi32::<16>(s),
            )
        }

        /// Writes the planes of one super-block: line `L = SUB j + t`
        /// (elements `4L .. 4L + 4` of each row, sub-block `j` of `SUB`
        /// dwords) of `v = scale(j) · (quant(j, t) − off)` as its low
        /// bytes to `lo` and its high bytes to `hi`. `scale(j)` is any
        /// lane form whose low i16 is the signed scale.
        #[target_feature(enable = $features)]
        #[inline]
        fn planes<const SUB: usize>(
            quant: impl Fn(usize, usize) -> __m512i,
            scale: impl Fn(usize) -> __m512i,
            off: i16,
            lo: &mut Lines,
            hi: &mut Lines,
        ) {
            let (offv, m8) = (_mm512_set1_epi16(off), _mm512_set1_epi16(0xff));
            for j in 0..64 / SUB {
                let s16 = dup16(scale(j));
                for t in 0..SUB {
                    let q = quant(j, t);
                    // Even and odd bytes of each lane as i16, less the
                    // offset, times the scale: exact (|v| ≤ 128 · 128).
                    let ve =
                        _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(q, m8), offv), s16);
                    let vo =
                        _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16::<8>(q), offv), s16);
                    let l = _mm512_or_si512(_mm512_and_si512(ve, m8), _mm512_slli_epi16::<8>(vo));
                    let h =
                        _mm512_or_si512(_mm512_srli_epi16::<8>(ve), _mm512_andnot_si512(m8, vo));
                    let at = 64 * (SUB * j + t);
                    // SAFETY: line SUB j + t < 64 of each 4096-byte plane.
                    unsafe {
                        _mm512_store_si512(lo.0.as_mut_ptr().add(at).cast(), l);
                        _mm512_store_si512(hi.0.as_mut_ptr().add(at).cast(), h);
                    }
                }
            }
        }

        /// The f32 terms of super-block `b` (chunk at `c`) for 16 columns
        /// (Q8_K blocks at `a + i · a_stride`) from their products at
        /// `prod` (`lo` C tile, `hi` C tile 1024 bytes later), added to
        /// their 16 outputs at `out + i · out_stride` (set for `b = 0`).
        ///
        /// # Safety
        /// All of the above is readable (and the outputs writable).
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn epilogue<const T: u8>(
            c: *const u8,
            b: usize,
            a: *const u8,
            a_stride: usize,
            prod: *const u8,
            out: *mut u8,
            out_stride: usize,
        ) {
            let cols: [*const u8; 16] = std::array::from_fn(|i| a.wrapping_add(i * a_stride));
            let isum: [__m512i; 16] = std::array::from_fn(|i| {
                // SAFETY: C rows i of both products (contract).
                let (l, h) = unsafe { (load(prod.add(64 * i)), load(prod.add(1024 + 64 * i))) };
                _mm512_add_epi32(l, _mm512_slli_epi32::<8>(h))
            });
            // SAFETY (each arm): the chunk and the columns' blocks are
            // readable (contract).
            let terms = unsafe {
                match T {
                    Q2_K => {
                        let (_, _, mins) = q2_dec(c);
                        let summs = bsums_dot(&cols, mins);
                        min_terms(c.add(Q2_K_D), c.add(Q2_K_D + 32), &cols, isum, summs)
                    }
                    Q3_K => terms(c.add(Q3_K_D), &cols, isum),
                    Q4_K | Q5_K => {
                        let sc = if T == Q5_K {
                            q45_scales::<true>(c)
                        } else {
                            q45_scales::<false>(c)
                        };
                        let summs = bsums_dot(&cols, |j| q45_min_pair(&sc, j));
                        min_terms(c, c.add(32), &cols, isum, summs)
                    }
                    IQ4_XS => terms(c, &cols, isum),
                    _ => terms(c.add(Q6_K_D), &cols, isum),
                }
            };
            for (i, term) in terms.into_iter().enumerate() {
                // SAFETY: the 16 rows of column i are writable (contract);
                // from block 1 on they hold the sum of the earlier blocks.
                unsafe {
                    let o = out.add(i * out_stride).cast::<f32>();
                    let prev = if b == 0 {
                        _mm512_setzero_ps()
                    } else {
                        _mm512_loadu_ps(o)
                    };
                    _mm512_storeu_ps(o, _mm512_add_ps(prev, term));
                }
            }
        }

        /// `n` columns (a multiple of 16) of one 16-row K-quant group of
        /// type `T` (the [`WideFn`](super::super::WideFn) contract), by
        /// AMX tile products over each super-block's decoded planes.
        ///
        /// # Safety
        /// As [`WideFn`](super::super::WideFn); the CPU runs the AMX level.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn wide<const T: u8>(t: Tile, n: usize) {
            // SAFETY: the CPU runs the AMX level (contract).
            let mut tiles = unsafe { crate::isa::x86::amx::Tiles::new() };
            // SAFETY: the contract, forwarded.
            unsafe { wide_with::<T, _>(t, n, &mut tiles) };
        }

        /// [`wide`] with the products of `tiles` (the AMX tiles, or their
        /// scalar stand-in in tests).
        ///
        /// # Safety
        /// As [`wide`], the CPU running `tiles`' instructions.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn wide_with<const T: u8, P: crate::isa::x86::amx::PlaneProducts>(
            t: Tile,
            n: usize,
            tiles: &mut P,
        ) {
            #[repr(C, align(64))]
            struct Planes(Lines, Lines);
            let cs = chunk(T);
            let mut pl = Planes(Lines([0; 4096]), Lines([0; 4096]));
            let mut out = Lines([0; 4096]);
            for b in 0..t.nb {
                // SAFETY: chunk b of the group is readable (contract).
                let c = unsafe { t.w.add(b * cs) };
                // SAFETY (each arm): the chunk is readable.
                unsafe {
                    let Planes(lo, hi) = &mut pl;
                    match T {
                        Q2_K => {
                            let (q, s, _) = q2_dec(c);
                            planes::<4>(q, s, 0, lo, hi);
                        }
                        Q3_K => {
                            let (q, sc) = q3_dec(c);
                            planes::<4>(q, |j| sbyte(sc[j / 4], j % 4), 4, lo, hi);
                        }
                        Q4_K | Q5_K => {
                            let sc = if T == Q5_K {
                                q45_scales::<true>(c)
                            } else {
                                q45_scales::<false>(c)
                            };
                            let s = |j: usize| q45_scale(&sc, j);
                            if T == Q5_K {
                                planes::<8>(|j, t| q45_quant::<true>(c, j, t), s, 0, lo, hi);
                            } else {
                                planes::<8>(|j, t| q45_quant::<false>(c, j, t), s, 0, lo, hi);
                            }
                        }
                        IQ4_XS => {
                            let (q, s) = iq4_xs_dec(c);
                            planes::<8>(q, s, 128, lo, hi);
                        }
                        _ => {
                            let (q, s) = q6_dec(c);
                            planes::<4>(q, s, 32, lo, hi);
                        }
                    }
                }
                let mut c0 = 0;
                while c0 < n {
                    // SAFETY: columns c0 .. c0 + 16 (32) have block b (contract).
                    let a = unsafe { t.a.add(c0 * t.a_stride + b * Q8K) };
                    let wide = n - c0 >= 32;
                    // SAFETY: A rows are the columns' 256 quants of block
                    // b; the planes and `out` are 8192 and 4096 bytes.
                    unsafe {
                        let (p, o) = (pl.0 .0.as_ptr(), out.0.as_mut_ptr());
                        if wide {
                            tiles.dot_planes32(a.add(QS), t.a_stride, p, o);
                        } else {
                            tiles.dot_planes(a.add(QS), t.a_stride, p, o);
                        }
                    }
                    for h in 0..if wide { 2 } else { 1 } {
                        // SAFETY: C of columns c0 + 16h .. + 16 at 2048h.
                        unsafe {
                            epilogue::<T>(
                                c,
                                b,
                                a.wrapping_add(16 * h * t.a_stride),
                                t.a_stride,
                                out.0.as_ptr().add(2048 * h),
                                t.out.add((c0 + 16 * h) * t.out_stride),
                                t.out_stride,
                            )
                        };
                    }
                    c0 += if wide { 32 } else { 16 };
                }
            }
        }
    };
}
pub(super) use k_amx;

//! What every K tile of `x86_k.rs` shares: line and activation loads, lane
//! byte and i16-pair extraction, the exact sub-block sums (`sub_sums`) and
//! their scaling (`scale_into`), and the bsums terms (`bsums_dot`, with the
//! level's `wdot`). The step fence and the f32 epilogues are the AVX2
//! kernels' own (`x86_kshared.rs`), so that the results are the scalar
//! reference's bits.

/// Defines the functions below, each with `#[target_feature(enable =
/// $features)]`, in a level's module of `x86_k.rs`, which provides `dot`,
/// `wdot`, `SPLIT` and the imports (and, for the tiles, `sums.rs`'s
/// helpers).
macro_rules! k_sums {
    ($features:literal) => {
        /// The 64-byte line at `p`.
        ///
        /// # Safety
        /// `p .. p + 64` is readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn load(p: *const u8) -> __m512i {
            // SAFETY: the caller guarantees the 64 bytes.
            unsafe { _mm512_loadu_si512(p.cast()) }
        }

        /// Dword `i` of the Q8_K block at `p` (from its quants, or
        /// from its bsums with `at = BSUMS`) in every lane.
        ///
        /// # Safety
        /// `p + at + 4 i .. + 4` is readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn bcast(p: *const u8, at: usize, i: usize) -> __m512i {
            // SAFETY: the caller guarantees the four bytes.
            _mm512_set1_epi32(unsafe { p.add(at + 4 * i).cast::<i32>().read_unaligned() })
        }

        /// A shift count for the `_mm512_s*l_epi16/32` forms that take it
        /// in a register (constant-folded to an immediate).
        #[target_feature(enable = $features)]
        #[inline]
        fn count(n: usize) -> __m128i {
            _mm_cvtsi32_si128(n as i32)
        }

        /// Sixty-four 64-byte lines, 64-byte aligned: a super-block's
        /// decoded copy (`wide.rs`) or one of its planes (`amx.rs`).
        #[repr(C, align(64))]
        struct Lines([u8; 4096]);

        /// Byte `b` of each lane of `v`, zero-extended to the lane.
        #[target_feature(enable = $features)]
        #[inline]
        fn byte(v: __m512i, b: usize) -> __m512i {
            _mm512_and_si512(_mm512_srl_epi32(v, count(8 * b)), _mm512_set1_epi32(0xff))
        }

        /// Byte `b` of each lane of `v`, sign-extended to the lane.
        #[target_feature(enable = $features)]
        #[inline]
        fn sbyte(v: __m512i, b: usize) -> __m512i {
            _mm512_sra_epi32(_mm512_sll_epi32(v, count(24 - 8 * b)), count(24))
        }

        /// Per lane of `v`, the i16 pair of its bytes `a`, `a + 1`,
        /// sign-extended (`a` is 0 or 2).
        #[target_feature(enable = $features)]
        #[inline]
        fn spair(v: __m512i, a: usize) -> __m512i {
            // Low i16: byte a at its top, shifted down arithmetically;
            // high i16: byte a + 1 (already at the top of the lane for
            // a = 2, moved there by 8 for a = 0), shifted down as well.
            let lo =
                _mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(_mm512_srl_epi32(v, count(8 * a))));
            let hi = _mm512_srai_epi32::<24>(_mm512_sll_epi32(v, count(16 - 8 * a)));
            _mm512_or_si512(
                _mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
                _mm512_slli_epi32::<16>(hi),
            )
        }

        /// Per lane of `v`, the i16 pair of its bytes `a`, `a + 1`,
        /// zero-extended (`a` is 0 or 2).
        #[target_feature(enable = $features)]
        #[inline]
        fn upair(v: __m512i, a: usize) -> __m512i {
            let x = _mm512_srl_epi32(v, count(8 * a));
            _mm512_or_si512(
                _mm512_and_si512(x, _mm512_set1_epi32(0xff)),
                _mm512_and_si512(_mm512_slli_epi32::<8>(x), _mm512_set1_epi32(0x00ff_0000)),
            )
        }

        /// `isum += s · scale` per column, in i32 (exact: see the module
        /// docs for the bounds).
        #[target_feature(enable = $features)]
        #[inline]
        fn scale_into<const N: usize>(isum: &mut [__m512i; N], s: [__m512i; N], scale: __m512i) {
            for (acc, s) in isum.iter_mut().zip(s) {
                *acc = _mm512_add_epi32(*acc, _mm512_mullo_epi32(s, scale));
            }
        }

        /// The sum of one sub-block's `D` dwords for every column, from
        /// `init`: `init[i] + Σ_t dot(quant(t), activation dword d0 + t)`
        /// (zeros, or IQ4_XS's bias terms). One or two columns run two
        /// chains (even and odd `t`) for latency; the same integer either
        /// way.
        ///
        /// # Safety
        /// The Q8_K blocks `cols` are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn sub_sums<const N: usize, const D: usize>(
            cols: &[*const u8; N],
            quant: impl Fn(usize) -> __m512i,
            d0: usize,
            t0: usize,
            init: [__m512i; N],
        ) -> [__m512i; N] {
            let mut s = init;
            let mut s1 = [_mm512_setzero_si512(); N];
            for t in t0..t0 + D {
                let q = quant(t);
                for i in 0..N {
                    // SAFETY: activation dword d0 + t < 64 of the block.
                    let a = unsafe { bcast(cols[i], QS, d0 + t) };
                    if N <= 2 && t % 2 == 1 {
                        s1[i] = dot(s1[i], q, a);
                    } else {
                        s[i] = dot(s[i], q, a);
                    }
                }
            }
            if N <= 2 {
                for i in 0..N {
                    s[i] = _mm512_add_epi32(s[i], s1[i]);
                }
            }
            s
        }

        /// `Σ_i pairs(i) · bsums dword i` per column (the i16 pair of
        /// sub-blocks `2i, 2i + 1` with their bsums): the shared
        /// [`bsums_dot`](super::super::x86_kshared::bsums_dot) with this
        /// level's [`wdot`].
        ///
        /// # Safety
        /// The Q8_K blocks `cols` are readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn bsums_dot<const N: usize>(
            cols: &[*const u8; N],
            pairs: impl Fn(usize) -> __m512i,
        ) -> [__m512i; N] {
            // SAFETY: the contract; the level's features.
            unsafe { super::super::x86_kshared::bsums_dot(cols, pairs, |t, x, y| wdot(t, x, y)) }
        }
    };
}
pub(super) use k_sums;

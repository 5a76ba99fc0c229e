//! Unit tests of the packed layout: kernels exist where `has_kernels`
//! says, chunk geometry, pack / unpack, and the activation quantizers.

use super::*;

/// Every level that says it has packed kernels hands them out (else the
/// MUL_MAT path silently takes the unpacking fallback, which the result
/// tests cannot tell apart), and no other level does.
#[test]
fn kernels_exist_exactly_where_has_kernels_says() {
    use crate::isa::Isa;
    for isa in Isa::ALL {
        for t in DType::QUANTIZED {
            assert_eq!(
                kernels_for(isa, t).is_some(),
                has_kernels(isa, t),
                "{isa} {t}"
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.is_supported() {
        for t in [DType::Q4_0, DType::IQ4_NL].into_iter().chain(K_TYPES) {
            assert!(has_kernels(Isa::Avx2, t), "AVX2 has packed {t} kernels");
        }
    }
    // Above AVX2 the AVX2 tiles stand in where the level has none.
    for isa in [Isa::AvxVnni, Isa::Avx512, Isa::Vnni] {
        for t in [DType::Q8_0, DType::IQ4_NL, DType::Q4_K, DType::Q6_K] {
            assert_eq!(has_kernels(isa, t), isa.is_supported(), "{isa} {t}");
        }
    }
    for t in [DType::IQ4_NL].into_iter().chain(K_TYPES) {
        assert!(
            !has_kernels(Isa::Scalar, t),
            "scalar {t}: the per-block path"
        );
    }
    // NEON: tiles for the K-quants exactly where `sdot` is (as for the
    // legacy types), never for IQ4_NL.
    assert!(!has_kernels(Isa::Neon, DType::IQ4_NL), "NEON IQ4_NL");
    for t in [DType::Q4_0, DType::Q8_0].into_iter().chain(K_TYPES) {
        assert_eq!(
            has_kernels(Isa::Neon, t),
            Isa::Neon.is_supported() && neon_dotprod(),
            "NEON {t}"
        );
    }
}

/// The AVX-512 levels hand out their own sixteen-row tiles for the K-quants
/// and IQ4_NL, not the AVX2 ones: every tile gives the scalar reference's
/// integer sums, so the result tests pass on either and cannot tell a
/// dispatch that fell back to AVX2.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_levels_run_their_own_k_and_iq4_nl_tiles() {
    use crate::isa::Isa;
    let avx2_tiles = |t| kernels_for(Isa::Avx2, t).expect("AVX2 tiles").tiles;
    for isa in [Isa::Avx512, Isa::Vnni] {
        if !isa.is_supported() {
            continue;
        }
        for t in K_TYPES.into_iter().chain([DType::IQ4_NL]) {
            // IQ4_XS / IQ4_NL values biased by 128 would saturate
            // `vpmaddubsw`: the AVX-512 level without VNNI keeps AVX2's.
            let own = isa == Isa::Vnni || !matches!(t, DType::IQ4_XS | DType::IQ4_NL);
            let tiles = kernels_for(isa, t).expect("kernels").tiles;
            for (nr, (a, b)) in tiles.iter().zip(avx2_tiles(t)).enumerate() {
                assert_eq!(
                    !std::ptr::fn_addr_eq(*a, b),
                    own,
                    "{isa} {t} {}-column tile: own tile expected {own}",
                    nr + 1
                );
            }
        }
    }
}

/// Every x86 level with K tiles has a many-column kernel for the six K
/// types and, where AVX2's tiles run them, for Q5_0, Q5_1 and IQ4_NL, and
/// none for the others: the decode-once kernel of its tiles
/// (AVX2's, or the AVX-512 levels' own), and at the AMX level the AMX one
/// beside the VNNI tiles (the result tests cannot tell a level that never
/// used its own).
#[cfg(target_arch = "x86_64")]
#[test]
fn wide_kernels_are_where_they_belong() {
    use crate::isa::Isa;
    let same = |a: Option<WideFn>, b: Option<WideFn>| match (a, b) {
        (Some(a), Some(b)) => std::ptr::fn_addr_eq(a, b),
        _ => false,
    };
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for t in DType::ALL.into_iter().filter(|&t| is_packable(t)) {
            let Some(k) = kernels_for(isa, t) else {
                continue;
            };
            // AVX2's many-column kernels for the legacy types with the
            // costliest decoding (`x86_avx2_lw`), only where AVX2's own
            // tiles run them.
            let legacy = [DType::Q5_0, DType::Q5_1, DType::IQ4_NL].contains(&t)
                && std::ptr::fn_addr_eq(
                    k.tiles[7],
                    kernels_for(Isa::Avx2, t).expect("AVX2's").tiles[7],
                );
            assert_eq!(
                k.wide.is_some(),
                K_TYPES.contains(&t) || legacy,
                "{isa} {t}"
            );
            if !K_TYPES.contains(&t) || isa == Isa::Avx2 {
                continue;
            }
            let lower = kernels_for(isa.lower(), t).expect("lower level's kernels");
            let own_tiles = !std::ptr::fn_addr_eq(k.tiles[7], lower.tiles[7]);
            if isa == Isa::Amx {
                assert!(!own_tiles, "{t}: the VNNI tiles at amx");
                assert!(!same(k.wide, lower.wide), "{t}: the AMX kernel at amx");
            } else {
                // Its own wide kernel exactly where it has its own tiles.
                assert_eq!(!same(k.wide, lower.wide), own_tiles, "{isa} {t}");
            }
        }
    }
}

#[test]
fn packed_size_is_ggml_size_and_regions_tile_the_chunk() {
    for (t, cs) in [
        (DType::Q4_0, 288),
        (DType::Q4_1, 320),
        (DType::Q5_0, 352),
        (DType::Q5_1, 384),
        (DType::Q8_0, 544),
        (DType::IQ4_NL, 288),
    ] {
        for b in 0..2 {
            let c = Chunk::of(t, b);
            assert_eq!(c.size(), cs, "{t}");
            let quants = if t == DType::Q8_0 { 512 } else { 256 };
            let mut regions = vec![(c.d, 32), (c.qs, quants)];
            if c.m != 0 {
                regions.push((c.m, 32));
            }
            if Chunk::has_qh(t) {
                regions.push((c.qh, 64));
            }
            regions.sort();
            let mut at = 0;
            for (start, len) in regions {
                assert_eq!(start, at, "{t} chunk {b}: regions are contiguous");
                at += len;
            }
            assert_eq!(at, cs, "{t} chunk {b}: regions fill the chunk");
            // In a 64-byte aligned group, every 64-byte quant load is aligned.
            assert_eq!((b * cs + c.qs) % 64, 0, "{t} chunk {b}: aligned quants");
        }
    }
}

#[test]
fn q4_byte_positions_match_the_documented_layout() {
    // Row r, block b: nibble byte j = (r * 16 + j + b) as u8.
    let t = DType::Q4_0;
    let rs = t.row_size(64);
    let mut src = vec![0u8; ROWS * rs];
    for r in 0..ROWS {
        for b in 0..2 {
            src[r * rs + 18 * b] = (r + b) as u8; // d's low byte
            for j in 0..16 {
                src[r * rs + 18 * b + 2 + j] = (r * 16 + j + b) as u8;
            }
        }
    }
    let mut dst = vec![0u8; src.len()];
    pack(t, [64, 16, 1, 1], &src, &mut dst).unwrap();
    // Chunk 0 (even): quants at 0, scales at 256; chunk 1 (odd): scales
    // at 288, quants at 288 + 32.
    for (b, qs, d) in [(0, 0, 256), (1, 320, 288)] {
        for r in 0..ROWS {
            assert_eq!(dst[d + 2 * r], (r + b) as u8);
            for i in 0..4 {
                for tt in 0..4 {
                    assert_eq!(
                        dst[qs + 64 * i + 4 * r + tt],
                        (r * 16 + 4 * i + tt + b) as u8
                    );
                }
            }
        }
    }
}

/// Rows with NaN, ±inf, zero blocks, subnormals, exact rounding ties
/// (block max 127, so `1/d` is 1) and random values.
fn hard_rows(k: usize) -> Vec<Vec<f32>> {
    let mut rng = crate::conformance::Rng::new(17);
    let mut rows = vec![rng.vec(k, -3.0, 2.0), vec![0.0; k]];
    let mut ties: Vec<f32> = (0..k).map(|i| (i % 254) as f32 - 126.5).collect();
    for b in ties.chunks_exact_mut(QK) {
        b[0] = 127.0;
    }
    rows.push(ties);
    let mut odd = rng.vec(k, -1.0, 1.0);
    odd[1] = f32::NAN;
    odd[40 % k] = f32::INFINITY;
    odd[k - 1] = -f32::INFINITY;
    odd[k / 2] = 1e-40;
    rows.push(odd);
    let mut all_nan = vec![f32::NAN; k];
    all_nan[k - 1] = 0.25;
    rows.push(all_nan);
    rows.push(rng.vec(k, -1e-38, 1e-38));
    rows.push(rng.vec(k, -6e4, 6e4));
    rows
}

#[test]
fn simd_activation_quantizers_match_scalar_quantize_and_prepare() {
    use crate::{isa::Isa, quant::simd::quantize_row_fn_for};
    for isa in Isa::ALL {
        for t in DType::ALL.into_iter().filter(|&t| is_packable(t)) {
            let Some(kern) = kernels_for(isa, t) else {
                continue;
            };
            let vdt = crate::quant::vec_dot_type(t);
            let bs = t.block_size();
            for k in [bs, 3 * bs, 18 * bs] {
                for row in hard_rows(k) {
                    let mut q = vec![0u8; vdt.row_size(k)];
                    quantize_row_fn_for(Isa::Scalar, vdt).unwrap()(&row, &mut q);
                    let mut want = vec![0u8; act_bytes(t, k)];
                    prepare_activation(t, &q, &mut want);
                    let mut got = vec![0u8; want.len()];
                    // SAFETY: the level is supported (kernels_for); sizes as required.
                    unsafe { (kern.quantize)(row.as_ptr(), k / bs, got.as_mut_ptr()) };
                    assert_eq!(got, want, "{isa} {t} k={k} row {row:?}");
                }
            }
        }
    }
}

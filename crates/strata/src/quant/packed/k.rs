//! The packed layout of the K-quants (Q2_K .. Q6_K, IQ4_XS): one chunk per 256-element
//! super-block of the 16 rows of a group, `16 × type_size` bytes, holding
//! each row's f16 header fields as sixteen consecutive f16 and the rest of
//! the row's super-block (its *body*: scales and quants, ggml's bytes in
//! ggml's order) as dword *lines*: byte `64 w + 4 r + t` of the line area is
//! body byte `4 w + t` of row `r`.
//!
//! | type | chunk bytes | header f16 ×16 | lines (body bytes) |
//! |------|-------------|----------------|--------------------|
//! | Q4_K | 2304 | `d` at 0, `dmin` at 32 | 35 at 64 (block bytes 4..144: scales 12 B, then `qs`) |
//! | Q5_K | 2816 | `d` at 0, `dmin` at 32 | 43 at 64 (block bytes 4..176: scales 12 B, `qh` 32 B, `qs`) |
//! | Q6_K | 3360 | `d` at 3328 | 52 at 0 (block bytes 0..208: `ql`, `qh`, `scales`) |
//! | Q2_K | 1344 | `d` at 1280, `dmin` at 1312 | 20 at 0 (block bytes 0..80: `scales` 16 B, `qs`) |
//! | Q3_K | 1760 | `d` at 1728 | 27 at 0 (block bytes 0..108: `hmask` 32 B, `qs` 64 B, `scales` 12 B) |
//! | IQ4_XS | 2176 | `d` at 0, `scales_h` at 32 | 33 at 64 (block bytes 4..136: `scales_l` 4 B, `qs`) |
//!
//! A 32-byte load at `line + 32 h` gives, in its 32-bit lane `r`, body dword
//! `w` of row `8 h + r` (the AVX2 kernels' register shape, as for the
//! legacy types). Only bytes move, except in Q6_K's quants (below), so
//! [`pack_chunk`] and [`unpack_block`] are exact inverses for any bytes, and
//! the chunk is the size of the 16 super-blocks it holds.
//!
//! Q6_K's `ql` / `qh` bytes are re-coded ([`q6_recode`]), three bytes at a
//! time in place: for `hh < 2`, `l < 32`, ggml's `P = ql[64 hh + l]` (low
//! nibbles of `k = 0` and `k = 2`, element `128 hh + 32 k + l`), `Q =
//! ql[64 hh + 32 + l]` (`k = 1`, `3`) and `R = qh[32 hh + l]` (top bit pairs
//! of `k = 0..4`) become `P' = q0 | h2 << 6`, `Q' = q1 | h3 << 6` (the whole
//! 6-bit quants of `k = 0`, `1`, each with the top pair of `k + 2` above it)
//! and `R' = lo2 | lo3 << 4`. The kernels then decode `k = 0`, `1` with one
//! mask and `k = 2`, `3` with two shifts, where ggml's form takes a shift
//! and mask for every nibble and every bit pair (measured on Zen 3: the
//! bit-pair decode was a quarter of the one-column Q6_K kernel's time).

use super::ROWS;
use crate::tensor::DType;

/// Bytes of a Q8_K block (f32 `d`, 256 × i8, 16 × i16 bsums at [`Q8K_BSUMS`]).
const Q8K: usize = DType::Q8_K.type_size();
/// Offset of a Q8_K block's 16 i16 bsums.
const Q8K_BSUMS: usize = 4 + 256;

/// IQ4_XS's prepared activations from Q8_K rows, in place: each block's 16
/// i16 bsums become the eight i32 *bias terms* `-128 · (bsums_2j +
/// bsums_2j+1)` (at most 128 · 32 · 128 in magnitude), the rest of the
/// block unchanged. The AVX-512 VNNI tiles take IQ4_XS's table values
/// biased by 128 (unsigned for `vpdpbusd`) and start sub-block `j`'s
/// integer chain from term `j`, so the chain ends at `Σ v a` with no
/// per-column correction after it; every other kernel reads only `d` and
/// the quants. A trailing partial block is left as it is.
pub(super) fn iq4_xs_bias_terms(q8k: &mut [u8]) {
    for blk in q8k.chunks_exact_mut(Q8K) {
        let s = &mut blk[Q8K_BSUMS..];
        let b: [i32; 16] =
            std::array::from_fn(|i| i32::from(i16::from_le_bytes([s[2 * i], s[2 * i + 1]])));
        for j in 0..8 {
            let t = -128 * (b[2 * j] + b[2 * j + 1]);
            s[4 * j..4 * j + 4].copy_from_slice(&t.to_le_bytes());
        }
    }
}

/// Where a K type's bytes go inside a chunk.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// `type_size` of one super-block.
    pub ts: usize,
    /// Header f16 fields: (offset in the block, offset of the 16 f16 in the chunk).
    pub heads: &'static [(usize, usize)],
    /// Start and length (a multiple of 4) of the body inside the block.
    pub body: (usize, usize),
    /// Offset of line 0 in the chunk.
    pub lines: usize,
    /// Q6_K: the quants are re-coded ([`q6_recode`]) in the chunk.
    pub q6: bool,
}

/// Chunk offset of Q4_K's line 0 (its three scale lines, then 32 quant lines).
pub(super) const Q4_K_LINES: usize = 64;
/// Chunk offset of Q5_K's line 0 (three scale lines, 8 `qh` lines, then 32
/// `qs` lines): Q4_K's header and scale lines, with the fifth bits between
/// the scales and the nibbles as in ggml's block.
pub(super) const Q5_K_LINES: usize = 64;
/// Chunk offset of Q6_K's sixteen `d`.
pub(super) const Q6_K_D: usize = 3328;

/// Chunk offset of Q2_K's sixteen `d` (then the sixteen `dmin`).
pub(super) const Q2_K_D: usize = 1280;
/// Chunk offset of Q3_K's sixteen `d`.
pub(super) const Q3_K_D: usize = 1728;
/// Chunk offset of IQ4_XS's line 0 (the `scales_l` line, then 32 `qs` lines).
pub(super) const IQ4_XS_LINES: usize = 64;

/// The layout of K type `dtype`, `None` for every other type.
pub(super) const fn layout(dtype: DType) -> Option<Layout> {
    // Per type: the header fields, the body and line 0's offset.
    let (heads, body, lines): (&'static [(usize, usize)], (usize, usize), usize) = match dtype {
        DType::Q4_K => (&[(0, 0), (2, 32)], (4, 140), Q4_K_LINES),
        DType::Q5_K => (&[(0, 0), (2, 32)], (4, 172), Q5_K_LINES),
        DType::Q6_K => (&[(208, Q6_K_D)], (0, 208), 0),
        DType::Q2_K => (&[(80, Q2_K_D), (82, Q2_K_D + 32)], (0, 80), 0),
        DType::Q3_K => (&[(108, Q3_K_D)], (0, 108), 0),
        DType::IQ4_XS => (&[(0, 0), (2, 32)], (4, 132), IQ4_XS_LINES),
        _ => return None,
    };
    Some(Layout {
        ts: dtype.type_size(),
        heads,
        body,
        lines,
        q6: matches!(dtype, DType::Q6_K),
    })
}

/// Bytes of a Q6_K block's `ql` (then its 64 bytes of `qh`).
const Q6_QL: usize = 128;

/// Re-codes (`pack`) or restores (`!pack`) the quants of one Q6_K block
/// (its first 192 bytes: `ql`, `qh`), as the module docs describe. The two
/// directions are inverse bijections on all byte values.
pub(super) fn q6_recode(blk: &mut [u8], pack: bool) {
    for hh in 0..2 {
        for l in 0..32 {
            let (ip, iq, ir) = (64 * hh + l, 64 * hh + 32 + l, Q6_QL + 32 * hh + l);
            let (p, q, r) = (blk[ip], blk[iq], blk[ir]);
            let (np, nq, nr) = if pack {
                // p, q: ggml's ql bytes; r: the four bit pairs.
                (
                    (p & 0x0f) | (r & 0x03) << 4 | (r >> 4 & 0x03) << 6,
                    (q & 0x0f) | (r >> 2 & 0x03) << 4 | (r >> 6) << 6,
                    (p >> 4) | (q & 0xf0),
                )
            } else {
                (
                    (p & 0x0f) | (r & 0x0f) << 4,
                    (q & 0x0f) | (r & 0xf0),
                    (p >> 4 & 0x03) | (q >> 4 & 0x03) << 2 | (p >> 6) << 4 | (q >> 6) << 6,
                )
            };
            (blk[ip], blk[iq], blk[ir]) = (np, nq, nr);
        }
    }
}

/// Packs super-block `b` of the 16 ggml rows of `group` (row stride `rs`)
/// into `chunk`.
pub(super) fn pack_chunk(l: Layout, group: &[u8], rs: usize, b: usize, chunk: &mut [u8]) {
    let mut q6 = [0u8; DType::Q6_K.type_size()];
    for r in 0..ROWS {
        let mut blk = &group[r * rs + b * l.ts..][..l.ts];
        if l.q6 {
            q6.copy_from_slice(blk);
            q6_recode(&mut q6, true);
            blk = &q6;
        }
        for &(bo, co) in l.heads {
            chunk[co + 2 * r..co + 2 * r + 2].copy_from_slice(&blk[bo..bo + 2]);
        }
        let (start, len) = l.body;
        for (w, src) in blk[start..start + len].chunks_exact(4).enumerate() {
            chunk[l.lines + 64 * w + 4 * r..][..4].copy_from_slice(src);
        }
    }
}

/// Extracts row `r`'s super-block from `chunk` into the ggml block `blk`.
pub(super) fn unpack_block(l: Layout, chunk: &[u8], r: usize, blk: &mut [u8]) {
    for &(bo, co) in l.heads {
        blk[bo..bo + 2].copy_from_slice(&chunk[co + 2 * r..co + 2 * r + 2]);
    }
    let (start, len) = l.body;
    for (w, dst) in blk[start..start + len].chunks_exact_mut(4).enumerate() {
        dst.copy_from_slice(&chunk[l.lines + 64 * w + 4 * r..][..4]);
    }
    if l.q6 {
        q6_recode(blk, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IQ4_XS's bias terms: each pair of bsums becomes `-128 ·` their sum
    /// as a little-endian i32 (the extremes included), `d` and the quants
    /// untouched, every block of the row, a trailing partial block not.
    #[test]
    fn iq4_xs_bias_terms_replace_each_pair_of_bsums() {
        let bsums: [i16; 16] = [
            1, 2, -3, 7, 2048, 2048, -2048, -2048, 0, 0, 5, -5, 127, -128, 300, 1,
        ];
        let mut row = vec![0u8; 2 * Q8K + 7];
        for (b, blk) in row.chunks_exact_mut(Q8K).enumerate() {
            blk[..Q8K_BSUMS]
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i + b) as u8);
            for (i, v) in bsums.iter().enumerate() {
                let v = v * (b as i16 + 1);
                blk[Q8K_BSUMS + 2 * i..Q8K_BSUMS + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let tail = row[2 * Q8K..].to_vec();
        let before = row.clone();
        iq4_xs_bias_terms(&mut row);
        for (b, blk) in row.chunks_exact(Q8K).enumerate() {
            assert_eq!(
                blk[..Q8K_BSUMS],
                before[b * Q8K..b * Q8K + Q8K_BSUMS],
                "block {b}"
            );
            let m = b as i32 + 1;
            let want = [3, 4, 4096, -4096, 0, 0, -1, 301].map(|s: i32| -128 * s * m);
            for (j, w) in want.iter().enumerate() {
                let at = Q8K_BSUMS + 4 * j;
                let got = i32::from_le_bytes(blk[at..at + 4].try_into().unwrap());
                assert_eq!(got, *w, "block {b} term {j}");
            }
        }
        assert_eq!(row[2 * Q8K..], tail[..]);
    }

    /// Header fields and lines tile the chunk exactly (the packed tensor is
    /// ggml's size), and every line is 32-byte aligned in a 32-byte aligned
    /// group whatever the chunk's index.
    #[test]
    fn regions_tile_the_chunk() {
        for t in crate::quant::packed::K_TYPES {
            let l = layout(t).unwrap();
            let mut regions: Vec<(usize, usize)> =
                l.heads.iter().map(|&(_, co)| (co, 2 * ROWS)).collect();
            regions.push((l.lines, 16 * l.body.1));
            regions.sort();
            let mut at = 0;
            for (start, len) in regions {
                assert_eq!(start, at, "{t}: contiguous");
                at += len;
            }
            assert_eq!(at, ROWS * l.ts, "{t}: fills the chunk");
            let header: usize = l.heads.len() * 2;
            assert_eq!(header + l.body.1, l.ts, "{t}: every block byte moves");
            assert_eq!(l.lines % 32, 0);
            assert_eq!((ROWS * l.ts) % 32, 0, "{t}: chunks keep lines aligned");
        }
    }

    /// Packs 16 rows of `t` (row size `rs`, filler bytes from `mul`) and
    /// checks the documented positions: `d` and `dmin` of row r at 2r and
    /// 32 + 2r, then `words` 4-byte words of row r at 64 + 64w + 4r. Returns
    /// the rows and the chunk for type-specific checks.
    fn check_k_lines(
        t: DType,
        rs: usize,
        mul: usize,
        words: usize,
        more: impl Fn(usize, &[u8], &[u8]),
    ) {
        let l = layout(t).unwrap();
        let src: Vec<u8> = (0..ROWS * rs).map(|i| (i * mul + i / rs) as u8).collect();
        let mut chunk = vec![0u8; ROWS * rs];
        pack_chunk(l, &src, rs, 0, &mut chunk);
        for r in 0..ROWS {
            let row = &src[r * rs..][..rs];
            assert_eq!(chunk[2 * r..2 * r + 2], row[0..2], "d");
            assert_eq!(chunk[32 + 2 * r..32 + 2 * r + 2], row[2..4], "dmin");
            for w in 0..words {
                assert_eq!(chunk[64 + 64 * w + 4 * r..][..4], row[4 + 4 * w..][..4]);
            }
            more(r, row, &chunk);
        }
    }

    #[test]
    fn q4_k_byte_positions_match_the_documented_layout() {
        check_k_lines(DType::Q4_K, 144, 7, 35, |_, _, _| {});
    }

    #[test]
    fn q5_k_byte_positions_match_the_documented_layout() {
        check_k_lines(DType::Q5_K, 176, 11, 43, |r, row, chunk| {
            // qh byte l is in line 3 + l / 4; qs byte i in line 11 + i / 4.
            assert_eq!(chunk[64 + 64 * 3 + 4 * r], row[16], "qh[0]");
            assert_eq!(chunk[64 + 64 * 11 + 4 * r], row[48], "qs[0]");
        });
    }

    #[test]
    fn iq4_xs_byte_positions_match_the_documented_layout() {
        check_k_lines(DType::IQ4_XS, 136, 13, 33, |r, row, chunk| {
            // scales_l in line 0, qs byte i in line 1 + i / 4.
            assert_eq!(chunk[64 + 4 * r..][..4], row[4..8], "scales_l");
            assert_eq!(chunk[64 + 64 + 4 * r], row[8], "qs[0]");
        });
    }

    /// Q6_K's re-coding: restoring inverts it for every byte triple, and
    /// the re-coded bytes hold each element's 6-bit quant where the
    /// kernels read it (`k = 0, 1`: `P' & 63`, `Q' & 63`; `k = 2, 3`: the
    /// nibble of `R'` with bits 6, 7 of `P'` / `Q'` above it), checked
    /// against ggml's decoding.
    #[test]
    fn q6_recode_is_invertible_and_holds_the_quants() {
        let mut rng = crate::conformance::Rng::new(6);
        for _ in 0..200 {
            let ggml = rng.bytes(192);
            let mut blk = ggml.clone();
            q6_recode(&mut blk, true);
            for hh in 0..2 {
                for l in 0..32 {
                    let (p, q, r) = (
                        blk[64 * hh + l],
                        blk[64 * hh + 32 + l],
                        blk[128 + 32 * hh + l],
                    );
                    let got = [
                        p & 63,
                        q & 63,
                        (r & 15) | (p >> 6) << 4,
                        (r >> 4) | (q >> 6) << 4,
                    ];
                    for (k, &g) in got.iter().enumerate() {
                        let nib = ggml[64 * hh + 32 * (k % 2) + l] >> (4 * (k / 2)) & 15;
                        let top = ggml[128 + 32 * hh + l] >> (2 * k) & 3;
                        assert_eq!(g, nib | top << 4, "hh {hh} l {l} k {k}");
                    }
                }
            }
            q6_recode(&mut blk, false);
            assert_eq!(blk, ggml);
        }
        // Every value of every byte of a triple round-trips.
        for v in 0..=255u8 {
            for i in 0..3 {
                let mut blk = vec![0x5au8; 192];
                blk[[0, 32, 128][i]] = v;
                let before = blk.clone();
                q6_recode(&mut blk, true);
                q6_recode(&mut blk, false);
                assert_eq!(blk, before);
            }
        }
    }

    /// Q2_K and Q3_K: lines from block byte 0, then the header f16 of the 16
    /// rows side by side.
    #[test]
    fn q2_k_and_q3_k_byte_positions_match_the_documented_layout() {
        for (t, heads, words) in [
            (DType::Q2_K, &[(80, Q2_K_D), (82, Q2_K_D + 32)][..], 20),
            (DType::Q3_K, &[(108, Q3_K_D)][..], 27),
        ] {
            let rs = t.type_size();
            let l = layout(t).unwrap();
            let src: Vec<u8> = (0..ROWS * rs).map(|i| (i * 5 + i / rs) as u8).collect();
            let mut chunk = vec![0u8; ROWS * rs];
            pack_chunk(l, &src, rs, 0, &mut chunk);
            for r in 0..ROWS {
                let row = &src[r * rs..][..rs];
                for &(bo, co) in heads {
                    assert_eq!(chunk[co + 2 * r..][..2], row[bo..bo + 2], "{t} header");
                }
                for w in 0..words {
                    assert_eq!(
                        chunk[64 * w + 4 * r..][..4],
                        row[4 * w..][..4],
                        "{t} line {w}"
                    );
                }
            }
        }
    }
}

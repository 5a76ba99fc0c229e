//! The masks of the one-chunk path: per query row, 64-key visibility words
//! and the slope-scaled values of the visible keys only ([`MaskRow`]), so
//! that a row costs its visible keys, not the cache's size (many sequences
//! in one cache see few of its cells each). Rows of a group that read the
//! same mask row with the same slope share one.

use half::f16;

use super::{alibi_slope, pad, Kernels, Params, GROUP};
use crate::tensor::DType;

/// f32 elements of one row's mask buffer ([`MaskBuf`]) for up to `n_keys`
/// keys: the values, then the visibility words (two f32 each, plus one
/// word of alignment slack).
pub(super) fn mask_floats(n_keys: usize) -> usize {
    pad(n_keys) + pad(2 * (n_keys.div_ceil(64) + 1))
}

/// One row's mask buffer in the one-chunk scratch: `vals` for the slope-scaled
/// values, `vis` for the visibility words.
pub(crate) struct MaskBuf<'a> {
    vals: &'a mut [f32],
    vis: &'a mut [u64],
}

impl<'a> MaskBuf<'a> {
    /// Carves a buffer for `n_keys` keys from `buf` ([`mask_floats`] long).
    pub(super) fn new(buf: &'a mut [f32], n_keys: usize) -> MaskBuf<'a> {
        let (vals, words) = buf.split_at_mut(pad(n_keys));
        // the aligned middle (the size has a word of slack for the ends)
        let (_, vis, _) = bytemuck::pod_align_to_mut::<f32, u64>(words);
        MaskBuf { vals, vis }
    }
}

impl<'a> MaskBuf<'a> {
    /// The mask row of `n` keys this buffer already holds.
    fn held(self, n: usize) -> MaskRow<'a> {
        MaskRow {
            vals: &*self.vals,
            vis: &self.vis[..n.div_ceil(64)],
        }
    }
}

/// The mask of one query row over a chunk's keys, as the one-chunk kernels
/// read it: key `j` (from the chunk's first) is visible when bit `j % 64` of
/// `vis[j / 64]` is set (its slope-scaled mask value is not -inf; bits past
/// the chunk are 0), and then `vals[j]` is that value. `vals` is only
/// written at visible keys: building it costs the visible keys, not the
/// cache's size.
#[derive(Clone, Copy)]
pub(crate) struct MaskRow<'a> {
    pub(super) vals: &'a [f32],
    pub(super) vis: &'a [u64],
}

impl MaskRow<'_> {
    /// The slope-scaled mask value of key `j`, -inf when it is not visible.
    #[inline(always)]
    pub(super) fn get(&self, j: usize) -> f32 {
        if self.vis[j / 64] >> (j % 64) & 1 != 0 {
            self.vals[j]
        } else {
            f32::NEG_INFINITY
        }
    }
}

/// Fills `buf` with the visibility and the slope-scaled values of `n`
/// mask values `get(j)` ([`MaskRow`]).
pub(super) fn mask_row_from<'a>(
    n: usize,
    buf: MaskBuf<'a>,
    mut get: impl FnMut(usize) -> f32,
) -> MaskRow<'a> {
    let words = n.div_ceil(64);
    for (w, word) in buf.vis[..words].iter_mut().enumerate() {
        let mut bits = 0u64;
        for j in w * 64..(w * 64 + 64).min(n) {
            let x = get(j);
            if x != f32::NEG_INFINITY {
                bits |= 1 << (j % 64);
                buf.vals[j] = x;
            }
        }
        *word = bits;
    }
    MaskRow {
        vals: &*buf.vals,
        vis: &buf.vis[..words],
    }
}

/// [`mask_row_from`] for a contiguous f16 mask row with slope 1: the
/// visibility from the raw bits (f16 -inf is 0xfc00) at the kernels'
/// level, then only the visible values converted.
pub(super) fn mask_row_f16<'a, K: Kernels>(kn: K, raw: &[u8], buf: MaskBuf<'a>) -> MaskRow<'a> {
    let n = raw.len() / 2;
    let words = n.div_ceil(64);
    kn.vis_f16(raw, &mut buf.vis[..words]);
    // The values of each 64-key window with a visible key, converted at the
    // kernels' level (those of the hidden keys too: never read).
    for (w, &bits) in buf.vis[..words].iter().enumerate() {
        if bits != 0 {
            let (j0, j1) = (64 * w, (64 * w + 64).min(n));
            kn.to_f32(&raw[2 * j0..2 * j1], DType::F16, &mut buf.vals[j0..j1]);
        }
    }
    MaskRow {
        vals: &*buf.vals,
        vis: &buf.vis[..words],
    }
}

/// Sets bit `j % 64` of `out[j / 64]` when little-endian f16 value `j` of
/// `raw` is not -inf (0xfc00), for the `raw.len() / 2` values (bits past
/// them 0). [`Kernels::vis_f16`] of the portable kernels, and the tail
/// (a partial word) of `x86`'s, which takes whole words in AVX2 lanes.
#[inline(always)]
pub(crate) fn vis_words_f16(raw: &[u8], out: &mut [u64]) {
    for (word, chunk) in out.iter_mut().zip(raw.chunks(128)) {
        *word = chunk.chunks_exact(2).enumerate().fold(0, |acc, (i, b)| {
            acc | u64::from(u16::from_le_bytes([b[0], b[1]]) != 0xfc00) << i
        });
    }
}

impl Params<'_> {
    /// Which mask row, and with which slope, query row (iq, h, iq3) reads:
    /// rows with the same key share one [`MaskRow`].
    fn mask_key(&self, iq: usize, h: usize, iq3: usize) -> Option<(usize, usize, usize, u32)> {
        self.mask.map(|m| {
            let slope = alibi_slope(self.max_bias, h, self.n_head);
            (iq, h % m.ne[2], iq3 % m.ne[3], slope.to_bits())
        })
    }

    /// The mask of query row (iq, h, iq3) over keys `c0..c1` in `buf` (none
    /// without a mask).
    fn mask_row<'r, K: Kernels>(
        &self,
        kn: K,
        (iq, h, iq3): (usize, usize, usize),
        (c0, c1): (usize, usize),
        buf: MaskBuf<'r>,
    ) -> Option<MaskRow<'r>> {
        let m = self.mask?;
        let (i2, i3) = (h % m.ne[2], iq3 % m.ne[3]);
        let slope = alibi_slope(self.max_bias, h, self.n_head);
        assert!(c1 <= m.ne[0], "mask columns {c0}..{c1} of {}", m.ne[0]);
        Some(if m.rows_contiguous() {
            // SAFETY: the mask is a read-only source; its rows are contiguous.
            let row = unsafe { m.row_bytes(iq, i2, i3) };
            let es = m.dtype.type_size();
            let row = &row[es * c0..es * c1];
            match m.dtype {
                DType::F16 if slope == 1.0 => mask_row_f16(kn, row, buf),
                DType::F16 => mask_row_from(c1 - c0, buf, |j| {
                    slope
                        * f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32()
                }),
                _ => mask_row_from(c1 - c0, buf, |j| {
                    let b = &row[4 * j..4 * j + 4];
                    slope * f32::from_le_bytes([b[0], b[1], b[2], b[3]])
                }),
            }
        } else {
            mask_row_from(c1 - c0, buf, |j| slope * m.get_f32(c0 + j, iq, i2, i3))
        })
    }
}

/// Which mask row a buffer holds: the row's [`Params::mask_key`] and the
/// keys `c0..c1` it covers.
pub(super) type HeldMask = Option<((usize, usize, usize, u32), usize, usize)>;

/// The mask rows of a group of up to [`GROUP`] rows `at(i)` = (iq, h, iq3)
/// over keys `c0..c1`, built in `bufs` ([`GROUP`] slices of
/// [`mask_floats`]`(c1 - c0)`); a row reading the same mask row with the
/// same slope as the one before it shares that row's. `held` says which
/// mask row `bufs[0]` holds from the group before (the first row reuses it
/// when it reads the same), and is set to the one it holds after.
pub(super) fn group_masks<'r, K: Kernels>(
    kn: K,
    p: &Params<'_>,
    g: usize,
    at: impl Fn(usize) -> (usize, usize, usize),
    (c0, c1): (usize, usize),
    bufs: &'r mut [&mut [f32]],
    held: &mut HeldMask,
) -> [Option<MaskRow<'r>>; GROUP] {
    let mut out = [None; GROUP];
    let mut last = None;
    let first = p.mask_key(at(0).0, at(0).1, at(0).2).map(|k| (k, c0, c1));
    for (i, buf) in bufs.iter_mut().take(g).enumerate() {
        let (iq, h, iq3) = at(i);
        let key = p.mask_key(iq, h, iq3);
        let buf = MaskBuf::new(buf, c1 - c0);
        out[i] = match i.checked_sub(1) {
            Some(prev) if last == key => out[prev],
            None if first.is_some() && *held == first => Some(buf.held(c1 - c0)),
            _ => p.mask_row(kn, (iq, h, iq3), (c0, c1), buf),
        };
        last = key;
    }
    *held = first;
    out
}

#[cfg(test)]
mod tests {
    use super::super::Scalar;
    use super::*;

    /// A mask row's visible keys and values equal the slope-scaled mask
    /// converted in full (f16 and f32 masks, slope 1 and an ALiBi slope), with
    /// -inf, NaN and chunks that do not start at key 0.
    #[test]
    fn mask_rows_read_only_the_visible_keys_and_equal_the_full_mask() {
        let mut rng = crate::conformance::Rng::new(11);
        for n in [1usize, 63, 64, 65, 300] {
            let x: Vec<f32> = rng
                .vec(n, -2.0, 2.0)
                .iter()
                .map(|&v| match v {
                    v if v < -1.0 => f32::NEG_INFINITY,
                    v if v > 1.9 => f32::NAN,
                    v => v,
                })
                .collect();
            for slope in [1.0f32, 0.25] {
                for half in [true, false] {
                    let raw: Vec<u8> = if half {
                        x.iter()
                            .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
                            .collect()
                    } else {
                        x.iter().flat_map(|v| v.to_le_bytes()).collect()
                    };
                    let stored = |j: usize| {
                        if half {
                            f16::from_f32(x[j]).to_f32()
                        } else {
                            x[j]
                        }
                    };
                    let mut buf = vec![7f32; mask_floats(n)];
                    let es = if half { 2 } else { 4 };
                    let row = if half && slope == 1.0 {
                        mask_row_f16(Scalar, &raw, MaskBuf::new(&mut buf, n))
                    } else {
                        mask_row_from(n, MaskBuf::new(&mut buf, n), |j| {
                            let b = &raw[es * j..es * j + es];
                            let v = if half {
                                f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
                            } else {
                                f32::from_le_bytes([b[0], b[1], b[2], b[3]])
                            };
                            slope * v
                        })
                    };
                    assert_eq!(row.vis.len(), n.div_ceil(64));
                    for j in 0..n {
                        let want = slope * stored(j);
                        let got = row.get(j);
                        assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "n {n} slope {slope} half {half} key {j}: {got} vs {want}"
                        );
                    }
                    // bits past the row are clear
                    if n % 64 != 0 {
                        assert_eq!(row.vis[n / 64] >> (n % 64), 0);
                    }
                }
            }
        }
    }
}

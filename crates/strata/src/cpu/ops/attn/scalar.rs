//! The portable kernels of FLASH_ATTN_EXT ([`Scalar`]): every architecture,
//! and the reference the SIMD levels are tested against (module docs of
//! `attn`).

use half::f16;

use super::*;

/// The portable kernels (every architecture; the reference).
#[derive(Clone, Copy)]
pub(crate) struct Scalar;

/// An element type k and v rows can hold.
trait Elem {
    const SIZE: usize;
    /// True for f16: the one-chunk V accumulator is then kept in f16.
    const HALF: bool = false;
    fn get(b: &[u8], i: usize) -> f32;
}

struct F32;
struct F16;

impl Elem for F32 {
    const SIZE: usize = 4;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        let o = i * 4;
        f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }
}

impl Elem for F16 {
    const SIZE: usize = 2;
    const HALF: bool = true;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        let o = i * 2;
        f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
    }
}

/// The V accumulator's storage rounding: f16 when V is f16 (as ggml).
#[inline(always)]
fn v_round<V: Elem>(x: f32) -> f32 {
    if V::HALF {
        half_round(x)
    } else {
        x
    }
}

/// The score of key `ic` for a query row: `q·k` (a sequential f32 sum),
/// `·scale`, soft-capped, `+ mv` (the key's mask value).
fn score<K: Elem>(job: &ChunkJob<'_>, qrow: &[f32], ic: usize, mv: f32) -> f32 {
    // SAFETY: k is a read-only source with contiguous rows.
    let krow = unsafe { job.k.row_bytes(ic, job.ik2, job.ik3) };
    debug_assert_eq!(krow.len(), qrow.len() * K::SIZE);
    let mut s = 0.0f32;
    for (i, &x) in qrow.iter().enumerate() {
        s += x * K::get(krow, i);
    }
    s *= job.scale;
    if job.softcap != 0.0 {
        s = job.softcap * (s / job.softcap).tanh();
    }
    s + mv
}

/// strata's original row-by-row loop over keys `c0..c1` for one row, with
/// the same arithmetic in the same order (the one-chunk reference).
fn one_chunk_row<K: Elem, V: Elem>(job: &ChunkJob<'_>, r: &mut RowState<'_>) {
    let (k, v) = (job.k, job.v);
    let (dk, dv) = (k.ne[0], v.ne[0]);
    let qrow = &r.q[..dk];
    let acc = &mut r.acc[..dv];
    let (mut max, mut sum) = (r.m, r.s);
    for ic in job.c0..job.c1 {
        let mv = r.mask.map_or(0.0, |m| m.get(ic - job.c0));
        if mv == f32::NEG_INFINITY {
            continue;
        }
        let s = score::<K>(job, qrow, ic, mv);
        let w = if s > max {
            let shrink = (max - s).exp();
            max = s;
            sum *= shrink;
            acc.iter_mut().for_each(|a| *a = v_round::<V>(*a * shrink));
            1.0
        } else {
            (s - max).exp()
        };
        sum += w;
        // SAFETY: as krow.
        let vrow = unsafe { v.row_bytes(ic, job.ik2, job.ik3) };
        debug_assert_eq!(vrow.len(), dv * V::SIZE);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = v_round::<V>(*a + w * V::get(vrow, i));
        }
    }
    r.m = max;
    r.s = sum;
}

/// The two-pass algorithm (module docs of `attn`) for one fresh row over
/// keys `c0..c1`: scores `q·k` (sequential f32 sums) `·scale`, soft-capped,
/// `+ mask` and their maximum `M`; then `p = exp(s − M)`, the sum of the
/// `p` in key order and `acc += p·v` (multiply, then add) in key order.
fn two_pass_row<K: Elem, V: Elem>(job: &ChunkJob<'_>, r: &mut RowState<'_>) {
    let (k, v) = (job.k, job.v);
    let (dk, dv) = (k.ne[0], v.ne[0]);
    let qrow = &r.q[..dk];
    let Some(sc) = r.sc.as_deref_mut() else {
        return;
    };
    let mut n = 0;
    let mut max = f32::NEG_INFINITY;
    for ic in job.c0..job.c1 {
        let mv = r.mask.map_or(0.0, |m| m.get(ic - job.c0));
        if mv == f32::NEG_INFINITY {
            continue;
        }
        let s = score::<K>(job, qrow, ic, mv);
        sc[n] = s;
        n += 1;
        max = max.max(s);
    }
    r.m = max;
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0f32;
    for x in &mut sc[..n] {
        *x = (*x - max).exp();
        sum += *x;
    }
    r.s = sum;
    let acc = &mut r.acc[..dv];
    let mut at = 0;
    for ic in job.c0..job.c1 {
        if r.mask
            .is_some_and(|m| m.get(ic - job.c0) == f32::NEG_INFINITY)
        {
            continue;
        }
        let w = sc[at];
        at += 1;
        // SAFETY: v is a read-only source with contiguous rows.
        let vrow = unsafe { v.row_bytes(ic, job.ik2, job.ik3) };
        for (i, a) in acc.iter_mut().enumerate() {
            *a += w * V::get(vrow, i);
        }
    }
}

impl Kernels for Scalar {
    fn width(self) -> usize {
        1
    }

    fn round_h(self, x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = half_round(*v));
    }

    fn to_f32(self, src: &[u8], dt: DType, dst: &mut [f32]) {
        let n = src.len() / dt.type_size();
        match dt {
            DType::F16 => {
                for (o, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *o = crate::quant::simd::f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            _ => {
                for (o, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
        }
        dst[n..].fill(0.0);
    }

    fn vis_f16(self, raw: &[u8], out: &mut [u64]) {
        mask::vis_words_f16(raw, out);
    }

    fn qk(self, kf: &[f32], d: usize, qt: &[f32], np: usize, kq: &mut [f32]) {
        for (j, out) in kq.chunks_exact_mut(np).enumerate() {
            out.fill(0.0);
            for (dd, &a) in kf[j * d..(j + 1) * d].iter().enumerate() {
                for (o, &b) in out.iter_mut().zip(&qt[dd * np..(dd + 1) * np]) {
                    *o += a * b;
                }
            }
        }
    }

    fn softmax_cols(self, a: SoftmaxCols<'_>) {
        let (kq, np, scale, mt) = (a.kq, a.np, a.scale, a.mt);
        let (m, s, ms) = (a.m, a.s, a.ms);
        let kvn = kq.len() / np;
        match mt {
            Some(mt) => kq
                .iter_mut()
                .zip(mt)
                .for_each(|(x, &b)| *x = *x * scale + b),
            None => kq.iter_mut().for_each(|x| *x *= scale),
        }
        for i in 0..np {
            let tmax = (0..kvn).fold(f32::NEG_INFINITY, |a, j| a.max(kq[j * np + i]));
            let mold = m[i];
            let mnew = mold.max(tmax);
            let f = if mnew > mold {
                (mold - mnew).exp()
            } else {
                1.0
            };
            let mut sum = 0.0f32;
            for j in 0..kvn {
                let x = &mut kq[j * np + i];
                *x = if tmax == f32::NEG_INFINITY {
                    0.0
                } else {
                    (*x - mnew).exp()
                };
                sum += *x;
            }
            s[i] = s[i] * f + sum;
            m[i] = mnew;
            ms[i] = f;
        }
    }

    fn pv(self, a: PvCols<'_>) {
        let (p, np, rows, ms) = (a.p, a.np, a.rows, a.ms);
        let (vf, dvp, vkq) = (a.vf, a.dvp, a.vkq);
        let kvn = vf.len() / dvp;
        for (i, out) in vkq.chunks_exact_mut(dvp).take(rows).enumerate() {
            out.iter_mut().for_each(|o| *o *= ms[i]);
            for j in 0..kvn {
                let a = p[j * np + i];
                for (o, &b) in out.iter_mut().zip(&vf[j * dvp..(j + 1) * dvp]) {
                    *o += a * b;
                }
            }
        }
    }

    fn one_chunk(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
        each_row::<false>(job, rows);
    }

    fn two_pass(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
        each_row::<true>(job, rows);
    }
}

/// The one-chunk or (`TWO`) two-pass row kernel for every row, at the K
/// and V types of `job`.
fn each_row<const TWO: bool>(job: &ChunkJob<'_>, rows: &mut [RowState<'_>]) {
    fn row<K: Elem, V: Elem, const TWO: bool>(job: &ChunkJob<'_>, r: &mut RowState<'_>) {
        if TWO {
            two_pass_row::<K, V>(job, r)
        } else {
            one_chunk_row::<K, V>(job, r)
        }
    }
    for r in rows {
        match (job.k.dtype, job.v.dtype) {
            (DType::F16, DType::F16) => row::<F16, F16, TWO>(job, r),
            (DType::F16, _) => row::<F16, F32, TWO>(job, r),
            (_, DType::F16) => row::<F32, F16, TWO>(job, r),
            _ => row::<F32, F32, TWO>(job, r),
        }
    }
}

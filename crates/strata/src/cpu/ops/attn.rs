//! FLASH_ATTN_EXT: fused `softmax(q·kᵀ·scale [softcap] + slope·mask)·v`.
//!
//! q F32 [D, n_q, H, ne3]; k, v F16/F32 [D | Dv, n_kv, H_kv, ne3_kv] with
//! contiguous rows (grouped-query attention: head `h` reads kv head
//! `h / (H / H_kv)`, and `iq3 / (ne3 / ne3_kv)`); optional mask F16/F32
//! [n_kv, ≥ n_q, m2, m3] broadcast over heads (`h % m2`, `iq3 % m3`);
//! optional sinks F32 [H]. The result is F32 [Dv, H, n_q, ne3]: the row for
//! (head h, query iq) is at i1 = h, i2 = iq.
//!
//! One pass over the keys with an online softmax in f32 (running maximum and
//! sum, the accumulator rescaled when the maximum grows). Keys whose mask is
//! -inf are skipped, so a fully masked query row yields zeros, not NaN.
//! Scores are dot products of the f32 query with the key converted to f32
//! element by element (ggml's CPU path rounds q to f16 for f16 keys; strata
//! keeps it in f32). Each output row is computed by one thread.

use half::f16;

use super::softmax::alibi_slope;
use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::Op;
use crate::tensor::{DType, Tensor};

pub(super) fn supports(t: &Tensor) -> bool {
    let kv_ok = |i: usize| {
        t.src(i)
            .is_some_and(|s| matches!(s.dtype(), DType::F32 | DType::F16) && s.is_contiguous_rows())
    };
    t.dtype() == DType::F32
        && t.src(0).is_some_and(|q| q.dtype() == DType::F32)
        && kv_ok(1)
        && kv_ok(2)
        && match t.src(3) {
            Some(m) => matches!(m.dtype(), DType::F32 | DType::F16),
            None => true,
        }
        && match t.src(4) {
            Some(s) => s.dtype() == DType::F32,
            None => true,
        }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (q, k, v) = (node.src(0), node.src(1), node.src(2));
    WorkSize {
        shared: 0,
        per_thread: (q.ne[0] + v.ne[0] + k.ne[1]) * 4,
    }
}

/// An element type k and v rows can hold.
trait Elem {
    const SIZE: usize;
    /// True for f16: ggml's CPU flash attention then rounds q to f16 for the
    /// q·k products and keeps the V accumulator in f16; strata does the same
    /// so that its results track llama.cpp's (golden logits).
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

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match (node.src(1).dtype, node.src(2).dtype) {
        (DType::F16, DType::F16) => run::<F16, F16>(node, ctx),
        (DType::F16, _) => run::<F16, F32>(node, ctx),
        (_, DType::F16) => run::<F32, F16>(node, ctx),
        _ => run::<F32, F32>(node, ctx),
    }
}

/// `x` rounded to f16 and back.
#[inline(always)]
fn half_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
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

fn run<K: Elem, V: Elem>(node: &NodePlan, ctx: &Ctx<'_>) {
    let Op::FlashAttnExt {
        scale,
        max_bias,
        softcap,
    } = node.op
    else {
        unreachable!("attention kernel called for {}", node.op.name())
    };
    let (q, k, v, d) = (node.src(0), node.src(1), node.src(2), &node.dst);
    let mask: Option<&TView> = node.src[3].as_ref();
    let sinks: Option<&TView> = node.src[4].as_ref();
    let (dk, dv, n_kv, n_head) = (q.ne[0], v.ne[0], k.ne[1], q.ne[2]);
    let (rk2, rk3) = (q.ne[2] / k.ne[2], q.ne[3] / k.ne[3]);

    let scratch = ctx.scratch_f32(dk + dv + n_kv);
    let (qrow, rest) = scratch.split_at_mut(dk);
    let (acc, mrow) = rest.split_at_mut(dv);

    for r in ctx.rows(d.nrows()) {
        let (h, iq, iq3) = d.row_coords(r);
        let (ik2, ik3) = (h / rk2, iq3 / rk3);
        let slope = alibi_slope(max_bias, h, n_head);
        q.load_row(iq, h, iq3, qrow);
        if K::HALF {
            qrow.iter_mut().for_each(|x| *x = half_round(*x));
        }
        match mask {
            Some(m) => m.load_row(iq, h % m.ne[2], iq3 % m.ne[3], mrow),
            None => mrow.fill(0.0),
        }
        acc.fill(0.0);
        let mut max = f32::NEG_INFINITY;
        let mut sum = 0.0f32;
        for (ic, &m) in mrow.iter().enumerate() {
            let mv = slope * m;
            if mv == f32::NEG_INFINITY {
                continue;
            }
            // SAFETY: k and v are read-only sources with contiguous rows.
            let krow = unsafe { k.row_bytes(ic, ik2, ik3) };
            debug_assert_eq!(krow.len(), dk * K::SIZE);
            let mut s = 0.0f32;
            for (i, &x) in qrow.iter().enumerate() {
                s += x * K::get(krow, i);
            }
            s *= scale;
            if softcap != 0.0 {
                s = softcap * (s / softcap).tanh();
            }
            s += mv;
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
            let vrow = unsafe { v.row_bytes(ic, ik2, ik3) };
            debug_assert_eq!(vrow.len(), dv * V::SIZE);
            for (i, a) in acc.iter_mut().enumerate() {
                *a = v_round::<V>(*a + w * V::get(vrow, i));
            }
        }
        if let Some(sk) = sinks {
            let (s0, s1) = (sk.ne[0].max(1), sk.ne[1].max(1));
            let s = sk.get_f32(h % s0, (h / s0) % s1, h / (s0 * s1), 0);
            if s > max {
                let shrink = (max - s).exp();
                sum = sum * shrink + 1.0;
                acc.iter_mut().for_each(|a| *a *= shrink);
            } else {
                sum += (s - max).exp();
            }
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        acc.iter_mut().for_each(|a| *a *= inv);
        d.store_row(h, iq, iq3, acc);
    }
}

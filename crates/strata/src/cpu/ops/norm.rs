//! Row normalizations: NORM (zero mean, unit variance) and RMS_NORM.
//!
//! Statistics accumulate in f64; the row is then scaled in f32. Each row is
//! loaded into scratch before the destination row is written, so the result
//! may alias the source (the planner runs both in place).

use super::reduce::sum_f64;
use super::{Ctx, NodePlan, WorkSize};
use crate::ops::Op;
use crate::tensor::{DType, Tensor};

pub(super) fn handles(op: &Op) -> bool {
    matches!(op, Op::Norm { .. } | Op::RmsNorm { .. })
}

pub(super) fn supports(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && t.src(0).is_some_and(|a| a.dtype() == DType::F32)
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    WorkSize {
        shared: 0,
        per_thread: node.src(0).ne[0] * 4,
    }
}

/// Sum of squared deviations from `mean`, in f64 with four accumulators.
fn sum_sq_dev(x: &[f32], mean: f64) -> f64 {
    let mut acc = [0f64; 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..4 {
            let d = c[k] as f64 - mean;
            acc[k] += d * d;
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for &v in rest {
        let d = v as f64 - mean;
        s += d * d;
    }
    s
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let n = node.src(0).ne[0];
    ctx.map_rows(node, |_, row| {
        match node.op {
            Op::Norm { eps } => {
                let mean = sum_f64(row) / n as f64;
                let var = sum_sq_dev(row, mean) / n as f64;
                let scale = 1.0 / (var + eps as f64).sqrt();
                // Centre in f64: rounding the mean to f32 would dominate the
                // error of rows whose spread is small against their mean.
                row.iter_mut()
                    .for_each(|x| *x = ((*x as f64 - mean) * scale) as f32);
            }
            Op::RmsNorm { eps } => {
                let ss = crate::cpu::vector::sum_squares_f64(ctx.isa, row);
                let ms = ss / n as f64;
                let scale = (1.0 / (ms + eps as f64).sqrt()) as f32;
                row.iter_mut().for_each(|x| *x *= scale);
            }
            ref op => unreachable!("{} is not a norm", op.name()),
        }
    });
}

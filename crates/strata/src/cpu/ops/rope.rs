//! ROPE: rotary position embedding, NORMAL and NEOX pairings, optional
//! per-dimension frequency factors and YaRN scaling (as ggml's rope_yarn).
//!
//! x is [head_dim, n_head, n_tokens, ne3] and positions are I32 [n_tokens].
//! Each thread keeps a cos/sin cache for the token of its current row and
//! refills it only when the token changes (rows are ordered head-fastest, so
//! once per token, not per head); the per-dimension frequencies
//! `base^(-2i/n_dims)` are computed once per op. Rows are loaded into scratch
//! before the destination row is written, so ROPE may run in place.

use super::reduce::flat_f32;
use super::{Ctx, NodePlan, WorkSize};
use crate::ops::{Op, RopeMode, RopeParams};
use crate::tensor::{DType, Tensor};

pub(super) fn handles(op: &Op) -> bool {
    matches!(op, Op::Rope(_))
}

pub(super) fn supports(t: &Tensor) -> bool {
    let x_ok = t
        .src(0)
        .is_some_and(|a| matches!(a.dtype(), DType::F32 | DType::F16) && a.dtype() == t.dtype());
    let pos_ok = t.src(1).is_some_and(|p| p.dtype() == DType::I32);
    let ff_ok = t.src(2).is_none_or(|f| f.dtype() == DType::F32);
    x_ok && pos_ok && ff_ok
}

fn params(node: &NodePlan) -> &RopeParams {
    match &node.op {
        Op::Rope(p) => p,
        op => unreachable!("{} is not ROPE", op.name()),
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    // The row, then cos and sin of each rotated pair.
    let n = node.src(0).ne[0] + params(node).n_dims;
    WorkSize {
        shared: 0,
        per_thread: n * 4,
    }
}

/// ggml's YaRN correction dimension: the dimension whose wavelength makes
/// `n_rot` full turns over the original context `n_ctx_orig`.
fn corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// The [low, high] dimension range over which YaRN ramps from extrapolation
/// to interpolation (ggml_rope_yarn_corr_dims; computed in f32 as ggml does,
/// since it is floored and ceiled).
pub(crate) fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let start = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base).floor();
    let end = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

/// Everything about the rotation that is constant over the node.
struct Yarn {
    n_half: usize,
    /// ln(freq_base) * -2 / n_dims: theta_i = pos * exp(i * this).
    log_step: f64,
    freq_scale: f64,
    ext_factor: f64,
    mscale: f64,
    corr: [f64; 2],
}

impl Yarn {
    fn new(p: &RopeParams) -> Yarn {
        let mut mscale = p.attn_factor as f64;
        if p.ext_factor != 0.0 {
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
        }
        let c = yarn_corr_dims(p);
        Yarn {
            n_half: p.n_dims / 2,
            log_step: -2.0 * (p.freq_base as f64).ln() / p.n_dims as f64,
            freq_scale: p.freq_scale as f64,
            ext_factor: p.ext_factor as f64,
            mscale,
            corr: [c[0] as f64, c[1] as f64],
        }
    }

    /// `freq[i] = e^(i · log_step)` for the pairs that fit `freq` (the
    /// per-dimension factor of every position, computed once per op).
    fn freqs(&self, freq: &mut [f64]) {
        for (i, f) in freq.iter_mut().enumerate().take(self.n_half) {
            *f = (i as f64 * self.log_step).exp();
        }
    }

    /// Fills `cos`/`sin` (one per rotated pair) for position `pos`; `freq`
    /// holds [`Yarn::freqs`] for its first pairs (the rest are computed here,
    /// identically).
    fn fill(
        &self,
        pos: f64,
        freq: &[f64],
        ff: Option<&crate::cpu::TView>,
        cos: &mut [f32],
        sin: &mut [f32],
    ) {
        for i in 0..self.n_half {
            let f = match freq.get(i) {
                Some(&f) => f,
                None => (i as f64 * self.log_step).exp(),
            };
            let mut extrap = pos * f;
            if let Some(f) = ff {
                extrap /= flat_f32(f, i) as f64;
            }
            let interp = self.freq_scale * extrap;
            let theta = if self.ext_factor != 0.0 {
                // rope_yarn_ramp: 1 below `low`, 0 above `high`, linear between.
                let y = (i as f64 - self.corr[0]) / (self.corr[1] - self.corr[0]).max(0.001);
                let mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            cos[i] = (theta.cos() * self.mscale) as f32;
            sin[i] = (theta.sin() * self.mscale) as f32;
        }
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let p = params(node);
    let (a, pos, dst) = (node.src(0), node.src(1), &node.dst);
    let ff = node.src[2].as_ref();
    let yarn = Yarn::new(p);
    let n = a.ne[0];
    let h = yarn.n_half;
    let scratch = ctx.scratch_f32(n + 2 * h);
    let (row, rest) = scratch.split_at_mut(n);
    let (cos, sin) = rest.split_at_mut(h);
    let mut freq_buf = [0f64; 128];
    let freq = &mut freq_buf[..h.min(128)];
    yarn.freqs(freq);
    let mut cached: Option<usize> = None;
    for r in ctx.rows(a.nrows()) {
        let (i1, i2, i3) = a.row_coords(r);
        if cached != Some(i2) {
            yarn.fill(pos.get_i64(i2, 0, 0, 0) as f64, freq, ff, cos, sin);
            cached = Some(i2);
        }
        a.load_row(i1, i2, i3, row);
        match p.mode {
            RopeMode::Normal => {
                for (k, pair) in row[..2 * h].chunks_exact_mut(2).enumerate() {
                    let (x0, x1) = (pair[0], pair[1]);
                    pair[0] = x0 * cos[k] - x1 * sin[k];
                    pair[1] = x0 * sin[k] + x1 * cos[k];
                }
            }
            RopeMode::Neox => {
                let (lo, hi) = row[..2 * h].split_at_mut(h);
                for k in 0..h {
                    let (x0, x1) = (lo[k], hi[k]);
                    lo[k] = x0 * cos[k] - x1 * sin[k];
                    hi[k] = x0 * sin[k] + x1 * cos[k];
                }
            }
        }
        dst.store_row(i1, i2, i3, row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corr_dims_match_ggml_for_llama_defaults() {
        // ggml gives [20, 46] for 128 dims, 4096 context, base 10000, beta 32/1.
        let mut p = RopeParams::new(128, RopeMode::Normal, 10000.0);
        p.n_ctx_orig = 4096;
        assert_eq!(yarn_corr_dims(&p), [20.0, 46.0]);
        // A tiny context clamps the low end at 0 and the high end at n_dims - 1.
        p.n_ctx_orig = 1;
        p.n_dims = 8;
        assert_eq!(yarn_corr_dims(&p)[0], 0.0);
        p.n_ctx_orig = 1 << 30;
        p.freq_base = 2.0;
        assert_eq!(yarn_corr_dims(&p)[1], 7.0);
    }
}

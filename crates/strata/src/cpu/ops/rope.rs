//! ROPE: rotary position embedding, NORMAL and NEOX pairings, optional
//! per-dimension frequency factors and YaRN scaling (as ggml's rope_yarn).
//!
//! x is [head_dim, n_head, n_tokens, ne3] and positions are I32 [n_tokens].
//! Each thread keeps a cos/sin cache for the token of its current row and
//! refills it only when the token changes (rows are ordered head-fastest, so
//! once per token, not per head); the per-dimension frequencies
//! `base^(-2i/n_dims)` are computed once per op. Rows are loaded into scratch
//! before the destination row is written, so ROPE may run in place.
//!
//! Across nodes, each thread also keeps the cos/sin it computed in a
//! thread-local [`RopeCache`], keyed by the parameters the values depend on
//! and by the position: a model's ROPE nodes (Q and K of every layer) share
//! their parameters and positions, so the first node of a graph computes
//! them and the others copy them. Nodes with frequency factors (`src[2]`, a
//! tensor whose values may change between computes) are never cached. The
//! cached values are [`Yarn::fill`]'s, so the results are the same bits.

use std::cell::RefCell;

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

/// Positions one parameter set of a [`RopeCache`] holds.
const CACHE_POSITIONS: usize = 4096;
/// Parameter sets a [`RopeCache`] holds (a model with sliding-window layers
/// rotates with two).
const CACHE_SETS: usize = 2;

/// What cos/sin depend on: every [`RopeParams`] field but the pairing
/// `mode` (floats by their bits, so that only equal values share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CacheKey {
    /// [`RopeParams::n_dims`].
    n_dims: usize,
    /// [`RopeParams::n_ctx_orig`].
    n_ctx_orig: usize,
    /// [`RopeParams::freq_base`]'s bits.
    freq_base: u32,
    /// [`RopeParams::freq_scale`]'s bits.
    freq_scale: u32,
    /// [`RopeParams::ext_factor`]'s bits.
    ext_factor: u32,
    /// [`RopeParams::attn_factor`]'s bits.
    attn_factor: u32,
    /// [`RopeParams::beta_fast`]'s bits.
    beta_fast: u32,
    /// [`RopeParams::beta_slow`]'s bits.
    beta_slow: u32,
}

impl CacheKey {
    /// The key of `p`.
    fn new(p: &RopeParams) -> CacheKey {
        CacheKey {
            n_dims: p.n_dims,
            n_ctx_orig: p.n_ctx_orig,
            freq_base: p.freq_base.to_bits(),
            freq_scale: p.freq_scale.to_bits(),
            ext_factor: p.ext_factor.to_bits(),
            attn_factor: p.attn_factor.to_bits(),
            beta_fast: p.beta_fast.to_bits(),
            beta_slow: p.beta_slow.to_bits(),
        }
    }
}

/// The cos/sin of one parameter set, direct-mapped: position `pos` lives in
/// slot `pos mod CACHE_POSITIONS` (a later position of the same slot
/// replaces it).
struct CacheSet {
    /// The parameters the values were computed for.
    key: CacheKey,
    /// Rotated pairs (values per slot: cos, then sin).
    n_half: usize,
    /// The position in each slot (`i64::MIN`: empty; positions are I32).
    tags: Vec<i64>,
    /// `2 · n_half` values per slot.
    vals: Vec<f32>,
    /// When the set was last used (for replacing the least recently used).
    used: u64,
}

impl CacheSet {
    /// Copies the cos/sin of `pos` into `cos`/`sin` (`n_half` each),
    /// computing them with `fill` and keeping them on a miss.
    fn get(
        &mut self,
        pos: i64,
        fill: impl FnOnce(&mut [f32], &mut [f32]),
        cos: &mut [f32],
        sin: &mut [f32],
    ) {
        let h = self.n_half;
        let slot = pos.rem_euclid(CACHE_POSITIONS as i64) as usize;
        let (c, s) = self.vals[2 * h * slot..2 * h * (slot + 1)].split_at_mut(h);
        if self.tags[slot] != pos {
            fill(c, s);
            self.tags[slot] = pos;
        }
        cos.copy_from_slice(c);
        sin.copy_from_slice(s);
    }
}

/// A thread's cos/sin values across ROPE nodes (module docs): up to
/// [`CACHE_SETS`] parameter sets of up to [`CACHE_POSITIONS`] positions
/// (at most 2 · 4096 · 2 · n_dims/2 f32 per thread, 2 MiB for 64 dims).
#[derive(Default)]
struct RopeCache {
    /// The parameter sets, at most [`CACHE_SETS`].
    sets: Vec<CacheSet>,
    /// Uses so far (the clock of [`CacheSet::used`]).
    clock: u64,
}

impl RopeCache {
    /// The set of `key` with `n_half` pairs: the cached one, else a new one
    /// (replacing the least recently used when all are taken).
    fn set(&mut self, key: CacheKey, n_half: usize) -> &mut CacheSet {
        self.clock += 1;
        let at = match self.sets.iter().position(|s| s.key == key) {
            Some(i) => i,
            None => {
                let fresh = CacheSet {
                    key,
                    n_half,
                    tags: vec![i64::MIN; CACHE_POSITIONS],
                    // Zeroed (calloc): pages are committed as slots fill.
                    vals: vec![0.0; 2 * n_half * CACHE_POSITIONS],
                    used: 0,
                };
                if self.sets.len() < CACHE_SETS {
                    self.sets.push(fresh);
                    self.sets.len() - 1
                } else {
                    let i = (0..self.sets.len())
                        .min_by_key(|&i| self.sets[i].used)
                        .expect("CACHE_SETS > 0");
                    self.sets[i] = fresh;
                    i
                }
            }
        };
        let set = &mut self.sets[at];
        debug_assert_eq!(set.n_half, n_half, "n_half follows n_dims, part of the key");
        set.used = self.clock;
        set
    }
}

thread_local! {
    /// This thread's [`RopeCache`] (the pool's threads live as long as their
    /// backend, so it carries over from node to node and compute to compute).
    static CACHE: RefCell<RopeCache> = RefCell::default();
}

/// Runs this thread's rows of a ROPE node, through the thread's cos/sin
/// cache unless the node has frequency factors.
pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let p = params(node);
    let cache = node.src[2].is_none() && p.n_dims >= 2;
    if cache {
        CACHE.with_borrow_mut(|c| rotate(node, ctx, Some(c.set(CacheKey::new(p), p.n_dims / 2))));
    } else {
        rotate(node, ctx, None);
    }
}

/// Rotates this thread's rows of `node`, the cos/sin of each token from
/// `cache` when given (no frequency factors), else computed.
fn rotate(node: &NodePlan, ctx: &Ctx<'_>, mut cache: Option<&mut CacheSet>) {
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
            let at = pos.get_i64(i2, 0, 0, 0);
            match cache.as_deref_mut() {
                Some(set) => set.get(at, |c, s| yarn.fill(at as f64, freq, None, c, s), cos, sin),
                None => yarn.fill(at as f64, freq, ff, cos, sin),
            }
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

    /// Cached cos/sin equal [`Yarn::fill`]'s bit for bit while parameter
    /// sets (each field changed in turn, more sets than the cache holds)
    /// and positions (negative, colliding slots, repeated) interleave.
    #[test]
    fn cache_returns_fill_bits_across_sets_and_positions() {
        let base = RopeParams::new(64, RopeMode::Neox, 10000.0);
        let mut sets = vec![base];
        let mut v = |f: fn(&mut RopeParams)| {
            let mut p = base;
            p.n_ctx_orig = 2048;
            p.ext_factor = 1.0;
            p.freq_scale = 0.25;
            f(&mut p);
            sets.push(p);
        };
        v(|_| {});
        v(|p| p.freq_base = 500000.0);
        v(|p| p.freq_scale = 0.5);
        v(|p| p.ext_factor = 0.5);
        v(|p| p.attn_factor = 0.75);
        v(|p| p.beta_fast = 16.0);
        v(|p| p.beta_slow = 2.0);
        v(|p| p.n_ctx_orig = 4096);
        v(|p| p.n_dims = 32);
        let positions: Vec<i64> = (0..40)
            .chain([
                -1,
                -4096,
                4096,
                4095,
                8191,
                100_000,
                i32::MAX as i64,
                i32::MIN as i64,
            ])
            .chain((0..40).map(|i| i * 4096 + 7))
            .collect();
        // Each set next to the one differing from it in one field, twice
        // (both in the cache: the second time they hit), then the next pair.
        let order: Vec<usize> = (1..sets.len())
            .flat_map(|i| [i - 1, i, i - 1, i])
            .chain([0, sets.len() - 1, 2, 3])
            .collect();
        let mut cache = RopeCache::default();
        let (mut hits, mut misses) = (0, 0);
        for (step, &si) in order.iter().enumerate() {
            let p = &sets[si];
            let yarn = Yarn::new(p);
            let h = yarn.n_half;
            let mut freq = vec![0f64; h];
            yarn.freqs(&mut freq);
            let set = cache.set(CacheKey::new(p), h);
            for &at in &positions {
                let (mut wc, mut ws) = (vec![0f32; h], vec![0f32; h]);
                yarn.fill(at as f64, &freq, None, &mut wc, &mut ws);
                let (mut gc, mut gs) = (vec![0f32; h], vec![0f32; h]);
                let mut filled = false;
                let fill = |c: &mut [f32], s: &mut [f32]| {
                    filled = true;
                    yarn.fill(at as f64, &freq, None, c, s);
                };
                set.get(at, fill, &mut gc, &mut gs);
                if filled {
                    misses += 1;
                } else {
                    hits += 1;
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    (bits(&gc), bits(&gs)),
                    (bits(&wc), bits(&ws)),
                    "{p:?} pos {at} (step {step})"
                );
            }
            assert!(cache.sets.len() <= CACHE_SETS);
        }
        // The repeated pairs hit; the slots positions 4096 apart share miss.
        assert!(
            hits > positions.len() && misses > positions.len(),
            "{hits} hits, {misses} misses"
        );
    }

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

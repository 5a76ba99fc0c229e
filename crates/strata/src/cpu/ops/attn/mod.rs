//! FLASH_ATTN_EXT: fused `softmax(q·kᵀ·scale [softcap] + slope·mask)·v`.
//!
//! q F32 [D, n_q, H, ne3]; k, v F16/F32 [D | Dv, n_kv, H_kv, ne3_kv] with
//! contiguous rows (grouped-query attention: head `h` reads kv head
//! `h / (H / H_kv)`, and `iq3 / (ne3 / ne3_kv)`); optional mask F16/F32
//! [n_kv, ≥ n_q, m2, m3] broadcast over heads (`h % m2`, `iq3 % m3`);
//! optional sinks F32 \[H\]. The result is F32 [Dv, H, n_q, ne3]: the row for
//! (head h, query iq) is at i1 = h, i2 = iq.
//!
//! As ggml's CPU backend (`ggml_compute_forward_flash_attn_ext_f16`), one of
//! three algorithms runs, chosen from the shapes and types alone ([`Path`]):
//!
//! * **One-chunk** ([`Path::OneChunk`], short batches and decoding with
//!   fewer than [`SPLIT_KV_MIN`] keys): per query row, one pass over the keys
//!   with an online softmax. For f16 keys q is rounded to f16 first (ggml
//!   converts q to K's dot type); scores are f32 sums of the (exact) products.
//!   Keys whose mask is -inf are skipped, so a fully masked row yields zeros.
//!   With f16 V the accumulator is kept in f16: every rescale
//!   `acc = f16(acc·ms)` and every step `acc = f16(acc + v·vs)` rounds (round
//!   to nearest even), which the golden logits of llama.cpp need; f32 V keeps
//!   an f32 accumulator. Soft-capping is `softcap·tanh(s·scale/softcap)`.
//! * **Split-KV** ([`Path::SplitKv`], one query row, `ne3 == 1`, K and V of one
//!   type, at least [`SPLIT_KV_MIN`] keys): the keys are cut into `nth` equal
//!   chunks (`ceil(n_kv / nth)`, nth = the thread count asked for, `-t`:
//!   `WorkerCtx::shares`, also when the CPU backend runs fewer OS threads than
//!   that, which then take the chunks in turn); each thread runs the
//!   one-chunk algorithm over its chunk for every head and leaves the partial
//!   (max, sum, unnormalized f32 accumulator) in its work memory; after a
//!   barrier the partials of each head are merged by log-sum-exp (chunks with
//!   sum 0 skipped) and divided by the sum. Sinks count in the chunk starting
//!   at key 0 only. **The result depends on the thread count** (the f16
//!   accumulator restarts at every chunk), exactly as ggml's does; with one
//!   thread it equals the one-chunk result bit for bit.
//! * **Tiled** ([`Path::Tiled`], at least [`TILE_Q`] query rows, K and V of one
//!   type): tiles of up to 64 query rows of one head against tiles of 64 keys,
//!   everything in f32 (q is *not* rounded; K and V are converted exactly):
//!   scores by an f32 GEMM, `·scale/softcap → tanh → ·softcap` when capped,
//!   `+ slope·mask`; a key tile whose mask is -inf for every row of the query
//!   tile is skipped; per row the running maximum grows tile by tile (the
//!   accumulator and sum rescaled by `exp(M_old − M_new)`), `P = exp(s − M)`
//!   (a vectorized exp at the SIMD levels, relative error < 1e-7, see
//!   `x86`'s docs; ggml's is also an approximation) and
//!   `acc += P·V` by a second f32 GEMM (each output an FMA chain in key
//!   order, as ggml's `simd_gemm`). Sinks are added after the last tile.
//!   Unlike ggml on aarch64 (which takes this path only for `Dv % 4 == 0`),
//!   strata takes it for every Dv on every architecture.
//!
//! A batch-invariant backend (`Ctx::batch_invariant`) runs a fourth one for
//! every shape instead, whose result for a row depends only on its query
//! and the keys it sees, in cell order:
//!
//! * **Two-pass**: the scores of the row's unmasked keys as the one-chunk
//!   path computes them (q rounded to f16 for f16 keys, ggml's dot order at
//!   the level, `·scale`, soft-capped, `+ slope·mask`) and their maximum
//!   `M`; then `p = exp(s − M)` (the vectorized exp at the SIMD levels),
//!   the sum of the `p` in key order and `acc += p·v` in f32 in key order
//!   (one FMA per key at the SIMD levels, multiply then add at the scalar
//!   one); sinks after. No rescale ever happens, so where blocks of keys
//!   start and which rows share a group (the kernels score, for up to four
//!   rows of one kv head, the keys any of them sees: a row's unseen keys
//!   cost nothing but time) do not move a bit. No f16 accumulator either:
//!   it keeps the rounding chains off the decode's critical path.
//!
//! The hot loops run at the backend's instruction-set level
//! ([`crate::isa::Isa`]), chosen once per op: AVX-512 and AVX2 (+FMA, F16C)
//! kernels in `x86` (x86-64 only; instantiated per level by `per_level!`), the portable scalar ones here (also used for NEON,
//! and for the one-chunk path with f16 K and f32 V or the reverse). At the
//! scalar level the one-chunk path is the reference: it performs exactly the
//! arithmetic of strata's original row-by-row kernel (sequential f32 dot
//! products, mul + add, libm exp). The SIMD levels do what ggml's SIMD code
//! does at the same vector width: the q·k sums in ggml's order, FMA for the
//! accumulator updates; they use the vectorized exp (relative error < 1e-7)
//! where ggml calls `expf`. Their f16 roundings stay bit-exact (`vcvtps2ph`
//! with round to nearest even is `half::f16::from_f32`).
//!
//! Threads: one-chunk and two-pass rows run token by token, a kv head's rows
//! of one token a group sharing each K/V load (up to four) and the token's
//! mask row, built once; in prompt chunks (more than 64 tokens) the
//! threads take the tokens in turn, which balances causal prompts, else
//! contiguous shares of rows. A group never mixes tokens, whose keys differ
//! when the tokens belong to different sequences (a prompt batch added
//! position by position, as older llama-batched-bench did, interleaves them):
//! 1.7–2× faster there than groups spanning two tokens, and no slower on
//! one sequence's prompt (`benches/attn.rs`, `prompt*`). Only MHA prompt
//! chunks (one query head per kv head, more than 64 tokens) group one head
//! of up to four tokens, in contiguous shares of rows. Tiles are handed
//! out by a shared counter once the threads have shared the node's
//! preparation (the mask's class per tile pair and f32 copies of K and V,
//! in the shared work memory; see `tiled`) and met at one barrier. Every
//! row is computed by the same arithmetic whichever thread runs it, so the
//! one-chunk, two-pass and tiled results do not depend on the thread count (split-KV
//! does, see above). The split-KV partials live at the start of each thread's own work
//! memory and are read by the merging threads after the barrier (the op's
//! `work_size` is not told the thread count, so they cannot be sized in the
//! shared part).

use std::sync::atomic::{AtomicUsize, Ordering};

use half::f16;

use super::softmax::alibi_slope;
use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::ops::Op;
use crate::tensor::{DType, Tensor};

mod decode;
mod mask;
mod scalar;
mod tiled;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

use decode::split_kv;
use mask::{group_masks, mask_floats, MaskRow};
pub(crate) use scalar::Scalar;
use tiled::tiled;

/// Query rows per tile of the tiled path, and the fewest query rows that take it.
pub(crate) const TILE_Q: usize = 64;
/// Keys per tile of the tiled path.
pub(crate) const TILE_KV: usize = 64;
/// The fewest keys for which a single query row takes the split-KV path.
pub(crate) const SPLIT_KV_MIN: usize = 512;
/// Row padding (f32 elements) of the work buffers: a multiple of every
/// level's vector width.
const PAD: usize = 16;
/// Most query rows the one-chunk kernels process together (rows sharing K/V).
const GROUP: usize = 4;
/// Query tokens above which, for a kv head with one query head (MHA), a row
/// group takes that head in several tokens (a prompt chunk, whose tokens
/// see mostly the same keys).
const CROSS_TOKENS: usize = 64;

/// The algorithm a FLASH_ATTN_EXT node runs (ggml's choice; module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// One query row against KV chunks, one chunk per thread, then a merge.
    SplitKv,
    /// 64 × 64 tiles of query rows × keys in f32.
    Tiled,
    /// Row by row over all keys, f16 accumulator for f16 V.
    OneChunk,
}

/// ggml's path for q of shape `q_ne` against `n_kv` keys of types `k_t`, `v_t`.
pub(crate) fn choose_path(q_ne: [usize; 4], k_t: DType, v_t: DType, n_kv: usize) -> Path {
    let kv_ok = matches!(k_t, DType::F32 | DType::F16) && k_t == v_t;
    if kv_ok && q_ne[1] == 1 && q_ne[3] == 1 && n_kv >= SPLIT_KV_MIN {
        Path::SplitKv
    } else if kv_ok && q_ne[1] >= TILE_Q {
        Path::Tiled
    } else {
        Path::OneChunk
    }
}

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

fn pad(n: usize) -> usize {
    n.next_multiple_of(PAD)
}

/// f32 elements of one-chunk (and two-pass) scratch for chunks of up to
/// `n_keys` keys: per row of a group the query, the accumulator, the mask
/// and the two-pass scores.
fn one_chunk_floats(d: usize, dv: usize, n_keys: usize) -> usize {
    GROUP * (pad(d) + pad(dv) + mask_floats(n_keys) + pad(n_keys))
}

/// f32 elements of the partials of one thread: H × (M, S, Dv values).
fn partial_floats(n_head: usize, dv: usize) -> usize {
    pad(n_head * (2 + dv))
}

/// The tiled path's per-thread buffers, f32 offsets into the scratch.
struct TileLayout {
    kf: usize,
    vf: usize,
    kq: usize,
    vkq: usize,
    mask: usize,
    mt: usize,
    stats: usize,
    qrow: usize,
    total: usize,
}

impl TileLayout {
    fn new(d: usize, dv: usize) -> TileLayout {
        let mut at = 0;
        let mut take = |n: usize| {
            let o = at;
            at += pad(n);
            o
        };
        let qt = take(d * TILE_Q);
        let kf = take(TILE_KV * d);
        let vf = take(TILE_KV * pad(dv));
        let kq = take(TILE_KV * TILE_Q);
        let vkq = take(TILE_Q * pad(dv));
        let mask = take(TILE_Q * TILE_KV);
        let mt = take(TILE_KV * TILE_Q);
        let stats = take(3 * TILE_Q);
        let qrow = take(d);
        debug_assert_eq!(qt, 0);
        TileLayout {
            kf,
            vf,
            kq,
            vkq,
            mask,
            mt,
            stats,
            qrow,
            total: at,
        }
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let (q, k, v) = (node.src(0), node.src(1), node.src(2));
    let (d, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    // Every path's size is at least the one-chunk path's: a batch-invariant
    // backend takes that path for every shape (`Ctx::batch_invariant`).
    match choose_path(q.ne, k.dtype, v.dtype, n_kv) {
        // Partials first, then the one-chunk scratch (a chunk is at most n_kv keys).
        Path::SplitKv => WorkSize {
            shared: 0,
            per_thread: (partial_floats(q.ne[2], dv) + one_chunk_floats(d, dv, n_kv)) * 4,
        },
        // The tile counter, the mask class table and the K/V copies.
        Path::Tiled => WorkSize {
            shared: tiled::shared_bytes(q, k, v, node.src[3].as_ref()),
            per_thread: TileLayout::new(d, dv)
                .total
                .max(one_chunk_floats(d, dv, n_kv))
                * 4,
        },
        Path::OneChunk => WorkSize {
            shared: 0,
            per_thread: one_chunk_floats(d, dv, n_kv) * 4,
        },
    }
}

/// `x` rounded to f16 and back.
#[inline(always)]
fn half_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The node's operands and parameters.
struct Params<'a> {
    q: &'a TView,
    k: &'a TView,
    v: &'a TView,
    dst: &'a TView,
    mask: Option<&'a TView>,
    sinks: Option<&'a TView>,
    scale: f32,
    max_bias: f32,
    softcap: f32,
    d: usize,
    dv: usize,
    n_kv: usize,
    n_head: usize,
    rk2: usize,
    rk3: usize,
}

impl<'a> Params<'a> {
    fn new(node: &'a NodePlan) -> Params<'a> {
        let Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } = node.op
        else {
            unreachable!("attention kernel called for {}", node.op.name())
        };
        let (q, k, v) = (node.src(0), node.src(1), node.src(2));
        Params {
            q,
            k,
            v,
            dst: &node.dst,
            mask: node.src[3].as_ref(),
            sinks: node.src[4].as_ref(),
            scale,
            max_bias,
            softcap,
            d: q.ne[0],
            dv: v.ne[0],
            n_kv: k.ne[1],
            n_head: q.ne[2],
            rk2: q.ne[2] / k.ne[2],
            rk3: q.ne[3] / k.ne[3],
        }
    }

    /// The sink logit of head `h`.
    fn sink(&self, h: usize) -> Option<f32> {
        self.sinks.map(|sk| {
            let (s0, s1) = (sk.ne[0].max(1), sk.ne[1].max(1));
            sk.get_f32(h % s0, (h / s0) % s1, h / (s0 * s1), 0)
        })
    }

    /// Loads query row (iq, h, iq3) into `out[..d]`, rounded to f16 for f16
    /// keys (ggml's conversion to K's dot type), zeros after it.
    fn load_q<K: Kernels>(&self, kn: K, iq: usize, h: usize, iq3: usize, out: &mut [f32]) {
        self.q.load_row(iq, h, iq3, out);
        if self.k.dtype == DType::F16 {
            kn.round_h(&mut out[..self.d]);
        }
        out[self.d..].fill(0.0);
    }

    /// `slope · mask[c0 .. c0 + out.len()]` of the mask row for (iq, h, iq3).
    #[allow(clippy::too_many_arguments)]
    fn load_mask<K: Kernels>(
        &self,
        kn: K,
        m: &TView,
        iq: usize,
        h: usize,
        iq3: usize,
        c0: usize,
        slope: f32,
        out: &mut [f32],
    ) {
        let (i2, i3) = (h % m.ne[2], iq3 % m.ne[3]);
        let n = out.len();
        assert!(
            c0 + n <= m.ne[0],
            "mask columns {c0}..{} of {}",
            c0 + n,
            m.ne[0]
        );
        if m.rows_contiguous() {
            // SAFETY: the mask is a read-only source; its rows are contiguous.
            let row = unsafe { m.row_bytes(iq, i2, i3) };
            let es = m.dtype.type_size();
            kn.to_f32(&row[es * c0..es * (c0 + n)], m.dtype, out);
            if slope != 1.0 {
                out.iter_mut().for_each(|x| *x *= slope);
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                *o = slope * m.get_f32(c0 + j, iq, i2, i3);
            }
        }
    }

    /// The row state of query row (iq, h, iq3) over keys `c0..c1`, on entry
    /// to the one-chunk or two-pass kernels: the query loaded into `q`,
    /// `acc` zeroed, with the row's `mask` ([`Params::mask_row`]) and, for
    /// the two-pass kernels, its score buffer `sc`.
    fn row_state<'r, K: Kernels>(
        &self,
        kn: K,
        (iq, h, iq3): (usize, usize, usize),
        q: &'r mut [f32],
        acc: &'r mut [f32],
        mask: Option<MaskRow<'r>>,
        sc: Option<&'r mut [f32]>,
    ) -> RowState<'r> {
        self.load_q(kn, iq, h, iq3, q);
        acc.fill(0.0);
        RowState {
            q,
            mask,
            m: f32::NEG_INFINITY,
            s: 0.0,
            acc,
            sc,
        }
    }

    /// The fresh states of a group's `g` rows (row `i` at `at(i)`), in this
    /// thread's [`GROUP`] buffers (`scs` for the two-pass kernels), in a
    /// fixed array, so that no group allocates: the entries from `g` on are
    /// empty and not to be run (`&mut rows[..g]`).
    fn group_rows<'r, K: Kernels>(
        &self,
        kn: K,
        g: usize,
        at: impl Fn(usize) -> (usize, usize, usize),
        bufs: (&'r mut [&mut [f32]; GROUP], &'r mut [&mut [f32]; GROUP]),
        mks: [Option<MaskRow<'r>>; GROUP],
        scs: Option<&'r mut [&mut [f32]; GROUP]>,
    ) -> [RowState<'r>; GROUP] {
        let (mut qs, mut accs) = (bufs.0.iter_mut(), bufs.1.iter_mut());
        let (mut mks, mut scs) = (mks.into_iter(), scs.map(|s| s.iter_mut()));
        std::array::from_fn(|i| {
            let (q, acc, mk) = (qs.next(), accs.next(), mks.next().flatten());
            let sc = scs.as_mut().and_then(|s| s.next()).map(|s| &mut **s);
            match (q, acc) {
                (Some(q), Some(acc)) if i < g => self.row_state(kn, at(i), q, acc, mk, sc),
                _ => RowState {
                    q: &[],
                    mask: None,
                    m: f32::NEG_INFINITY,
                    s: 0.0,
                    acc: &mut [],
                    sc: None,
                },
            }
        })
    }

    /// The one-chunk job over keys `c0..c1` of kv head (ik2, ik3).
    fn chunk_job(&self, ik2: usize, ik3: usize, c0: usize, c1: usize) -> ChunkJob<'a> {
        ChunkJob {
            k: self.k,
            v: self.v,
            ik2,
            ik3,
            c0,
            c1,
            scale: self.scale,
            softcap: self.softcap,
        }
    }

    /// Adds the sink of head `h` to a finished row state (f32 accumulator),
    /// as ggml: the maximum moves to the sink when it is larger.
    fn add_sink(&self, h: usize, m: &mut f32, s: &mut f32, acc: &mut [f32]) {
        if let Some(sv) = self.sink(h) {
            if sv > *m {
                let shrink = (*m - sv).exp();
                *m = sv;
                *s = *s * shrink + 1.0;
                acc.iter_mut().for_each(|a| *a *= shrink);
            } else {
                *s += (sv - *m).exp();
            }
        }
    }
}

/// The keys `c0..c1` of kv head (ik2, ik3) for the one-chunk kernels.
pub(crate) struct ChunkJob<'a> {
    k: &'a TView,
    v: &'a TView,
    ik2: usize,
    ik3: usize,
    c0: usize,
    c1: usize,
    scale: f32,
    softcap: f32,
}

/// One query row in the one-chunk kernels: its inputs and running state.
pub(crate) struct RowState<'a> {
    /// The query, `d` values (f16-rounded for f16 keys) then zeros to a
    /// multiple of the vector width.
    q: &'a [f32],
    /// The mask for keys `c0..c1` (none: all visible, 0).
    mask: Option<MaskRow<'a>>,
    /// Running maximum.
    m: f32,
    /// Running sum.
    s: f32,
    /// Unnormalized accumulator: `dv` values then padding (zeros on entry).
    acc: &'a mut [f32],
    /// The two-pass kernels' scores, then weights, of the keys the row's
    /// group sees (at least the chunk's keys rounded up to 16); none for
    /// the one-chunk kernels.
    sc: Option<&'a mut [f32]>,
}

/// The operands of [`Kernels::softmax_cols`], the online softmax over the
/// columns of `kq` (keys × `np`): first `kq ← kq·scale (+ mt)` (`mt` keys
/// × `np` like kq), then per column the tile max, `ms = exp(M_old −
/// M_new)` (1 if the max did not grow), `kq ← exp(kq − M_new)` (0 in
/// columns whose tile max is -inf), `s ← s·ms + Σ kq`, `m ← M_new`.
pub(crate) struct SoftmaxCols<'a> {
    pub(crate) kq: &'a mut [f32],
    pub(crate) np: usize,
    pub(crate) scale: f32,
    pub(crate) mt: Option<&'a [f32]>,
    pub(crate) m: &'a mut [f32],
    pub(crate) s: &'a mut [f32],
    pub(crate) ms: &'a mut [f32],
}

/// The operands of [`Kernels::pv`]: `vkq[i][..] = vkq[i][..]·ms[i] +
/// Σ_j p[j][i] · vf[j][..]` for `rows` rows i (vkq and vf rows of `dvp`,
/// p rows of `np`): the rescale, then the products accumulated in order
/// of j.
pub(crate) struct PvCols<'a> {
    pub(crate) p: &'a [f32],
    pub(crate) np: usize,
    pub(crate) rows: usize,
    pub(crate) vf: &'a [f32],
    pub(crate) dvp: usize,
    pub(crate) ms: &'a [f32],
    pub(crate) vkq: &'a mut [f32],
}

/// The heavy loops of the three paths at one instruction-set level.
pub(crate) trait Kernels: Copy {
    /// f32 lanes per vector; the tile kernels take rows of a multiple of it.
    fn width(self) -> usize;
    /// Rounds every value of `x` to f16 and back (the queries of an f16
    /// K, as ggml converts them).
    fn round_h(self, x: &mut [f32]);
    /// Converts a K/V row (f16 or f32 bytes of `dt`) to f32 in
    /// `dst[..n]`, zeros after.
    fn to_f32(self, src: &[u8], dt: DType, dst: &mut [f32]);
    /// Sets `out[j / 64]` bit `j % 64` when little-endian f16 value `j` of
    /// `raw` is not -inf, for the `raw.len() / 2` values (bits past them 0).
    fn vis_f16(self, raw: &[u8], out: &mut [u64]);
    /// `kq[j][i] = Σ_d kf[j][d] · qt[d][i]` for the `kq.len() / np` keys j
    /// (kf rows of `d`), `np` query columns (qt rows of `np`), each sum
    /// accumulated in order of d from 0.
    fn qk(self, kf: &[f32], d: usize, qt: &[f32], np: usize, kq: &mut [f32]);
    /// The online softmax over the columns of `a.kq` ([`SoftmaxCols`]).
    fn softmax_cols(self, a: SoftmaxCols<'_>);
    /// The rescale and V products of the tiled path ([`PvCols`]).
    fn pv(self, a: PvCols<'_>);
    /// Runs the one-chunk algorithm for up to [`GROUP`] rows sharing K/V.
    fn one_chunk(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]);
    /// Runs the two-pass algorithm for fresh rows (maximum −∞, sum 0,
    /// accumulators zero) with score buffers.
    fn two_pass(self, job: &ChunkJob<'_>, rows: &mut [RowState<'_>]);
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    let p = Params::new(node);
    #[cfg(target_arch = "x86_64")]
    if let Some(kn) = x86::Simd::new(ctx.isa) {
        return run(kn, &p, ctx);
    }
    run(Scalar, &p, ctx)
}

fn run<K: Kernels>(kn: K, p: &Params<'_>, ctx: &Ctx<'_>) {
    if ctx.batch_invariant {
        return one_chunk_rows(kn, p, ctx, true);
    }
    match choose_path(p.q.ne, p.k.dtype, p.v.dtype, p.n_kv) {
        Path::SplitKv => split_kv(kn, p, ctx),
        Path::Tiled if sparse_for_tiles(kn, p) => one_chunk_rows(kn, p, ctx, false),
        Path::Tiled => tiled(kn, p, ctx),
        Path::OneChunk => one_chunk_rows(kn, p, ctx, false),
    }
}

/// Query rows [`sparse_for_tiles`] samples.
const SPARSE_SAMPLES: usize = 8;
/// How many times more keys than a row sees the tiles must cover before
/// the one-chunk path, which costs about 5.4 times the tiled path per
/// visible key (`benches/attn.rs`, `prompt*`, one-chunk forced), is faster.
const SPARSE_WASTE: usize = 8;

/// Whether the tiled path would compute mostly masked scores, so that the
/// one-chunk path (which visits only the keys a row sees) is faster: a
/// prompt batch of many sequences added position by position (as older
/// llama-batched-bench added them) interleaves their cells, so no key tile
/// is masked for a whole query tile and the tiles cover every sequence's
/// keys, 16 times what a row sees for 16 sequences (the tiled path then
/// took 20 times as long as for one sequence's prompt; one-chunk: 3.3
/// times faster). Judged from [`SPARSE_SAMPLES`] query rows of the first
/// mask plane spread over the batch: the keys of the key tiles (of
/// [`TILE_KV`]) a row touches, a lower bound on what its query tile
/// computes, against the keys it sees. Only f16 masks with contiguous rows are sampled (the
/// shape the models build); the answer depends on the mask alone, so every
/// thread takes the same path.
fn sparse_for_tiles<K: Kernels>(kn: K, p: &Params<'_>) -> bool {
    let Some(m) = p.mask else { return false };
    if m.dtype != DType::F16 || !m.rows_contiguous() || m.ne[0] < p.n_kv {
        return false;
    }
    // SAFETY: the mask is a read-only source with contiguous rows; row
    // iq < n_q <= mask.ne1 (checked when the op was built) of plane 0.
    sparse_rows(kn, p.q.ne[1], p.n_kv, |iq| unsafe { m.row_bytes(iq, 0, 0) })
}

/// [`sparse_for_tiles`]'s rule over the f16 mask rows `row(iq)` (at least
/// `n_kv` values each) of `n_q` query rows.
fn sparse_rows<'m, K: Kernels>(
    kn: K,
    n_q: usize,
    n_kv: usize,
    row: impl Fn(usize) -> &'m [u8],
) -> bool {
    const _: () = assert!(TILE_KV == 64, "one visibility word per key tile");
    // visibility words of 4096 keys at a time (64-key aligned, as the tiles)
    let mut words = [0u64; 64];
    let (mut seen, mut tiles) = (0usize, 0usize);
    for s in 0..SPARSE_SAMPLES.min(n_q) {
        let iq = s * n_q / SPARSE_SAMPLES.min(n_q);
        for (wi, raw) in row(iq)[..2 * n_kv].chunks(2 * 64 * words.len()).enumerate() {
            let words = &mut words[..(raw.len() / 2).div_ceil(64)];
            kn.vis_f16(raw, words);
            seen += words.iter().map(|w| w.count_ones() as usize).sum::<usize>();
            // one word per key tile (TILE_KV = 64), the last one partial
            let first = wi * 64 * 64;
            let live = words.iter().enumerate().filter(|(_, &w)| w != 0);
            tiles += live
                .map(|(t, _)| (n_kv - first - t * 64).min(64))
                .sum::<usize>();
        }
    }
    tiles > SPARSE_WASTE * seen
}

/// Whether a prompt batch with this f16 mask (`n_q` rows of `row_len`
/// little-endian values, the first `n_kv` read) leaves the tiled path for
/// the one-chunk path ([`sparse_for_tiles`]); the caller checked that the
/// rows are there and `n_kv <= row_len`.
#[cfg(feature = "testkit")]
pub(crate) fn sparse_mask_f16(mask: &[u8], row_len: usize, n_q: usize, n_kv: usize) -> bool {
    let bytes = 2 * row_len;
    sparse_rows(Scalar, n_q, n_kv, |iq| &mask[iq * bytes..(iq + 1) * bytes])
}

/// Divides `acc[..dv]` by `s` (0 when `s` is 0) and stores it as the output
/// row for (h, iq, iq3).
fn store_normalized(p: &Params<'_>, h: usize, iq: usize, iq3: usize, s: f32, acc: &mut [f32]) {
    let acc = &mut acc[..p.dv];
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    acc.iter_mut().for_each(|a| *a *= inv);
    p.dst.store_row(h, iq, iq3, acc);
}

/// Splits `buf` into [`GROUP`] slices of `n` (plus the rest), without
/// allocating.
fn split_group(buf: &mut [f32], n: usize) -> ([&mut [f32]; GROUP], &mut [f32]) {
    let mut rest = buf;
    let parts = std::array::from_fn(|_| {
        let (part, r) = std::mem::take(&mut rest).split_at_mut(n);
        rest = r;
        part
    });
    (parts, rest)
}

/// The one-chunk path, or (`two`) the two-pass one: this thread's rows,
/// in groups sharing a kv head.
fn one_chunk_rows<K: Kernels>(kn: K, p: &Params<'_>, ctx: &Ctx<'_>, two: bool) {
    let (n_q, ne3) = (p.q.ne[1], p.q.ne[3]);
    let h_kv = p.k.ne[2];
    let scratch = ctx.scratch_f32(one_chunk_floats(p.d, p.dv, p.n_kv));
    let (dp, dvp, mp) = (pad(p.d), pad(p.dv), mask_floats(p.n_kv));
    let (mut qs, rest) = split_group(scratch, dp);
    let (mut accs, rest) = split_group(rest, dvp);
    let (mut masks, rest) = split_group(rest, mp);
    let (mut scs, _) = split_group(rest, pad(p.n_kv));
    // Row u enumerates (iq3, iq, kv head, head within the kv group), fastest
    // last: a token's rows in a row, each kv head's rows one group, which
    // reads one mask row, built once for the token. Only where a kv head
    // has a single query head (MHA) and the batch is long (a prompt chunk)
    // does u enumerate (iq3, kv head, iq, head) and a group take that head
    // in up to four consecutive tokens, to share K and V. The bits do not
    // depend on the order, the grouping nor the thread a row runs on.
    let by_token = p.rk2 > 1 || n_q <= CROSS_TOKENS;
    let coords = |u: usize| {
        let hr = u % p.rk2;
        let (iq, ik2) = if by_token {
            ((u / p.n_head) % n_q, (u / p.rk2) % h_kv)
        } else {
            ((u / p.rk2) % n_q, (u / (p.rk2 * n_q)) % h_kv)
        };
        let iq3 = u / (p.n_head * n_q);
        (ik2 * p.rk2 + hr, iq, iq3, ik2)
    };
    // In prompt chunks by token, the threads take the tokens in turn (a
    // causal prompt's later tokens see more keys, so contiguous shares
    // would leave the first threads idle); else contiguous shares of rows,
    // which split a decode token's heads between threads.
    let n_rows = n_q * p.n_head * ne3;
    let (first, step, len) = if by_token && n_q > CROSS_TOKENS {
        (ctx.w.ith * p.n_head, ctx.w.nth.max(1) * p.n_head, p.n_head)
    } else {
        let r = ctx.rows(n_rows);
        (r.start, n_rows.max(1), r.len())
    };
    let mut held = None;
    for start in (first..n_rows).step_by(step) {
        let end = (start + len).min(n_rows);
        let mut u = start;
        while u < end {
            let (_, iq0, iq3, ik2) = coords(u);
            // up to GROUP rows of one kv head (by token: of one token)
            let mut g = 1;
            while g < GROUP && u + g < end && {
                let (_, jq, j3, jk2) = coords(u + g);
                (j3, jk2) == (iq3, ik2) && (jq == iq0 || !by_token)
            } {
                g += 1;
            }
            let at = |i: usize| {
                let (h, iq, iq3, _) = coords(u + i);
                (iq, h, iq3)
            };
            let mks = group_masks(kn, p, g, at, (0, p.n_kv), &mut masks, &mut held);
            let scs = two.then_some(&mut scs);
            let mut rows = p.group_rows(kn, g, at, (&mut qs, &mut accs), mks, scs);
            let rows = &mut rows[..g];
            let job = p.chunk_job(ik2, iq3 / p.rk3, 0, p.n_kv);
            if two {
                kn.two_pass(&job, rows);
            } else {
                kn.one_chunk(&job, rows);
            }
            for (i, r) in rows.iter_mut().enumerate() {
                let (h, iq, iq3, _) = coords(u + i);
                let (mut m, mut s) = (r.m, r.s);
                p.add_sink(h, &mut m, &mut s, &mut r.acc[..p.dv]);
                store_normalized(p, h, iq, iq3, s, &mut *r.acc);
            }
            u += g;
        }
    }
}

#[cfg(test)]
mod tests;

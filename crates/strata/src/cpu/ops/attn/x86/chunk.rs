//! The one-chunk path of FLASH_ATTN_EXT at the x86 levels: up to
//! four (`GROUP`) query rows sharing K and V, over blocks of [`KB`] keys,
//! with ggml's per-key order of f16 roundings (module docs of `attn`).
//! Written once over [`Lanes`]; `per_level!` in `x86.rs` instantiates
//! [`one_chunk`] per level.

use super::super::{ChunkJob, RowState};
use crate::isa::x86::{exp_bounded, load16_part, load_part, Lanes};

/// Elements `off .. off + n` (n ≤ W) of a K/V row (f16 when `H`) as f32
/// lanes, zeros past `n`.
#[inline(always)]
pub(super) unsafe fn load_row<L: Lanes, const H: bool>(
    row: *const u8,
    off: usize,
    n: usize,
) -> L::V {
    // SAFETY: the caller guarantees elements off .. off + n of the row.
    unsafe {
        match (H, n == L::W) {
            (true, true) => L::load_h(row.cast::<u16>().add(off)),
            (true, false) => load16_part::<L, false>(row.cast::<u16>().add(off), n),
            (false, true) => L::load(row.cast::<f32>().add(off)),
            (false, false) => load_part::<L>(row.cast::<f32>().add(off), n),
        }
    }
}

/// Asks the cache for the `bytes` bytes at `p` (a hint: no fault, no effect on results).
#[inline(always)]
pub(super) fn prefetch_row(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes).step_by(64) {
        // SAFETY: prefetching is a hint that never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                p.wrapping_add(off).cast::<i8>(),
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
}

/// Keys per block of the one-chunk kernel (a multiple of every `W`).
pub(super) const KB: usize = 32;

/// The one-chunk kernel's operands for `G` rows (checked by the wrapper).
pub(crate) struct ChunkArgs<const G: usize> {
    pub(super) d: usize,
    pub(super) dv: usize,
    /// Keys.
    pub(super) n: usize,
    /// First K row and the byte stride between rows.
    pub(super) k: *const u8,
    pub(super) ks: usize,
    /// First V row and the byte stride between rows.
    pub(super) v: *const u8,
    pub(super) vs: usize,
    pub(super) scale: f32,
    pub(super) softcap: f32,
    /// Queries, `d` rounded up to `W` values each.
    pub(super) q: [*const f32; G],
    /// `n` mask values each (read at visible keys only), or null.
    pub(super) mask: [*const f32; G],
    /// `n.div_ceil(64)` visibility words each ([`super::super::MaskRow`]),
    /// null where `mask` is.
    pub(super) vis: [*const u64; G],
    /// Accumulators, `dv` rounded up to `W` values each.
    pub(super) acc: [*mut f32; G],
    pub(super) m: [f32; G],
    pub(super) s: [f32; G],
    /// The two-pass kernel's score buffers ([`super::two_pass`]), `n`
    /// rounded up to `W` values each; null for the one-chunk kernel.
    pub(super) sc: [*mut f32; G],
}

impl<const G: usize> ChunkArgs<G> {
    /// Whether row `g` sees key `key` (a row without a mask sees every key).
    ///
    /// # Safety
    /// `key < n` (the row's visibility words cover it).
    #[inline(always)]
    pub(super) unsafe fn sees(&self, g: usize, key: usize) -> bool {
        let vis = self.vis[g];
        // SAFETY: word key / 64 of the row's words (contract).
        vis.is_null() || unsafe { *vis.add(key / 64) } >> (key % 64) & 1 != 0
    }

    /// Row `g`'s slope-scaled mask value of key `key`: 0 without a mask,
    /// -inf where the row does not see the key.
    ///
    /// # Safety
    /// As [`ChunkArgs::sees`].
    #[inline(always)]
    pub(super) unsafe fn mask_at(&self, g: usize, key: usize) -> f32 {
        // SAFETY: forwarded contract; the values cover the visible keys.
        unsafe {
            if self.mask[g].is_null() {
                0.0
            } else if self.sees(g, key) {
                *self.mask[g].add(key)
            } else {
                f32::NEG_INFINITY
            }
        }
    }
}

/// The keys some row of a group sees, in ascending order, handed out in
/// blocks of up to [`KB`]: taken from 64-key windows of the rows'
/// visibility words (any row's bit; every key when a row has no mask).
#[derive(Default)]
pub(super) struct KeyBlocks {
    /// The first key of the next window.
    win: usize,
    /// The window's keys not yet handed out (bits from `base`).
    pend: u64,
    base: usize,
}

impl KeyBlocks {
    /// Fills `keys` with the next keys (at most [`KB`]) and returns how
    /// many; 0 when every key has been handed out.
    ///
    /// # Safety
    /// `a`'s visibility words (non-null ones) hold `a.n.div_ceil(64)` words.
    #[inline(always)]
    pub(super) unsafe fn next<const G: usize>(
        &mut self,
        a: &ChunkArgs<G>,
        keys: &mut [usize; KB],
    ) -> usize {
        let mut nb = 0;
        while nb < KB {
            if self.pend == 0 {
                if self.win >= a.n {
                    break;
                }
                let len = (a.n - self.win).min(64);
                let mut u = 0u64;
                for &vis in &a.vis {
                    if vis.is_null() {
                        u = u64::MAX >> (64 - len);
                        break;
                    }
                    // SAFETY: win < n, so word win / 64 is within the row's words.
                    u |= unsafe { *vis.add(self.win / 64) };
                }
                self.pend = u;
                self.base = self.win;
                self.win += len;
                continue;
            }
            keys[nb] = self.base + self.pend.trailing_zeros() as usize;
            self.pend &= self.pend - 1;
            nb += 1;
        }
        nb
    }
}

/// Runs `f(keys, nb, t0, ahead)` for each block of the keys some row of
/// `a` sees ([`KeyBlocks`]; `t0` the keys handed out before it), where
/// [`Ahead::at`]`(j)` asks the cache for the row of stream `rows` (`bytes`
/// bytes, `stride` apart from `base`) of the next block's `j`-th key, and
/// for that of stream `also` (if not null) of this block's `j`-th key.
/// Called once per key as `f` works through its block, the requests spread
/// over the work instead of going out in one burst that fills the core's
/// line-fill buffers and stalls it (only the first block's rows go in a
/// burst): 8–13 % less time for 16 decode tokens over 30 layers' caches in
/// DRAM (`benches/attn.rs`, `batch16_interleaved_layers30`). The two-pass
/// kernel's first pass asks for V as `also`, so that its second finds V
/// in the cache.
///
/// # Safety
/// As [`KeyBlocks::next`]; `f`'s own contract.
#[inline(always)]
pub(super) unsafe fn each_block<const G: usize>(
    a: &ChunkArgs<G>,
    rows: Rows,
    also: Rows,
    mut f: impl FnMut(&[usize; KB], usize, usize, &Ahead<'_>),
) {
    let mut blocks = KeyBlocks::default();
    let (mut cur, mut next) = ([0usize; KB], [0usize; KB]);
    // SAFETY: forwarded contract.
    let mut nb = unsafe { blocks.next(a, &mut cur) };
    for &key in &cur[..nb] {
        rows.prefetch(key);
    }
    let mut t0 = 0;
    while nb > 0 {
        // SAFETY: forwarded contract.
        let nn = unsafe { blocks.next(a, &mut next) };
        let ahead = Ahead {
            rows,
            keys: &next[..nn],
            also,
            now: &cur[..nb],
        };
        f(&cur, nb, t0, &ahead);
        t0 += nb;
        std::mem::swap(&mut cur, &mut next);
        nb = nn;
    }
}

/// Rows of `bytes` bytes, `stride` apart from `base` (K's or V's), to ask
/// the cache for; none where `base` is null.
#[derive(Clone, Copy)]
pub(super) struct Rows {
    pub(super) base: *const u8,
    pub(super) stride: usize,
    pub(super) bytes: usize,
}

impl Rows {
    /// No rows.
    pub(super) const NONE: Rows = Rows {
        base: std::ptr::null(),
        stride: 0,
        bytes: 0,
    };

    /// Asks the cache for the row of `key` (a hint: no fault, no effect on
    /// results; nothing for [`Rows::NONE`]).
    #[inline(always)]
    fn prefetch(self, key: usize) {
        if !self.base.is_null() {
            prefetch_row(self.base.wrapping_add(key * self.stride), self.bytes);
        }
    }
}

/// The rows of the next block's keys, and of the other stream for this
/// block's, asked for one at a time ([`each_block`]).
pub(super) struct Ahead<'a> {
    rows: Rows,
    keys: &'a [usize],
    also: Rows,
    now: &'a [usize],
}

impl Ahead<'_> {
    /// Asks for nothing (the one-chunk kernel's V loop).
    pub(super) const NONE: Ahead<'static> = Ahead {
        rows: Rows::NONE,
        keys: &[],
        also: Rows::NONE,
        now: &[],
    };

    /// Asks the cache for the row of the next block's `j`-th key, and for
    /// the other stream's row of this block's `j`-th key, if any.
    #[inline(always)]
    pub(super) fn at(&self, j: usize) {
        if let Some(&key) = self.keys.get(j) {
            self.rows.prefetch(key);
        }
        if let Some(&key) = self.now.get(j) {
            self.also.prefetch(key);
        }
    }
}

/// `x` stored in the accumulator's type: f16 when `H`.
#[inline(always)]
unsafe fn store_round<L: Lanes, const H: bool>(x: L::V) -> L::V {
    if H {
        // SAFETY: lane arithmetic at the caller's level.
        unsafe { L::round_h(x) }
    } else {
        x
    }
}

/// The one-chunk algorithm (module docs of `attn`) for `G` rows sharing K
/// and V, both f16 when `H` (else f32), over blocks of [`KB`] keys: the
/// scores of a block, then per row the running maximum, the factors
/// `exp(M_old − M_new)` / `exp(s − M)` (vectorized) and the sum, then the
/// accumulator updates key by key (in key order, so every element sees
/// exactly ggml's sequence of f16 roundings).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // rows index several arrays at once
pub(super) unsafe fn one_chunk<L: Lanes, const H: bool, const G: usize>(a: &mut ChunkArgs<G>) {
    let w = L::W;
    let nvc = a.dv.div_ceil(w);
    // Scores, then factors, per row and key of the block.
    let mut f = [[0f32; KB]; G];
    // Rows (bits) for which each key is not masked.
    let mut act = [0u8; KB];
    // Rows (bits) whose maximum grows at each key.
    let mut grew = [0u8; KB];
    // Each block takes the next KB keys that some row sees. A key no row
    // sees changes nothing (no score, no maximum, no accumulator step), so
    // leaving it out keeps every row's sequence of operations, and with it
    // the bits: sparse masks (many sequences in one cache, their cells
    // interleaved) then cost their visible keys, not the cache's size. The
    // keys come from 64-key windows of visibility bits (any row's), taken
    // in ascending order.
    let mut blocks = KeyBlocks::default();
    let mut keys = [0usize; KB];
    // SAFETY: the wrapper checked every extent of `a`.
    unsafe {
        loop {
            let nb = blocks.next(a, &mut keys);
            if nb == 0 {
                break;
            }
            // Keys of many sequences lie far apart (their cells interleave):
            // ask for the block's K and V rows before the first use.
            for &key in &keys[..nb] {
                prefetch_row(a.k.add(key * a.ks), a.d * if H { 2 } else { 4 });
                prefetch_row(a.v.add(key * a.vs), a.dv * if H { 2 } else { 4 });
            }
            for j in 0..nb {
                let mut bits = 0u8;
                for g in 0..G {
                    let mv = a.mask_at(g, keys[j]);
                    f[g][j] = mv;
                    if mv != f32::NEG_INFINITY {
                        bits |= 1 << g;
                    }
                }
                act[j] = bits;
                grew[j] = 0;
                if bits == 0 {
                    continue;
                }
                let kr = a.k.add(keys[j] * a.ks);
                let dots = dot::<L, H, G>(a, kr);
                for g in 0..G {
                    if bits >> g & 1 != 0 {
                        let mut x = dots[g] * a.scale;
                        if a.softcap != 0.0 {
                            x = a.softcap * (x / a.softcap).tanh();
                        }
                        f[g][j] += x;
                    }
                }
            }
            for g in 0..G {
                let e = &mut f[g];
                let mut mx = a.m[g];
                for j in 0..nb {
                    if act[j] >> g & 1 == 0 {
                        e[j] = 0.0;
                        continue;
                    }
                    let x = e[j];
                    if x > mx {
                        e[j] = mx - x;
                        mx = x;
                        grew[j] |= 1 << g;
                    } else {
                        e[j] = x - mx;
                    }
                }
                e[nb..].fill(0.0);
                let mut c = 0;
                while c < KB {
                    let p = e.as_mut_ptr().add(c);
                    L::store(p, exp_bounded::<L>(L::load(p)));
                    c += w;
                }
                let mut sum = a.s[g];
                for j in 0..nb {
                    if act[j] >> g & 1 != 0 {
                        sum = if grew[j] >> g & 1 != 0 {
                            sum * e[j] + 1.0
                        } else {
                            sum + e[j]
                        };
                    }
                }
                a.s[g] = sum;
                a.m[g] = mx;
            }
            // Whole vectors four at a time with 32 registers (the chains of
            // f16 roundings are latency bound: more of them in flight), else
            // two at a time, then one, then the partial one.
            let nfull = a.dv / w;
            let mut c = 0;
            while L::W == 16 && c + 4 <= nfull {
                apply::<L, H, G, 4, true>(a, c, &keys, nb, &act, &grew, &f);
                c += 4;
            }
            while c + 2 <= nfull {
                apply::<L, H, G, 2, true>(a, c, &keys, nb, &act, &grew, &f);
                c += 2;
            }
            if c < nfull {
                apply::<L, H, G, 1, true>(a, c, &keys, nb, &act, &grew, &f);
                c += 1;
            }
            if c < nvc {
                apply::<L, H, G, 1, false>(a, c, &keys, nb, &act, &grew, &f);
            }
        }
    }
}

/// q·k for the `G` queries and the K row at `kr`, summed as ggml's
/// `ggml_vec_dot_f16` / `ggml_vec_dot_f32` at this vector width: steps of
/// 4·W elements into four accumulators (one FMA per vector), reduced as
/// `(s0 + s2) + (s1 + s3)` then across lanes; the leftover elements added
/// one by one, in f64 for f16 (the products are exact) and in f32 for f32.
#[inline(always)]
pub(super) unsafe fn dot<L: Lanes, const H: bool, const G: usize>(
    a: &ChunkArgs<G>,
    kr: *const u8,
) -> [f32; G] {
    let step = 4 * L::W;
    let ns = a.d / step;
    // SAFETY: the K row holds d elements; the queries d (padded) f32.
    unsafe {
        let parts = dot_parts::<L, H, G>(a, kr);
        let mut out = [0f32; G];
        for (o, (&p, &q)) in out.iter_mut().zip(parts.iter().zip(&a.q)) {
            let r = L::hsum(p);
            if H {
                let mut sum = r as f64;
                let k = kr.cast::<u16>();
                for i in ns * step..a.d {
                    let kv = crate::quant::simd::f16_to_f32(k.add(i).read_unaligned());
                    sum += (kv * *q.add(i)) as f64;
                }
                *o = sum as f32;
            } else {
                let mut sum = r;
                let k = kr.cast::<f32>();
                for i in ns * step..a.d {
                    sum += k.add(i).read_unaligned() * *q.add(i);
                }
                *o = sum;
            }
        }
        out
    }
}

/// [`dot`]'s whole steps for the `G` queries and the K row at `kr`: per
/// query the vector `(s0 + s2) + (s1 + s3)` whose lanes [`dot`] adds with
/// [`Lanes::hsum`] (the elements past the last whole step left out).
#[inline(always)]
pub(super) unsafe fn dot_parts<L: Lanes, const H: bool, const G: usize>(
    a: &ChunkArgs<G>,
    kr: *const u8,
) -> [L::V; G] {
    // SAFETY: the queries hold d (padded) f32; forwarded contract.
    unsafe {
        dot_parts_with::<L, H, G>(
            a.d / (4 * L::W),
            kr,
            #[inline(always)]
            |g, i| L::load(a.q[g].add(i * L::W)),
        )
    }
}

/// [`dot_parts`] over `ns` steps of `4·W` elements with vector `i` of query
/// `g` given by `q(g, i)` (loaded, or held in registers across keys).
///
/// # Safety
/// The K row at `kr` holds `ns·4·W` elements; `q`'s own contract.
#[inline(always)]
pub(super) unsafe fn dot_parts_with<L: Lanes, const H: bool, const G: usize>(
    ns: usize,
    kr: *const u8,
    q: impl Fn(usize, usize) -> L::V,
) -> [L::V; G] {
    let w = L::W;
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[L::zero(); 4]; G];
        for st in 0..ns {
            for (jj, i) in (st * 4..st * 4 + 4).enumerate() {
                let kv = load_row::<L, H>(kr, i * w, w);
                for (g, ag) in acc.iter_mut().enumerate() {
                    ag[jj] = L::fma(kv, q(g, i), ag[jj]);
                }
            }
        }
        // (a loop, not a closure: one would be compiled without the
        // level's target features, every intrinsic a call)
        let mut out = [L::zero(); G];
        for (o, ag) in out.iter_mut().zip(&acc) {
            *o = L::add(L::add(ag[0], ag[2]), L::add(ag[1], ag[3]));
        }
        out
    }
}

/// The accumulator vectors `c .. c + NC` of every row in registers (loaded
/// before, stored after) while `step(acc, v, j, bits)` runs for each key
/// `j` of a block that some row sees (`bits = act[j]`, not 0), `v` the
/// key's V vectors `c .. c + NC`. `FULL`: the vectors lie within `dv` (no
/// partial V loads).
///
/// # Safety
/// Every extent of `a` checked by the wrapper; vectors `c .. c + NC` of each
/// accumulator within its padded length, of each V row within `dv` when
/// `FULL`; the keys are rows of the chunk.
#[inline(always)]
pub(super) unsafe fn over_v<
    L: Lanes,
    const H: bool,
    const G: usize,
    const NC: usize,
    const FULL: bool,
>(
    a: &ChunkArgs<G>,
    c: usize,
    keys: &[usize; KB],
    nb: usize,
    act: &[u8; KB],
    ahead: &Ahead<'_>,
    mut step: impl FnMut(&mut [[L::V; NC]; G], &[L::V; NC], usize, u8),
) {
    let w = L::W;
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[L::zero(); NC]; G];
        for (g, row) in acc.iter_mut().enumerate() {
            for (i, x) in row.iter_mut().enumerate() {
                *x = L::load(a.acc[g].add((c + i) * w));
            }
        }
        for j in 0..nb {
            ahead.at(j);
            let bits = act[j];
            if bits == 0 {
                continue;
            }
            let vr = a.v.add(keys[j] * a.vs);
            let mut vv = [L::zero(); NC];
            for (i, x) in vv.iter_mut().enumerate() {
                let o = (c + i) * w;
                *x = if FULL {
                    load_row::<L, H>(vr, o, w)
                } else {
                    load_row::<L, H>(vr, o, w.min(a.dv - o))
                };
            }
            step(&mut acc, &vv, j, bits);
        }
        for (g, row) in acc.iter().enumerate() {
            for (i, &x) in row.iter().enumerate() {
                L::store(a.acc[g].add((c + i) * w), x);
            }
        }
    }
}

/// The accumulator updates of one key block for vectors `c .. c + NC` of
/// every row ([`over_v`]): on a new maximum `acc = r(acc·ms)` then
/// `acc = r(acc + v)`, else `acc = r(v·vs + acc)` (one FMA), `r` the
/// accumulator's rounding.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn apply<L: Lanes, const H: bool, const G: usize, const NC: usize, const FULL: bool>(
    a: &ChunkArgs<G>,
    c: usize,
    keys: &[usize; KB],
    nb: usize,
    act: &[u8; KB],
    grew: &[u8; KB],
    f: &[[f32; KB]; G],
) {
    let all = ((1u32 << G) - 1) as u8;
    // SAFETY: forwarded contract (the wrapper checked every extent of `a`).
    unsafe {
        over_v::<L, H, G, NC, FULL>(
            a,
            c,
            keys,
            nb,
            act,
            &Ahead::NONE,
            #[inline(always)]
            |acc, vv, j, bits| {
                if bits == all && grew[j] == 0 {
                    for (row, fg) in acc.iter_mut().zip(f) {
                        let fv = L::splat(fg[j]);
                        for (x, &v) in row.iter_mut().zip(vv) {
                            *x = store_round::<L, H>(L::fma(v, fv, *x));
                        }
                    }
                    return;
                }
                for (g, (row, fg)) in acc.iter_mut().zip(f).enumerate() {
                    if bits >> g & 1 == 0 {
                        continue;
                    }
                    let fv = L::splat(fg[j]);
                    if grew[j] >> g & 1 != 0 {
                        for (x, &v) in row.iter_mut().zip(vv) {
                            *x = store_round::<L, H>(L::mul(*x, fv));
                            *x = store_round::<L, H>(L::add(v, *x));
                        }
                    } else {
                        for (x, &v) in row.iter_mut().zip(vv) {
                            *x = store_round::<L, H>(L::fma(v, fv, *x));
                        }
                    }
                }
            },
        );
    }
}

/// Builds the one-chunk operands of `G` rows (lengths checked by the caller).
pub(super) fn chunk_args<const G: usize>(
    job: &ChunkJob<'_>,
    rows: &mut [RowState<'_>],
    k: *const u8,
    v: *const u8,
) -> ChunkArgs<G> {
    let null = std::ptr::null::<f32>();
    let no_vis = std::ptr::null::<u64>();
    ChunkArgs {
        d: job.k.ne[0],
        dv: job.v.ne[0],
        n: job.c1 - job.c0,
        k,
        ks: job.k.nb[1],
        v,
        vs: job.v.nb[1],
        scale: job.scale,
        softcap: job.softcap,
        q: std::array::from_fn(|g| rows[g].q.as_ptr()),
        mask: std::array::from_fn(|g| rows[g].mask.map_or(null, |m| m.vals.as_ptr())),
        vis: std::array::from_fn(|g| rows[g].mask.map_or(no_vis, |m| m.vis.as_ptr())),
        acc: std::array::from_fn(|g| rows[g].acc.as_mut_ptr()),
        m: std::array::from_fn(|g| rows[g].m),
        s: std::array::from_fn(|g| rows[g].s),
        sc: std::array::from_fn(|g| {
            rows[g]
                .sc
                .as_deref_mut()
                .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr())
        }),
    }
}

impl<const G: usize> ChunkArgs<G> {
    /// Hands the rows' running maximum and sum back to `rows` (the
    /// accumulators were updated in place): the first `G` rows, the ones
    /// [`chunk_args`] took.
    pub(super) fn write_back(&self, rows: &mut [RowState<'_>]) {
        for (r, (&m, &s)) in rows.iter_mut().zip(self.m.iter().zip(&self.s)) {
            r.m = m;
            r.s = s;
        }
    }
}

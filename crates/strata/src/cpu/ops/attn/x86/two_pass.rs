//! The two-pass path of FLASH_ATTN_EXT at the x86 levels (the
//! batch-invariant attention; module docs of `attn`): up to four (`GROUP`)
//! query rows sharing K and V. The first pass scores every key some row
//! sees and keeps each row's maximum; the second turns the scores into
//! weights `exp(s − M)` with the row's final maximum, so that no
//! accumulator is ever rescaled, and adds `p·v` into f32 accumulators, one
//! FMA per key in key order. A row's bits depend on its own query and the
//! keys it sees, not on the other rows of its group nor on where the blocks
//! of keys begin. Written once over [`Lanes`]; `per_level!` in `x86.rs`
//! instantiates [`two_pass`] per level.

use super::chunk::{
    dot, dot_parts, dot_parts_with, each_block, load_row, Ahead, ChunkArgs, Rows, KB,
};
use crate::isa::x86::{exp_bounded, Lanes};
use std::mem::MaybeUninit;

/// [`dot`] for the first `nb` keys of a block into `out[g][..nb]`: `W` keys
/// at a time, their lane sums taken together by [`Lanes::hsum_lanes`]
/// (bit for bit [`Lanes::hsum`] of each) when `d` is a multiple of `4·W`,
/// else key by key.
#[inline(always)]
unsafe fn dots<L: Lanes, const H: bool, const G: usize>(
    a: &ChunkArgs<G>,
    keys: &[usize; KB],
    nb: usize,
    out: &mut [[f32; KB]; G],
    ahead: &Ahead<'_>,
) {
    let w = L::W;
    // SAFETY: the wrapper checked every extent of `a`; the keys are rows of
    // the chunk; j0 + w <= KB (KB is a multiple of every W).
    unsafe {
        if !a.d.is_multiple_of(4 * w) {
            for (j, &key) in keys[..nb].iter().enumerate() {
                ahead.at(j);
                let d = dot::<L, H, G>(a, a.k.add(key * a.ks));
                for (o, x) in out.iter_mut().zip(d) {
                    o[j] = x;
                }
            }
            return;
        }
        // One step of 4·W (d = 64 at AVX-512): the queries stay in
        // registers for the whole block instead of being loaded again for
        // every key (the same FMAs in the same order: the same bits).
        let one_step = a.d == 4 * w;
        let mut qv = [[L::zero(); 4]; G];
        if one_step {
            for (qg, &q) in qv.iter_mut().zip(&a.q) {
                for (i, x) in qg.iter_mut().enumerate() {
                    *x = L::load(q.add(i * w));
                }
            }
        }
        let mut j0 = 0;
        while j0 < nb {
            // Written in full (jj < w) before it is read: not zeroed first
            // (a 3 KB memset per W keys at AVX-512 for three rows).
            let mut parts = [const { [const { MaybeUninit::<L::V>::uninit() }; 16] }; G];
            for jj in 0..w {
                ahead.at(j0 + jj);
                // past nb: the block's last key again (its sums are not read)
                let key = keys[(j0 + jj).min(nb - 1)];
                let kr = a.k.add(key * a.ks);
                let p = if one_step {
                    dot_parts_with::<L, H, G>(
                        1,
                        kr,
                        #[inline(always)]
                        |g, i| qv[g][i],
                    )
                } else {
                    dot_parts::<L, H, G>(a, kr)
                };
                for (pg, v) in parts.iter_mut().zip(p) {
                    pg[jj].write(v);
                }
            }
            for (o, pg) in out.iter_mut().zip(&parts) {
                // vectors 0 .. w of pg were written above
                L::store(o.as_mut_ptr().add(j0), L::hsum_lanes(pg.as_ptr().cast()));
            }
            j0 += w;
        }
    }
}

/// The two-pass algorithm (module docs) for `G` fresh rows (maximum −∞,
/// sum 0, accumulators zero) sharing K and V, both f16 when `H` (else
/// f32). Leaves each row's maximum `M`, sum `Σ exp(s − M)` (in key order)
/// and unnormalized accumulator; a row that sees no key keeps −∞, 0 and
/// zeros.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // rows index several arrays at once
pub(super) unsafe fn two_pass<L: Lanes, const H: bool, const G: usize>(a: &mut ChunkArgs<G>) {
    let w = L::W;
    let es = if H { 2 } else { 4 };
    let mut sums = [[0f32; KB]; G];
    // Rows reading one mask row see the same keys (a decode token's heads).
    let shared = a.vis.iter().all(|&v| v == a.vis[0]);
    // SAFETY: the wrapper checked every extent of `a`: K/V rows of the
    // chunk, queries and accumulators padded to W, masks of n keys, score
    // buffers of n rounded up to W.
    unsafe {
        // Pass 1: the scores `mask + scale·q·k` (soft-capped) of every key
        // some row sees, -inf where the row does not see it, and the maxima.
        let mut mx = [L::splat(f32::NEG_INFINITY); G];
        let mut mk = [[0f32; KB]; G];
        let mut t = 0;
        let v_rows = Rows {
            base: a.v,
            stride: a.vs,
            bytes: a.dv * es,
        };
        let k_rows = Rows {
            base: a.k,
            stride: a.ks,
            bytes: a.d * es,
        };
        each_block(
            a,
            k_rows,
            v_rows,
            #[inline(always)]
            |keys, nb, t0, ahead| {
                t = t0 + nb;
                dots::<L, H, G>(a, keys, nb, &mut sums, ahead);
                // Per row the mask value of each key, -inf where the row does
                // not see it (and past nb); rows of one mask row share it.
                for g in 0..G {
                    if g > 0 && a.mask[g] == a.mask[g - 1] && a.vis[g] == a.vis[g - 1] {
                        mk[g] = mk[g - 1];
                        continue;
                    }
                    let row = &mut mk[g];
                    for (m, &key) in row.iter_mut().zip(&keys[..nb]) {
                        *m = a.mask_at(g, key);
                    }
                    row[nb..].fill(f32::NEG_INFINITY);
                }
                let (scale, ninf) = (L::splat(a.scale), L::splat(f32::NEG_INFINITY));
                for g in 0..G {
                    let mut j0 = 0;
                    while j0 < nb {
                        let mut x = L::mul(L::load(sums[g].as_ptr().add(j0)), scale);
                        if a.softcap != 0.0 {
                            let mut v = [0f32; 16];
                            L::store(v.as_mut_ptr(), x);
                            for y in &mut v[..w] {
                                *y = a.softcap * (*y / a.softcap).tanh();
                            }
                            x = L::load(v.as_ptr());
                        }
                        let m = L::load(mk[g].as_ptr().add(j0));
                        // unseen keys (mask -inf) stay -inf whatever the score
                        let x = L::select_gt(m, ninf, L::add(m, x), ninf);
                        L::store(a.sc[g].add(t0 + j0), x);
                        mx[g] = L::max(mx[g], x);
                        j0 += w;
                    }
                }
            },
        );
        // The weights and their sums (in key order, the rows' chains side
        // by side), with each row's final maximum.
        let mut live = 0u8;
        for g in 0..G {
            let mut lanes = [0f32; 16];
            L::store(lanes.as_mut_ptr(), mx[g]);
            let m = lanes[..w].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            a.m[g] = m;
            if m == f32::NEG_INFINITY {
                continue;
            }
            live |= 1 << g;
            let (sc, mv) = (a.sc[g], L::splat(m));
            let mut c = 0;
            while c < t {
                let p = sc.add(c);
                L::store(p, exp_bounded::<L>(L::sub(L::load(p), mv)));
                c += w;
            }
        }
        if live == 0 {
            return;
        }
        // Pass 2: acc += p·v for every key each row sees, in key order, and
        // each row's sum of the weights, in the same order beside the
        // products (a chain of dependent adds, hidden behind the FMAs there
        // rather than run on its own: the same adds, so the same bits; a
        // key the row does not see has weight 0, and `x + 0 = x` for the
        // non-negative sums, so skipping it moves no bit).
        let mut sum = [0f32; G];
        let mut act = [0u8; KB];
        // Rows of one mask row, none without a key (a decode token's
        // heads): every row sees every key, and no per-key row bits are
        // needed.
        let every = shared && live == ((1u32 << G) - 1) as u8;
        each_block(
            a,
            v_rows,
            Rows::NONE,
            #[inline(always)]
            |keys, nb, t0, ahead| {
                if !every {
                    for j in 0..nb {
                        act[j] = if shared {
                            live
                        } else {
                            let bits = (0..G).filter(|&g| a.sees(g, keys[j]));
                            bits.fold(0u8, |b, g| b | 1 << g) & live
                        };
                    }
                }
                let blk = Block {
                    keys,
                    nb,
                    act: &act,
                    every,
                    t0,
                    ahead,
                };
                let nfull = a.dv / w;
                let mut c = 0;
                while L::W == 16 && c + 4 <= nfull {
                    add_pv_at::<L, H, G, 4, true>(a, c, &blk, &mut sum);
                    c += 4;
                }
                while c + 2 <= nfull {
                    add_pv_at::<L, H, G, 2, true>(a, c, &blk, &mut sum);
                    c += 2;
                }
                if c < nfull {
                    add_pv_at::<L, H, G, 1, true>(a, c, &blk, &mut sum);
                    c += 1;
                }
                if c < a.dv.div_ceil(w) {
                    add_pv_at::<L, H, G, 1, false>(a, c, &blk, &mut sum);
                }
            },
        );
        for g in 0..G {
            if live >> g & 1 != 0 {
                a.s[g] = sum[g];
            }
        }
    }
}

/// One block of pass 2: its keys, which rows see each (`act`, unless
/// `every` row sees every key), where its weights start in the score
/// buffers (`t0`), and the next block's V rows to ask for.
struct Block<'b> {
    keys: &'b [usize; KB],
    nb: usize,
    act: &'b [u8; KB],
    every: bool,
    t0: usize,
    ahead: &'b Ahead<'b>,
}

/// [`add_pv`] for vectors `c .. c + NC`, instantiated for the block: the
/// first vectors (`c` = 0) ask for the next block's V rows and sum the
/// weights; a block that every row sees skips the row bits.
#[inline(always)]
unsafe fn add_pv_at<L: Lanes, const H: bool, const G: usize, const NC: usize, const FULL: bool>(
    a: &ChunkArgs<G>,
    c: usize,
    b: &Block<'_>,
    sum: &mut [f32; G],
) {
    // SAFETY: forwarded contract.
    unsafe {
        match (c == 0, b.every) {
            (true, true) => add_pv::<L, H, G, NC, FULL, true, true>(a, c, b, sum),
            (true, false) => add_pv::<L, H, G, NC, FULL, true, false>(a, c, b, sum),
            (false, true) => add_pv::<L, H, G, NC, FULL, false, true>(a, c, b, sum),
            (false, false) => add_pv::<L, H, G, NC, FULL, false, false>(a, c, b, sum),
        }
    }
}

/// `acc += p·v` (one FMA) for vectors `c .. c + NC` of every row and the
/// keys of one block, key by key in key order, the accumulators in
/// registers and V's vectors loaded one at a time (so that at AVX2 three
/// rows' two vectors and their weights fit the sixteen registers); rows
/// whose bit in `act[j]` is clear skip key `j`, unless `ALL` (every row
/// sees every key: no bits tested). `FULL`: the vectors lie within `dv`
/// (no partial V loads). `FIRST` (the vectors from 0) asks for the next
/// block's V rows as it goes ([`Ahead`]) and adds each weight to its row's
/// `sum`, in key order.
#[inline(always)]
unsafe fn add_pv<
    L: Lanes,
    const H: bool,
    const G: usize,
    const NC: usize,
    const FULL: bool,
    const FIRST: bool,
    const ALL: bool,
>(
    a: &ChunkArgs<G>,
    c: usize,
    b: &Block<'_>,
    sum: &mut [f32; G],
) {
    let w = L::W;
    let all = ((1u32 << G) - 1) as u8;
    // SAFETY: forwarded contract (the wrapper checked every extent of `a`;
    // vectors c .. c + NC lie within each accumulator's padded length, and
    // within dv when FULL); t0 + nb weights in each score buffer; the keys
    // are rows of the chunk.
    unsafe {
        let mut acc = [[L::zero(); NC]; G];
        for (g, row) in acc.iter_mut().enumerate() {
            for (i, x) in row.iter_mut().enumerate() {
                *x = L::load(a.acc[g].add((c + i) * w));
            }
        }
        for (j, &key) in b.keys[..b.nb].iter().enumerate() {
            if FIRST {
                b.ahead.at(j);
            }
            let bits = if ALL { all } else { b.act[j] };
            if bits == 0 {
                continue;
            }
            let mut p = [L::zero(); G];
            for (g, pg) in p.iter_mut().enumerate() {
                if ALL || bits >> g & 1 != 0 {
                    let pw = *a.sc[g].add(b.t0 + j);
                    if FIRST {
                        sum[g] += pw;
                    }
                    *pg = L::splat(pw);
                }
            }
            let vr = a.v.add(key * a.vs);
            for i in 0..NC {
                let o = (c + i) * w;
                let v = load_row::<L, H>(vr, o, if FULL { w } else { w.min(a.dv - o) });
                for (g, (row, &pg)) in acc.iter_mut().zip(&p).enumerate() {
                    if ALL || bits >> g & 1 != 0 {
                        row[i] = L::fma(v, pg, row[i]);
                    }
                }
            }
        }
        for (g, row) in acc.iter().enumerate() {
            for (i, &x) in row.iter().enumerate() {
                L::store(a.acc[g].add((c + i) * w), x);
            }
        }
    }
}

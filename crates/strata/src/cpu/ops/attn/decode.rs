//! The split-KV path of FLASH_ATTN_EXT: one query row decoded against many
//! keys, the keys split into chunks and their partials merged.
//!
//! The keys are cut into one chunk per *share* ([`crate::cpu::WorkerCtx::shares`],
//! the thread count the results are defined for), each chunk's partial kept
//! in that share's part of the work memory; the threads take the shares
//! round-robin (one each when there are as many threads as shares). The
//! arithmetic of a chunk and the merge order do not depend on which thread
//! runs what, so the result depends on the share count only.

use super::*;

/// Pointer to share `j`'s per-thread work memory: the layout of
/// [`Ctx::scratch_f32`] (shared part, then one 64-byte aligned part per
/// share), which the split-KV path addresses directly because threads read
/// each other's partials after the barrier.
fn thread_area(ctx: &Ctx<'_>, j: usize) -> *mut f32 {
    assert!(j < ctx.w.shares.max(ctx.w.nth));
    let per = crate::backend::align_up(ctx.work.per_thread, 64);
    let off = crate::backend::align_up(ctx.work.shared, 64) + per * j;
    // SAFETY: the work buffer holds WorkSize::total(shares) bytes (the CPU
    // backend sizes it per share, at least one per thread): the shared part
    // and a per-thread part of `per` bytes per share; `off` is the start of part j.
    unsafe { ctx.wdata.add(off).cast::<f32>() }
}

/// The split-KV path (decoding one row against many keys).
pub(super) fn split_kv<K: Kernels>(kn: K, p: &Params<'_>, ctx: &Ctx<'_>) {
    let (nth, ith) = (ctx.w.nth, ctx.w.ith);
    let shares = ctx.w.shares.max(nth);
    let (n_head, dv) = (p.n_head, p.dv);
    let chunk = p.n_kv.div_ceil(shares);
    let stride = 2 + dv;
    let n_part = partial_floats(n_head, dv);
    let own_len = n_part + one_chunk_floats(p.d, dv, p.n_kv);
    debug_assert!(own_len * 4 <= ctx.work.per_thread);
    for share in ctx.w.my_shares() {
        let (c0, c1) = (
            (share * chunk).min(p.n_kv),
            ((share + 1) * chunk).min(p.n_kv),
        );
        // SAFETY: this share's part of the work buffer (thread_area), at
        // least own_len f32 (work_size); only this thread takes the share,
        // nobody else touches it before the barrier below, and this slice
        // is dropped before it.
        let own = unsafe { std::slice::from_raw_parts_mut(thread_area(ctx, share), own_len) };
        let (parts, scratch) = own.split_at_mut(n_part);
        let (dp, dvp, mp) = (pad(p.d), pad(dv), mask_floats(p.n_kv));
        let (mut qs, rest) = split_group(scratch, dp);
        let (mut accs, rest) = split_group(rest, dvp);
        let (mut masks, _) = split_group(rest, mp);
        for h in 0..n_head {
            parts[h * stride] = f32::NEG_INFINITY;
            parts[h * stride + 1] = 0.0;
            parts[h * stride + 2..(h + 1) * stride].fill(0.0);
        }
        if c0 < c1 {
            // Heads sharing a kv head, at most GROUP at a time.
            let mut h0 = 0;
            while h0 < n_head {
                let ik2 = h0 / p.rk2;
                let g = GROUP.min(p.rk2 - h0 % p.rk2).min(n_head - h0);
                let mks = group_masks(
                    kn,
                    p,
                    g,
                    |i| (0, h0 + i, 0),
                    (c0, c1),
                    &mut masks,
                    &mut None,
                );
                let at = |i| (0, h0 + i, 0);
                let mut rows = p.group_rows(kn, g, at, (&mut qs, &mut accs), mks, None);
                let rows = &mut rows[..g];
                let job = p.chunk_job(ik2, 0, c0, c1);
                kn.one_chunk(&job, rows);
                for (i, r) in rows.iter_mut().enumerate() {
                    let h = h0 + i;
                    let (mut m, mut s) = (r.m, r.s);
                    if c0 == 0 {
                        p.add_sink(h, &mut m, &mut s, &mut r.acc[..dv]);
                    }
                    let part = &mut parts[h * stride..(h + 1) * stride];
                    part[0] = m;
                    part[1] = s;
                    part[2..].copy_from_slice(&r.acc[..dv]);
                }
                h0 += g;
            }
        }
    }
    ctx.w.barrier();
    // Merge: heads round-robin over threads.
    let mut out = vec![0f32; dv];
    for h in (ith..n_head).step_by(nth) {
        let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
        out.fill(0.0);
        for j in 0..shares {
            if j * chunk >= p.n_kv {
                continue;
            }
            // SAFETY: share j's thread wrote its partials before the
            // barrier; every thread only reads them now, until the node's
            // closing barrier.
            let part =
                unsafe { std::slice::from_raw_parts(thread_area(ctx, j).add(h * stride), stride) };
            let (mc, sc) = (part[0], part[1]);
            if sc == 0.0 {
                continue;
            }
            let mn = m.max(mc);
            let (f_old, f_new) = ((m - mn).exp(), (mc - mn).exp());
            for (o, &x) in out.iter_mut().zip(&part[2..]) {
                *o = *o * f_old + x * f_new;
            }
            s = s * f_old + sc * f_new;
            m = mn;
        }
        store_normalized(p, h, 0, 0, s, &mut out);
    }
}

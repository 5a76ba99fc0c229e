//! The tiled path of FLASH_ATTN_EXT: blocks of query rows against blocks
//! of keys, through the GEMM kernels.

use super::*;

/// The tiled path: this thread's tiles, handed out by a shared counter
/// (largest query offsets first: under a causal mask they cost the most).
pub(super) fn tiled<K: Kernels>(kn: K, p: &Params<'_>, ctx: &Ctx<'_>) {
    let (n_q, ne3) = (p.q.ne[1], p.q.ne[3]);
    let n_qt = n_q.div_ceil(TILE_Q);
    let n_tiles = n_qt * p.n_head * ne3;
    // SAFETY: the shared work memory holds 64 bytes (work_size), 64-byte
    // aligned; during this node it is only accessed through this atomic.
    let next = unsafe { &*ctx.shared_ptr().cast::<AtomicUsize>() };
    if ctx.w.ith == 0 {
        next.store(0, Ordering::Relaxed);
    }
    ctx.w.barrier();
    let lay = TileLayout::new(p.d, p.dv);
    let scratch = ctx.scratch_f32(lay.total);
    loop {
        let ti = next.fetch_add(1, Ordering::Relaxed);
        if ti >= n_tiles {
            break;
        }
        let t = n_qt - 1 - ti / (p.n_head * ne3);
        let h = ti % p.n_head;
        let iq3 = (ti / p.n_head) % ne3;
        tile(kn, p, &lay, scratch, t * TILE_Q, h, iq3);
    }
}

/// What the mask holds for a query tile × key tile.
enum MaskTile {
    /// -inf everywhere: the key tile is skipped.
    Dead,
    /// Zeros everywhere (-inf allowed nowhere): nothing to add.
    Zero,
    /// Anything else: `slope · mask`, transposed, was written to `mt`.
    Values,
}

/// True when any of the `dt` values in `b` is not -inf, and when any is not ±0.
fn classify(b: &[u8], dt: DType) -> (bool, bool) {
    match dt {
        DType::F16 => b.chunks_exact(2).fold((false, false), |(l, z), x| {
            let v = u16::from_le_bytes([x[0], x[1]]);
            (l | (v != 0xfc00), z | (v & 0x7fff != 0))
        }),
        _ => b.chunks_exact(4).fold((false, false), |(l, z), x| {
            let v = u32::from_le_bytes([x[0], x[1], x[2], x[3]]);
            (l | (v != 0xff80_0000), z | (v & 0x7fff_ffff != 0))
        }),
    }
}

/// Classifies the mask of query rows `q.0 .. q.0 + q.1` (head `q.2`,
/// batch `q.3`) × keys `c.0 .. c.0 + c.1` from the stored bits (slope · -inf
/// is -inf and slope · 0 is 0 for the positive ALiBi slopes), converting it
/// into `mt` (keys × `np`, zeros past the rows) only when it holds values.
#[allow(clippy::too_many_arguments)]
fn mask_tile<K: Kernels>(
    kn: K,
    p: &Params<'_>,
    m: &TView,
    q: (usize, usize, usize, usize),
    c: (usize, usize),
    slope: f32,
    np: usize,
    mbuf: &mut [f32],
    mt: &mut [f32],
) -> MaskTile {
    let (iq0, rows, h, iq3) = q;
    let (ic, kvn) = c;
    let (i2, i3) = (h % m.ne[2], iq3 % m.ne[3]);
    let es = m.dtype.type_size();
    let (mut live, mut values) = (false, false);
    if m.rows_contiguous() {
        for i in 0..rows {
            // SAFETY: the mask is a read-only source; its rows are contiguous.
            let row = unsafe { m.row_bytes(iq0 + i, i2, i3) };
            let (l, v) = classify(&row[es * ic..es * (ic + kvn)], m.dtype);
            live |= l;
            values |= v;
        }
        if !live {
            return MaskTile::Dead;
        }
        if !values {
            return MaskTile::Zero;
        }
    }
    for i in 0..rows {
        let mr = &mut mbuf[i * TILE_KV..i * TILE_KV + kvn];
        p.load_mask(kn, m, iq0 + i, h, iq3, ic, slope, mr);
        live |= mr.iter().fold(false, |a, &x| a | (x != f32::NEG_INFINITY));
        values |= mr.iter().fold(false, |a, &x| a | (x != 0.0));
    }
    if !live {
        return MaskTile::Dead;
    }
    if !values {
        return MaskTile::Zero;
    }
    for (j, row) in mt[..kvn * np].chunks_exact_mut(np).enumerate() {
        for (i, x) in row.iter_mut().enumerate() {
            *x = if i < rows { mbuf[i * TILE_KV + j] } else { 0.0 };
        }
    }
    MaskTile::Values
}

/// One query tile: rows iq0.. (up to 64) of head h in batch iq3.
#[allow(clippy::too_many_arguments)]
fn tile<K: Kernels>(
    kn: K,
    p: &Params<'_>,
    lay: &TileLayout,
    scratch: &mut [f32],
    iq0: usize,
    h: usize,
    iq3: usize,
) {
    let (d, dv, n_kv) = (p.d, p.dv, p.n_kv);
    let w = kn.width();
    let rows = TILE_Q.min(p.q.ne[1] - iq0);
    let np = rows.next_multiple_of(w);
    let dvp = dv.next_multiple_of(w);
    let (ik2, ik3) = (h / p.rk2, iq3 / p.rk3);
    let slope = alibi_slope(p.max_bias, h, p.n_head);
    let scale = if p.softcap != 0.0 {
        p.scale / p.softcap
    } else {
        p.scale
    };

    let (head, qrow) = scratch.split_at_mut(lay.qrow);
    let qrow = &mut qrow[..d];
    let (head, stats) = head.split_at_mut(lay.stats);
    let (head, mt) = head.split_at_mut(lay.mt);
    let (head, mbuf) = head.split_at_mut(lay.mask);
    let (head, vkq) = head.split_at_mut(lay.vkq);
    let (head, kq) = head.split_at_mut(lay.kq);
    let (head, vf) = head.split_at_mut(lay.vf);
    let (qt, kf) = head.split_at_mut(lay.kf);
    let (mm, rest) = stats.split_at_mut(TILE_Q);
    let (ss, ms) = rest.split_at_mut(TILE_Q);
    let (mm, ss, ms) = (&mut mm[..np], &mut ss[..np], &mut ms[..np]);

    // Q transposed: qt[dd][i], zero columns past the tile's rows.
    let qt = &mut qt[..d * np];
    qt.fill(0.0);
    for i in 0..rows {
        p.q.load_row(iq0 + i, h, iq3, qrow);
        for (dd, &x) in qrow.iter().enumerate() {
            qt[dd * np + i] = x;
        }
    }
    mm.fill(f32::NEG_INFINITY);
    ss.fill(0.0);
    let vkq = &mut vkq[..rows * dvp];
    vkq.fill(0.0);

    for ic in (0..n_kv).step_by(TILE_KV) {
        let kvn = TILE_KV.min(n_kv - ic);
        let add_mask = match p.mask {
            None => false,
            Some(m) => match mask_tile(
                kn,
                p,
                m,
                (iq0, rows, h, iq3),
                (ic, kvn),
                slope,
                np,
                mbuf,
                mt,
            ) {
                MaskTile::Dead => continue,
                MaskTile::Zero => false,
                MaskTile::Values => true,
            },
        };
        for j in 0..kvn {
            // SAFETY: k is a read-only source with contiguous rows.
            let kr = unsafe { p.k.row_bytes(ic + j, ik2, ik3) };
            kn.to_f32(kr, p.k.dtype, &mut kf[j * d..(j + 1) * d]);
        }
        let kq = &mut kq[..kvn * np];
        kn.qk(&kf[..kvn * d], d, qt, np, kq);
        let mut sc = scale;
        if p.softcap != 0.0 {
            kq.iter_mut()
                .for_each(|x| *x = (*x * scale).tanh() * p.softcap);
            sc = 1.0;
        }
        let mt = add_mask.then_some(&mt[..kvn * np]);
        kn.softmax_cols(kq, np, sc, mt, mm, ss, ms);
        for j in 0..kvn {
            // SAFETY: as for k.
            let vr = unsafe { p.v.row_bytes(ic + j, ik2, ik3) };
            kn.to_f32(vr, p.v.dtype, &mut vf[j * dvp..(j + 1) * dvp]);
        }
        kn.pv(kq, np, rows, &vf[..kvn * dvp], dvp, ms, vkq);
    }

    for i in 0..rows {
        let acc = &mut vkq[i * dvp..(i + 1) * dvp];
        let (m, mut s) = (mm[i], ss[i]);
        if let Some(sv) = p.sink(h) {
            // As ggml's tiled path: rescale when the sink is the larger.
            if sv > m {
                let f = (m - sv).exp();
                acc.iter_mut().for_each(|a| *a *= f);
                s = s * f + 1.0;
            } else {
                s += (sv - m).exp();
            }
        }
        let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
        acc.iter_mut().for_each(|a| *a *= inv);
        p.dst.store_row(h, iq0 + i, iq3, acc);
    }
}

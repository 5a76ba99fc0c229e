//! The tiled path of FLASH_ATTN_EXT: blocks of query rows against blocks
//! of keys, through the GEMM kernels.
//!
//! Per node, before any tile, the threads share two preparations in the
//! node's shared work memory ([`SharedPlan`]), then meet at one barrier:
//!
//! * the **mask class table**: for every query tile × key tile × mask plane,
//!   whether the mask is -inf everywhere (the key tile is skipped), zero
//!   everywhere (nothing to add) or holds values. Every head reading that
//!   plane (all heads, for llama.cpp's one-plane masks) looks its tiles up
//!   instead of scanning the mask again.
//! * the **f32 copies of K and V**: every row of every kv head converted
//!   once, laid out as the tile kernels read them (K rows of `d`, V rows of
//!   `dvp` padded with zeros), instead of once per query tile and head.
//!
//! Both are bounded ([`CLASS_TABLE_MAX`], [`KV_COPY_MAX`]); above the bounds,
//! for masks without contiguous rows, when the shared memory reserved for the
//! node is short, or (for K/V) when no row would be converted twice, the
//! tiles classify and convert for themselves as before. The tiles compute the
//! same values either way (the class is the one the tile would find, the
//! conversion is exact), so the results are identical bit for bit.

use super::*;

/// Most bytes of the mask class table kept in shared work memory.
pub(super) const CLASS_TABLE_MAX: usize = 1 << 20;
/// Most bytes of the f32 copies of K and V kept in shared work memory.
pub(super) const KV_COPY_MAX: usize = 16 << 20;
/// Bytes at the start of the shared memory that hold the tile counter.
const COUNTER_BYTES: usize = 64;

/// Class codes stored in the table (one byte per entry).
const DEAD: u8 = 0;
/// See [`DEAD`].
const ZERO: u8 = 1;
/// See [`DEAD`].
const VALUES: u8 = 2;

/// Where the mask class table lies in the shared memory and what it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ClassTable {
    /// Byte offset in the shared memory.
    off: usize,
    /// Query tiles.
    n_qt: usize,
    /// Key tiles.
    n_kt: usize,
    /// Mask planes the heads read: `min(mask.ne[2], n_head)`.
    p2: usize,
    /// Mask planes the batches read: `min(mask.ne[3], ne3)`.
    p3: usize,
}

impl ClassTable {
    /// Entries (bytes).
    fn len(&self) -> usize {
        self.p2 * self.p3 * self.n_qt * self.n_kt
    }

    /// The entry of query tile `qt` × key tile `kt` in mask plane (i2, i3).
    fn index(&self, i2: usize, i3: usize, qt: usize, kt: usize) -> usize {
        ((i3 * self.p2 + i2) * self.n_qt + qt) * self.n_kt + kt
    }
}

/// Where the f32 copies of K and V lie in the shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KvCopy {
    /// Byte offset of K: per kv head (`ik2 + H_kv·ik3`), `n_kv` rows of `d`.
    k_off: usize,
    /// Byte offset of V: per kv head, `n_kv` rows of `dvp` (zeros past `dv`).
    v_off: usize,
    /// kv heads (`H_kv · ne3_kv`).
    heads: usize,
    /// f32 per V row: `dv` rounded up to the kernels' width.
    dvp: usize,
}

/// The tiled path's use of the node's shared work memory: the tile counter
/// (always), then the class table and the K/V copies where they are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SharedPlan {
    /// The mask class table, if taken.
    pub classes: Option<ClassTable>,
    /// The f32 copies of K and V, if taken.
    pub kv: Option<KvCopy>,
    /// Shared bytes needed in all.
    pub bytes: usize,
}

impl SharedPlan {
    /// The plan for q, k, v and mask with V rows padded to a multiple of
    /// `width` f32, in at most `limit` shared bytes (a part that does not
    /// fit is left out). `work_size` asks with the widest padding ([`PAD`])
    /// and no limit; the kernels ask with their width and the bytes
    /// reserved, so they take what was reserved for them.
    pub(super) fn new(
        q: &TView,
        k: &TView,
        v: &TView,
        mask: Option<&TView>,
        width: usize,
        limit: usize,
    ) -> SharedPlan {
        let (d, dv, n_q, n_kv) = (q.ne[0], v.ne[0], q.ne[1], k.ne[1]);
        let (n_head, ne3) = (q.ne[2], q.ne[3]);
        let n_qt = n_q.div_ceil(TILE_Q);
        let mut at = COUNTER_BYTES;
        let fits = |bytes: usize, at: &mut usize| -> Option<usize> {
            let end = at.checked_add(bytes)?.checked_next_multiple_of(64)?;
            (end <= limit).then(|| std::mem::replace(at, end))
        };
        let classes = mask.filter(|m| m.rows_contiguous()).and_then(|m| {
            let ct = ClassTable {
                off: 0,
                n_qt,
                n_kt: n_kv.div_ceil(TILE_KV),
                p2: m.ne[2].min(n_head),
                p3: m.ne[3].min(ne3),
            };
            let len = ct.len();
            if len > CLASS_TABLE_MAX {
                return None;
            }
            fits(len, &mut at).map(|off| ClassTable { off, ..ct })
        });
        // Each kv row is read by rk2 · rk3 heads in each query tile: copy it
        // only when the tiles would convert it more than once.
        let reuse = n_qt * (n_head / k.ne[2].max(1)) * (ne3 / k.ne[3].max(1));
        let heads = k.ne[2] * k.ne[3];
        let dvp = dv.next_multiple_of(width);
        let kv = (reuse >= 2)
            .then(|| {
                let kb = heads.checked_mul(n_kv)?.checked_mul(d)?.checked_mul(4)?;
                let vb = heads.checked_mul(n_kv)?.checked_mul(dvp)?.checked_mul(4)?;
                let total = kb.checked_add(vb)?;
                if total > KV_COPY_MAX {
                    return None;
                }
                let k_off = fits(kb, &mut at)?;
                let v_off = fits(vb, &mut at)?;
                Some(KvCopy {
                    k_off,
                    v_off,
                    heads,
                    dvp,
                })
            })
            .flatten();
        SharedPlan {
            classes,
            kv,
            bytes: at,
        }
    }
}

/// The shared work memory for a node with these operands (module docs).
pub(super) fn shared_bytes(q: &TView, k: &TView, v: &TView, mask: Option<&TView>) -> usize {
    SharedPlan::new(q, k, v, mask, PAD, usize::MAX).bytes
}

/// The filled shared tables, as the tiles read them.
struct Ready<'s> {
    /// The class table and its entries.
    classes: Option<(ClassTable, &'s [u8])>,
    /// The K/V layout, then K and V in f32.
    kv: Option<(KvCopy, &'s [f32], &'s [f32])>,
}

/// The tiled path: this thread's tiles, handed out by a shared counter
/// (largest query offsets first: under a causal mask they cost the most).
pub(super) fn tiled<K: Kernels>(kn: K, p: &Params<'_>, ctx: &Ctx<'_>) {
    let plan = SharedPlan::new(p.q, p.k, p.v, p.mask, kn.width(), ctx.work.shared);
    let (n_q, ne3) = (p.q.ne[1], p.q.ne[3]);
    let n_qt = n_q.div_ceil(TILE_Q);
    let n_tiles = n_qt * p.n_head * ne3;
    let base = ctx.shared_ptr();
    // SAFETY: the shared work memory holds at least 64 bytes (work_size),
    // 8-byte aligned; during this node they are only accessed through this
    // atomic (the tables lie after them).
    let next = unsafe { &*base.cast::<AtomicUsize>() };
    if ctx.w.ith == 0 {
        next.store(0, Ordering::Relaxed);
    }
    if let (Some(ct), Some(m)) = (plan.classes, p.mask) {
        let range = ctx.rows(ct.len());
        // SAFETY: the table lies inside the shared memory reserved for the
        // node (`plan.bytes <= ctx.work.shared`); each thread writes only its
        // own entries `range`, and nobody reads them before the barrier.
        let out =
            unsafe { std::slice::from_raw_parts_mut(base.add(ct.off + range.start), range.len()) };
        fill_classes(m, &ct, n_q, p.n_kv, range.start, out);
    }
    if let Some(kc) = plan.kv {
        convert_kv(kn, p, &kc, base, ctx);
    }
    ctx.w.barrier();
    // SAFETY: filled before the barrier, inside the reserved shared memory
    // (f32 parts at 64-byte offsets of the 8-byte aligned buffer); from here
    // to the end of the node nobody writes them.
    let ready = unsafe {
        Ready {
            classes: plan
                .classes
                .map(|ct| (ct, std::slice::from_raw_parts(base.add(ct.off), ct.len()))),
            kv: plan.kv.map(|kc| {
                let rows = kc.heads * p.n_kv;
                (
                    kc,
                    std::slice::from_raw_parts(base.add(kc.k_off).cast::<f32>(), rows * p.d),
                    std::slice::from_raw_parts(base.add(kc.v_off).cast::<f32>(), rows * kc.dvp),
                )
            }),
        }
    };
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
        tile(kn, p, &lay, &ready, scratch, t * TILE_Q, h, iq3);
    }
}

/// Writes the classes of table entries `first .. first + out.len()` of
/// mask `m` (rows contiguous) for `n_q` query rows × `n_kv` keys.
fn fill_classes(m: &TView, ct: &ClassTable, n_q: usize, n_kv: usize, first: usize, out: &mut [u8]) {
    for (e, o) in (first..).zip(out.iter_mut()) {
        let kt = e % ct.n_kt;
        let qt = (e / ct.n_kt) % ct.n_qt;
        let plane = e / (ct.n_kt * ct.n_qt);
        let (i2, i3) = (plane % ct.p2, plane / ct.p2);
        let (iq0, ic) = (qt * TILE_Q, kt * TILE_KV);
        let rows = TILE_Q.min(n_q - iq0);
        let kvn = TILE_KV.min(n_kv - ic);
        *o = match scan_tile(m, (iq0, rows), (i2, i3), (ic, kvn)) {
            (false, _) => DEAD,
            (true, false) => ZERO,
            (true, true) => VALUES,
        };
    }
}

/// Converts this thread's share of the K and V rows of every kv head into
/// the copies of `kc` in the shared memory at `base`.
fn convert_kv<K: Kernels>(kn: K, p: &Params<'_>, kc: &KvCopy, base: *mut u8, ctx: &Ctx<'_>) {
    let (d, n_kv, dvp) = (p.d, p.n_kv, kc.dvp);
    let (h_kv, rows) = (p.k.ne[2], kc.heads * n_kv);
    // K rows first, then V rows: one index space, so both split evenly.
    for r in ctx.rows(2 * rows) {
        let (is_v, r) = (r >= rows, r % rows);
        let (j, head) = (r % n_kv, r / n_kv);
        let (ik2, ik3) = (head % h_kv, head / h_kv);
        let (t, off, n) = if is_v {
            (p.v, kc.v_off, dvp)
        } else {
            (p.k, kc.k_off, d)
        };
        // SAFETY: row r of the copy lies inside the reserved shared memory
        // (SharedPlan sized it), f32-aligned (64-byte offset, 8-byte aligned
        // buffer); only this thread writes it, nobody reads it before the
        // barrier. The source is a read-only operand with contiguous rows.
        let (dst, src) = unsafe {
            (
                std::slice::from_raw_parts_mut(base.add(off).cast::<f32>().add(r * n), n),
                t.row_bytes(j, ik2, ik3),
            )
        };
        kn.to_f32(src, t.dtype, dst);
    }
}

/// Rows `ic .. ic + kvn` of kv head (ik2, ik3) of `t` (K or V) as f32
/// rows of `n` values: a slice of the node's shared copy (`shared`: the
/// copy and this head's first row in it) where there is one, else
/// converted into `buf`.
fn kv_rows<'a, K: Kernels>(
    kn: K,
    t: &TView,
    shared: Option<(&'a [f32], usize)>,
    (ic, kvn): (usize, usize),
    (ik2, ik3): (usize, usize),
    n: usize,
    buf: &'a mut [f32],
) -> &'a [f32] {
    if let Some((all, row0)) = shared {
        return &all[(row0 + ic) * n..(row0 + ic + kvn) * n];
    }
    for j in 0..kvn {
        // SAFETY: K and V are read-only sources with contiguous rows.
        let r = unsafe { t.row_bytes(ic + j, ik2, ik3) };
        kn.to_f32(r, t.dtype, &mut buf[j * n..(j + 1) * n]);
    }
    &buf[..kvn * n]
}

/// What the mask holds for a query tile × key tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MaskTile {
    /// -inf everywhere: the key tile is skipped.
    Dead,
    /// Zeros everywhere (-inf allowed nowhere): nothing to add.
    Zero,
    /// Anything else: `slope · mask`, transposed, was written to `mt`.
    Values,
}

/// Per-element `(any not -inf, any not ±0)` of the `dt` values in `b`: the
/// definition [`classify`] computes word by word.
#[cfg(test)]
fn classify_elems(b: &[u8], dt: DType) -> (bool, bool) {
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

/// True when any of the `dt` values in `b` is not -inf, and when any is not
/// ±0: OR-reductions over 64-bit words (`x ^ -inf` and `x & !sign` per
/// lane), the last partial word value by value.
fn classify(b: &[u8], dt: DType) -> (bool, bool) {
    let (ninf, abs, es) = match dt {
        DType::F16 => (0xfc00_fc00_fc00_fc00u64, 0x7fff_7fff_7fff_7fffu64, 2),
        _ => (0xff80_0000_ff80_0000u64, 0x7fff_ffff_7fff_ffffu64, 4),
    };
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    let (mut live, mut values) = (0u64, 0u64);
    for w in words {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        live |= x ^ ninf;
        values |= x & abs;
    }
    for x in tail.chunks_exact(es) {
        let mut w = [0u8; 8];
        w[..es].copy_from_slice(x);
        let x = u64::from_le_bytes(w);
        let lane = (1u64 << (8 * es)) - 1;
        live |= (x ^ ninf) & lane;
        values |= x & abs & lane;
    }
    (live != 0, values != 0)
}

/// Classifies the mask (rows contiguous) of query rows `q.0 .. q.0 + q.1`
/// in plane `pl` × keys `c.0 .. c.0 + c.1` from the stored bits: (any not
/// -inf, any not ±0).
fn scan_tile(m: &TView, q: (usize, usize), pl: (usize, usize), c: (usize, usize)) -> (bool, bool) {
    let es = m.dtype.type_size();
    let (mut live, mut values) = (false, false);
    for i in q.0..q.0 + q.1 {
        // SAFETY: the mask is a read-only source; its rows are contiguous.
        let row = unsafe { m.row_bytes(i, pl.0, pl.1) };
        let (l, v) = classify(&row[es * c.0..es * (c.0 + c.1)], m.dtype);
        live |= l;
        values |= v;
    }
    (live, values)
}

/// Classifies the mask of query rows `q.0 .. q.0 + q.1` (head `q.2`,
/// batch `q.3`) × keys `c.0 .. c.0 + c.1` from the stored bits (slope · -inf
/// is -inf and slope · 0 is 0 for the positive ALiBi slopes), converting it
/// into `mt` (keys × `np`, zeros past the rows) only when it holds values.
/// `known`: the class from the shared table (rows contiguous), else found
/// here.
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
    known: Option<MaskTile>,
) -> MaskTile {
    let (iq0, rows, h, iq3) = q;
    let (ic, kvn) = c;
    let (i2, i3) = (h % m.ne[2], iq3 % m.ne[3]);
    let (mut live, mut values) = (false, false);
    match known {
        Some(MaskTile::Values) => (live, values) = (true, true),
        Some(class) => return class,
        None if m.rows_contiguous() => {
            (live, values) = scan_tile(m, (iq0, rows), (i2, i3), c);
            if !live {
                return MaskTile::Dead;
            }
            if !values {
                return MaskTile::Zero;
            }
        }
        None => {}
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
    ready: &Ready<'_>,
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
    // The first row of this kv head in the shared K/V copies.
    let kv_row0 = ready.kv.map(|(kc, _, _)| {
        assert_eq!(kc.dvp, dvp, "V copy padded for another width");
        (ik2 + p.k.ne[2] * ik3) * n_kv
    });

    for ic in (0..n_kv).step_by(TILE_KV) {
        let kvn = TILE_KV.min(n_kv - ic);
        let add_mask = match p.mask {
            None => false,
            Some(m) => {
                let known = ready.classes.map(|(ct, tab)| {
                    let (i2, i3) = (h % m.ne[2], iq3 % m.ne[3]);
                    match tab[ct.index(i2, i3, iq0 / TILE_Q, ic / TILE_KV)] {
                        DEAD => MaskTile::Dead,
                        ZERO => MaskTile::Zero,
                        _ => MaskTile::Values,
                    }
                });
                match mask_tile(
                    kn,
                    p,
                    m,
                    (iq0, rows, h, iq3),
                    (ic, kvn),
                    slope,
                    np,
                    mbuf,
                    mt,
                    known,
                ) {
                    MaskTile::Dead => continue,
                    MaskTile::Zero => false,
                    MaskTile::Values => true,
                }
            }
        };
        let shared_k = ready.kv.zip(kv_row0).map(|((_, k, _), r0)| (k, r0));
        let kf = kv_rows(kn, p.k, shared_k, (ic, kvn), (ik2, ik3), d, kf);
        let kq = &mut kq[..kvn * np];
        kn.qk(kf, d, qt, np, kq);
        let mut sc = scale;
        if p.softcap != 0.0 {
            kq.iter_mut()
                .for_each(|x| *x = (*x * scale).tanh() * p.softcap);
            sc = 1.0;
        }
        let mt = add_mask.then_some(&mt[..kvn * np]);
        kn.softmax_cols(SoftmaxCols {
            kq,
            np,
            scale: sc,
            mt,
            m: mm,
            s: ss,
            ms,
        });
        let shared_v = ready.kv.zip(kv_row0).map(|((_, _, v), r0)| (v, r0));
        let vf = kv_rows(kn, p.v, shared_v, (ic, kvn), (ik2, ik3), dvp, vf);
        kn.pv(PvCols {
            p: kq,
            np,
            rows,
            vf,
            dvp,
            ms,
            vkq,
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-wise scan agrees with the per-element definition on every
    /// length (tails included) and on -inf, ±0, NaN and other values.
    #[test]
    fn word_scan_matches_element_scan() {
        let f16s: [u16; 6] = [0xfc00, 0x0000, 0x8000, 0x7e00, 0x3c00, 0xfbff];
        let f32s: [u32; 6] = [0xff80_0000, 0, 0x8000_0000, 0x7fc0_0000, 0x3f80_0000, 1];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut seen = [[false; 2]; 2];
        for len in 0..40 {
            for _ in 0..64 {
                // Mostly one value, a few others: all four outcomes occur.
                let base = (next() % 3) as usize;
                let pick = |r: u64| {
                    if r.is_multiple_of(8) {
                        (r >> 8) as usize % 6
                    } else {
                        base
                    }
                };
                let mut b16 = Vec::new();
                let mut b32 = Vec::new();
                for _ in 0..len {
                    let r = next();
                    b16.extend_from_slice(&f16s[pick(r)].to_le_bytes());
                    b32.extend_from_slice(&f32s[pick(r)].to_le_bytes());
                }
                for (b, dt) in [(&b16, DType::F16), (&b32, DType::F32)] {
                    let want = classify_elems(b, dt);
                    assert_eq!(classify(b, dt), want, "{dt} {b:?}");
                    seen[want.0 as usize][want.1 as usize] = true;
                }
            }
        }
        // Dead (all -inf: its bits are not ±0), zero and values all seen.
        assert!(seen[0][1] && seen[1][0] && seen[1][1], "{seen:?}");
    }
}

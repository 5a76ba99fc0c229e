//! MUL_MAT: `dst[m, n] = Σ_k a[k, m] · b[k, n]`, ggml semantics.
//!
//! `a` [K, M, ne02, ne03] is a float or block-quantized weight with
//! contiguous rows; `b` [K, N, ne12, ne13] is F32/F16/BF16 with any strides;
//! `a` broadcasts over `b` in dims 2 and 3 (`i02 = i12 / (ne12 / ne02)`).
//!
//! As ggml does, every row of `b` is first converted once into
//! [`vec_dot_type`]`(a)` in the shared work buffer (threads split the rows,
//! then meet at a barrier); the products are then dot products of a row of
//! `a` with a converted row of `b` through one function pointer looked up per
//! op, at the backend's SIMD level ([`crate::quant::simd`]: the conversion
//! and the dot products dispatch once per op, never per element). When `b` already has the dot type with contiguous rows, it is used in
//! place. Output elements are computed in tiles of [`TILE_M`] rows of `a` ×
//! [`TILE_N`] columns of `b` (the `a` rows stay in cache across the columns);
//! threads take contiguous ranges of tiles. Where the SIMD level has a
//! four-column kernel ([`vec_dot4_fn_for`]), groups of four columns of a tile
//! go through it (each `a` row decoded once for four columns; bit-identical
//! to four one-column calls). Every element is computed by the same
//! arithmetic whichever thread computes it, so results do not depend on the
//! thread count.
//!
//! A weight stored packed (`CPU_PACKED` buffers) goes through
//! [`super::matmul_packed`] instead.

use super::{matmul_float, Ctx, NodePlan, WorkSize};
use crate::cpu::TView;
use crate::quant::simd::{quantize_row_fn_for, vec_dot4_fn_for, vec_dot_fn_for};
use crate::quant::{vec_dot_fn, vec_dot_type};
use crate::tensor::{DType, Tensor};

/// Rows of `a` per tile.
const TILE_M: usize = 16;
/// Columns of `b` per tile.
const TILE_N: usize = 8;

pub(super) fn supports(t: &Tensor) -> bool {
    if let Some(ok) = super::matmul_packed::supports(t) {
        return ok;
    }
    let (Some(a), Some(b)) = (t.src(0), t.src(1)) else {
        return false;
    };
    t.dtype() == DType::F32 && b.dtype().is_float() && weight_supported(a)
}

/// True when the dot products handle `a` as a weight (MUL_MAT and
/// MUL_MAT_ID): a float or block type other than Q8_1, rows contiguous.
pub(super) fn weight_supported(a: &Tensor) -> bool {
    let at = a.dtype();
    (at.is_float() || (at.is_quantized() && at != DType::Q8_1))
        && vec_dot_fn(at).is_some()
        && a.is_contiguous_rows()
}

/// True when `b` must be converted to the dot type of `a_dtype` first.
fn needs_conversion(a_dtype: DType, b: &TView) -> bool {
    b.dtype != vec_dot_type(a_dtype) || !b.rows_contiguous()
}

/// The rows of an activation `b` in the dot type of a weight type:
/// converted once into shared work memory (each thread converts its share
/// of the rows; a barrier must follow before [`DotRows::row`] is read), or
/// read in place when `b` already has the dot type with contiguous rows.
pub(super) struct DotRows<'a> {
    b: &'a TView,
    /// The converted rows (`None`: in place).
    base: Option<*mut u8>,
    row_bytes: usize,
}

impl<'a> DotRows<'a> {
    /// Shared work bytes [`DotRows::prepare`] writes for `b` and a weight of `a_dtype`.
    pub fn shared_size(a_dtype: DType, b: &TView) -> usize {
        if needs_conversion(a_dtype, b) {
            vec_dot_type(a_dtype)
                .row_size(b.ne[0])
                .saturating_mul(b.nrows())
        } else {
            0
        }
    }

    /// Converts this thread's rows of `b` (when needed) into `base`, which
    /// holds [`DotRows::shared_size`] bytes; `tmp` holds `b.ne[0]` f32.
    pub fn prepare(
        a_dtype: DType,
        b: &'a TView,
        ctx: &Ctx<'_>,
        base: *mut u8,
        tmp: &mut [f32],
    ) -> DotRows<'a> {
        let k = b.ne[0];
        let vdt = vec_dot_type(a_dtype);
        let row_bytes = vdt.row_size(k);
        if !needs_conversion(a_dtype, b) {
            return DotRows {
                b,
                base: None,
                row_bytes,
            };
        }
        let quantize =
            quantize_row_fn_for(ctx.isa, vdt).expect("dot types are float or block types");
        for r in ctx.rows(b.nrows()) {
            let (i1, i2, i3) = b.row_coords(r);
            b.load_row(i1, i2, i3, tmp);
            // SAFETY: the shared work buffer holds b.nrows() rows of row_bytes
            // (shared_size); row r is written by this thread only, before the
            // barrier the caller runs.
            let out = unsafe { std::slice::from_raw_parts_mut(base.add(r * row_bytes), row_bytes) };
            quantize(&tmp[..k], out);
        }
        DotRows {
            b,
            base: Some(base),
            row_bytes,
        }
    }

    /// True when the rows were converted (the caller must meet the other
    /// threads at a barrier before reading them).
    pub fn converted(&self) -> bool {
        self.base.is_some()
    }

    /// Row `r` of `b` (in `b.row_coords` order) in the dot type.
    pub fn row(&self, r: usize) -> &'a [u8] {
        match self.base {
            // SAFETY: row r was written before the barrier; read-only now.
            Some(base) => unsafe {
                std::slice::from_raw_parts(base.add(r * self.row_bytes), self.row_bytes)
            },
            None => {
                let (i1, i2, i3) = self.b.row_coords(r);
                // SAFETY: b is a source (read-only during the op) with contiguous rows.
                unsafe { self.b.row_bytes(i1, i2, i3) }
            }
        }
    }
}

/// Writes `out` to elements `m0 .. m0 + out.len()` of row (i1, i2, i3) of `dst`.
pub(super) fn store_outputs(
    dst: &TView,
    m0: usize,
    (i1, i2, i3): (usize, usize, usize),
    out: &[f32],
) {
    let Some(last) = out.len().checked_sub(1) else {
        return;
    };
    let p = dst.elem_ptr(m0, i1, i2, i3);
    if dst.nb[0] == 4 {
        // The outputs are consecutive f32 of one dst row.
        dst.elem_ptr(m0 + last, i1, i2, i3);
        // SAFETY: elements m0 ..= m0 + last of this dst row are in bounds
        // (both ends checked) and owned by the calling thread.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr().cast::<u8>(), p, out.len() * 4) };
    } else {
        for (i, &v) in out.iter().enumerate() {
            dst.set_f32(m0 + i, i1, i2, i3, v);
        }
    }
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    if node.src(0).packed {
        return super::matmul_packed::work_size(node);
    }
    if matmul_float::eligible(node) {
        return matmul_float::work_size(node);
    }
    let (a, b) = (node.src(0), node.src(1));
    let k = b.ne[0];
    if !needs_conversion(a.dtype, b) {
        return WorkSize::default();
    }
    WorkSize {
        shared: DotRows::shared_size(a.dtype, b),
        per_thread: k * 4,
    }
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    if node.src(0).packed {
        return super::matmul_packed::forward(node, ctx);
    }
    if matmul_float::handles(node, ctx) {
        return matmul_float::forward(node, ctx);
    }
    let (a, b, dst) = (node.src(0), node.src(1), &node.dst);
    let k = a.ne[0];
    let dot = vec_dot_fn_for(ctx.isa, a.dtype).expect("supports() checked the weight type");
    let a_row_bytes = a.dtype.row_size(k);
    let n_cols = b.nrows();
    let tmp: &mut [f32] = if needs_conversion(a.dtype, b) {
        ctx.scratch_f32(k)
    } else {
        &mut []
    };
    let b_rows = DotRows::prepare(a.dtype, b, ctx, ctx.shared_ptr(), tmp);
    if b_rows.converted() {
        ctx.w.barrier();
    }
    let b_row = |r: usize| b_rows.row(r);

    let m = a.ne[1];
    let r2 = b.ne[2] / a.ne[2];
    let r3 = b.ne[3] / a.ne[3];
    let tiles_m = m.div_ceil(TILE_M);
    let tiles_n = n_cols.div_ceil(TILE_N);
    let mut a_rows: [&[u8]; TILE_M] = [&[]; TILE_M];
    let mut cols: [&[u8]; TILE_N] = [&[]; TILE_N];
    let mut out = [0f32; TILE_M];
    let mut out4 = [[0f32; 4]; TILE_M];
    let dot4 = vec_dot4_fn_for(ctx.isa, a.dtype);
    // Writes outputs m0..m1 of dst column (i11, i12, i13).
    let store = |m0: usize, m1: usize, i11: usize, i12: usize, i13: usize, out: &[f32]| {
        store_outputs(dst, m0, (i11, i12, i13), &out[..m1 - m0]);
    };
    for tile in ctx.rows(tiles_m * tiles_n) {
        // Consecutive tiles share the same rows of a (n fastest).
        let (tm, tn) = (tile / tiles_n, tile % tiles_n);
        let (m0, m1) = (tm * TILE_M, ((tm + 1) * TILE_M).min(m));
        let (n0, n1) = (tn * TILE_N, ((tn + 1) * TILE_N).min(n_cols));
        let mut plane = None;
        for (j, c) in (n0..n1).enumerate() {
            cols[j] = b_row(c);
        }
        let mut c = n0;
        while c < n1 {
            let (i11, i12, i13) = b.row_coords(c);
            let (i02, i03) = (i12 / r2, i13 / r3);
            if plane != Some((i02, i03)) {
                plane = Some((i02, i03));
                for (i, r) in (m0..m1).enumerate() {
                    // SAFETY: a is a read-only source with contiguous rows (supports()).
                    a_rows[i] = unsafe { a.row_bytes(r, i02, i03) };
                    debug_assert_eq!(a_rows[i].len(), a_row_bytes);
                }
            }
            // Four columns at once when the level has a four-column kernel and
            // they share the plane of a (bit-identical to one at a time).
            let four = dot4.filter(|_| {
                c + 4 <= n1 && {
                    let (_, j12, j13) = b.row_coords(c + 3);
                    (j12, j13) == (i12, i13)
                }
            });
            if let Some(dot4) = four {
                let ys = [
                    cols[c - n0],
                    cols[c - n0 + 1],
                    cols[c - n0 + 2],
                    cols[c - n0 + 3],
                ];
                for (o, x) in out4.iter_mut().zip(&a_rows[..m1 - m0]) {
                    dot4(k, x, ys, o);
                }
                for j in 0..4 {
                    for (o, o4) in out.iter_mut().zip(&out4[..m1 - m0]) {
                        *o = o4[j];
                    }
                    let (j11, j12, j13) = b.row_coords(c + j);
                    store(m0, m1, j11, j12, j13, &out);
                }
                c += 4;
                continue;
            }
            let y = cols[c - n0];
            for (o, x) in out.iter_mut().zip(&a_rows[..m1 - m0]) {
                *o = dot(k, x, y);
            }
            store(m0, m1, i11, i12, i13, &out);
            c += 1;
        }
    }
}

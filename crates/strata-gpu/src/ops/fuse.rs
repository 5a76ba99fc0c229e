//! Fusion: a run of nodes the backend computes in one dispatch instead of
//! one each (issue #45), in the order of ggml-vulkan's list. The graph is
//! not changed: when the backend plans a graph it looks for these patterns
//! at each node and, where one fits, emits one dispatch for the run.
//!
//! - RMS_NORM → MUL (the norm's weight): one row kernel.
//! - ADD → RMS_NORM → MUL (the residual add, then the next norm): the same
//!   row kernel, which also stores the sum (it is the next residual).
//! - MUL_MAT → ADD (a bias), on the matrix-vector kernel.
//! - ROPE → RESHAPE → SET_ROWS (the K cache write): the rotated rows go
//!   straight into the cache rows; the V cache write after it (SET_ROWS of
//!   the V rows with the same ids, into the same buffer) joins the dispatch.
//! - GLU → MUL_MAT (→ ADD) (the FFN's SwiGLU, its down projection and the
//!   residual): the matrix-vector kernel computes the GLU of the gate and
//!   up operands as it reads its activations; the GLU is never stored. The
//!   planner mostly gives the product the dead gate's bytes, which the
//!   fused kernel still reads (in SmolLM2's decode graph 29 layers of 30).
//! - MUL_MAT → MUL_MAT (→ MUL_MAT) of the same activations (the Q, K, V
//!   projections; the gate and up products), on the subgroup
//!   matrix-vector kernel: one dispatch, every product stored. (Their GLU
//!   cannot join them: the planner gives its result the bytes of the dead
//!   activations every workgroup still reads.)
//!
//! A node whose result a fused dispatch does not store (the norm, the
//! product before its bias, the rotated K) must have exactly one consumer
//! in the graph and must not be an OUTPUT; the nodes of a run must follow
//! one another (only views in between), so nothing computed between them
//! can overwrite what the run reads. A stored result may not meet what the
//! run still reads elsewhere in memory ([`apart`]): the planner reuses
//! dead sources' bytes as if the nodes ran one after another. SwiGLU is one
//! GLU node over the gate and up products in strata's graphs.

use strata::graph::{Graph, IdMap};
use strata::ops::Op;
use strata::{DType, Result, Tensor, TensorId};

use super::norm::row_shader;
use super::rows::wgsl;
use super::{aligned, attn, elementwise, grid, is_noop, matmul, norm, rows, Dispatch, Kernel};
use super::{Params, WG};
use crate::context::GpuContext;

/// How many nodes of a graph read each tensor (a node reading a tensor
/// through two of its sources counts twice), after the scheduler's
/// substitutions.
pub(crate) fn use_counts(graph: &Graph) -> IdMap<TensorId, u32> {
    let mut uses = IdMap::default();
    for node in graph.nodes() {
        for s in graph.srcs(node) {
            *uses.entry(s.id()).or_insert(0) += 1;
        }
    }
    uses
}

/// Nodes computed by one dispatch.
pub(crate) struct Fused {
    /// The dispatch (one).
    pub(crate) dispatches: Vec<Dispatch>,
    /// Indices into the graph's nodes of the nodes it computes (views
    /// between them excluded: they compute nothing).
    pub(crate) nodes: Vec<usize>,
}

/// The fused dispatch for the run of nodes starting at node `i` of
/// `graph`, or `None` when no pattern fits there.
pub(crate) fn plan(
    ctx: &GpuContext,
    graph: &Graph,
    i: usize,
    uses: &IdMap<TensorId, u32>,
) -> Result<Option<Fused>> {
    let g = Site { ctx, graph, uses };
    let f = match graph.nodes()[i].op() {
        Op::Add => g.add_norm_mul(i)?,
        Op::RmsNorm { .. } => g.norm_mul(i)?,
        Op::MulMat => match g.mul_mat_add(i)? {
            Some(f) => Some(f),
            None => g.products(i)?,
        },
        Op::Rope(_) => g.rope_set_rows(i)?,
        Op::Glu { .. } => g.glu_mul_mat(i)?,
        _ => None,
    };
    Ok(f)
}

/// A graph being planned: the patterns below are matched against its
/// nodes.
struct Site<'a> {
    ctx: &'a GpuContext,
    graph: &'a Graph,
    /// [`use_counts`] of `graph`.
    uses: &'a IdMap<TensorId, u32>,
}

/// The next node after `i` that computes something (views skipped).
fn next_compute(nodes: &[Tensor], i: usize) -> Option<usize> {
    (i + 1..nodes.len()).find(|&j| !is_noop(nodes[j].op()))
}

/// A binary op's second source divides the destination's shape.
fn broadcasts(b: &Tensor, d: &Tensor) -> bool {
    let (nb, nd) = (b.ne(), d.ne());
    (0..4).all(|k| nb[k] > 0 && nd[k] % nb[k] == 0)
}

/// Whether a fused kernel may write `dst` while reading `src`. Unfused,
/// the memory planner may give a source's bytes, once dead, to a later
/// node's result at any offset; fused, the two run at once, and a row one
/// workgroup writes could be a row another has yet to read. Safe: another
/// buffer, bytes that do not meet, or (when `same_ok`, for kernels that
/// read each element before the same invocation writes it) the very same
/// elements.
fn apart(dst: &Tensor, src: &Tensor, same_ok: bool) -> bool {
    let (Some(d), Some(s)) = (dst.storage(), src.storage()) else {
        return false;
    };
    if d.buffer.base() != s.buffer.base() {
        return true;
    }
    let (d0, s0) = (d.offset, s.offset);
    let (d1, s1) = (d0 + dst.nbytes(), s0 + src.nbytes());
    let same = d0 == s0 && dst.ne() == src.ne() && dst.nb() == src.nb();
    d1 <= s0 || s1 <= d0 || (same_ok && same && dst.dtype() == src.dtype())
}

/// The fused norm kernel into `mul`, one workgroup per row: `sources` are
/// x and the weight, or (the ADD before the norm) its two operands, the
/// weight and the sum to store, in slots 0, 1, 2, 3.
fn norm_mul_dispatch(
    ctx: &GpuContext,
    mul: &Tensor,
    eps: f32,
    sources: &[&Tensor],
) -> Result<Dispatch> {
    let has_add = sources.len() == 4;
    let kernel = Kernel {
        key: "norm_mul".into(),
        body: row_shader!("../shaders/norm_mul.wgsl"),
        src_types: std::array::from_fn(|k| (k < sources.len()).then_some(DType::F32)),
        dst_type: DType::F32,
        defs: vec![("HAS_ADD", has_add.to_string())],
    };
    let mut d = norm::row_dispatch(ctx, kernel, mul, Params::of(mul).float(0, eps))?;
    let mut d = d.pop().ok_or_else(|| super::unsupported(ctx, mul))?;
    // the MUL's own sources (the norm, the weight) in slots 0 and 1 give
    // way to the fused kernel's
    for (k, t) in sources.iter().enumerate() {
        d.bind(k, t);
    }
    Ok(d)
}

impl<'a> Site<'a> {
    /// Whether `t`'s result may stay unstored: exactly one consumer, not an
    /// OUTPUT.
    fn single_use(&self, t: &Tensor) -> bool {
        !t.is_output() && self.uses.get(&t.id()).copied() == Some(1)
    }

    /// Whether source `k` of `node` (as the graph computes it) is `t`.
    fn reads(&self, node: &Tensor, k: usize, t: &Tensor) -> bool {
        self.graph.src(node, k).is_some_and(|s| s.ptr_eq(t))
    }

    /// The MUL at node `j` scales RMS_NORM `rms` by a weight: `rms` is its
    /// first source, the weight (f32) broadcasts over it, all f32.
    fn norm_weight(&self, j: usize, rms: &Tensor) -> Option<&'a Tensor> {
        let mul = &self.graph.nodes()[j];
        if mul.op() != &Op::Mul || !self.reads(mul, 0, rms) || !super::supported(self.ctx, mul) {
            return None;
        }
        let w = self.broadcast_f32(mul, rms)?;
        (aligned(w) && aligned(mul)).then_some(w)
    }

    /// Source 1 of `node` when it is an f32 operand other than `first`
    /// that broadcasts over `node`, an f32 result of `first`'s shape.
    fn broadcast_f32(&self, node: &'a Tensor, first: &Tensor) -> Option<&'a Tensor> {
        let w = self.graph.src(node, 1)?;
        (!w.ptr_eq(first)
            && w.dtype() == DType::F32
            && node.dtype() == DType::F32
            && node.ne() == first.ne()
            && broadcasts(w, node))
        .then_some(w)
    }

    /// RMS_NORM at `i`, its result used once, followed by the MUL by a weight
    /// the fused kernel reads: the norm's epsilon, the MUL's index and the
    /// weight.
    fn norm_then_mul(&self, i: usize) -> Option<(f32, usize, &'a Tensor)> {
        let rms = &self.graph.nodes()[i];
        let &Op::RmsNorm { eps } = rms.op() else {
            return None;
        };
        if !self.single_use(rms) || !norm::supports(rms) {
            return None;
        }
        let j = next_compute(self.graph.nodes(), i)?;
        let w = self.norm_weight(j, rms)?;
        Some((eps, j, w))
    }

    /// RMS_NORM at `i` then the MUL by its weight.
    fn norm_mul(&self, i: usize) -> Result<Option<Fused>> {
        let Some((eps, j, w)) = self.norm_then_mul(i) else {
            return Ok(None);
        };
        let (rms, mul) = (&self.graph.nodes()[i], &self.graph.nodes()[j]);
        let Some(x) = self.graph.src(rms, 0) else {
            return Ok(None);
        };
        if !apart(mul, x, true) || !apart(mul, w, false) {
            return Ok(None);
        }
        Ok(Some(Fused {
            dispatches: vec![norm_mul_dispatch(self.ctx, mul, eps, &[x, w])?],
            nodes: vec![i, j],
        }))
    }

    /// ADD at `i` (stored: it is the residual), then RMS_NORM of the sum, then
    /// the MUL by the norm's weight. The sum is stored through source slot 3,
    /// so it must be in the destination's buffer (bound read-write).
    fn add_norm_mul(&self, i: usize) -> Result<Option<Fused>> {
        let nodes = self.graph.nodes();
        let add = &nodes[i];
        let (Some(a), Some(b)) = (self.graph.src(add, 0), self.graph.src(add, 1)) else {
            return Ok(None);
        };
        let f32_like = |t: &Tensor| t.dtype() == DType::F32 && t.ne() == add.ne() && aligned(t);
        if !f32_like(a) || !f32_like(b) || !f32_like(add) {
            return Ok(None);
        }
        let Some(j) = next_compute(nodes, i) else {
            return Ok(None);
        };
        if !self.reads(&nodes[j], 0, add) {
            return Ok(None);
        }
        let Some((eps, k, w)) = self.norm_then_mul(j) else {
            return Ok(None);
        };
        let mul = &nodes[k];
        // the sum is written through slot 3: it must share the destination's
        // buffer (a slot in another buffer is bound read-only)
        let (Some(sa), Some(sm)) = (add.storage(), mul.storage()) else {
            return Ok(None);
        };
        if sa.buffer.base() != sm.buffer.base() {
            return Ok(None);
        }
        // the norm's result may not meet the sum's sources (the sum itself it
        // may replace: each element is read back before it is overwritten)
        let ok = [(mul, a), (mul, b), (add, a), (add, b)]
            .iter()
            .all(|(d, s)| apart(d, s, true))
            && apart(mul, add, true)
            && apart(mul, w, false)
            && apart(add, w, false);
        if !ok {
            return Ok(None);
        }
        Ok(Some(Fused {
            dispatches: vec![norm_mul_dispatch(self.ctx, mul, eps, &[a, w, b, add])?],
            nodes: vec![i, j, k],
        }))
    }

    /// The ADD of a bias (f32, broadcast over the product) right after the
    /// MUL_MAT at `i`, when the product is used only there: the ADD's index,
    /// the bias and the ADD.
    fn bias_add(&self, i: usize) -> Option<(usize, &'a Tensor, &'a Tensor)> {
        let nodes = self.graph.nodes();
        let mm = &nodes[i];
        if !self.single_use(mm) {
            return None;
        }
        let j = next_compute(nodes, i)?;
        let add = &nodes[j];
        if add.op() != &Op::Add || !self.reads(add, 0, mm) || !elementwise::supports(add) {
            return None;
        }
        let bias = self.broadcast_f32(add, mm)?;
        Some((j, bias, add))
    }

    /// MUL_MAT at `i` on the matrix-vector kernel, then the ADD of a bias
    /// (f32, broadcast over the product).
    fn mul_mat_add(&self, i: usize) -> Result<Option<Fused>> {
        let mm = &self.graph.nodes()[i];
        if !matmul::matvec_plan(mm) || !super::supported(self.ctx, mm) {
            return Ok(None);
        }
        let Some((j, bias, add)) = self.bias_add(i) else {
            return Ok(None);
        };
        // every workgroup reads the whole vector: the sum may not meet it
        let srcs = [self.graph.src(mm, 0), self.graph.src(mm, 1)];
        if !srcs.iter().flatten().all(|s| apart(add, s, false)) || !apart(add, bias, false) {
            return Ok(None);
        }
        let mut d = matmul::plan_matvec(self.ctx, mm, Some(add))?;
        d.bind(3, bias);
        d.bind(4, add);
        Ok(Some(Fused {
            dispatches: vec![d],
            nodes: vec![i, j],
        }))
    }

    /// GLU at `i` (f32), its result used only as the activations of the
    /// MUL_MAT after it on the matrix-vector kernel (the FFN's down
    /// projection), and that product's bias ADD if one follows: one
    /// dispatch whose kernel computes the GLU of the gate and up operands as
    /// it reads them.
    fn glu_mul_mat(&self, i: usize) -> Result<Option<Fused>> {
        let nodes = self.graph.nodes();
        let glu = &nodes[i];
        let Op::Glu { .. } = glu.op() else {
            return Ok(None);
        };
        let Some(a) = self.graph.src(glu, 0) else {
            return Ok(None);
        };
        let b = self.graph.src(glu, 1);
        let f32_rows = |t: &Tensor| t.dtype() == DType::F32 && t.nb()[0] == 4 && aligned(t);
        // the operands as the kernel reads them: the GLU's shape with the
        // operands' strides (two of the GLU's shape and strides, or one
        // twice as wide)
        let operands_ok = match b {
            Some(b) => a.ne() == glu.ne() && b.ne() == glu.ne() && a.nb() == b.nb() && f32_rows(b),
            None => {
                let (n, na) = (glu.ne(), a.ne());
                na[0] == 2 * n[0] && na[1..] == n[1..]
            }
        };
        if !operands_ok || !f32_rows(a) || glu.dtype() != DType::F32 || !self.single_use(glu) {
            return Ok(None);
        }
        let Some(j) = next_compute(nodes, i) else {
            return Ok(None);
        };
        let mm = &nodes[j];
        if mm.op() != &Op::MulMat
            || !self.reads(mm, 1, glu)
            || self.reads(mm, 0, glu)
            || !matmul::matvec_plan(mm)
            || !super::supported(self.ctx, mm)
            || mm.dtype() != DType::F32
        {
            return Ok(None);
        }
        let Some(w) = self.graph.src(mm, 0) else {
            return Ok(None);
        };
        let add = self.bias_add(j);
        let dst = add.map_or(mm, |(_, _, add)| add);
        // every workgroup reads the whole of the operands: the result may
        // not meet them (nor the weights, nor the bias)
        let mut reads = vec![a, w];
        reads.extend(b);
        reads.extend(add.map(|(_, bias, _)| bias));
        if !reads.iter().all(|s| apart(dst, s, false)) {
            return Ok(None);
        }
        let mut d = matmul::plan_matvec_glu(self.ctx, mm, add.map(|(_, _, add)| add), glu)?;
        let mut run = vec![i, j];
        if let Some((k, bias, add)) = add {
            d.bind(3, bias);
            d.bind(4, add);
            run.push(k);
        }
        Ok(Some(Fused {
            dispatches: vec![d],
            nodes: run,
        }))
    }

    /// MUL_MAT at `i` and the next one or two nodes, MUL_MATs of the same
    /// activation columns (one to four, nothing broadcast) into contiguous
    /// f32 results in one buffer; on adapters with subgroups.
    fn products(&self, i: usize) -> Result<Option<Fused>> {
        if !self.ctx.has_subgroups() {
            return Ok(None);
        }
        let nodes = self.graph.nodes();
        let first = &nodes[i];
        let Some(x) = self.graph.src(first, 1) else {
            return Ok(None);
        };
        let base = |t: &Tensor| t.storage().map(|s| s.buffer.base());
        let rows = |t: &Tensor| t.ne()[0];
        let fits = |mm: &Tensor| {
            mm.op() == &Op::MulMat
                && matmul::matvec_plan(mm)
                && super::supported(self.ctx, mm)
                && mm.dtype() == DType::F32
                && mm.is_contiguous()
                && mm.ne()[2] == 1
                && mm.ne()[3] == 1
                && mm.ne()[1] == first.ne()[1]
                && base(mm).is_some()
                && base(mm) == base(first)
                && self.graph.src(mm, 1).is_some_and(|y| y.ptr_eq(x))
                && self
                    .graph
                    .src(mm, 0)
                    .is_some_and(|w| w.ne()[2] == 1 && w.ne()[3] == 1 && apart(mm, w, false))
                && apart(mm, x, false)
        };
        if !fits(first) {
            return Ok(None);
        }
        let mut run = vec![i];
        while run.len() < 3 {
            let Some(j) = next_compute(nodes, run[run.len() - 1]) else {
                break;
            };
            if !fits(&nodes[j]) {
                break;
            }
            run.push(j);
        }
        if run.len() < 2 {
            return Ok(None);
        }
        let products: Vec<&Tensor> = run.iter().map(|&j| &nodes[j]).collect();
        let max = self.ctx.limits.max_compute_workgroups_per_dimension as usize;
        let blocks: usize = products
            .iter()
            .map(|p| rows(p).div_ceil(matmul::rows_per_group(self.ctx)))
            .sum();
        if blocks > max {
            return Ok(None);
        }
        // the backend swaps in the scheduler's substitutes of every node's
        // sources (`backend.rs` `substitute`)
        let d = matmul::plan_matvec_products(self.ctx, &products)?;
        Ok(Some(Fused {
            dispatches: vec![d],
            nodes: run,
        }))
    }

    /// ROPE at `i` (f32, contiguous) into SET_ROWS through a RESHAPE to rows of
    /// `ne0·ne1` (the K cache write): one invocation per rotated pair, head and
    /// plane walks the rows in order, storing into the rows the ids select.
    fn rope_set_rows(&self, i: usize) -> Result<Option<Fused>> {
        let nodes = self.graph.nodes();
        let rope = &nodes[i];
        let Op::Rope(rp) = rope.op() else {
            return Ok(None);
        };
        let Some(x) = self.graph.src(rope, 0) else {
            return Ok(None);
        };
        if !self.single_use(rope)
            || rope.dtype() != DType::F32
            || x.dtype() != DType::F32
            || !rope.is_contiguous()
            || !attn::supports(rope)
        {
            return Ok(None);
        }
        let Some(j) = next_compute(nodes, i) else {
            return Ok(None);
        };
        let sr = &nodes[j];
        if sr.op() != &Op::SetRows || !rows::supports(self.ctx, sr) || !super::is_float(sr) {
            return Ok(None);
        }
        // SET_ROWS reads a reshape of the rotated rows, a node between the two
        let Some(r) = self.graph.src(sr, 0) else {
            return Ok(None);
        };
        let between = (i + 1..j).any(|k| nodes[k].ptr_eq(r));
        let n = rope.ne();
        if !between
            || r.op() != &Op::Reshape
            || !self.reads(r, 0, rope)
            || !self.single_use(r)
            || r.ne() != [n[0] * n[1], n[2], n[3], 1]
        {
            return Ok(None);
        }
        let Some(ids) = self.graph.src(sr, 1) else {
            return Ok(None);
        };
        let v = self.v_rows_after(j, rope, sr, ids);
        let mut ds = attn::plan(self.ctx, rope)?;
        let Some(mut d) = ds.pop() else {
            return Ok(None);
        };
        let half = rp.n_dims / 2;
        let items = (n[0] - half) * n[1] * n[3];
        let mut src_types = [None; 4];
        for (k, s) in rope.src_slots().iter().take(3).enumerate() {
            src_types[k] = s.as_ref().map(|s| s.dtype());
        }
        src_types[3] = Some(ids.dtype());
        if v.is_some() {
            src_types[2] = Some(DType::F32);
        }
        let kernel = Kernel {
            key: "rope_set_rows".into(),
            body: wgsl!("rope.wgsl", "rope_set_rows.wgsl", "item_main.wgsl"),
            src_types,
            dst_type: sr.dtype(),
            defs: vec![
                ("IDX64", (ids.dtype() == DType::I64).to_string()),
                ("HAS_V", v.is_some().to_string()),
            ],
        };
        d.pipeline = kernel.pipeline(self.ctx)?;
        d.bind(3, ids);
        d.bind(4, sr);
        let mut nodes = vec![i, j];
        let mut all = items;
        if let Some((k, vsr, vrows)) = v {
            d.bind(2, vrows);
            let at = vsr.storage().map_or(0, |s| s.offset);
            d.params = d
                .params
                .int(3, items as u32)
                .int(6, at as u32)
                .int(7, vsr.nb()[1] as u32);
            all += vrows.ne()[0];
            nodes.push(k);
        }
        d.params = d.params.items(all as u32);
        d.groups = grid(
            (all as u32).div_ceil(WG),
            self.ctx.limits.max_compute_workgroups_per_dimension,
        );
        Ok(Some(Fused {
            dispatches: vec![d],
            nodes,
        }))
    }

    /// The V cache write right after the K cache write SET_ROWS `sr` at `j`
    /// (of ROPE `rope`'s rows, ids `ids`) that the fused ROPE → SET_ROWS
    /// kernel can do too: SET_ROWS of f32 rows (one per token of the K
    /// rows) into a cache of the K cache's type and cells, in the same
    /// buffer (the kernel's destination), with the same ids, the ROPE
    /// without frequency factors (the rows take their slot). Its index, the
    /// SET_ROWS and the rows.
    fn v_rows_after(
        &self,
        j: usize,
        rope: &Tensor,
        sr: &Tensor,
        ids: &Tensor,
    ) -> Option<(usize, &'a Tensor, &'a Tensor)> {
        let nodes = self.graph.nodes();
        let k = next_compute(nodes, j)?;
        let vsr = &nodes[k];
        if vsr.op() != &Op::SetRows
            || rope.src(2).is_some()
            || rope.ne()[3] != 1
            || !self.reads(vsr, 1, ids)
            || !rows::supports(self.ctx, vsr)
            || vsr.dtype() != sr.dtype()
            || vsr.ne()[1] != sr.ne()[1]
            || vsr.nb()[0] != sr.nb()[0]
            || vsr.ne()[2..] != [1, 1]
        {
            return None;
        }
        let vrows = self.graph.src(vsr, 0)?;
        let base = |t: &Tensor| t.storage().map(|s| s.buffer.base());
        let kr = self.graph.src(sr, 0)?;
        let fits = vrows.dtype() == DType::F32
            && vrows.is_contiguous()
            && aligned(vrows)
            && vrows.ne()[0] == vsr.ne()[0]
            && vrows.ne()[1..] == kr.ne()[1..]
            && base(vsr).is_some()
            && base(vsr) == base(sr);
        // the two caches and everything the kernel reads are apart
        let reads = [
            self.graph.src(rope, 0),
            self.graph.src(rope, 1),
            Some(ids),
            Some(vrows),
        ];
        let ok = fits
            && apart(vsr, sr, false)
            && reads
                .iter()
                .flatten()
                .all(|s| apart(vsr, s, false) && apart(sr, s, false));
        ok.then_some((k, vsr, vrows))
    }
}

#[cfg(test)]
mod tests {
    use strata::backend::{alloc_tensors, Backend};
    use strata::cpu::CpuBackend;
    use strata::{ops, DType, Tensor};

    use super::apart;

    /// Two rows of 300 f32 at byte `offset` of `base`.
    fn rows_at(base: &Tensor, offset: usize) -> Tensor {
        ops::view_2d(base, 300, 2, 1200, offset).unwrap()
    }

    #[test]
    fn a_result_may_not_meet_what_it_reads_unless_element_for_element() {
        let buft = CpuBackend::new(1).default_buffer_type();
        let base = Tensor::new(DType::F32, &[2000]).unwrap();
        let other = Tensor::new(DType::F32, &[600]).unwrap();
        let _bufs = alloc_tensors(&[base.clone()], &buft).unwrap();
        let _other = alloc_tensors(&[other.clone()], &buft).unwrap();
        let dst = rows_at(&base, 0);
        // the same elements: safe only for kernels that read before writing
        assert!(apart(&dst, &rows_at(&base, 0), true));
        assert!(!apart(&dst, &rows_at(&base, 0), false));
        // shifted by a row, or by one element: another workgroup's row
        assert!(!apart(&dst, &rows_at(&base, 1200), true));
        assert!(!apart(&dst, &rows_at(&base, 4), true));
        // the same start with other strides is not the same elements
        let strided = ops::view_2d(&base, 300, 2, 2400, 0).unwrap();
        assert!(!apart(&dst, &strided, true));
        // bytes that do not meet, in the same buffer or another
        assert!(apart(&dst, &rows_at(&base, 2400), false));
        assert!(apart(
            &dst,
            &ops::view_2d(&other, 300, 2, 1200, 0).unwrap(),
            false
        ));
        // unallocated: nothing is known, so no
        let loose = Tensor::new(DType::F32, &[300, 2]).unwrap();
        assert!(!apart(&dst, &loose, true));
    }
}

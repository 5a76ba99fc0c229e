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
//!   straight into the cache rows.
//!
//! A node whose result a fused dispatch does not store (the norm, the
//! product before its bias, the rotated K) must have exactly one consumer
//! in the graph and must not be an OUTPUT; the nodes of a run must follow
//! one another (only views in between), so nothing computed between them
//! can overwrite what the run reads. SwiGLU needs no fusion here: strata's
//! graphs express it as one GLU node over the gate and up products.

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
    let nodes = graph.nodes();
    let node = &nodes[i];
    let f = match node.op() {
        // ADD+RMS_NORM+MUL (`add_norm_mul`) is off: with it, a partly
        // offloaded SmolLM2 prompt's logits drifted from llama.cpp's (KL
        // 2.2e-2 against the 1e-2 bar, golden_llamacpp_model's GPU test);
        // it fires only for prompt batches. Owed: find why, then turn it on.
        Op::RmsNorm { .. } => norm_mul(ctx, graph, i, uses)?,
        Op::MulMat => mul_mat_add(ctx, graph, i, uses)?,
        Op::Rope(_) => rope_set_rows(ctx, graph, i, uses)?,
        _ => None,
    };
    Ok(f)
}

/// The next node after `i` that computes something (views skipped).
fn next_compute(nodes: &[Tensor], i: usize) -> Option<usize> {
    (i + 1..nodes.len()).find(|&j| !is_noop(nodes[j].op()))
}

/// Whether `t`'s result may stay unstored: exactly one consumer, not an
/// OUTPUT.
fn single_use(t: &Tensor, uses: &IdMap<TensorId, u32>) -> bool {
    !t.is_output() && uses.get(&t.id()).copied() == Some(1)
}

/// Whether source `k` of `node` (as the graph computes it) is `t`.
fn reads(graph: &Graph, node: &Tensor, k: usize, t: &Tensor) -> bool {
    graph.src(node, k).is_some_and(|s| s.ptr_eq(t))
}

/// A binary op's second source divides the destination's shape.
fn broadcasts(b: &Tensor, d: &Tensor) -> bool {
    let (nb, nd) = (b.ne(), d.ne());
    (0..4).all(|k| nb[k] > 0 && nd[k] % nb[k] == 0)
}

/// The MUL at node `j` scales RMS_NORM `rms` by a weight: `rms` is its
/// first source, the weight (f32) broadcasts over it, all f32.
fn norm_weight<'a>(
    ctx: &GpuContext,
    graph: &'a Graph,
    j: usize,
    rms: &Tensor,
) -> Option<&'a Tensor> {
    let mul = &graph.nodes()[j];
    if mul.op() != &Op::Mul || !reads(graph, mul, 0, rms) || !super::supported(ctx, mul) {
        return None;
    }
    let w = graph.src(mul, 1)?;
    (!w.ptr_eq(rms)
        && w.dtype() == DType::F32
        && mul.dtype() == DType::F32
        && mul.ne() == rms.ne()
        && aligned(w)
        && aligned(mul)
        && broadcasts(w, mul))
    .then_some(w)
}

/// RMS_NORM at `i` then the MUL by its weight.
fn norm_mul(
    ctx: &GpuContext,
    graph: &Graph,
    i: usize,
    uses: &IdMap<TensorId, u32>,
) -> Result<Option<Fused>> {
    let nodes = graph.nodes();
    let rms = &nodes[i];
    let &Op::RmsNorm { eps } = rms.op() else {
        return Ok(None);
    };
    if !single_use(rms, uses) || !norm::supports(rms) {
        return Ok(None);
    }
    let Some(j) = next_compute(nodes, i) else {
        return Ok(None);
    };
    let Some(w) = norm_weight(ctx, graph, j, rms) else {
        return Ok(None);
    };
    let (x, mul) = (rms.src(0), &nodes[j]);
    let Some(x) = x else { return Ok(None) };
    let mut p = Params::of(mul).float(0, eps);
    p.set_tensor(0, x);
    p.set_tensor(1, w);
    let mut slots: [Option<Tensor>; 5] = Default::default();
    slots[0] = Some(x.clone());
    slots[1] = Some(w.clone());
    slots[4] = Some(mul.clone());
    let kernel = Kernel {
        key: "norm_mul".into(),
        body: row_shader!("../shaders/norm_mul.wgsl"),
        src_types: [Some(DType::F32), Some(DType::F32), None, None],
        dst_type: DType::F32,
        defs: vec![("HAS_ADD", "false".into())],
    };
    Ok(Some(Fused {
        dispatches: vec![rows_dispatch(ctx, kernel, mul, p, slots)?],
        nodes: vec![i, j],
    }))
}

/// ADD at `i` (stored: it is the residual), then RMS_NORM of the sum, then
/// the MUL by the norm's weight. The sum is stored through source slot 3,
/// so it must be in the destination's buffer (bound read-write).
#[allow(dead_code)] // off until its drift is found (see `plan`)
fn add_norm_mul(
    ctx: &GpuContext,
    graph: &Graph,
    i: usize,
    uses: &IdMap<TensorId, u32>,
) -> Result<Option<Fused>> {
    let nodes = graph.nodes();
    let add = &nodes[i];
    let (Some(a), Some(b)) = (graph.src(add, 0), graph.src(add, 1)) else {
        return Ok(None);
    };
    let f32_like = |t: &Tensor| t.dtype() == DType::F32 && t.ne() == add.ne() && aligned(t);
    if !f32_like(a) || !f32_like(b) || !f32_like(add) {
        return Ok(None);
    }
    let Some(j) = next_compute(nodes, i) else {
        return Ok(None);
    };
    let rms = &nodes[j];
    let &Op::RmsNorm { eps } = rms.op() else {
        return Ok(None);
    };
    if !reads(graph, rms, 0, add) || !single_use(rms, uses) || !norm::supports(rms) {
        return Ok(None);
    }
    let Some(k) = next_compute(nodes, j) else {
        return Ok(None);
    };
    let Some(w) = norm_weight(ctx, graph, k, rms) else {
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
    let mut p = Params::of(mul).float(0, eps);
    p.set_tensor(0, a);
    p.set_tensor(1, w);
    p.set_tensor(2, b);
    p.set_tensor(3, add);
    let slots = [
        Some(a.clone()),
        Some(w.clone()),
        Some(b.clone()),
        Some(add.clone()),
        Some(mul.clone()),
    ];
    let kernel = Kernel {
        key: "norm_mul".into(),
        body: row_shader!("../shaders/norm_mul.wgsl"),
        src_types: [Some(DType::F32); 4],
        dst_type: DType::F32,
        defs: vec![("HAS_ADD", "true".into())],
    };
    Ok(Some(Fused {
        dispatches: vec![rows_dispatch(ctx, kernel, mul, p, slots)?],
        nodes: vec![i, j, k],
    }))
}

/// One workgroup per row of `node`.
fn rows_dispatch(
    ctx: &GpuContext,
    kernel: Kernel,
    node: &Tensor,
    params: Params,
    slots: [Option<Tensor>; 5],
) -> Result<Dispatch> {
    let mut d = norm::row_dispatch(ctx, kernel, node, params)?;
    let mut d = d.pop().ok_or_else(|| super::unsupported(ctx, node))?;
    d.slots = slots;
    Ok(d)
}

/// MUL_MAT at `i` on the matrix-vector kernel, then the ADD of a bias
/// (f32, broadcast over the product).
fn mul_mat_add(
    ctx: &GpuContext,
    graph: &Graph,
    i: usize,
    uses: &IdMap<TensorId, u32>,
) -> Result<Option<Fused>> {
    let nodes = graph.nodes();
    let mm = &nodes[i];
    if !single_use(mm, uses) || !matmul::matvec_plan(mm) || !super::supported(ctx, mm) {
        return Ok(None);
    }
    let Some(j) = next_compute(nodes, i) else {
        return Ok(None);
    };
    let add = &nodes[j];
    if add.op() != &Op::Add || !reads(graph, add, 0, mm) || !elementwise::supports(add) {
        return Ok(None);
    }
    let Some(bias) = graph.src(add, 1) else {
        return Ok(None);
    };
    if bias.ptr_eq(mm)
        || bias.dtype() != DType::F32
        || add.dtype() != DType::F32
        || add.ne() != mm.ne()
        || !broadcasts(bias, add)
    {
        return Ok(None);
    }
    let mut d = matmul::plan_matvec(ctx, mm, Some(add))?;
    d.params.set_tensor(3, bias);
    d.params.set_tensor(4, add);
    d.slots[3] = Some(bias.clone());
    d.slots[4] = Some(add.clone());
    Ok(Some(Fused {
        dispatches: vec![d],
        nodes: vec![i, j],
    }))
}

/// ROPE at `i` (f32, contiguous) into SET_ROWS through a RESHAPE to rows of
/// `ne0·ne1` (the K cache write): one invocation per rotated pair, head and
/// plane walks the rows in order, storing into the rows the ids select.
fn rope_set_rows(
    ctx: &GpuContext,
    graph: &Graph,
    i: usize,
    uses: &IdMap<TensorId, u32>,
) -> Result<Option<Fused>> {
    let nodes = graph.nodes();
    let rope = &nodes[i];
    let Op::Rope(rp) = rope.op() else {
        return Ok(None);
    };
    let Some(x) = rope.src(0) else {
        return Ok(None);
    };
    if !single_use(rope, uses)
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
    if sr.op() != &Op::SetRows || !rows::supports(ctx, sr) || !super::is_float(sr) {
        return Ok(None);
    }
    // SET_ROWS reads a reshape of the rotated rows, a node between the two
    let Some(r) = graph.src(sr, 0) else {
        return Ok(None);
    };
    let between = (i + 1..j).any(|k| nodes[k].ptr_eq(r));
    let n = rope.ne();
    if !between
        || r.op() != &Op::Reshape
        || !reads(graph, r, 0, rope)
        || !single_use(r, uses)
        || r.ne() != [n[0] * n[1], n[2], n[3], 1]
    {
        return Ok(None);
    }
    let Some(ids) = graph.src(sr, 1) else {
        return Ok(None);
    };
    let mut ds = attn::plan(ctx, rope)?;
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
    let kernel = Kernel {
        key: "rope_set_rows".into(),
        body: wgsl!("rope.wgsl", "rope_set_rows.wgsl", "item_main.wgsl"),
        src_types,
        dst_type: sr.dtype(),
        defs: vec![("IDX64", (ids.dtype() == DType::I64).to_string())],
    };
    d.pipeline = kernel.pipeline(ctx)?;
    d.params.set_tensor(3, ids);
    d.params.set_tensor(4, sr);
    d.params = d.params.items(items as u32);
    d.slots[3] = Some(ids.clone());
    d.slots[4] = Some(sr.clone());
    d.groups = grid(
        (items as u32).div_ceil(WG),
        ctx.limits.max_compute_workgroups_per_dimension,
    );
    Ok(Some(Fused {
        dispatches: vec![d],
        nodes: vec![i, j],
    }))
}
